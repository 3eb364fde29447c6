"""Do Spark's FAIR pools share executors fairly between the loader's workers?

The loader gives each worker its own FAIR pool (loader/loading/spark.py). Spark's FAIR
algorithm breaks ties between equally needy pools by name, which has starved later-named
pools elsewhere, so this measures it for the loader's pattern before relying on it: jobs
per worker, Jain's fairness index (1 = even, 1/P = one worker got everything), worst job.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians, repeat
from testing.report import machine_markdown

T = Template("fair-pools")


def run_config(workers: int, mode: str, seconds: float, scratch: Path) -> dict[str, Any]:
    from loader.loading.spark import use_pool

    conf = {} if mode == "fair" else {"spark.scheduler.mode": "FIFO"}
    with spark.session(app_name=f"fair-{mode}-{workers}", fair_pools=workers if mode == "fair" else 0, conf=conf) as s:
        frame = s.range(0, 5_000, numPartitions=1).selectExpr("id", "cast(id as string) as s")
        frame.write.mode("overwrite").parquet(str(scratch / "warmup"))
        latencies: list[list[float]] = [[] for _ in range(workers)]
        deadline = time.monotonic() + seconds

        def work(i: int) -> None:
            if mode == "fair":
                use_pool(s, f"worker-{i}")
            while time.monotonic() < deadline:
                began = time.perf_counter()
                frame.write.mode("overwrite").parquet(str(scratch / f"w{i}-{len(latencies[i]) % 2}"))
                latencies[i].append(time.perf_counter() - began)

        with ThreadPoolExecutor(workers) as threads:  # a thread per worker, each in its own pool
            list(threads.map(work, range(workers)))
    counts = [len(per) for per in latencies]
    flat = [x for per in latencies for x in per]
    jain = sum(counts) ** 2 / (workers * sum(c * c for c in counts)) if any(counts) else 1.0
    out = {"workers": workers, "mode": mode, "counts": counts, "jain": jain, "jobs_per_second": sum(counts) / seconds}
    return out | {"median_latency": statistics.median(flat), "max_latency": max(flat)}


def render(results: dict[str, Any]) -> str:
    figures = ("jain", "jobs_per_second", "median_latency", "max_latency")
    rows = []
    for c in results["configs"]:
        counts = " / ".join(map(str, c["runs"][len(c["runs"]) // 2]["counts"]))  # runs: sorted by fairness
        rows.append(c | medians(c["runs"], figures) | {"mode": c["mode"].upper(), "counts": counts})
    worst = min(r["jain"] for r in rows if r["mode"] == "FAIR")
    verdict = T.line("even" if worst >= 0.95 else "uneven", worst=worst)
    machine = machine_markdown(results["meta"], "loader")
    return T("section", machine=machine, meta=results["meta"], table=T.table("table", rows), verdict=verdict)


def measure(run: Run) -> dict[str, Any]:
    seconds = run.meta["seconds"] = 5.0 if run.args.quick else 20.0
    configs = []
    with tempfile.TemporaryDirectory(prefix="fair-pools-", ignore_cleanup_errors=True) as scratch:
        for workers in (2, 6):
            for mode in ("fair", "fifo"):
                label = f"{mode} pools, {workers} workers"
                runs = repeat(run.args.repeats, label, run_config, workers, mode, seconds, Path(scratch))
                configs.append({"workers": workers, "mode": mode, "runs": sorted(runs, key=lambda r: r["jain"])})
    return {"configs": configs}


BENCHMARK = Benchmark(measure, render, repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
