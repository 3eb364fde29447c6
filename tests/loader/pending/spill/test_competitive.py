"""Competitive ratios of the spilling policies against the exact offline optimum (loader/pending/spill/offline.py).

Motwani and Thomas, "Caching Queues in Memory Buffers": Half is 2-competitive for one queue
in the unit-cost model (Theorem 2.1) and no online algorithm does better (Theorem 2.2);
BufferedHead is 2n-competitive for n queues consumed round-robin (Theorem 4.2). Here the
policies run through QueueCache on seeded unit-size workloads drained to the end, and their
operation counts are compared with ``offline_optimum`` of the very same steps.

The paper's model consumes one tuple at *every* clock tick (the window argument of Theorem
2.1 needs the consumed tuple in memory at each write). Ticks without consumption are outside
it, and there Half is not 2-competitive: see ``test_half_outside_the_papers_model``.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Hashable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.pending.spill.greedy_chunk import GreedyChunk
from loader.pending.spill.model import QueueCache, SpillPolicy, Step
from loader.pending.spill.offline import Leftover, offline_optimum, window_lower_bound
from loader.pending.spill.registry import make_spill_policy
from testing.depth import examples

#: Unconsumed tuples at one tick in the generated workloads: the exact optimum is 2**CAP states.
CAP = 14


def drive(steps: list[Step], policy: SpillPolicy, budget: int, queues: list[Hashable]) -> QueueCache:
    """Run ``steps`` through a QueueCache (unit sizes, keys in arrival order) and check it drained."""
    cache = QueueCache(budget, policy, record_ops=True)
    for q in queues:
        cache.add_queue(q)
    key = 0
    for step in steps:
        for queue, size in step.arrivals:
            cache.arrive(queue, key, size)
            key += 1
        for queue in step.consume:
            cache.consume(queue, 1)
    assert all(len(q) == 0 for q in cache), "the workload must drain every queue"
    return cache


def ops(steps: list[Step], name: str, budget: int, queues: list[Hashable]) -> int:
    return drive(steps, make_spill_policy(name, budget), budget, queues).counts.ops


# -- workloads -------------------------------------------------------------------------------------


def single_queue(rng: random.Random, budget: int, *, idle: bool) -> list[Step]:
    """Arrivals of at most M/2 per tick (section 1.1) in uniform, bursty or saturating patterns.

    Without ``idle`` every tick consumes one tuple while the queue is nonempty (the paper's
    model); with it some ticks consume nothing. Drained one tuple per tick at the end.
    """
    rate = budget // 2
    mode = rng.choice(["uniform", "bursty", "max"])
    p_consume = rng.choice([0.15, 0.4, 0.7]) if idle else 1.0
    steps: list[Step] = []
    length, burst = 0, False
    for _ in range(rng.randint(5, 50)):
        if rng.random() < 0.2:
            burst = not burst
        k = {"uniform": rng.randint(0, rate), "bursty": rate if burst else rng.randint(0, 1), "max": rate}[mode]
        k = min(k, CAP - length)
        length += k
        consume = 1 if length and rng.random() < p_consume else 0
        length -= consume
        steps.append(Step([(0, 1)] * k, [0] * consume))
    steps.extend(Step([], [0]) for _ in range(length))
    return steps


def round_robin(rng: random.Random, n: int, budget: int, *, idle: bool) -> list[Step]:
    """n queues, at most M/2n arrivals per tick (often skewed to one queue), heads consumed in turn.

    The scheduler consumes the head of the next nonempty queue at each tick (section 4.2); with
    ``idle`` it sometimes skips a tick. Drained round-robin at the end.
    """
    rate = budget // (2 * n)
    lengths = [0] * n
    turn = 0
    steps: list[Step] = []

    def next_queue() -> int:
        nonlocal turn
        while not lengths[turn % n]:
            turn += 1
        q = turn % n
        turn += 1
        lengths[q] -= 1
        return q

    burst = False
    for _ in range(rng.randint(5, 50)):
        if rng.random() < 0.2:
            burst = not burst
        skew = rng.random()
        arrivals: list[tuple[Hashable, int]] = []
        for _ in range(rate if burst else rng.randint(0, rate)):
            if sum(lengths) < CAP:
                q = 0 if rng.random() < skew else rng.randrange(n)
                arrivals.append((q, 1))
                lengths[q] += 1
        consume = [next_queue()] if sum(lengths) and not (idle and rng.random() < 0.3) else []
        steps.append(Step(arrivals, consume))
    while sum(lengths):
        steps.append(Step([], [next_queue()]))
    return steps


# -- the offline optimum itself ------------------------------------------------------------------------


def search_optimum(steps: list[Step], budget: int, leftover: Leftover, c0: int = 1, c1: int = 0) -> int:
    """Dijkstra over single operations (c0 + c1 per tuple moved), tick by tick; a read needs room for its run.

    Independent of offline.py's closed form for the cost between two ticks (and of its
    argument that the order of operations inside a tick does not matter): equal results on
    small instances check both.
    """
    order: list[Hashable] = []
    for step in steps:
        for q, _ in step.arrivals:
            if q not in order:
                order.append(q)
    # A step with k consumptions is k ticks, the arrivals with the first; none: one tick.
    ticks = [
        (step.arrivals if i == 0 else [], consumed)
        for step in steps
        for i, consumed in enumerate(step.consume or [None])
    ]
    State = tuple[tuple[int, ...], ...]
    states: dict[State, int] = {tuple(() for _ in order): 0}
    for arrivals, consumed in ticks:
        start: dict[State, int] = {}
        for state, cost in states.items():
            grown = list(state)
            for q, _ in arrivals:
                grown[order.index(q)] += (0,)
            key = tuple(grown)
            start[key] = min(start.get(key, cost), cost)
        dist = dict(start)
        heap = [(c, s) for s, c in start.items()]
        heapq.heapify(heap)
        while heap:
            cost, state = heapq.heappop(heap)
            if dist[state] < cost:
                continue
            memory = sum(len(b) - sum(b) for b in state)
            for qi, bits in enumerate(state):
                for a in range(len(bits)):
                    for b in range(a, len(bits)):
                        if len(set(bits[a : b + 1])) != 1:
                            break
                        if bits[a] == 1 and memory + b - a + 1 > budget:
                            break
                        flipped = bits[:a] + (1 - bits[a],) * (b - a + 1) + bits[b + 1 :]
                        nxt = state[:qi] + (flipped,) + state[qi + 1 :]
                        reached = cost + c0 + c1 * (b - a + 1)
                        if nxt not in dist or dist[nxt] > reached:
                            dist[nxt] = reached
                            heapq.heappush(heap, (reached, nxt))
        states = {}
        for state, cost in dist.items():
            if sum(len(b) - sum(b) for b in state) > budget:
                continue
            if consumed in order and state[order.index(consumed)]:
                qi = order.index(consumed)
                if state[qi][0]:
                    continue
                state = state[:qi] + (state[qi][1:],) + state[qi + 1 :]
            states[state] = min(states.get(state, cost), cost)

    def take_all(state: State) -> int:
        """One read per maximal on-disk run."""
        runs = sum(1 for bits in state for i, bit in enumerate(bits) if bit and (i == 0 or not bits[i - 1]))
        return c0 * runs + c1 * sum(sum(bits) for bits in state)

    return min(cost + (take_all(s) if leftover == "take_all" else 0) for s, cost in states.items())


@st.composite
def small_workloads(draw: st.DrawFn, max_tuples: int) -> tuple[list[Step], int]:
    """Any steps over 1-3 queues (several arrivals and consumptions per step, empty queues too)."""
    n = draw(st.integers(1, 3))
    budget = draw(st.integers(1, 5))
    steps: list[Step] = []
    total = 0
    for _ in range(draw(st.integers(1, 14))):
        k = draw(st.integers(0, min(budget + 1, max_tuples - total)))
        total += k
        arrivals = [(draw(st.integers(0, n - 1)), 1) for _ in range(k)]
        steps.append(Step(arrivals, draw(st.lists(st.integers(0, n - 1), max_size=2))))
    return steps, budget


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(workload=small_workloads(max_tuples=7), leftover=st.sampled_from(["take_all", "free"]))
def test_offline_optimum_matches_a_search_over_single_operations(
    workload: tuple[list[Step], int], leftover: Leftover
) -> None:
    steps, budget = workload
    assert offline_optimum(steps, budget, leftover=leftover) == search_optimum(steps, budget, leftover)


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=small_workloads(max_tuples=7),
    leftover=st.sampled_from(["take_all", "free"]),
    c0=st.integers(0, 6),
    c1=st.integers(0, 3),
)
def test_extended_optimum_matches_a_search_over_single_operations(
    workload: tuple[list[Step], int], leftover: Leftover, c0: int, c1: int
) -> None:
    """The extended cost model (c0 + c1 per tuple moved, section 3): the same program, exact too."""
    steps, budget = workload
    assert offline_optimum(steps, budget, leftover=leftover, c0=c0, c1=c1) == search_optimum(
        steps, budget, leftover, c0, c1
    )


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(workload=small_workloads(max_tuples=12), leftover=st.sampled_from(["take_all", "free"]))
def test_window_lower_bound_never_exceeds_the_optimum(workload: tuple[list[Step], int], leftover: Leftover) -> None:
    steps, budget = workload
    assert window_lower_bound(steps, budget, leftover=leftover).ops <= offline_optimum(steps, budget, leftover=leftover)


def test_offline_optimum_examples() -> None:
    arrive, consume = Step([(0, 1)], []), Step([], [0])
    # M + 1 tuples once: one write and one read, whatever the online algorithm does.
    assert offline_optimum([arrive] * 5 + [consume] * 5, 4) == 2
    # Fits in memory: nothing to do; left over on disk is charged per contiguous run.
    assert offline_optimum([arrive] * 4, 4) == 0
    assert offline_optimum([arrive] * 6, 4) == 2  # write 4..5 at the fifth tick, one read when taken
    assert offline_optimum([arrive] * 6, 4, leftover="free") == 1
    with pytest.raises(ValueError, match="unit-size"):
        offline_optimum([Step([(0, 2)], [])], 4)
    with pytest.raises(ValueError, match="max_unconsumed"):
        offline_optimum([arrive] * 6, 4, max_unconsumed=5)
    # Extended cost: one write of one tuple and one read of it, c0 + c1 each; two tuples left
    # on disk go in one write of both at the fifth tick, and come back in one read.
    assert offline_optimum([arrive] * 5 + [consume] * 5, 4, c0=3, c1=1) == 2 * (3 + 1)
    assert offline_optimum([arrive] * 6, 4, c0=5, c1=2) == 2 * (5 + 2 * 2)
    with pytest.raises(ValueError, match="c1"):
        offline_optimum([arrive], 4, c1=-1)


def test_window_lower_bound_scales_and_stays_below_every_policy() -> None:
    """Tens of thousands of tuples in well under a second, and below what the policies pay."""
    rng = random.Random(3)
    budget = 64

    def workload(n: int) -> list[Step]:
        lengths = [0] * n
        steps = []
        for _ in range(6000):
            arrivals = [(rng.randrange(n), 1) for _ in range(rng.choice([0, 0, 1, 2, 4, 8]))]
            for q, _ in arrivals:
                lengths[q] += 1
            q = rng.randrange(n)
            consume = [q] if lengths[q] and rng.random() < 0.7 else []
            lengths[q] -= len(consume)
            steps.append(Step(arrivals, consume))
        return steps + [Step([], [q]) for q in range(n) for _ in range(lengths[q])]

    several, one = workload(3), workload(1)
    bound = window_lower_bound(several, budget)
    assert bound.writes > 10 and bound.reads > 10
    for name in ("buffered-head", "lru"):
        assert bound.ops <= ops(several, name, budget, [0, 1, 2])
    bound = window_lower_bound(one, budget)
    assert bound.writes > 10 and bound.reads > 10
    for name in ("buffered-head", "half", "lru"):
        assert bound.ops <= ops(one, name, budget, [0])


# -- Half: Theorems 2.1 and 2.2 ----------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [4, 6, 8])
def test_half_within_twice_the_optimum(budget: int) -> None:
    """Theorem 2.1 on seeded workloads of the paper's model (one consumption per tick)."""
    rng = random.Random(budget)
    ratios: list[float] = []
    for _ in range(examples(32)):
        steps = single_queue(rng, budget, idle=False)
        opt = offline_optimum(steps, budget)
        half = ops(steps, "half", budget, [0])
        assert half <= 2 * opt, (half, opt, steps)
        if opt:
            ratios.append(half / opt)
    assert len(ratios) > examples(32) // 2  # most workloads do spill


def theorem_2_2_adversary(policy: SpillPolicy, budget: int, rounds: int) -> tuple[list[Step], QueueCache]:
    """The adaptive arrival pattern of Theorem 2.2's proof, played against ``policy`` (one queue).

    Each round: fill at M/2 per tick (one consumption per tick) until the queue holds M + 1
    tuples at time tau. If the policy then wrote p >= 3 tuples (scenario 1): stop arrivals
    until it reads back a large part (>= p/2) of them, then inject, in one tick, just enough
    tuples to overflow its memory again, and let the queue drain. If it wrote p <= 2: 3
    arrivals at tau + 1; if it writes >= 7 tuples there, continue as scenario 1, else 7
    arrivals at tau + 2 and drain. The injections and the 3 and 7 exceed M/2 per tick for
    small M: the proof uses O(1) arrivals per tick, not the M/2 bound.
    """
    cache = QueueCache(budget, policy, record_ops=True)
    cache.add_queue(0)
    queue = cache.queues[0]
    steps: list[Step] = []
    key = 0

    def tick(arrivals: int) -> None:
        nonlocal key
        step = Step([(0, 1)] * arrivals, [0] if len(queue) + arrivals else [])
        for _ in range(arrivals):
            cache.arrive(0, key, 1)
            key += 1
        if step.consume:
            cache.consume(0, 1)
        steps.append(step)

    for _ in range(rounds):
        while True:
            size = len(queue)
            arrivals = min(budget // 2, budget + 1 - size)
            before = cache.counts.bytes_written
            tick(arrivals)
            if size + arrivals == budget + 1:
                break
        p = cache.counts.bytes_written - before
        scenario_1 = True
        if p <= 2:
            before = cache.counts.bytes_written
            tick(3)
            if cache.counts.bytes_written - before < 7:
                tick(7)
                scenario_1 = False
        if scenario_1:
            assert cache.ops is not None
            while len(queue):
                seen = len(cache.ops)
                tick(0)
                if any(op.kind == "read" and 2 * op.items >= p for op in cache.ops[seen:]):
                    break
            writes = cache.counts.writes
            while cache.counts.writes == writes and len(queue) < CAP:
                tick(max(1, budget - cache.resident + 1))
        while len(queue):
            tick(0)
    return steps, cache


@pytest.mark.parametrize("budget", [4, 6, 8])
def test_half_on_the_theorem_2_2_adversary(budget: int) -> None:
    """The lower-bound sequence holds Half to exactly twice the optimum: both theorems are tight."""
    steps, cache = theorem_2_2_adversary(make_spill_policy("half", budget), budget, rounds=3)
    assert cache.counts.ops == 2 * offline_optimum(steps, budget)


POLICIES: dict[str, Callable[[int], SpillPolicy]] = {
    "half": lambda m: make_spill_policy("half", m),
    "buffered-head": lambda m: make_spill_policy("buffered-head", m),
    "greedy-chunk-1": lambda m: GreedyChunk(1),
    "greedy-chunk-2": lambda m: GreedyChunk(2),
    "lru": lambda m: make_spill_policy("lru", m),
}


@pytest.mark.parametrize("budget", [6, 8])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_policy_beats_twice_the_optimum_on_the_adversary(name: str, budget: int) -> None:
    """Theorem 2.2 on the policies at hand: the adversary forces each to at least 2 x OPT.

    (With M = 4 the scenario-2 injections of 3 and 7 tuples overflow the offline algorithm's
    memory too, so the proof's "the offline algorithm needs no further write" fails there;
    buffered-head and greedy-chunk-2, which write p = 2 at tau, get 5/3.)
    """
    steps, cache = theorem_2_2_adversary(POLICIES[name](budget), budget, rounds=2)
    assert cache.counts.ops >= 2 * offline_optimum(steps, budget)


def test_half_reads_in_as_soon_as_its_head_empties() -> None:
    """Regression: reading the head back only when the next tuple is consumed broke Theorem 2.1.

    Arrivals between the emptying of the head and that consumption filled the tail to M/2 and
    [Write-Out] wrote them, on a queue that fits in memory: this minimal sequence of the
    paper's model cost 6 operations against an optimum of 2, and repeating its tail grows the
    cost without bound while the optimum stays put.
    """
    steps: list[Step] = []
    length = 0
    for arrivals in (2, 2, 2, 2, 0, 2, 0, 0, 2):
        length += arrivals - 1
        steps.append(Step([(0, 1)] * arrivals, [0]))
    steps += [Step([], [0])] * length
    assert offline_optimum(steps, 4) == 2
    assert ops(steps, "half", 4, [0]) == 4

    arrive, consume = Step([(0, 1)], []), Step([], [0])
    for cycles in (1, 4, 16):
        steps = [arrive] * 7 + [consume] * 5 + [arrive, arrive, consume, consume] * cycles + [consume] * 2
        assert offline_optimum(steps, 4) == 3
        assert ops(steps, "half", 4, [0]) == 4


def test_half_outside_the_papers_model() -> None:
    """Ticks without a consumption void Theorem 2.1's window argument, and Half exceeds 2 x OPT.

    At a tick with no consumption the offline algorithm need not keep the head in memory, so
    it writes up to M + M/2 tuples at once (all of memory plus the tick's arrivals) and reads
    M at a time, where Half moves M/2 per operation. Minimal case found (M = 2): tuples 0..2
    one per tick, 0 consumed at the third, then 12 more arrivals without consumption, then the
    drain: Half 26 (a write and a read per tuple from tuple 3 on, plus its first write of 1..2
    and the read of it), optimum 12. For M = 4 the ratio climbs with the length of such a
    stretch (12/7, 14/8, 16/9, 18/10 at 16, 18, 20, 22 tuples), towards 2.4 by the count above.

    What is asserted on idle-tick workloads is therefore what holds at these sizes: within
    2 x OPT + 2, and within 2 x OPT for M >= 4 (14 tuples are too few for the M = 4 effect).
    """
    steps = [Step([(0, 1)], []), Step([(0, 1)], []), Step([(0, 1)], [0])] + [Step([(0, 1)], [])] * 12
    steps += [Step([], [0])] * 14
    assert (ops(steps, "half", 2, [0]), offline_optimum(steps, 2)) == (26, 12)

    rng = random.Random(2)
    worst_m2 = 0.0
    for _ in range(examples(40)):
        budget = rng.choice([2, 4, 6, 8])
        steps = single_queue(rng, budget, idle=True)
        opt = offline_optimum(steps, budget)
        half = ops(steps, "half", budget, [0])
        assert half <= 2 * opt + 2, (half, opt, steps)
        if budget > 2:
            assert half <= 2 * opt, (half, opt, steps)
        elif opt:
            worst_m2 = max(worst_m2, half / opt)
    assert worst_m2 > 2  # the seeded workloads do meet the effect


# -- BufferedHead: Theorem 4.2 -------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "budget"), [(2, 4), (2, 8), (3, 6), (3, 12)])
@pytest.mark.parametrize("idle", [False, True])
def test_buffered_head_within_2n_of_the_optimum_round_robin(n: int, budget: int, idle: bool) -> None:
    rng = random.Random(budget * 10 + n + idle)
    spilled = 0
    for _ in range(examples(16)):
        steps = round_robin(rng, n, budget, idle=idle)
        opt = offline_optimum(steps, budget)
        ours = ops(steps, "buffered-head", budget, list(range(n)))
        assert ours <= 2 * n * opt, (ours, opt, steps)
        spilled += opt > 0
    if idle or budget // (2 * n) > 1:  # at M/2n = 1 arrival per tick a queue never grows
        assert spilled
