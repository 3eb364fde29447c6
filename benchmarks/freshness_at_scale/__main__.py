"""Freshness at 50, 200 and 1,000 tables: the loader's variants against Spark Structured
Streaming, side by side in one run on this machine (issue 14, part 6).

    python -m benchmarks.freshness_at_scale                    # full run (see the estimate it prints)
    python -m benchmarks.freshness_at_scale --quick            # smoke: 10 tables x 20 s per system
    python -m benchmarks.freshness_at_scale --systems peer,before --workloads 50:0.5
    python -m benchmarks.freshness_at_scale --variants my-variants.json
    python -m benchmarks.freshness_at_scale --rerender         # re-judge saved results

Per workload and system (``variants.py``), one after the other: ``cell.py`` measures,
``analyze.py`` computes the figures. The results file is written after every measurement
(an interrupted run keeps what it measured), the section at the end.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.freshness_at_scale import report
from benchmarks.freshness_at_scale.analyze import analyze
from benchmarks.freshness_at_scale.cell import run_cell
from benchmarks.freshness_at_scale.variants import DEFAULT_VARIANTS, Variant, check_code_dir, load_variants
from benchmarks.freshness_at_scale.workload import Workload, schedule
from benchmarks.harness.cli import Benchmark, Run
from testing.report import LoadMonitor, fmt_duration, log, write_json

MODULE = "benchmarks.freshness_at_scale"
FULL_WORKLOADS = "50:0.5,200:0.5,1000:0.1"
QUICK_WORKLOADS = "10:0.5"
#: Warm-up: this many mean inter-arrival times of a table (the cold-start backlog settles).
WARMUP_INTERARRIVALS = 3.0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", help=f"TABLES:RATE,... (default {FULL_WORKLOADS}; quick {QUICK_WORKLOADS})")
    parser.add_argument("--systems", help="variant names to run, comma-separated (default: all)")
    parser.add_argument("--variants", type=Path, help="JSON list of variants replacing the default")
    parser.add_argument(
        "--warmup", type=float, help=f"seconds of arrivals before the window (default {WARMUP_INTERARRIVALS:g}/rate)"
    )
    parser.add_argument("--rows", type=int, default=100, help="rows per update (default 100)")
    parser.add_argument("--poll", type=float, default=0.05, help="outside reader's poll interval, seconds")
    parser.add_argument(
        "--starved-factor",
        type=float,
        default=10.0,
        help="a table is starved when an update waits more than this many mean inter-arrival times (default 10)",
    )
    parser.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds for a system to start")
    parser.add_argument("--prime-timeout", type=float, default=1800.0, help="seconds for every table's first update")
    parser.add_argument("--keep-dir", type=Path, help="keep every run's directory (logs, tables) under DIR")
    parser.add_argument("--raw", type=Path, help="also write each run's raw records into this directory")


def plan(args: argparse.Namespace) -> tuple[list[Workload], list[Variant]]:
    """The workloads and the systems to run (SystemExit for a wrong argument)."""
    try:
        workloads = []
        for item in (args.workloads or (QUICK_WORKLOADS if args.quick else FULL_WORKLOADS)).split(","):
            try:
                tables, rates = item.split(":")
                n, rate = int(tables), float(rates)
            except ValueError:
                raise ValueError(f"workload {item!r}: write TABLES:RATE, e.g. 200:0.5") from None
            if n < 1 or rate <= 0:
                raise ValueError(f"workload {item!r}: at least one table and a positive rate")
            warmup = args.warmup if args.warmup is not None else max(4.0, WARMUP_INTERARRIVALS / rate)
            workloads.append(Workload(n, rate, warmup, args.duration, args.rows, args.seed))
        variants = load_variants(args.variants) if args.variants else list(DEFAULT_VARIANTS)
        if args.systems:
            wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
            if unknown := [s for s in wanted if s not in {v.name for v in variants}]:
                raise ValueError(f"unknown systems {unknown}; variants: {', '.join(v.name for v in variants)}")
            variants = [v for v in variants if v.name in wanted]
        for variant in variants:
            check_code_dir(variant)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return workloads, variants


def estimate_seconds(workloads: list[Workload], variants: list[Variant]) -> float:
    """A rough duration from smoke runs on 2 busy cores: start-up, priming, arrivals, drain,
    read-back and stop per measurement (the peer's priming and drain grow fastest)."""
    total = 0.0
    for w, v in itertools.product(workloads, variants):
        n = w.tables
        if v.kind == "peer":
            total += (20 + 0.15 * n) + 0.45 * n + w.horizon + min(600.0, 30 + 0.6 * n) + 10
        else:
            total += (25 + 0.03 * n) + (5 + n / 10) + w.horizon + (10 + n / 100) + 0.05 * n + 5
    return total


def measure_cell(variant: Variant, workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """One system under one workload: its figures, or the error that stopped it."""
    cell: dict[str, Any] = {"variant": variant.name}
    with LoadMonitor() as load:
        try:
            record = run_cell(variant, workload, args)
            if args.raw is not None:
                write_json(args.raw / f"{workload.tables}-{variant.name}.json", record)
            cell["figures"] = f = analyze(record, args.starved_factor)
            log(
                f"[{workload.name}] {variant.name}: mean staleness {f['mean_staleness']:.2f} s, ideal "
                f"{f['ideal_mean_staleness']:.2f} s, ratio {f['ratio']:.2f}, p99 latency "
                f"{f['latency_p99']:.2f} s, starved {f['starved']}, {f['commits_per_second']:.1f} commits/s, "
                f"integrity {'ok' if f['integrity']['ok'] else 'PROBLEM'}"
            )
        except Exception as exc:  # noqa: BLE001 - one failed system must not lose the others
            cell["error"] = f"{type(exc).__name__}: {exc}"[:3000]
            log(f"[{workload.name}] {variant.name}: FAILED {cell['error']}")
    cell["loadavg_peak"] = load.peak
    return cell


def measure(run: Run) -> dict[str, Any]:
    # SIGTERM unwinds like Ctrl-C, so every system and helper process is stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args = run.args
    workloads, variants = plan(args)
    results: dict[str, Any] = {
        "options": {
            "poll_interval": args.poll,
            "drain_timeout": args.drain_timeout,
            "starved_factor": args.starved_factor,
            "rows_per_update": args.rows,
            "seed": args.seed,
            "full_command": f"python -m {MODULE}",
        },
        "variants": [v.to_json() for v in variants],
        "workloads": [],
    }
    began = time.perf_counter()
    log(
        f"freshness at scale: {', '.join(w.name for w in workloads)} x {', '.join(v.name for v in variants)}; "
        f"roughly {fmt_duration(estimate_seconds(workloads, variants))} (estimate)"
    )
    for workload in workloads:
        entry: dict[str, Any] = {"workload": asdict(workload), "updates": len(schedule(workload)), "cells": []}
        results["workloads"].append(entry)
        for variant in variants:
            entry["cells"].append(measure_cell(variant, workload, args))
            run.meta["run_seconds"] = time.perf_counter() - began
            run.save(results)  # an interrupted run keeps what it measured
    return results


def judge(results: dict[str, Any]) -> None:
    results["targets"] = report.evaluate_targets(results)
    results["notes"] = report.build_notes(results)


BENCHMARK = Benchmark(
    MODULE,
    "freshness-at-scale",
    __doc__,
    measure,
    report.render_markdown,
    quick_saves=True,
    seed=14,
    counts={"duration": (20.0, 120.0, "window seconds"), "drain_timeout": (120.0, 600.0, "seconds after the arrivals")},
    options=options,
    finish=judge,
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
