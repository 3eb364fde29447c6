"""GroupAndRun (Bateni et al., section 4, Figure 2; Theorem 4.3 bounds its stretch by 3).

1. Partition the tables into groups whose update periods span a factor of at most 2.
2. Give group k  p_k = ceil((p - g) * |T_k| / t)  workers (sum p_k <= p).
3. Run MYOPIC inside each group, independently.

Periods come from each table's ``period`` hint when given, else from the online
estimate (an EWMA of update lengths, ``schedulers.model``). The partition is the greedy
one over sorted periods (open a group at the smallest ungrouped period P, put in it every
table with period <= 2P), which uses the fewest groups.

How tables change group as estimates move: each group owns the window [lo, 2 lo] fixed
when it was formed (a merged group, below, owns its whole span [lo, hi]). A table stays
in its group while its period stays within the window widened by ``tolerance``
(hysteresis, so jitter does not make tables flap); beyond that it moves to another group
whose window holds its period, re-deriving the worker split. If no window holds it the
whole partition is rebuilt, at most once per ``regroup_gap`` seconds of policy time
(default: the shortest group period); until then it joins the group with the nearest
window. Running batches are never moved or preempted.

The paper needs p >= 2g. When there are more groups than p // 2, adjacent groups are merged
(the pair whose union spans the least) until g <= max(1, p // 2); the merged groups then
span more than a factor of 2, which ``describe()`` reports.

The faithful algorithm leaves the p - sum(p_k) spare workers idle and never lends a
group's idle workers to another. ``work_conserving=True`` is our variant: a worker whose
group has nothing available (and every spare worker) takes the MYOPIC choice across the
other groups, which makes the policy eager.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from schedulers.base import LazyHeap, Policy, TableView
from schedulers.myopic import myopic_key


@dataclass
class Group:
    lo: float
    hi: float
    tables: set[int] = field(default_factory=set)
    heap: LazyHeap = field(default_factory=LazyHeap)
    workers: list[int] = field(default_factory=list)


def greedy_partition(periods: list[tuple[float, int]], max_groups: int) -> list[tuple[float, float, list[int]]]:
    """Group (period, tid) pairs into windows spanning <= 2x, then merge down to max_groups."""
    groups: list[tuple[float, float, list[int]]] = []
    for period, tid in sorted(periods):
        if groups and period <= 2.0 * groups[-1][0]:
            lo, _, members = groups[-1]
            members.append(tid)
            groups[-1] = (lo, period, members)
        else:
            groups.append((period, period, [tid]))
    while len(groups) > max(1, max_groups):
        k = min(range(len(groups) - 1), key=lambda i: groups[i + 1][1] / groups[i][0])
        lo, _, first = groups[k]
        _, hi, second = groups[k + 1]
        groups[k : k + 2] = [(lo, hi, first + second)]
    return groups


class GroupAndRunPolicy(Policy):
    name = "group-and-run"
    eager = False
    worker_agnostic = False

    def __init__(
        self, work_conserving: bool = False, tolerance: float = 1.25, regroup_gap: float | None = None
    ) -> None:
        if tolerance < 1.0:
            raise ValueError("tolerance must be >= 1 (1 = move a table as soon as it leaves its window)")
        self.work_conserving = work_conserving
        if work_conserving:
            self.name = "group-and-run-wc"
            self.eager = True
            self.worker_agnostic = True
        self.tolerance = tolerance
        self.regroup_gap = regroup_gap
        self.regroups = 0

    # -- set-up and partition ----------------------------------------------------
    def attach(self, view: TableView, workers: int) -> None:
        if workers < 1:
            raise ValueError("group-and-run needs at least one worker")
        self._groups: list[Group] = []
        self._group_of: dict[int, int] = {}
        self._worker_group: list[int | None] = [None] * workers
        self._last_regroup = -math.inf
        self._dirty = False
        super().attach(view, workers)
        self._regroup(now=0.0)

    def table_added(self, tid: int) -> None:
        if self._groups:
            self._dirty = True

    def _regroup(self, now: float) -> None:
        view = self.view
        periods = [(p, tid) for tid in range(len(view)) if (p := view[tid].period) is not None]
        self._groups = [
            Group(lo=lo, hi=hi, tables=set(members))
            for lo, hi, members in greedy_partition(periods, max_groups=self.workers // 2)
        ]
        self._group_of = {tid: k for k, group in enumerate(self._groups) for tid in group.tables}
        self._allocate()
        for tid in self._group_of:
            self._index(tid)
        self._last_regroup = now
        self._dirty = False
        self.regroups += 1

    def _allocate(self) -> None:
        """Figure 2, step 2: ceil((p - g) |T_k| / t) workers per group, contiguous ids."""
        p, g = self.workers, len(self._groups)
        t = sum(len(group.tables) for group in self._groups)
        self._worker_group = [None] * p
        next_worker = 0
        for k, group in enumerate(self._groups):
            share = max(1, math.ceil((p - g) * len(group.tables) / t)) if t else 0
            group.workers = list(range(next_worker, min(p, next_worker + share)))
            for worker in group.workers:
                self._worker_group[worker] = k
            next_worker += len(group.workers)

    def _gap(self) -> float:
        if self.regroup_gap is not None:
            return self.regroup_gap
        return min((group.lo for group in self._groups), default=0.0)

    # -- keeping tables in the right group --------------------------------------
    @staticmethod
    def _upper(group: Group) -> float:
        # A merged group (p < 2g) spans [lo, hi] with hi > 2 lo; its window is that span,
        # otherwise its members would sit outside their own window and regroup endlessly.
        return max(2.0 * group.lo, group.hi)

    def _fits(self, group: Group, period: float, slack: float) -> bool:
        return group.lo / slack <= period <= self._upper(group) * slack

    def _place(self, tid: int, period: float, now: float) -> None:
        current = self._group_of.get(tid)
        if current is not None and self._fits(self._groups[current], period, self.tolerance):
            return
        target = next((k for k, group in enumerate(self._groups) if self._fits(group, period, 1.0)), None)
        if target is None and now - self._last_regroup >= self._gap():
            self._regroup(now)
            return
        if target is None:
            self._dirty = True
            if current is not None:
                return
            target = min(
                range(len(self._groups)),
                key=lambda k: abs(math.log(period / math.sqrt(self._groups[k].lo * self._upper(self._groups[k])))),
                default=None,
            )
            if target is None:
                self._regroup(now)
                return
        if current is not None:
            self._groups[current].tables.discard(tid)
            self._groups[current].heap.set(tid, None)
        self._groups[target].tables.add(tid)
        self._group_of[tid] = target
        self._allocate()

    def _index(self, tid: int) -> None:
        k = self._group_of.get(tid)
        if k is not None:
            self._groups[k].heap.set(tid, myopic_key(self.view[tid]))

    # -- the policy --------------------------------------------------------------
    def notify(self, tid: int, now: float) -> None:
        if self._dirty and now - self._last_regroup >= self._gap():
            self._regroup(now)
        period = self.view[tid].period
        if period is not None:
            self._place(tid, period, now)
        self._index(tid)

    def choose(self, worker: int, now: float) -> int | None:
        k = self._worker_group[worker]
        if k is not None:
            tid = self._groups[k].heap.pop()
            if tid is not None:
                return tid
        if not self.work_conserving:
            return None
        best: tuple[Any, Group] | None = None
        for group in self._groups:
            top = group.heap.peek()
            if top is not None and (best is None or top < best[0]):
                best = (top, group)
        return best[1].heap.pop() if best is not None else None

    def describe(self) -> dict[str, Any]:
        view = self.view
        assigned = {w for group in self._groups for w in group.workers}
        return {
            "work_conserving": self.work_conserving,
            "regroups": self.regroups,
            "groups": [
                {
                    "period_range": [group.lo, group.hi],
                    "tables": sorted(view[tid].name for tid in group.tables),
                    "workers": list(group.workers),
                }
                for group in self._groups
            ],
            "spare_workers": [w for w in range(self.workers) if w not in assigned],
        }
