"""The direct log commit (loader/loading/sinks/log_commit.py): a table committed this way
reads back through deltalake's readers as one committed by deltalake, carries the load's
application transaction and data interval end, gets its checkpoints where deltalake would
write them, and a version another writer took is never overwritten."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from loader.core.schema import TableSchema
from loader.durability.transactions import DATA_UNTIL_KEY, app_id, load_metadata
from loader.loading.sinks.add_actions import file_stats, log_path
from loader.loading.sinks.delta_table import create_table
from loader.loading.sinks.log_commit import checkpoint_due, commit_next, log_entry
from loader.loading.views.commits import added_files
from testing.tables import read_delta
from tests.loader.loading.test_sinks import ORDERS

SCHEMA: TableSchema = ORDERS


def _file(root: Path, k: int) -> AddAction:
    """A data file of the table, described as the sink describes what it publishes."""
    ids = [k * 100 + i for i in range(10)]
    data = pa.table(
        {"id": ids, "name": [f"n{k}"] * 10, "amount": [float(k)] * 10, "day": [None] * 10, "at": [None] * 10}
    )
    name = f"part-{k:05d}-{root.name}.snappy.parquet"
    pq.write_table(data.cast(SCHEMA.arrow()), root / name)
    info = (root / name).stat()
    stats = file_stats(str(root / name), SCHEMA)
    at = info.st_mtime_ns // 1_000_000
    return AddAction(log_path(PurePosixPath(name)), info.st_size, {}, at, True, stats.to_json())


def test_a_direct_commit_reads_back_as_deltalakes_own(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        root.mkdir()
        create_table(root, SCHEMA.arrow(), name="orders", properties={"delta.checkpointInterval": "3"})
    for k in range(1, 8):
        action = _file(ours, k)
        entry = log_entry([action], app_id("orders"), k, load_metadata(1000.0 + k), 10)
        assert commit_next(ours, k, entry)
        delta = DeltaTable(str(theirs))
        delta.create_write_transaction([_file(theirs, k)], "append", delta.schema(), commit_properties=_props(k))
    mine, reference = DeltaTable(str(ours)), DeltaTable(str(theirs))
    assert mine.version() == reference.version() == 7
    assert mine.transaction_version(app_id("orders")) == reference.transaction_version(app_id("orders")) == 7
    assert _rows(read_delta(ours)) == _rows(read_delta(theirs))
    scanned = mine.to_pyarrow_dataset().to_table(columns=["id"])  # (deltalake's other reader)
    assert sorted(scanned.column("id").to_pylist()) == [k * 100 + i for k in range(1, 8) for i in range(10)]
    assert added_files(ours, 7)[1] == 1007.0  # the data interval end join views read
    # The sink writes checkpoints after the versions deltalake's own hook does (the reference's files).
    written = sorted(int(p.name.split(".")[0]) for p in (theirs / "_delta_log").glob("*.checkpoint.parquet"))
    assert written == [v for v in range(1, 8) if checkpoint_due(v, mine.metadata().configuration)] == [2, 5]


def _props(k: int):  # type: ignore[no-untyped-def]
    from loader.durability.transactions import load_commit

    return load_commit("orders", k, 1000.0 + k)


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_a_version_another_writer_took_is_left_alone(tmp_path: Path) -> None:
    create_table(tmp_path, SCHEMA.arrow(), name="orders")
    first = log_entry([_file(tmp_path, 1)], app_id("orders"), 1, {}, 10)
    assert commit_next(tmp_path, 1, first)
    before = (tmp_path / "_delta_log" / f"{1:020d}.json").read_bytes()
    assert not commit_next(tmp_path, 1, log_entry([_file(tmp_path, 2)], app_id("orders"), 2, {}, 10))
    assert (tmp_path / "_delta_log" / f"{1:020d}.json").read_bytes() == before
    assert not [p for p in os.listdir(tmp_path / "_delta_log") if p.endswith(".tmp")]  # nothing left behind
    assert DeltaTable(str(tmp_path)).transaction_version(app_id("orders")) == 1


@pytest.mark.parametrize(("config", "due"), [({}, [99]), ({"delta.checkpointInterval": "20"}, [19, 39, 59, 79, 99])])
def test_checkpoints_fall_where_deltalake_writes_them(config: dict[str, str], due: list[int]) -> None:
    assert [v for v in range(0, 101) if checkpoint_due(v, config)] == due
    assert DATA_UNTIL_KEY in load_metadata(1.5)


def test_paths_are_encoded_as_deltalake_encodes_them(tmp_path: Path) -> None:
    """Partition directories with any character (Spark's own escapes included) reach the log
    as deltalake writes them, so both commits name the same files."""
    names = ["x=a b:c%d/e=f/p1.parquet", "y=\u00e9+&?#'\"[]!$,;@~*()/p2.parquet", "z=%3A/p3.parquet"]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        create_table(root, pa.schema([("a", pa.int64())]))
        for name in names:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"a": [1]}), root / name)
    actions = [AddAction(name, (ours / name).stat().st_size, {}, 0, True, None) for name in names]
    assert commit_next(ours, 1, log_entry(actions, "app", 1, {}, 3))
    delta = DeltaTable(str(theirs))
    delta.create_write_transaction(actions, "append", delta.schema())
    paths = [sorted(line["add"]["path"] for line in _entry(root) if "add" in line) for root in (ours, theirs)]
    assert paths[0] == paths[1]
    assert len(DeltaTable(str(ours)).to_pyarrow_table()) == 3


def _entry(root: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (root / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]


def test_values_outside_the_basic_plane_read_back_as_written(tmp_path: Path) -> None:
    """A partition value and commit metadata past U+FFFF: deltalake reads an escaped surrogate
    pair wrongly (U+20000 came back as U+10000), so the entry is written as UTF-8, as deltalake
    writes its own."""
    create_table(tmp_path, pa.schema([("id", pa.int64()), ("s", pa.string())]), partition_by=["s"])
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"id": [1]}), tmp_path / "p" / "f.parquet")
    action = AddAction("p/f.parquet", (tmp_path / "p" / "f.parquet").stat().st_size, {"s": "\U00020000"}, 0, True, None)
    assert commit_next(tmp_path, 1, log_entry([action], "app", 1, {"note": "\U0001f600"}, 1))
    assert DeltaTable(str(tmp_path)).to_pyarrow_table().to_pylist() == [{"id": 1, "s": "\U00020000"}]
    assert DeltaTable(str(tmp_path)).history(1)[0]["note"] == "\U0001f600"
