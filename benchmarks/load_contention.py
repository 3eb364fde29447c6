"""How much a running load slows the request handler, and the other way round.

    python -m benchmarks.load_contention           # ~2 min; rewrites the load-contention section
    python -m benchmarks.load_contention --quick   # prints only

The service serves HTTP on its event loop while worker threads drive Spark through py4j, in
one process: each py4j round trip gives up the GIL and must win it back from the busy
handler, which by default releases it only every 5 ms (the switch interval).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from testing.report import log, machine_markdown

INTERVALS = (0.005, 0.001, 0.0005)
#: What cli/service.py sets (keep the two in step).
SERVICE_INTERVAL = 0.001
T = Template("load-contention")


def spin(seconds: float) -> tuple[int, float]:
    """Pure-Python work for ``seconds``: iterations done and the longest gap between two."""
    n, worst = 0, 0.0
    end = time.perf_counter() + seconds
    last = time.perf_counter()
    while (now := time.perf_counter()) < end:
        worst = max(worst, now - last)
        last = now
        sum(range(50))
        n += 1
    return n, worst


def measure(run: Run) -> dict[str, Any]:
    seconds = 4.0 if run.args.quick else 10.0
    run.meta["seconds"] = seconds
    from loader.loading.sinks.delta_rs import DeltaRsSink

    columns = (("id", "int64"), ("v", "float64"), ("s", "string"))
    schema = TableSchema.model_validate({"columns": [{"name": n, "type": t} for n, t in columns]})
    rows = pa.table({"id": [1, 2, 3], "v": [0.5, 1.5, 2.5], "s": ["a", "b", "c"]}).cast(schema.arrow())
    seq = 0

    def batch() -> Batch:
        nonlocal seq
        seq += 100
        return Batch("t", tuple(Update("t", k, float(k), rows=rows) for k in range(seq - 99, seq + 1)))

    def load() -> float:
        return spark.timed(lambda: sink.load(batch(), schema))[1]

    results = []
    with spark.session(fair_pools=2) as session, tempfile.TemporaryDirectory(prefix="contention-") as warehouse:
        sink = DeltaRsSink(Path(warehouse), session)
        sink.ensure_table("t", schema)
        try:
            for _ in range(3):
                load()
            for interval in [i for _ in range(run.args.repeats) for i in INTERVALS]:  # interleaved repeats
                log(f"switch interval {interval * 1000:g} ms")
                sys.setswitchinterval(interval)
                alone, _ = spin(seconds / 2)
                idle_loads = [load() for _ in range(5)]
                stop = threading.Event()
                loads: list[float] = []

                def loader(stop: threading.Event = stop, loads: list[float] = loads) -> None:
                    while not stop.is_set():
                        loads.append(load())

                thread = threading.Thread(target=loader)
                thread.start()
                busy, worst = spin(seconds)
                stop.set()
                thread.join()
                results.append(
                    {
                        "interval_ms": interval * 1000,
                        "main_relative": busy / (alone * 2),
                        "worst_stall_ms": worst * 1000,
                        "loads": len(loads),
                        "load_median_s": statistics.median(loads),
                        "load_alone_median_s": statistics.median(idle_loads),
                    }
                )
        finally:
            sys.setswitchinterval(0.005)
    return {"results": results}


def render(saved: dict[str, Any]) -> str:
    meta, results = saved["meta"], saved["results"]
    seconds = meta.get("seconds", 4.0 if meta["quick"] else 10.0)
    by_interval = {i * 1000: [r for r in results if r["interval_ms"] == i * 1000] for i in INTERVALS}
    med = {ms: medians(runs, [k for k in runs[0] if k != "interval_ms"]) for ms, runs in by_interval.items()}
    rows = [(ms, m, m["loads"] / seconds) for ms, m in med.items()]
    return T(
        "section",
        machine=machine_markdown(meta, "loader"),
        meta=meta,
        seconds=seconds,
        table=T.table("table", rows),
        service_ms=SERVICE_INTERVAL * 1000,
        used=med[SERVICE_INTERVAL * 1000],
        default=med[5.0],
    )


BENCHMARK = Benchmark("benchmarks.load_contention", "load-contention", __doc__, measure, render, repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
