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
loaded); only garbage *cycles* among frozen objects wait. Each tick first collects the
young generations (about a millisecond), so that cycles that are already garbage are
collected rather than frozen; only cycles alive at a tick that die later wait. So the
frozen objects are handed back to the collector (``gc.unfreeze()``, the next full
collection scans them all) rarely, when it is cheapest: once the frozen population is
back near its size at start-up (the backlog was loaded), at most every ten minutes; and
every hour in any case, so a backlog that never drains cannot keep cycles forever. Even
drained, that full collection scans the service's own heap (modules, classes, functions:
65-80 ms measured with everything imported), a pause the p99 of a 10-s window at 1,000
requests/s cannot hide; once a minute, as first written, it was in most such windows
(BENCHMARKS.md, isolation). Unfreezing on a timer alone put a full collection of the
whole backlog into every period (a 250 ms pause).

Written by hand: the standard library's ``gc`` module is the whole mechanism; no library
schedules it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: At most this often the frozen objects are handed back when the backlog has drained.
UNFREEZE_SECONDS = 600.0
#: At least this often they are, drained or not (cycles among them are collected then).
UNFREEZE_ANYWAY_SECONDS = 3600.0
#: "Drained": the frozen population at most this many times its size at the first tick.
DRAINED_RATIO = 1.5


class HeapKeeper:
    """Freezes the heap on every ``tick`` (the maintenance timer: once a second) and unfreezes
    it as the module docstring says."""

    def __init__(
        self,
        unfreeze_seconds: float = UNFREEZE_SECONDS,
        unfreeze_anyway_seconds: float = UNFREEZE_ANYWAY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        frozen: Callable[[], int] = gc.get_freeze_count,
    ):
        self.unfreeze_seconds = unfreeze_seconds
        self.unfreeze_anyway_seconds = unfreeze_anyway_seconds
        self.clock = clock
        self.frozen = frozen
        self._since = clock()
        #: Frozen objects at the first tick: the service's own (modules, functions, classes).
        self.baseline: int | None = None
        self.unfreezes = 0

    def tick(self) -> None:
        now = self.clock()
        waited = now - self._since
        if waited >= self.unfreeze_anyway_seconds or (waited >= self.unfreeze_seconds and self._drained()):
            gc.unfreeze()
            self._since = now
            self.unfreezes += 1
            return  # the next full collection covers everything; frozen again at the next tick
        gc.collect(1)  # garbage cycles of the last second are collected, not frozen
        gc.freeze()
        if self.baseline is None:
            self.baseline = self.frozen()

    def _drained(self) -> bool:
        """Counted only when an unfreeze is due: the count walks the whole frozen heap."""
        return self.baseline is not None and self.frozen() <= DRAINED_RATIO * self.baseline

    def stop(self) -> None:
        """Leave the process's collector as it was (tests run many services in one process)."""
        gc.unfreeze()


@contextmanager
def collection_paused() -> Iterator[None]:
    """The collector off while start-up builds the service's long-lived state (the catalog's
    entries, the tables' scheduler and intake state, the WAL's pending updates), and that
    state frozen when it is built, as ``HeapKeeper.tick`` freezes it every second after.

    Why: start-up allocates millions of objects that all live on, so each full collection
    it triggers scans a heap that only grows, for nothing: a restart at 10,000 tables opened
    intake in 2.7-3.1 s with the collector on and 1.3-1.6 s with it off (same run, two each;
    docs/scaling.md). Garbage cycles made meanwhile are frozen with the rest and collected at
    the HeapKeeper's next unfreeze (at most an hour later), as any frozen cycle is."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
