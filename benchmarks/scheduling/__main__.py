"""Benchmark of the scheduling core: policy quality, simulator speed, decision cost. A full run takes
~7-10 min on 2 cores, ``--quick`` < 1 min; speed figures are medians of ``--repeats`` runs.

Parts: ``quality`` (every policy on fixed, seeded workloads: the main grid, with a per-job
overhead, inside the paper's premises; each schedule re-scored by ``evaluate_schedule``),
``big`` (simulator speed at >= 1,000,000 updates), ``decisions`` (one dispatch decision at
10,000 tables). Verdicts and the section: ``report.py`` and templates/scheduling.md.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.results import interleaved, repeat
from benchmarks.scheduling import report
from schedulers import generators
from schedulers.base import Policy
from schedulers.freshness import evaluate_schedule
from schedulers.model import TableSpec, TableState, Trace
from schedulers.registry import POLICIES, make_policy
from schedulers.simulator import SimulationResult, simulate
from testing.report import log, median, timed, timed_with_cpu

SEED = 1
UTILIZATIONS = (0.2, 0.5, 0.8)
QUASI_PERIODS = (1.0, 10.0, 100.0)
GENERATOR_ARGS: dict[str, dict[str, Any]] = {"quasiperiodic": {"periods": QUASI_PERIODS}, "poisson": {}, "bursty": {}}
#: fleet name -> (tables, workers)
FLEETS: dict[str, tuple[int, int]] = {"fleet": (100, 4), "contended": (8, 2), "wide": (100, 8)}
#: Spark append job's fixed cost measured on this machine (seconds per job).
JOB_OVERHEAD = 0.25
OVERHEAD_UTILIZATION = 0.5
#: Inside Theorem 4.3's premises for "wide" (g = 3 groups): alpha = U p / t = 0.006 <= (p - g) / 8t.
PAPER_UTILIZATION = 0.075
#: Horizon (s) per generator and fleet: ~12,000 updates per workload for seed 1 (each count is
#: reported), enough for stable ratios while the full run stays under ~10 minutes on 2 cores.
HORIZONS: dict[str, dict[str, float]] = {
    "quasiperiodic": {"fleet": 240.0, "contended": 2700.0, "wide": 240.0},
    "poisson": {"fleet": 600.0, "contended": 5400.0},
    "bursty": {"fleet": 110.0, "contended": 1100.0},
}
QUICK_HORIZON_SCALE = 0.1
#: The big trace: quasiperiodic, uniform weights, horizon found by ``build_big_trace``.
BIG: dict[str, Any] = {"tables": 1000, "workers": 8, "utilization": 0.5, "periods": QUASI_PERIODS, "seed": SEED}
DECISION_TABLES = 10_000
DECISION_WORKERS = 8
DECISION_MIN_RUNS = 3
QUALITY_FIELDS = (
    "updates batches total_staleness low_bound staleness_ratio max_stretch weighted_staleness weighted_low_bound "
    "weighted_ratio makespan"
).split()
#: The figures ``evaluate_schedule`` computes from a recorded schedule too.
CHECKED_FIELDS = [f for f in QUALITY_FIELDS if f not in ("staleness_ratio", "weighted_ratio", "makespan")]


@dataclass(frozen=True)
class Workload:
    """One generated trace plus the worker count it is simulated with."""

    suite: str
    generator: str
    fleet: str
    tables: int
    workers: int
    weighting: str
    utilization: float
    overhead: float
    horizon: float
    seed: int = SEED

    @property
    def key(self) -> str:
        key = f"{self.generator}/{self.fleet}/{self.weighting}/U={self.utilization:g}"
        return key + (f"/oh={self.overhead:g}s" if self.overhead else "")

    def build(self) -> Trace:
        settings = {k: v for k, v in asdict(self).items() if k not in ("suite", "generator", "fleet")}
        return getattr(generators, self.generator)(**settings, **GENERATOR_ARGS[self.generator])


def suite(quick: bool) -> list[Workload]:
    """The fixed workload list: main grid, overhead variant, paper regime (see the module doc)."""
    scale = QUICK_HORIZON_SCALE if quick else 1.0
    grids = [  # suite, generators, fleets, utilizations, per-job overhead
        ("main", GENERATOR_ARGS, ("fleet", "contended"), UTILIZATIONS, 0.0),
        ("overhead", GENERATOR_ARGS, ("fleet", "contended"), (OVERHEAD_UTILIZATION,), JOB_OVERHEAD),
        ("paper", ("quasiperiodic",), ("wide",), (PAPER_UTILIZATION,), 0.0),
    ]
    return [
        Workload(name, gen, fleet, *FLEETS[fleet], weighting, u, overhead, HORIZONS[gen][fleet] * scale)
        for name, gens, fleets, us, overhead in grids
        for gen in gens
        for fleet in fleets
        for weighting in generators.WEIGHTINGS
        for u in us
    ]


def _quality(result: SimulationResult) -> dict[str, Any]:
    summary = result.summary()
    return {k: summary[k] for k in QUALITY_FIELDS}


def _evaluator_mismatches(trace: Trace, result: SimulationResult) -> list[str]:
    """Re-score the recorded schedule independently; the figures that disagree (none expected)."""
    ours, theirs = result.freshness, evaluate_schedule(trace, result.schedule or [])
    return [
        f"{name}: simulator {getattr(ours, name)!r} vs evaluate_schedule {getattr(theirs, name)!r}"
        for name in CHECKED_FIELDS
        if not math.isclose(getattr(ours, name), getattr(theirs, name), rel_tol=1e-9)
    ]


def _policy_extras(result: SimulationResult) -> dict[str, Any]:
    """GroupAndRun's partition and regroup count (empty for the other policies)."""
    state = result.policy_state or {}
    extras = {"regroups": state["regroups"]} if "regroups" in state else {}
    if "groups" in state:
        extras["groups"] = [{**g, "tables": len(g["tables"])} for g in state["groups"]]
        extras["spare_workers"] = state.get("spare_workers", [])
    return extras


def simulated(trace: Trace, name: str, workers: int) -> tuple[SimulationResult, float, float]:
    """A timed simulation with a fresh policy: (result, wall s, CPU s)."""
    return timed_with_cpu(functools.partial(simulate, trace, make_policy(name), workers))


def run_quality(workloads: list[Workload], policies: list[str], repeats: int, verify: bool) -> list[dict[str, Any]]:
    """Quality figures per workload and policy, plus simulator speed (median of the repeats)."""
    records: list[dict[str, Any]] = []
    for n, workload in enumerate(workloads, 1):
        began = time.perf_counter()
        trace, generation = timed(workload.build)
        alphas = [spec.alpha for spec in trace.tables]
        weights = [spec.weight for spec in trace.tables]
        record = {"workload": workload.key, **asdict(workload), "updates": trace.n_updates}
        record |= {"generation_seconds": generation, "alpha_mean": sum(alphas) / len(alphas), "alpha_max": max(alphas)}
        record |= {"weight_range": [min(weights), max(weights)], "policies": {}}
        for name in policies:  # the recorded run: quality figures (and the independent re-scoring)
            result = simulate(trace, make_policy(name), workload.workers, record_schedule=verify)
            mismatches = _evaluator_mismatches(trace, result) if verify else None
            entry = {"quality": _quality(result), "extras": _policy_extras(result), "evaluator_mismatches": mismatches}
            record["policies"][name] = entry
        # Timed runs, interleaved across policies so load drift hits all alike.
        plans = {name: functools.partial(simulated, trace, name, workload.workers) for name in policies}
        for name, runs in interleaved(repeats, plans).items():
            entry, seconds = record["policies"][name], [wall for _, wall, _ in runs]
            qualities = [_quality(result) for result, _, _ in runs]
            differ = [[k for k in QUALITY_FIELDS if q[k] != entry["quality"][k]] for q in qualities]
            entry["nondeterministic"] = [fields for fields in differ if fields]
            entry["seconds"], entry["median_seconds"] = seconds, median(seconds)
            entry["updates_per_second"] = trace.n_updates / median(seconds)
        records.append(record)
        myopic = record["policies"].get("myopic", {}).get("quality", {}).get("staleness_ratio", math.nan)
        log(
            f"[quality {n}/{len(workloads)}] {workload.key}: {trace.n_updates:,} updates, "
            f"myopic ratio {myopic:.4f}, {time.perf_counter() - began:.1f} s"
        )
    return records


def build_big_trace(target_updates: int) -> tuple[Trace, float, float]:
    """The big trace over the shortest horizon (in steps of 2%) giving at least ``target_updates``."""
    periods, tables = BIG["periods"], BIG["tables"]
    per_period = [tables // len(periods) + (i < tables % len(periods)) for i in range(len(periods))]
    rate = sum(count / (0.75 * b) for count, b in zip(per_period, periods, strict=True))  # mean gap is 0.75 B
    horizon = math.ceil(1.01 * target_updates / rate)
    while True:
        trace, generation = timed(functools.partial(generators.quasiperiodic, horizon=float(horizon), **BIG))
        if trace.n_updates >= target_updates:
            return trace, float(horizon), generation
        horizon = math.ceil(horizon * 1.02)


def run_big(policies: list[str], target_updates: int, repeats: int, repeats_others: int) -> dict[str, Any]:
    """Simulation time of the big trace per policy (a fresh policy each run; myopic, the target, first)."""
    trace, horizon, generation = build_big_trace(target_updates)
    log(f"[big] trace: {trace.n_updates:,} updates, horizon {horizon:.0f} s, generated in {generation:.1f} s")
    out: dict[str, Any] = {"generator": "quasiperiodic", **BIG, "horizon": horizon, "updates": trace.n_updates}
    out |= {"generation_seconds": generation, "policies": {}}
    for name in sorted(policies, key=lambda p: p != "myopic"):
        times = max(1, repeats if name == "myopic" else repeats_others)
        results, seconds, cpu = zip(*repeat(times, f"[big] {name}", simulated, trace, name, BIG["workers"]))
        result, seconds, cpu = results[-1], list(seconds), list(cpu)
        entry = {"runs": len(seconds), "seconds": seconds, "median_seconds": median(seconds), "cpu_seconds": cpu}
        entry |= {"median_cpu_seconds": median(cpu), "updates_per_second": trace.n_updates / median(seconds)}
        out["policies"][name] = entry | {"quality": _quality(result), "extras": _policy_extras(result)}
        log(f"[big] {name}: median {median(seconds):.2f} s (CPU {median(cpu):.2f} s) over {len(seconds)} run(s)")
    return out


class HarnessOnly(Policy):
    """Baseline: a policy that does no work, so a policy's own cost ~ its figure - this one."""

    name = "(harness only)"

    def attach(self, view: Any, workers: int) -> None:
        self._cursor = 0
        super().attach(view, workers)

    def notify(self, tid: int, now: float) -> None:
        pass

    def choose(self, worker: int, now: float) -> int | None:
        tid = self._cursor
        self._cursor = (tid + 1) % len(self.view)
        return tid


#: Simulated seconds per decision, and the interval policy's trigger period: half a step, so every
#: batch overruns its trigger (Spark's behaviour) and the trigger path runs on every decision.
DECISION_STEP = 1e-3
INTERVAL_DECISION_PERIOD = DECISION_STEP / 2


def decision_specs(tables: int) -> list[TableSpec]:
    rng, alpha = random.Random(SEED), 0.5 * DECISION_WORKERS / tables
    weights = [round(20.0 ** rng.random(), 3) for _ in range(tables)]
    periods = [QUASI_PERIODS[i % len(QUASI_PERIODS)] for i in range(tables)]
    return [TableSpec(name=f"d{i:05d}", alpha=alpha, weight=weights[i], period=periods[i]) for i in range(tables)]


def decision_run(factory: Callable[[], Policy], specs: list[TableSpec], decisions: int, warmup: int) -> dict[str, Any]:
    """One timed run, fresh states and policy: ns per decision cycle, set-up time, index size."""
    n = len(specs)
    states = [TableState(i, spec) for i, spec in enumerate(specs)]
    for i, state in enumerate(states):
        state.release(1.0 + i / n)  # one pending update per table, distinct releases in [1, 2)
    policy = factory()
    t0 = time.perf_counter_ns()
    policy.attach(states, DECISION_WORKERS)
    for tid in range(n):
        policy.notify(tid, 2.0)
    setup_ns = time.perf_counter_ns() - t0
    workers = list(range(DECISION_WORKERS))
    if getattr(policy, "_groups", None) is not None and not getattr(policy, "work_conserving", True):
        # Faithful GroupAndRun leaves spare workers idle: drive only the assigned ones.
        workers = sorted(w for g in policy.describe()["groups"] for w in g["workers"]) or workers
    limit = policy.batch_limit
    choose, notify = policy.choose, policy.notify
    free: deque[int] = deque(workers)
    in_flight: deque[tuple[int, int]] = deque()

    def cycle(count: int, now: float) -> float:
        popleft, push, take = in_flight.popleft, in_flight.append, free.popleft
        for _ in range(count):
            if not free:  # the oldest batch finishes and a new update arrives on its table
                worker, tid = popleft()
                state = states[tid]
                state.running = False
                state.current_upto = state.releases[state.dispatched - 1]
                state.release(now)
                notify(tid, now)
                free.append(worker)
            worker = take()
            tid = choose(worker, now)
            if tid is None:
                raise RuntimeError(f"{policy.name}: choose returned None with every table pending")
            state = states[tid]
            released = len(state.releases)
            state.dispatched = released if limit is None else min(released, state.dispatched + limit)
            state.running = True
            notify(tid, now)
            push((worker, tid))
            now += DECISION_STEP
        return now

    now = cycle(warmup, 3.0)
    _, elapsed = timed(functools.partial(cycle, decisions, now))
    # The index's size: live entries and raw length of the policy's LazyHeap(s), ~10k tables.
    heaps = [getattr(policy, attr) for attr in ("_heap", "_queue", "_due") if getattr(policy, attr, None) is not None]
    heaps += [group.heap for group in getattr(policy, "_groups", None) or []]
    live = sum(len(h) for h in heaps) if heaps else None
    entries = sum(len(getattr(h, "_heap", ())) for h in heaps) if heaps else None
    out = {"ns_per_decision": elapsed * 1e9 / decisions, "setup_ms": setup_ns / 1e6, "index_live_entries": live}
    return out | {"index_heap_entries": entries, "workers_driven": len(workers)}


def run_decisions(policies: list[str], tables: int, decisions: int, warmup: int, repeats: int) -> dict[str, Any]:
    """Decision cost per policy, median of ``repeats`` runs interleaved across policies."""
    specs = decision_specs(tables)
    # The baseline, then each policy (``period`` is the interval policy's trigger; the others drop it).
    factories: dict[str, Callable[[], Policy]] = {"(harness only)": HarnessOnly}
    factories |= {p: functools.partial(make_policy, p, period=INTERVAL_DECISION_PERIOD) for p in policies}
    plans = {n: functools.partial(decision_run, f, specs, decisions, warmup) for n, f in factories.items()}
    runs = interleaved(repeats, plans)
    out: dict[str, Any] = {"tables": tables, "workers": DECISION_WORKERS, "decisions_timed": decisions}
    out |= {"warmup_decisions": warmup, "repeats": repeats, "interval_trigger_period": INTERVAL_DECISION_PERIOD}
    out |= {"clock_step": DECISION_STEP, "policies": {}}
    baseline = median([r["ns_per_decision"] for r in runs["(harness only)"]])
    for name, done in runs.items():
        samples = [r["ns_per_decision"] for r in done]
        entry = {"ns_per_decision_samples": samples, "ns_per_decision": median(samples)}
        entry |= {"ns_policy_share": median(samples) - baseline, "setup_ms": median([r["setup_ms"] for r in done])}
        out["policies"][name] = entry | {
            k: done[-1][k] for k in ("index_live_entries", "index_heap_entries", "workers_driven")
        }
        log(f"[decision] {name}: {median(samples):,.0f} ns per decision at {tables:,} tables")
    return out


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--big-repeats-others", type=int, default=1, help="runs per non-myopic policy at 1M updates")
    parser.add_argument("--policies", default=",".join(POLICIES), help="a subset of: " + ", ".join(POLICIES))
    parser.add_argument("--no-verify", action="store_true", help="skip re-scoring schedules with evaluate_schedule")


def suite_description(quick: bool) -> dict[str, Any]:
    """The suite's parameters, stored with the results: the report never restates them."""
    out = {"seed": SEED, "utilizations": list(UTILIZATIONS), "weightings": list(generators.WEIGHTINGS)}
    out |= {"quasi_periods": list(QUASI_PERIODS), "fleets": {k: list(v) for k, v in FLEETS.items()}}
    out |= {"job_overhead": JOB_OVERHEAD, "overhead_utilization": OVERHEAD_UTILIZATION}
    return out | {"paper_utilization": PAPER_UTILIZATION, "horizon_scale": QUICK_HORIZON_SCALE if quick else 1.0}


def measure(run: Run) -> dict[str, Any]:
    args, quick = run.args, run.args.quick
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if unknown := [p for p in policies if p not in POLICIES]:
        raise SystemExit(f"unknown policies: {', '.join(unknown)}")
    decisions, verify = args.decisions, not args.no_verify
    decision_repeats = max(DECISION_MIN_RUNS, args.repeats)
    run.meta.update(decision_repeats=decision_repeats, verify=verify, policies=policies, suite=suite_description(quick))
    big = report.BIG_UPDATES // 10 if quick else report.BIG_UPDATES
    return run.parts(
        quality=lambda: run_quality(suite(quick), policies, args.repeats, verify),
        big=lambda: run_big(policies, big, args.repeats, args.big_repeats_others),
        decisions=lambda: run_decisions(policies, DECISION_TABLES, decisions, decisions // 2, decision_repeats),
    )


BENCHMARK = Benchmark(
    measure,
    report.render_markdown,
    package="schedulers",
    quick_saves=True,
    repeats=(1, 3),
    parts=("quality", "big", "decisions"),
    counts={"decisions": (10_000, 50_000, "timed decisions per run")},
    options=options,
    finish=report.judge,
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
