"""Short garbage-collection pauses while many updates are pending.

CPython's full collection scans every container object alive. Pending updates are
long-lived containers (an ``Update`` and its pending-store item each, 3.4 tracked objects
per update measured), so with a backlog of tens of thousands of updates a full
collection stopped the event loop for 80-450 ms (measured with ``gc.callbacks`` in the
service: 19 pauses over 5 ms in 40 s of intake, the longest 450 ms), which is the p99 of
acknowledgements. ``gc.freeze()`` moves every object alive to a permanent generation that
collections skip: done every second, a full collection scans only what was allocated
since, and the backlog costs nothing however large it is.

Frozen objects are still freed by reference counting (an update leaves memory when it is
loaded); only garbage *cycles* among frozen objects wait. Every ``unfreeze_seconds`` the
permanent generation is handed back to the collector, so such cycles are collected then,
at the cost of one full collection a minute instead of one every few seconds.

Written by hand: the standard library's ``gc`` module is the whole mechanism; no library
schedules it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

#: Seconds between handing the frozen objects back to the collector (their cycles collected).
UNFREEZE_SECONDS = 60.0


class HeapKeeper:
    """Freezes the heap on every ``tick`` (the maintenance timer: once a second) and unfreezes
    it every ``unfreeze_seconds``."""

    def __init__(self, unfreeze_seconds: float = UNFREEZE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.unfreeze_seconds = unfreeze_seconds
        self.clock = clock
        self._since = clock()
        self.unfreezes = 0

    def tick(self) -> None:
        now = self.clock()
        if now - self._since >= self.unfreeze_seconds:
            gc.unfreeze()
            self._since = now
            self.unfreezes += 1
            return  # the next full collection covers everything; freeze again at the next tick
        gc.freeze()

    def stop(self) -> None:
        """Leave the process's collector as it was (tests run many services in one process)."""
        gc.unfreeze()
