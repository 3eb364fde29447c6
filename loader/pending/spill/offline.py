"""The offline optimum of the queue-caching problem, and a lower bound for large instances.

Motwani and Thomas (section 1.1) compare online spilling policies with an optimal offline
algorithm that knows the whole arrival and consumption sequence. Both functions here take
the same :class:`~loader.pending.spill.model.Step` list the tests and the benchmark feed to
:class:`~loader.pending.spill.model.QueueCache`, with unit-size tuples, in the paper's unit-cost model
or its extended cost model (section 3: an operation moving t tuples costs c0 + c1·t):

- a clock tick is: the step's arrivals enter memory (memory may exceed M for a moment),
  then any number of operations, after which memory holds at most M tuples *and* the
  tuple consumed at this tick, then the consumption. A step with k consumptions is k ticks
  (the arrivals come with the first); a step with none, or whose consumption names an empty
  queue, is one tick without consumption (memory must still be back within M);
- an operation moves one contiguous run, in queue order, of one queue's unconsumed tuples
  that are all in memory (a write) or all on disk (a read), however the run was written
  (reads may span several writes or part of one), at cost c0 + c1·(tuples in the run):
  c0 = 1, c1 = 0 (the default) is the unit-cost model, where the cost counts operations;
- tuples left unconsumed after the last step are charged as ``QueueCache.take_all`` charges
  them (``leftover="take_all"``: one read per maximal on-disk run) or not at all
  (``leftover="free"``).

Nothing is assumed about the offline algorithm beyond these rules: it may write and read
back the same tuple several times (cyclic), read early, write more than needed.
``QueueCache`` only ever does a subset of these moves (whole-segment reads, budget restored
after every single arrival), so ``offline_optimum`` is at most the ``counts.ops`` (with c0, c1:
``counts.cost(c0, c1)``) of any policy run on the same steps that keeps within the budget
(every policy does with one queue and unit sizes; Half with several queues may not, as its
read-back heads cannot be rewritten).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from loader.pending.spill.model import Step

Leftover = Literal["take_all", "free"]

#: "Unreachable" cost; far above any real cost, far below int64 overflow after additions.
_INF = 1 << 40
#: Largest c0 or c1 accepted: keeps every reachable cost (and _INF plus a tick's additions) exact.
_MAX_UNIT_COST = 1 << 20
#: 2**20 states: a handful of int64 arrays of 8 MB each, about a second per tick.
DEFAULT_MAX_UNCONSUMED = 20

Costs = npt.NDArray[np.int64]


@dataclass(frozen=True)
class _Tick:
    """One tick of the paper's model, flattened from the steps."""

    step: int
    arrivals: tuple[Hashable, ...]
    consume: Hashable | None  # None: nothing consumed at this tick


def _ticks(steps: Iterable[Step]) -> list[_Tick]:
    ticks: list[_Tick] = []
    for index, step in enumerate(steps):
        arrivals: list[Hashable] = []
        for queue, size in step.arrivals:
            if size != 1:
                raise ValueError(f"the offline model has unit-size tuples; step {index} has an arrival of size {size}")
            arrivals.append(queue)
        if not step.consume:
            ticks.append(_Tick(index, tuple(arrivals), None))
        for i, queue in enumerate(step.consume):
            ticks.append(_Tick(index, tuple(arrivals) if i == 0 else (), queue))
    return ticks


# -- the exact optimum ---------------------------------------------------------------------------
#
# State: which unconsumed tuples are on disk, as a bit mask (bit = 1: on disk). Queue q's
# tuples are the bits offset[q] .. offset[q] + length[q] - 1, oldest lowest. The run structure
# on disk does not matter, since a read may take any contiguous on-disk run, so the mask is
# the whole state. ``cost[mask]`` is the least cost that reaches it.
#
# Between two ticks the fewest operations from mask S to mask S' are f(S, S') = the number of
# maximal runs (inside one queue) of consecutive positions where S and S' differ *in the same
# direction* (all 0 -> 1: one write; all 1 -> 0: one read). Doing exactly these moves, writes
# first, achieves it and never needs more than max(memory now, memory after) of memory, so the
# order of operations inside a tick does not matter. No sequence does better: let g(X) be that
# run count between the current mask X and the target S'; flipping a run I on which X is
# uniformly v turns the differing positions inside I from the maximal blocks of I where S' is
# not v into those where S' is v (numbers within one of each other), and can merge or split
# with a differing run just outside I only at I's two ends, in the direction that makes the
# total drop at most 1 (checked case by case on whether I's first and last blocks are v), so
# every operation lowers g by at most 1 and reaching g = 0 takes at least g(S) operations.
#
# In the extended model (an operation of t tuples costs c0 + c1 t, c0, c1 >= 0) the cheapest
# way from S to S' costs exactly c0 f(S, S') + c1 |S xor S'|: any sequence makes at least
# f(S, S') operations (above) and moves every tuple where S and S' differ at least once (a
# tuple moved back and forth only counts more), so it costs at least that; the direct moves
# make f(S, S') operations and move each differing tuple exactly once, so they reach both
# minima at the same time. Moves that S and S' do not show (a tuple written and read back in
# one tick, or across several ticks: cyclic schedules) are covered, since the program takes
# the minimum over every mask at every tick. tests/loader/pending/spill/test_competitive.py checks the
# optimum against a search over single operations, in both cost models.
#
# min over S of cost[S] + c0 f(S, S') + c1 |S xor S'| for every S' is computed one bit position
# at a time, like a transducer: after position i the index holds S' below i and S from i up,
# plus whether position i was changed and in which direction (a run that position i + 1 may
# extend without another c0; every changed position costs c1).


def _tick_transform(cost: Costs, offsets: list[int], c0: int, c1: int) -> Costs:
    """cost'[S'] = min over S of cost[S] + c0 f(S, S') + c1 |S xor S'|: any operations between two ticks."""
    length = cost.size.bit_length() - 1
    keep = cost.copy()  # position i unchanged
    wrote = np.full_like(cost, _INF)  # position i changed 0 -> 1 (a write run)
    read = np.full_like(cost, _INF)  # position i changed 1 -> 0 (a read run)
    starts = set(offsets)
    for i in range(length):
        if i in starts and i:  # runs never cross from one queue to the next
            np.minimum(keep, np.minimum(wrote, read), out=keep)
            wrote.fill(_INF)
            read.fill(_INF)
        half = 1 << i
        k, w, r = (a.reshape(-1, 2, half) for a in (keep, wrote, read))
        new_keep = np.minimum(keep, np.minimum(wrote, read))
        new_wrote = np.full_like(cost, _INF)
        new_read = np.full_like(cost, _INF)
        nw, nr = new_wrote.reshape(-1, 2, half), new_read.reshape(-1, 2, half)
        nw[:, 1, :] = np.minimum(np.minimum(k[:, 0, :], r[:, 0, :]) + c0, w[:, 0, :]) + c1
        nr[:, 0, :] = np.minimum(np.minimum(k[:, 1, :], w[:, 1, :]) + c0, r[:, 1, :]) + c1
        keep, wrote, read = new_keep, new_wrote, new_read
    return np.minimum(keep, np.minimum(wrote, read))


def _insert_zero_bit(cost: Costs, position: int) -> Costs:
    """A tuple arrives in memory at ``position``: every mask gains a 0 bit there."""
    index = np.arange(cost.size, dtype=np.int64)
    low = (1 << position) - 1
    out = np.full(cost.size * 2, _INF, dtype=np.int64)
    out[(index & low) | ((index >> position) << (position + 1))] = cost
    return out


def _consume_bit(cost: Costs, position: int) -> Costs:
    """The tuple at ``position`` is consumed: only masks with it in memory survive, minus that bit."""
    index = np.arange(cost.size, dtype=np.int64)
    in_memory = ((index >> position) & 1) == 0
    kept = index[in_memory]
    low = (1 << position) - 1
    out = np.full(cost.size // 2, _INF, dtype=np.int64)
    out[(kept & low) | ((kept >> (position + 1)) << position)] = cost[in_memory]
    return out


def _popcount(size: int) -> npt.NDArray[np.int64]:
    return np.bitwise_count(np.arange(size, dtype=np.int64)).astype(np.int64)


def _disk_runs(size: int, offsets: list[int]) -> npt.NDArray[np.int64]:
    """Maximal on-disk runs of every mask (what a final take_all reads at least)."""
    index = np.arange(size, dtype=np.int64)
    runs = np.zeros(size, dtype=np.int64)
    starts = set(offsets)
    for i in range(size.bit_length() - 1):
        bit = (index >> i) & 1
        if i in starts or i == 0:
            runs += bit
        else:
            runs += bit & (1 - ((index >> (i - 1)) & 1))
    return runs


def offline_optimum(
    steps: Sequence[Step],
    budget: int,
    *,
    leftover: Leftover = "take_all",
    max_unconsumed: int = DEFAULT_MAX_UNCONSUMED,
    c0: int = 1,
    c1: int = 0,
) -> int:
    """The least cost of disk operations any algorithm (cyclic or not) pays for ``steps``.

    Each operation costs ``c0 + c1 * tuples moved`` (integers >= 0); the default c0 = 1,
    c1 = 0 is the unit-cost model, where the answer is the least number of operations.
    Exact: a dynamic program over every on-disk subset of the unconsumed tuples, so its time
    and memory grow as 2**(unconsumed tuples); ``ValueError`` past ``max_unconsumed`` at one
    tick (use :func:`window_lower_bound` there, a bound on the unit-cost optimum).
    """
    if budget < 1:
        raise ValueError("the memory budget must be at least one tuple")
    for name, value in (("c0", c0), ("c1", c1)):
        if not 0 <= value <= _MAX_UNIT_COST or int(value) != value:
            raise ValueError(f"{name} must be an integer in 0..{_MAX_UNIT_COST}; got {value}")
    c0, c1 = int(c0), int(c1)
    lengths: dict[Hashable, int] = {}
    order: list[Hashable] = []
    cost: Costs = np.zeros(1, dtype=np.int64)
    total = 0

    def offsets() -> list[int]:
        out, at = [], 0
        for q in order:
            out.append(at)
            at += lengths[q]
        return out

    def offset_of(queue: Hashable) -> int:
        at = 0
        for q in order:
            if q == queue:
                return at
            at += lengths[q]
        raise KeyError(queue)

    for tick in _ticks(steps):
        for queue in tick.arrivals:
            if queue not in lengths:
                lengths[queue] = 0
                order.append(queue)
            cost = _insert_zero_bit(cost, offset_of(queue) + lengths[queue])
            lengths[queue] += 1
            total += 1
            if total > max_unconsumed:
                raise ValueError(f"{total} unconsumed tuples at step {tick.step}: past max_unconsumed={max_unconsumed}")
        cost = np.minimum(_tick_transform(cost, offsets(), c0, c1), _INF)
        memory = total - _popcount(cost.size)
        cost[memory > budget] = _INF
        if tick.consume is not None and lengths.get(tick.consume, 0):
            cost = _consume_bit(cost, offset_of(tick.consume))
            lengths[tick.consume] -= 1
            total -= 1
        best = int(cost.min())
        if best >= _INF:  # only when a tick's arrivals alone overflow memory beyond repair
            raise ValueError(f"no schedule fits step {tick.step} in a budget of {budget}")
    if leftover == "take_all" and total:  # one read per maximal on-disk run, of all the tuples on disk
        return int((cost + c0 * _disk_runs(cost.size, offsets()) + c1 * _popcount(cost.size)).min())
    return int(cost.min())


# -- a lower bound that scales ---------------------------------------------------------------------


@dataclass(frozen=True)
class WindowBound:
    """Lower bounds on the writes and the reads of any algorithm (their sum bounds its ops)."""

    writes: int
    reads: int

    @property
    def ops(self) -> int:
        return self.writes + self.reads


class _Fenwick:
    """Counts over 0..size-1 with the k-th smallest present key in O(log size)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.tree = [0] * (size + 1)
        self.top = 1 << max(0, size.bit_length())

    def add(self, key: int, delta: int) -> None:
        i = key + 1
        while i <= self.size:
            self.tree[i] += delta
            i += i & -i

    def kth(self, k: int) -> int:
        """The k-th smallest present key (k >= 1); the caller knows at least k are present."""
        pos, step = 0, self.top
        while step:
            nxt = pos + step
            if nxt <= self.size and self.tree[nxt] < k:
                pos = nxt
                k -= self.tree[nxt]
            step >>= 1
        return pos


def window_lower_bound(steps: Sequence[Step], budget: int, *, leftover: Leftover = "take_all") -> WindowBound:
    """Theorem 2.1's window argument made into a bound for any number of queues, in O(N log N).

    Writes (section 2, Theorem 2.1). At a tick t whose consumed tuple is c, memory holds at
    most M tuples, c among them, so of any M other unconsumed tuples at least one is on disk
    (of any M + 1 at a tick without consumption). Take W_t = the M newest (M + 1) of them: one
    of W_t was written at a tick between the arrival of W_t's oldest tuple and t. For ticks
    t < t' where every tuple of W_t' arrived at a later step than t, the two writes differ:
    one happens by t, the other after it. Scanning ticks in order and keeping each whose
    window arrived wholly after the last kept tick (earliest end first, which is optimal for
    such interval families) counts writes that every algorithm makes.

    Reads (the same argument run backwards in time, which the paper only mentions). Of the M
    (M + 1) unconsumed tuples other than c that are consumed soonest, R_t, one is on disk at t
    and has to be read after t and by its consumption, so by the tick e_t at which R_t's last
    tuple is consumed (a final take_all counts as a tick after all others; with
    ``leftover="free"`` tuples never consumed are left out of R_t, they need no read). Ticks
    whose intervals (t, e_t] are pairwise disjoint need that many different reads; the greedy
    by earliest e_t finds the most.

    Writes and reads are different operations, so the sum bounds any algorithm's total.
    """
    ticks = _ticks(steps)
    # First pass: every tuple's global arrival number, arrival step and consumption tick.
    arrival_step: list[int] = []
    consumed_at: list[int | None] = []
    fifo: dict[Hashable, deque[int]] = {}
    for t, tick in enumerate(ticks):
        for queue in tick.arrivals:
            fifo.setdefault(queue, deque()).append(len(arrival_step))
            arrival_step.append(tick.step)
            consumed_at.append(None)
        if tick.consume is not None and fifo.get(tick.consume):
            consumed_at[fifo[tick.consume].popleft()] = t
    n_tuples, end = len(arrival_step), len(ticks)

    # Consumption keys are distinct: tick numbers for consumed tuples, end + i for leftovers.
    def due(i: int) -> int | None:
        at = consumed_at[i]
        if at is not None:
            return at
        return end + i if leftover == "take_all" else None

    newest = _Fenwick(max(1, n_tuples))  # present: unconsumed, by arrival number
    soonest = _Fenwick(max(1, end + n_tuples))  # present: unconsumed with a due read, by due tick
    unconsumed = with_due = 0
    write_windows: list[tuple[int, int]] = []  # (tick, arrival step of the window's oldest tuple)
    read_windows: list[tuple[int, int]] = []  # (tick, tick by which the window's read is done)
    next_tuple = 0
    fifo.clear()
    for t, tick in enumerate(ticks):
        for queue in tick.arrivals:
            i = next_tuple
            next_tuple += 1
            fifo.setdefault(queue, deque()).append(i)
            newest.add(i, 1)
            unconsumed += 1
            d = due(i)
            if d is not None:
                soonest.add(d, 1)
                with_due += 1
        head = fifo.get(tick.consume) if tick.consume is not None else None
        c = head[0] if head else None
        if c is not None:  # the window leaves out the tuple consumed now
            newest.add(c, -1)
            soonest.add(t, -1)
        need = budget if c is not None else budget + 1
        others = unconsumed - (c is not None)
        if others >= need:
            oldest = newest.kth(others - need + 1)
            write_windows.append((t, arrival_step[oldest]))
        others_due = with_due - (c is not None)
        if others_due >= need:
            read_windows.append((t, soonest.kth(need)))
        if head:
            head.popleft()
            unconsumed -= 1
            with_due -= 1
    writes, last_step = 0, -1
    for t, start_step in write_windows:
        if start_step > last_step:
            writes += 1
            last_step = ticks[t].step
    reads, last_end = 0, -1
    for t, e in sorted(read_windows, key=lambda w: w[1]):
        if t >= last_end:
            reads += 1
            last_end = e
    return WindowBound(writes, reads)


__all__ = ["DEFAULT_MAX_UNCONSUMED", "WindowBound", "offline_optimum", "window_lower_bound"]
