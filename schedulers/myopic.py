"""MYOPIC (Bateni et al., section 4, the paragraph before Figure 2).

When a worker becomes idle it looks at all available tables (some update pending, no
batch of that table running) and loads the one whose oldest pending update has the
earliest release time, batching all of that table's pending updates. Simultaneous idle
workers choose in increasing index (the driver's contract). Ties between tables with the
same oldest release, which the paper assumes away, go to the lower table id.
"""

from __future__ import annotations

from schedulers.base import LazyHeap, Policy, TableInfo, TableView


def myopic_key(info: TableInfo) -> float | None:
    """The MYOPIC priority of a table: its oldest pending release, or None if unavailable."""
    return info.oldest_pending if info.available else None


class MyopicPolicy(Policy):
    name = "myopic"

    def attach(self, view: TableView, workers: int) -> None:
        self._heap = LazyHeap()
        super().attach(view, workers)

    def notify(self, tid: int, now: float) -> None:
        self._heap.set(tid, myopic_key(self.view[tid]))

    def choose(self, worker: int, now: float) -> int | None:
        return self._heap.pop()
