"""The policy interface shared by the simulator and the live service.

A policy is told when a table's state changed (``notify``) and asked which table a free
worker loads next (``choose``). It reads tables only through a read-only view and gets
the time as an argument: no I/O, no wall clock. To make a decision O(log t) rather than
a scan of all tables, each policy keeps its own index (a heap) up to date from the
notifications, in the manner of an event-driven priority queue.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, ClassVar, Protocol


class TableInfo(Protocol):
    """What a policy may read about one table (see ``schedulers.model.TableState``)."""

    tid: int
    name: str
    weight: float
    alpha: float
    overhead: float
    period_hint: float | None
    running: bool

    @property
    def pending_count(self) -> int: ...
    @property
    def available(self) -> bool: ...
    @property
    def oldest_pending(self) -> float: ...
    @property
    def newest_pending(self) -> float: ...
    @property
    def pending_start(self) -> float: ...
    @property
    def pending_length(self) -> float: ...
    @property
    def period(self) -> float | None: ...
    def predicted_duration(self, length: float) -> float: ...

    # The batch a worker would start now (``schedulers.model.TableState``): a latest
    # table's may take only the head of its key queue, and costs by the keys it loads.
    keyed: bool
    waiting_keys: int
    batch_keys: int

    @property
    def batch_count(self) -> int: ...
    @property
    def batch_length(self) -> float: ...
    @property
    def batch_work(self) -> float: ...
    @property
    def batch_duration(self) -> float: ...
    @property
    def backlog_seconds(self) -> float: ...


class TableView(Protocol):
    """Read-only access to all tables by id (a plain list of ``TableState`` fits)."""

    def __len__(self) -> int: ...
    def __getitem__(self, tid: int) -> TableInfo: ...


class Policy(ABC):
    """Base of every scheduling policy.

    Driver contract (simulator and service alike):

    - ``attach(view, workers)`` once, before anything else; ``table_added(tid)`` when a
      table is registered later.
    - ``notify(tid, now)`` after every change of table ``tid``: an update released, a
      batch started or finished, a weight changed, a pause or resume.
    - at each instant, after all finishes and releases of that instant are notified,
      free workers are offered work in increasing worker index via ``choose_group``
      (which asks ``choose``); the driver starts the returned tables at once, as one
      job, and notifies each before asking the next worker.
    - timed policies (``timed = True``) are also woken at ``next_wakeup(now)``.
    """

    name: ClassVar[str]
    #: Never leaves a worker idle while a table is available (paper section 3).
    eager: ClassVar[bool] = True
    #: If ``choose`` returns None for one free worker it does for all: the driver may stop asking.
    worker_agnostic: ClassVar[bool] = True
    #: Needs ``next_wakeup`` (decisions depend on time passing, not only on events).
    timed: ClassVar[bool] = False
    #: Most updates one batch may hold; None = all pending (the model's batching rule).
    batch_limit: int | None = None

    def attach(self, view: TableView, workers: int) -> None:
        self.view = view
        self.workers = workers
        for tid in range(len(view)):
            self.table_added(tid)

    def table_added(self, tid: int) -> None:
        """A table joined the view (it has nothing pending yet, or ``notify`` follows)."""

    @abstractmethod
    def notify(self, tid: int, now: float) -> None:
        """Table ``tid`` changed; refresh this policy's index entry for it."""

    @abstractmethod
    def choose(self, worker: int, now: float) -> int | None:
        """The table worker ``worker`` should load now, or None to stay idle."""

    def choose_group(self, worker: int, now: float, idle_after: int = 0) -> list[int]:
        """The tables worker ``worker`` loads now in one job ([] to stay idle).

        Drivers call this, not ``choose``; a single-table policy answers with its one
        choice. ``idle_after``: free workers the driver will offer work after this one.
        Multi-table jobs: ``schedulers.job_groups``.
        """
        tid = self.choose(worker, now)
        return [] if tid is None else [tid]

    def observe_job_overhead(self, seconds: float) -> None:
        """The driver's current estimate of the fixed cost every job pays (shared by the
        tables of a multi-table job); single-table policies do not need it."""

    def next_wakeup(self, now: float) -> float | None:
        """Earliest future time at which ``choose`` may answer differently without an event."""
        return None

    def describe(self) -> dict[str, Any]:
        """Policy-specific state worth reporting (e.g. GroupAndRun's groups)."""
        return {}


class LazyHeap:
    """A min-heap of tables keyed by a comparable priority, with lazy invalidation.

    ``set`` pushes a new entry only when a table's key changes and remembers the live
    key; stale entries are skipped when they surface. This gives O(log t) updates and
    pops without a decrease-key structure; the heap is rebuilt when stale entries
    outnumber live ones, so memory stays O(t).
    """

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[Any, int]] = []
        self._live: dict[int, Hashable] = {}

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, tid: int) -> bool:
        return tid in self._live

    def set(self, tid: int, key: Any | None) -> None:
        """Make ``key`` the table's priority; None removes the table."""
        live = self._live
        if key is None:
            live.pop(tid, None)
            return
        if live.get(tid) == key:
            return
        live[tid] = key
        heap = self._heap
        heapq.heappush(heap, (key, tid))
        if len(heap) > 64 + 4 * len(live):
            self._heap = [(k, t) for t, k in live.items()]
            heapq.heapify(self._heap)

    def _settle(self) -> tuple[Any, int] | None:
        heap = self._heap
        live = self._live
        while heap:
            key, tid = heap[0]
            if live.get(tid) == key:
                return key, tid
            heapq.heappop(heap)
        return None

    def peek(self) -> tuple[Any, int] | None:
        """(key, tid) of the smallest live entry, without removing it."""
        return self._settle()

    def pop(self) -> int | None:
        """Remove and return the table with the smallest key, or None when empty."""
        top = self._settle()
        if top is None:
            return None
        heapq.heappop(self._heap)
        del self._live[top[1]]
        return top[1]
