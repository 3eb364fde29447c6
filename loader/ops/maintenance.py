"""Periodic work, run in-process by APScheduler on the service's event loop.

- every second: persist the catalog if loads changed it (last loaded sequence, estimates),
  try a failed WAL or spill disk again (intake reopens once it takes writes), and freeze
  the heap so that a backlog of pending updates does not lengthen collection pauses
  (``loader/ops/heap.py``);
- every ``wal_truncate_seconds``: delete WAL segments whose updates are all in Delta;
- every ``compact_seconds``: compact each table's small files (one Delta commit per table;
  a latest table declared ``upsert = "deletion-vectors"`` also has its deleted rows purged
  and its files sorted by key: ``loader/loading/sinks/dv_compaction.py``);
- every ``vacuum_seconds``: vacuum files no longer referenced and older than the retention;
- every ``log_keeping_seconds``: keep each table's Delta log short (its newest checkpoint
  verified, expired commit files cleaned: ``loader/ops/delta_log.py``).

Compaction, vacuum and log keeping hold the table (no new batch starts) while they run, so they never
race a load of the same table; other tables keep loading. The service starts this after
intake opens and stops it first when it shuts down (``loader/service.py``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from deltalake import DeltaTable

from loader.durability.quarantine import QuarantineStore
from loader.durability.wal import WriteAheadLog
from loader.intake.idempotency import IdempotencyStore
from loader.intake.submission import WAL_HEAL_SECONDS, Intake
from loader.loading.dispatcher import Dispatcher
from loader.loading.sinks.dv_compaction import compact_latest, vacuum_vectors
from loader.loading.sinks.log_cleanup import LAST_CHECKPOINT
from loader.ops.delta_log import LogKept, keep_log
from loader.ops.heap import HeapKeeper
from loader.ops.metrics import Metrics

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Schedule:
    """How often each job runs (``[maintenance]`` settings); 0 turns compaction or vacuum off."""

    wal_truncate_seconds: float
    compact_seconds: float
    vacuum_seconds: float
    vacuum_retention_hours: int
    log_keeping_seconds: float = 0.0


class Maintenance:
    """The service's timers: what keeps the catalog, the WAL, the disks and the tables in shape."""

    def __init__(
        self,
        schedule: Schedule,
        *,
        save_catalog: Callable[[], Awaitable[None]],
        intake: Intake,
        dispatcher: Dispatcher,
        wal: WriteAheadLog,
        idempotency: IdempotencyStore,
        idempotency_path: Path,
        quarantine: QuarantineStore,
        warehouse: Path,
        ready: Callable[[], bool],
        metrics: Metrics | None = None,
        views: Callable[[], list[str]] = list,
    ) -> None:
        self.schedule = schedule
        self.save_catalog = save_catalog
        self.intake = intake
        self.dispatcher = dispatcher
        self.wal = wal
        self.idempotency = idempotency
        self.idempotency_path = idempotency_path
        self.quarantine = quarantine
        self.warehouse = warehouse
        self.ready = ready
        self.metrics = metrics
        #: The join views' names: their Delta tables' logs are kept as the tables' are.
        self.views = views
        #: Tables and views maintenance works on now, with how many jobs.
        self.working: dict[str, int] = {}
        self.scheduler = AsyncIOScheduler(timezone="UTC")
        self._running: set[asyncio.Task[None]] = set()
        self.heap = HeapKeeper()
        self._every(1.0, save_catalog, "catalog")
        self._every(1.0, self.keep_heap, "heap")
        self._every(WAL_HEAL_SECONDS, self.heal_faults, "heal-faults")
        self._every(schedule.wal_truncate_seconds, self.truncate_wal, "wal-truncate")
        if schedule.compact_seconds:
            self._every(schedule.compact_seconds, self.compact_all, "compact")
        if schedule.vacuum_seconds:
            self._every(schedule.vacuum_seconds, self.vacuum_all, "vacuum")
        if schedule.log_keeping_seconds:
            self._every(schedule.log_keeping_seconds, self.keep_logs, "log-keeping")

    def _every(self, seconds: float, job: Callable[[], Awaitable[object]], name: str) -> None:
        async def tracked() -> None:
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            try:
                await job()
            finally:
                self._running.discard(task)

        self.scheduler.add_job(tracked, "interval", seconds=seconds, id=name, name=name, max_instances=1, coalesce=True)

    def start(self) -> None:
        self.scheduler.start()

    async def stop(self) -> None:
        """Let running jobs finish (APScheduler 3 would cancel them mid-write), then stop."""
        self.scheduler.pause()
        if self._running:
            await asyncio.wait(set(self._running), timeout=60)
        self.scheduler.shutdown(wait=False)
        self.heap.stop()

    # -- the jobs -----------------------------------------------------------------------------
    async def keep_heap(self) -> None:
        """Short collection pauses with many updates pending (loader/ops/heap.py)."""
        self.heap.tick()

    async def heal_faults(self) -> None:
        """Reopen intake once the WAL's disk takes writes again, and spill what an earlier
        failed spill left in memory over the budget."""
        await self.intake.heal()
        pending = self.dispatcher.pending
        if pending.spill_error is not None:
            pending.retry_spill()
            self.dispatcher.sync_resident()

    async def truncate_wal(self) -> int:
        """Delete WAL segments whose updates are all in Delta (keys first saved elsewhere)."""
        self.idempotency.expire()
        # Retired tables' records are done up to their last sequence number.
        committed = dict(self.intake.retired_floor)
        committed.update((name, runtime.committed_seq) for name, runtime in self.intake.tables.items())
        # The catalog first: once segments are gone it is what remembers the newest releases.
        await self.save_catalog()
        await asyncio.to_thread(self.idempotency.save, self.idempotency_path)
        await asyncio.to_thread(self.quarantine.prune, committed)
        return await asyncio.to_thread(self.wal.truncate, committed)

    async def _with_table_held(self, table: str, work: Callable[[Path], T]) -> T | None:
        """``work`` on the table's path (a worker thread) while no load of it runs; None if the
        service is not loading yet or the work failed (logged)."""
        dispatcher = self.dispatcher
        if not self.ready() or table not in dispatcher.index:  # (retired since the job's list was made)
            return None
        dispatcher.hold(table)
        self.working[table] = self.working.get(table, 0) + 1
        try:
            while dispatcher.is_running(table):
                await asyncio.sleep(0.05)
            return await asyncio.to_thread(work, self.warehouse / table)
        except Exception:
            log.exception("maintenance of table %s failed", table)
            return None
        finally:
            dispatcher.release_hold(table)
            self.working[table] -= 1
            if not self.working[table]:
                del self.working[table]

    async def finished_with(self, table: str) -> None:
        """Until no maintenance work runs on ``table`` (a purge waits: its files are going)."""
        while table in self.working:
            await asyncio.sleep(0.05)

    async def compact_all(self) -> None:
        for table in list(self.intake.tables):
            schema = self.intake.schemas.get(table)
            if schema is not None and schema.upsert == "deletion-vectors":
                await self._with_table_held(table, functools.partial(compact_latest, schema=schema))
            else:
                await self._with_table_held(table, lambda path: DeltaTable(str(path)).optimize.compact())

    async def vacuum_all(self) -> None:
        hours = self.schedule.vacuum_retention_hours

        def vacuum(path: Path, vectors: bool) -> object:
            done = DeltaTable(str(path)).vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
            if vectors:  # (deltalake's vacuum leaves deletion vector files: dv_compaction.py says why)
                vacuum_vectors(path, hours)
            return done

        for table in list(self.intake.tables):
            schema = self.intake.schemas.get(table)
            vectors = schema is not None and schema.upsert == "deletion-vectors"
            await self._with_table_held(table, functools.partial(vacuum, vectors=vectors))

    async def keep_logs(self) -> list[LogKept]:
        """Each table's and view's Delta log kept short (loader/ops/delta_log.py); a table
        whose newest checkpoint cannot be read is reported, and its log left alone."""
        kept: list[LogKept] = []
        for table in [*self.intake.tables, *self.views()]:
            if not (self.warehouse / table / "_delta_log").is_dir():
                continue  # (a view whose Delta table could not be made yet: its open retries)
            outcome = await self._with_table_held(table, functools.partial(keep_log, table))
            if outcome is not None:
                kept.append(outcome)
        problems = [k for k in kept if k.problem is not None]
        for k in problems:
            log.error(
                "the Delta log of table %s was not cleaned: %s. Its files are kept as they are; if readers cannot "
                "open the table, restore the checkpoint, or remove %s so that they replay the commits, then write a "
                "new checkpoint (DeltaTable.create_checkpoint)",
                k.table,
                k.problem,
                LAST_CHECKPOINT,
            )
        removed = sum(k.removed for k in kept)
        if self.metrics is not None:
            self.metrics.delta_log_files_removed.inc(removed)
            self.metrics.delta_log_problems.set(len(problems))
        if removed or any(k.checkpoint_written for k in kept):
            log.info(
                "kept the Delta logs of %d tables: %d expired files removed, %d checkpoints written",
                len(kept),
                removed,
                sum(k.checkpoint_written for k in kept),
            )
        return kept
