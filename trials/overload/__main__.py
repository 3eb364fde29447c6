"""Overload trial: intake driven well above what the workers can load, then relieved.

    python -m trials.overload                 # 3 min of overload, ~6 min; rewrites RELIABILITY.md
    python -m trials.overload --quick         # 45 s of overload, ~2 min; results/overload-quick.json only
    python -m trials.overload --minutes 5     # longer overload phase
    python -m trials.overload --rerender      # the saved results again (and their section)

The trial itself (plans, load generator, sampler, verdicts) is ``testing/overload.py``;
this script runs it and renders its section of RELIABILITY.md (``trials/overload/report.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from testing.overload import all_pass, analyse, long_plan, quick_plan, run_trial
from testing.report import (
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    source_fingerprint,
    write_json,
)
from trials.overload import report
from trials.reliability import RESULTS_DIR, write_reliability

MODULE = "trials.overload"
SECTION = "overload"


# -- main -------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="minutes of overload (default 3; not with --quick)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="45 s of overload with smaller budgets; writes results/overload-quick.json and leaves "
        "RELIABILITY.md alone unless --write",
    )
    parser.add_argument("--write", action="store_true", help="rewrite the RELIABILITY.md section even with --quick")
    parser.add_argument("--no-write", action="store_true", help="leave RELIABILITY.md alone")
    parser.add_argument("--json", type=Path, default=None, help="results (default trials/results/overload*.json)")
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="measure nothing: print the saved results (--json) again and rewrite the section from them",
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.json is None:
        args.json = RESULTS_DIR / ("overload-quick.json" if args.quick else "overload.json")
    return args


def saved(results: dict[str, Any]) -> dict[str, Any]:
    """What goes to the JSON file: setup, figures, verdicts and the per-second timeline; not
    the per-request records, samples and row ids (megabytes, summarised by the analysis)."""
    trial = {k: v for k, v in results["trial"].items() if k not in ("records", "delta_ids", "samples")}
    return {**results, "trial": trial}


def latest_quick() -> dict[str, Any] | None:
    path = RESULTS_DIR / "overload-quick.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        results = json.loads(args.json.read_text(encoding="utf-8"))
        if not args.no_write and (args.write or not results["meta"]["quick"]):
            write_reliability(SECTION, report.render_markdown(results, latest_quick()))
            log(f"wrote section '{SECTION}' of RELIABILITY.md from {args.json}")
        report.print_console(results)
        return 0 if all_pass(results["analysis"]) else 1
    plan = quick_plan() if args.quick else long_plan(args.minutes)
    started = time.perf_counter()
    machine = machine_info("loader")
    meta: dict[str, Any] = {"command": command_line(MODULE, argv), "quick": args.quick, "machine": machine}
    with LoadMonitor() as monitor:
        trial = run_trial(plan)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
    results = {"meta": meta, "trial": trial, "analysis": analyse(trial)}
    write_json(args.json, saved(results))
    log(f"results: {args.json}")
    if not args.no_write and (args.write or not args.quick):
        write_reliability(SECTION, report.render_markdown(results, latest_quick()))
        log(f"wrote section '{SECTION}' of RELIABILITY.md")
    report.print_console(results)
    log(f"done in {fmt_duration(meta['run_seconds'])}")
    return 0 if all_pass(results["analysis"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
