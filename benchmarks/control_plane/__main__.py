"""Benchmark of the control plane at 1,000 and 10,000 tables, and of partitioning 100,000.

    python -m benchmarks.control_plane              # full run, ~15 min on 2 cores
    python -m benchmarks.control_plane --quick      # smoke run, ~1 min
    python -m benchmarks.control_plane --skip registration,reads,partitioning   # dispatch again
    python -m benchmarks.control_plane --rerender   # rewrite the report from the saved results

Parts (each module's docstring says what is timed): registration, dispatch, reads and
partitioning. Those left out with ``--skip`` keep their figures (and the date and load they
were measured at) from the results file.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from benchmarks.control_plane import dispatch, partitioning, reads, report
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.results import repeat
from testing.report import LoadMonitor, median
from testing.service_server import run_child

MODULE = "benchmarks.control_plane"
PARTS = ("registration", "dispatch", "reads", "partitioning")


def run_registration(sizes: list[int], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"repeats": repeats, "config": [], "bulk": []}
    for tables, mode in itertools.product(sizes, ("config", "bulk")):
        label = f"registration: {mode}, {tables:,} tables"
        runs = repeat(repeats, label, run_child, f"{MODULE}.registration", {"mode": mode, "tables": tables}, 3600)
        out[mode].append({"tables": tables, "runs": runs})
    return out


def run_dispatch(sizes: list[int], policies: list[str], decisions: int, repeats: int) -> dict[str, Any]:
    rows = []
    for tables, policy, mode in itertools.product(sizes, policies, ("inline", "threads")):
        label = f"dispatch: {tables:,} tables, {policy}, {mode}"
        us = repeat(repeats, label, dispatch.measure, tables, policy, decisions, mode == "inline")
        rows.append({"tables": tables, "policy": policy, "mode": mode, "median_us": median(us), "all_us": us})
    return {"decisions": decisions, "repeats": repeats, "workers": dispatch.WORKERS, "rows": rows}


def measure(run: Run) -> dict[str, Any]:
    args, quick = run.args, run.args.quick
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([1000] if quick else [1000, 10_000])
    run.meta["sizes"] = sizes
    earlier = run.previous() if args.skip else {}  # the parts not run now keep their figures from the last run
    results: dict[str, Any] = {part: earlier[part] for part in PARTS if part in args.skip and part in earlier}
    policies = ["myopic"] if quick else ["myopic", "max-benefit", "fifo"]
    r = 3 if quick else 5  # reads
    runners = {
        "registration": lambda: run_registration(sizes, args.repeats),
        "dispatch": lambda: run_dispatch(sizes, policies, 5_000 if quick else 20_000, args.repeats),
        "reads": lambda: {"repeats": r, "top_k": reads.TOP_K, "rows": [reads.measure(n, r) for n in sizes]},
        "partitioning": lambda: partitioning.measure(quick),
    }
    for part, measure_part in runners.items():
        if part in args.skip:
            continue
        with LoadMonitor(interval=2.0) as during:
            results[part] = measure_part()
        results[part]["measured"] = {
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "git_commit": run.meta["machine"]["git_commit"],
            "loadavg_peak": during.peak,
        }
    return results


BENCHMARK = Benchmark(
    MODULE,
    "control-plane",
    __doc__,
    measure,
    report.markdown,
    fingerprints=("api",),
    quick_saves=True,
    repeats=(1, 3),
    parts=PARTS,
    options=lambda parser: parser.add_argument("--sizes", help="table counts, comma-separated (default 1000,10000)"),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
