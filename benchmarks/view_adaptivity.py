"""A join view's caches adapting to a burst: Babu et al.'s Fig. 12 (section 7.4); a full run also plots it.

Section 7.2's R(A) ⋈ S(A,B) ⋈ T(B), then a burst of ΔR at 20 times its rate
(``schedulers.views.workloads.three_way_burst``); the plans (``PLANS``) are the paper's: the two
static ones, A-Caching with section 6's caches (A) and restricted to the prefix invariant (P), MJoin.

The executor is pure Python: a hash-index probe costs what a cache probe costs there (the
"join-views" section measures it), so, as in that section's Fig. 10, S is joined without an index
(a scan of its window): the joins a cache skips then cost what they cost in the paper's engine.
``--indexed`` runs the same with S's hash indexes, for the phase averages.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.harness import views
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import log
from schedulers.views.pipelines import Orders
from schedulers.views.workloads import ORDERS_RS_CACHE, ORDERS_ST_CACHE, S, Workload, three_way_burst
from testing.report import RESULTS_DIR, machine_markdown

PLOT = RESULTS_DIR / "view_adaptivity.png"
NO_INDEX = ("s.a", "s.b")
#: name -> (orders, mode, forced caches, section 6's m)
PLANS: dict[str, tuple[Orders, str, tuple[str, ...], int]] = {
    "T⋈(R⋈S)": (ORDERS_RS_CACHE, "static", ("t:[s r]",), 0),
    "R⋈(T⋈S)": (ORDERS_ST_CACHE, "static", ("r:[s t]",), 0),
    "A": (ORDERS_RS_CACHE, "adaptive", (), 6),
    "P": (ORDERS_RS_CACHE, "adaptive", (), 0),
    "M": (ORDERS_RS_CACHE, "mjoin", (), 0),
    # A's own burst plan forced: section 6's cache in A's orders, so that in the burst A's gap
    # to the best static plan splits into its plan (these orders) and its overhead.
    "r:[s t]* forced": (ORDERS_RS_CACHE, "static", ("r:[s t]*",), 6),
}
STATIC = ("T⋈(R⋈S)", "R⋈(T⋈S)")
#: Issue 39's targets: A before the burst against its own plan forced, and (hash indexes,
#: no cache worth it) against the MJoin.
TARGET = 0.9
#: The plan that forces what A uses, in A's orders (a like-for-like baseline: same orders,
#: same cache implementation and sizing, no monitoring).
OWN = {"t:[s r]": "T⋈(R⋈S)", "r:[s t]*": "r:[s t]* forced", "none": "M"}
T = Template("view-adaptivity")


def run_plans(workload: Workload, sample: int, no_index: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Every plan over the stream in lockstep (``views.lockstep``), a span of ``sample`` ΔS tuples at a time."""
    aliases = workload.spec.aliases
    engines = {
        name: views.engine(workload, orders, mode, caches, no_index, global_caches)
        for name, (orders, mode, caches, global_caches) in PLANS.items()
    }
    spans = views.lockstep(
        workload,
        engines,
        views.chunk_ends(workload, sample, S),
        lambda e: [c.name(aliases) for c in e.reoptimizer.used],
    )
    out, total = {}, sum(i == S for i, _ in workload.stream)
    for name, engine in engines.items():
        # Whole spans only: the stream's tail after its last ΔS sample is a few updates.
        timeline = [
            {"s": k * sample, "rate": updates / seconds, "used": used}
            for k, (updates, seconds, used) in enumerate(spans[name], start=1)
            if k * sample <= total
        ]
        out[name] = {
            "timeline": timeline,
            "reoptimizations": engine.reoptimizer.reoptimizations,
            "candidates": [c.name(aliases) for c in engine.candidates],
            "profiling": engine.reoptimizer.profiling_spent / engine.updates,
        }
    return out


def measure_plans(values: int, burst_at: int, repeats: int, sample: int, no_index: tuple[str, ...]) -> dict[str, Any]:
    workload = three_way_burst(values=values, burst_at=burst_at)
    label = "no index on S" if no_index else "hash indexes"
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PLANS}
    for k in range(repeats):
        log(f"every plan in lockstep, run {k + 1}/{repeats} ({label})")
        for name, run in run_plans(workload, sample, no_index).items():
            runs[name].append(run)
    return {"values": values, "burst_at": burst_at, "sample": sample, "no_index": list(no_index), "runs": runs}


def phase_rate(runs: list[dict[str, Any]], low: float, high: float) -> float:
    """Median over repeats of the mean rate of the spans ending in (low, high]."""
    # The harmonic mean: tuples per second over equal S spans.
    return statistics.median(
        statistics.harmonic_mean([p["rate"] for p in r["timeline"] if low < p["s"] <= high]) for r in runs
    )


def run_ratio(runs: list[dict[str, Any]], others: list[dict[str, Any]], low: float, high: float) -> float:
    """Median over repeats of one plan's mean rate over another's, run by run (they ran in lockstep)."""

    def mean(run: dict[str, Any]) -> float:
        return statistics.harmonic_mean([p["rate"] for p in run["timeline"] if low < p["s"] <= high])

    return statistics.median(mean(a) / mean(b) for a, b in zip(runs, others, strict=True))


def plan_at(run: dict[str, Any], s: int) -> str:
    found = [p for p in run["timeline"] if p["s"] <= s]
    return ", ".join(found[-1]["used"]) or "none" if found else "none"


def converged(run: dict[str, Any], after: int, until: int, plan: str) -> int | None:
    """S tuples after ``after`` until the plan is ``plan`` and stays so up to ``until``."""
    since = None
    for p in run["timeline"]:
        if after < p["s"] <= until:
            since = (p["s"] - after if since is None else since) if p["used"] == [plan] else None
    return since


def plot(result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = {"T⋈(R⋈S)": "--", "R⋈(T⋈S)": ":", "A": "-", "P": "-.", "M": "-", "r:[s t]* forced": (0, (1, 3))}
    labels = {"A": "A-Caching (section 6)", "P": "A-Caching (prefix invariant only)", "M": "MJoin"}
    labels["r:[s t]* forced"] = "static r:[s t]* in A's orders"
    for name, runs in result["runs"].items():
        spans = zip(*(r["timeline"] for r in runs), strict=True)  # the median rate per span over the runs
        s, rates = zip(*((points[0]["s"], statistics.median(p["rate"] for p in points)) for points in spans))
        width, colour = 2.2 if name == "A" else 1.3, "0.6" if name == "M" else None
        label = labels.get(name, f"static {name}")
        ax.plot(s, rates, linestyle=styles[name], label=label, linewidth=width, color=colour)
    ax.axvline(result["burst_at"], color="0.3", linewidth=0.8)
    ax.text(result["burst_at"], ax.get_ylim()[1] * 0.97, " burst of ΔR (20x)", va="top", fontsize=9)
    title = "Adaptivity to a changing stream rate (Babu et al. Fig. 12), this executor"
    ax.set(xlabel="ΔS tuples arrived", ylabel="tuples processed per second", title=title)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


def phase_table(result: dict[str, Any]) -> str:
    # The steady part of each phase: the second half before the burst, the last half after it.
    burst, end = result["burst_at"], result["values"]
    spans = {"before": (burst / 2, burst), "during": (burst + (end - burst) / 2, end)}
    rates = {name: {k: phase_rate(runs, *span) for k, span in spans.items()} for name, runs in result["runs"].items()}
    best = {k: max(rates[name][k] for name in STATIC) for k in spans}
    uses = {"before": plan_at(result["runs"]["A"][0], burst), "during": plan_at(result["runs"]["A"][0], end)}
    rows = []
    for name, runs in result["runs"].items():
        r = rates[name]
        own = {
            k: f"{run_ratio(runs, result['runs'][OWN[uses[k]]], *spans[k]):.2f}"
            if name == "A" and uses[k] in OWN
            else "–"
            for k in spans
        }
        at, last = plan_at(runs[0], burst), plan_at(runs[0], end)
        rows.append(
            (
                name,
                r,
                r["before"] / best["before"],
                own["before"],
                at,
                r["during"] / best["during"],
                own["during"],
                last,
            )
        )
    return T.table("phases", rows, "lrrrlrrrl")


def render(saved: dict[str, Any]) -> str:
    meta, main, indexed = saved["meta"], saved["main"], saved.get("indexed")
    burst, end = main["burst_at"], main["values"]
    runs = main["runs"]["A"]

    def when(found: list[int | None], what: str) -> str:
        got = [s for s in found if s is not None]
        if not got:
            return T.line("never", what=what)
        return T.line("settled", what=what, median=statistics.median(got), got=len(got), runs=len(found))

    values = {"end": end, "burst": burst, "interval": views.INTERVAL, "repeats": meta["repeats"], "half": burst // 2}
    values |= {"middle": (burst + end) // 2, "table": phase_table(main), "candidates": ", ".join(runs[0]["candidates"])}
    values |= views.defaults()
    values["before"] = when([converged(r, 0, burst, "t:[s r]") for r in runs], "T⋈(R⋈S)'s cache `t:[s r]`")
    values["during"] = when([converged(r, burst, end, "r:[s t]*") for r in runs], "section 6's `r:[s t]*`")
    values["reoptimizations"] = statistics.median(r["reoptimizations"] for r in runs)
    values["profiling"] = statistics.median(r["profiling"] for r in runs)
    values["indexed"] = "" if indexed is None else T("indexed", table=phase_table(indexed))
    before = (burst / 2, burst)
    own_plan = OWN.get(plan_at(runs[0], burst), "T⋈(R⋈S)")
    own = run_ratio(main["runs"]["A"], main["runs"][own_plan], *before)
    mjoin = None if indexed is None else run_ratio(indexed["runs"]["A"], indexed["runs"]["M"], *before)
    values["targets"] = T(
        "targets",
        own=own,
        own_ok=own >= TARGET,
        mjoin=mjoin or float("nan"),
        mjoin_ok=None if mjoin is None else mjoin >= TARGET,
    )
    return T("section", machine=machine_markdown(meta), **values)


def measure(run: Run) -> dict[str, Any]:
    repeats = run.args.repeats
    values, burst_at, sample = (1500, 700, 50) if run.args.quick else (6000, 2500, 100)
    main = measure_plans(values, burst_at, repeats, sample, NO_INDEX)
    return {"main": main, "indexed": measure_plans(values, burst_at, repeats, sample, ()) if run.args.indexed else None}


BENCHMARK = Benchmark(
    measure,
    render,
    package="schedulers",
    repeats=(1, 3),
    options=lambda parser: parser.add_argument("--indexed", action="store_true", help="also with S's hash indexes"),
    finish=lambda results: results["meta"]["quick"] or plot(results["main"]),  # a quick run replaces no plot
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
