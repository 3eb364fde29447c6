"""The wiring: what ``LoaderService.start`` builds, and that its exit stack undoes it in reverse."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from api.app import create_app
from loader.core.tables import TableConfig
from loader.durability.wal import WalLockedError
from loader.ops.metrics import Metrics
from loader.service import LoaderService
from testing.fakes import ArrowSink
from testing.service_harness import CLICKS, OPERATOR, Harness, make_settings

CLEAN = "stopped cleanly"


def test_a_stop_undoes_the_start_in_reverse_and_says_it_was_clean(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    order: list[str] = []

    async def scenario() -> None:
        async with LoaderService.running(make_settings(tmp_path / "data"), load=False) as service:
            assert service.intake.accepting and service.maintenance.scheduler.running
            scheduler, wal, catalog = service.maintenance.scheduler, service.wal, service.catalog
            pause, release, save = scheduler.pause, wal._release_files, catalog.save
            service.catalog.changed()

            def pause_jobs() -> None:
                order.append("maintenance")
                assert service.intake.accepting, "maintenance stops before intake closes"
                pause()

            def save_catalog(data: bytes | None = None) -> None:
                order.append("catalog")
                assert not service.intake.accepting, "intake closes before the last catalog save"
                save(data)

            def release_wal() -> None:
                order.append("wal")
                release()

            scheduler.pause = pause_jobs  # type: ignore[method-assign]
            catalog.save = save_catalog  # type: ignore[method-assign]
            wal._release_files = release_wal  # type: ignore[method-assign]

    with caplog.at_level(logging.INFO, logger="loader.service"):
        asyncio.run(scenario())
    assert order == ["maintenance", "catalog", "wal"]
    assert CLEAN in caplog.text


def test_a_stop_that_fails_is_not_called_clean(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Review finding: the line the crash trials read as "clean" was logged even when saving
    the catalog failed on the way down."""

    async def scenario() -> None:
        async with LoaderService.running(make_settings(tmp_path / "data"), load=False) as service:
            service.catalog.changed()

            def disk_gone(data: bytes | None = None) -> None:
                raise OSError("No space left on device")

            service.catalog.save = disk_gone  # type: ignore[method-assign]

    with caplog.at_level(logging.INFO, logger="loader.service"), pytest.raises(OSError, match="No space"):
        asyncio.run(scenario())
    assert CLEAN not in caplog.text


def test_a_start_that_fails_half_way_releases_what_it_took(tmp_path: Path) -> None:
    """An unreadable catalog stops the start after the WAL was opened: its lock is released,
    so the start succeeds once the catalog is repaired."""
    settings = make_settings(tmp_path / "data")
    catalog = settings.state_path / "catalog.json"
    catalog.parent.mkdir(parents=True)
    catalog.write_text("{not json", encoding="utf-8")

    async def start() -> None:
        async with LoaderService.running(settings, load=False):
            pass

    with pytest.raises(ValueError, match="unreadable"):
        asyncio.run(start())
    catalog.unlink()
    asyncio.run(start())  # a WalLockedError here would mean the failed start kept the lock


def test_a_second_instance_on_the_same_data_stops_at_the_wal_lock_and_writes_nothing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")

    async def scenario() -> None:
        async with LoaderService.running(settings, load=False):
            catalog = settings.state_path / "catalog.json"
            before = catalog.read_bytes()
            catalog.unlink()  # a second instance would register the configured tables anew
            with pytest.raises(WalLockedError):
                async with LoaderService.running(settings, load=False):
                    pass
            assert not catalog.exists(), "the second instance wrote the first one's catalog"
            catalog.write_bytes(before)

    asyncio.run(scenario())


def test_a_service_started_again_with_the_same_metrics_exports_each_series_once(tmp_path: Path) -> None:
    """Review finding: each start added a freshness collector, so a second start (an app
    entered twice) exported every table's series twice, the stopped service's too."""
    metrics = Metrics()

    async def run_once() -> None:
        async with LoaderService.running(make_settings(tmp_path / "data"), load=False, metrics=metrics):
            pass

    asyncio.run(run_once())
    asyncio.run(run_once())
    text = generate_latest(metrics.registry).decode()
    assert text.count('loader_table_staleness_seconds{table="clicks"}') == 1


@pytest.mark.allow_errors("could not start loading 1 tables, the first 'orders': Delta table 'orders' exists with another schema")
def test_tables_load_while_the_others_are_checked_and_a_bad_one_stops_readiness(tmp_path: Path) -> None:
    """Each table's Delta table is checked after loading started, tables with work first; one
    that exists with another schema is named in the failure, and the rest keep loading."""
    settings = make_settings(tmp_path / "data")
    sink = ArrowSink(settings.warehouse_path)
    sink.ensure_table("orders", TableConfig.model_validate(CLICKS).schema_)
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    with TestClient(create_app(settings, sink_factory=lambda _: sink)) as client:
        service: LoaderService = client.app.state.service  # type: ignore[attr-defined]
        Harness.wait(lambda: service.failure is not None)
        assert "'orders'" in service.failure and "another schema" in service.failure  # type: ignore[operator]
        assert not service.ready and client.get("/readyz", headers=auth).status_code == 503
        assert client.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}]}, headers=auth).status_code == 202
        Harness.wait(lambda: client.get("/v1/tables/clicks", headers=auth).json()["last_loaded_sequence"] == 1)
        assert (
            client.post("/v1/tables/orders/updates", json={"rows": [{"order_id": 1}]}, headers=auth).status_code == 202
        )
        assert client.get("/v1/tables/orders", headers=auth).json()["pending_updates"] == 1  # held: not loaded


def test_a_spark_connect_outage_ends_only_when_a_load_gets_through(tmp_path: Path) -> None:
    """CI finding: a second worker thread's load merely starting cleared the outage, so /readyz
    never showed it. It shows until a load (or one table of a group) succeeds."""
    from loader.core.updates import LoadResult
    from loader.loading.spark import SparkUnreachable

    def gone() -> LoadResult:
        raise SparkUnreachable("StatusCode.UNAVAILABLE: connection refused")

    async def scenario() -> None:
        settings = make_settings(tmp_path / "data", spark={"mode": "connect"})
        async with LoaderService.running(settings, load=False) as service:
            with pytest.raises(SparkUnreachable):
                service._spark_call(gone)
            assert "spark" in service.faults()
            with pytest.raises(SparkUnreachable):
                service._spark_call(gone)  # the other thread's attempt: still out
            assert "spark" in service.faults()
            # A group whose every table failed unreachable keeps it out; one success ends it.
            unreachable = SparkUnreachable("StatusCode.UNAVAILABLE")
            service._spark_call(lambda: [unreachable, unreachable])
            assert "spark" in service.faults()
            done = LoadResult("orders", 3, 10, 1)
            assert service._spark_call(lambda: [done, unreachable]) == [done, unreachable]
            assert "spark" not in service.faults()
            assert service._spark_call(lambda: done) is done
            assert service.faults() == {}

    asyncio.run(scenario())
