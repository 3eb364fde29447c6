"""The ``scheduling`` section of BENCHMARKS.md, from the results alone (what ``scheduling.json`` holds)."""

from __future__ import annotations

from typing import Any

from benchmarks.harness.markdown import bullets, cell, table
from benchmarks.scheduling import claims
from benchmarks.scheduling.claims import BIG_SECONDS_TARGET, DECISION_NS_TARGET, T, abbrev
from testing.report import fmt_num, machine_markdown, status

FORMATS = T.formatter.formats
PEERS = (("interval", "myopic"), ("no-batching", "myopic"), ("interval", "max-benefit"), ("no-batching", "max-benefit"))


def metric_table(records: list[dict[str, Any]], policies: list[str], metric: str, floor: bool = False) -> str:
    """One quality metric, workload x policy."""
    cells: list[Any] = ["{workload}", "{updates:,}"]
    cells += [lambda r: f"{claims.processing_floor(r['alpha_mean']):.3f}"] if floor else []
    cells += [
        lambda r, p=p: fmt_num(r["policies"][p]["quality"][metric]) if p in r["policies"] else "–" for p in policies
    ]
    return table(["workload", "updates", *(["1+2α"] if floor else []), *map(abbrev, policies)], cells, records)


def peers_table(quality: list[dict[str, Any]]) -> str:
    def cell(r: dict[str, Any], peer: str, good: str) -> str:
        total, weighted = claims.factor(r, peer, good), claims.factor(r, peer, good, "weighted_staleness")
        return "–" if total is None else f"{total:.2f}x ({weighted:.2f}x)"

    heads = ["workload", *(f"{abbrev(p)} / {abbrev(g)}" for p, g in PEERS)]
    return table(heads, ["{workload}", *(lambda r, p=p, g=g: cell(r, p, g) for p, g in PEERS)], quality)


def partitions_table(quality: list[dict[str, Any]]) -> str:
    rows = [
        {"workload": r["workload"], "policy": name, "groups": [], "spare_workers": [], **e["extras"]}
        for r in quality
        for name, e in r["policies"].items()
        if "regroups" in e["extras"]
    ]
    return T.table("partitions-table", rows, "lllll")


def workload_table(r: dict[str, Any], policies: list[str]) -> str:
    metrics = {
        "ratio": "{quality[staleness_ratio]:num}",
        "W-ratio": "{quality[weighted_ratio]:num}",
        "max stretch": "{quality[max_stretch]:num}",
        "batches": "{quality[batches]:,}",
        "makespan s": "{quality[makespan]:num}",
        "k upd/s": "{updates_per_second:thousands}",
    }
    pol = r["policies"]
    cells = [lambda m, p=p: "–" if p not in pol else cell(m[1], pol[p], FORMATS) for p in policies]
    return table(["", *map(abbrev, policies)], ["{0}", *cells], metrics.items())


def decision_row(name: str, d: dict[str, Any]) -> tuple[Any, ...]:
    """A policy's figures, its share over the harness and its verdict (the harness-only baseline has neither)."""
    if name == "(harness only)":
        return name, d, "–", "–"
    return name, d, f"{d['ns_policy_share'] / 1000:.2f}", status(d["ns_per_decision"] < DECISION_NS_TARGET)


def _consistency(results: dict[str, Any]) -> str:
    problems = []
    for r in results.get("quality") or []:
        for name, e in r["policies"].items():
            if e["evaluator_mismatches"]:
                mismatches = "; ".join(e["evaluator_mismatches"])
                problems.append(T.line("mismatch", workload=r["workload"], policy=name, mismatches=mismatches))
            if e["nondeterministic"]:
                fields = e["nondeterministic"]
                problems.append(T.line("nondeterministic", workload=r["workload"], policy=name, fields=fields))
    if problems:
        return T("problems", problems=bullets(problems))
    return T("consistent") if results["meta"]["verify"] and results.get("quality") else ""


def _quality(results: dict[str, Any], quality: list[dict[str, Any]]) -> list[str]:
    suite, policies = results["meta"]["suite"], results["meta"]["policies"]
    fleets = ", ".join(T.line("fleet", name=k, tables=t, workers=p) for k, (t, p) in suite["fleets"].items())
    scale = T.line("scale", scale=suite["horizon_scale"]) if suite["horizon_scale"] != 1 else ""
    periods = ", ".join(fmt_num(p) for p in suite["quasi_periods"])
    out = [T("quality", suite=suite, periods=periods, fleets=fleets, scale=scale)]
    suites: dict[str, list[dict[str, Any]]] = {}
    for r in quality:
        suites.setdefault(r["suite"], []).append(r)
    for name, records in suites.items():
        out.append(T(f"suite-{name}", suite=suite) if f"suite-{name}" in T.blocks else f"#### {name}\n\n")
        skewed = [r for r in records if r["weighting"] == "skewed"]
        weighted = T("suite-weighted", table=metric_table(skewed, policies, "weighted_ratio")) if skewed else ""
        # The 1+2α floor ignores per-job overheads, so it means nothing for that suite.
        ratio = metric_table(records, policies, "staleness_ratio", floor=name != "overhead")
        stretch = metric_table(records, policies, "max_stretch")
        out.append(T("suite-tables", ratio=ratio, weighted=weighted, stretch=stretch))
    if mb := claims.max_benefit_rows(quality):
        out.append(T("max-benefit", table=T.table("max-benefit-table", mb, goal=claims.MAX_BENEFIT_GAIN_TARGET)))
    bounds = T.table("bounds-table", claims.bound_rows(quality), "lrrrrlrr")
    out.append(T("peers", peers=peers_table(quality), bounds=bounds, partitions=partitions_table(quality)))
    out += [T("workload", table=workload_table(r, policies), **r) for r in quality]
    return [*out, T("details-end")]


def render_markdown(results: dict[str, Any]) -> str:
    """The whole ``scheduling`` section of BENCHMARKS.md."""
    meta = results["meta"]
    targets = T.table("targets-table", results["targets"], "lllc")
    head = {"machine": machine_markdown(meta, "schedulers"), "meta": meta, "suite": meta["suite"]}
    out = [T("head", **head, consistency=_consistency(results), targets=targets)]
    if results.get("claims"):
        out.append(T("claims", table=T.table("claims-table", results["claims"], "lllc")))
    if results.get("notes"):
        out.append(T("notes", notes=bullets(results["notes"])))
    if quality := results.get("quality") or []:
        out += _quality(results, quality)
    if big := results.get("big"):
        judged = big["updates"] >= claims.BIG_UPDATES
        rows = [
            (n, e, status(e["median_seconds"] < BIG_SECONDS_TARGET if judged else None))
            for n, e in big["policies"].items()
        ]
        out.append(T("big", big=big, table=T.table("big-table", rows, goal=BIG_SECONDS_TARGET)))
    if dec := results.get("decisions"):
        period, step = dec["interval_trigger_period"] * 1000, dec["clock_step"] * 1000
        rows = [decision_row(name, d) for name, d in dec["policies"].items()]
        decisions = T.table("decisions-table", rows, goal=DECISION_NS_TARGET / 1000)
        out.append(T("decisions", dec=dec, period=period, step=step, table=decisions))
    return "".join(out).removesuffix("\n")
