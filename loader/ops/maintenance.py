"""Periodic work, run in-process by APScheduler on the service's event loop.

- every second: persist the catalog if loads changed it (last loaded sequence, estimates),
  and try a failed WAL or spill disk again (intake reopens once it takes writes);
- every ``wal_truncate_seconds``: delete WAL segments whose updates are all in Delta;
- every ``compact_seconds``: compact each table's small files (one Delta commit per table);
- every ``vacuum_seconds``: vacuum files no longer referenced and older than the retention.

Compaction and vacuum hold the table (no new batch starts) while they run, so they never
race a load of the same table; other tables keep loading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from deltalake import DeltaTable

from loader.service import WAL_HEAL_SECONDS, LoaderService

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(self, service: LoaderService) -> None:
        self.service = service
        self.scheduler = AsyncIOScheduler(timezone="UTC")
        self._running: set[asyncio.Task[None]] = set()
        m = service.settings.maintenance
        self._every(1.0, service.save_catalog, "catalog")
        self._every(WAL_HEAL_SECONDS, service.heal_faults, "heal-faults")
        self._every(m.wal_truncate_seconds, service.truncate_wal, "wal-truncate")
        if m.compact_seconds:
            self._every(m.compact_seconds, self.compact_all, "compact")
        if m.vacuum_seconds:
            self._every(m.vacuum_seconds, self.vacuum_all, "vacuum")

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

    async def _with_table_held(self, table: str, work: Callable[[DeltaTable], object]) -> None:
        service = self.service
        dispatcher = service.dispatcher
        if dispatcher is None or not service.ready:
            return
        dispatcher.hold(table)
        try:
            while dispatcher.is_running(table):
                await asyncio.sleep(0.05)
            path = service.settings.warehouse_path / table
            await asyncio.to_thread(lambda: work(DeltaTable(str(path))))
        except Exception:
            log.exception("maintenance of table %s failed", table)
        finally:
            dispatcher.release_hold(table)

    async def compact_all(self) -> None:
        for table in list(self.service.tables):
            await self._with_table_held(table, lambda dt: dt.optimize.compact())

    async def vacuum_all(self) -> None:
        hours = self.service.settings.maintenance.vacuum_retention_hours
        for table in list(self.service.tables):
            await self._with_table_held(
                table, lambda dt: dt.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
            )
