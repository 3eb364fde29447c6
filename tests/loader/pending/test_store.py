"""The live pending store: real spill segments, batches that mix memory and disk, failure and back-pressure."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from loader.abc import SpillFull
from loader.core.updates import Update
from loader.pending.spill.registry import make_spill_policy
from loader.pending.spill.segments import SegmentFiles
from loader.pending.store import PendingStore

SCHEMA = pa.schema([("id", pa.int64()), ("note", pa.string())])


def update(seq: int, rows: int = 100, table: str = "t") -> Update:
    ids = list(range(seq * 1000, seq * 1000 + rows))
    return Update(table, seq, float(seq), rows=pa.table({"id": ids, "note": [f"row {i}" for i in ids]}, SCHEMA))


def ids_of(updates: tuple[Update, ...]) -> list[int]:
    out: list[int] = []
    for u in updates:
        data = u.rows if u.rows is not None else u.spilled.read()  # type: ignore[union-attr]
        out.extend(data.column("id").to_pylist())
    return out


def store(tmp_path: Path, budget: int, policy: str = "buffered-head", disk_budget: int | None = None) -> PendingStore:
    segments = SegmentFiles(tmp_path / "spill", lambda _: SCHEMA)
    segments.reset()
    s = PendingStore(make_spill_policy(policy, budget), budget, segments, disk_budget=disk_budget)
    for table in ("t", "u"):
        s.add_table(table)
    return s


def spill_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "spill").rglob("*.parquet"))


def test_overflow_spills_newest_runs_and_a_batch_mixes_memory_and_segments(tmp_path: Path) -> None:
    size = update(1).resident_bytes
    s = store(tmp_path, budget=6 * size)
    expected = []
    for seq in range(1, 31):
        u = update(seq)
        expected += u.rows.column("id").to_pylist()  # type: ignore[union-attr]
        s.append(u)
        assert s.resident <= 6 * size + s.policy.chunk
    assert s.spilled > 0 and spill_files(tmp_path)
    spilled = [u for u in s.cache.queues["t"].items() if u.value.spilled is not None]
    assert spilled and all(u.value.rows is None for u in spilled)  # memory really released

    batch = s.take("t")
    assert [u.seq for u in batch] == list(range(1, 31))
    assert any(u.spilled for u in batch) and any(u.rows is not None for u in batch)
    assert ids_of(batch) == expected
    s.loaded("t")
    assert not spill_files(tmp_path) and s.count("t") == 0 and s.resident == 0


def test_a_failed_batch_goes_back_whole_and_is_not_written_again(tmp_path: Path) -> None:
    size = update(1).resident_bytes
    s = store(tmp_path, budget=4 * size)
    for seq in range(1, 21):
        s.append(update(seq))
    writes = s.cache.counts.writes
    first = s.take("t")
    s.put_back("t")
    assert s.cache.counts.writes == writes  # segments kept: nothing rewritten
    s.append(update(21))
    again = s.take("t")
    assert [u.seq for u in again] == [u.seq for u in first] + [21]
    assert ids_of(again) == ids_of(first) + list(range(21000, 21100))


def test_a_limited_take_reads_the_head_back_in_order(tmp_path: Path) -> None:
    size = update(1).resident_bytes
    s = store(tmp_path, budget=4 * size)
    for seq in range(1, 21):
        s.append(update(seq))
    taken: list[int] = []
    while s.count("t"):
        batch = s.take("t", limit=3)
        taken += [u.seq for u in batch]
        assert all(u.rows is not None for u in batch)  # read back through the driver
        s.loaded("t")
    assert taken == list(range(1, 21))
    assert s.cache.counts.reads >= 1 and not spill_files(tmp_path)


def test_intake_is_refused_when_the_spill_disk_budget_is_reached(tmp_path: Path) -> None:
    size = update(1).resident_bytes
    s = store(tmp_path, budget=4 * size, disk_budget=4 * size)
    seq = 0
    with pytest.raises(SpillFull, match="budget"):
        while True:
            seq += 1
            s.check_room(size)
            s.append(update(seq))
    assert s.spilled <= 4 * size + s.policy.chunk
    s.take("t")
    s.loaded("t")
    s.check_room(size)  # room again once loaded


@pytest.mark.allow_errors(r"could not spill pending updates to disk: \[Errno 28\]")
def test_a_failed_spill_keeps_the_update_and_closes_intake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import loader.pending.spill.segments as segments_module

    size = update(1).resident_bytes
    s = store(tmp_path, budget=2 * size)
    s.append(update(1))
    s.append(update(2))
    real_write = segments_module.pq.write_table

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segments_module.pq, "write_table", disk_full)
    s.append(update(3))  # would spill; the disk refuses
    assert s.spill_error is not None and "No space" in s.spill_error
    assert s.count("t") == 3 and not spill_files(tmp_path)
    with pytest.raises(SpillFull, match="failed"):
        s.check_room(size)
    monkeypatch.setattr(segments_module.pq, "write_table", real_write)
    s.append(update(4))  # a spill succeeds again: intake reopens
    assert s.spill_error is None
    assert ids_of(s.take("t")) == [i for seq in range(1, 5) for i in range(seq * 1000, seq * 1000 + 100)]


def test_start_up_empties_the_spill_directory(tmp_path: Path) -> None:
    leftover = tmp_path / "spill" / "t" / "000000000001.parquet"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"old")
    assert SegmentFiles(tmp_path / "spill", lambda _: SCHEMA).reset() == 1
    assert not leftover.exists()


def test_start_up_deletes_only_segment_files(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    keep = [spill / "notes.txt", spill / "t" / "data.parquet", spill / "other" / "x" / "000000000001.parquet"]
    for path in keep:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not a segment")
    (spill / "t" / "000000000007.parquet").write_bytes(b"old segment")
    (spill / "empty").mkdir()
    assert SegmentFiles(spill, lambda _: SCHEMA).reset() == 1
    assert all(path.exists() for path in keep)
    assert not (spill / "t" / "000000000007.parquet").exists() and not (spill / "empty").exists()


def test_segments_of_a_batch_being_loaded_count_against_the_disk_budget(tmp_path: Path) -> None:
    size = update(1).resident_bytes
    s = store(tmp_path, budget=2 * size, disk_budget=6 * size)
    for seq in range(1, 9):
        s.append(update(seq))
    s.take("t")  # the segments stay on disk until the commit
    for seq in range(9, 11):
        s.append(update(seq))
    assert s.spilled < size * 2  # what the queue itself holds on disk is well within the budget
    with pytest.raises(SpillFull):
        s.check_room(2 * size)  # memory full, and the disk holds the batch's segments too
    s.loaded("t")
    s.check_room(2 * size)


@pytest.mark.allow_errors('could not spill after putting back a failed batch')
def test_a_failed_batch_put_back_onto_a_full_disk_stays_queued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import loader.pending.spill.segments as segments_module

    size = update(1).resident_bytes
    s = store(tmp_path, budget=3 * size)
    for seq in range(1, 4):
        s.append(update(seq))
    s.take("t")
    for seq in range(4, 7):
        s.append(update(seq))

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segments_module.pq, "write_table", disk_full)
    s.put_back("t")  # over budget, and the spill fails: no exception, intake closes
    assert s.spill_error is not None and s.count("t") == 6
    with pytest.raises(SpillFull):
        s.check_room(size)
    assert [u.seq for u in s.take("t")] == [1, 2, 3, 4, 5, 6]


def test_a_take_stops_at_a_sequence_number_a_bisection_caps_it_at(tmp_path: Path) -> None:
    """The dispatcher tries a suspect range of the head alone (loader/loading/dispatcher.py):
    the take stops there, reading a spilled head back; a cap below the head caps nothing."""
    size = update(1).resident_bytes
    s = store(tmp_path, budget=3 * size)
    for seq in range(1, 11):
        s.append(update(seq))
    assert s.spilled > 0
    head = s.take("t", through=4)
    assert [u.seq for u in head] == [1, 2, 3, 4]
    assert ids_of(head) == [i for seq in range(1, 5) for i in range(seq * 1000, seq * 1000 + 100)]
    s.put_back("t")  # failed: back as it was, the cap taken again
    assert [u.seq for u in s.take("t", limit=2, through=4)] == [1, 2]  # (the policy's limit still applies)
    s.loaded("t")
    assert [u.seq for u in s.take("t", through=1)] == list(range(3, 11))  # past: no cap
    s.loaded("t")
    assert s.count("t") == 0


def test_nested_rows_come_back_from_a_spill_segment_with_their_types(tmp_path: Path) -> None:
    """A segment is Parquet: struct, array and map columns (each level's nullability, a map's
    entries, an array's elements) read back as the table's very Arrow types and values."""
    from loader.core.schema import TableSchema

    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "id", "type": "long", "nullable": False},
                {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": False}},
                {"name": "m", "type": {"type": "map", "keyType": "integer", "valueType": {
                    "type": "struct", "fields": [{"name": "x", "type": "binary", "nullable": False}]}}},
            ]
        }
    ).arrow()
    rows = pa.Table.from_pylist(
        [{"id": 1, "tags": ["a", ""], "m": [(1, {"x": b"\x00"}), (2, None)]}, {"id": 2, "tags": None, "m": []}],
        schema=schema,
    )
    segments = SegmentFiles(tmp_path / "spill", lambda _: schema)
    item = SimpleNamespace(value=Update("t", 1, 1.0, rows=rows))
    segments.write("t", 0, [item])  # type: ignore[list-item]
    assert item.value.rows is None and item.value.spilled is not None
    segments.read("t", 0, [item])  # type: ignore[list-item]
    assert item.value.rows.schema == schema and item.value.rows.equals(rows)
