"""Part 1 of ``benchmarks/spill/``: spilling policies against the offline optimum, in the pure model
(templates/spill.md says how). Adaptive adversaries (Theorems 2.2 and 4.3) build their input by
watching one policy, as the proofs do. Every workload ends drained, so the offline model's final
take_all charge never applies.
"""

from __future__ import annotations

import functools
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from loader.pending.spill.model import QueueCache, SpillError, Step
from loader.pending.spill.offline import offline_optimum, window_lower_bound
from loader.pending.spill.registry import make_spill_policy
from schedulers.generators import bursty
from testing.report import log

POLICIES = ("half", "buffered-head", "greedy-chunk", "hybrid", "lru")
#: Small instances (exact optimum): M in tuples, and the backlog cap that keeps the exact
#: program within 2**16 states per tick (arrivals beyond it wait at the producer).
SMALL_M = 8
SMALL_CAP = 16
#: Extended cost model in tuples: c1 = 1 per tuple moved, c0 = T (GreedyChunk's block).
#: T = 2 < M/2: GreedyChunk's regime (Theorem 3.2), hybrid picks GreedyChunk.
#: T = 6 > M/2: Theorem 3.3's regime, hybrid picks Half.
DISK_PROFILES = {"T=2": (2, 1), "T=6": (6, 1)}
UNIT_PROFILE = "T=2"
#: The on/off traffic of the bursty workloads, besides what each family sets.
BURSTY = {"burst_rate": 2.0, "pareto_scale": 8.0, "background_rate": 0.1, "utilization": 0.5, "workers": 1}


@dataclass
class Workload:
    family: str
    name: str
    queues: list[str]
    budget: int
    steps: list[Step]
    params: dict[str, Any]
    seed: int | None = None


def filling(queue: str, count: int, rate: int) -> list[Step]:
    """``count`` arrivals to ``queue``, at most ``rate`` per tick, nothing consumed."""
    return [Step(arrivals=[(queue, 1)] * min(rate, count - k)) for k in range(0, count, rate)]


def round_robin(sizes: Sequence[int], pointer: int) -> int:
    """The first non-empty queue from ``pointer`` on, cyclically (the paper's round-robin scheduler)."""
    return next(i % len(sizes) for i in range(pointer, pointer + len(sizes)) if sizes[i % len(sizes)])


def peak_unconsumed(workload: Workload) -> int:
    """Most unconsumed tuples at any tick (the same for every policy): the exact DP's 2**k."""
    total = peak = 0
    for step in workload.steps:
        total += len(step.arrivals)
        peak = max(peak, total)
        total -= len(step.consume)
    if total:
        raise ValueError(f"workload {workload.name} leaves {total} tuples unconsumed")
    return peak


def bursty_workload(
    family: str, queues: int, budget: int, horizon: int, seed: int, cap: int | None, consume: str, **rates: float
) -> Workload:
    """Pareto on/off traffic (``schedulers.generators.bursty``, one table per queue) on ticks of 1.

    Each tick, released updates are offered in order, at most M/2n (the paper's arrival rate) and
    while the backlog is within ``cap``; the rest wait at the producer (the service's 503 +
    Retry-After, nothing dropped). Then one tuple is consumed: round-robin (Theorem 4.2's
    scheduler) or, with ``consume="oldest"``, the oldest tuple's queue (outside Theorem 4.2).
    """
    trace = bursty(tables=queues, horizon=float(horizon), seed=seed, **{**BURSTY, **rates})
    names = [f"q{i}" for i in range(queues)]
    releases = deque(zip(trace.update_releases, trace.update_tables))
    per_tick = max(1, budget // (2 * queues))
    waiting: deque[int] = deque()  # producer side: released, not yet accepted
    fifo: list[deque[int]] = [deque() for _ in names]  # arrival tick of each unconsumed tuple
    steps: list[Step] = []
    backlog = pointer = tick = 0
    while releases or waiting or backlog:
        while releases and releases[0][0] <= tick:
            waiting.append(releases.popleft()[1])
        step = Step()
        while waiting and len(step.arrivals) < per_tick and (cap is None or backlog < cap):
            q = waiting.popleft()
            step.arrivals.append((names[q], 1))
            fifo[q].append(tick)
            backlog += 1
        if backlog:
            if consume == "round-robin":
                q = round_robin([len(f) for f in fifo], pointer)
                pointer = (q + 1) % queues
            else:
                q = min((i for i in range(queues) if fifo[i]), key=lambda i: fifo[i][0])
            fifo[q].popleft()
            backlog -= 1
            step.consume.append(names[q])
        steps.append(step)
        tick += 1
    params = {"horizon": horizon, "backlog_cap": cap, "consume": consume, "per_tick": per_tick}
    return Workload(family, f"{family}/seed{seed}", names, budget, steps, params, seed)


def thrash_workload(budget: int, cycles: int) -> Workload:
    """Section 1.1's thrashing, made concrete for recency paging: two queues, A and B.

    Each cycle: A receives M + M/4 tuples (nothing consumed), so M/4 must go to disk; A's
    head is consumed until a read-back has happened; then B receives a burst of M tuples
    with consumption paused. Everything in memory is then older than B's burst, and the
    tuples of A read back a moment ago are the least recently used ones left: LRU writes
    them out again, although they are consumed next. Then both queues drain.
    """
    steps: list[Step] = []
    rate = extra = max(1, budget // 4)
    for _ in range(cycles):
        steps += filling("A", budget + extra, rate)
        steps += [Step(consume=["A"]) for _ in range(extra + 1)]  # past the written part: a read-back in every policy
        steps += filling("B", budget, rate)
        steps += [Step(consume=["A"]) for _ in range(budget - 1)] + [Step(consume=["B"]) for _ in range(budget)]
    return Workload("thrash", f"thrash/M={budget}", ["A", "B"], budget, steps, {"cycles": cycles})


class Driver:
    """Feeds steps to a QueueCache; adversaries call ``step`` one at a time and look at ``cache``."""

    def __init__(self, policy: str, budget: int, queues: Sequence[str], c0: float = 0.0, c1: float = 0.0) -> None:
        self.policy_name = policy
        self.cache = QueueCache(budget, make_spill_policy(policy, budget, c0, c1), record_ops=True)
        for q in queues:  # all queues up front: BufferedHead's chunk M/2n depends on n
            self.cache.add_queue(q)
        self.keys: Counter[str] = Counter()
        self.steps: list[Step] = []

    def step(self, step: Step) -> None:
        for queue, size in step.arrivals:
            self.cache.arrive(queue, self.keys[queue], size)
            self.keys[queue] += 1
        for queue in step.consume:
            self.cache.consume(queue, 1)
        self.steps.append(step)

    def result(self, error: str | None = None) -> dict[str, Any]:
        """The policy's run: its operations and tuples moved, and how often a tuple was written."""
        counts = self.cache.counts
        written: Counter[tuple[Hashable, int]] = Counter()
        for op in self.cache.ops or ():
            if op.kind == "write":
                written.update((op.queue, key) for key in range(op.first_key, op.last_key + 1))
        out = {"policy": self.policy_name, "writes": counts.writes, "reads": counts.reads}
        out |= {"tuples_written": counts.bytes_written, "tuples_read": counts.bytes_read}
        out |= {"max_writes_per_tuple": max(written.values(), default=0)}
        out |= {"tuples_written_twice": sum(1 for v in written.values() if v > 1)}
        return out | {"peak_resident": self.cache.peak_resident, "error": error}


def run_policy(workload: Workload, policy: str, c0: float = 0.0, c1: float = 0.0) -> dict[str, Any]:
    driver = Driver(policy, workload.budget, workload.queues, c0, c1)
    try:
        for step in workload.steps:
            driver.step(step)
    except SpillError as exc:  # a policy broke the model's rules: reported, not hidden
        return driver.result(f"SpillError: {exc}")
    left = sum(len(q) for q in driver.cache)
    return driver.result(f"{left} tuples left unconsumed" if left else None)


def theorem_2_2_adversary(policy: str, budget: int, cycles: int, c0: float = 0.0, c1: float = 0.0) -> Workload:
    """Theorem 2.2's input, built against ``policy`` (one queue).

    Each cycle: fill the queue to M + 1 tuples (at most M/2 per tick, nothing consumed),
    which forces the first write; then consume one tuple per tick until the policy reads;
    then, with consumption paused, add one tuple per tick until the policy has to write
    again ("just exceed the memory buffer for the online algorithm"); then drain. An
    offline algorithm that wrote only one tuple at the start needs no second write.
    """
    driver = Driver(policy, budget, ["q"], c0, c1)
    counts = driver.cache.counts
    for _ in range(cycles):
        for step in filling("q", budget + 1, max(1, budget // 2)):
            driver.step(step)
        size, reads = budget + 1, counts.reads
        while size and counts.reads == reads:
            driver.step(Step(consume=["q"]))
            size -= 1
        writes, added = counts.writes, 0
        while counts.writes == writes and added < budget:
            driver.step(Step(arrivals=[("q", 1)]))
            size, added = size + 1, added + 1
        for _ in range(size):
            driver.step(Step(consume=["q"]))
    params = {"cycles": cycles, "built_against": policy}
    return Workload("thm2.2", f"thm2.2 vs {policy}/M={budget}", ["q"], budget, driver.steps, params)


def theorem_4_3_adversary(policy: str, budget: int, queues: int, cycles: int, c0: int, c1: int) -> Workload:
    """Theorem 4.3's round-robin input, built against ``policy`` (n queues, one tuple consumed per tick).

    Each cycle: queue 1 alone receives M/2n tuples per tick until 2M are unconsumed (as in
    the proof); input stops until the policy reads queue 1 back (its "big read"); then M/n
    new tuples are added to every queue at the maximum rate M/2n per tick; then the queues
    drain, round-robin. An offline algorithm that foresees the spurt reads only what it
    consumes before it.
    """
    names = [f"q{i}" for i in range(queues)]
    driver = Driver(policy, budget, names, c0, c1)
    rate = budget // (2 * queues)
    if rate < 2:
        raise ValueError("Theorem 4.3's fill needs M/2n >= 2 arrivals per tick against one consumption")
    left = [0] * queues
    pointer = 0

    def tick(arrivals: list[int]) -> int:
        """One tick: ``arrivals`` (queue indexes), then a round-robin consumption; the backlog before it."""
        nonlocal pointer
        for q in arrivals:
            left[q] += 1
        unconsumed = sum(left)
        step = Step(arrivals=[(names[q], 1) for q in arrivals])
        if unconsumed:
            q = round_robin(left, pointer)
            pointer = (q + 1) % queues
            left[q] -= 1
            step.consume.append(names[q])
        driver.step(step)
        return unconsumed

    for _ in range(cycles):
        while tick([0] * min(rate, 2 * budget - sum(left))) < 2 * budget:
            pass
        reads = driver.cache.counts.reads
        while sum(left) and driver.cache.counts.reads == reads:
            tick([])
        spurt = [i % queues for i in range(queues * max(1, budget // queues))]  # M/n for every queue, interleaved
        for k in range(0, len(spurt), rate):
            tick(spurt[k : k + rate])
        while sum(left):
            tick([])
    params = {"cycles": cycles, "built_against": policy, "fill_factor": 2.0}
    return Workload("thm4.3", f"thm4.3 vs {policy}/n={queues}/M={budget}", names, budget, driver.steps, params)


def _describe(workload: Workload) -> dict[str, Any]:
    """What every instance row records about its workload, and its window lower bound."""
    w, bound = workload, window_lower_bound(workload.steps, workload.budget)
    out = {"name": w.name, "family": w.family, "seed": w.seed, "queues": len(w.queues), "budget": w.budget}
    out |= {"tuples": sum(len(s.arrivals) for s in w.steps), "ticks": sum(max(1, len(s.consume)) for s in w.steps)}
    out |= {"peak_unconsumed": peak_unconsumed(w), "window_bound": bound.ops}
    return out | {"bound_writes": bound.writes, "bound_reads": bound.reads, "params": w.params}


def exact_instance(workload: Workload, ext: bool) -> dict[str, Any]:
    """Unit-cost and extended-cost OPT (both ``offline_optimum``) and every policy on one workload."""
    out = _describe(workload)
    optimum = functools.partial(offline_optimum, workload.steps, workload.budget, max_unconsumed=out["peak_unconsumed"])
    out["opt"] = optimum()
    out["unit"] = {p: run_policy(workload, p, *DISK_PROFILES[UNIT_PROFILE]) for p in POLICIES}
    for profile, (c0, c1) in DISK_PROFILES.items() if ext else ():
        runs = {p: run_policy(workload, p, c0, c1) for p in POLICIES}
        costs = {
            p: c0 * (r["writes"] + r["reads"]) + c1 * (r["tuples_written"] + r["tuples_read"]) for p, r in runs.items()
        }
        hybrid = "half" if c0 / c1 > workload.budget / 2 else "greedy-chunk"
        ext_run = {"c0": c0, "c1": c1, "opt": optimum(c0=c0, c1=c1), "policies": costs, "hybrid_picks": hybrid}
        out.setdefault("ext", {})[profile] = ext_run
    return out


def large_profile(budget: int) -> tuple[int, int]:
    """c0, c1 of the larger instances: T = c0/c1 = M/8 tuples (GreedyChunk's regime, hybrid picks it)."""
    return max(1, budget // 8), 1


def bound_instance(workload: Workload) -> dict[str, Any]:
    """A larger workload: every policy against window_lower_bound (a bound, not the optimum)."""
    c0, c1 = large_profile(workload.budget)
    return {"c0": c0, "c1": c1, **_describe(workload), "unit": {p: run_policy(workload, p, c0, c1) for p in POLICIES}}


def run_competitive(quick: bool) -> dict[str, Any]:
    m, cap, flows_per_family = SMALL_M, SMALL_CAP, 4 if quick else 20
    c0, c1 = DISK_PROFILES[UNIT_PROFILE]
    built, thrash = "built against each policy in turn", "recency thrash pattern, 2 queues, M = {}, 3 cycles"

    def flows(key: str, queues: int, count: int, what: str, consume: str = "round-robin") -> tuple[Any, ...]:
        rates = {"flow_rate": 0.005} if queues > 1 else {}
        workloads = [bursty_workload(key, queues, m, 300, s, cap, consume, **rates) for s in range(1, count + 1)]
        about = f"{queues} queue{'s' if queues > 1 else ''}, M = {m}, backlog <= {cap}, {what}"
        return key, f"bursty on/off, {about}", workloads

    def rr_adversary(queues: int, budget: int, c0: int, c1: int) -> tuple[str, list[Workload]]:
        what = f"Theorem 4.3's round-robin adversary, {built}, {queues} queues, M = {budget}, 3 cycles"
        return what, [theorem_4_3_adversary(p, budget, queues, 3, c0, c1) for p in POLICIES]

    def measured(key: str, what: str, workloads: list[Workload], judge: Callable[[Workload], dict]) -> dict[str, Any]:
        log(f"[model] {key}: {len(workloads)} instance(s)")
        return {"key": key, "description": what, "instances": [judge(w) for w in workloads]}

    thm22 = [theorem_2_2_adversary(p, m, 5, c0, c1) for p in POLICIES]
    small = [  # key, description, workloads, extended-cost OPT too
        (*flows("bursty-1q", 1, flows_per_family, "one tuple consumed per tick"), True),
        (*flows("bursty-2q-rr", 2, flows_per_family, "round-robin consumption"), True),
        (*flows("bursty-2q-oldest", 2, flows_per_family // 2, "oldest-tuple-first consumption", "oldest"), False),
        ("thm2.2", f"Theorem 2.2's adversary, {built}, 1 queue, M = {m}, 5 cycles", thm22, True),
        ("thm4.3", *rr_adversary(2, m, c0, c1), False),
        ("thrash", thrash.format(m), [thrash_workload(m, 3)], False),
    ]
    horizon, seeds = (2000, range(1, 3)) if quick else (5000, range(1, 6))
    large = []
    for queues, budget in ((1, 64), (4, 64), (8, 128)):
        key, rates = f"bursty-{queues}q-M{budget}", {"flow_rate": 0.005 / queues, "burst_rate": 4.0}
        what = f"bursty on/off, {queues} queue(s), M = {budget}, {horizon:,} ticks, round-robin, no backlog cap"
        workloads = [bursty_workload(key, queues, budget, horizon, s, None, "round-robin", **rates) for s in seeds]
        large.append((key, what, workloads))
    for queues, budget in ((4, 32), (8, 64), (16, 128))[: 2 if quick else 3]:
        large.append((f"thm4.3-n{queues}", *rr_adversary(queues, budget, *large_profile(budget))))
    large.append(("thrash-M64", thrash.format(64), [thrash_workload(64, 3)]))
    profiles = {k: list(v) for k, v in DISK_PROFILES.items()}
    out = {"small_budget": SMALL_M, "small_cap": SMALL_CAP, "disk_profiles": profiles, "unit_profile": UNIT_PROFILE}
    out["small"] = [measured(k, what, ws, functools.partial(exact_instance, ext=ext)) for k, what, ws, ext in small]
    return out | {"large": [measured(*family, bound_instance) for family in large]}
