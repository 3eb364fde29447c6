"""The Structured Streaming peer: one streaming query per table, run as its own process.

    python -m benchmarks.freshness_at_scale.peer SPEC.json

What a team without the loader would run: a SparkSession (``local[2]`` here, like the
loader's) holding, per table, ``readStream.schema(...).parquet(<landing>/<t>)`` into
``writeStream.format("parquet")`` with its own checkpoint and a 1-second processing-time
trigger. Producers rename complete Parquet files into the landing directory; each
micro-batch of a query reads every file that arrived since its last batch (no
``maxFilesPerTrigger``), writes them into the sink and records them in the sink's
``_spark_metadata`` log, which is what makes them visible to readers. A Parquet sink
because the Delta jars are not available here.

Progress goes to the ``status`` file (JSON, replaced atomically): ``starting`` with the
queries started so far, then ``running`` with the start-up times and, every 5 s, how many
queries are still active (a query that fails stops; its error is recorded at the end).
SIGTERM stops the queries and the session.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def _write_status(path: Path, status: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    status_path = Path(spec["status"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    began = time.time()
    builder = SparkSession.builder.master(spec["master"]).appName("structured-streaming-peer")
    for key, value in {**DEFAULT_CONF, **spec.get("conf", {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    session_seconds = time.time() - began
    schema = StructType(
        [
            StructField("u", LongType(), False),
            StructField("r", IntegerType(), False),
            StructField("v", DoubleType(), True),
            StructField("s", StringType(), True),
        ]
    )
    status: dict[str, Any] = {"phase": "starting", "session_seconds": session_seconds, "started": 0}
    _write_status(status_path, status)
    queries = []
    first_started = time.time()
    for name, landing, checkpoint, out in spec["tables"]:
        if stop.is_set():
            break
        query = (
            spark.readStream.schema(schema)
            .parquet(landing)
            .writeStream.format("parquet")
            .queryName(name)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=spec["trigger"])
            .start(out)
        )
        queries.append(query)
        if len(queries) % 50 == 0 or len(queries) == len(spec["tables"]):
            status.update(started=len(queries), start_seconds=time.time() - first_started)
            _write_status(status_path, status)
            print(f"peer: {len(queries)} queries started in {time.time() - first_started:.1f} s", file=sys.stderr)
    status.update(phase="running", start_seconds=time.time() - first_started, active=len(queries))
    _write_status(status_path, status)
    while not stop.wait(5.0):
        status["active"] = len(spark.streams.active)
        _write_status(status_path, status)
    failed = {}
    for query in queries:
        if not query.isActive:
            error = query.exception()
            failed[query.name] = str(error)[:500] if error is not None else "stopped"
    status.update(phase="stopping", failed=failed)
    _write_status(status_path, status)
    for query in queries:
        query.stop()
    spark.stop()
    status["phase"] = "stopped"
    _write_status(status_path, status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
