"""The deletion-vector upsert (loader/loading/sinks/upsert_dv.py), its format
(deletion_vectors.py), the log replay it relies on (live_files.py) and its compaction
(dv_compaction.py): every version of the table, read by deltalake's query engine and by
DuckDB, holds one row per key, the newest; replays change nothing; a lost race and a failed
commit leave the table as it was."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from loader.core import failpoints
from loader.core.tables import TableConfig
from loader.durability.transactions import app_id
from loader.loading.failures import TableChanged
from loader.loading.sinks import deletion_vectors as dvs
from loader.loading.sinks import log_commit
from loader.loading.sinks.delta_table import create_table
from loader.loading.sinks.dv_compaction import compact_latest, vacuum_vectors
from loader.loading.sinks.live_files import LiveFiles
from loader.loading.sinks.upsert_dv import KeyIndex, commit_with_deletion_vectors
from testing.tables import read_duckdb

SCHEMA = TableConfig.model_validate(
    {
        "name": "accounts",
        "mode": "latest",
        "key": ["id"],
        "order_by": "ts",
        "upsert": "deletion-vectors",
        "schema": {
            "columns": [
                {"name": "id", "type": "int64", "nullable": False},
                {"name": "v", "type": "string"},
                {"name": "ts", "type": "int64", "nullable": False},
            ]
        },
    }
).schema_


def make_table(root: Path, properties: dict[str, str] | None = None) -> None:
    root.mkdir(parents=True)
    create_table(root, SCHEMA.arrow(), [], "accounts", properties or {}, ("deletionVectors",))


def batch(rows: dict[int, tuple[str, int]]) -> pa.Table:
    ids = sorted(rows)
    return pa.table({"id": ids, "v": [rows[i][0] for i in ids], "ts": [rows[i][1] for i in ids]}, schema=SCHEMA.arrow())


def load(index: KeyIndex, rows: dict[int, tuple[str, int]], seq: int) -> dict[str, int]:
    version = DeltaTable(str(index.root)).version()
    return commit_with_deletion_vectors(index, version, batch(rows), "accounts", seq, None)


def by_deltalake(root: Path, version: int | None = None) -> dict[int, tuple[str, int]]:
    delta = DeltaTable(str(root), version=version)
    rows = pa.table(QueryBuilder().register("t", delta).execute("SELECT id, v, ts FROM t").read_all()).to_pylist()
    out = {r["id"]: (r["v"], r["ts"]) for r in rows}
    assert len(out) == len(rows), f"a key stored twice at version {version}"
    return out


def by_duckdb(root: Path, version: int | None = None) -> dict[int, tuple[str, int]]:
    rows = read_duckdb(root, version).to_pylist()
    out = {r["id"]: (r["v"], r["ts"]) for r in rows}
    assert len(out) == len(rows), f"a key stored twice at version {version} (DuckDB)"
    return out


def test_z85_and_the_bitmap_array_read_back_as_the_protocol_writes_them(tmp_path: Path) -> None:
    # ZeroMQ RFC 32's test vector
    assert dvs.z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"
    assert dvs.z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    rows = BitMap([0, 3, 70_000, 2_000_000])
    data = dvs.serialize(rows)
    assert int.from_bytes(data[:4], "little") == dvs.MAGIC and dvs.deserialize(data) == rows
    path, (first, second) = dvs.write_file(tmp_path, [rows, BitMap([5])])
    assert first.offset == 1 and dvs.read(tmp_path, first) == rows and dvs.read(tmp_path, second) == BitMap([5])
    assert first.file(tmp_path) == path
    damaged = bytearray(path.read_bytes())
    damaged[first.offset + 6] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(dvs.DeletionVectorError, match="checksum"):
        dvs.read(tmp_path, first)


def test_an_upsert_marks_replaced_rows_and_writes_only_the_batch(tmp_path: Path) -> None:
    root = tmp_path / "accounts"
    make_table(root)
    index = KeyIndex(root, SCHEMA)
    load(index, {i: (f"a{i}", 1) for i in range(1000)}, 1)
    files_before = {p.name for p in root.glob("*.parquet")}
    metrics = load(index, {5: ("b5", 2), 7: ("old", 0), 2000: ("new", 1)}, 2)
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"]) == (1, 1)
    assert metrics["num_rows_marked_deleted"] == 1  # key 7's stored value is newer: superseded, kept
    new_files = {p.name for p in root.glob("*.parquet")} - files_before
    assert len(new_files) == 1 and pq.read_metadata(root / new_files.pop()).num_rows == 2
    want = {i: (f"a{i}", 1) for i in range(1000)} | {5: ("b5", 2), 2000: ("new", 1)}
    assert by_deltalake(root) == want == by_duckdb(root)
    assert DeltaTable(str(root)).transaction_version(app_id("accounts")) == 2


def test_deltalakes_merge_reads_through_the_deletion_vectors(tmp_path: Path) -> None:
    """Why a table may switch to upsert = "merge" and why deltalake's compaction is safe."""
    root = tmp_path / "accounts"
    make_table(root)
    index = KeyIndex(root, SCHEMA)
    load(index, {i: ("a", 1) for i in range(100)}, 1)
    load(index, {i: ("b", 2) for i in range(0, 100, 2)}, 2)
    delta = DeltaTable(str(root))
    source = batch({1: ("c", 3), 2: ("c", 3), 500: ("c", 3)})
    delta.merge(source, 't."id" = s."id"', source_alias="s", target_alias="t").when_matched_update_all(
        predicate='s."ts" >= t."ts"'
    ).when_not_matched_insert_all().execute()
    want = {i: ("b", 2) if i % 2 == 0 else ("a", 1) for i in range(100)} | {1: ("c", 3), 2: ("c", 3), 500: ("c", 3)}
    assert by_deltalake(root) == want
    DeltaTable(str(root)).optimize.compact()
    assert by_deltalake(root) == want


def test_a_lost_race_and_a_failed_commit_leave_the_table_as_it_was(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "accounts"
    make_table(root)
    index = KeyIndex(root, SCHEMA)
    load(index, {i: ("a", 1) for i in range(10)}, 1)
    version = DeltaTable(str(root)).version()
    write_deltalake(str(root), batch({99: ("other writer", 1)}), mode="append")  # takes version + 1
    files = set(root.iterdir())
    with pytest.raises(TableChanged):
        commit_with_deletion_vectors(index, version, batch({1: ("b", 2)}), "accounts", 2, None)
    assert set(root.iterdir()) == files  # its data and deletion vector files removed again

    def boom(*_args: object) -> bool:
        raise OSError("disk full")

    monkeypatch.setattr(log_commit, "commit_next", boom)
    with pytest.raises(OSError):
        load(index, {1: ("b", 2)}, 2)
    assert set(root.iterdir()) == files
    monkeypatch.undo()
    real = log_commit.commit_next

    def linked_then_failed(*args: object) -> bool:  # the entry landed, the directory's fsync failed
        real(*args)
        raise OSError("fsync of the log directory failed")

    monkeypatch.setattr(log_commit, "commit_next", linked_then_failed)
    with pytest.raises(OSError):
        load(index, {1: ("b", 2)}, 2)
    monkeypatch.undo()  # the files the landed entry names stay
    assert by_deltalake(root) == {i: ("a", 1) for i in range(10)} | {1: ("b", 2), 99: ("other writer", 1)}


def test_compaction_purges_deleted_rows_and_sorts_by_key(tmp_path: Path) -> None:
    root = tmp_path / "accounts"
    make_table(root)
    index = KeyIndex(root, SCHEMA)
    rng = random.Random(7)
    model: dict[int, tuple[str, int]] = {}
    for seq in range(1, 30):
        rows = {rng.randrange(500): (f"s{seq}", seq) for _ in range(40)}
        model |= rows
        load(index, rows, seq)
    done = compact_latest(root, SCHEMA, target_rows=200, small_rows=64, purge_fraction=0.0)
    assert done.commits == 1 and done.rows_purged > 0
    live = LiveFiles(root)
    live.advance(DeltaTable(str(root)).version())
    assert all(f.dv is None for f in live.files.values())
    for name in live.files:
        ids = pq.read_table(root / name, columns=["id"]).column("id").to_pylist()
        assert ids == sorted(ids)
    assert by_deltalake(root) == model == by_duckdb(root)
    # the loader's index follows the compaction's commit, and loads go on
    load(index, {1: ("after", 100)}, 30)
    assert by_deltalake(root) == model | {1: ("after", 100)}


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(
                st.just("load"),
                st.dictionaries(
                    st.integers(0, 60), st.tuples(st.text("abc", max_size=3), st.integers(0, 9)), max_size=15
                ),
            ),
            st.tuples(st.just("fail"), st.just({})),
            st.tuples(st.just("replay"), st.just({})),
            st.tuples(st.just("compact"), st.just({})),
            st.tuples(st.just("restart"), st.just({})),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_every_version_holds_the_newest_value_of_each_key(tmp_path: Path, steps) -> None:
    """Random keyed batches, failed and replayed loads, compactions, restarts (a new index,
    read from the log and its checkpoints, every 3 versions): each version, read by deltalake
    and DuckDB, holds one row per key, the newest by ``ts`` (ties: the later load)."""
    root = tmp_path / f"t{random.getrandbits(32)}"
    make_table(root, {"delta.checkpointInterval": "3"})
    index = KeyIndex(root, SCHEMA)
    model: dict[int, tuple[str, int]] = {}
    at_version = {0: {}}
    seq, last = 0, {}
    for kind, rows in steps:
        if kind == "load":
            seq += 1
            load(index, rows, seq)
            for key, value in rows.items():
                if key not in model or value[1] >= model[key][1]:
                    model[key] = value
            last = rows
        elif kind == "fail":  # a commit that fails: nothing changes
            broken = log_commit.commit_next
            log_commit.commit_next = lambda *_a: (_ for _ in ()).throw(OSError("injected"))
            try:
                with pytest.raises(OSError):
                    load(index, {0: ("x", 9)}, seq + 1)
            finally:
                log_commit.commit_next = broken
        elif kind == "replay" and seq:  # the same batch again (the sink skips it; loaded again it is a no-op)
            seq += 1
            load(index, last, seq)
        elif kind == "compact":
            compact_latest(root, SCHEMA, target_rows=16, small_rows=8, purge_fraction=0.2)
        elif kind == "restart":
            index = KeyIndex(root, SCHEMA)
        delta = DeltaTable(str(root))
        if delta.version() % 3 == 2:
            delta.create_checkpoint()
        at_version[delta.version()] = dict(model)
    for version, want in at_version.items():
        assert by_deltalake(root, version) == want == by_duckdb(root, version)
    shutil.rmtree(root)


def test_the_log_replay_reads_checkpoints_and_names_descriptors_as_the_log_does(tmp_path: Path) -> None:
    root = tmp_path / "accounts"
    make_table(root, {"delta.checkpointInterval": "2"})
    index = KeyIndex(root, SCHEMA)
    load(index, {i: ("1", 1) for i in range(10)}, 1)
    for seq in range(2, 6):  # the first file touched again and again
        load(index, {seq: (str(seq), seq)}, seq)
    DeltaTable(str(root)).create_checkpoint()
    fresh = LiveFiles(root)
    fresh.advance(DeltaTable(str(root)).version())
    assert {n: f.dv for n, f in fresh.files.items()} == {n: f.dv for n, f in index.live.files.items()}
    # a file deleted from before is removed with the deletion vector its add had
    actions = [json.loads(line) for line in (root / "_delta_log" / f"{5:020d}.json").read_text().splitlines()]
    removed = [a["remove"] for a in actions if "remove" in a and "deletionVector" in a["remove"]]
    assert removed and all(r["path"] in index.live.files for r in removed)


@pytest.mark.parametrize("point", ["compact.latest.before-commit", "compact.latest.after-commit"])
def test_a_compaction_killed_before_or_after_its_commit_leaves_a_table_that_reads_the_same(
    tmp_path: Path, point: str
) -> None:
    """SIGKILL in the compaction (the service's maintenance job): the table reads the same,
    a new index (a restart) loads into it, and the next compaction finishes the work."""
    root = tmp_path / "accounts"
    make_table(root)
    index = KeyIndex(root, SCHEMA)
    model: dict[int, tuple[str, int]] = {}
    for seq in range(1, 8):
        rows = {(seq * 7 + i * 13) % 50: (f"s{seq}", seq) for i in range(12)}
        model |= rows
        load(index, rows, seq)
    script = (
        "import sys, pathlib; from tests.loader.loading.test_upsert_dv import SCHEMA; "
        "from loader.loading.sinks.dv_compaction import compact_latest, vacuum_vectors; "
        "compact_latest(pathlib.Path(sys.argv[1]), SCHEMA, target_rows=16, small_rows=64)"
    )
    env = {**os.environ, failpoints.ENV: f"{point}=1"}
    done = subprocess.run([sys.executable, "-c", script, str(root)], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert by_deltalake(root) == model == by_duckdb(root)
    restarted = KeyIndex(root, SCHEMA)
    load(restarted, {1: ("after", 100)}, 8)
    model[1] = ("after", 100)
    compact_latest(root, SCHEMA, target_rows=16, small_rows=64)
    live = LiveFiles(root)
    live.advance(DeltaTable(str(root)).version())
    assert all(f.dv is None for f in live.files.values())
    assert by_deltalake(root) == model == by_duckdb(root)


def test_vector_files_no_version_names_are_vacuumed_after_the_retention(tmp_path: Path) -> None:
    """deltalake's vacuum keeps every deletion vector file; each upsert writes one."""
    root = tmp_path / "accounts"
    make_table(root)
    index = KeyIndex(root, SCHEMA)
    model: dict[int, tuple[str, int]] = {}
    for seq, rows in enumerate([{i: ("a", 1) for i in range(100)}, {1: ("b", 2)}, {1: ("c", 3)}, {70: ("d", 4)}], 1):
        load(index, rows, seq)
        model |= rows
    DeltaTable(str(root)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert len(list(root.glob("deletion_vector_*.bin"))) == 3  # (deltalake left them all)
    assert vacuum_vectors(root, retention_hours=1.0) == 0  # none older than the retention
    # the first file's vector of load 2 was replaced at load 4; load 3's (of load 2's file) is live
    assert vacuum_vectors(root, retention_hours=0.0, now=time.time() + 1) == 1
    assert len(list(root.glob("deletion_vector_*.bin"))) == 2
    assert by_deltalake(root) == model == by_duckdb(root)
