"""The seams between stages: how an earlier stage hands work to a later one without importing it.

A module imports only its own stage and earlier ones along the data path (core, intake,
durability, pending, loading, ops; ``tests/test_architecture.py`` checks it). Where an
earlier stage must call a later one, it calls one of these Protocols, and the service
(``loader/service.py``) wires the later stage's object in:

================== ======================================== ==========================================
port               called by                                implemented by
================== ======================================== ==========================================
``UpdateLog``      intake (append_future, heal)             ``loader.durability.wal.WriteAheadLog``
``Admission``      intake (room for a request's rows)       ``loader.pending.store.PendingStore``
``ReleaseQueue``   intake (a durable update, in order)      ``loader.loading.dispatcher.Dispatcher``
``IntakeMetrics``  intake                                   ``loader.ops.metrics.Metrics``
``QuarantineMetrics`` the quarantine desk (durability)     ``loader.ops.metrics.Metrics``
``KeyHolds``       the quarantine desk (durability)         ``loader.pending.store.PendingStore``
``BatchHandler``   the dispatcher, around each batch        ``loader.service.LoaderService``
================== ======================================== ==========================================

The messages and the exception that cross these seams are defined here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from loader.core.timeline import JobTimeline
from loader.core.updates import Batch, LoadResult, Update, WalRecord


class SpillFull(Exception):
    """Intake must refuse: the spill disk budget is reached (or spilling failed)."""


class BeyondCapacity(SpillFull):
    """Intake must refuse for good: the request alone is more than memory and the spill disk
    could ever hold at once (retrying it would be refused forever; it must be split).
    ``details``: the request's bytes and the budgets, for the 413 body: a client that split
    the request learns from them whether a part can ever fit."""

    def __init__(self, message: str, *, request_bytes: int, memory_budget_bytes: int, disk_budget_bytes: int) -> None:
        super().__init__(message)
        self.details = {
            "request_bytes": request_bytes,
            "memory_budget_bytes": memory_budget_bytes,
            "disk_budget_bytes": disk_budget_bytes,
            "capacity_bytes": memory_budget_bytes + disk_budget_bytes,
        }


class UpdateLog(Protocol):
    """Where an update becomes durable; it is acknowledged only after ``append`` returns."""

    @property
    def failed(self) -> BaseException | None:
        """The error that stopped appends, until ``heal`` succeeds."""

    def append_future(self, records: Sequence[WalRecord]) -> asyncio.Future[None]:
        """A future done once ``records`` are durable (in the configured sense); the records
        of one call are replayed all or none. Raises once the log has failed, until it is
        healed. (A future, not a coroutine: intake's hot path, where a task per request costs.)"""

    def heal(self) -> bool:
        """Roll a failed log back to its last good state; True once appends may resume."""


class Admission(Protocol):
    """Room in the pending store for payload that is about to be logged."""

    def admit(self, nbytes: int) -> None:
        """Count ``nbytes`` as coming, or raise ``SpillFull`` (memory and spill disk are full)."""

    def release(self, nbytes: int) -> None:
        """The admitted bytes are in the store now, or were refused after all."""


class ReleaseQueue(Protocol):
    """Where durable updates wait for loading, handed over in sequence order per table."""

    def released_many(self, updates: Sequence[Update]) -> None:
        """Updates durable together, in sequence order per table."""


class IntakeMetrics(Protocol):
    def on_received(self, table: str, updates: int = 1) -> None:
        """``updates`` updates of ``table`` were acknowledged."""

    def on_refused(self, reason: str) -> None:
        """A request was answered 503 for ``reason`` (``spill_full``, ``wal_fault``)."""

    def on_intake_fault(self, closed: bool) -> None:
        """Intake closed (or reopened) because of the WAL's disk."""


class QuarantineMetrics(Protocol):
    def on_quarantine_resolved(self, table: str, action: str, updates: int) -> None:
        """An operator ``retried`` or ``discarded`` a quarantined batch of ``updates`` updates."""

    def on_quarantined_now(self, table: str, updates: int) -> None:
        """``updates`` acknowledged updates of ``table`` wait in quarantine."""


@dataclass(frozen=True, slots=True)
class HeldValue:
    """A value of a key that a quarantined update of a latest table without ``order_by``
    holds (docs/latest-tables.md): it waits with the quarantine entry instead of loading,
    so that it cannot be overwritten by the quarantined value once that is retried.

    It must be durable beside the entry before a commit passes ``seq``: from then on the
    WAL no longer replays it (``BatchHandler.keep_held``)."""

    #: The quarantine entry holding its key (the entry's first sequence number).
    entry: int
    key: tuple[object, ...]
    #: Its arrival (``loader.core.updates.arrival``): the newest of a key wins.
    arrival: int
    #: The update it sat in when it was held back, whose commit it must not wait for.
    seq: int
    #: The value: one row of the table.
    row: pa.Table


class KeyHolds(Protocol):
    """Latest tables' keys held by quarantined updates (``loader.pending.keyed``), as the
    quarantine desk drives them: held when an update is quarantined or at start-up,
    released into the update that an operator's retry or discard submits."""

    def hold_keys(
        self, table: str, entry: int, rows: pa.Table, *, saved: pa.Table | None = None, release: int | None = None
    ) -> None:
        """Hold the keys of ``rows`` (the entry's values): their later values wait. ``saved``:
        values held before (``keep_held``'s files); ``release``: the releasing update's sequence."""

    def release_keys_at(self, table: str, entry: int, seq: int | None) -> None:
        """The update numbered ``seq`` releases the entry's keys and carries their held values
        (None: that submission failed, the keys stay held)."""

    def drop_hold(self, table: str, entry: int) -> None:
        """The releasing update is in Delta already (found at start-up): nothing is held."""

    def held_counts(self, table: str, entry: int) -> tuple[int, int] | None:
        """Keys the entry holds and values waiting for them (None: it holds none)."""


@dataclass(frozen=True, slots=True)
class FinishedBatch:
    """A batch is in Delta: what the service records in the catalog and the metrics."""

    table: str
    worker: int
    batch: Batch
    result: LoadResult
    started: float
    finished: float
    stretches: list[float]
    length: float
    #: The table's processing-time estimates after this batch (kept in the catalog).
    alpha: float
    overhead: float
    #: A latest table's seconds per key loaded (its model is per key; None: an append table).
    per_key: float | None = None
    #: Tables loaded by the same Spark job (1: a single-table job).
    job_tables: int = 1


@dataclass(frozen=True, slots=True)
class FailedBatch:
    """A load failed; the batch is back at the head of its queue and retried after ``retry_in``."""

    table: str
    worker: int
    batch: Batch
    error: BaseException
    retry_in: float
    #: This failure split the batch: its halves are tried as batches of their own (bisection,
    #: loader/loading/dispatcher.py), so that only an update that cannot load is quarantined.
    split: bool = False


@dataclass(frozen=True, slots=True)
class QuarantinedBatch:
    """A batch that kept failing is durable in quarantine and out of its table's queue."""

    table: str
    batch: Batch
    error: BaseException
    attempts: int


class BatchHandler(Protocol):
    """What the dispatcher asks of the rest of the service around each batch.

    ``load``, ``keep_held`` and ``set_aside`` run on the batch's worker thread; the three
    notifications run on the event loop, after the dispatcher's own bookkeeping.
    """

    def load(self, worker: int, batch: Batch) -> LoadResult:
        """Run the batch's Spark job and Delta commit (exactly once: loader/durability/transactions.py)."""

    def load_group(self, worker: int, batches: list[Batch]) -> list[LoadResult | BaseException]:
        """Load several tables' batches in one Spark job, each committed on its own (its own
        application transaction): one outcome per batch, in order; a table's failure is its
        outcome, not an exception, so the others' commits stand."""

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        """Write a batch that keeps failing durably into quarantine, or raise."""

    def keep_held(self, table: str, values: Sequence[HeldValue]) -> None:
        """Before a batch is loaded or set aside: make the values held back from it durable
        beside their quarantine entries, or raise (the batch then fails and is retried)."""

    def loaded(self, done: FinishedBatch) -> None: ...

    def failed(self, failed: FailedBatch) -> None: ...

    def quarantined(self, batch: QuarantinedBatch) -> None: ...

    def job_timed(self, timeline: JobTimeline) -> None:
        """A job that loaded at least one table, stage by stage (after its tables' ``loaded``)."""
