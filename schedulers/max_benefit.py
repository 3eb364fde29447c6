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
"""

from __future__ import annotations

import math

from schedulers.base import LazyHeap, Policy, TableView


def benefit_rate(weight: float, length: float, overhead: float, alpha: float) -> float:
    cost = overhead + alpha * length
    if cost <= 0.0:
        return math.inf
    return weight * length / cost


class MaxBenefitPolicy(Policy):
    name = "max-benefit"

    def attach(self, view: TableView, workers: int) -> None:
        self._heap = LazyHeap()
        super().attach(view, workers)

    def notify(self, tid: int, now: float) -> None:
        info = self.view[tid]
        if not info.available:
            self._heap.set(tid, None)
            return
        rate = benefit_rate(info.weight, info.pending_length, info.overhead, info.alpha)
        self._heap.set(tid, (-rate, info.oldest_pending))

    def choose(self, worker: int, now: float) -> int | None:
        return self._heap.pop()
