"""Tables that age (loader/ops/delta_log.py, loader/loading/sinks/log_cleanup.py): an old
table's expired log is cut at a checkpoint that is complete and read, the loader then loads
into it and an outside reader opens it as a new one; a table whose newest checkpoint is
unreadable is reported and its log left whole; stray or incomplete checkpoint files never
become the cut (deltalake's own cleanup_metadata deleted the table's only good checkpoint then)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from loader.core import failpoints
from loader.core.updates import Batch
from loader.durability.transactions import app_id
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.sinks.delta_table import create_table
from loader.loading.sinks.log_cleanup import RETENTION, clean_expired, newest_checkpoint, retention_value
from loader.ops.delta_log import keep_log
from loader.ops.maintenance import Schedule
from loader.ops.metrics import Metrics
from testing.aged_tables import age_table
from testing.tables import read_delta
from tests.loader.loading.test_sinks import ORDERS, by_id, order_rows, rows_update
from tests.loader.ops.test_maintenance import stubbed

#: The tables' retention, as the loader gives the tables it creates.
PROPERTIES = {"delta.checkpointInterval": "20", RETENTION: retention_value(168)}
#: Enough for the cut to show (the benchmark ages a table by 100,000: BENCHMARKS.md).
COMMITS = 600


def _log_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / "_delta_log"))


@pytest.fixture
def aged(tmp_path: Path) -> Path:
    root = tmp_path / "warehouse" / "orders"
    create_table(root, ORDERS.arrow(), [], name="orders", properties=PROPERTIES)
    assert age_table(root, "orders", COMMITS, checkpoint_every=200) == COMMITS
    return root


def test_an_aged_tables_log_is_cut_and_the_loader_and_a_reader_use_it_as_before(aged: Path, spark) -> None:
    assert len(_log_files(aged)) > COMMITS
    kept = keep_log("orders", aged)

    files = _log_files(aged)
    assert kept.problem is None and not kept.checkpoint_written
    assert kept.removed == kept.files_before - len(files) >= COMMITS - 5
    # The newest checkpoint, the commits after it (the retention's own), its hint: nothing older.
    assert len(files) <= 5, files
    table = DeltaTable(str(aged))
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


@pytest.mark.parametrize("retention", [None, "interval 30 days", "interval 11 days"])
def test_files_inside_the_tables_own_retention_stay(tmp_path: Path, retention: str | None) -> None:
    """Ten days old: inside Delta's default 30 days and any longer retention, and untouched by
    the loader's setting (a table it did not create keeps its own)."""
    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties={RETENTION: retention} if retention else {})
    age_table(root, "t", 300, checkpoint_every=100, days_old=10)
    assert keep_log("t", root).removed == 0
    assert DeltaTable(str(root)).metadata().configuration.get(RETENTION) == retention


def test_a_checkpoint_far_behind_is_written_before_the_cut(tmp_path: Path) -> None:
    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties=PROPERTIES | {"delta.checkpointInterval": "10"})
    age_table(root, "t", 100, checkpoint_every=50)  # checkpoints at 49 and 99
    log_dir = root / "_delta_log"
    old = (log_dir / f"{100:020d}.json").stat().st_mtime
    for v in range(101, 131):  # 30 more old commits, no checkpoint (a failed post-commit hook)
        (log_dir / f"{v:020d}.json").write_bytes((log_dir / f"{100:020d}.json").read_bytes())
        os.utime(log_dir / f"{v:020d}.json", (old, old))
    kept = keep_log("t", root)
    assert kept.checkpoint_written and newest_checkpoint(log_dir) == (130, None)
    assert len(_log_files(root)) <= 4  # without the new checkpoint, 100 to 130 would stay


@pytest.mark.allow_errors(r"the Delta log of table orders was not cleaned: checkpoint file \S+ cannot be read")
def test_an_unreadable_newest_checkpoint_is_reported_and_nothing_is_deleted(tmp_path: Path) -> None:
    aged = tmp_path / "warehouse" / "orders"
    create_table(aged, ORDERS.arrow(), [], name="orders", properties=PROPERTIES)
    age_table(aged, "orders", 200, checkpoint_every=100)
    log_dir = aged / "_delta_log"
    version, problem = newest_checkpoint(log_dir)
    assert (version, problem) == (200, None)
    (log_dir / f"{version:020d}.checkpoint.parquet").write_bytes(b"not parquet")
    before = _log_files(aged)

    metrics = Metrics()
    stub = SimpleNamespace(tables={"orders": None}, index={"orders": 0}, hold=lambda t: None)
    stub.release_hold = lambda t: None
    stub.is_running = lambda t: False
    schedule = Schedule(3600, 0, 0, 168, log_keeping_seconds=3600)
    nothing = lambda: asyncio.sleep(0)  # noqa: E731
    maintenance = stubbed(schedule, stub, aged.parent, save_catalog=nothing, ready=True, metrics=metrics)
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
    assert table_properties(Settings())[RETENTION] == "interval 168 hours"  # the vacuum's retention
    off = Settings.model_validate({"maintenance": {"log_retention_hours": 0}, "loading": {"checkpoint_interval": 0}})
    assert table_properties(off) == {}


def test_rows_written_before_the_cut_read_back_after_it(tmp_path: Path) -> None:
    """The cut keeps the data: files added early in the table's life are in the checkpoint."""
    root = tmp_path / "t"
    first = pa.table({"id": pa.array(range(5), pa.int64())})
    write_deltalake(str(root), first, configuration=PROPERTIES)
    age_table(root, "t", 500, checkpoint_every=100)
    assert keep_log("t", root).removed >= 495
    assert sorted(read_delta(root).column("id").to_pylist()) == list(range(5))
    assert DeltaTable(str(root)).version() == 500


@pytest.mark.parametrize(
    "stray",
    [
        "{v}.checkpoint.0000000001.0000000002.parquet",  # part 1 of 2: its writer died
        "{v}.checkpoint.parquet.tmp",  # a checkpoint's temporary file left behind
    ],
)
def test_a_stray_checkpoint_file_is_never_the_cut(tmp_path: Path, stray: str) -> None:
    """deltalake 1.6.6's cleanup_metadata cuts at the newest file so named before the oldest
    young commit (here 205, before 207): it deleted checkpoint 199, the only complete one, with
    the commits before it, and the table no longer opened (checked by hand against 1.6.6)."""
    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties=PROPERTIES)
    age_table(root, "t", 199, checkpoint_every=200)  # one checkpoint, at 199; all ten days old
    log_dir = root / "_delta_log"
    old = (log_dir / f"{100:020d}.json").stat().st_mtime
    for v in range(200, 210):  # commits after the checkpoint: 200 to 206 old, 207 on young
        (log_dir / f"{v:020d}.json").write_bytes((log_dir / f"{199:020d}.json").read_bytes())
        if v < 207:
            os.utime(log_dir / f"{v:020d}.json", (old, old))
    (log_dir / stray.format(v=f"{205:020d}")).write_bytes(b"half a checkpoint")
    os.utime(log_dir / stray.format(v=f"{205:020d}"), (old, old))

    kept = keep_log("t", root)

    assert kept.problem is None and (log_dir / f"{199:020d}.checkpoint.parquet").exists()
    assert kept.removed >= 199  # the commits before the checkpoint went all the same
    assert DeltaTable(str(root)).version() == 209
    assert DeltaTable(str(root)).transaction_version(app_id("t")) == 199


def test_without_a_hint_nothing_is_deleted(tmp_path: Path) -> None:
    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties=PROPERTIES)
    age_table(root, "t", 30, checkpoint_every=20)
    (root / "_delta_log" / "_last_checkpoint").unlink()
    before = _log_files(root)
    assert keep_log("t", root).removed == 0 and _log_files(root) == before


def test_the_cut_keeps_a_checkpoint_at_or_before_the_oldest_young_commit(tmp_path: Path) -> None:
    """Time travel to any version inside the retention still has its checkpoint and commits."""
    log_dir = tmp_path
    now = 1_000_000.0
    for v in range(0, 31):
        (log_dir / f"{v:020d}.json").write_text("{}")
        os.utime(log_dir / f"{v:020d}.json", (now - (100 if v < 25 else 1),) * 2)
    for v in (10, 20, 30):
        pq.write_table(pa.table({"x": [1]}), log_dir / f"{v:020d}.checkpoint.parquet")
        os.utime(log_dir / f"{v:020d}.checkpoint.parquet", (now - 100,) * 2)
    assert clean_expired(log_dir, 50, readers_from=30, now=now) == 20 + 1  # commits 0-19, checkpoint 10
    left = sorted(os.listdir(log_dir))
    assert left[0] == f"{20:020d}.checkpoint.parquet" and f"{20:020d}.json" in left


@pytest.mark.parametrize("kill_at", [1, 250])
def test_a_kill_midway_through_the_cut_leaves_a_table_that_reads_the_same(tmp_path: Path, kill_at: int) -> None:
    """Files go oldest first: whenever the process dies, the log starts later, never with a gap."""
    root = tmp_path / "t"
    create_table(root, ORDERS.arrow(), [], name="t", properties=PROPERTIES)
    rows = order_rows(random.Random(5), range(20))
    write_deltalake(str(root), rows.cast(ORDERS.arrow()), mode="append")
    age_table(root, "t", 400, checkpoint_every=200)
    script = "import sys, pathlib, loader.ops.delta_log as d; d.keep_log('t', pathlib.Path(sys.argv[1]))"
    env = {**os.environ, failpoints.ENV: f"log.cleanup.delete={kill_at}"}
    done = subprocess.run([sys.executable, "-c", script, str(root)], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]

    table = DeltaTable(str(root))
    assert table.version() == 401 and table.transaction_version(app_id("t")) == 400
    assert by_id(read_delta(root)) == by_id(rows)
    assert keep_log("t", root).problem is None  # the next run finishes the cut
    assert by_id(read_delta(root)) == by_id(rows)
