"""The scheduling section, from the results alone, and its verdicts: targets (speed goals) and
claims (policy quality: the theorems of Bateni, Golab, Hajiaghayi and Karloff, "Scheduling to
Minimize Staleness and Stretch in Real-Time Data Warehouses", max-benefit's weighted gain, what
batching buys against the peers), the rules that decide PASS / MISS. A claim whose premises do not
hold on a workload is not counted for or against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from benchmarks.harness.markdown import Template, bullets, cell, table
from testing.report import fmt_num, machine_markdown, median, status

Record = dict[str, Any]
POLICY_ABBREV = {"group-and-run": "GaR", "group-and-run-wc": "GaR-wc", "max-benefit": "max-ben"}
POLICY_ABBREV["no-batching"] = "no-batch"


def abbrev(name: str) -> str:
    return POLICY_ABBREV.get(name, name)


def _groups(groups: list[dict[str, Any]]) -> str:
    """GroupAndRun's groups: period range → tables, workers."""
    periods = [", ".join(fmt_num(p, 3) for p in g["period_range"]) for g in groups]
    return "; ".join(f"[{p}] → {g['tables']}t, w{','.join(map(str, g['workers']))}" for p, g in zip(periods, groups))


def _index(d: dict[str, Any]) -> str:
    """A policy's index: live entries / heap entries (lazy deletion leaves dead ones)."""
    live, heap = d["index_live_entries"], d["index_heap_entries"]
    return "–" if live is None else f"{live:,} / {heap:,}"


T = Template(
    "scheduling",
    {
        "bound": lambda v: "no bound" if v is None else fmt_num(v),
        "abbrev": abbrev,
        "eager": lambda worst: f"{fmt_num(worst[1])} ({abbrev(worst[0])})" if worst else "–",
        "yes": lambda ok: "yes" if ok else "no",
        "groups": _groups,
        "list": lambda values: ",".join(map(str, values)) or "–",
        "seconds": lambda values: ", ".join(f"{s:.2f}" for s in values),
        "micro": lambda values: ", ".join(f"{s / 1000:.2f}" for s in values),
        "us": lambda ns: f"{ns / 1000:.2f}",
        "cpu": lambda entry: f"{entry['median_cpu_seconds']:.2f}" if "median_cpu_seconds" in entry else "–",
        "index": _index,
    },
)
BIG_UPDATES = 1_000_000
BIG_SECONDS_TARGET = 20.0
DECISION_NS_TARGET = 20_000.0
MAX_BENEFIT_GAIN_TARGET = 0.20
#: myopic's staleness ratio on the quasiperiodic suite at this utilization must stay below it.
MYOPIC_RATIO_TARGET = 1.10
MYOPIC_RATIO_UTILIZATION = 0.5
#: interval must be at least this many times staler than myopic to count as "far below".
INTERVAL_FACTOR = 2.0
#: with the per-job overhead, no-batching "collapses" when this many times staler than myopic.
COLLAPSE_FACTOR = 10.0
#: Theorem 4.3's stretch bound and Theorem 5.1's weighted-staleness factor.
GAR_STRETCH_BOUND = 3.0
GAR_WEIGHTED_FACTOR = 4.5

EAGER_POLICIES = ("fifo", "myopic", "group-and-run-wc", "max-benefit")


def processing_floor(alpha: float) -> float:
    """Ratio a schedule pays even with zero waiting: an update of length L loaded on arrival
    is seen alpha*L late, so each sawtooth triangle L^2/2 becomes L^2 (1 + 2 alpha) / 2."""
    return 1.0 + 2.0 * alpha


def eager_bound(alpha: float, tables: int, workers: int, steps: int = 2000) -> float | None:
    """Theorem 3.1's bound on (staleness of any eager policy) / LOW, best over beta and delta.

    With x = alpha t / p the theorem needs alpha / (1 - x) <= sqrt(delta) (1 - beta) / sqrt(3) * p / t
    and bounds the ratio by (1 + alpha)^2 / (beta^4 (1 - delta)); delta as small as allowed leaves a
    minimisation over beta in (0, 1 - gamma), gamma = sqrt(3) x / (1 - x). None when nothing fits.
    """
    x = alpha * tables / workers
    gamma = math.sqrt(3.0) * x / (1.0 - x) if x < 1.0 else math.inf
    if gamma >= 1.0:
        return None
    best = math.inf
    for k in range(1, steps):
        beta = (1.0 - gamma) * k / steps
        delta = (gamma / (1.0 - beta)) ** 2
        best = min(best, 1.0 / (beta**4 * (1.0 - delta)))
    return (1.0 + alpha) ** 2 * best


def gar_premises(record: Record) -> tuple[bool, str]:
    """Whether Theorems 4.3 and 5.1 apply: quasiperiodic, p >= 2g, alpha <= (p-g)/8t and <= 1/8
    (g: the groups the faithful policy formed)."""
    entry = record["policies"].get("group-and-run")
    if entry is None:
        return False, "group-and-run not run"
    if record["generator"] != "quasiperiodic":
        return False, "tables not quasiperiodic"
    if record["overhead"] > 0:
        return False, "per-job overhead (not in the model)"
    g = len(entry["extras"].get("groups") or [])
    p, t, alpha = record["workers"], record["tables"], record["alpha_max"]
    limit = min((p - g) / (8 * t), 1 / 8)
    if p < 2 * g:
        return False, f"p={p} < 2g={2 * g}"
    if alpha > limit:
        return False, f"alpha {alpha:.4g} > (p-g)/8t = {limit:.4g}"
    return True, f"alpha {alpha:.4g} <= {limit:.4g}, g={g}"


def bound_rows(quality: list[Record]) -> list[dict[str, Any]]:
    """Per workload: Theorem 3.1's bound, the eager policies' ratios, Theorem 4.3's premises."""
    rows = []
    for r in quality:
        pol = r["policies"]
        eager = {name: pol[name]["quality"]["staleness_ratio"] for name in EAGER_POLICIES if name in pol}
        gar = pol.get("group-and-run", {}).get("quality") or {}
        bound = eager_bound(r["alpha_max"], r["tables"], r["workers"]) if r["overhead"] == 0 else None
        worst = max(eager.items(), key=lambda kv: kv[1], default=None)
        row = {"workload": r["workload"], "x": r["alpha_max"] * r["tables"] / r["workers"], "bound": bound}
        row |= {"myopic_ratio": eager.get("myopic"), "worst_eager": worst}
        row |= dict(zip(("gar_applies", "gar_premises"), gar_premises(r)))
        rows.append(row | {"gar_stretch": gar.get("max_stretch"), "gar_weighted_ratio": gar.get("weighted_ratio")})
    return rows


def max_benefit_rows(quality: list[Record]) -> list[dict[str, Any]]:
    """max-benefit's weighted-staleness gain over myopic on every skewed workload."""
    rows = []
    for r in quality:
        pol = r["policies"]
        if r["weighting"] != "skewed" or "myopic" not in pol or "max-benefit" not in pol:
            continue
        my, mb = pol["myopic"]["quality"], pol["max-benefit"]["quality"]
        w_my, w_mb, low = my["weighted_staleness"], mb["weighted_staleness"], my["weighted_low_bound"]
        # A scheduler controls only W - W_LOW; the best possible gain is down to W_LOW.
        gain = 1.0 - w_mb / w_my
        avoidable = 1.0 - (w_mb - low) / (w_my - low) if w_my > low else math.nan
        row = {"workload": r["workload"], "suite": r["suite"], "gain": gain, "meets": gain >= MAX_BENEFIT_GAIN_TARGET}
        row |= {"myopic_weighted": w_my, "max_benefit_weighted": w_mb, "weighted_low": low}
        row |= {"avoidable_gain": avoidable, "ceiling": 1.0 - low / w_my}
        rows.append(row | {"myopic_stretch": my["max_stretch"], "max_benefit_stretch": mb["max_stretch"]})
    return rows


def factor(record: Record, peer: str, good: str, field: str = "total_staleness") -> float | None:
    """How many times staler ``peer`` is than ``good`` on one workload (None if one did not run)."""
    pol = record["policies"]
    return pol[peer]["quality"][field] / pol[good]["quality"][field] if peer in pol and good in pol else None


def _row(block: str, heads: Sequence[str], ok: bool | None, **values: Any) -> dict[str, Any]:
    """A table row from its template line (its ``heads``, `` | ``-separated) and its verdict."""
    return {**dict(zip(heads, T.line(block, **values).split(" | "), strict=True)), "status": status(ok)}


def _claim(block: str, ok: bool, **values: Any) -> dict[str, Any]:
    return _row(block, ("claim", "source", "measured"), ok, **values)


def _factor_claim(block: str, quality: Iterable[Record], peer: str, good: str, goal: float) -> dict[str, Any] | None:
    values = {r["workload"]: f for r in quality if (f := factor(r, peer, good)) is not None}
    if not values:
        return None
    numbers = list(values.values())
    met, worst = sum(f >= goal for f in numbers), min(values, key=values.__getitem__)
    figures = {"low": min(numbers), "median": median(numbers), "high": max(numbers)}
    measured = T.line("claim-factor", met=met, n=len(values), worst=worst, **figures)
    return _claim(block, met == len(values), goal=goal, measured=measured)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Speed targets: 1M-update simulation with myopic; decision cost per policy at 10k tables."""
    heads, targets = ("target", "measured", "goal"), []
    big = results.get("big")
    if big and "myopic" in big["policies"]:
        entry = big["policies"]["myopic"]
        seconds, full = entry["median_seconds"], big["updates"] >= BIG_UPDATES
        more = "" if full else T.line("target-big-extrapolated", seconds=seconds * BIG_UPDATES / big["updates"])
        values = {"big": big, "seconds": seconds, "runs": entry["runs"], "extrapolated": more}
        values["goal_updates"] = BIG_UPDATES
        ok = seconds < BIG_SECONDS_TARGET if full else None
        targets.append(_row("target-big", heads, ok, goal=BIG_SECONDS_TARGET, **values))
    decisions = results.get("decisions")
    for name, d in decisions["policies"].items() if decisions else ():
        if name != "(harness only)":
            values = {"tables": decisions["tables"], "samples": len(d["ns_per_decision_samples"])}
            ok = d["ns_per_decision"] < DECISION_NS_TARGET
            targets.append(_row("target-decision", heads, ok, name=name, d=d, goal=DECISION_NS_TARGET / 1000, **values))
    return targets


def _myopic_ratio_claim(quality: list[Record]) -> dict[str, Any] | None:
    """The issue's target: myopic's staleness ratio < 1.10 at U = 0.5, quasiperiodic suite, each
    workload's floor 1 + 2 alpha beside it (above the target, no schedule can meet it)."""
    suite = [r for r in quality if r["generator"] == "quasiperiodic" and r["suite"] == "main"]
    at = [r for r in suite if math.isclose(r["utilization"], MYOPIC_RATIO_UTILIZATION) and "myopic" in r["policies"]]
    ratios = [(r, r["policies"]["myopic"]["quality"]["staleness_ratio"]) for r in at]
    if not ratios:
        return None
    met = sum(ratio < MYOPIC_RATIO_TARGET for _, ratio in ratios)
    parts = "; ".join(
        T.line("claim-myopic-part", workload=r["workload"], ratio=ratio, floor=processing_floor(r["alpha_max"]))
        for r, ratio in ratios
    )
    values = {"goal": MYOPIC_RATIO_TARGET, "utilization": MYOPIC_RATIO_UTILIZATION, "met": met, "n": len(ratios)}
    return _claim("claim-myopic", met == len(ratios), parts=parts, **values)


def evaluate_claims(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Quality claims, each with the counts behind its verdict (a partial result is a MISS)."""
    quality: list[Record] = results.get("quality") or []
    claims: list[dict[str, Any] | None] = []
    bounds = bound_rows(quality)
    if covered := [b for b in bounds if b["bound"] is not None and b["myopic_ratio"] is not None]:
        held = sum(b["myopic_ratio"] <= b["bound"] for b in covered)
        closest = min(covered, key=lambda b: b["bound"] / b["myopic_ratio"])
        values = {"covered": len(covered), "workloads": len(bounds), "held": held, "closest": closest}
        claims.append(_claim("claim-bound", held == len(covered), **values))
    if gar := [b for b in bounds if b["gar_applies"] and b["gar_stretch"] is not None]:
        held = sum(b["gar_stretch"] < GAR_STRETCH_BOUND for b in gar)
        values = {"bound": GAR_STRETCH_BOUND, "applies": len(gar), "workloads": len(bounds), "held": held}
        stretches = ", ".join(f"{b['gar_stretch']:.3f}" for b in gar)
        claims.append(_claim("claim-stretch", held == len(gar), values=stretches, **values))
        weighted = [b["gar_weighted_ratio"] for b in gar if b["gar_weighted_ratio"] is not None]
        held = sum(w <= GAR_WEIGHTED_FACTOR for w in weighted)
        values = {"factor": GAR_WEIGHTED_FACTOR, "held": held, "n": len(weighted)}
        ratios = ", ".join(f"{w:.3f}" for w in weighted)
        claims.append(_claim("claim-weighted", held == len(weighted), values=ratios, **values))
    claims.append(_myopic_ratio_claim(quality))
    if mb := max_benefit_rows(quality):
        met = [row["workload"] for row in mb if row["meets"]]
        which = f" ({', '.join(met)})" if met else ""
        reachable = sum(1 for row in mb if row["ceiling"] >= MAX_BENEFIT_GAIN_TARGET)
        best, worst = max(mb, key=lambda row: row["gain"]), min(mb, key=lambda row: row["gain"])
        values = {"goal": MAX_BENEFIT_GAIN_TARGET, "met": len(met), "n": len(mb), "which": which}
        ok = len(met) == len(mb)
        claims.append(_claim("claim-max-benefit", ok, best=best, worst=worst, reachable=reachable, **values))
    no_overhead, overhead = [r for r in quality if r["overhead"] == 0], [r for r in quality if r["overhead"] > 0]
    claims.append(_factor_claim("claim-interval", no_overhead, "interval", "myopic", INTERVAL_FACTOR))
    claims.append(_factor_claim("claim-collapse", overhead, "no-batching", "myopic", COLLAPSE_FACTOR))
    return [c for c in claims if c is not None]


def build_notes(results: dict[str, Any]) -> list[str]:
    """Short explanations that depend on the figures; the section's text explains the rest."""
    notes: list[str] = []
    quality: list[Record] = results.get("quality") or []
    if mb := max_benefit_rows(quality):
        short = sum(1 for row in mb if row["ceiling"] < MAX_BENEFIT_GAIN_TARGET)
        notes.append(T.line("note-ceiling", goal=MAX_BENEFIT_GAIN_TARGET, short=short, n=len(mb)))
        if worse := [row for row in mb if row["gain"] < 0]:
            worst = min(worse, key=lambda r: r["gain"])
            notes.append(T.line("note-max-benefit-worse", worse=len(worse), n=len(mb), worst=worst))
    if uncovered := [b for b in bound_rows(quality) if b["bound"] is None]:
        notes.append(T.line("note-no-bound", uncovered=len(uncovered), n=len(quality)))
    meta = results.get("meta") or {}
    machine = meta.get("machine") or {}
    loads = [load[0] for load in (machine.get("loadavg_start"), meta.get("loadavg_end")) if load]
    cores = machine.get("nproc") or 1
    if max(loads, default=0.0) > cores:  # more runnable processes than cores: the benchmark was kept waiting
        notes.append(T.line("note-load", peak=max(loads), cores=cores))
    big = results.get("big")
    if big and (slow := [(n, e) for n, e in big["policies"].items() if e["median_seconds"] >= BIG_SECONDS_TARGET]):
        policies = ", ".join(f"{n} {e['median_seconds']:.1f} s" for n, e in slow)
        notes.append(T.line("note-slow", updates=big["updates"], goal=BIG_SECONDS_TARGET, policies=policies))
    starved = []
    for r in quality:
        entry = r["policies"].get("group-and-run")
        if entry and entry["extras"].get("groups") is not None:
            assigned = r["workers"] - len(entry["extras"].get("spare_workers", []))
            if r["utilization"] * r["workers"] >= assigned:
                starved.append((r["workload"], assigned, entry["quality"]["staleness_ratio"]))
    if starved:
        worst = max(starved, key=lambda s: s[2])
        notes.append(T.line("note-starved", starved=len(starved), n=len(quality), worst=worst))
    return notes


def judge(results: dict[str, Any]) -> None:
    """The verdicts and notes of a run (after it and on ``--render``): targets, claims, notes."""
    results.update(targets=evaluate_targets(results), claims=evaluate_claims(results), notes=build_notes(results))


# -- the section ----------------------------------------------------------------------------------------
FORMATS = T.formatter.formats
PEERS = (("interval", "myopic"), ("no-batching", "myopic"), ("interval", "max-benefit"), ("no-batching", "max-benefit"))


def metric_table(records: list[dict[str, Any]], policies: list[str], metric: str, floor: bool = False) -> str:
    """One quality metric, workload x policy."""
    cells: list[Any] = ["{workload}", "{updates:,}"]
    cells += [lambda r: f"{processing_floor(r['alpha_mean']):.3f}"] if floor else []
    cells += [
        lambda r, p=p: fmt_num(r["policies"][p]["quality"][metric]) if p in r["policies"] else "–" for p in policies
    ]
    return table(["workload", "updates", *(["1+2α"] if floor else []), *map(abbrev, policies)], cells, records)


def peers_table(quality: list[dict[str, Any]]) -> str:
    def cell(r: dict[str, Any], peer: str, good: str) -> str:
        total, weighted = factor(r, peer, good), factor(r, peer, good, "weighted_staleness")
        return "–" if total is None else f"{total:.2f}x ({weighted:.2f}x)"

    heads = ["workload", *(f"{abbrev(p)} / {abbrev(g)}" for p, g in PEERS)]
    return table(heads, ["{workload}", *(lambda r, p=p, g=g: cell(r, p, g) for p, g in PEERS)], quality)


def workload_table(r: dict[str, Any], policies: list[str]) -> str:
    metrics = {"ratio": "{quality[staleness_ratio]:num}", "W-ratio": "{quality[weighted_ratio]:num}"}
    metrics |= {"max stretch": "{quality[max_stretch]:num}", "batches": "{quality[batches]:,}"}
    metrics |= {"makespan s": "{quality[makespan]:num}", "k upd/s": "{updates_per_second:thousands}"}
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
                problems.append(T.line("mismatch", r=r, policy=name, mismatches="; ".join(e["evaluator_mismatches"])))
            if e["nondeterministic"]:
                problems.append(T.line("nondeterministic", r=r, policy=name, fields=e["nondeterministic"]))
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
    if mb := max_benefit_rows(quality):
        out.append(T("max-benefit", table=T.table("max-benefit-table", mb, goal=MAX_BENEFIT_GAIN_TARGET)))
    bounds = T.table("bounds-table", bound_rows(quality), "lrrrrlrr")
    regrouped = [(r, name, e) for r in quality for name, e in r["policies"].items() if "regroups" in e["extras"]]
    empty = {"groups": [], "spare_workers": []}
    partitions = [{"workload": r["workload"], "policy": name, **empty, **e["extras"]} for r, name, e in regrouped]
    partitions = T.table("partitions-table", partitions, "lllll")
    out.append(T("peers", peers=peers_table(quality), bounds=bounds, partitions=partitions))
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
        limit = BIG_SECONDS_TARGET if big["updates"] >= BIG_UPDATES else None  # judged at 1M updates only
        rows = [(n, e, e["median_seconds"] < limit if limit else None) for n, e in big["policies"].items()]
        out.append(T("big", big=big, table=T.table("big-table", rows, goal=BIG_SECONDS_TARGET)))
    if dec := results.get("decisions"):
        period, step = dec["interval_trigger_period"] * 1000, dec["clock_step"] * 1000
        rows = [decision_row(name, d) for name, d in dec["policies"].items()]
        decisions = T.table("decisions-table", rows, goal=DECISION_NS_TARGET / 1000)
        out.append(T("decisions", dec=dec, period=period, step=step, table=decisions))
    return "".join(out).removesuffix("\n")
