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

Section 6, *globally-consistent* caches: where fewer than m caches satisfy the prefix
invariant, segments that do not are added as candidates too (``global_candidates``). Their
segment's updates are not all computed by regular processing before other inputs join: in
a segment input's pipeline an inputs outside the segment (Y) may join first, and a tuple
that finds no partner there never reaches the cache's CacheUpdate point. The paper relaxes
the consistency invariant to allow that (Definition 6.1: an entry may lack the segment
tuples that join nothing outside it). Ours keeps Definition 3.1 instead and *evicts* the
entry such a tuple would have changed: Definition 6.1 read literally lets an insertion of
R probe an entry whose key R does not hold yet (section 3.1 joins an update before its
relation changes) and miss segment tuples it joins; evicting keeps every hit exact, and an
evicted key misses once and is computed again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from schedulers.views.declaration import JoinGraph, ViewError

#: A pipeline order: for each input i, the other inputs in the order i's updates join them.
Orders = tuple[tuple[int, ...], ...]
#: "prefix": satisfies Definition 3.2; "global": a globally-consistent cache (section 6).
Scope = Literal["prefix", "global"]

#: Section 7.3's m: at most this many candidates when globally-consistent ones are added.
DEFAULT_GLOBAL_LIMIT = 6


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate cache C_ijk (section 3.2): in ``pipeline``'s order, the operators from
    ``start`` joining ``segment`` (in that order), probed on the attributes ``key``."""

    pipeline: int
    start: int
    segment: tuple[int, ...]
    key: tuple[int, ...]
    scope: Scope = "prefix"
    #: A globally-consistent cache's CacheUpdate points: (segment input m, position q,
    #: watch w): in m's pipeline the segment's updates are complete before operator q, and
    #: operators w .. q-1 join inputs outside the segment (or follow one), where a tuple
    #: that dies takes segment tuples with it (w = q: none). Empty for prefix caches,
    #: whose points are all ``length - 1`` with nothing to watch.
    points: tuple[tuple[int, int, int], ...] = ()

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

    @property
    def update_points(self) -> Mapping[int, int]:
        """For each segment input, the position in its own pipeline before which its tuples
        are the segment's updates (section 3.2: CacheUpdate U_l is placed just before the
        (k - j + 1)st operator; section 6: after the last of the segment's other inputs)."""
        if not self.points:
            return {m: self.length - 1 for m in self.segment}
        return {m: q for m, q, _ in self.points}

    @property
    def watched(self) -> Mapping[int, tuple[int, int]]:
        """Section 6 (ours): per segment input, the operators ``[w, q)`` of its pipeline where a
        dying tuple may take segment tuples with it; only where w < q."""
        return {m: (w, q) for m, q, w in self.points if w < q}

    def name(self, aliases: Sequence[str]) -> str:
        """``t:[r s]``: in t's pipeline, the segment joining r then s; ``r:[s t]*``: a
        globally-consistent cache (section 6)."""
        mark = "*" if self.scope == "global" else ""
        return f"{aliases[self.pipeline]}:[{' '.join(aliases[m] for m in self.segment)}]{mark}"


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


def _connected(graph: JoinGraph, members: Sequence[int]) -> bool:
    reached, todo = {members[0]}, [members[0]]
    while todo:
        for j in graph.neighbours(todo.pop()) & set(members):
            if j not in reached:
                reached.add(j)
                todo.append(j)
    return len(reached) == len(members)


def _exact_upkeep(graph: JoinGraph, orders: Orders, segment: Sequence[int]) -> bool:
    """Section 6 (ours): every segment input's pipeline joins each other segment input on
    attributes the segment's inputs already joined bind (``global_candidates`` says why)."""
    members = set(segment)
    for m in segment:
        joined = {m}
        for j in orders[m]:
            if j in members and set(graph.shared(joined, {j})) != set(graph.shared(joined & members, {j})):
                return False
            joined.add(j)
    return True


def global_candidates(
    graph: JoinGraph, orders: Orders, prefix: Sequence[Candidate], limit: int = DEFAULT_GLOBAL_LIMIT
) -> tuple[Candidate, ...]:
    """Section 6: with p = len(prefix) caches satisfying the prefix invariant and p < m
    (``limit``), m - p globally-consistent caches X join Y: first those where X is all but
    one relation (a pipeline's whole order), then all but two, and so on, taken in
    pipeline order when the quota runs out within a round (the paper: "arbitrarily").

    Y is every input outside X, so X with Y is the whole join, for which the prefix
    invariant always holds. Ours, two conditions. X must be connected (a segment joining
    two inputs with nothing in common caches a cross product, whose key mixes what the
    pipeline's prefix binds and would be evicted wholesale; section 6's examples are all
    connected). And in each segment input's pipeline, a segment input joined after an
    outside one must join only on attributes the segment's inputs before it bind: otherwise
    which of its rows a tuple finds depends on the outside partners it met, and a segment
    tuple none of them leads to would be lost without any tuple dying where the executor
    watches (``_exact_upkeep``), leaving the cache stale.
    """
    if len(prefix) >= limit:
        return ()
    taken = {(c.pipeline, c.start, c.end) for c in prefix}
    found: list[Candidate] = []
    for size in range(graph.n - 1, 1, -1):
        for i, order in enumerate(orders):
            for start in range(len(order) - size + 1):
                if len(found) >= limit - len(prefix):
                    return tuple(found)
                segment = tuple(order[start : start + size])
                if (i, start, start + size - 1) in taken or not _connected(graph, segment):
                    continue
                key = graph.shared(frozenset({i, *order[:start]}), frozenset(segment))
                if not key or not _exact_upkeep(graph, orders, segment):
                    continue
                points = []
                for m in sorted(segment):
                    own = orders[m]
                    q = 1 + max(own.index(o) for o in segment if o != m)
                    outside = [p for p in range(q) if own[p] not in segment]
                    points.append((m, q, outside[0] if outside else q))
                found.append(Candidate(i, start, segment, key, "global", tuple(points)))
    return tuple(found)


def conflicts(left: Candidate, right: Candidate) -> bool:
    """Two caches one plan cannot use together: they overlap in a pipeline, or one's lookup
    skips operators where the other is maintained. A hit bypasses its segment, so a
    CacheUpdate point strictly inside it would not see the tuples it needs, and a
    globally-consistent cache's watched operators would not see the tuples that die there.
    Between prefix-invariant caches only overlap can happen (tests/schedulers/views/
    test_pipelines.py); the rest arises with section 6's caches."""
    if left.overlaps(right):
        return True
    for lookup, maintained in ((left, right), (right, left)):
        i = lookup.pipeline
        q = maintained.update_points.get(i)
        if q is not None and lookup.start < q <= lookup.end:
            return True
        watch = maintained.watched.get(i)
        if watch is not None and lookup.start < watch[1] and lookup.end >= watch[0]:
            return True
    return False
