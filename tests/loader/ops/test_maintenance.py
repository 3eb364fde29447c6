"""Maintenance stops as the service stops: a job that is running finishes first (a catalog
save or a compaction cut short would leave its file or commit half done)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace

from loader.ops.maintenance import Maintenance, Schedule
from loader.ops.metrics import Metrics


def stubbed(
    schedule: Schedule,
    stub: object,
    warehouse: Path,
    *,
    save_catalog: Callable[[], Awaitable[None]],
    ready: bool = False,
    metrics: Metrics | None = None,
) -> Maintenance:
    """Maintenance whose service parts are all ``stub`` (each test gives it what its jobs use)."""
    return Maintenance(
        schedule,
        save_catalog=save_catalog,
        intake=stub,  # type: ignore[arg-type]
        dispatcher=stub,  # type: ignore[arg-type]
        wal=stub,  # type: ignore[arg-type]
        idempotency=stub,  # type: ignore[arg-type]
        idempotency_path=warehouse / "keys",
        quarantine=stub,  # type: ignore[arg-type]
        warehouse=warehouse,
        ready=lambda: ready,
        metrics=metrics,
    )


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
        maintenance = stubbed(Schedule(3600, 0, 0, 168), stub, tmp_path, save_catalog=slow_catalog_save)
        maintenance.start()
        await asyncio.wait_for(started.wait(), 10)  # the first catalog save, a second in
        await maintenance.stop()
        events.append("stopped")
        return events

    assert asyncio.run(scenario()) == ["save began", "save ended", "stopped"]
