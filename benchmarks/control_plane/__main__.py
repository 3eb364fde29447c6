"""Benchmark of the control plane at 1,000 and 10,000 tables, and of partitioning 100,000.

    python -m benchmarks.control_plane              # full run, ~15 min on 2 cores
    python -m benchmarks.control_plane --quick      # smoke run, ~2 min
    python -m benchmarks.control_plane --skip registration,reads,partitioning   # dispatch again
    python -m benchmarks.control_plane --rerender   # rewrite the report from the saved results

Parts left out with ``--skip`` keep their figures (and the date and load they were
measured at) from the results file.

Parts (each module's docstring says exactly what is timed):

1. registration (``registration.py``, a process per measurement): the configuration file's
   N tables at start-up (first start and restart), and one ``POST /v1/admin/tables:bulk``.
2. dispatch (``dispatch.py``): one decision of the live dispatcher, its own work (inline)
   and with the worker threads' hand-offs, per policy.
3. reads (``reads.py``): a /metrics scrape with every table's series and with the top-k,
   and pages of GET /v1/tables.
4. partitioning (``partitioning.py``): 100,000 tables over k instances in the simulator.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.control_plane import dispatch, partitioning, reads, report
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.results import repeat
from testing.report import REPO_ROOT, LoadMonitor, load_average, log

MODULE = "benchmarks.control_plane"
PARTS = ("registration", "dispatch", "reads", "partitioning")
POLICIES = ("myopic", "max-benefit", "fifo")


def _registration_run(mode: str, tables: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-m", f"{MODULE}.registration", mode, "--tables", str(tables)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"registration {mode} {tables} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def run_registration(sizes: list[int], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"repeats": repeats, "config": [], "bulk": []}
    for tables in sizes:
        for mode in ("config", "bulk"):
            runs = repeat(repeats, f"registration: {mode}, {tables:,} tables", _registration_run, mode, tables)
            out[mode].append({"tables": tables, "runs": runs})
    return out


def run_dispatch(sizes: list[int], policies: list[str], decisions: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"decisions": decisions, "repeats": repeats, "workers": 2, "rows": []}
    for tables in sizes:
        for policy in policies:
            for inline in (True, False):
                warmup = decisions // 5
                runs = [
                    dispatch.measure(tables, policy, workers=2, warmup=warmup, decisions=decisions, inline=inline)
                    for _ in range(repeats)
                ]
                us = [r["us_per_decision"] for r in runs]
                mode = "inline" if inline else "threads"
                log(f"dispatch: {tables:,} tables, {policy}, {mode}: {statistics.median(us):.1f} µs/decision")
                out["rows"].append(
                    {
                        "tables": tables,
                        "policy": policy,
                        "mode": mode,
                        "median_us": statistics.median(us),
                        "all_us": us,
                        "setup_s": statistics.median(r["setup_s"] for r in runs),
                    }
                )
    return out


def run_reads(sizes: list[int], repeats: int) -> dict[str, Any]:
    rows = []
    for tables in sizes:
        log(f"reads: {tables:,} tables")
        rows.append(reads.measure(tables, repeats))
    return {"repeats": repeats, "top_k": reads.TOP_K, "rows": rows}


def run_partitioning(quick: bool) -> dict[str, Any]:
    if quick:
        tables, horizon, configurations = 10_000, 600.0, [(1, 2), (10, 2), (1, 20)]
    else:
        tables, horizon = 100_000, 1200.0
        configurations = [(1, 2), (10, 2), (50, 2), (100, 2), (1, 200), (10, 20)]
    log(f"partitioning: {tables:,} tables, {len(configurations)} configurations")
    return partitioning.measure(tables, 0.01, horizon, 0.2, configurations)


def measure(run: Run) -> dict[str, Any]:
    args, quick = run.args, run.args.quick
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([1000] if quick else [1000, 10_000])
    run.meta["sizes"] = sizes
    earlier = run.previous() if args.skip else {}  # the parts not run now keep their figures from the last run
    results: dict[str, Any] = {part: earlier[part] for part in PARTS if part in args.skip and part in earlier}
    runners = {
        "registration": lambda: run_registration(sizes, args.repeats),
        "dispatch": lambda: run_dispatch(
            sizes, ["myopic"] if quick else list(POLICIES), 5_000 if quick else 20_000, args.repeats
        ),
        "reads": lambda: run_reads(sizes, 3 if quick else 5),
        "partitioning": lambda: run_partitioning(quick),
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
            "loadavg_end": load_average(),
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
