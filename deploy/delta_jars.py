"""Bake Delta Lake's JVM jars into the loader image (used by deploy/Dockerfile).

    python delta_jars.py fetch PACKAGE OUT_DIR   # build stage: resolve PACKAGE with Ivy, copy its jars to OUT_DIR
    python delta_jars.py check CONFIG            # final stage: the service's Spark session, made from CONFIG,
                                                 # loads them and writes and reads a Delta table natively

``fetch`` refuses a PACKAGE that is not the one matching the installed ``pyspark`` and
``delta-spark`` (``io.delta:delta-spark_<spark major.minor>_2.13:<delta-spark version>``, the
rule of ``delta.pip_utils.configure_spark_with_delta_pip``), so the JVM side cannot drift from
the Python pins in pyproject.toml. Resolution needs Maven Central, so it runs only at build
time. At run time the jars are on the driver's class path through
``spark.driver.extraClassPath = "/opt/delta-jars/*"`` (deploy/loader.docker.toml). That path
comes before Spark's own jars, so ``fetch`` leaves out every artifact Spark already ships
(Delta's transitive Jackson, Log4j, SLF4J, ...): Spark's version wins, as it would with
``spark.jars.packages``.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path
from urllib.parse import unquote, urlparse

SCALA = "2.13"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^/]*)\.jar$")


def expected_package() -> str:
    spark = ".".join(version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark}_{SCALA}:{version('delta-spark')}"


def artifact(jar_name: str, ivy: bool) -> str:
    """``jackson-databind`` of ``jackson-databind-2.21.2.jar`` or, from Ivy (``<org>_<artifact>-<version>.jar``),
    of ``com.fasterxml.jackson.core_jackson-databind-2.13.5.jar``."""
    name = jar_name.split("_", 1)[1] if ivy and "_" in jar_name else jar_name
    match = _VERSIONED.match(name)
    return match["artifact"] if match else name.removesuffix(".jar")


def not_in_spark(resolved: Iterable[Path], spark_jars: Path) -> tuple[list[Path], list[Path]]:
    """Split Ivy-resolved jars into (to bake, already shipped by Spark under another version)."""
    shipped = {artifact(jar.name, ivy=False) for jar in spark_jars.glob("*.jar")}
    keep, drop = [], []
    for jar in resolved:
        (drop if artifact(jar.name, ivy=True) in shipped else keep).append(jar)
    return keep, drop


def fetch(package: str, out: Path) -> list[Path]:
    want = expected_package()
    if package != want:
        raise SystemExit(f"delta_jars: {package} does not match the installed pyspark/delta-spark, which need {want}")
    import pyspark
    from pyspark.sql import SparkSession

    ivy = Path(tempfile.mkdtemp(prefix="delta-ivy-"))
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("delta-jars")
        .config("spark.ui.enabled", "false")
        .config("spark.jars.packages", package)
        .config("spark.jars.ivy", str(ivy))
        .getOrCreate()
    )
    try:
        # spark-submit resolved the package and its dependencies into spark.jars (file: URIs).
        listed = spark.sparkContext.getConf().get("spark.jars", "") or ""
        jars = [Path(unquote(urlparse(uri).path)) for uri in listed.split(",") if uri.strip()]
        jars = [jar for jar in jars if jar.suffix == ".jar" and jar.is_file()] or sorted((ivy / "jars").glob("*.jar"))
    finally:
        spark.stop()
    keep, drop = not_in_spark(jars, Path(pyspark.__file__).parent / "jars")
    if not any(jar.name.startswith("io.delta_delta-spark") for jar in keep):
        raise SystemExit(f"delta_jars: resolving {package} gave no delta-spark jar: {[j.name for j in jars]}")
    out.mkdir(parents=True, exist_ok=True)
    for jar in keep:
        shutil.copy2(jar, out / jar.name)
    (out / "PACKAGE").write_text(package + "\n", encoding="utf-8")
    shutil.rmtree(ivy, ignore_errors=True)
    print(f"delta_jars: {package}: {len(keep)} jars in {out}; left to Spark's own: {sorted(j.name for j in drop)}")
    return [out / jar.name for jar in keep]


def check(config: Path) -> str:
    """Start Spark exactly as the service does with ``config`` and load through native Delta."""
    from loader.config import load_settings
    from loader.loading.sinks.probe import choose_writer
    from loader.loading.spark import build_spark_session

    settings = load_settings(config)
    spark = build_spark_session(settings.spark.master, settings.spark.conf, settings.spark.app_name)
    scratch = Path(tempfile.mkdtemp(prefix="delta-check-"))
    try:
        writer = choose_writer(settings.writer, spark)
        if writer != "delta-spark":
            raise SystemExit(f"delta_jars: {config} runs the {writer} writer, not native delta-spark")
        table = str(scratch / "t")
        spark.range(3).write.format("delta").mode("append").save(table)
        rows = spark.read.format("delta").load(table).count()
        if rows != 3:
            raise SystemExit(f"delta_jars: wrote 3 rows to a Delta table and read back {rows}")
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"delta_jars: {config}: native delta-spark writer loads, writes and reads Delta tables")
    return writer


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "fetch":
        fetch(argv[1], Path(argv[2]))
    elif len(argv) == 2 and argv[0] == "check":
        check(Path(argv[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
