"""Freshness at 50, 200 and 1,000 tables: the loader's variants against Spark Structured
Streaming, side by side in one run on this machine (issue 14, part 6).

    python -m benchmarks.freshness_at_scale                    # full run (see the estimate it prints)
    python -m benchmarks.freshness_at_scale --quick            # smoke: 10 tables x 20 s per system
    python -m benchmarks.freshness_at_scale --systems peer,before --workloads 50:0.5
    python -m benchmarks.freshness_at_scale --variants my-variants.json
    python -m benchmarks.freshness_at_scale --rerender         # re-judge saved results

For each workload (N tables, Poisson arrivals at a rate per table, 100 rows per update,
seeded) and each system (``variants.py``: the peer, the loader before issue 14 from its
own worktree, the loader with one table per job, the loader with group jobs), one after
the other: start the system, prime every table, replay the schedule while an outside
reader polls every table's commit log, drain, read everything back (``cell.py``), then
compute staleness against the ideal, latency, starvation, commits/s, CPU, the loader's
own staleness against the reader's, and integrity (``analyze.py``).

The full run writes ``benchmarks/results/freshness_at_scale.json`` after every
measurement (an interrupted run keeps what it measured) and rewrites the
``freshness-at-scale`` section of BENCHMARKS.md at the end; ``--quick`` writes
``freshness_at_scale-quick.json`` and leaves BENCHMARKS.md alone unless ``--markdown``.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path
from typing import Any

from benchmarks.freshness_at_scale import report
from benchmarks.freshness_at_scale.analyze import analyze
from benchmarks.freshness_at_scale.cell import Options, run_cell
from benchmarks.freshness_at_scale.variants import DEFAULT_VARIANTS, Variant, check_code_dir, load_variants
from benchmarks.freshness_at_scale.workload import Workload, schedule
from testing.report import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    source_fingerprint,
    write_json,
    write_section,
)

MODULE = "benchmarks.freshness_at_scale"
SECTION = "freshness-at-scale"
FULL_WORKLOADS = "50:0.5,200:0.5,1000:0.1"
QUICK_WORKLOADS = "10:0.5"
#: Warm-up: this many mean inter-arrival times of a table (the cold-start backlog settles).
WARMUP_INTERARRIVALS = 3.0


def parse_workloads(text: str, duration: float, warmup: float | None, seed: int, rows: int) -> list[Workload]:
    workloads = []
    for item in text.split(","):
        try:
            tables, rate = item.split(":")
            n, r = int(tables), float(rate)
        except ValueError:
            raise ValueError(f"workload {item!r}: write TABLES:RATE, e.g. 200:0.5") from None
        if n < 1 or r <= 0:
            raise ValueError(f"workload {item!r}: at least one table and a positive rate")
        w = warmup if warmup is not None else max(4.0, WARMUP_INTERARRIVALS / r)
        workloads.append(Workload(tables=n, rate=r, warmup=w, duration=duration, rows_per_update=rows, seed=seed))
    return workloads


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_WORKLOADS} for 20 s per system")
    parser.add_argument("--workloads", default=None, help=f"TABLES:RATE,... (default {FULL_WORKLOADS})")
    parser.add_argument("--systems", default=None, help="variant names to run, comma-separated (default: all)")
    parser.add_argument("--variants", type=Path, default=None, help="JSON list of variants replacing the default")
    parser.add_argument("--duration", type=float, default=None, help="window seconds (default 120; quick 20)")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help=f"seconds of arrivals before the window (default {WARMUP_INTERARRIVALS:g}/rate)",
    )
    parser.add_argument("--rows", type=int, default=100, help="rows per update (default 100)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--poll", type=float, default=0.05, help="outside reader's poll interval, seconds (default 0.05)"
    )
    parser.add_argument(
        "--starved-factor",
        type=float,
        default=10.0,
        help="a table is starved when an update waits more than this many mean inter-arrival times (default 10)",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=None, help="seconds after the last arrival (default 600; quick 120)"
    )
    parser.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds for a system to start")
    parser.add_argument("--prime-timeout", type=float, default=1800.0, help="seconds for every table's first update")
    parser.add_argument(
        "--keep-dir", type=Path, default=None, help="keep every run's directory (logs, tables) under DIR"
    )
    parser.add_argument("--raw", type=Path, default=None, help="also write each run's raw records into this directory")
    parser.add_argument("--json", type=Path, default=None, help="results file")
    parser.add_argument("--markdown", type=Path, default=None, help=f"file whose '{SECTION}' section to rewrite")
    parser.add_argument(
        "--rerender", action="store_true", help="measure nothing: re-judge --json and rewrite the report"
    )
    args = parser.parse_args(argv)
    if args.duration is None:
        args.duration = 20.0 if args.quick else 120.0
    if args.drain_timeout is None:
        args.drain_timeout = 120.0 if args.quick else 600.0
    if args.workloads is None:
        args.workloads = QUICK_WORKLOADS if args.quick else FULL_WORKLOADS
    try:
        args.workload_list = parse_workloads(args.workloads, args.duration, args.warmup, args.seed, args.rows)
        variants = load_variants(args.variants) if args.variants else list(DEFAULT_VARIANTS)
    except ValueError as exc:
        parser.error(str(exc))
    if args.systems:
        wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in {v.name for v in variants}]
        if unknown:
            parser.error(f"unknown systems {unknown}; variants: {', '.join(v.name for v in variants)}")
        variants = [v for v in variants if v.name in wanted]
    args.variant_list = variants
    if args.json is None:
        args.json = RESULTS_DIR / ("freshness_at_scale-quick.json" if args.quick else "freshness_at_scale.json")
    if args.markdown is None and not args.quick:
        args.markdown = BENCHMARKS_MD
    return args


def estimate_seconds(workloads: list[Workload], variants: list[Variant]) -> float:
    """A rough duration from smoke runs on 2 busy cores: start-up, priming, arrivals, drain,
    read-back and stop per measurement (the peer's priming and drain grow fastest)."""
    total = 0.0
    for w in workloads:
        n = w.tables
        for v in variants:
            if v.kind == "peer":
                total += (20 + 0.15 * n) + 0.45 * n + w.horizon + min(600.0, 30 + 0.6 * n) + 10
            else:
                total += (25 + 0.03 * n) + (5 + n / 10) + w.horizon + (10 + n / 100) + 0.05 * n + 5
    return total


def measure(variant: Variant, workload: Workload, options: Options, args: argparse.Namespace) -> dict[str, Any]:
    """One system under one workload: its figures, or the error that stopped it."""
    cell: dict[str, Any] = {"variant": variant.name, "loadavg_start": load_average()}
    started = time.perf_counter()
    with LoadMonitor() as load:
        try:
            record = run_cell(variant, workload, options)
            if args.raw is not None:
                args.raw.mkdir(parents=True, exist_ok=True)
                write_json(args.raw / f"{workload.tables}-{variant.name}.json", record)
            cell["system"] = record.get("system")
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
    cell["run_seconds"] = time.perf_counter() - started
    cell["loadavg_peak"] = load.peak
    return cell


def finish(results: dict[str, Any], args: argparse.Namespace) -> None:
    results["targets"] = report.evaluate_targets(results)
    results["notes"] = report.build_notes(results)
    write_json(args.json, results)
    if args.markdown is not None:
        write_section(SECTION, report.render_markdown(results), args.markdown)
        log(f"wrote section '{SECTION}' of {args.markdown}")
    report.print_console(results)


def _floats(value: Any) -> Any:
    """Saved results back to numbers: strict JSON holds inf and nan as strings."""
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return value


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so every system and helper process is stopped on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    if args.rerender:
        finish(_floats(json.loads(args.json.read_text(encoding="utf-8"))), args)
        return 0
    for variant in args.variant_list:
        try:
            check_code_dir(variant)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    began = time.perf_counter()
    machine = machine_info("loader")
    options = Options(
        poll_interval=args.poll,
        drain_timeout=args.drain_timeout,
        ready_timeout=args.ready_timeout,
        prime_timeout=args.prime_timeout,
        starved_factor=args.starved_factor,
        keep_dir=args.keep_dir,
    )
    results: dict[str, Any] = {
        "meta": {"command": command_line(MODULE, argv), "quick": args.quick, "machine": machine, "run_seconds": 0.0},
        "options": {
            "poll_interval": args.poll,
            "drain_timeout": args.drain_timeout,
            "starved_factor": args.starved_factor,
            "rows_per_update": args.rows,
            "seed": args.seed,
            "full_command": f"python -m {MODULE}",
        },
        "variants": [v.to_json() for v in args.variant_list],
        "workloads": [],
    }
    estimate = estimate_seconds(args.workload_list, args.variant_list)
    log(
        f"freshness at scale: {', '.join(w.name for w in args.workload_list)} x "
        f"{', '.join(v.name for v in args.variant_list)}; roughly {fmt_duration(estimate)} (estimate)"
    )
    with LoadMonitor() as monitor:
        for workload in args.workload_list:
            entry: dict[str, Any] = {
                "workload": workload.to_json(),
                "updates": len(schedule(workload)),
                "cells": [],
            }
            results["workloads"].append(entry)
            for variant in args.variant_list:
                entry["cells"].append(measure(variant, workload, options, args))
                results["meta"]["run_seconds"] = time.perf_counter() - began
                write_json(args.json, results)
    meta = results["meta"]
    meta["run_seconds"] = time.perf_counter() - began
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
    finish(results, args)
    log(f"done in {fmt_duration(meta['run_seconds'])}; raw results: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
