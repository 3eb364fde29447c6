"""FIFO: the eager baseline of section 3 (any work-conserving order is O(1)-competitive).

Order: tables are loaded in the order in which they became *available* (a pending
update and no running batch), earliest first; a table that becomes available at the
same instant as another is queued after it in event order. Unlike MYOPIC, a table whose
old updates waited behind its own running batch does not jump ahead: it queues from
the moment that batch finished.
"""

from __future__ import annotations

import itertools

from schedulers.base import LazyHeap, Policy, TableView


class FifoPolicy(Policy):
    name = "fifo"

    def attach(self, view: TableView, workers: int) -> None:
        self._queue = LazyHeap()
        self._sequence = itertools.count()
        super().attach(view, workers)

    def notify(self, tid: int, now: float) -> None:
        if not self.view[tid].available:
            self._queue.set(tid, None)
        elif tid not in self._queue:
            self._queue.set(tid, (now, next(self._sequence)))

    def choose(self, worker: int, now: float) -> int | None:
        return self._queue.pop()
