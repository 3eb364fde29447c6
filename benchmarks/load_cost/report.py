"""Figures and presentation of the load-cost benchmark: the summary, the BENCHMARKS.md
section and the console tables.

Reads only the results dict (what ``load_cost.json`` holds), so ``--rerender`` rebuilds
everything from saved figures. Milliseconds throughout; medians of loads, then of runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from benchmarks.load_cost.probes import (
    ACTIVITIES,
    CHILD_PROCESSES,
    OTHER_ACTIVITY,
    OTHER_THREADS,
    PHASES,
    SPARK_PHASES,
    THREAD_KINDS,
)
from loader.loading.spark import LEAN_CHANGES
from testing.report import machine_markdown, md_table, print_table, status

TARGET_MS = 100.0
TARGET_LOADS = 20


def _median(values: Iterable[float | None]) -> float:
    kept = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(kept) if kept else float("nan")


def _mean(values: Iterable[float | None]) -> float:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else float("nan")


def _ms(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


# =====================================================================================
# Summary
# =====================================================================================
def _load_figures(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over loads of one variant (and size) in one run."""
    phases = {p: _median(1e3 * load["phases"].get(p, 0.0) for load in loads) for p in PHASES}
    names = {k for load in loads for k in load["py4j_calls"]}
    return {
        "loads": len(loads),
        "total_ms": _median(1e3 * load["total"] for load in loads),
        "phases_ms": phases,
        "py4j_calls": _median(sum(load["py4j_calls"].values()) for load in loads),
        "py4j_calls_by_phase": {n: _median(load["py4j_calls"].get(n, 0) for load in loads) for n in names},
        "py4j_ms": _median(1e3 * sum(load["py4j_seconds"].values()) for load in loads),
        # Means: the JVM's CPU clock ticks every 10 ms, so a median of single loads is a multiple of 10.
        "python_cpu_ms": _mean(1e3 * load["python_cpu"] for load in loads),
        "jvm_cpu_ms": _mean(1e3 * load["jvm_cpu"] if load["jvm_cpu"] is not None else None for load in loads),
    }


def reference_of(name: str) -> str:
    """What a variant is compared with: the default set for its variations, else the baseline."""
    return "default" if name.startswith("default-") else "baseline"


def summarize_changes(part: dict[str, Any]) -> dict[str, Any]:
    """Per variant: the median load, and against its reference's load of the same round
    (paired, so the machine's load, which drifts over seconds, weighs on both alike) the
    median ratio and difference over every round of every run."""
    runs = part["runs"]
    names = list(part["spec"]["variants"])
    per_run = [{n: _load_figures(run["variants"][n]["1"]) for n in names} for run in runs]
    out: dict[str, Any] = {"variants": {}, "runs": len(runs), "rounds": part["spec"]["runs"]}
    for name in names:
        figures = [r[name] for r in per_run]
        reference = reference_of(name)
        pairs = [
            (load["total"], ref["total"])
            for run in runs
            for load, ref in zip(run["variants"][name]["1"], run["variants"][reference]["1"], strict=True)
        ]
        out["variants"][name] = {
            "changes": part["spec"]["variants"][name],
            "reference": reference,
            "median_ms": _median(f["total_ms"] for f in figures),
            "run_medians_ms": [f["total_ms"] for f in figures],
            "ratio": _median(v / r for v, r in pairs),
            "delta_ms": _median(1e3 * (v - r) for v, r in pairs),
            "py4j_calls": _median(f["py4j_calls"] for f in figures),
            "python_cpu_ms": _median(f["python_cpu_ms"] for f in figures),
            "jvm_cpu_ms": _median(f["jvm_cpu_ms"] for f in figures),
            "phases_ms": {p: _median(f["phases_ms"][p] for f in figures) for p in PHASES},
            "pooled_median_ms": _median(1e3 * load["total"] for run in runs for load in run["variants"][name]["1"]),
        }
    out["reference_ms"] = _median(_median(1e3 * s for s in run["reference_range_count"]) for run in runs)
    out["audit_ok"] = all(v["ok"] for run in runs for v in run["audit"].values())
    out["loadavg"] = [run.get("loadavg") for run in runs]
    return out


def _spark_figures(phases: list[dict[str, float] | None]) -> dict[str, float]:
    kept = [p for p in phases if p is not None]
    return {name: _median(p[name] for p in kept) for name in SPARK_PHASES} | {
        "_loads": float(len(kept)),
        "_exchange": float(sum(p.get("_exchange", 0.0) for p in kept)),
        "_adaptive": float(sum(p.get("_adaptive", 0.0) for p in kept)),
    }


def summarize_breakdown(part: dict[str, Any]) -> dict[str, Any]:
    result = part["result"]
    blocks = {}
    for block in result["blocks"]:
        key = f"{block['variant']}/{block['updates']}"
        figures = _load_figures(block["loads"])
        figures["spark_ms"] = _spark_figures(block.get("spark_phases") or [])
        figures["jvm_threads_ms"] = {k: 1e3 * v for k, v in (block.get("jvm_threads") or {}).items()}
        figures["executor_cpu_ms"] = 1e3 * block["executor_cpu"] if block.get("executor_cpu") is not None else None
        jfr = block.get("jfr")
        if jfr:
            total = sum(jfr["samples"].values()) or 1
            figures["jfr_share"] = {k: v / total for k, v in jfr["samples"].items()}
            figures["jfr_samples"] = total
            figures["forks_per_load"] = {k: v / jfr["loads"] for k, v in jfr["forks"].items()}
        blocks[key] = figures
    return {
        "master": part["spec"]["master"],
        "sizes": part["spec"]["sizes"],
        "rows_per_update": part["spec"]["rows_per_update"],
        "loads_per_block": part["spec"]["runs"],
        "jfr_loads": part["spec"].get("jfr_loads"),
        "warmup_rounds": part["spec"]["warmup"],
        "blocks": blocks,
        "hadoop_conf": result.get("hadoop_conf"),
        "audit_ok": all(v["ok"] for v in result["audit"].values()),
        "jfr": result.get("jfr_available", False),
        "executor_found": result.get("executor_found"),
        "cluster_start_seconds": part.get("cluster_start_seconds"),
        "loadavg": part.get("loadavg"),
    }


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "changes" in results:
        out["changes"] = summarize_changes(results["changes"])
        everything = out["changes"]["variants"]["default"]
        out["target"] = {
            "measured_ms": everything["median_ms"],
            "baseline_ms": out["changes"]["variants"]["baseline"]["median_ms"],
            "reference_ms": out["changes"]["reference_ms"],
            "loads_per_run": out["changes"]["rounds"],
            "runs": out["changes"]["runs"],
            "goal_ms": TARGET_MS,
            "ok": everything["median_ms"] <= TARGET_MS and out["changes"]["rounds"] >= TARGET_LOADS,
        }
    for part in ("local", "cluster"):
        if part in results:
            out[part] = summarize_breakdown(results[part])
    return out


# =====================================================================================
# Tables
# =====================================================================================
Table = tuple[list[str], list[list[str]]]


def target_table(summary: dict[str, Any]) -> Table:
    t = summary["target"]
    measured = (
        f"{_ms(t['measured_ms'])} ms with the default lean changes (baseline {_ms(t['baseline_ms'])} ms; "
        f"`spark.range(100).count()` {_ms(t['reference_ms'])} ms), median of {t['loads_per_run']} warm loads, "
        f"median of {t['runs']} run(s)"
    )
    return (
        ["target", "measured", "goal", "result"],
        [
            [
                "one 100-row load (1 update), `local[2]`, Delta commit included",
                measured,
                f"<= {t['goal_ms']:g} ms",
                status(t["ok"]),
            ]
        ],
    )


def _variant_label(name: str) -> str:
    if name == "baseline":
        return "baseline (no change)"
    if name == "default":
        return "**default set**"
    for prefix, words in (
        ("only-", "only"),
        ("default-without-", "default without"),
        ("default-with-", "default with"),
    ):
        if name.startswith(prefix):
            return f"{words} `{name.removeprefix(prefix)}`"
    return name


def changes_table(changes: dict[str, Any]) -> Table:
    rows = []
    for name, v in changes["variants"].items():
        spread = f"{min(v['run_medians_ms']):.0f}–{max(v['run_medians_ms']):.0f}"
        own = name == v["reference"]
        rows.append(
            [
                _variant_label(name),
                _ms(v["median_ms"]),
                spread,
                "–" if own else v["reference"],
                "–" if own else f"{v['ratio']:.2f}",
                "–" if own else f"{v['delta_ms']:+.1f}",
                f"{v['py4j_calls']:.0f}",
                _ms(v["python_cpu_ms"], 0),
                _ms(v["jvm_cpu_ms"], 0),
            ]
        )
    headers = [
        "variant",
        "load ms",
        "run medians",
        "against",
        "ratio",
        "Δ ms",
        "py4j round trips",
        "Python CPU ms",
        "JVM CPU ms",
    ]
    return headers, rows


def change_phases_table(changes: dict[str, Any]) -> Table:
    names = [n for n in changes["variants"] if not n.startswith("default-")]
    headers = ["step (ms)", *[n.removeprefix("only-").replace("_", " ") for n in names]]
    rows = [[p, *[_ms(changes["variants"][n]["phases_ms"][p]) for n in names]] for p in PHASES]
    rows.append(["load (median of totals)", *[_ms(changes["variants"][n]["median_ms"]) for n in names]])
    return headers, rows


def _columns(part: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"{v}/{u}", f"{u} upd. {'base' if v == 'baseline' else 'lean'}")
        for u in part["sizes"]
        for v in ("baseline", "default")
    ]


def phases_table(part: dict[str, Any]) -> Table:
    cols = _columns(part)
    blocks = part["blocks"]
    rows = [[p, *[_ms(blocks[k]["phases_ms"][p]) for k, _ in cols]] for p in PHASES]
    rows.append(["**load (median of totals)**", *[f"**{_ms(blocks[k]['total_ms'])}**" for k, _ in cols]])
    rows.append(["py4j round trips (all)", *[f"{blocks[k]['py4j_calls']:.0f}" for k, _ in cols]])
    rows.append(
        [
            "py4j round trips building the DataFrame",
            *[f"{blocks[k]['py4j_calls_by_phase'].get('build DataFrame (py4j)', 0):.0f}" for k, _ in cols],
        ]
    )
    rows.append(["py4j time (all, ms)", *[_ms(blocks[k]["py4j_ms"]) for k, _ in cols]])
    return ["step (ms, median)", *[label for _, label in cols]], rows


def spark_table(part: dict[str, Any]) -> Table:
    cols = _columns(part)
    blocks = part["blocks"]
    rows = [[p, *[_ms(blocks[k]["spark_ms"][p], 0) for k, _ in cols]] for p in SPARK_PHASES]
    rows.append(
        ["Spark write job (Python timer)", *[_ms(blocks[k]["phases_ms"]["Spark write job"], 0) for k, _ in cols]]
    )
    return ["Spark write job, by its event log (ms, median)", *[label for _, label in cols]], rows


def cpu_table(part: dict[str, Any]) -> Table:
    cols = _columns(part)
    blocks = part["blocks"]
    kinds = [k for k, _ in THREAD_KINDS] + [OTHER_THREADS, CHILD_PROCESSES]
    rows = []
    for kind in kinds:
        values = [blocks[k]["jvm_threads_ms"].get(kind) for k, _ in cols]
        if all(v is None or v < 0.05 for v in values):
            continue
        rows.append([kind, *[_ms(v) for v in values]])
    rows.append(
        ["**driver JVM, all threads**", *[f"**{_ms(sum(blocks[k]['jvm_threads_ms'].values()))}**" for k, _ in cols]]
    )
    if any(blocks[k].get("executor_cpu_ms") is not None for k, _ in cols):
        rows.append(["executor JVM (whole process)", *[_ms(blocks[k].get("executor_cpu_ms")) for k, _ in cols]])
    rows.append(["Python process (this process, all threads)", *[_ms(blocks[k]["python_cpu_ms"]) for k, _ in cols]])
    return ["CPU per load (ms)", *[label for _, label in cols]], rows


def jfr_table(part: dict[str, Any]) -> Table | None:
    cols = [(k, label) for k, label in _columns(part) if "jfr_share" in part["blocks"][k]]
    if not cols:
        return None
    blocks = part["blocks"]
    names = [a for a, _ in ACTIVITIES] + [OTHER_ACTIVITY]
    rows = [[a, *[f"{100 * blocks[k]['jfr_share'].get(a, 0.0):.0f}%" for k, _ in cols]] for a in names]
    rows.append(["Java samples (1 ms)", *[f"{blocks[k]['jfr_samples']:,}" for k, _ in cols]])
    rows.append(["processes forked per load", *[f"{sum(blocks[k]['forks_per_load'].values()):.1f}" for k, _ in cols]])
    return ["driver JVM, Java samples by activity (JFR)", *[label for _, label in cols]], rows


def lean_table(meta: dict[str, Any]) -> Table:
    """The changes as they were when measured (kept in the results), else as the code has them."""
    changes = meta.get("lean_changes") or {
        name: {"why": c.why, "default": c.default} for name, c in LEAN_CHANGES.items()
    }
    return ["change", "default", "what it removes, and why a loader's append can do without it"], [
        [f"`{name}`", "yes" if c["default"] else "no", c["why"]] for name, c in changes.items()
    ]


# =====================================================================================
# Notes
# =====================================================================================
def build_notes(summary: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    target = summary.get("target")
    changes = summary.get("changes")
    if target and changes:
        default = changes["variants"]["default"]
        verdict = "met" if target["ok"] else "missed"
        notes.append(
            f"Target {verdict}: a warm 100-row load took {_ms(target['measured_ms'])} ms with the default lean changes "
            f"against {_ms(target['baseline_ms'])} ms without (ratio {default['ratio']:.2f}); a bare "
            f"`spark.range(100).count()` took {_ms(target['reference_ms'])} ms in the same runs."
        )
        phases = sorted(default["phases_ms"].items(), key=lambda kv: -kv[1])
        top = ", ".join(f"{name} {value:.0f} ms" for name, value in phases[:4])
        notes.append(f"With the default set, the load's time goes to: {top} (medians).")
        without = {
            n.removeprefix("default-without-"): v
            for n, v in changes["variants"].items()
            if n.startswith("default-without-")
        }
        if without:
            parts = ", ".join(
                f"`{n}` {v['delta_ms']:+.0f} ms" for n, v in sorted(without.items(), key=lambda kv: -kv[1]["delta_ms"])
            )
            alone = {n: changes["variants"].get(f"only-{n}", {}).get("delta_ms", float("nan")) for n in without}
            bigger = [n for n in without if -alone[n] < without[n]["delta_ms"]]
            notes.append(
                "Each change's share of the default set (the default set without it, against the default set; "
                f"positive = slower without it): {parts}. "
                + (
                    f"{len(bigger)} of {len(without)} weigh more there than alone against the baseline: once the "
                    "others are gone, what is left of a load is more of what each removes."
                    if bigger
                    else "Alone against the baseline each saved at least as much."
                )
            )
        with_ = {
            n.removeprefix("default-with-"): v for n, v in changes["variants"].items() if n.startswith("default-with-")
        }
        if with_:
            parts = ", ".join(f"`{n}` {v['delta_ms']:+.0f} ms (ratio {v['ratio']:.2f})" for n, v in with_.items())
            notes.append(f"The changes left out of the default set, added to it: {parts}.")
    local = summary.get("local")
    if local and "jfr_share" in local["blocks"].get("baseline/1", {}):
        base, lean = local["blocks"]["baseline/1"], local["blocks"]["default/1"]
        notes.append(
            "Forked processes per load (Hadoop's local filesystem sets permissions with `chmod`): "
            f"{sum(base['forks_per_load'].values()):.1f} at baseline, {sum(lean['forks_per_load'].values()):.1f} "
            "with the lean changes; the last ones (the task's attempt directory and its Parquet file) need a "
            "native Hadoop library or a filesystem class of our own to go."
        )
    conf = (local or summary.get("cluster") or {}).get("hadoop_conf")
    if conf:
        top = sorted(conf["by_source"].items(), key=lambda kv: -kv[1])[:3]
        notes.append(
            f"Every write job serializes the Hadoop configuration into its task ({conf['properties']:,} properties, "
            f"{conf['bytes'] / 1024:.0f} KiB by `Configuration.write`, mostly defaults: "
            + ", ".join(f"{n} {c}" for n, c in top)
            + "); a Parquet scan (rows sent as a file, landing files) broadcasts it once more. No setting trims "
            "it: the defaults come with Hadoop's JobConf, which Spark loads at start."
        )
    parts = [summary[p] for p in ("local", "cluster") if p in summary]
    plans = [b["spark_ms"] for p in parts for b in p["blocks"].values() if b["spark_ms"].get("_loads")]
    if plans:
        shuffles = sum(s["_exchange"] for s in plans)
        adaptive = sum(s["_adaptive"] for s in plans)
        counted = sum(s["_loads"] for s in plans)
        notes.append(
            f"Of {counted:.0f} write plans in the event logs, {shuffles:.0f} held an Exchange and {adaptive:.0f} an "
            "AdaptiveSparkPlan: a load's plan is scan, project, coalesce, write, so shuffle partitions and AQE "
            "never enter it and there is nothing of theirs to switch off."
        )
    for part in ("local", "cluster"):
        p = summary.get(part)
        if p and not p["audit_ok"]:
            notes.append(f"**{part}: a table did not hold every loaded row exactly once** (see the JSON).")
    if changes and not changes["audit_ok"]:
        notes.append("**changes: a table did not hold every loaded row exactly once** (see the JSON).")
    return notes


# =====================================================================================
# Rendering
# =====================================================================================
def _load_sentence(meta: dict[str, Any]) -> str:
    """How busy the machine was (the benchmark's own driver and JVM count for about 1 to 2)."""
    peak = meta.get("loadavg_peak")
    cores = meta["machine"].get("nproc") or 1
    if peak is None:
        return "Read the ratios, which compare loads run side by side."
    if peak > cores + 1:
        return (
            f"Other processes shared the {cores} cores during the run (load average up to {peak:.1f}): read the "
            "ratios, which compare loads run side by side, more than the milliseconds."
        )
    return (
        f"The load average stayed at or below {peak:.1f} on {cores} cores (this benchmark's own processes "
        "count for about 1 to 2); ratios compare loads run side by side."
    )


def render_markdown(results: dict[str, Any]) -> str:
    summary = results["summary"]
    meta = results["meta"]
    out = ["## Cost of one small load (`benchmarks/load_cost/`)\n", machine_markdown(meta, "loader")]
    out.append(
        "Every load is `DeltaRsSink.load` as the service runs it (read the table's app transaction, Spark writes "
        "the batch as Parquet into a staging directory, the files are renamed into the table, one deltalake commit, "
        f"the handle refreshed), of updates of {meta['rows_per_update']} rows "
        "(id bigint NOT NULL, v double, s string), "
        "from a thread in FAIR pool `worker-0`, after warm-up loads (a service's JIT is warm). *Baseline* is "
        "the loader without lean changes; *lean* / *default* with the default set of `LEAN_CHANGES` "
        "(loader/loading/spark.py, `[spark] lean_writes = true`, the default). " + _load_sentence(meta) + "\n"
    )
    if "target" in summary:
        out.append("### Target\n")
        out.append(md_table(*target_table(summary)) + "\n")
    out.append("### The lean changes\n")
    out.append(md_table(*lean_table(meta), align="lcl") + "\n")
    changes = summary.get("changes")
    if changes:
        out.append("### What each change saves (`local[2]`, 1 update of 100 rows)\n")
        out.append(
            f"{changes['runs']} run(s), each a fresh JVM: {results['changes']['spec']['warmup']} warm-up rounds, then "
            f"{changes['rounds']} rounds of one load per variant in rotating order (each variant loads its own table). "
            "Load ms: median of the runs' medians. Ratio and Δ ms: each load against the load of its reference "
            "(*against*) in the same round, median over all rounds of all runs (a pair shares the machine's "
            "momentary load); negative Δ = faster. CPU: mean per load of this process (Python, py4j, deltalake) "
            "and of the driver JVM during the load.\n"
        )
        out.append(md_table(*changes_table(changes)) + "\n")
        out.append("\nThe baseline, each change alone and the default set by step (medians, ms):\n")
        out.append(md_table(*change_phases_table(changes)) + "\n")
    for part, title in (("local", "`local[2]`"), ("cluster", "standalone cluster (1 master, 1 worker of 2 cores)")):
        p = summary.get(part)
        if not p:
            continue
        out.append(f"### Where a load's time goes: {title}\n")
        extra = ""
        if p.get("cluster_start_seconds") is not None:
            extra = (
                f" The master and worker were started by the benchmark ({p['cluster_start_seconds']:.0f} s) and "
                "stopped after it; the executor is a JVM of its own, so a task's launch crosses a socket."
            )
        out.append(
            f"Master `{p['master']}`; per batch size, after {p['warmup_rounds']} warm-up rounds, "
            f"{p['loads_per_block']} rounds of one baseline and one lean load (alternating), with Spark's event log "
            "on (it costs a little: these loads run slower than the ones above). Steps are timed by wrappers around "
            "the sink's own methods; py4j round trips are counted at py4j's socket; CPU is read from `/proc` before "
            "and after each load." + extra + "\n"
        )
        out.append(md_table(*phases_table(p)) + "\n")
        out.append(
            "\nThe Spark write job, cut by the event log's timestamps (SQL execution start and end, job "
            "submission and end, task launch and finish, milliseconds) and task metrics (deserialize and "
            "run time, the write command's `task commit time` and `job commit time`):\n"
        )
        out.append(md_table(*spark_table(p)) + "\n")
        out.append("\nCPU per load by thread kind (`/proc`, per block divided by its loads):\n")
        out.append(md_table(*cpu_table(p)) + "\n")
        jfr = jfr_table(p)
        if jfr:
            out.append(
                "\nWhere the driver JVM's Java threads were, by Java Flight Recorder (separate blocks of "
                f"{p['jfr_loads']} loads each, after the timed ones: starting a recording re-instruments classes; "
                "a sample goes to the innermost frame naming an activity; JIT and GC threads are in the CPU table):\n"
            )
            out.append(md_table(*jfr) + "\n")
    notes = build_notes(summary)
    if notes:
        out.append("### Notes\n")
        out.append("\n".join(f"- {n}" for n in notes) + "\n")
    return "\n".join(out)


def print_console(results: dict[str, Any]) -> None:
    summary = results["summary"]
    if "target" in summary:
        print_table("Target", *target_table(summary))
    if "changes" in summary:
        print_table("Lean changes (local[2], 1 update of 100 rows)", *changes_table(summary["changes"]))
    for part in ("local", "cluster"):
        p = summary.get(part)
        if p:
            print_table(f"Load steps, {p['master']}", *phases_table(p))
            print_table(f"Spark write job, {p['master']}", *spark_table(p))
    for note in build_notes(summary):
        print(f"- {note}")
