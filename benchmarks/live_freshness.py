"""Freshness at 50 to 10,000 tables, the live service beside its own simulator (issue 37).

Each cell is one ``loader serve`` under one workload of ``benchmarks/freshness_at_scale``
(N tables, Poisson arrivals, 100 rows an update, an outside reader of the Delta logs), run
by that benchmark's ``run_cell``; afterwards the service's own exports are read: the trace,
the schedule and the jobs' timelines (``GET /v1/admin/jobs``). From them:

- the stage costs the timelines measure (``schedulers.stage_costs.fit_stage_costs``), and the
  simulator's prediction for the same trace and window with those costs and the estimates
  the service exported (``simulate(..., stages=...)``), as an outside reader would see it;
- the same prediction with the table-level model alone (every table of a job visible at its
  end, the durations the estimates predict): what ``loader compare`` said before;
- one timeline plot per cell (``benchmarks/results/live_freshness/``).

Variants: ``after`` (default settings) and, at one size, the settings before issue 37 and each
change of it alone on top of them, so that each is measured against the others in one run.
A full run takes about two hours on 2 cores; ``--quick``: 50 tables, 30 s, one run.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import signal
import statistics
import time
from collections import defaultdict
from typing import Any

from benchmarks.freshness_at_scale import systems
from benchmarks.freshness_at_scale.__main__ import analyze
from benchmarks.freshness_at_scale.systems import Variant, Workload
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template, bullets
from benchmarks.harness.timeline_plot import plot_timeline, read_jobs, summary
from loader.loading.spark import DEFAULT_LEAN
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.stage_costs import StageCosts, fit_stage_costs
from schedulers.traces import parse_trace
from testing.observed_staleness import ObservedUpdate, summarize
from testing.report import RESULTS_DIR, log, machine_markdown

#: The changes of issue 37, each a setting: measured alone on top of the settings before it.
NEW_LEAN = ("parallel_tables", "known_commits", "direct_commit")
BEFORE_LEAN = sorted(DEFAULT_LEAN - set(NEW_LEAN))


def _lean(names: list[str]) -> dict[str, str]:
    return {"LOADER_SPARK__LEAN_WRITES": json.dumps(names)}


BEFORE_ENV = _lean(BEFORE_LEAN) | {"LOADER_LOADING__CHECKPOINT_INTERVAL": "0"}
VARIANTS: dict[str, Variant] = {
    "after": Variant("after", "loader", label="after issue 37: default settings"),
    "before": Variant(
        "before",
        "loader",
        label="before issue 37: none of its changes (lean writes as before, Delta's checkpoint interval)",
        env=BEFORE_ENV,
    ),
    **{
        f"+{name}": Variant(
            f"+{name}", "loader", label=f"before, with `{name}` alone", env=BEFORE_ENV | _lean([*BEFORE_LEAN, name])
        )
        for name in NEW_LEAN
    },
    "+checkpoint_interval": Variant(
        "+checkpoint_interval",
        "loader",
        label="before, with `[loading] checkpoint_interval` = 20 alone",
        env=BEFORE_ENV | {"LOADER_LOADING__CHECKPOINT_INTERVAL": "20"},
    ),
}
FULL_WORKLOADS = "50:0.5,200:0.5,1000:0.1,10000:0.01"
#: Where the changes are measured one by one (the busiest per-table load of the sizes).
CHANGES_AT = 200
PLOTS = RESULTS_DIR / "live_freshness"
#: Targets: staleness ratio to the ideal by table count; live within 15% of the simulator.
RATIO_TARGETS = {50: 1.1, 200: 1.2, 1000: 1.2, 10000: 1.5}
PREDICTION_TOLERANCE = 0.15
#: Seconds of arrivals before the window: past the priming's cold Spark jobs (measured at 200
#: tables: the first 10 s after the start of the arrivals ran at half the later throughput).
WARMUP = 30.0


def options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workloads", help=f"TABLES:RATE,... (default {FULL_WORKLOADS}; quick 50:0.5)")
    add("--variants", help=f"at {CHANGES_AT} tables (default: all of {', '.join(VARIANTS)}); other sizes run `after`")
    add("--runs", type=int, help="runs of `after` per size (default 3; quick 1); the changes run once each")
    add("--rows", type=int, default=100, help="rows per update (default 100)")


def _poll(tables: int) -> float:
    """The outside reader's poll interval: 50 ms up to 200 tables, longer beyond (its stat of
    every table's log must not take a core from the system it measures); at most 1 s."""
    return min(1.0, max(0.05, 0.05 * tables / 200))


def predict(exports: dict[str, Any], window: tuple[float, float], stages: StageCosts | None) -> dict[str, Any]:
    """The simulator's staleness for the exported trace over the window, as the outside reader
    would compute it (an update visible when the simulated batch holding it ends)."""
    origin = float(exports["origin"])
    trace = parse_trace([line for line in exports["trace"].splitlines() if line.strip()])
    headers = exports["headers"]
    overhead = float(headers["X-Loader-Job-Overhead"])
    policy = make_policy("myopic", max_tables_per_job=32)
    began = time.perf_counter()
    result = simulate(
        trace, policy, int(headers["X-Loader-Workers"]), record_schedule=True, job_overhead=overhead, stages=stages
    )
    assert result.schedule is not None
    names = [t.name for t in trace.tables]
    releases: dict[str, list[float]] = defaultdict(list)
    for tid, release in zip(trace.update_tables, trace.update_releases):
        releases[names[tid]].append(release)
    batches: dict[str, list[Any]] = defaultdict(list)
    for batch in result.schedule:
        batches[batch.table].append(batch)
    observed: dict[str, list[ObservedUpdate]] = {}
    for name in names:  # an update is visible from the end of the first batch reaching it
        done = sorted(batches[name], key=lambda b: b.finish)
        lasts = [b.last_release for b in done]
        updates = []
        for release in releases[name]:
            k = bisect.bisect_left(lasts, release)
            updates.append(ObservedUpdate(release + origin, done[k].finish + origin if k < len(done) else None))
        observed[name] = updates
    base = {name: (releases[name][0] + origin if releases[name] else window[0]) for name in names}
    figures = summarize(observed, window[0], window[1], base, starved_after=math.inf)
    return {
        "ratio": figures.ratio,
        "mean_staleness": figures.mean_staleness,
        "latency_p99": figures.latency_p99,
        "job_overhead": overhead,
        "policy": headers["X-Loader-Policy"],
        "seconds": time.perf_counter() - began,
    }


def measure_cell(variant: Variant, workload: Workload, run_index: int, args: argparse.Namespace) -> dict[str, Any]:
    cell: dict[str, Any] = {"variant": variant.name, "run": run_index}
    try:
        cell_args = argparse.Namespace(poll=_poll(workload.tables), drain_timeout=args.drain_timeout, exports=True)
        record = systems.run_cell(variant, workload, cell_args)
        figures = analyze(record)
        window = (record["window"][0], record["window"][1])
        exports = record["exports"]
        jobs = read_jobs(exports["jobs"])
        inside = [j for j in jobs if window[0] <= j.marks["chosen"] and j.marks["reported"] <= window[1]]
        stages = fit_stage_costs(m for j in inside if (m := j.measured()) is not None)
        keep = ("ratio", "mean_staleness", "ideal_mean_staleness", "latency_p50", "latency_p99", "starved")
        cell["figures"] = {k: figures[k] for k in keep} | {
            "commits_per_second": figures["commits_per_second"],
            "integrity_ok": figures["integrity"]["ok"],
            "updates": figures["integrity"]["expected_updates"],
            "own": figures.get("own_staleness"),
            "poll": cell_args.poll,
        }
        cell["stages"] = stages.as_dict()
        cell["timeline"] = summary(jobs, window)
        cell["predicted"] = predict(exports, window, stages)
        cell["predicted_table_model"] = predict(exports, window, None)
        if run_index == 0:
            plot = PLOTS / f"{workload.tables}-{variant.name.lstrip('+')}.png"
            title = f"{workload.tables:,} tables at {workload.rate:g}/s, {variant.name}: ratio {figures['ratio']:.2f}"
            cell["timeline"]["shares"] = plot_timeline(jobs, plot, title, window)
            cell["plot"] = str(plot.relative_to(RESULTS_DIR.parent.parent))
        f, p = cell["figures"], cell["predicted"]
        log(
            f"[{workload.name}] {variant.name} run {run_index}: ratio {f['ratio']:.2f} (simulator {p['ratio']:.2f}), "
            f"p99 {f['latency_p99']:.1f} s, starved {f['starved']}, "
            f"integrity {'ok' if f['integrity_ok'] else 'PROBLEM'}"
        )
    except Exception as exc:  # noqa: BLE001 - one failed cell must not lose the others
        cell["error"] = f"{type(exc).__name__}: {exc}"[:3000]
        log(f"[{workload.name}] {variant.name}: FAILED {cell['error']}")
    return cell


def plan(args: argparse.Namespace) -> tuple[list[Workload], list[str], int]:
    text = args.workloads or ("50:0.5" if args.quick else FULL_WORKLOADS)
    workloads = []
    for item in text.split(","):
        n, rate = int(item.split(":")[0]), float(item.split(":")[1])
        warmup = 10.0 if args.quick else WARMUP
        workloads.append(Workload(n, rate, warmup, args.duration, args.rows, args.seed))
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    if unknown := set(names) - set(VARIANTS):
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    return workloads, names, runs


def measure(run: Run) -> dict[str, Any]:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args = run.args
    workloads, names, runs = plan(args)
    results: dict[str, Any] = {"options": {"runs": runs, "warmup": workloads[0].warmup, "rows": args.rows}}
    results["variants"] = {name: VARIANTS[name].to_json() for name in names}
    results["workloads"] = []
    began = time.perf_counter()
    for workload in workloads:
        entry: dict[str, Any] = {"workload": workload.__dict__, "cells": []}
        results["workloads"].append(entry)
        order = ["after"] * runs
        if workload.tables == CHANGES_AT:
            order += [n for n in names if n != "after"]
        counts: dict[str, int] = defaultdict(int)
        for name in order:
            entry["cells"].append(measure_cell(VARIANTS[name], workload, counts[name], args))
            counts[name] += 1
            run.meta["run_seconds"] = time.perf_counter() - began
            run.save(results)
    return results


# -- rendering --------------------------------------------------------------------------
T = Template("live-freshness", {"ms1": lambda v: f"{1e3 * v:.1f}", "ms2": lambda v: f"{1e3 * v:.2f}"})


def _median(cells: list[dict[str, Any]], *path: str) -> float:
    values = []
    for cell in cells:
        value: Any = cell
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            values.append(float(value))
    return statistics.median(values) if values else math.nan


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per size and variant: medians over its runs."""
    out = []
    for entry in results["workloads"]:
        w = entry["workload"]
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for cell in entry["cells"]:
            if "figures" in cell:
                by[cell["variant"]].append(cell)
        for name, cells in by.items():
            live, sim = _median(cells, "figures", "ratio"), _median(cells, "predicted", "ratio")
            out.append(
                {
                    "tables": w["tables"],
                    "rate": w["rate"],
                    "variant": name,
                    "runs": len(cells),
                    "ratios": ", ".join(f"{c['figures']['ratio']:.2f}" for c in cells),
                    "ratio": live,
                    "p99": _median(cells, "figures", "latency_p99"),
                    "starved": max(c["figures"]["starved"] for c in cells),
                    "integrity": all(c["figures"]["integrity_ok"] for c in cells),
                    "simulated": sim,
                    "table_model": _median(cells, "predicted_table_model", "ratio"),
                    "gap": live / sim - 1.0 if sim and math.isfinite(sim) else math.nan,
                    "tables_per_job": _median(cells, "timeline", "tables_per_job"),
                    "spark": _median(cells, "timeline", "stage_median", "spark"),
                    "commits": _median(cells, "timeline", "stage_median", "commits"),
                    "prepare": _median(cells, "timeline", "stage_median", "prepare"),
                    "commit_table": _median(cells, "timeline", "commit_per_table_median"),
                    "cpu_table": _median(cells, "timeline", "service_cpu_per_table_median"),
                    "plot": next((c["plot"] for c in cells if "plot" in c), None),
                }
            )
    return out


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    targets = []
    for row in rows(results):
        if row["variant"] != "after":
            continue
        n = row["tables"]
        if n in RATIO_TARGETS:
            goal = RATIO_TARGETS[n]
            ok = row["ratio"] <= goal and row["starved"] == 0
            targets.append(T.line("target-ratio", row=row, goal=goal, ok="PASS" if ok else "MISS"))
        ok = math.isfinite(row["gap"]) and abs(row["gap"]) <= PREDICTION_TOLERANCE
        targets.append(T.line("target-sim", row=row, ok="PASS" if ok else "MISS"))
        targets.append(T.line("target-integrity", row=row, ok="PASS" if row["integrity"] else "MISS"))
    return [{"line": line} for line in targets]


def render_markdown(results: dict[str, Any]) -> str:
    machine = machine_markdown(results["meta"], "loader")
    variants = bullets(f"**{name}**: {v['label']}" for name, v in results["variants"].items())
    table = T.table("results-table", rows(results))
    targets = "\n".join(t["line"] for t in results.get("targets", []))
    plots = "\n".join(T.line("plot", row=row) for row in rows(results) if row["plot"])
    stages = T.table("stages-table", [r for r in rows(results) if r["variant"] == "after"])
    errors = [
        f"{e['workload']['tables']} tables, {c['variant']}: {c['error']}"
        for e in results["workloads"]
        for c in e["cells"]
        if "error" in c
    ]
    return T(
        "head",
        machine=machine,
        variants=variants,
        options=results["options"],
        targets=targets,
        table=table,
        stages=stages,
        plots=plots,
        errors=bullets(errors) if errors else "",
    ).removesuffix("\n")


BENCHMARK = Benchmark(
    measure,
    render_markdown,
    fingerprints=("schedulers",),
    quick_saves=True,
    seed=14,
    counts={"duration": (30.0, 120.0, "window seconds"), "drain_timeout": (120.0, 600.0, "seconds after the arrivals")},
    options=options,
    finish=lambda results: results.update(targets=evaluate_targets(results)),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
