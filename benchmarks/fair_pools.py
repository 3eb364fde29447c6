"""Do Spark's FAIR pools share executors fairly between the loader's workers?

    python -m benchmarks.fair_pools            # ~4 min; rewrites the fair-pools section
    python -m benchmarks.fair_pools --quick    # smoke run, prints only

The loader gives each worker its own FAIR pool (``worker-<i>``, minShare 1; see
loader/loading/spark.py). Spark's FAIR algorithm breaks ties between equally needy pools by
name, which has starved later-named pools elsewhere (50 streaming queries on 2 cores),
so this measures it for the loader's pattern before relying on it: P threads, each in
its own pool, each running back-to-back small Parquet appends (what a load is), on
``local[2]``. Reported per configuration: jobs completed per worker, Jain's fairness
index over those counts (1 = perfectly even, 1/P = one worker got everything), and the
worst job latency, against one FIFO pool shared by all (Spark's default).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from testing.report import (
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
    write_section,
)

MODULE = "benchmarks.fair_pools"
SECTION = "fair-pools"
WORKERS = (2, 6)
MODES = ("fair", "fifo")


def jain(counts: list[int]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2)."""
    total = sum(counts)
    squares = sum(c * c for c in counts)
    return total * total / (len(counts) * squares) if squares else 1.0


def run_config(workers: int, mode: str, seconds: float, scratch: Path) -> dict[str, Any]:
    from loader.loading.spark import build_spark_session, use_pool

    conf = {} if mode == "fair" else {"spark.scheduler.mode": "FIFO"}
    spark = build_spark_session(
        master="local[2]", app_name=f"fair-{mode}-{workers}", fair_pools=workers if mode == "fair" else 0, conf=conf
    )
    try:
        frame = spark.range(0, 5_000, numPartitions=1).selectExpr("id", "cast(id as string) as s")
        frame.write.mode("overwrite").parquet(str(scratch / "warmup"))
        counts = [0] * workers
        latencies: list[list[float]] = [[] for _ in range(workers)]
        deadline = time.monotonic() + seconds

        def work(i: int) -> None:
            if mode == "fair":
                use_pool(spark, f"worker-{i}")
            k = 0
            while time.monotonic() < deadline:
                began = time.perf_counter()
                frame.write.mode("overwrite").parquet(str(scratch / f"w{i}-{k % 2}"))
                latencies[i].append(time.perf_counter() - began)
                counts[i] += 1
                k += 1

        threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        spark.stop()
    flat = [x for per in latencies for x in per]
    return {
        "workers": workers,
        "mode": mode,
        "counts": counts,
        "jain": jain(counts),
        "jobs_per_second": sum(counts) / seconds,
        "median_latency": statistics.median(flat),
        "max_latency": max(flat),
    }


def render(results: dict[str, Any]) -> str:
    rows = []
    for config in results["configs"]:
        runs = config["runs"]
        rows.append(
            [
                config["workers"],
                config["mode"].upper(),
                " / ".join(str(c) for c in runs[len(runs) // 2]["counts"]),
                f"{statistics.median(r['jain'] for r in runs):.3f}",
                f"{statistics.median(r['jobs_per_second'] for r in runs):.1f}",
                f"{statistics.median(r['median_latency'] for r in runs):.3f}",
                f"{statistics.median(r['max_latency'] for r in runs):.2f}",
            ]
        )
    fair = [c for c in results["configs"] if c["mode"] == "fair"]
    worst = min(statistics.median(r["jain"] for r in c["runs"]) for c in fair)
    verdict = (
        f"FAIR pools shared the executors evenly in every configuration (lowest Jain index {worst:.3f}); "
        "no worker starved, so the loader keeps one FAIR pool per worker."
        if worst >= 0.95
        else f"FAIR pools were uneven (lowest Jain index {worst:.3f}): see the counts."
    )
    return (
        "## Spark FAIR pools under the loader's load pattern (`benchmarks/fair_pools.py`)\n\n"
        + machine_markdown(results["meta"], "loader")
        + f"\nEach configuration ran {results['meta']['repeats']} times for {results['meta']['seconds']:.0f} s; "
        "figures are medians over the runs (counts: the median run by fairness). Each worker thread runs "
        "back-to-back Spark appends of 5,000 rows as Parquet on `local[2]`, in its own FAIR pool "
        "(`worker-<i>`, minShare 1) or all in Spark's default FIFO pool.\n\n"
        + md_table(
            ["workers", "mode", "jobs per worker", "Jain index", "jobs/s", "median job s", "worst job s"],
            rows,
        )
        + f"\n\n{verdict}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s runs, 1 repeat, no BENCHMARKS.md")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    seconds = 5.0 if args.quick else 20.0
    repeats = args.repeats or (1 if args.quick else 3)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "repeats": repeats,
        "seconds": seconds,
        "machine": machine_info("loader"),
    }
    configs = []
    scratch = Path(tempfile.mkdtemp(prefix="fair-pools-"))
    try:
        with LoadMonitor() as monitor:
            for workers in WORKERS:
                for mode in MODES:
                    runs = []
                    for k in range(repeats):
                        log(f"{mode} pools, {workers} workers, run {k + 1}/{repeats}")
                        runs.append(run_config(workers, mode, seconds, scratch))
                    runs.sort(key=lambda r: r["jain"])
                    configs.append({"workers": workers, "mode": mode, "runs": runs})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    results = {"meta": meta, "configs": configs}
    markdown = render(results)
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "fair_pools.json", results)
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
