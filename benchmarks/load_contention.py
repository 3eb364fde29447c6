"""How much a running load slows the request handler, and the other way round.

The service serves HTTP on its event loop while worker threads drive Spark through py4j, in
one process: each py4j round trip gives up the GIL and must win it back from the busy
handler, which by default releases it only every 5 ms (the switch interval).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
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


def loads_until(stop: threading.Event, load: Callable[[], float]) -> list[float]:
    loads = []
    while not stop.is_set():
        loads.append(load())
    return loads


def measure(run: Run) -> dict[str, Any]:
    seconds = run.meta["seconds"] = 4.0 if run.args.quick else 10.0
    rows, seqs = spark.small_rows(range(1, 4)), itertools.count(1)

    def load() -> float:
        """One load of 100 updates of 3 rows; its seconds."""
        batch = Batch("t", tuple(Update("t", k, float(k), rows=rows) for k in itertools.islice(seqs, 100)))
        return spark.timed(sink.load, batch, spark.SCHEMA)[1]

    results = []
    with spark.sink("contention-", fair_pools=2) as (_, sink):
        sink.ensure_table("t", spark.SCHEMA)
        try:
            for _ in range(3):
                load()
            for interval in INTERVALS * run.args.repeats:  # interleaved repeats
                log(f"switch interval {interval * 1000:g} ms")
                sys.setswitchinterval(interval)
                alone, _ = spin(seconds / 2)
                idle_loads = [load() for _ in range(5)]
                stop = threading.Event()
                with ThreadPoolExecutor(1) as thread:
                    loads = thread.submit(loads_until, stop, load)
                    busy, worst = spin(seconds)
                    stop.set()
                busy_loads = loads.result()
                result = {"interval_ms": interval * 1000, "main_relative": busy / (alone * 2), "loads": len(busy_loads)}
                result |= {"worst_stall_ms": worst * 1000, "load_median_s": statistics.median(busy_loads)}
                results.append(result | {"load_alone_median_s": statistics.median(idle_loads)})
        finally:
            sys.setswitchinterval(0.005)
    return {"results": results}


def render(saved: dict[str, Any]) -> str:
    meta = saved["meta"]
    seconds = meta.get("seconds", 4.0 if meta["quick"] else 10.0)  # (results before it was recorded)
    med = {i * 1000: medians(r for r in saved["results"] if r["interval_ms"] == i * 1000) for i in INTERVALS}
    rows = [m | {"loads_per_second": m["loads"] / seconds} for m in med.values()]
    values = {"meta": meta, "seconds": seconds, "table": T.table("table", rows), "service_ms": SERVICE_INTERVAL * 1000}
    values |= {"used": med[SERVICE_INTERVAL * 1000], "default": med[5.0]}
    return T("section", machine=machine_markdown(meta, "loader"), **values)


BENCHMARK = Benchmark(measure, render, repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
