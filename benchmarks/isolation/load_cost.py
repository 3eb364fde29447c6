"""The price of the process boundary: one small load's wall time, three ways, in one process tree.

    python -m benchmarks.isolation.load_cost SPEC.json     # prints one JSON object on stdout

- ``classic``: ``DeltaRsSink.load`` on an in-process Spark session (py4j), as ``mode =
  "classic"`` runs it;
- ``connect``: the same sink on a Spark Connect client session in this process, against
  a local Spark Connect server (the cost of Connect alone);
- ``process``: ``ProcessSink.load``, as ``mode = "connect"`` runs it: the rows written to
  a handoff file, the request sent to a worker process, which loads over Spark Connect.

Each way loads the same batches (``rows`` rows, one update) into its own table, ``runs``
times after ``warmup`` untimed loads, the three ways interleaved so that the machine's
noise falls on all of them alike.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from loader.loading.connect_server import ConnectServer
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.spark import DEFAULT_LEAN, build_spark_session, connect_session, session_settings
from loader.loading.workers.pool import ProcessSink, WorkerOptions

SCHEMA = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "v", "type": "float64"},
            {"name": "s", "type": "string"},
        ]
    }
)


def batch(table: str, seq: int, rows: int) -> Batch:
    ids = list(range(seq * rows, (seq + 1) * rows))
    data = pa.table({"id": ids, "v": [i * 0.5 for i in ids], "s": [f"payload-{i % 1000:04d}" for i in ids]})
    return Batch(table, (Update(table, seq, float(seq), data),))


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        spec: dict[str, Any] = json.load(handle)
    master, rows, runs, warmup = spec["master"], spec["rows"], spec["runs"], spec["warmup"]
    work = Path(tempfile.mkdtemp(prefix="bench-load-cost-"))
    spark = build_spark_session(master=master, fair_pools=0)
    server = ConnectServer(master, session_settings(master, {}, 1, DEFAULT_LEAN), work / "connect.log")
    server.start()
    client = connect_session(server.url)
    options = WorkerOptions(work / "process", "delta-rs", DEFAULT_LEAN, 120.0, 15.0, 0, work / "handoff")
    processes = ProcessSink(1, options, lambda: server.url)
    processes.start()
    try:
        sinks = {
            "classic": DeltaRsSink(work / "classic", spark),
            "connect": DeltaRsSink(work / "connect", client),
            "process": processes,
        }
        for sink in sinks.values():
            sink.ensure_table("t", SCHEMA)
        seconds: dict[str, list[float]] = {name: [] for name in sinks}
        for k in range(1, warmup + runs + 1):
            for name, sink in sinks.items():
                started = time.perf_counter()
                result = sink.load(batch("t", k, rows), SCHEMA)
                took = time.perf_counter() - started
                assert result.rows == rows and not result.skipped, result
                if k > warmup:
                    seconds[name].append(took)
    finally:
        processes.stop()
        client.stop()
        server.stop()
        spark.stop()
    out = {
        "rows": rows,
        "runs": runs,
        "seconds": seconds,
        "median_seconds": {name: statistics.median(values) for name, values in seconds.items()},
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
