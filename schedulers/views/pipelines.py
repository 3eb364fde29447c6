"""MJoin pipelines of a view and the candidate caches they allow.

Section 3.1: input i's pipeline joins an update of R_i with the other n - 1 inputs in an
order R_i1, ..., R_i(n-1); each step joins with an input connected to what is already
joined (no cross products). Section 3.2: a cache C_ijk sits in pipeline i over the segment
of operators j..k; its key K_ijk is the set of join attributes between the inputs before
the segment (R_i included) and the segment's inputs. A *candidate* cache satisfies the
prefix invariant (Definition 3.2): every input of the segment joins the segment's other
inputs first in its own pipeline, so the segment's updates are computed by regular
processing and the cache is maintained at no extra join cost.

Positions are 0-based here (operator 0 is the paper's first operator, i_1). A segment
covers at least two operators: one operator's "cache" would be an index on one input,
which the join operator has already.

Shared caches (Definition 4.1): the same inputs and the same key in different pipelines;
one copy serves them all, so they are one *group* whose maintenance cost is paid once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from schedulers.views.declaration import JoinGraph, ViewError

#: A pipeline order: for each input i, the other inputs in the order i's updates join them.
Orders = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate cache C_ijk (section 3.2): in ``pipeline``'s order, the operators from
    ``start`` joining ``segment`` (in that order), probed on the attributes ``key``."""

    pipeline: int
    start: int
    segment: tuple[int, ...]
    key: tuple[int, ...]

    @property
    def end(self) -> int:
        """The last operator of the segment (inclusive)."""
        return self.start + len(self.segment) - 1

    @property
    def members(self) -> frozenset[int]:
        return frozenset(self.segment)

    @property
    def group(self) -> tuple[frozenset[int], tuple[int, ...]]:
        """Caches with the same group share one store (Definition 4.1)."""
        return self.members, self.key

    @property
    def length(self) -> int:
        return len(self.segment)

    def covers(self, other: Candidate) -> bool:
        return self.pipeline == other.pipeline and self.start <= other.start and other.end <= self.end

    def overlaps(self, other: Candidate) -> bool:
        return self.pipeline == other.pipeline and self.start <= other.end and other.start <= self.end

    def name(self, aliases: Sequence[str]) -> str:
        """``t:[r s]``: in t's pipeline, the segment joining r then s."""
        return f"{aliases[self.pipeline]}:[{' '.join(aliases[m] for m in self.segment)}]"


def default_orders(graph: JoinGraph, rank: Callable[[int, int], float] | None = None) -> Orders:
    """For each input, join next the connected input ranked lowest (by ``rank(i, j)``,
    e.g. its expected fan-out; declaration order when not given).

    A-Greedy [5] orders pipelines adaptively in the paper (section 4, step 1); here an
    order is chosen when the view is declared or re-planned, and caches adapt to it.
    """
    orders = []
    for i in range(graph.n):
        joined, order = {i}, []
        while len(joined) < graph.n:
            nexts = sorted({j for k in joined for j in graph.neighbours(k)} - joined)
            choice = min(nexts, key=lambda j: (rank(i, j) if rank else 0.0, j))
            order.append(choice)
            joined.add(choice)
        orders.append(tuple(order))
    return tuple(orders)


def check_orders(graph: JoinGraph, orders: Sequence[Sequence[int]]) -> Orders:
    """Orders given by an operator or a benchmark: each a permutation of the other inputs
    that never joins an input unconnected to what came before."""
    if len(orders) != graph.n:
        raise ViewError(f"orders: one order per input ({graph.n}), got {len(orders)}")
    for i, order in enumerate(orders):
        if sorted(order) != [j for j in range(graph.n) if j != i]:
            raise ViewError(f"orders[{i}]: must list every other input once, got {list(order)}")
        joined = {i}
        for j in order:
            if not graph.neighbours(j) & joined:
                raise ViewError(f"orders[{i}]: input {j} joins nothing before it (a cross product)")
            joined.add(j)
    return tuple(tuple(order) for order in orders)


def candidates(graph: JoinGraph, orders: Orders) -> tuple[Candidate, ...]:
    """Every cache satisfying the prefix invariant (Definition 3.2), pipeline by pipeline."""
    found = []
    for i, order in enumerate(orders):
        for start in range(len(order)):
            for end in range(start + 1, len(order)):
                members = frozenset(order[start : end + 1])
                width = len(members) - 1
                if not all(frozenset(orders[m][:width]) == members - {m} for m in members):
                    continue
                before = frozenset({i, *order[:start]})
                key = graph.shared(before, members)
                if not key:
                    continue  # joins the prefix on nothing: not a well-formed segment
                found.append(Candidate(i, start, tuple(order[start : end + 1]), key))
    return tuple(found)


def maintenance_points(orders: Orders, candidate: Candidate) -> Mapping[int, int]:
    """For each input of the cached segment, the position in its own pipeline after which
    its tuples are the segment's updates (section 3.2: CacheUpdate U_l is placed just
    before the (k - j + 1)st operator)."""
    return {m: candidate.length - 1 for m in candidate.members}
