"""Do Spark's FAIR pools share executors fairly between the loader's workers?

    python -m benchmarks.fair_pools            # ~4 min; rewrites the fair-pools section
    python -m benchmarks.fair_pools --quick    # smoke run, prints only

The loader gives each worker its own FAIR pool (loader/loading/spark.py). Spark's FAIR
algorithm breaks ties between equally needy pools by name, which has starved later-named
pools elsewhere, so this measures it for the loader's pattern before relying on it: jobs
per worker, Jain's fairness index (1 = even, 1/P = one worker got everything), worst job.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import repeat
from testing.report import machine_markdown

WORKERS = (2, 6)
MODES = ("fair", "fifo")
T = Template("fair-pools")


def jain(counts: list[int]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2)."""
    total = sum(counts)
    squares = sum(c * c for c in counts)
    return total * total / (len(counts) * squares) if squares else 1.0


def run_config(workers: int, mode: str, seconds: float, scratch: Path) -> dict[str, Any]:
    from loader.loading.spark import use_pool

    conf = {} if mode == "fair" else {"spark.scheduler.mode": "FIFO"}
    with spark.session(app_name=f"fair-{mode}-{workers}", fair_pools=workers if mode == "fair" else 0, conf=conf) as s:
        frame = s.range(0, 5_000, numPartitions=1).selectExpr("id", "cast(id as string) as s")
        frame.write.mode("overwrite").parquet(str(scratch / "warmup"))
        counts = [0] * workers
        latencies: list[list[float]] = [[] for _ in range(workers)]
        deadline = time.monotonic() + seconds

        def work(i: int) -> None:
            if mode == "fair":
                use_pool(s, f"worker-{i}")
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


FIGURES = (("jain", ".3f"), ("jobs_per_second", ".1f"), ("median_latency", ".3f"), ("max_latency", ".2f"))


def render(results: dict[str, Any]) -> str:
    configs = results["configs"]

    def med(config: dict[str, Any], key: str) -> float:
        return statistics.median(r[key] for r in config["runs"])

    cells = [
        "{workers}",
        lambda c: c["mode"].upper(),
        lambda c: " / ".join(str(n) for n in c["runs"][len(c["runs"]) // 2]["counts"]),
        *(lambda c, k=k, f=f: format(med(c, k), f) for k, f in FIGURES),
    ]
    worst = min(med(c, "jain") for c in configs if c["mode"] == "fair")
    verdict = T.line("even" if worst >= 0.95 else "uneven", worst=worst)
    table = T.table("table", configs, cells=cells)
    return T(
        "section",
        machine=machine_markdown(results["meta"], "loader"),
        meta=results["meta"],
        table=table,
        verdict=verdict,
    )


def measure(run: Run) -> dict[str, Any]:
    seconds = 5.0 if run.args.quick else 20.0
    run.meta["seconds"] = seconds
    configs = []
    scratch = Path(tempfile.mkdtemp(prefix="fair-pools-"))
    try:
        for workers in WORKERS:
            for mode in MODES:
                label = f"{mode} pools, {workers} workers"
                runs = repeat(run.args.repeats, label, run_config, workers, mode, seconds, scratch)
                runs.sort(key=lambda r: r["jain"])
                configs.append({"workers": workers, "mode": mode, "runs": runs})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"configs": configs}


BENCHMARK = Benchmark("benchmarks.fair_pools", "fair-pools", __doc__, measure, render, repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
