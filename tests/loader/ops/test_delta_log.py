"""Tables that age (loader/ops/delta_log.py): an old table's log is cut to its newest checkpoint
and what came after, the loader then loads into it and an outside reader opens it as a new
one; a table whose newest checkpoint is unreadable is reported and its log left whole."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from loader.core.updates import Batch
from loader.durability.transactions import app_id
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.ops.delta_log import RETENTION, keep_log, newest_checkpoint, retention_value
from loader.ops.maintenance import Maintenance, Schedule
from loader.ops.metrics import Metrics
from testing.aged_tables import age_table
from testing.tables import read_delta
from tests.loader.loading.test_sinks import ORDERS, by_id, order_rows, rows_update

#: Enough for the cut to show (the benchmark ages a table by 100,000: BENCHMARKS.md).
COMMITS = 1_500


def _log_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / "_delta_log"))


@pytest.fixture
def aged(tmp_path: Path) -> Path:
    from loader.loading.sinks.delta_table import create_table

    root = tmp_path / "warehouse" / "orders"
    create_table(root, ORDERS.arrow(), [], name="orders", properties={"delta.checkpointInterval": "20"})
    assert age_table(root, "orders", COMMITS, checkpoint_every=500) == COMMITS
    return root


def test_an_aged_tables_log_is_cut_and_the_loader_and_a_reader_use_it_as_before(aged: Path, spark) -> None:
    assert len(_log_files(aged)) > COMMITS
    kept = keep_log("orders", aged, retention_hours=72)

    files = _log_files(aged)
    assert kept.problem is None and kept.retention_set and not kept.checkpoint_written
    assert kept.removed == kept.files_before - len(files) >= COMMITS - 5
    # The newest checkpoint, the commits after it (the retention's own), its hint: nothing older.
    assert len(files) <= 5, files
    table = DeltaTable(str(aged))
    assert table.metadata().configuration[RETENTION] == retention_value(72)
    assert table.transaction_version(app_id("orders")) == COMMITS

    sink = DeltaRsSink(aged.parent, spark)
    rows = order_rows(random.Random(3), range(50))
    result = sink.load(Batch("orders", (rows_update("orders", COMMITS + 1, rows),)), ORDERS)
    assert (result.rows, result.skipped) == (50, False)
    outside = DeltaTable(str(aged))  # a reader that never saw the table before
    assert outside.transaction_version(app_id("orders")) == COMMITS + 1
    assert by_id(read_delta(aged)) == by_id(rows)
    # A replay of the same batch is still recognised after the cut.
    assert sink.load(Batch("orders", (rows_update("orders", COMMITS + 1, rows),)), ORDERS).skipped


def test_a_table_that_sets_its_own_retention_keeps_it_and_its_young_files(tmp_path: Path) -> None:
    from loader.loading.sinks.delta_table import create_table

    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties={RETENTION: "interval 30 days"})
    age_table(root, "t", 300, checkpoint_every=100, days_old=10)
    kept = keep_log("t", root, retention_hours=72)
    assert not kept.retention_set and kept.removed == 0
    assert DeltaTable(str(root)).metadata().configuration[RETENTION] == "interval 30 days"


def test_a_checkpoint_far_behind_is_written_before_the_cut(tmp_path: Path) -> None:
    from loader.loading.sinks.delta_table import create_table

    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties={"delta.checkpointInterval": "10"})
    age_table(root, "t", 100, checkpoint_every=50)  # checkpoints at 49 and 99
    log_dir = root / "_delta_log"
    old = (log_dir / f"{100:020d}.json").stat().st_mtime
    for v in range(101, 131):  # 30 more old commits, no checkpoint (a failed post-commit hook)
        (log_dir / f"{v:020d}.json").write_bytes((log_dir / f"{100:020d}.json").read_bytes())
        os.utime(log_dir / f"{v:020d}.json", (old, old))
    kept = keep_log("t", root, retention_hours=72)
    assert kept.checkpoint_written and newest_checkpoint(log_dir) == (131, None)  # (131: the retention's commit)
    assert len(_log_files(root)) <= 4  # without the new checkpoint, 100 to 130 would stay


@pytest.mark.allow_errors(r"the Delta log of table orders was not cleaned: checkpoint file \S+ cannot be read")
def test_an_unreadable_newest_checkpoint_is_reported_and_nothing_is_deleted(tmp_path: Path) -> None:
    from loader.loading.sinks.delta_table import create_table

    aged = tmp_path / "warehouse" / "orders"
    create_table(aged, ORDERS.arrow(), [], name="orders", properties={})
    age_table(aged, "orders", 200, checkpoint_every=100)
    log_dir = aged / "_delta_log"
    version, problem = newest_checkpoint(log_dir)
    assert (version, problem) == (200, None)
    (log_dir / f"{version:020d}.checkpoint.parquet").write_bytes(b"not parquet")
    before = _log_files(aged)

    metrics = Metrics()
    stub = SimpleNamespace(tables={"orders": None}, hold=lambda t: None, release_hold=lambda t: None)
    stub.is_running = lambda t: False
    maintenance = Maintenance(
        Schedule(3600, 0, 0, 168, log_keeping_seconds=3600, log_retention_hours=72),
        save_catalog=lambda: asyncio.sleep(0),
        intake=stub,  # type: ignore[arg-type]
        dispatcher=stub,  # type: ignore[arg-type]
        wal=stub,  # type: ignore[arg-type]
        idempotency=stub,  # type: ignore[arg-type]
        idempotency_path=tmp_path / "keys",
        quarantine=stub,  # type: ignore[arg-type]
        warehouse=aged.parent,
        ready=lambda: True,
        metrics=metrics,
    )
    kept = asyncio.run(maintenance.keep_logs())

    assert [k.problem is not None for k in kept] == [True]
    assert "cannot be read" in (kept[0].problem or "")
    assert _log_files(aged) == before  # every commit kept: the only way left to rebuild the table
    assert metrics.delta_log_problems._value.get() == 1


def test_the_service_gives_the_tables_it_creates_their_retention_and_interval() -> None:
    from loader.config import Settings
    from loader.service import table_properties

    settings = Settings.model_validate({"maintenance": {"log_retention_hours": 48}})
    assert table_properties(settings) == {"delta.checkpointInterval": "20", RETENTION: "interval 48 hours"}
    off = Settings.model_validate({"maintenance": {"log_retention_hours": 0}, "loading": {"checkpoint_interval": 0}})
    assert table_properties(off) == {}


def test_rows_written_before_the_cut_read_back_after_it(tmp_path: Path) -> None:
    """The cut keeps the data: files added early in the table's life are in the checkpoint."""
    from deltalake import write_deltalake

    root = tmp_path / "t"
    first = pa.table({"id": pa.array(range(5), pa.int64())})
    write_deltalake(str(root), first, configuration={"delta.checkpointInterval": "20"})
    age_table(root, "t", 500, checkpoint_every=100)
    keep_log("t", root, retention_hours=72)
    assert sorted(read_delta(root).column("id").to_pylist()) == list(range(5))
    assert DeltaTable(str(root)).version() == 501  # (500 + the retention's commit)
