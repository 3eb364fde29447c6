"""The options of every JVM the tests start, and the class-data-sharing archive they map.

- ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``: the C1 compiler only and the serial collector.
  A Spark JVM's start spends half its CPU in C2 compiling code it runs a few times: 17 to 18
  CPU-seconds per session start and five small jobs against 9.3 to 9.5 with these
  (docs/testing.md). The tests' loads are a few rows, so C2's faster steady state is never
  reached; the service's own JVMs keep the JVM's defaults.
- ``-XX:SharedArchiveFile``: a dynamic CDS archive (JDK 13 and later) of the classes a Spark
  Connect server and a first job load from pyspark's jars, recorded once per ``.venv`` by
  ``python -m testing.jvm_options`` (``scripts/test`` runs it; about 15 s). Each JVM then maps
  the classes parsed and verified instead of loading them one by one: a Spark Connect server
  ready with a first job done took 7.3 s without it and 4.0 s with it, a session's start and two
  jobs 8.6 s and 4.8 s. The archive names its jars by path, so it lives in ``.venv``; a JVM
  whose class path does not match it runs without it (``-Xshare:auto``, the default).

``tests/conftest.py`` sets these in ``SPARK_SUBMIT_OPTS`` and ``SPARK_DAEMON_JAVA_OPTS``, which
every service, load worker and Spark daemon the tests start inherits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMPILERS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: In the virtualenv the jars are in: a new ``.venv`` has new jar paths, and gets a new archive.
ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"
#: Recording logs a warning per class it cannot archive (signed jars, old class files).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def jvm_options() -> str:
    """What a test's JVM runs with: the archive only once it has been recorded."""
    return f"{COMPILERS} -XX:SharedArchiveFile={ARCHIVE}" if ARCHIVE.is_file() else COMPILERS


def _record(directory: Path) -> None:
    """In a process of its own (the archive is written as its JVM exits): a Spark session's
    start and a small Parquet write. (With the service's session settings the JVM took 13 s
    more to exit; the classes those settings add load as before.)"""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    frame = spark.createDataFrame([(1, "a", 0.5)], "id long, s string, v double")
    frame.write.mode("overwrite").parquet(str(directory / "rows"))
    spark.stop()


def record_archive() -> float:
    """Record the archive (a session's start and a write: a Spark Connect server's start maps
    nearly all of its classes from it too) and move it into place; the seconds it took."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as tmp:
        recording = Path(tmp) / "spark-classes.jsa"
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{COMPILERS} -XX:ArchiveClassesAtExit={recording} {QUIET}"}
        command = [sys.executable, "-m", "testing.jvm_options", "--record-in", tmp]
        root = str(Path(__file__).resolve().parent.parent)  # (the child runs in ``tmp``)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        done = subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0 or not recording.is_file():
            raise RuntimeError(f"the JVM wrote no class archive (exit {done.returncode}): {done.stderr[-2000:]}")
        os.replace(recording, ARCHIVE)
    return time.monotonic() - began


def main() -> int:
    """Record the archive unless this ``.venv`` has one (``--force``: again)."""
    if sys.argv[1:2] == ["--record-in"]:
        _record(Path(sys.argv[2]))
        return 0
    if ARCHIVE.is_file() and "--force" not in sys.argv[1:]:
        return 0
    print(f"testing.jvm_options: recording the Spark JVMs' class archive once for this .venv ({ARCHIVE.name})")
    try:
        seconds = record_archive()
    except Exception as exc:  # the tests run without it, only slower
        print(f"testing.jvm_options: no class archive ({exc}); the tests' JVMs load their classes one by one")
        return 0
    print(f"testing.jvm_options: recorded in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
