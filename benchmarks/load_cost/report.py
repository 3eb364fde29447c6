"""The load-cost benchmark's summary and section, from the results alone (what ``load_cost.json`` holds).
Milliseconds throughout; medians of loads, then of runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from benchmarks.harness.markdown import Template, bullets
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
from testing.report import machine_markdown, md_table

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


T = Template("load-cost", {"ms": _ms})


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


Table = tuple[list[str], list[list[str]]]


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


def changes_table(changes: dict[str, Any]) -> str:
    rows = []
    for name, v in changes["variants"].items():
        own = name == v["reference"]
        rows.append(
            [
                _variant_label(name),
                _ms(v["median_ms"]),
                f"{min(v['run_medians_ms']):.0f}–{max(v['run_medians_ms']):.0f}",
            ]
            + (["–"] * 3 if own else [v["reference"], f"{v['ratio']:.2f}", f"{v['delta_ms']:+.1f}"])
            + [f"{v['py4j_calls']:.0f}", _ms(v["python_cpu_ms"], 0), _ms(v["jvm_cpu_ms"], 0)]
        )
    return T.table("changes-table", rows)


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


def lean_table(meta: dict[str, Any]) -> str:
    """The changes as they were when measured (kept in the results), else as the code has them."""
    changes = meta.get("lean_changes") or {
        name: {"why": c.why, "default": c.default} for name, c in LEAN_CHANGES.items()
    }
    rows = [[f"`{name}`", "yes" if c["default"] else "no", c["why"]] for name, c in changes.items()]
    return T.table("lean-table", rows, "lcl")


def build_notes(summary: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    target = summary.get("target")
    changes = summary.get("changes")
    if target and changes:
        default = changes["variants"]["default"]
        notes.append(
            T.line("note-target", verdict="met" if target["ok"] else "missed", target=target, ratio=default["ratio"])
        )
        phases = sorted(default["phases_ms"].items(), key=lambda kv: -kv[1])
        notes.append(T.line("note-steps", top=", ".join(f"{name} {value:.0f} ms" for name, value in phases[:4])))
        variants = changes["variants"]
        without = {
            n.removeprefix("default-without-"): v for n, v in variants.items() if n.startswith("default-without-")
        }
        if without:
            ranked = sorted(without.items(), key=lambda kv: -kv[1]["delta_ms"])
            parts = ", ".join(f"`{n}` {v['delta_ms']:+.0f} ms" for n, v in ranked)
            alone = {n: variants.get(f"only-{n}", {}).get("delta_ms", float("nan")) for n in without}
            bigger = [n for n in without if -alone[n] < without[n]["delta_ms"]]
            more = T.line("note-without-bigger", bigger=len(bigger), n=len(without)) if bigger else None
            notes.append(T.line("note-without", parts=parts, alone=more or T.line("note-without-smaller")))
        with_ = {n.removeprefix("default-with-"): v for n, v in variants.items() if n.startswith("default-with-")}
        if with_:
            parts = ", ".join(f"`{n}` {v['delta_ms']:+.0f} ms (ratio {v['ratio']:.2f})" for n, v in with_.items())
            notes.append(T.line("note-with", parts=parts))
    local = summary.get("local")
    if local and "jfr_share" in local["blocks"].get("baseline/1", {}):
        base, lean = (sum(local["blocks"][k]["forks_per_load"].values()) for k in ("baseline/1", "default/1"))
        notes.append(T.line("note-forks", base=base, lean=lean))
    if conf := (local or summary.get("cluster") or {}).get("hadoop_conf"):
        top = ", ".join(f"{n} {c}" for n, c in sorted(conf["by_source"].items(), key=lambda kv: -kv[1])[:3])
        notes.append(T.line("note-hadoop", conf=conf, kib=conf["bytes"] / 1024, top=top))
    parts = [summary[p] for p in ("local", "cluster") if p in summary]
    if plans := [b["spark_ms"] for p in parts for b in p["blocks"].values() if b["spark_ms"].get("_loads")]:
        counts = {k: sum(s[f"_{k}"] for s in plans) for k in ("exchange", "adaptive", "loads")}
        notes.append(
            T.line("note-plans", shuffles=counts["exchange"], adaptive=counts["adaptive"], counted=counts["loads"])
        )
    for part in ("local", "cluster"):
        if (p := summary.get(part)) and not p["audit_ok"]:
            notes.append(T.line("note-audit", part=part))
    if changes and not changes["audit_ok"]:
        notes.append(T.line("note-audit", part="changes"))
    return notes


def _load_sentence(meta: dict[str, Any]) -> str:
    """How busy the machine was (the benchmark's own driver and JVM count for about 1 to 2)."""
    peak, cores = meta.get("loadavg_peak"), meta["machine"].get("nproc") or 1
    if peak is None:
        return T.line("load-unknown")
    return T.line("load-busy" if peak > cores + 1 else "load-quiet", peak=peak, cores=cores)


def render_markdown(results: dict[str, Any]) -> str:
    summary, meta = results["summary"], results["meta"]
    out = [T("head", machine=machine_markdown(meta, "loader"), meta=meta, load=_load_sentence(meta))]
    if "target" in summary:
        out.append(T("target", table=T.table("target-table", [summary["target"]])))
    out.append(T("lean", table=lean_table(meta)))
    if changes := summary.get("changes"):
        warmup = results["changes"]["spec"]["warmup"]
        phases = md_table(*change_phases_table(changes))
        out.append(T("changes", changes=changes, warmup=warmup, table=changes_table(changes), phases=phases))
    for part, title in (("local", "`local[2]`"), ("cluster", "standalone cluster (1 master, 1 worker of 2 cores)")):
        if not (p := summary.get(part)):
            continue
        started = p.get("cluster_start_seconds")
        cluster = "" if started is None else T.line("part-cluster", seconds=started)
        tables = {
            "phases": md_table(*phases_table(p)),
            "spark": md_table(*spark_table(p)),
            "cpu": md_table(*cpu_table(p)),
        }
        out.append(T("part", title=title, p=p, cluster=cluster, **tables))
        if jfr := jfr_table(p):
            out.append(T("jfr", loads=p["jfr_loads"], table=md_table(*jfr)))
    if notes := build_notes(summary):
        out.append(T("notes", notes=bullets(notes)))
    return "".join(out).removesuffix("\n")
