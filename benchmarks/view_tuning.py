"""A-Caching's open choices measured: p, W, W_d, I and cache sizing, and A's overhead in parts.

Babu et al. (../shared/seeds/004_*) leave open the fraction p of profiled updates and the
Bloom window W_d (Appendix A) and the number of a cache's buckets (section 3.3); they give
W = 10 and I (2 s in section 7.1, 10,000 tuples in Fig. 12), assuming I "much larger than the
interval required to collect W observations" (section 4.5). Each choice is swept alone, the
others at the executor's defaults, on Fig. 12's burst run (``view_adaptivity``): A against its
own plan forced in each phase, the share of the run spent profiling, and how soon A settles on
the burst's plan.

The split runs the phase before the burst with a forced plan that pays A's monitoring part by
part (``EngineSettings.monitor``): the rate counter and refinement (a)'s estimates, then p of
the updates profiled, then Bloom filters on every other candidate all the time (A hashes only
while it re-profiles, so that part is scaled by A's measured share). What is left is A's own:
its plan changes, caches restarting empty, profiling phases. Without an index on S the plan is
T⋈(R⋈S)'s cache; with hash indexes no cache pays and the plan is the MJoin.

All plans of a run go in lockstep (``views.lockstep``), 100 ΔS tuples at a time.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.harness import views
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import log
from schedulers.views.engine import MJoinEngine
from schedulers.views.workloads import ORDERS_RS_CACHE, S, Workload, three_way_burst
from testing.report import machine_markdown

T = Template("view-tuning")
NO_INDEX = ("s.a", "s.b")
BEFORE, DURING = "t:[s r]", "r:[s t]*"
#: Setting -> (field of EngineSettings or ReoptimizerSettings, values swept).
SWEEPS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "p": ("profile_probability", (0.01, 0.02, 0.05, 0.1)),
    "W": ("window", (5, 10, 20)),
    "W_d": ("bloom_tuples", (10, 20, 50, 100)),
    "I": ("interval", (5_000, 10_000, 20_000, 50_000)),
    "clip": ("cost_clip", (5.0, None)),
}
#: Buckets per key (None: unbounded), for A and its forced plans alike.
SIZING: tuple[float | None, ...] = (1.0, 2.0, 4.0, None)
#: The split's steps: what of A's monitoring the forced plan pays.
STEPS: dict[str, tuple[str, ...]] = {
    "plan": (),
    "+ rates": ("rates",),
    "+ profiled": ("rates", "profiled"),
    "+ bloom": ("rates", "profiled", "bloom"),
}
SAMPLE = 100


def forced(workload: Workload, cache: str, no_index: tuple[str, ...], **tuning: Any) -> MJoinEngine:
    caches = (cache,) if cache else ()
    return views.engine(workload, ORDERS_RS_CACHE, "static", caches, no_index, 6, **tuning)


def adaptive(workload: Workload, no_index: tuple[str, ...], **tuning: Any) -> MJoinEngine:
    return views.engine(workload, ORDERS_RS_CACHE, "adaptive", (), no_index, 6, **tuning)


def run(workload: Workload, engines: dict[str, MJoinEngine]) -> dict[str, dict[str, Any]]:
    """Every engine in lockstep; per engine its spans and what A's figures need."""
    aliases = workload.spec.aliases
    spans = views.lockstep(
        workload,
        engines,
        views.chunk_ends(workload, SAMPLE, S),
        lambda e: [c.name(aliases) for c in e.reoptimizer.used],
    )
    out = {}
    for name, engine in engines.items():
        out[name] = {
            "spans": [[updates, seconds, used] for updates, seconds, used in spans[name]],
            "profiling": engine.reoptimizer.profiling_spent / max(1, engine.updates),
            "reoptimizations": engine.reoptimizer.reoptimizations,
            "hit": engine.cache_hits / engine.cache_probes if engine.cache_probes else None,
        }
    return out


def rate(spans: list[list[Any]], low: int, high: int) -> float:
    """Tuples per second over the spans numbered (low, high] (span k ends at k * SAMPLE ΔS tuples)."""
    kept = spans[low:high]
    return sum(s[0] for s in kept) / sum(s[1] for s in kept)


def settled(spans: list[list[Any]], burst: int, plan: str) -> int | None:
    """ΔS tuples after the burst until A uses ``plan`` alone and keeps it to the end."""
    since = None
    for k, (_, _, used) in enumerate(spans[burst:], start=1):
        since = (since or k) if used == [plan] else None
    return None if since is None else since * SAMPLE


def sensitivity(workload: Workload, burst: int, repeats: int, quick: bool) -> dict[str, Any]:
    """Per sweep, per repeat: A at each value with its two forced plans, in one lockstep."""
    out: dict[str, Any] = {}
    for label, (field, values) in SWEEPS.items():
        runs = []
        for k in range(repeats):
            log(f"sweep {label}, run {k + 1}/{repeats}")
            engines = {
                "own before": forced(workload, BEFORE, NO_INDEX),
                "own during": forced(workload, DURING, NO_INDEX),
            }
            if field == "interval":  # I re-sizes forced plans too: each A against plans on its own I
                engines = {}
                for v in values:
                    engines[f"own before {v}"] = forced(workload, BEFORE, NO_INDEX, interval=v)
                    engines[f"own during {v}"] = forced(workload, DURING, NO_INDEX, interval=v)
            engines |= {f"A {v}": adaptive(workload, NO_INDEX, **{field: v}) for v in values}
            runs.append(run(workload, engines))
        out[label] = {"field": field, "values": list(values), "runs": runs}
    runs = []
    for k in range(repeats):
        log(f"sweep sizing, run {k + 1}/{repeats}")
        engines = {}
        for v in SIZING:
            engines[f"own before {v}"] = forced(workload, BEFORE, NO_INDEX, buckets_per_key=v)
            engines[f"own during {v}"] = forced(workload, DURING, NO_INDEX, buckets_per_key=v)
            engines[f"A {v}"] = adaptive(workload, NO_INDEX, buckets_per_key=v)
        runs.append(run(workload, engines))
    out["sizing"] = {"field": "buckets_per_key", "values": list(SIZING), "runs": runs}
    return out


def split(workload: Workload, repeats: int) -> dict[str, Any]:
    """The phase before the burst: the forced plan step by step, and A."""
    out = {}
    for label, no_index, cache in (("no index on S", NO_INDEX, BEFORE), ("hash indexes", (), "")):
        runs = []
        for k in range(repeats):
            log(f"split, {label}, run {k + 1}/{repeats}")
            engines = {step: forced(workload, cache, no_index, monitor=parts) for step, parts in STEPS.items()}
            engines["A"] = adaptive(workload, no_index)
            runs.append(run(workload, engines))
        out[label] = {"plan": cache or "none (the MJoin)", "runs": runs}
    return out


def measure(run_: Run) -> dict[str, Any]:
    repeats = run_.args.repeats
    values, burst = (1200, 600) if run_.args.quick else (4000, 2000)
    burst_run = three_way_burst(values=values, burst_at=burst)
    before_only = three_way_burst(values=values, burst_at=10**9)
    return {
        "values": values,
        "burst_at": burst,
        "defaults": views.defaults() | {"interval": views.INTERVAL},
        "sweeps": sensitivity(burst_run, burst // SAMPLE, repeats, run_.args.quick),
        "split": split(before_only, repeats if run_.args.quick else max(repeats, 5)),
    }


def sweep_rows(saved: dict[str, Any], label: str) -> list[tuple[Any, ...]]:
    sweep = saved["sweeps"][label]
    n, burst = saved["values"] // SAMPLE, saved["burst_at"] // SAMPLE
    before, during = (burst // 2, burst), ((burst + n) // 2, n)
    rows = []
    for v in sweep["values"]:
        own = f" {v}" if label in ("sizing", "I") else ""
        a = [r[f"A {v}"] for r in sweep["runs"]]
        ob = [r[f"own before{own}"] for r in sweep["runs"]]
        od = [r[f"own during{own}"] for r in sweep["runs"]]
        ratio_before = statistics.median(rate(x["spans"], *before) / rate(o["spans"], *before) for x, o in zip(a, ob))
        ratio_during = statistics.median(rate(x["spans"], *during) / rate(o["spans"], *during) for x, o in zip(a, od))
        found = [settled(x["spans"], burst, DURING) for x in a]
        got = [f for f in found if f is not None]
        when = f"{statistics.median(got):,.0f} ({len(got)}/{len(found)})" if got else "never"
        none = "unbounded" if label == "sizing" else "none"
        value = none if v is None else f"{v:,}" if isinstance(v, int) else f"{v:g}"
        own_rate = statistics.median(rate(o["spans"], *before) for o in ob)
        a_rate = statistics.median(rate(x["spans"], *before) for x in a)
        rows.append(
            (value, ratio_before, ratio_during, statistics.median(x["profiling"] for x in a), when, a_rate, own_rate)
        )
    return rows


def split_rows(result: dict[str, Any], n: int) -> list[tuple[Any, ...]]:
    """Per step, µs per update (median over repeats) and the step's cost over the one before."""
    half = (n // 2, n)
    per_update = {
        step: statistics.median(1e6 / rate(r[step]["spans"], *half) for r in result["runs"]) for step in [*STEPS, "A"]
    }
    share = statistics.median(r["A"]["profiling"] for r in result["runs"])
    base = per_update["plan"]
    gap = per_update["A"] - base
    parts = {
        "monitoring (rate counter, refinement a)": per_update["+ rates"] - base,
        "profiled updates (p)": per_update["+ profiled"] - per_update["+ rates"],
        f"Bloom filters ({share:.0%} of the time)": share * (per_update["+ bloom"] - per_update["+ profiled"]),
    }
    parts["the rest (plan changes, caches refilling, profiling phases)"] = gap - sum(parts.values())
    rows: list[tuple[Any, ...]] = [("forced plan alone", base, None, None)]
    rows += [(name, cost, cost / base, cost / gap if gap > 0 else float("nan")) for name, cost in parts.items()]
    rows.append(("A-Caching", per_update["A"], gap / base, 1.0))
    return rows


def render(saved: dict[str, Any]) -> str:
    meta = saved["meta"]
    n = saved["values"] // SAMPLE
    sweeps = {f"by_{label}": T.table("sweep", sweep_rows(saved, label), "rrrrrrr") for label in [*SWEEPS, "sizing"]}
    splits = []
    for label, result in saved["split"].items():
        rows = split_rows(result, n)
        a_over = rows[-1][1] and rows[0][1] / rows[-1][1]
        splits.append(T("split", label=label, plan=result["plan"], ratio=a_over, table=T.table("parts", rows, "lrrr")))
    values = {"values": saved["values"], "burst": saved["burst_at"], "repeats": meta["repeats"]}
    return T("section", machine=machine_markdown(meta), **values, **saved["defaults"], **sweeps, splits="".join(splits))


BENCHMARK = Benchmark(measure, render, "schedulers", repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
