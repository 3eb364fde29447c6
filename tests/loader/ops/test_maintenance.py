"""Maintenance stops as the service stops: a job that is running finishes first (a catalog
save or a compaction cut short would leave its file or commit half done)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from loader.ops.maintenance import Maintenance, Schedule


def test_a_stop_lets_the_running_job_finish(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        events: list[str] = []
        started = asyncio.Event()

        async def slow_catalog_save() -> None:
            started.set()
            events.append("save began")
            await asyncio.sleep(0.3)
            events.append("save ended")

        async def heal() -> None:
            return None

        stub = SimpleNamespace(heal=heal, pending=SimpleNamespace(spill_error=None), tables={})
        maintenance = Maintenance(
            Schedule(wal_truncate_seconds=3600, compact_seconds=0, vacuum_seconds=0, vacuum_retention_hours=168),
            save_catalog=slow_catalog_save,
            intake=stub,  # type: ignore[arg-type]
            dispatcher=stub,  # type: ignore[arg-type]
            wal=stub,  # type: ignore[arg-type]
            idempotency=stub,  # type: ignore[arg-type]
            idempotency_path=tmp_path / "keys",
            quarantine=stub,  # type: ignore[arg-type]
            warehouse=tmp_path,
            ready=lambda: False,
        )
        maintenance.start()
        await asyncio.wait_for(started.wait(), 10)  # the first catalog save, a second in
        await maintenance.stop()
        events.append("stopped")
        return events

    assert asyncio.run(scenario()) == ["save began", "save ended", "stopped"]
