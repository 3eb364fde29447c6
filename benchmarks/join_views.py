"""Join views: MJoin, XJoin and A-Caching, shaped like Babu et al.'s figures (section 7).

The executor of ``schedulers/views/engine.py`` on the streams of ``schedulers/views/workloads.py``;
plans of one point run in lockstep (``views.lockstep``), ``--repeats`` times. The paper's plots are images: where
its text gives a number, it stands beside ours; elsewhere the trend it states does.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.harness import views
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import log
from schedulers.views.engine import MJoinEngine, store_bytes
from schedulers.views.pipelines import Orders
from schedulers.views.workloads import ORDERS_RS_CACHE, ORDERS_ST_CACHE, Workload, global_orders, star, three_way
from testing.report import machine_markdown

T = Template("join-views")
ALIGN = {6: "rrrrrrrr", 8: "rrrrrrr", 9: "rrrrrrr", 10: "rrrrrrrl"}
#: Fig. 10's plan: the hash index on S.B dropped.
NO_INDEX = ("s.b",)


@dataclass(frozen=True)
class Plan:
    orders: Orders
    mode: str
    caches: tuple[str, ...] = ()
    memory_budget: float | None = None
    no_index: tuple[str, ...] = ()


Plans = dict[str, Plan]
#: Tuples per lockstep chunk (and between two readings of the caches' memory).
CHUNK = 500


def cache_bytes(engine: MJoinEngine) -> float:
    """The caches' memory as section 3.3 lays them out."""
    return sum(store_bytes(store, len(group[0])) for group, store in engine.stores.items())


def run_plans(workload: Workload, plans: Plans) -> dict[str, dict[str, Any]]:
    """One run of every plan over the stream, in lockstep (``views.lockstep``)."""
    engines = {
        name: views.engine(workload, p.orders, p.mode, p.caches, p.no_index, memory_budget=p.memory_budget)
        for name, p in plans.items()
    }
    ends = list(range(CHUNK, len(workload.stream), CHUNK)) + [len(workload.stream)]
    spans = views.lockstep(workload, engines, ends, cache_bytes)
    out = {}
    for name, engine in engines.items():
        updates, seconds = sum(s[0] for s in spans[name]), sum(s[1] for s in spans[name])
        hit = engine.cache_hits / engine.cache_probes if engine.cache_probes else None
        used = [c.name(workload.spec.aliases) for c in engine.reoptimizer.used]
        out[name] = {"throughput": updates / seconds, "peak_bytes": max(s[2] for s in spans[name]), "hit": hit}
        out[name] |= {"used": used, "candidates": len(engine.candidates)}
    return out


def lockstep_runs(repeats: int, workload: Workload, plans: Plans, label: str) -> dict[str, list[dict[str, Any]]]:
    """``repeats`` lockstep runs of ``plans``: per plan, its runs."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in plans}
    for k in range(repeats):
        log(f"{label}, run {k + 1}/{repeats}")
        for name, found in run_plans(workload, plans).items():
            runs[name].append(found)
    return runs


def best(runs: dict[str, list[dict[str, Any]]], prefix: str) -> tuple[str, float]:
    """The plan variant with the highest median throughput among those named ``prefix*``."""
    medians = {k: med(v, "throughput") for k, v in runs.items() if k.startswith(prefix)}
    name = max(medians, key=medians.__getitem__)
    return name, medians[name]


def three_way_plans(forced: bool, no_index: tuple[str, ...] = ()) -> Plans:
    plans = {"M rs-order": Plan(ORDERS_RS_CACHE, "mjoin"), "M st-order": Plan(ORDERS_ST_CACHE, "mjoin")}
    plans |= {
        "X R-S": Plan(ORDERS_RS_CACHE, "xjoin", ("t:[s r]",)),
        "X S-T": Plan(ORDERS_ST_CACHE, "xjoin", ("r:[s t]",)),
    }
    plans["A"] = Plan(ORDERS_RS_CACHE, "adaptive")
    if forced:
        plans["C"] = Plan(ORDERS_RS_CACHE, "static", ("t:[s r]",))
    return {name: replace(plan, no_index=no_index) for name, plan in plans.items()}


def star_plans(workload: Workload, n: int) -> Plans:
    low_first = sorted(range(n), key=lambda k: (workload.spec.inputs[k].window.size, k))  # type: ignore[union-attr]
    aliases = workload.spec.aliases
    plans: Plans = {}
    for label, order in (("low-first", low_first), ("high-first", low_first[::-1])):
        # A left-deep XJoin over ``order``: the subresults o1..o_(k-1), probed by o_k, k >= 3.
        xjoin = tuple(f"{aliases[order[k]]}:[{' '.join(aliases[o] for o in order[:k])}]" for k in range(2, n))
        plans[f"M {label}"] = Plan(global_orders(n, order), "mjoin")
        plans[f"X {label}"] = Plan(global_orders(n, order), "xjoin", xjoin)
    plans["A"] = Plan(global_orders(n, low_first), "adaptive")
    return plans


def figure13(repeats: int, values: int) -> dict[str, Any]:
    """Fig. 13: throughput as the memory for join subresults grows (Fig. 10's join at window 50)."""
    workload = three_way(values=values, window=50)
    base = lockstep_runs(repeats, workload, three_way_plans(False, NO_INDEX), "fig 13, unbounded")
    need = med(base["A"], "peak_bytes") or 1.0
    shares = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0)
    plans = {f"A {share}": Plan(ORDERS_RS_CACHE, "adaptive", (), share * need, NO_INDEX) for share in shares}
    runs = lockstep_runs(repeats, workload, plans, "fig 13, budgets")
    points = [{"budget": share * need, "runs": {"A": runs[f"A {share}"]}} for share in shares]
    return {"base": base, "a_need": need, "x_need": med(base[best(base, "X ")[0]], "peak_bytes"), "points": points}


def med(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else float("nan")


def figures(point: dict[str, Any]) -> dict[str, Any]:
    """A figure's point: its parameter, and the plans' medians and ratios (NaN where a plan did not run)."""
    runs, nan = point["runs"], float("nan")
    m = best(runs, "M ")[1]
    x_name, x = best(runs, "X ") if any(k.startswith("X ") for k in runs) else ("  ", nan)
    c = med(runs["C"], "throughput") if "C" in runs else nan
    a = med(runs["A"], "throughput")
    out = point | {"m": m, "x": x, "tree": x_name[2:], "c": c, "a": a, "m_c": m / c, "m_a": m / a, "x_a": x / a}
    out |= {"hit": med(runs["C"], "hit") if "C" in runs else nan, "candidates": runs["A"][0]["candidates"]}
    out["caches"] = statistics.median(len(r["used"]) for r in runs["A"])
    return out | {"uses": "; ".join(sorted({", ".join(r["used"]) or "none" for r in runs["A"]}))}


def render(saved: dict[str, Any]) -> str:
    f13 = saved["fig13"]
    m, x = best(f13["base"], "M ")[1], best(f13["base"], "X ")[1]
    rows = [
        [f"{p['budget']:,.0f}", f"{m:,.0f}", f"{x:,.0f}" if p["budget"] >= f13["x_need"] else "infeasible"]
        + [f"{med(p['runs']['A'], key):,.0f}" for key in ("throughput", "peak_bytes")]
        for p in f13["points"]
    ]
    figs = {f"fig{n}": T.table(f"fig{n}", map(figures, saved[f"fig{n}"]), align) for n, align in ALIGN.items()}
    meta, figs["fig13"] = saved["meta"], T.table("fig13", rows, "rrrrr")
    values = {"repeats": meta["repeats"], "interval": views.INTERVAL, "a_need": f13["a_need"], "x_need": f13["x_need"]}
    values |= views.defaults() | {"chunk": CHUNK}
    return T("section", machine=machine_markdown(meta), **values, **figs)


def measure(run: Run) -> dict[str, Any]:
    repeats, values = run.args.repeats, 800 if run.args.quick else 4000

    def sweep(key: str, points: dict[Any, tuple[Workload, Plans]]) -> list[dict[str, Any]]:
        return [{key: p, "runs": lockstep_runs(repeats, w, plans, f"{key} {p}")} for p, (w, plans) in points.items()]

    # Fig. 6: the cache hit probability, through T.B's multiplicity r.
    fig6 = {
        r: (three_way(values=values // max(1, r // 5), t_multiplicity=r), three_way_plans(True))
        for r in (1, 2, 3, 5, 10, 20)
    }
    # Fig. 8: the update-to-probe ratio 2k/r: R and S update the R-S cache, T (every k-th value r times) probes it.
    fig8 = {
        2 * k / r: (three_way(values=values // max(1, r // 4), t_multiplicity=r, t_every=k), three_way_plans(True))
        for r, k in ((8, 1), (4, 1), (2, 1), (1, 1), (1, 2), (1, 4))
    }
    # Fig. 9: R_1 join ... join R_n on one attribute, multiplicity 1 for floor(n/2) streams, 5 for the rest.
    fig9 = {}
    for n in (3, 4, 5, 6):
        workload = star(n=n, values=values // n, window=10)
        fig9[n] = (workload, star_plans(workload, n))
    # Fig. 10: no hash index on S.B, so T's pipeline scans S's window: the join cost grows with it.
    fig10 = {w: (three_way(values=values, window=w), three_way_plans(True, NO_INDEX)) for w in (10, 25, 50, 100)}
    swept = {"fig6": sweep("r", fig6), "fig8": sweep("ratio", fig8), "fig9": sweep("n", fig9)}
    return swept | {"fig10": sweep("window", fig10), "fig13": figure13(repeats, values)}


BENCHMARK = Benchmark(measure, render, "schedulers", repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
