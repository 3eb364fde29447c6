"""The price of the process boundary: one small load's wall time, three ways, in one process tree
(``python -m benchmarks.isolation.load_cost SPEC.json``).

``classic`` (``DeltaRsSink.load`` on an in-process session), ``connect`` (the same sink on a
Spark Connect client: the cost of Connect alone), ``process`` (``ProcessSink.load``: a handoff
file and a worker process loading over Connect); interleaved, each into its own table.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import child, spark
from loader.loading.connect_server import ConnectServer
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.spark import DEFAULT_LEAN, build_spark_session, connect_session, session_settings
from loader.loading.workers.pool import ProcessSink, WorkerOptions


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    master, rows, runs, warmup = spec["master"], spec["rows"], spec["runs"], spec["warmup"]
    work = Path(tempfile.mkdtemp(prefix="bench-load-cost-"))
    session = build_spark_session(master=master, fair_pools=0)
    server = ConnectServer(master, session_settings(master, {}, 1, DEFAULT_LEAN), work / "connect.log")
    server.start()
    client = connect_session(server.url)
    options = WorkerOptions(work / "process", "delta-rs", DEFAULT_LEAN, 120.0, 15.0, 0, work / "handoff")
    processes = ProcessSink(1, options, lambda: server.url)
    processes.start()
    try:
        sinks = {
            "classic": DeltaRsSink(work / "classic", session),
            "connect": DeltaRsSink(work / "connect", client),
            "process": processes,
        }
        for sink in sinks.values():
            sink.ensure_table("t", spark.SCHEMA)
        seconds: dict[str, list[float]] = {name: [] for name in sinks}
        for k in range(1, warmup + runs + 1):
            for name, sink in sinks.items():
                ids = range(k * rows, (k + 1) * rows)
                batch = spark.one_update("t", k, spark.small_rows(ids, "payload", typed=False))
                result, took = spark.timed(sink.load, batch, spark.SCHEMA)
                assert result.rows == rows and not result.skipped, result
                if k > warmup:
                    seconds[name].append(took)
    finally:
        processes.stop()
        client.stop()
        server.stop()
        session.stop()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {"rows": rows, "runs": runs, "seconds": seconds, "median_seconds": medians}


if __name__ == "__main__":
    raise SystemExit(child.main(measure))
