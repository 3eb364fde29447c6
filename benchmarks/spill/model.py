"""Part 1 of ``benchmarks/spill/``: spilling policies against the offline optimum, in the pure model.

The same list of steps goes to every policy (``QueueCache``, no I/O) and to the offline optimum,
so policy / OPT is the paper's competitive ratio on that input. Adaptive adversaries (Theorems
2.2 and 4.3) build their input by watching one policy, as the proofs do. Every workload ends
drained, so the offline model's final take_all charge never applies.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loader.pending.spill.model import QueueCache, SpillError, Step
from loader.pending.spill.offline import offline_optimum, window_lower_bound
from loader.pending.spill.registry import make_spill_policy
from schedulers.generators import bursty


@dataclass
class Workload:
    family: str
    name: str
    queues: list[str]
    budget: int
    steps: list[Step]
    seed: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def tuples(self) -> int:
        return sum(len(s.arrivals) for s in self.steps)

    @property
    def ticks(self) -> int:
        return sum(max(1, len(s.consume)) for s in self.steps)

    def peak_unconsumed(self) -> int:
        """Most unconsumed tuples at any tick (the same for every policy): the exact DP's 2**k."""
        left: Counter[Hashable] = Counter()
        total = peak = 0
        for step in self.steps:
            for queue, _ in step.arrivals:
                left[queue] += 1
                total += 1
            peak = max(peak, total)
            for queue in step.consume:
                if left[queue]:
                    left[queue] -= 1
                    total -= 1
        if total:
            raise ValueError(f"workload {self.name} leaves {total} tuples unconsumed")
        return peak


def bursty_workload(
    *,
    family: str,
    queues: int,
    budget: int,
    horizon: int,
    seed: int,
    backlog_cap: int | None,
    consume: str = "round-robin",
    flow_rate: float = 0.01,
    pareto_scale: float = 8.0,
    burst_rate: float = 2.0,
    background_rate: float = 0.1,
) -> Workload:
    """Pareto on/off traffic (``schedulers.generators.bursty``, one table per queue) on ticks of 1.

    Each tick: the producers' updates released by then are offered in release order, at
    most M/2n per tick (the paper's arrival-rate assumption) and only while the backlog
    stays within ``backlog_cap`` tuples; what does not fit waits at the producer and is
    offered again next tick (the service's 503 + Retry-After, nothing dropped). Then one
    tuple is consumed: the next non-empty queue in round-robin order (the paper's
    round-robin scheduler), or with ``consume="oldest"`` the queue holding the oldest tuple
    (FIFO across queues, a simple scheduler outside Theorem 4.2). After the horizon the
    producers stop and the queues drain.
    """
    trace = bursty(
        tables=queues,
        flow_rate=flow_rate,
        pareto_shape=1.5,
        pareto_scale=pareto_scale,
        burst_rate=burst_rate,
        background_rate=background_rate,
        horizon=float(horizon),
        utilization=0.5,
        workers=1,
        seed=seed,
    )
    names = [f"q{i}" for i in range(queues)]
    releases = deque(zip(trace.update_releases, trace.update_tables))
    per_tick = max(1, budget // (2 * queues))
    waiting: deque[int] = deque()  # producer side: released, not yet accepted
    fifo: list[deque[int]] = [deque() for _ in names]  # arrival tick of each unconsumed tuple
    steps: list[Step] = []
    backlog = 0
    pointer = 0
    tick = 0
    while releases or waiting or backlog:
        while releases and releases[0][0] <= tick:
            waiting.append(releases.popleft()[1])
        arrivals: list[tuple[Hashable, int]] = []
        while waiting and len(arrivals) < per_tick and (backlog_cap is None or backlog < backlog_cap):
            q = waiting.popleft()
            arrivals.append((names[q], 1))
            fifo[q].append(tick)
            backlog += 1
        taken: list[Hashable] = []
        if backlog:
            if consume == "round-robin":
                for k in range(queues):
                    q = (pointer + k) % queues
                    if fifo[q]:
                        pointer = (q + 1) % queues
                        break
            else:
                q = min((i for i in range(queues) if fifo[i]), key=lambda i: fifo[i][0])
            fifo[q].popleft()
            backlog -= 1
            taken.append(names[q])
        steps.append(Step(arrivals=arrivals, consume=taken))
        tick += 1
    return Workload(
        family=family,
        name=f"{family}/seed{seed}",
        queues=names,
        budget=budget,
        steps=steps,
        seed=seed,
        params={"horizon": horizon, "backlog_cap": backlog_cap, "consume": consume, "per_tick": per_tick},
    )


def thrash_workload(budget: int, cycles: int) -> Workload:
    """Section 1.1's thrashing, made concrete for recency paging: two queues, A and B.

    Each cycle: A receives M + M/4 tuples (nothing consumed), so M/4 must go to disk; A's
    head is consumed until a read-back has happened; then B receives a burst of M tuples
    with consumption paused. Everything in memory is then older than B's burst, and the
    tuples of A read back a moment ago are the least recently used ones left: LRU writes
    them out again, although they are consumed next. Then both queues drain.
    """
    steps: list[Step] = []
    rate = max(1, budget // 4)
    extra = max(1, budget // 4)
    for _ in range(cycles):
        left = budget + extra
        while left:
            n = min(rate, left)
            steps.append(Step(arrivals=[("A", 1)] * n))
            left -= n
        for _ in range(extra + 1):  # past the written part: a read-back in every policy
            steps.append(Step(consume=["A"]))
        left = budget
        while left:
            n = min(rate, left)
            steps.append(Step(arrivals=[("B", 1)] * n))
            left -= n
        for _ in range(budget - 1):
            steps.append(Step(consume=["A"]))
        for _ in range(budget):
            steps.append(Step(consume=["B"]))
    return Workload(
        family="thrash",
        name=f"thrash/M={budget}",
        queues=["A", "B"],
        budget=budget,
        steps=steps,
        params={"cycles": cycles},
    )


@dataclass
class PolicyRun:
    policy: str
    writes: int
    reads: int
    tuples_written: int
    tuples_read: int
    max_writes_per_tuple: int
    tuples_written_twice: int
    peak_resident: int
    error: str | None = None

    @property
    def ops(self) -> int:
        return self.writes + self.reads

    def cost(self, c0: float, c1: float) -> float:
        return c0 * self.ops + c1 * (self.tuples_written + self.tuples_read)


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
        cache = self.cache
        for queue, size in step.arrivals:
            cache.arrive(queue, self.keys[queue], size)
            self.keys[queue] += 1
        for queue in step.consume:
            cache.consume(queue, 1)
        self.steps.append(step)

    def result(self, error: str | None = None) -> PolicyRun:
        cache = self.cache
        written: Counter[tuple[Hashable, int]] = Counter()
        for op in cache.ops or ():
            if op.kind == "write":
                for key in range(op.first_key, op.last_key + 1):
                    written[(op.queue, key)] += 1
        return PolicyRun(
            policy=self.policy_name,
            writes=cache.counts.writes,
            reads=cache.counts.reads,
            tuples_written=cache.counts.bytes_written,
            tuples_read=cache.counts.bytes_read,
            max_writes_per_tuple=max(written.values(), default=0),
            tuples_written_twice=sum(1 for v in written.values() if v > 1),
            peak_resident=cache.peak_resident,
            error=error,
        )


def run_policy(workload: Workload, policy: str, c0: float = 0.0, c1: float = 0.0) -> PolicyRun:
    driver = Driver(policy, workload.budget, workload.queues, c0, c1)
    try:
        for step in workload.steps:
            driver.step(step)
    except SpillError as exc:  # a policy broke the model's rules: reported, not hidden
        return driver.result(f"SpillError: {exc}")
    left = sum(len(q) for q in driver.cache)
    if left:
        return driver.result(f"{left} tuples left unconsumed")
    return driver.result()


def theorem_2_2_adversary(policy: str, budget: int, cycles: int, c0: float = 0.0, c1: float = 0.0) -> Workload:
    """Theorem 2.2's input, built against ``policy`` (one queue).

    Each cycle: fill the queue to M + 1 tuples (at most M/2 per tick, nothing consumed),
    which forces the first write; then consume one tuple per tick until the policy reads;
    then, with consumption paused, add one tuple per tick until the policy has to write
    again ("just exceed the memory buffer for the online algorithm"); then drain. An
    offline algorithm that wrote only one tuple at the start needs no second write.
    """
    driver = Driver(policy, budget, ["q"], c0, c1)
    half = max(1, budget // 2)
    for _ in range(cycles):
        size = 0
        while size < budget + 1:
            n = min(half, budget + 1 - size)
            driver.step(Step(arrivals=[("q", 1)] * n))
            size += n
        reads = driver.cache.counts.reads
        while size and driver.cache.counts.reads == reads:
            driver.step(Step(consume=["q"]))
            size -= 1
        writes = driver.cache.counts.writes
        added = 0
        while driver.cache.counts.writes == writes and added < budget:
            driver.step(Step(arrivals=[("q", 1)]))
            size += 1
            added += 1
        while size:
            driver.step(Step(consume=["q"]))
            size -= 1
    return Workload(
        family="thm2.2",
        name=f"thm2.2 vs {policy}/M={budget}",
        queues=["q"],
        budget=budget,
        steps=driver.steps,
        params={"cycles": cycles, "built_against": policy},
    )


def theorem_4_3_adversary(
    policy: str, budget: int, queues: int, cycles: int, fill_factor: float = 2.0, c0: float = 0.0, c1: float = 0.0
) -> Workload:
    """Theorem 4.3's round-robin input, built against ``policy`` (n queues, one tuple consumed per tick).

    Each cycle: queue 1 alone receives M/2n tuples per tick until ``fill_factor`` x M are
    unconsumed (the proof uses 2M); input stops until the policy reads queue 1 back (its
    "big read"); then M/n new tuples are added to every queue at the maximum rate M/2n
    per tick; then the queues drain, round-robin. An offline algorithm that foresees the
    spurt reads only what it consumes before it.
    """
    names = [f"q{i}" for i in range(queues)]
    driver = Driver(policy, budget, names, c0, c1)
    rate = budget // (2 * queues)
    if rate < 2:
        raise ValueError("Theorem 4.3's fill needs M/2n >= 2 arrivals per tick against one consumption")
    left = Counter({q: 0 for q in names})
    pointer = 0

    def tick(arrivals: list[tuple[Hashable, int]]) -> int:
        nonlocal pointer
        for q, _ in arrivals:
            left[str(q)] += 1
        unconsumed = sum(left.values())
        consume: list[Hashable] = []
        for k in range(queues):
            q = names[(pointer + k) % queues]
            if left[q]:
                pointer = (pointer + k + 1) % queues
                left[q] -= 1
                consume.append(q)
                break
        driver.step(Step(arrivals=arrivals, consume=consume))
        return unconsumed

    target = int(fill_factor * budget)
    for _ in range(cycles):
        while tick([(names[0], 1)] * min(rate, target - sum(left.values()))) < target:
            pass
        reads = driver.cache.counts.reads
        while sum(left.values()) and driver.cache.counts.reads == reads:
            tick([])
        # M/n new tuples for every queue, interleaved, at the maximum rate M/2n per tick
        spurt = [names[i % queues] for i in range(queues * max(1, budget // queues))]
        while spurt:
            batch, spurt = spurt[:rate], spurt[rate:]
            tick([(q, 1) for q in batch])
        while sum(left.values()):
            tick([])
    return Workload(
        family="thm4.3",
        name=f"thm4.3 vs {policy}/n={queues}/M={budget}",
        queues=names,
        budget=budget,
        steps=driver.steps,
        params={"cycles": cycles, "built_against": policy, "fill_factor": fill_factor},
    )


def seeds(count: int, base: int = 1) -> list[int]:
    return list(range(base, base + count))


#: Small instances (exact optimum): M in tuples, and the backlog cap that keeps the exact
#: program within 2**16 states per tick (arrivals beyond it wait at the producer).
SMALL_M = 8
SMALL_CAP = 16
#: Extended cost model in tuples: c1 = 1 per tuple moved, c0 = T (GreedyChunk's block).
#: T = 2 < M/2: GreedyChunk's regime (Theorem 3.2), hybrid picks GreedyChunk.
#: T = 6 > M/2: Theorem 3.3's regime, hybrid picks Half.
DISK_PROFILES = {"T=2": (2, 1), "T=6": (6, 1)}
UNIT_PROFILE = "T=2"
POLICIES = ("half", "buffered-head", "greedy-chunk", "hybrid", "lru")


def _policy_rows(workload: Workload, c0: int, c1: int, policies: Sequence[str] = POLICIES) -> dict[str, Any]:
    return {p: run_policy(workload, p, c0, c1).__dict__ for p in policies}


def _describe(workload: Workload) -> dict[str, Any]:
    """What every instance row records about its workload, and its window lower bound."""
    bound = window_lower_bound(workload.steps, workload.budget)
    return {
        "name": workload.name,
        "family": workload.family,
        "seed": workload.seed,
        "queues": len(workload.queues),
        "budget": workload.budget,
        "tuples": workload.tuples,
        "ticks": workload.ticks,
        "peak_unconsumed": workload.peak_unconsumed(),
        "window_bound": bound.ops,
        "bound_writes": bound.writes,
        "bound_reads": bound.reads,
        "params": workload.params,
    }


def exact_instance(workload: Workload, ext: bool, policies: Sequence[str] = POLICIES) -> dict[str, Any]:
    """Unit-cost and extended-cost OPT (both ``offline_optimum``) and every policy on one workload."""
    out = _describe(workload)
    peak = max(out["peak_unconsumed"], 1)
    out["opt"] = offline_optimum(workload.steps, workload.budget, max_unconsumed=peak)
    c0, c1 = DISK_PROFILES[UNIT_PROFILE]
    out["unit"] = _policy_rows(workload, c0, c1, policies)
    if ext:
        out["ext"] = {}
        for profile, (p0, p1) in DISK_PROFILES.items():
            runs = _policy_rows(workload, p0, p1, policies)
            out["ext"][profile] = {
                "c0": p0,
                "c1": p1,
                "opt": offline_optimum(workload.steps, workload.budget, max_unconsumed=peak, c0=p0, c1=p1),
                "policies": {p: PolicyRun(**r).cost(p0, p1) for p, r in runs.items()},
                "hybrid_picks": "half" if p0 / p1 > workload.budget / 2 else "greedy-chunk",
            }
    return out


def large_profile(budget: int) -> tuple[int, int]:
    """c0, c1 of the larger instances: T = c0/c1 = M/8 tuples (GreedyChunk's regime, hybrid picks it)."""
    return max(1, budget // 8), 1


def bound_instance(workload: Workload, policies: Sequence[str] = POLICIES) -> dict[str, Any]:
    """A larger workload: every policy against window_lower_bound (a bound, not the optimum)."""
    c0, c1 = large_profile(workload.budget)
    return {"c0": c0, "c1": c1, **_describe(workload), "unit": _policy_rows(workload, c0, c1, policies)}


def small_families(quick: bool) -> list[tuple[str, str, list[Workload], bool]]:
    """(family key, description, workloads, extended model too?) of the exact part."""
    m, cap, n_seeds = SMALL_M, SMALL_CAP, 4 if quick else 20
    c0, c1 = DISK_PROFILES[UNIT_PROFILE]

    def flows(key: str, queues: int, count: int, **extra: Any) -> list[Workload]:
        common = {"family": key, "queues": queues, "budget": m, "horizon": 300, "backlog_cap": cap}
        return [bursty_workload(seed=s, **common, **extra) for s in seeds(count)]

    about = f"M = {m}, backlog <= {cap}"
    return [
        (
            "bursty-1q",
            f"bursty on/off, 1 queue, {about}, one tuple consumed per tick",
            flows("bursty-1q", 1, n_seeds),
            True,
        ),
        (
            "bursty-2q-rr",
            f"bursty on/off, 2 queues, {about}, round-robin consumption",
            flows("bursty-2q-rr", 2, n_seeds, flow_rate=0.005),
            True,
        ),
        (
            "bursty-2q-oldest",
            f"bursty on/off, 2 queues, {about}, oldest-tuple-first consumption",
            flows("bursty-2q-oldest", 2, max(2, n_seeds // 2), flow_rate=0.005, consume="oldest"),
            False,
        ),
        (
            "thm2.2",
            f"Theorem 2.2's adversary, built against each policy in turn, 1 queue, M = {m}, 5 cycles",
            [theorem_2_2_adversary(p, m, 5, c0, c1) for p in POLICIES],
            True,
        ),
        (
            "thm4.3",
            f"Theorem 4.3's round-robin adversary, built against each policy in turn, 2 queues, M = {m}, 3 cycles",
            [theorem_4_3_adversary(p, m, 2, 3, 2.0, c0, c1) for p in POLICIES],
            False,
        ),
        ("thrash", f"recency thrash pattern, 2 queues, M = {m}, 3 cycles", [thrash_workload(m, 3)], False),
    ]


def large_families(quick: bool) -> list[tuple[str, str, list[Workload]]]:
    n_seeds, horizon = (2, 2000) if quick else (5, 5000)
    out: list[tuple[str, str, list[Workload]]] = []
    for queues, m in ((1, 64), (4, 64), (8, 128)):
        key = f"bursty-{queues}q-M{m}"
        workloads = [
            bursty_workload(
                family=key,
                queues=queues,
                budget=m,
                horizon=horizon,
                seed=s,
                backlog_cap=None,
                flow_rate=0.005 / queues,
                burst_rate=4.0,
            )
            for s in seeds(n_seeds)
        ]
        out.append(
            (
                key,
                f"bursty on/off, {queues} queue(s), M = {m}, {horizon:,} ticks, round-robin, no backlog cap",
                workloads,
            )
        )
    for queues, m in ((4, 32), (8, 64)) if quick else ((4, 32), (8, 64), (16, 128)):
        c0, c1 = large_profile(m)
        what = f"Theorem 4.3's round-robin adversary, built against each policy in turn, {queues} queues, M = {m}"
        what += ", 3 cycles"
        out.append((f"thm4.3-n{queues}", what, [theorem_4_3_adversary(p, m, queues, 3, 2.0, c0, c1) for p in POLICIES]))
    out.append(("thrash-M64", "recency thrash pattern, 2 queues, M = 64, 3 cycles", [thrash_workload(64, 3)]))
    return out


def run_competitive(quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    small = []
    for key, description, workloads, ext in small_families(quick):
        progress(f"[model] {key}: {len(workloads)} instance(s), exact optimum")
        small.append({"key": key, "description": description, "instances": [exact_instance(w, ext) for w in workloads]})
    large = []
    for key, description, workloads in large_families(quick):
        progress(f"[model] {key}: {len(workloads)} instance(s) against the window lower bound")
        large.append({"key": key, "description": description, "instances": [bound_instance(w) for w in workloads]})
    return {
        "small_budget": SMALL_M,
        "small_cap": SMALL_CAP,
        "disk_profiles": {k: list(v) for k, v in DISK_PROFILES.items()},
        "unit_profile": UNIT_PROFILE,
        "small": small,
        "large": large,
    }
