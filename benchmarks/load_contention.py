"""How much a running load slows the request handler, and the other way round.

    python -m benchmarks.load_contention           # ~2 min; rewrites the load-contention section
    python -m benchmarks.load_contention --quick   # prints only

The service serves HTTP on its event loop while worker threads drive Spark jobs through
py4j, in one Python process. Each py4j round trip gives up the GIL and must win it back
from the busy handler, which by default releases it only every 5 ms (the interpreter's
switch interval). Here the main thread stands in for a saturated request handler (pure
Python, never waiting) while a worker thread runs back-to-back loads of 100 small updates
with the embedded writer; for each switch interval: the main thread's throughput
relative to running alone, its worst stall, and the loads' median duration.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from testing.report import (
    RESULTS_DIR,
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
    write_section,
)

MODULE = "benchmarks.load_contention"
SECTION = "load-contention"
INTERVALS = (0.005, 0.001, 0.0005)
#: What cli/service.py sets (keep the two in step).
SERVICE_INTERVAL = 0.001


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    seconds = 4.0 if args.quick else 10.0
    repeats = args.repeats or (1 if args.quick else 3)
    from loader.core.schema import TableSchema
    from loader.core.updates import Batch, Update
    from loader.loading.sinks.delta_rs import DeltaRsSink
    from loader.loading.spark import build_spark_session

    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
    }
    spark = build_spark_session(master="local[2]", fair_pools=2)
    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "id", "type": "int64"},
                {"name": "v", "type": "float64"},
                {"name": "s", "type": "string"},
            ]
        }
    )
    warehouse = Path(tempfile.mkdtemp(prefix="contention-"))
    sink = DeltaRsSink(warehouse, spark)
    sink.ensure_table("t", schema)
    rows = pa.table({"id": [1, 2, 3], "v": [0.5, 1.5, 2.5], "s": ["a", "b", "c"]}).cast(schema.arrow())
    seq = 0

    def batch() -> Batch:
        nonlocal seq
        updates = []
        for _ in range(100):
            seq += 1
            updates.append(Update("t", seq, float(seq), rows=rows))
        return Batch("t", tuple(updates))

    results = []
    try:
        for _ in range(3):
            sink.load(batch(), schema)
        for interval in [i for _ in range(repeats) for i in INTERVALS]:  # interleaved repeats
            log(f"switch interval {interval * 1000:g} ms")
            sys.setswitchinterval(interval)
            alone, _ = spin(seconds / 2)
            idle_loads = []
            for _ in range(5):
                t0 = time.perf_counter()
                sink.load(batch(), schema)
                idle_loads.append(time.perf_counter() - t0)
            stop = threading.Event()
            loads: list[float] = []

            def loader(stop: threading.Event = stop, loads: list[float] = loads) -> None:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    sink.load(batch(), schema)
                    loads.append(time.perf_counter() - t0)

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
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["repeats"] = repeats
    by_interval = {i * 1000: [r for r in results if r["interval_ms"] == i * 1000] for i in INTERVALS}
    med = {
        ms: {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "interval_ms"}
        for ms, runs in by_interval.items()
    }
    rows_md = [
        [
            f"{ms:g}",
            f"{m['main_relative']:.2f}",
            f"{m['worst_stall_ms']:.1f}",
            f"{m['loads'] / seconds:.2f}",
            f"{m['load_median_s']:.3f}",
            f"{m['load_alone_median_s']:.3f}",
        ]
        for ms, m in med.items()
    ]
    used, default = med[SERVICE_INTERVAL * 1000], med[5.0]
    markdown = (
        "## A load beside a busy request handler (`benchmarks/load_contention.py`)\n\n"
        + machine_markdown(meta, "loader")
        + f"\nMedian of {repeats} run(s) of {seconds:.0f} s per switch interval (interleaved): the main thread "
        "spins in pure Python (a saturated request handler) while a worker thread runs back-to-back "
        "embedded-writer loads of 100 updates of 3 rows on `local[2]`. *Main thread* is its throughput relative "
        "to running alone; *load alone* is a load's duration with the main thread idle.\n\n"
        + md_table(
            [
                "switch interval ms",
                "main thread",
                "worst main stall ms",
                "loads/s",
                "load s (contended)",
                "load s (alone)",
            ],
            rows_md,
        )
        + f"\n\n`loader serve` sets the switch interval to {SERVICE_INTERVAL * 1000:g} ms: a contended load took "
        f"{used['load_median_s']:.3f} s against {default['load_median_s']:.3f} s at the default 5 ms, with the "
        f"handler keeping {used['main_relative']:.0%} of its throughput (5 ms: {default['main_relative']:.0%}).\n"
    )
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "load_contention.json", {"meta": meta, "results": results})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
