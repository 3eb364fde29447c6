"""The load-cost benchmark's summary and section, from the results alone (what ``load_cost.json`` holds).
Milliseconds throughout; medians of loads, then of runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from benchmarks.harness.markdown import Template, bullets, missing
from benchmarks.load_cost.probes import PHASES, SPARK_PHASES, THREAD_KIND_NAMES
from loader.loading.spark import LEAN_CHANGES
from testing.report import machine_markdown, md_table

TARGET_MS = 100.0
TARGET_LOADS = 20


def _median(values: Iterable[float | None]) -> float:
    kept = [v for v in values if not missing(v)]
    return statistics.median(kept) if kept else math.nan


def _mean(values: Iterable[float | None]) -> float:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else math.nan


def _ms(value: float | None, digits: int = 1) -> str:
    return "–" if missing(value) else f"{value:,.{digits}f}"


T = Template("load-cost", {"ms": _ms})


def _load_figures(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over loads of one variant (and size) in one run."""
    phases = {p: _median(1e3 * load["phases"].get(p, 0.0) for load in loads) for p in PHASES}
    names = {k for load in loads for k in load["py4j_calls"]}
    out = {"loads": len(loads), "total_ms": _median(1e3 * load["total"] for load in loads), "phases_ms": phases}
    out["py4j_calls"] = _median(sum(load["py4j_calls"].values()) for load in loads)
    out["py4j_calls_by_phase"] = {n: _median(load["py4j_calls"].get(n, 0) for load in loads) for n in names}
    out["py4j_ms"] = _median(1e3 * sum(load["py4j_seconds"].values()) for load in loads)
    # Means: the JVM's CPU clock ticks every 10 ms, so a median of single loads is a multiple of 10.
    out["python_cpu_ms"] = _mean(1e3 * load["python_cpu"] for load in loads)
    out["jvm_cpu_ms"] = _mean(1e3 * load["jvm_cpu"] if load["jvm_cpu"] is not None else None for load in loads)
    return out


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
        reference = "default" if name.startswith("default-") else "baseline"  # a variation's, or the baseline
        rounds = (zip(run["variants"][name]["1"], run["variants"][reference]["1"], strict=True) for run in runs)
        pairs = [(load["total"], ref["total"]) for paired in rounds for load, ref in paired]
        one = {"reference": reference, "median_ms": _median(f["total_ms"] for f in figures)}
        one |= {"run_medians_ms": [f["total_ms"] for f in figures], "ratio": _median(v / r for v, r in pairs)}
        one["delta_ms"] = _median(1e3 * (v - r) for v, r in pairs)
        one |= {k: _median(f[k] for f in figures) for k in ("py4j_calls", "python_cpu_ms", "jvm_cpu_ms")}
        one["phases_ms"] = {p: _median(f["phases_ms"][p] for f in figures) for p in PHASES}
        out["variants"][name] = one
    out["reference_ms"] = _median(_median(1e3 * s for s in run["reference_range_count"]) for run in runs)
    out["audit_ok"] = all(v["ok"] for run in runs for v in run["audit"].values())
    return out


def summarize_breakdown(part: dict[str, Any]) -> dict[str, Any]:
    result = part["result"]
    blocks = {}
    for block in result["blocks"]:
        key = f"{block['variant']}/{block['updates']}"
        figures = _load_figures(block["loads"])
        kept = [p for p in block.get("spark_phases") or [] if p is not None]
        counts = {f"_{k}": float(sum(p.get(f"_{k}", 0.0) for p in kept)) for k in ("exchange", "adaptive")}
        spark = {name: _median(p[name] for p in kept) for name in SPARK_PHASES} | {"_loads": float(len(kept))}
        figures["spark_ms"] = spark | counts
        figures["jvm_threads_ms"] = {k: 1e3 * v for k, v in (block.get("jvm_threads") or {}).items()}
        blocks[key] = figures
    spec = part["spec"]
    out = {"master": spec["master"], "sizes": spec["sizes"], "loads_per_block": spec["runs"], "blocks": blocks}
    out |= {"warmup_rounds": spec["warmup"], "hadoop_conf": result.get("hadoop_conf")}
    return out | {"audit_ok": all(v["ok"] for v in result["audit"].values())}


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "changes" in results:
        changes = out["changes"] = summarize_changes(results["changes"])
        everything = changes["variants"]["default"]
        target = {"measured_ms": everything["median_ms"], "baseline_ms": changes["variants"]["baseline"]["median_ms"]}
        target |= {"reference_ms": changes["reference_ms"], "loads_per_run": changes["rounds"], "runs": changes["runs"]}
        ok = everything["median_ms"] <= TARGET_MS and changes["rounds"] >= TARGET_LOADS
        out["target"] = target | {"goal_ms": TARGET_MS, "ok": ok}
    if "local" in results:
        out["local"] = summarize_breakdown(results["local"])
    return out


Columns = tuple[list[dict[str, Any]], list[str]]


def _table(head: str, labels: list[str], columns: Columns, cells: Callable[[dict[str, Any]], list[str]]) -> str:
    """A table of one column per block or variant: ``cells(column)``, one per row label."""
    figures, names = columns
    return md_table([head, *names], zip(labels, *map(cells, figures)))


def _blocks(part: dict[str, Any]) -> Columns:
    """A breakdown's blocks, baseline and lean per batch size, and their labels."""
    keys = [(f"{v}/{u}", f"{u} upd. {'base' if v == 'baseline' else 'lean'}") for u in part["sizes"] for v in VARIANTS]
    return [part["blocks"][k] for k, _ in keys], [label for _, label in keys]


VARIANTS = ("baseline", "default")
PY4J_ROWS = ["py4j round trips (all)", "py4j round trips building the DataFrame", "py4j time (all, ms)"]


def phases_table(part: dict[str, Any]) -> str:
    def cells(b: dict[str, Any]) -> list[str]:
        by_phase = b["py4j_calls_by_phase"].get("build DataFrame (py4j)", 0)
        phases = [_ms(b["phases_ms"][p]) for p in PHASES]
        return [*phases, f"**{_ms(b['total_ms'])}**", f"{b['py4j_calls']:.0f}", f"{by_phase:.0f}", _ms(b["py4j_ms"])]

    return _table("step (ms, median)", [*PHASES, "**load (median of totals)**", *PY4J_ROWS], _blocks(part), cells)


def spark_table(part: dict[str, Any]) -> str:
    def cells(b: dict[str, Any]) -> list[str]:
        return [*(_ms(b["spark_ms"][p], 0) for p in SPARK_PHASES), _ms(b["phases_ms"]["Spark write job"], 0)]

    labels = [*SPARK_PHASES, "Spark write job (Python timer)"]
    return _table("Spark write job, by its event log (ms, median)", labels, _blocks(part), cells)


def cpu_table(part: dict[str, Any]) -> str:
    """Thread kinds that took 0.05 ms or more in some block, the driver JVM and the Python process."""
    blocks = _blocks(part)
    kinds = [k for k in THREAD_KIND_NAMES if any((b["jvm_threads_ms"].get(k) or 0) >= 0.05 for b in blocks[0])]

    def cells(b: dict[str, Any]) -> list[str]:
        threads = [_ms(b["jvm_threads_ms"].get(k)) for k in kinds]
        return [*threads, f"**{_ms(sum(b['jvm_threads_ms'].values()))}**", _ms(b["python_cpu_ms"])]

    labels = [*kinds, "**driver JVM, all threads**", "Python process (this process, all threads)"]
    return _table("CPU per load (ms)", labels, blocks, cells)


LABELS = {"only-": "only", "default-without-": "default without", "default-with-": "default with"}


def _variant_label(name: str) -> str:
    for prefix, words in LABELS.items():
        if name.startswith(prefix):
            return f"{words} `{name.removeprefix(prefix)}`"
    return {"baseline": "baseline (no change)", "default": "**default set**"}.get(name, name)


def changes_table(changes: dict[str, Any]) -> str:
    rows = []
    for name, v in changes["variants"].items():
        runs = f"{min(v['run_medians_ms']):.0f}–{max(v['run_medians_ms']):.0f}"
        against = [v["reference"], f"{v['ratio']:.2f}", f"{v['delta_ms']:+.1f}"]
        against = against if name != v["reference"] else ["–"] * 3
        cpu = [_ms(v["python_cpu_ms"], 0), _ms(v["jvm_cpu_ms"], 0)]
        rows.append([_variant_label(name), _ms(v["median_ms"]), runs, *against, f"{v['py4j_calls']:.0f}", *cpu])
    return T.table("changes-table", rows)


def change_phases_table(changes: dict[str, Any]) -> str:
    """The baseline, each change alone and the default set, by step."""
    names = [n for n in changes["variants"] if not n.startswith("default-")]
    columns = [changes["variants"][n] for n in names], [n.removeprefix("only-").replace("_", " ") for n in names]

    def cells(v: dict[str, Any]) -> list[str]:
        return [*(_ms(v["phases_ms"][p]) for p in PHASES), _ms(v["median_ms"])]

    return _table("step (ms)", [*PHASES, "load (median of totals)"], columns, cells)


def build_notes(summary: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    target = summary.get("target")
    changes = summary.get("changes")
    if target and changes:
        default = changes["variants"]["default"]
        verdict = "met" if target["ok"] else "missed"
        notes.append(T.line("note-target", verdict=verdict, target=target, ratio=default["ratio"]))
        phases = sorted(default["phases_ms"].items(), key=lambda kv: -kv[1])
        notes.append(T.line("note-steps", top=", ".join(f"{name} {value:.0f} ms" for name, value in phases[:4])))
        variants = changes["variants"]
        without = {n[len("default-without-") :]: v for n, v in variants.items() if n.startswith("default-without-")}
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
    local = summary.get("local") or {}
    if conf := local.get("hadoop_conf"):
        top = ", ".join(f"{n} {c}" for n, c in sorted(conf["by_source"].items(), key=lambda kv: -kv[1])[:3])
        notes.append(T.line("note-hadoop", conf=conf, kib=conf["bytes"] / 1024, top=top))
    if plans := [b["spark_ms"] for b in local.get("blocks", {}).values() if b["spark_ms"].get("_loads")]:
        counts = {k: sum(s[f"_{k}"] for s in plans) for k in ("exchange", "adaptive", "loads")}
        shuffles, adaptive = counts["exchange"], counts["adaptive"]
        notes.append(T.line("note-plans", shuffles=shuffles, adaptive=adaptive, counted=counts["loads"]))
    audited = {"local": local, "changes": changes}
    notes += [T.line("note-audit", part=name) for name, part in audited.items() if part and not part["audit_ok"]]
    return notes


def render_markdown(results: dict[str, Any]) -> str:
    summary, meta = results["summary"], results["meta"]
    # How busy the machine was (the benchmark's own driver and JVM count for about 1 to 2).
    peak, cores = meta.get("loadavg_peak"), meta["machine"].get("nproc") or 1
    busy = "load-unknown" if peak is None else "load-busy" if peak > cores + 1 else "load-quiet"
    out = [T("head", machine=machine_markdown(meta, "loader"), meta=meta, load=T.line(busy, peak=peak, cores=cores))]
    if "target" in summary:
        out.append(T("target", table=T.table("target-table", [summary["target"]])))
    # The changes as they were when measured (kept in the results), else as the code has them.
    lean = meta.get("lean_changes") or {n: {"why": c.why, "default": c.default} for n, c in LEAN_CHANGES.items()}
    rows = [[f"`{name}`", "yes" if c["default"] else "no", c["why"]] for name, c in lean.items()]
    out.append(T("lean", table=T.table("lean-table", rows, "lcl")))
    if changes := summary.get("changes"):
        warmup = results["changes"]["spec"]["warmup"]
        phases = change_phases_table(changes)
        out.append(T("changes", changes=changes, warmup=warmup, table=changes_table(changes), phases=phases))
    if p := summary.get("local"):
        out.append(T("part", p=p, phases=phases_table(p), spark=spark_table(p), cpu=cpu_table(p)))
    if notes := build_notes(summary):
        out.append(T("notes", notes=bullets(notes)))
    return "".join(out).removesuffix("\n")
