"""Pending updates per table, waiting to be loaded: memory up to a budget, then spill segments.

One FIFO queue per table, all sharing one memory budget M (``loader.pending.spill.model``); the
configured spilling policy (``loader.pending.spill.*``) decides which contiguous runs go to disk
and come back. The dispatcher takes a whole queue as one batch: its memory runs travel
as Arrow tables, its spilled runs as references that the load job reads in place (one
read each). A batch with a limit (``Policy.batch_limit``) is consumed the paper's way,
head first, reading the head back when it is on disk.

A batch may also be capped at a sequence number (``take(through=...)``): the dispatcher's
bisection of a batch that keeps failing tries a suspect range of the queue's head as a
batch of its own (loader/loading/dispatcher.py).

A taken batch stays *in flight* until the dispatcher reports it loaded (its segments
are deleted then) or failed (it goes back to the front of its queue unchanged, segments
and all). Its in-memory rows are outside M while in flight: M bounds what waits, and a
batch cannot be bigger than what was waiting when it started (docs/spilling.md).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from loader.abc import BeyondCapacity, HeldValue, SpillFull
from loader.core.updates import Update
from loader.pending.keyed import KeyBatch, KeyFigures, KeySpec, LatestQueue
from loader.pending.spill.buffered_head import BufferedHead
from loader.pending.spill.disk_cost import DiskCost
from loader.pending.spill.model import DiskOp, Item, QueueCache, Run, SpillPolicy
from loader.pending.spill.segments import SegmentFiles

log = logging.getLogger(__name__)


@dataclass
class InFlight:
    runs: list[Run]
    resident: int
    disk_bytes: int = 0


class PendingStore:
    """Every table's acknowledged, not yet loaded updates, in one memory budget M.

    One FIFO queue per table in a ``QueueCache`` (the paper's model, pure), whose spilling
    policy moves contiguous runs to and from Parquet segments (``SegmentFiles``). Intake
    asks it for room first (``admit``: ``SpillFull`` once the disk budget is reached); the
    dispatcher appends each durable update, takes a table's queue as one batch, and reports
    the batch loaded (its segments are deleted) or failed (it goes back to the head).
    """

    def __init__(
        self,
        policy: SpillPolicy | None = None,
        budget: int = 256 << 20,
        segments: SegmentFiles | None = None,
        *,
        disk_budget: int | None = None,
        on_op: Callable[[DiskOp], None] | None = None,
    ) -> None:
        self.segments = segments
        self._on_op = on_op
        # Without segment files (tests of the dispatcher) spills are bookkeeping only.
        self.cache = QueueCache(budget, policy or BufferedHead(), segments, on_op=self._op)
        self.disk_budget = disk_budget
        self._inflight: dict[str, InFlight] = {}
        #: The extended cost model's figures, when the policy uses them (for status pages).
        self.disk_cost: DiskCost | None = None
        #: Tables whose resident bytes changed since the dispatcher last looked.
        self.changed: set[str] = set()
        self.spill_error: str | None = None
        #: Payload bytes admitted (``admit``) whose WAL write is under way: not in the store
        #: yet, but coming. Admission counts them, or every request that arrives during one
        #: slow fsync would be weighed against the same stale totals and the disk budget
        #: overrun by all of them (tests/system/test_overload.py).
        self.admitted = 0
        #: Latest tables' update queues (loader/pending/keyed.py), by table.
        self._latest: dict[str, LatestQueue] = {}

    def _op(self, op: DiskOp) -> None:
        self.changed.add(str(op.queue))
        if op.kind == "write":
            self.spill_error = None
        if self._on_op is not None:
            self._on_op(op)

    @property
    def policy(self) -> SpillPolicy:
        return self.cache.policy

    def add_table(self, table: str) -> None:
        self.cache.add_queue(table)

    def set_keys(self, table: str, spec: KeySpec | None) -> None:
        """Make ``table``'s queue an update queue by ``spec`` (a latest table), or a plain
        FIFO again (None). Before its first update, or with a new policy or batch bound
        for the keys already waiting."""
        if spec is None:
            self._latest.pop(table, None)
            return
        current = self._latest.get(table)
        if current is not None and current.spec.key == spec.key:
            current.respec(spec)
            return
        if len(self.cache.queues[table]) or table in self._inflight:
            raise RuntimeError(f"the key of {table!r} cannot change while updates of it are pending")
        self._latest[table] = LatestQueue(table, spec, self.cache)

    def drain_superseded(self, table: str) -> int:
        """Values of ``table`` overwritten while waiting since the last call (a latest table's)."""
        latest = self._latest.get(table)
        if latest is None:
            return 0
        count, latest.superseded = latest.superseded, 0
        return count

    def key_figures(self, table: str, now: float) -> KeyFigures | None:
        latest = self._latest.get(table)
        return None if latest is None else latest.figures(now)

    def key_batch(self, table: str) -> KeyBatch | None:
        """A latest table's next batch by keys (None: an append table)."""
        latest = self._latest.get(table)
        return None if latest is None else latest.batch()

    def in_flight_keys(self, table: str) -> int | None:
        """Values in a latest table's running batch (None: an append table)."""
        latest = self._latest.get(table)
        return None if latest is None else latest.in_flight_values()

    # -- admission ---------------------------------------------------------------------
    def check_room(self, nbytes: int) -> None:
        """Refuse (SpillFull) an intake of ``nbytes`` that the store could not keep, for good
        (BeyondCapacity) when it could not even with nothing else pending."""
        cache = self.cache
        if self.disk_budget is not None and nbytes > cache.budget + self.disk_budget:
            raise BeyondCapacity(
                f"{nbytes} bytes of rows in one request are more than memory ({cache.budget} bytes) and the spill "
                f"disk ({self.disk_budget} bytes) hold at once",
                request_bytes=nbytes,
                memory_budget_bytes=cache.budget,
                disk_budget_bytes=self.disk_budget,
            )
        nbytes += self.admitted
        if cache.resident + nbytes <= cache.budget:
            return
        if self.spill_error is not None:
            raise SpillFull(f"spilling to disk failed ({self.spill_error}) and the memory budget is full")
        # Segments of batches being loaded are still on disk until their commit.
        on_disk = cache.on_disk + sum(f.disk_bytes for f in self._inflight.values())
        if self.disk_budget is not None and on_disk + nbytes > self.disk_budget:
            raise SpillFull(
                f"the spill directory holds {on_disk} bytes of its {self.disk_budget}-byte budget and memory is full"
            )

    def admit(self, nbytes: int) -> None:
        """``check_room``, then count ``nbytes`` as coming until ``release``: call it before
        the WAL write and ``release`` once the updates are in the store or refused."""
        self.check_room(nbytes)
        self.admitted += nbytes

    def release(self, nbytes: int) -> None:
        self.admitted -= nbytes

    def retry_spill(self) -> None:
        """After a failed spill: spill what is over the budget now (the disk may be back).
        The fault clears once memory is within budget again, by a spill or by loads."""
        cache = self.cache
        try:
            while cache.over_budget:
                queue = max(cache, key=lambda q: q.mem_bytes)
                before = cache.resident
                cache.policy.arrived(queue, None)
                if cache.resident >= before:
                    break  # nothing the policy may write
        except OSError as exc:
            self.spill_error = str(exc)
            return
        if not cache.over_budget:
            self.spill_error = None

    # -- the dispatcher's calls ------------------------------------------------------------
    def append(self, update: Update) -> None:
        queue = self.cache.queues[update.table]
        if queue.runs and update.seq <= queue.runs[-1].items[-1].key:
            raise ValueError(f"update {update.seq} of {update.table!r} is not after {queue.runs[-1].items[-1].key}")
        latest = self._latest.get(update.table)
        keys: list = []
        if latest is not None:  # its values go where the key policy says; what stays is enqueued
            update, keys = latest.arrive(update)
        try:
            item = self.cache.arrive(update.table, update.seq, update.resident_bytes, update)
            if latest is not None:
                latest.added(item, keys)
        except OSError as exc:
            if latest is not None:  # the item is in the queue; only the spill after it failed
                latest.added(next(i for i in queue.items() if i.key == update.seq), keys)
            # The update is durable in the WAL; it stays in memory (over budget) and intake
            # refuses new work (check_room) until a spill succeeds again.
            self.spill_error = str(exc)
            log.error("could not spill pending updates to disk: %s; keeping them in memory", exc)
        self.changed.add(update.table)

    def take(
        self, table: str, limit: int | None = None, now: float | None = None, through: int | None = None
    ) -> tuple[Update, ...]:
        """Remove the oldest ``limit`` updates (all when None), none numbered above ``through``
        (a suspect range the dispatcher tries alone), as one in-flight batch (at ``now``, for
        a latest table's key waits). A ``through`` below the head caps nothing: the range it
        closed is past."""
        if table in self._inflight:
            raise RuntimeError(f"a batch of {table!r} is already in flight")
        cache = self.cache
        latest = self._latest.get(table)
        bound = latest.batch().updates if latest is not None else None
        if bound is not None:  # max_keys_per_batch: the head's updates holding that many keys
            limit = bound if limit is None else min(limit, bound)
        if through is not None:
            upto = 0
            for item in cache.queues[table].items():
                if item.key > through:
                    break
                upto += 1
            if upto:
                limit = upto if limit is None else min(limit, upto)
        if limit is None:
            runs = cache.take_all(table)
        else:
            items: list[Item] = []
            try:
                for _ in range(limit):  # one at a time: a failed read-back loses nothing taken so far
                    items.extend(cache.consume(table, 1))
            except BaseException:
                if items:
                    cache.put_back(table, [Run(deque(items), sum(i.size for i in items))])
                raise
            runs = [Run(deque(items), sum(i.size for i in items))] if items else []
        flight = InFlight(runs, sum(r.nbytes for r in runs if not r.on_disk), sum(r.nbytes for r in runs if r.on_disk))
        self._inflight[table] = flight
        self.changed.add(table)
        taken = tuple(item.value for run in runs for item in run.items)
        if latest is not None:
            latest.taken(taken, now)
            taken = latest.without_held(taken)  # (values a quarantined update's keys hold wait)
        return taken

    def loaded(self, table: str, seconds: float = 0.0) -> None:
        """The in-flight batch of ``table`` is committed (its load took ``seconds``): forget
        it and delete its segments."""
        flight = self._inflight.pop(table)
        latest = self._latest.get(table)
        if latest is not None:
            latest.loaded((item.key for run in flight.runs for item in run.items), seconds)
        if self.segments is not None:
            for run in flight.runs:  # segments handed to the load job go once it is committed
                if run.segment is not None:
                    self.segments.discard(table, run.segment)

    def put_back(self, table: str) -> None:
        """The in-flight batch failed: back to the front of its queue, exactly as it was."""
        flight = self._inflight.pop(table)
        latest = self._latest.get(table)
        if latest is not None:
            latest.put_back([item for run in flight.runs for item in run.items])
        if flight.runs:
            try:
                self.cache.put_back(table, flight.runs)
            except OSError as exc:  # the runs are back; only restoring the budget failed
                self.spill_error = str(exc)
                log.error("could not spill after putting back a failed batch of %s: %s", table, exc)
        self.changed.add(table)

    # -- keys held by quarantined updates (loader.abc.KeyHolds; loader/pending/keyed.py) -----
    def hold_keys(
        self, table: str, entry: int, rows: pa.Table, *, saved: pa.Table | None = None, release: int | None = None
    ) -> None:
        latest = self._latest.get(table)
        if latest is not None:
            latest.hold(entry, rows, saved=saved, release=release)
            self.changed.add(table)

    def release_keys_at(self, table: str, entry: int, seq: int | None) -> None:
        latest = self._latest.get(table)
        if latest is not None:
            latest.release_at(entry, seq)

    def drop_hold(self, table: str, entry: int) -> None:
        latest = self._latest.get(table)
        if latest is not None:
            latest.drop_hold(entry)

    def held_counts(self, table: str, entry: int) -> tuple[int, int] | None:
        latest = self._latest.get(table)
        return None if latest is None else latest.held_counts(entry)

    def held_to_save(self, table: str, updates: Sequence[Update]) -> list[HeldValue]:
        """Values held back from ``updates`` (a batch just taken) that are not durable yet:
        they must be before the batch commits past them (``BatchHandler.keep_held``)."""
        latest = self._latest.get(table)
        return [] if latest is None else latest.unsaved_of(u.seq for u in updates)

    # -- reading ---------------------------------------------------------------------------
    def count(self, table: str) -> int:
        return len(self.cache.queues[table])

    def bytes(self, table: str) -> int:
        """Payload bytes waiting (memory and disk)."""
        queue = self.cache.queues[table]
        return queue.mem_bytes + queue.disk_bytes

    def resident_bytes(self, table: str) -> int:
        return self.cache.queues[table].mem_bytes

    def spilled_bytes(self, table: str) -> int:
        return self.cache.queues[table].disk_bytes

    @property
    def resident(self) -> int:
        return self.cache.resident

    @property
    def spilled(self) -> int:
        return self.cache.on_disk

    @property
    def inflight_bytes(self) -> int:
        return sum(f.resident for f in self._inflight.values())

    @property
    def total_bytes(self) -> int:
        return self.cache.resident + self.cache.on_disk

    def describe(self) -> dict[str, object]:
        c = self.cache
        return {
            **c.policy.describe(),
            "memory_budget_bytes": c.budget,
            "disk_budget_bytes": self.disk_budget,
            "resident_bytes": c.resident,
            "spilled_bytes": c.on_disk,
            "in_flight_bytes": self.inflight_bytes,
            # Segments of batches being loaded: on disk until their commit, and counted
            # against the disk budget (check_room) with spilled_bytes.
            "in_flight_disk_bytes": sum(f.disk_bytes for f in self._inflight.values()),
            "peak_resident_bytes": c.peak_resident,
            "writes": c.counts.writes,
            "reads": c.counts.reads,
            "loader_reads": c.counts.loader_reads,
            "bytes_written": c.counts.bytes_written,
            "bytes_read": c.counts.bytes_read,
            "spill_error": self.spill_error,
            "disk_cost": None
            if self.disk_cost is None
            else {"c0_seconds": self.disk_cost.c0, "c1_seconds_per_byte": self.disk_cost.c1},
            "segment_files": self.segments.files if self.segments is not None else 0,
        }
