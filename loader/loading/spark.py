"""The loader's embedded Spark session: defaults for a small machine, FAIR pools per worker.

Each dispatcher worker submits its jobs in its own FAIR pool (``worker-<i>``, equal
weight, minShare 1), so one table's large load cannot starve the other workers' small
ones of executor slots. Everything here can be overridden through ``conf``.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import quoteattr

from loader.loading.java import JavaError, check_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_EXTENSION_CLASS",
    "JavaError",
    "build_spark_session",
    "default_conf",
    "delta_jvm_available",
    "java_version_ok",
    "use_pool",
]

DELTA_EXTENSION_CLASS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG_CLASS = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
POOL_PROPERTY = "spark.scheduler.pool"


def java_version_ok() -> int:
    """Java major version, or JavaError saying what to install (Spark 4 needs Java 17+)."""
    return check_java()


def _local_cores(master: str) -> int | None:
    """Cores of a ``local``/``local[N]``/``local[*]`` master; None for a cluster master."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if match is None:
        return None
    return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))


def default_conf(master: str) -> dict[str, str]:
    """Settings for an embedded loader; the driver's memory is left to the operator."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        "spark.scheduler.mode": "FAIR",
        "spark.sql.session.timeZone": "UTC",
        # Delta's `timestamp` is microseconds; INT96 (Spark's legacy default) is not Delta.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # Proleptic Gregorian dates, as pyarrow and delta-rs read them.
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Landing Parquet from pandas holds TIMESTAMP(NANOS), which Spark reads only as
        # longs; loader/loading/sinks/frame.py converts those columns to microseconds.
        "spark.sql.legacy.parquet.nanosAsLong": "true",
        # No _SUCCESS marker files in the staging directories.
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    }
    cores = _local_cores(master)
    if cores is not None:
        # A load is a narrow job; shuffles (if any) should not fan out into 200 tiny tasks.
        conf["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        conf["spark.default.parallelism"] = str(max(2, cores))
        # An embedded driver needs no resolvable hostname.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def _wants_delta_jars(conf: dict[str, str]) -> bool:
    jars = conf.get("spark.jars.packages", "") + "," + conf.get("spark.jars", "")
    return "io.delta" in jars or "delta-spark" in jars


def write_allocation_file(pools: int, directory: Path) -> Path:
    """FAIR allocation file declaring ``worker-0..pools-1`` with equal weight and minShare 1."""
    entries = "".join(
        f"  <pool name={quoteattr(f'worker-{i}')}>\n"
        "    <schedulingMode>FIFO</schedulingMode>\n"
        "    <weight>1</weight>\n"
        "    <minShare>1</minShare>\n"
        "  </pool>\n"
        for i in range(pools)
    )
    path = directory / "fairscheduler.xml"
    path.write_text(f'<?xml version="1.0"?>\n<allocations>\n{entries}</allocations>\n', encoding="utf-8")
    return path


def build_spark_session(
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    app_name: str = "warehouse-loader",
    fair_pools: int = 0,
) -> SparkSession:
    """Start (or return the running) Spark session with the loader's defaults under ``conf``.

    Raises JavaError before touching the JVM when Java is missing or older than 17.
    """
    java_version_ok()
    from pyspark.sql import SparkSession

    if _local_cores(master) is not None:
        # Spark otherwise warns about (and may bind to) a non-loopback address of this host.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Multi-table jobs run Python on the executors (loader/loading/sinks/group_job.py): this
    # interpreter has the loader package and pyarrow (PySpark's default is whatever `python3`
    # is on the PATH). A cluster's executors need the same packages (the Docker image has them).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    user = dict(conf or {})
    settings = default_conf(master)
    if _wants_delta_jars(user):
        settings["spark.sql.extensions"] = DELTA_EXTENSION_CLASS
        settings["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG_CLASS
    if fair_pools > 0 and "spark.scheduler.allocation.file" not in user:
        directory = Path(tempfile.mkdtemp(prefix="loader-spark-"))
        atexit.register(shutil.rmtree, directory, True)
        settings["spark.scheduler.allocation.file"] = str(write_allocation_file(fair_pools, directory))
    settings.update(user)

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def renice_driver_jvm(spark: SparkSession, increment: int) -> int:
    """Lower the CPU priority of the local driver JVM's threads (Linux); returns threads changed.

    Embedded, the JVM runs the loads on the same cores that acknowledge updates; a load
    can wait a moment, an ack should not. Threads the JVM starts later inherit the nice
    value of the thread that starts them, so doing this once covers them too.
    """
    proc = getattr(spark.sparkContext._gateway, "proc", None)  # type: ignore[union-attr]
    if increment <= 0 or proc is None or not hasattr(os, "setpriority"):
        return 0
    changed = 0
    try:
        tids = os.listdir(f"/proc/{proc.pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            current = os.getpriority(os.PRIO_PROCESS, int(tid))
            os.setpriority(os.PRIO_PROCESS, int(tid), min(19, current + increment))
            changed += 1
        except OSError:  # the thread ended meanwhile, or no permission: best effort
            pass
    return changed


def use_pool(spark: SparkSession, name: str | None) -> None:
    """Run this thread's next Spark jobs in FAIR pool ``name`` (None: the default pool).

    The property is thread-local (PySpark pins Python threads to JVM threads), so each
    worker thread sets it once for itself.
    """
    spark.sparkContext.setLocalProperty(POOL_PROPERTY, name)  # type: ignore[arg-type]


def delta_jvm_available(spark: SparkSession) -> bool:
    """Whether Delta's JVM classes are on the driver's classpath (``format("delta")`` works)."""
    try:
        utils = spark._jvm.org.apache.spark.util.Utils  # type: ignore[union-attr]
        return bool(utils.classIsLoadable(DELTA_EXTENSION_CLASS))
    except Exception:  # Spark Connect session, or the JVM is gone: no native Delta here
        return False
