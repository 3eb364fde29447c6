"""Join views: MJoin, XJoin and A-Caching, shaped like Babu et al.'s figures (section 7).

    python -m benchmarks.join_views           # 3 repeats, BENCHMARKS.md section "join-views"
    python -m benchmarks.join_views --quick   # 1 repeat, small streams, prints only
    python -m benchmarks.join_views --render  # the section again from the last full run's JSON

The executor of ``schedulers/views/engine.py`` on the streams of ``schedulers/views/workloads.py``;
plans of one point run interleaved, ``--repeats`` times. The paper's plots are images: where
its text gives a number, it stands beside ours; elsewhere the trend it states does.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import views
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from schedulers.views.engine import store_bytes
from schedulers.views.pipelines import Orders
from schedulers.views.workloads import ORDERS_RS_CACHE, ORDERS_ST_CACHE, Workload, global_orders, star, three_way
from testing.report import log, machine_markdown

T = Template("join-views")
ALIGN = {6: "rrrrrrrr", 8: "rrrrrrr", 9: "rrrrrrr", 10: "rrrrrrrl"}
#: What the full run's figures say (rewrite after a full run that changes them).
#: Fig. 10's plan: the hash index on S.B dropped.
NO_INDEX = ("s.b",)


def run_plan(
    workload: Workload,
    orders: Orders,
    mode: str,
    caches: Sequence[str] = (),
    memory_budget: float | None = None,
    sample_every: int = 0,
    no_index: tuple[str, ...] = (),
) -> dict[str, Any]:
    engine = views.engine(workload, orders, mode, caches, no_index, memory_budget=memory_budget)
    peak = 0.0
    timeline: list[tuple[int, float]] = []
    started = time.perf_counter()
    last, last_updates = started, 0
    for step, (i, row) in enumerate(workload.stream):
        engine.apply(i, inserts=[row])
        if sample_every and step % sample_every == 0:
            # the caches' memory as section 3.3 lays them out
            peak = max(peak, sum(store_bytes(store, len(group[0])) for group, store in engine.stores.items()))
            now = time.perf_counter()
            if step:
                timeline.append((step, (engine.updates - last_updates) / (now - last)))
            last, last_updates = now, engine.updates
    elapsed = time.perf_counter() - started
    names = workload.spec.aliases
    return {
        "throughput": engine.updates / elapsed,
        "updates": engine.updates,
        "hit": engine.cache_hits / engine.cache_probes if engine.cache_probes else None,
        "used": [c.name(names) for c in engine.reoptimizer.used],
        "candidates": len(engine.candidates),
        "reoptimizations": engine.reoptimizer.reoptimizations,
        "peak_bytes": peak,
        "work_per_tuple": engine.work / max(1, engine.updates),
        "timeline": timeline,
    }


def best(runs: dict[str, list[dict[str, Any]]], prefix: str) -> tuple[str, float]:
    """The plan variant with the highest median throughput among those named ``prefix*``."""
    medians = {k: statistics.median(r["throughput"] for r in v) for k, v in runs.items() if k.startswith(prefix)}
    name = max(medians, key=medians.__getitem__)
    return name, medians[name]


def measure_plans(plans: dict[str, tuple], repeats: int) -> dict[str, list[dict[str, Any]]]:
    return views.interleaved(repeats, {name: functools.partial(run_plan, *args) for name, args in plans.items()})


def three_way_plans(workload: Workload, forced: bool, no_index: tuple[str, ...] = ()) -> dict[str, tuple]:
    plans: dict[str, tuple] = {
        "M rs-order": (workload, ORDERS_RS_CACHE, "mjoin", (), None, 0, no_index),
        "M st-order": (workload, ORDERS_ST_CACHE, "mjoin", (), None, 0, no_index),
        "X R-S": (workload, ORDERS_RS_CACHE, "xjoin", ("t:[s r]",), None, 500, no_index),
        "X S-T": (workload, ORDERS_ST_CACHE, "xjoin", ("r:[s t]",), None, 500, no_index),
        "A": (workload, ORDERS_RS_CACHE, "adaptive", (), None, 500, no_index),
    }
    if forced:
        plans["C"] = (workload, ORDERS_RS_CACHE, "static", ("t:[s r]",), None, 500, no_index)
    return plans


def figure6(repeats: int, values: int) -> list[dict[str, Any]]:
    """Fig. 6: vary the cache hit probability through T.B's multiplicity r."""
    points = []
    for r in (1, 2, 3, 5, 10, 20):
        log(f"fig 6: T multiplicity {r}")
        runs = measure_plans(
            three_way_plans(three_way(values=values // max(1, r // 5), t_multiplicity=r), True), repeats
        )
        points.append({"r": r, "runs": runs})
    return points


def figure8(repeats: int, values: int) -> list[dict[str, Any]]:
    """Fig. 8: vary the cache's update-to-probe ratio: R and S update the R-S cache, T probes it."""
    points = []
    for r, every in ((8, 1), (4, 1), (2, 1), (1, 1), (1, 2), (1, 4)):
        log(f"fig 8: T carries every {every}th value {r} times")
        workload = three_way(values=values // max(1, r // 4), t_multiplicity=r, t_every=every)
        points.append({"ratio": 2 * every / r, "runs": measure_plans(three_way_plans(workload, True), repeats)})
    return points


def star_plans(workload: Workload, n: int, memory_budget: float | None = None) -> dict[str, tuple]:
    low_first = sorted(range(n), key=lambda k: (workload.spec.inputs[k].window.size, k))  # type: ignore[union-attr]
    high_first = list(reversed(low_first))
    plans: dict[str, tuple] = {}
    for label, order in (("low-first", low_first), ("high-first", high_first)):
        orders = global_orders(n, order)
        aliases = workload.spec.aliases
        # A left-deep XJoin over ``order``: the subresults o1..o_(k-1), probed by o_k, k >= 3.
        xjoin = [f"{aliases[order[k]]}:[{' '.join(aliases[o] for o in order[:k])}]" for k in range(2, n)]
        plans[f"M {label}"] = (workload, orders, "mjoin")
        plans[f"X {label}"] = (workload, orders, "xjoin", tuple(xjoin), None, 500)
    plans["A"] = (workload, global_orders(n, low_first), "adaptive", (), memory_budget, 500)
    return plans


def figure9(repeats: int, values: int) -> list[dict[str, Any]]:
    """Fig. 9: R_1 join ... join R_n on one attribute, multiplicity 1 for floor(n/2) streams, 5 for the rest."""
    points = []
    for n in (3, 4, 5, 6):
        log(f"fig 9: {n}-way star")
        workload = star(n=n, values=values // n, window=10)
        points.append({"n": n, "runs": measure_plans(star_plans(workload, n), repeats)})
    return points


def figure10(repeats: int, values: int) -> list[dict[str, Any]]:
    """Fig. 10: no hash index on S.B, so T's pipeline scans S's window: the join cost grows with it."""
    points = []
    for window in (10, 25, 50, 100):
        log(f"fig 10: S window {window} rows, nested-loop join on S.B")
        workload = three_way(values=values, window=window)
        points.append({"window": window, "runs": measure_plans(three_way_plans(workload, True, NO_INDEX), repeats)})
    return points


def figure13(repeats: int, values: int) -> dict[str, Any]:
    """Fig. 13: throughput as the memory for join subresults grows (Fig. 10's join at window 50)."""
    workload = three_way(values=values, window=50)
    log("fig 13: unbounded runs")
    base = measure_plans(three_way_plans(workload, False, NO_INDEX), repeats)
    need = statistics.median(r["peak_bytes"] for r in base["A"]) or 1.0
    x_need = statistics.median(r["peak_bytes"] for r in base[best(base, "X ")[0]])
    points = []
    for share in (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0):
        budget = share * need
        log(f"fig 13: budget {budget:.0f} bytes")
        plan = (workload, ORDERS_RS_CACHE, "adaptive", (), budget, 500, NO_INDEX)
        points.append({"budget": budget, "runs": measure_plans({"A": plan}, repeats)})
    return {"base": base, "a_need": need, "x_need": x_need, "points": points}


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
    return {
        **point,
        **{"m": m, "x": x, "tree": x_name[2:], "c": c, "a": a, "m_c": m / c, "m_a": m / a, "x_a": x / a},
        "hit": med(runs["C"], "hit") if "C" in runs else nan,
        "caches": statistics.median(len(r["used"]) for r in runs["A"]),
        "candidates": runs["A"][0]["candidates"],
        "uses": "; ".join(sorted({", ".join(r["used"]) or "none" for r in runs["A"]})),
    }


def render(saved: dict[str, Any]) -> str:
    f13 = saved["fig13"]
    m, x = best(f13["base"], "M ")[1], best(f13["base"], "X ")[1]
    rows = [
        [
            f"{p['budget']:,.0f}",
            f"{m:,.0f}",
            f"{x:,.0f}" if p["budget"] >= f13["x_need"] else "infeasible",
            f"{med(p['runs']['A'], 'throughput'):,.0f}",
            f"{med(p['runs']['A'], 'peak_bytes'):,.0f}",
        ]
        for p in f13["points"]
    ]
    figs = {f"fig{n}": T.table(f"fig{n}", map(figures, saved[f"fig{n}"]), align) for n, align in ALIGN.items()}
    return T(
        "section",
        machine=machine_markdown(saved["meta"]),
        repeats=saved["meta"]["repeats"],
        interval=views.INTERVAL,
        a_need=f13["a_need"],
        x_need=f13["x_need"],
        fig13=T.table("fig13", rows, "rrrrr"),
        **figs,
    )


def measure(run: Run) -> dict[str, Any]:
    repeats = run.args.repeats
    values = 800 if run.args.quick else 4000
    figures = {6: figure6, 8: figure8, 9: figure9, 10: figure10, 13: figure13}
    return {f"fig{n}": figure(repeats, values) for n, figure in figures.items()}


BENCHMARK = Benchmark(
    "benchmarks.join_views", "join-views", __doc__, measure, render, package="schedulers", repeats=(1, 3)
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
