"""The Structured Streaming peer: one streaming query per table, run as its own process.

What a team without the loader would run: a SparkSession (``local[2]``, like the loader's)
with, per table, ``readStream.parquet(<landing>/<t>)`` into ``writeStream.format("parquet")``
(own checkpoint, 1-second trigger, no ``maxFilesPerTrigger``); a micro-batch's files become
visible to readers in the sink's ``_spark_metadata`` log. A Parquet sink because the Delta
jars are not available here. The ``status`` file (replaced atomically) says ``running``
with the start-up times and, every 5 s, the active queries; at the end, each failed one's
error. SIGTERM stops the queries and the session.
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

from benchmarks.harness import child

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    status_path = Path(spec["status"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    began = time.time()
    builder = SparkSession.builder.master(spec["master"]).appName("structured-streaming-peer")
    spark = builder.config(map={**DEFAULT_CONF, **spec.get("conf", {})}).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    status: dict[str, Any] = {"session_seconds": time.time() - began, "started": 0}
    queries = []
    began = time.time()
    for name, landing, checkpoint, out in spec["tables"]:
        if stop.is_set():
            break
        stream = spark.readStream.schema("u BIGINT NOT NULL, r INT NOT NULL, v DOUBLE, s STRING").parquet(landing)
        writer = stream.writeStream.format("parquet").queryName(name).option("checkpointLocation", checkpoint)
        queries.append(writer.trigger(processingTime=spec["trigger"]).start(out))
        status.update(started=len(queries), start_seconds=time.time() - began)
        if len(queries) % 50 == 0:
            print(f"peer: {len(queries)} queries started in {status['start_seconds']:.1f} s", file=sys.stderr)
    status.update(phase="running", active=len(queries))
    while True:
        child.write(status_path, status)
        if stop.wait(5.0):
            break
        status["active"] = len(spark.streams.active)
    errors = {query.name: query.exception() for query in queries if not query.isActive}
    status["failed"] = {name: str(error)[:500] if error is not None else "stopped" for name, error in errors.items()}
    for query in queries:
        query.stop()
    spark.stop()
    child.write(status_path, status | {"phase": "stopped"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
