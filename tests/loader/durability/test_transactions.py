"""The Delta application transaction, which exactly-once across restarts and owners rests on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from loader.durability.transactions import app_id, committed_at, committed_seq, committed_seqs

SCHEMA = pa.schema([("k", pa.int64())])


def commit(table: DeltaTable | str, seq: int, name: str = "t") -> None:
    rows = pa.table({"k": [seq]}, schema=SCHEMA)
    properties = CommitProperties(app_transactions=[Transaction(app_id(name), seq)])
    write_deltalake(table, rows, mode="append", commit_properties=properties)


def test_a_stale_writer_cannot_commit_over_a_newer_commit_of_the_same_table(tmp_path: Path) -> None:
    """docs/scaling.md, failover: two instances loading the same write-ahead log (an old owner
    still finishing a batch, its successor replaying it) cannot both commit it. The commit made
    from a snapshot older than the other's is refused; read again, the table says it is loaded."""
    path = str(tmp_path / "t")
    DeltaTable.create(path, SCHEMA)
    old_owner, successor = DeltaTable(path), DeltaTable(path)  # both read: nothing loaded yet
    commit(successor, 5)
    with pytest.raises(CommitFailedError, match="Concurrent transaction"):
        commit(old_owner, 5)
    assert committed_seq(Path(path), "t") == 5
    assert DeltaTable(path).to_pyarrow_table().num_rows == 1


def test_every_tables_version_is_read_and_a_missing_table_is_zero(tmp_path: Path) -> None:
    names = [f"t{i:02d}" for i in range(40)]  # enough for the threads
    for seq, name in enumerate(names[:30], start=1):
        DeltaTable.create(str(tmp_path / name), SCHEMA)
        commit(str(tmp_path / name), seq, name)
    found = committed_seqs(tmp_path, names)
    assert found == {name: (k + 1 if k < 30 else 0) for k, name in enumerate(names)}


def test_a_known_last_commit_is_read_from_its_file_and_the_few_after_it(tmp_path: Path) -> None:
    """Recovery's shortcut (``committed_at``): the commits from the catalog's version to the end
    of the log, read as files; None (deltalake decides) where it cannot tell."""
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)
    assert committed_at(path, "t", 0) == 0  # created, never loaded
    for seq in (3, 7):
        commit(str(path), seq, "t")
    assert committed_at(path, "t", 2) == 7 == committed_seq(path, "t")
    assert committed_at(path, "t", 1) == 7  # a load after the catalog's save is read too
    assert committed_at(path, "t", 0) == 7
    commit(str(path), 9, "other")  # another writer's commit after ours (say a compaction)
    assert committed_at(path, "t", 2) == 7
    assert committed_at(path, "t", 3) is None  # the catalog's version is not a commit of ours
    assert committed_at(path, "t", 1, limit=2) is None  # too many after it: deltalake's
    DeltaTable(str(path)).create_checkpoint()
    (path / "_delta_log" / f"{3:020d}.json").rename(path / "_delta_log" / "moved")
    assert committed_at(path, "t", 2) is None  # the hint names checkpoint 3, past the files' end
    assert committed_seqs(tmp_path, ["t"], {"t": 2}) == {"t": 7}  # deltalake's answer
    assert committed_at(path, "t", 9) is None  # no such version


def test_recovery_takes_the_catalogs_versions_where_they_hold(tmp_path: Path) -> None:
    names = ["a", "b", "c"]
    for seq, name in enumerate(names, start=1):
        DeltaTable.create(str(tmp_path / name), SCHEMA)
        commit(str(tmp_path / name), seq * 10, name)
    commit(str(tmp_path / "c"), 31, "c")  # after the catalog's save: deltalake reads it
    known = {"a": 1, "b": None, "c": 1}
    assert committed_seqs(tmp_path, [*names, "missing"], known) == {"a": 10, "b": 20, "c": 31, "missing": 0}
