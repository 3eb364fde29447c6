"""Max-benefit: the weighted-staleness heuristic the paper cites as working well ([8]:
Golab, Johnson, Shkapenyuk, "Scheduling Updates in a Real Time Stream Warehouse",
ICDE 2009; Bateni et al. section 1.1 and section 5).

Loading table i's pending batch lowers its staleness by the batch length (the table
becomes current from r_i,j-1 up to its newest release) and costs the predicted
processing time overhead_i + alpha_i * length. The policy loads the available table
with the largest weighted decrease per second of work:

    benefit_i = weight_i * length_i / (overhead_i + alpha_i * length_i)

With zero overheads this is the static priority weight_i / alpha_i; overheads favour
tables that have accumulated more. Equal benefits fall back to MYOPIC's rule (oldest
pending release first), so with all weights 1 and equal costs it is MYOPIC.

A latest table (UpStream section 5) is costed by keys: its pending updates hold one value
per waiting key, so loading them costs overhead_i + c_i * keys (``TableState``), however
many updates a hot key got while it waited. When ``max_keys_per_batch`` splits that
backlog into several batches, the table is ranked by the rate of the whole catch-up,
length_i over every batch's overhead plus c_i * keys (``backlog_seconds``), not by its
next batch alone: that batch's share of the length stays small however far the table
falls behind, so ranking by it starves the table (``catch_up=False`` keeps that ranking
for the comparison in BENCHMARKS.md, "Latest tables among the others").
"""

from __future__ import annotations

import math

from schedulers.base import LazyHeap, Policy, TableInfo, TableView


def benefit_rate(info: TableInfo, catch_up: bool = True) -> float:
    """benefit_i of table ``info``: its weighted staleness decrease per second of loading
    (``catch_up=False``: of its next batch alone, the comparison of the module docstring)."""
    if catch_up:
        cost, length = info.backlog_seconds, info.pending_length
    else:
        cost, length = info.batch_duration, info.batch_length
    if cost <= 0.0:
        return math.inf
    return info.weight * length / cost


class MaxBenefitPolicy(Policy):
    name = "max-benefit"

    def __init__(self, catch_up: bool = True) -> None:
        self.catch_up = catch_up

    def attach(self, view: TableView, workers: int) -> None:
        self._heap = LazyHeap()
        super().attach(view, workers)

    def notify(self, tid: int, now: float) -> None:
        info = self.view[tid]
        if not info.available:
            self._heap.set(tid, None)
            return
        rate = benefit_rate(info, self.catch_up)
        self._heap.set(tid, (-rate, info.oldest_pending))

    def choose(self, worker: int, now: float) -> int | None:
        return self._heap.pop()
