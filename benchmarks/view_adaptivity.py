"""A join view's caches adapting to a burst: Babu et al.'s Fig. 12 (section 7.4).

    python -m benchmarks.view_adaptivity           # 3 repeats, BENCHMARKS.md "view-adaptivity" + plot
    python -m benchmarks.view_adaptivity --quick   # 1 repeat, a short stream, prints only
    python -m benchmarks.view_adaptivity --render  # the section again from the last full run's JSON

Section 7.2's three-way join R(A) ⋈ S(A,B) ⋈ T(B) (R and S carry each value once, T five
times at five times their rate, time-based windows of 50 time units), then from the
``burst_at``-th S tuple on a burst of ΔR at 20 times its rate
(``schedulers.views.workloads.three_way_burst``). Plans, as in the paper:

- T⋈(R⋈S): the R-S cache in T's pipeline, forced (the best plan before the burst);
- R⋈(T⋈S): the T-S cache in R's pipeline, forced (pipelines ordered so that it satisfies
  the prefix invariant; the best plan during the burst);
- A: A-Caching with section 6's caches, the pipelines ordered for T⋈(R⋈S), so that the
  T-S cache in R's pipeline is a globally-consistent candidate (``r:[s t]*``);
- P: A-Caching restricted to the prefix invariant (section 4), the same orders: it cannot
  reach the burst's best plan;
- M: the MJoin, no caches.

The re-optimization interval is 10,000 tuples and W = 10, the paper's. The executor is
pure Python: a hash-index probe costs what a cache probe costs there (the "join-views"
section measures it), so, as in that section's Fig. 10, S is joined without an index (a
scan of its window): the joins a cache skips then cost what they cost in the paper's
engine. ``--indexed`` runs the same with S's hash indexes, for the phase averages.

Throughput is tuples processed (insertions and window deletions) per wall second over each
span of ``--sample`` S tuples; the figures are medians over the repeats (plans interleaved).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from schedulers.views.engine import EngineSettings, MJoinEngine
from schedulers.views.pipelines import Orders
from schedulers.views.reoptimizer import ReoptimizerSettings
from schedulers.views.workloads import ORDERS_RS_CACHE, ORDERS_ST_CACHE, S, Workload, three_way_burst
from testing.report import (
    RESULTS_DIR,
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
    write_section,
)

MODULE = "benchmarks.view_adaptivity"
SECTION = "view-adaptivity"
PLOT = RESULTS_DIR / "view_adaptivity.png"
INTERVAL = 10_000
NO_INDEX = ("s.a", "s.b")
#: name -> (orders, mode, forced caches, section 6's m)
PLANS: dict[str, tuple[Orders, str, tuple[str, ...], int]] = {
    "T⋈(R⋈S)": (ORDERS_RS_CACHE, "static", ("t:[s r]",), 0),
    "R⋈(T⋈S)": (ORDERS_ST_CACHE, "static", ("r:[s t]",), 0),
    "A": (ORDERS_RS_CACHE, "adaptive", (), 6),
    "P": (ORDERS_RS_CACHE, "adaptive", (), 0),
    "M": (ORDERS_RS_CACHE, "mjoin", (), 0),
}
STATIC = ("T⋈(R⋈S)", "R⋈(T⋈S)")
#: What the full run's figures say (rewrite after a full run that changes them).
READING = (
    "\nReading. The switch the paper shows happens here: the static plans trade places at the burst (T⋈(R⋈S) "
    "from 1.00 to 0.54 of the best static plan, R⋈(T⋈S) from 0.51 to 1.00), and A-Caching follows, settling "
    "on T⋈(R⋈S)'s cache 600 ΔS tuples into the run and on section 6's r:[s t]* within the first 100 ΔS "
    "tuples of the burst (the first sample), in every run. Restricted to the prefix invariant (P) it cannot: "
    "its only candidate stops paying in the burst, and re-selecting it at each interval and dropping it "
    "(refinement a) leaves it at 0.50 of the best static plan, below the MJoin (0.55). Not reproduced: the "
    'paper\'s "very low run-time overhead for adaptivity". A runs at 0.74 of the static plan it chose in '
    "both phases: profiled updates (p = 0.05) skip the caches and pay the joins a nested loop costs here, the "
    "re-profiling every I = 10,000 tuples hashes each probe tuple of the unused candidate into Bloom filters, "
    "and the globally-consistent cache is kept in a pipeline order made for the other plan (ΔS joins R before "
    "T, with evictions). With hash indexes no cache pays and A ends with none, 0.73-0.75 of the MJoin: the "
    "same overhead, which is where the paper's engine (tuples copied per join) and this one (a probe as cheap "
    "as a join) part.\n"
)


def run_plan(workload: Workload, name: str, sample: int, no_index: tuple[str, ...]) -> dict[str, Any]:
    orders, mode, caches, global_caches = PLANS[name]
    engine = MJoinEngine(
        workload.spec,
        workload.graph(),
        workload.shapes,
        orders,
        EngineSettings(
            mode=mode,  # type: ignore[arg-type]
            caches=caches,
            no_index=no_index,
            global_caches=global_caches,
            reoptimizer=ReoptimizerSettings(interval=INTERVAL),
        ),
        timer=time.perf_counter,
    )
    aliases = workload.spec.aliases
    timeline: list[dict[str, Any]] = []
    s_tuples = 0
    started = last = time.perf_counter()
    last_updates = 0
    for (i, row), at in zip(workload.stream, workload.times, strict=True):
        engine.apply(i, inserts=[row], data_until=at)
        if i == S:
            s_tuples += 1
            if s_tuples % sample == 0:
                now = time.perf_counter()
                timeline.append(
                    {
                        "s": s_tuples,
                        "rate": (engine.updates - last_updates) / (now - last),
                        "used": [c.name(aliases) for c in engine.reoptimizer.used],
                    }
                )
                last, last_updates = now, engine.updates
    return {
        "seconds": time.perf_counter() - started,
        "updates": engine.updates,
        "timeline": timeline,
        "reoptimizations": engine.reoptimizer.reoptimizations,
        "drops": engine.reoptimizer.drops,
        "candidates": [c.name(aliases) for c in engine.candidates],
    }


def measure(values: int, burst_at: int, repeats: int, sample: int, no_index: tuple[str, ...]) -> dict[str, Any]:
    workload = three_way_burst(values=values, burst_at=burst_at)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PLANS}
    for k in range(repeats):
        for name in PLANS:  # interleaved: a noisy minute hits every plan alike
            log(f"repeat {k + 1}/{repeats}: {name} ({'no index on S' if no_index else 'hash indexes'})")
            runs[name].append(run_plan(workload, name, sample, no_index))
    return {"values": values, "burst_at": burst_at, "sample": sample, "no_index": list(no_index), "runs": runs}


def median_timeline(runs: list[dict[str, Any]]) -> list[tuple[int, float]]:
    spans = zip(*(r["timeline"] for r in runs), strict=True)
    return [(points[0]["s"], statistics.median(p["rate"] for p in points)) for points in spans]


def phase_rate(runs: list[dict[str, Any]], low: float, high: float) -> float:
    """Median over repeats of the mean rate of the spans ending in (low, high]."""
    means = []
    for r in runs:
        rates = [p["rate"] for p in r["timeline"] if low < p["s"] <= high]
        means.append(len(rates) / sum(1 / x for x in rates))  # tuples per second over equal S spans
    return statistics.median(means)


def plan_at(run: dict[str, Any], s: int) -> str:
    found = [p for p in run["timeline"] if p["s"] <= s]
    return ", ".join(found[-1]["used"]) or "none" if found else "none"


def converged(run: dict[str, Any], after: int, until: int, plan: str) -> int | None:
    """S tuples after ``after`` until the plan is ``plan`` and stays so up to ``until``."""
    since = None
    for p in run["timeline"]:
        if not after < p["s"] <= until:
            continue
        if p["used"] == [plan]:
            since = since if since is not None else p["s"] - after
        else:
            since = None
    return since


def phases(result: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """The steady part of each phase: the second half before the burst, the last half after it."""
    burst, end = result["burst_at"], result["values"]
    return {"before": (burst / 2, burst), "during": (burst + (end - burst) / 2, end)}


def plot(result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = {"T⋈(R⋈S)": "--", "R⋈(T⋈S)": ":", "A": "-", "P": "-.", "M": "-"}
    widths = {"A": 2.2}
    colours = {"M": "0.6"}
    for name, runs in result["runs"].items():
        points = median_timeline(runs)
        ax.plot(
            [s for s, _ in points],
            [rate for _, rate in points],
            styles[name],
            label={"A": "A-Caching (section 6)", "P": "A-Caching (prefix invariant only)", "M": "MJoin"}.get(
                name, f"static {name}"
            ),
            linewidth=widths.get(name, 1.3),
            color=colours.get(name),
        )
    ax.axvline(result["burst_at"], color="0.3", linewidth=0.8)
    ax.text(result["burst_at"], ax.get_ylim()[1] * 0.97, " burst of ΔR (20x)", va="top", fontsize=9)
    ax.set_xlabel("ΔS tuples arrived")
    ax.set_ylabel("tuples processed per second")
    ax.set_title("Adaptivity to a changing stream rate (Babu et al. Fig. 12), this executor")
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


def phase_table(result: dict[str, Any]) -> str:
    spans = phases(result)
    rates = {name: {k: phase_rate(runs, *span) for k, span in spans.items()} for name, runs in result["runs"].items()}
    best = {k: max(rates[name][k] for name in STATIC) for k in spans}
    rows = []
    for name, runs in result["runs"].items():
        rows.append(
            [
                name,
                f"{rates[name]['before']:,.0f}",
                f"{rates[name]['before'] / best['before']:.2f}",
                plan_at(runs[0], result["burst_at"]),
                f"{rates[name]['during']:,.0f}",
                f"{rates[name]['during'] / best['during']:.2f}",
                plan_at(runs[0], result["values"]),
            ]
        )
    return md_table(
        ["plan", "before: tuples/s", "/ best static", "plan at burst", "during: tuples/s", "/ best static", "at end"],
        rows,
        "lrrlrrl",
    )


def markdown(meta: dict[str, Any], main: dict[str, Any], indexed: dict[str, Any] | None) -> str:
    out = [f"## A join view's caches adapting to a burst: Fig. 12 (`{MODULE.replace('.', '/')}.py`)\n"]
    out.append(machine_markdown(meta))
    burst, end = main["burst_at"], main["values"]
    out.append(
        f"\nSection 7.4's run on this executor: R(A) ⋈ S(A,B) ⋈ T(B), {end:,} values ({end:,} ΔS tuples), a "
        f"burst of ΔR at 20x from the {burst:,}th ΔS tuple on; I = {INTERVAL:,} tuples, W = 10; S joined "
        "without an index (the module docstring says why). Medians of "
        f"{meta['repeats']} interleaved repeats; steady phases: ΔS tuples {burst // 2:,}–{burst:,} (before) and "
        f"{(burst + end) // 2:,}–{end:,} (during). Plot: `benchmarks/results/view_adaptivity.png`.\n\n"
    )
    out.append(phase_table(main))
    runs = main["runs"]["A"]

    def when(found: list[int | None], what: str) -> str:
        got = [s for s in found if s is not None]
        if not got:
            return f"never settled on {what}"
        return f"settled on {what} {statistics.median(got):,.0f} ΔS tuples in (in {len(got)} of {len(found)} runs)"

    before = when([converged(r, 0, burst, "t:[s r]") for r in runs], "T⋈(R⋈S)'s cache `t:[s r]`")
    during = when([converged(r, burst, end, "r:[s t]*") for r in runs], "section 6's `r:[s t]*`")
    out.append(
        f"\n\nA-Caching: before the burst it {before}; after the burst began it {during}. Re-optimizations "
        f"per run: {statistics.median(r['reoptimizations'] for r in runs):.0f}; candidates: "
        f"{', '.join(runs[0]['candidates'])}.\n"
    )
    if indexed is not None:
        out.append("\nThe same with S's hash indexes (joins as cheap as cache probes in this executor):\n\n")
        out.append(phase_table(indexed))
        out.append("\n")
    out.append(
        "\nPaper (Fig. 12, text of section 7.4): before the burst the adaptive plan converges to T⋈(R⋈S) and runs "
        'almost as fast as it ("very low run-time overhead for adaptivity"); during the burst T⋈(R⋈S) performs '
        "poorly, R⋈(T⋈S) is the high performer, and the adaptive plan converges quickly to it through the "
        "globally-consistent (T⋈S)⋈R cache in ΔR's pipeline. The paper's burst starts at 100,000 ΔS tuples.\n"
    )
    out.append(READING)
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, a short stream, no BENCHMARKS.md")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--indexed", action="store_true", help="also run with S's hash indexes")
    parser.add_argument("--render", action="store_true", help="rewrite the section from the last full run's JSON")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads((RESULTS_DIR / "view_adaptivity.json").read_text())
        text = markdown(saved["meta"], saved["main"], saved.get("indexed"))
        plot(saved["main"])
        write_section(SECTION, text)
        print(text)
        return 0
    repeats = 1 if args.quick else args.repeats
    values, burst_at, sample = (1500, 700, 50) if args.quick else (6000, 2500, 100)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "repeats": repeats,
        "machine": machine_info(),
    }
    main_run = measure(values, burst_at, repeats, sample, NO_INDEX)
    indexed = measure(values, burst_at, repeats, sample, ()) if args.indexed else None
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    text = markdown(meta, main_run, indexed)
    print(text)
    if not args.quick:
        write_json(RESULTS_DIR / "view_adaptivity.json", {"meta": meta, "main": main_run, "indexed": indexed})
        plot(main_run)
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
