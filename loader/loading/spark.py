"""The loader's embedded Spark session: defaults for a small machine, FAIR pools per worker.

Each dispatcher worker submits its jobs in its own FAIR pool (``worker-<i>``, equal
weight, minShare 1), so one table's large load cannot starve the other workers' small
ones of executor slots. Everything here can be overridden through ``conf``.

``LEAN_CHANGES`` names what a loader's small append can do without (``[spark]
lean_writes``); each change is switched on or off on its own, so that
``benchmarks/load_cost`` can measure it alone and within the others. The default set
holds the changes that measured faster; the others stay named, and measured, because the
measurement said no.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING
from xml.sax.saxutils import quoteattr

from loader.core.errors import StartError, caused_by
from loader.loading.java import JavaError, check_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ALL_LEAN",
    "DEFAULT_LEAN",
    "DELTA_EXTENSION_CLASS",
    "LEAN_CHANGES",
    "JavaError",
    "LeanChange",
    "build_spark_session",
    "connect_session",
    "is_connect",
    "session_settings",
    "SparkUnreachable",
    "spark_unreachable",
    "sql_functions",
    "default_conf",
    "delta_jvm_available",
    "java_version_ok",
    "lean_changes",
    "set_write_checksums",
    "use_pool",
]

DELTA_EXTENSION_CLASS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG_CLASS = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
POOL_PROPERTY = "spark.scheduler.pool"


@dataclass(frozen=True)
class LeanChange:
    """Something the loader's append does without, and where it takes effect.

    ``conf`` is Spark configuration for the session (so it must suit both writers);
    ``write_options`` are Hadoop settings of the embedded writer's own Parquet job only
    (``DataFrameWriter.option``), which the native delta-spark writer, with Delta's commit
    protocol, never sees. A change with neither is a code path of the sinks, named here so
    that one list says what ``lean_writes`` switches. ``default``: in ``lean_writes = true``.
    """

    why: str
    conf: Mapping[str, str] = field(default_factory=dict)
    write_options: Mapping[str, str] = field(default_factory=dict)
    default: bool = True


#: Every lean change by name. Each keeps exactly-once and crash safety: the embedded writer
#: publishes only files of a job that succeeded, from a staging directory of its own.
LEAN_CHANGES: dict[str, LeanChange] = {
    "few_round_trips": LeanChange(
        "The batch frame is built from SQL text (a DDL schema for the reader, one SELECT for the "
        "NOT NULL checks and the coalesce) instead of py4j round trips per Column call and per "
        "column; the writer skips partitionBy() for an unpartitioned table. Off by default: "
        "Spark parsing and analysing the text (and the temporary view) cost more than the ~30 "
        "round trips it saves once no_call_sites is on.",
        default=False,
    ),
    "inline_small_rows": LeanChange(
        "A batch's in-memory rows up to 1 MiB (frame.py INLINE_ROWS_MAX_BYTES) reach Spark inline "
        "(createDataFrame from Arrow) instead of as a Parquet file: no file listing, no Hadoop "
        "configuration broadcast to a file reader, no Parquet reader. Larger ones stay files that "
        "executors read, so a big batch never passes through the driver."
    ),
    "no_call_sites": LeanChange(
        "PySpark records the Python call site of every Column function for error messages, at two "
        "to four py4j round trips per call; the loader's errors name the column themselves.",
        conf={"spark.python.sql.dataFrameDebugging.enabled": "false"},
    ),
    "task_commit_in_place": LeanChange(
        "FileOutputCommitter algorithm 2: a task moves its file into the output directory when it "
        "commits, so the job commit lists and renames nothing. Its weakness (a failed job leaves "
        "files behind) does not reach a table: the output is the load's private staging directory, "
        "published only after the job succeeded and removed otherwise. Off by default: side by side "
        "with the default set it measured within a few milliseconds either way (for one file on a "
        "local disk the job commit's renames cost next to nothing), not worth a second commit algorithm.",
        write_options={"mapreduce.fileoutputcommitter.algorithm.version": "2"},
        default=False,
    ),
    "staging_dirs_premade": LeanChange(
        "The loader makes the committer's staging directories with os.makedirs before the job: "
        "Hadoop's local filesystem sets the permissions of each directory it creates by forking "
        "`chmod` (no native library in the pyspark package), a few milliseconds each."
    ),
    "no_checksum_files": LeanChange(
        "The driver JVM's local filesystem writes no .crc side file next to each Parquet file "
        "(one more file, one more `chmod` fork, one more rename), which nothing reads: the loader "
        "moves the Parquet file alone into the table, and Parquet pages carry checksums of their "
        "own. Executors of a cluster keep writing them into the staging directory, removed with it."
    ),
    "parallel_tables": LeanChange(
        "A group job's per-table steps run on 4 threads of the worker rather than one table after "
        "another: before the Spark job each table's handle brought up to date and its application "
        "transaction and rules read; after it each table's publish and Delta commit (deltalake's Rust "
        "core releases the GIL). Each table still commits once, with its own application transaction: a "
        "crash leaves some of them committed, which the retry reads from the log, as after a crash "
        "between serial commits."
    ),
    "known_commits": LeanChange(
        "With cached_table: after its own commit the embedded writer remembers the table's version and "
        "application transaction; the next load checks with two stats that the log still holds that "
        "entry and no later one instead of bringing the handle up to date and reading the transaction "
        "from the log (1.2 + 1.5 ms a table). Anyone else's commit (maintenance, another worker, another "
        "tool) is a later entry, and log cleanup removes the oldest entries first (ours among them "
        "before any later one); either way the handle is brought up to date and the transaction read."
    ),
    "direct_commit": LeanChange(
        "The embedded writer commits a plain table's append (no writer feature it would have to write "
        "for) as the log entry itself: the commitInfo, add and txn actions deltalake writes, made durable "
        "and linked in under the next version's name, which fails if another writer took it (then "
        "deltalake commits and its conflict checks decide); checkpoints at the table's interval as "
        "deltalake's post-commit hook writes them (loader/loading/sinks/log_commit.py). 0.3 ms of CPU "
        "where create_write_transaction spends 3 to 5."
    ),
    "cached_table": LeanChange(
        "The embedded writer keeps each table's deltalake handle and brings it up to date "
        "(update_incremental) before reading the application transaction, instead of replaying "
        "the log from its last checkpoint at every load."
    ),
}
ALL_LEAN: frozenset[str] = frozenset(LEAN_CHANGES)
DEFAULT_LEAN: frozenset[str] = frozenset(name for name, change in LEAN_CHANGES.items() if change.default)


def lean_changes(setting: bool | Iterable[str]) -> frozenset[str]:
    """The changes a ``lean_writes`` setting names: true = the default set, false = none, or a
    list of names (any of ``LEAN_CHANGES``)."""
    if setting is True:
        return DEFAULT_LEAN
    if setting is False:
        return frozenset()
    names = frozenset([setting] if isinstance(setting, str) else setting)
    unknown = sorted(names - ALL_LEAN)
    if unknown:
        raise ValueError(f"unknown lean_writes change(s) {unknown}; choose from {sorted(ALL_LEAN)}, or true/false")
    return names


def lean_conf(lean: Iterable[str]) -> dict[str, str]:
    """Spark session settings of the named changes."""
    conf: dict[str, str] = {}
    for name in sorted(lean):
        conf.update(LEAN_CHANGES[name].conf)
    return conf


def lean_write_options(lean: Iterable[str]) -> dict[str, str]:
    """Hadoop settings of the named changes for the embedded writer's Parquet job."""
    options: dict[str, str] = {}
    for name in sorted(lean):
        options.update(LEAN_CHANGES[name].write_options)
    return options


def set_write_checksums(spark: SparkSession, enabled: bool) -> bool:
    """Whether the driver JVM's local filesystem writes ``.crc`` side files (``no_checksum_files``).

    The flag lives on Hadoop's cached ``file:`` filesystem, which local-mode executors share
    with the driver; returns False when there is no JVM to set it on (Spark Connect).
    """
    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf).setWriteChecksum(enabled)
        return True
    except Exception:  # no JVM here: the default (checksums) stays
        return False


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


def session_settings(
    master: str, conf: Mapping[str, str] | None, fair_pools: int, lean: Iterable[str]
) -> dict[str, str]:
    """The whole Spark configuration of the loader's driver, in process or a Connect server:
    the defaults, the lean changes' settings, the FAIR pools, then the operator's ``conf``."""
    user = dict(conf or {})
    settings = default_conf(master)
    settings.update(lean_conf(lean))
    if _wants_delta_jars(user):
        settings["spark.sql.extensions"] = DELTA_EXTENSION_CLASS
        settings["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG_CLASS
    if fair_pools > 0 and "spark.scheduler.allocation.file" not in user:
        directory = Path(tempfile.mkdtemp(prefix="loader-spark-"))
        atexit.register(shutil.rmtree, directory, True)
        settings["spark.scheduler.allocation.file"] = str(write_allocation_file(fair_pools, directory))
    settings.update(user)
    return settings


#: Retries of a Spark Connect call, about 5 s in all. Connect's default policy retries for
#: at least 10 minutes, so a load in flight when the server went away would hold its worker
#: that long (measured: over 6 minutes); the loader has retries of its own, with back-off,
#: and counts an unreachable Spark as the environment's failure, not the batch's.
CONNECT_RETRY: dict[str, float | int] = {
    "max_retries": 6,
    "backoff_multiplier": 2.0,
    "initial_backoff": 100,
    "max_backoff": 2000,
}


#: How a Spark Connect client says its server is gone or was restarted (the load did not
#: fail for its data; a new session, after the server is back, runs it).
UNREACHABLE_WORDS = ("StatusCode.UNAVAILABLE", "[NO_ACTIVE_SESSION]", "SESSION_CHANGED")


class SparkUnreachable(RuntimeError, StartError):
    """No Spark Connect server answered (or the loader's own could not be started)."""


def spark_unreachable(error: BaseException) -> bool:
    """True when ``error`` (or what caused it) says Spark could not be reached."""
    return caused_by(
        error, lambda e: isinstance(e, SparkUnreachable) or any(word in str(e) for word in UNREACHABLE_WORDS)
    )


def connect_session(url: str, timeout: float = 60.0) -> SparkSession:
    """A new Spark Connect client session (``sc://host:port``), once the server runs a query.

    The server's settings were fixed when it started (``session_settings``); a client
    session has its own SQL settings but shares the server's executors and files. Stop it
    (``spark.stop()``) while its server still runs: at exit an open client asks the server
    to clean up, and retries for minutes when nobody answers.
    """
    # The Connect builder itself: pyspark.sql's refuses a remote session in a process that
    # also runs an in-process one (the test suite does; a worker process never does).
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

    deadline = time.monotonic() + timeout
    while True:
        spark = None
        try:
            spark = ConnectSparkSession.builder.remote(url).create()  # never another server's session
            # The probe tries once: the client's own retries (seconds of back-off) would run
            # past ``timeout`` (a 2-s timeout took 11 s); this loop retries until the deadline.
            spark.client.set_retry_policies([DefaultPolicy(max_retries=0)])
            spark.range(1).count()
            spark.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY)])
            return spark  # type: ignore[return-value]
        except Exception as exc:  # the server is starting, or gone
            if spark is not None:
                # Closed, its client sends nothing more: an open one cleans up at exit with
                # one more call to a server that did not answer (20 s when a port listens
                # but speaks no gRPC), and the process ends that much later.
                with contextlib.suppress(Exception):
                    spark.client.close()
            if time.monotonic() > deadline:
                raise SparkUnreachable(
                    f"no Spark Connect server answered at {url} within {timeout:.0f} s ({exc}); "
                    "start one, or set [spark] remote to the address of a running one"
                ) from exc
            time.sleep(0.5)


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def sql_functions(spark: SparkSession) -> ModuleType:
    """``pyspark.sql.functions`` for ``spark``'s kind of session.

    The classic module picks its implementation from a process-wide switch that only
    ``SparkSession.builder.remote`` sets; a process holding both kinds (the test suite)
    must pick by session.
    """
    if is_connect(spark):
        from pyspark.sql.connect.functions import builtin as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def build_spark_session(
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    app_name: str = "warehouse-loader",
    fair_pools: int = 0,
    lean: Iterable[str] = DEFAULT_LEAN,
) -> SparkSession:
    """Start (or return the running) Spark session with the loader's defaults under ``conf``.

    ``lean`` names the ``LEAN_CHANGES`` whose session settings apply (``conf`` still wins).
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
    lean = lean_changes(lean)
    settings = session_settings(master, conf, fair_pools, lean)

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if "no_checksum_files" in lean:
        set_write_checksums(spark, False)
    return spark


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
    if is_connect(spark):  # pools are a driver-side property: one Connect session per worker process
        return
    spark.sparkContext.setLocalProperty(POOL_PROPERTY, name)  # type: ignore[arg-type]


def delta_jvm_available(spark: SparkSession) -> bool:
    """Whether Delta's JVM classes are on the driver's classpath (``format("delta")`` works).

    A Spark Connect client sees no JVM: there the server's ``spark.sql.extensions`` tells
    (a server cannot start with Delta's extension named and its jars missing)."""
    if is_connect(spark):
        try:
            return DELTA_EXTENSION_CLASS in (spark.conf.get("spark.sql.extensions", "") or "")
        except Exception:
            return False
    try:
        utils = spark._jvm.org.apache.spark.util.Utils  # type: ignore[union-attr]
        return bool(utils.classIsLoadable(DELTA_EXTENSION_CLASS))
    except Exception:  # Spark Connect session, or the JVM is gone: no native Delta here
        return False
