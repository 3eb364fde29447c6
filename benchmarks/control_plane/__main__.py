"""Benchmark of the control plane at 1,000 and 10,000 tables, and of partitioning 100,000.

    python -m benchmarks.control_plane              # full run, ~15 min on 2 cores
    python -m benchmarks.control_plane --quick      # smoke run, ~2 min
    python -m benchmarks.control_plane --skip registration,reads,partitioning   # dispatch again
    python -m benchmarks.control_plane --rerender   # rewrite the report from the saved results

The full run rewrites the ``control-plane`` section of BENCHMARKS.md and
``benchmarks/results/control_plane.json``; the quick run writes ``control_plane-quick.json``
and leaves BENCHMARKS.md alone (unless ``--markdown FILE``). Parts left out with ``--skip``
keep their figures (and the date and load they were measured at) from the results file.

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

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.control_plane import dispatch, partitioning, reads
from benchmarks.control_plane import report as report
from testing.report import (
    BENCHMARKS_MD,
    REPO_ROOT,
    RESULTS_DIR,
    LoadMonitor,
    fmt_duration,
    load_average,
    log,
    machine_info,
    run_meta,
    source_fingerprint,
    write_json,
    write_section,
)

MODULE = "benchmarks.control_plane"
SECTION = "control-plane"
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
            runs = []
            for k in range(repeats):
                log(f"registration: {mode}, {tables:,} tables, run {k + 1}/{repeats}")
                runs.append(_registration_run(mode, tables))
            out[mode].append({"tables": tables, "runs": runs})
    return out


def run_dispatch(sizes: list[int], policies: list[str], decisions: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"decisions": decisions, "repeats": repeats, "workers": 2, "rows": []}
    for tables in sizes:
        for policy in policies:
            for inline in (True, False):
                runs = []
                for _ in range(repeats):
                    runs.append(
                        dispatch.measure(
                            tables, policy, workers=2, warmup=decisions // 5, decisions=decisions, inline=inline
                        )
                    )
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,000 tables only, fewer repeats")
    parser.add_argument("--skip", default="", help=f"parts to leave out, comma-separated ({', '.join(PARTS)})")
    parser.add_argument("--sizes", default=None, help="table counts, comma-separated (default 1000,10000)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure (default 3; quick 1)")
    parser.add_argument("--markdown", type=Path, default=None, help="file whose section to rewrite")
    parser.add_argument("--json", type=Path, default=None, help="raw results file")
    parser.add_argument("--rerender", action="store_true", help="rebuild the report from the saved results")
    args = parser.parse_args(argv)
    if args.json is None:
        args.json = RESULTS_DIR / ("control_plane-quick.json" if args.quick else "control_plane.json")
    if args.markdown is None and not args.quick:
        args.markdown = BENCHMARKS_MD
    if args.rerender:
        saved = json.loads(args.json.read_text(encoding="utf-8"))
        return _publish(saved, args)
    repeats = args.repeats or (1 if args.quick else 3)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([1000] if args.quick else [1000, 10_000])
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    began = time.perf_counter()
    machine = machine_info("loader")
    machine["api_sha256"] = source_fingerprint("api")
    results: dict[str, Any] = {}
    if skip and args.json.exists():  # the parts not run now keep their figures from the last run
        earlier = json.loads(args.json.read_text(encoding="utf-8"))
        results.update({part: earlier[part] for part in PARTS if part in skip and part in earlier})
    runners = {
        "registration": lambda: run_registration(sizes, repeats),
        "dispatch": lambda: run_dispatch(
            sizes, ["myopic"] if args.quick else list(POLICIES), 5_000 if args.quick else 20_000, repeats
        ),
        "reads": lambda: run_reads(sizes, 3 if args.quick else 5),
        "partitioning": lambda: run_partitioning(args.quick),
    }
    with LoadMonitor() as load:
        for part, run in runners.items():
            if part in skip:
                continue
            with LoadMonitor(interval=2.0) as during:
                results[part] = run()
            results[part]["measured"] = {
                "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "git_commit": machine["git_commit"],
                "loadavg_peak": during.peak,
                "loadavg_end": load_average(),
            }
    results["meta"] = run_meta(MODULE, argv, machine, began, load, quick=args.quick, sizes=sizes)
    log(f"control-plane benchmark took {fmt_duration(time.perf_counter() - began)}")
    return _publish(results, args)


def _publish(results: dict[str, Any], args: argparse.Namespace) -> int:
    if not args.rerender:
        write_json(args.json, results)
        log(f"wrote {args.json}")
    report.print_console(results)
    if args.markdown is not None:
        write_section(SECTION, report.markdown(results), args.markdown)
        log(f"wrote the {SECTION} section of {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
