"""Hostile and malformed requests: the exact status, a clear error, and nothing changed.

The case table lives in testing/hostile_cases.py (shared with trials/hostile_input.py,
which writes the RELIABILITY.md section). Each case runs against a fresh Spark-free
service; "nothing changed" covers sequence counters, pending updates, Delta log versions,
the WAL, the Idempotency-Key store, the landing directory, a directory outside it and
the service's owned copies. The tests after the table check the detector itself (an
accepted update is seen as a change) and what the service accepts on purpose.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loader.core.errors import BadRequest, Conflict, Invalid, TooLarge, Unavailable
from loader.core.schema import TableSchema
from loader.intake import landing as landing_module
from loader.intake.landing import accept_files
from loader.intake.requests import has_lone_surrogate_escape
from testing.hostile_cases import CASES, ORD, case_ids
from testing.hostile_runner import Case, Env, differences, run_case, snapshot
from testing.service_harness import Harness


@pytest.mark.parametrize("case", CASES, ids=case_ids())
def test_hostile_request_is_refused_clearly_and_changes_nothing(case: Case, tmp_path: Path) -> None:
    outcome = run_case(case, tmp_path / "run")
    assert outcome.passed, f"{case.id}: " + "; ".join(outcome.problems) + f" (message: {outcome.message!r})"


def test_the_detector_sees_an_accepted_update(tmp_path: Path) -> None:
    """A good request through the same runner is seen as a change: the table is not blind."""
    good = Case("control", "good rows", 422, None, None, json={"rows": [{"order_id": 9, "country": "DE"}]})
    outcome = run_case(good, tmp_path / "run")
    assert outcome.status == 202
    assert any("table orders: last_sequence" in change for change in outcome.changes), outcome.changes
    assert any("WAL records" in change for change in outcome.changes), outcome.changes


def test_an_accepted_file_is_copied_and_the_landing_file_stays(tmp_path: Path) -> None:
    good = Case("control", "good file", 202, None, None, json={"files": ["good.parquet"]})
    outcome = run_case(good, tmp_path / "run")
    assert outcome.status == 202
    assert not any(change.startswith("landing files") for change in outcome.changes), outcome.changes
    assert not any(change.startswith("owned files") for change in outcome.changes), outcome.changes  # loaded, removed
    assert any("table orders: Delta log version" in change for change in outcome.changes), outcome.changes


def test_nul_in_a_plain_string_value_is_data(harness: Harness) -> None:
    """NUL is a valid character in a non-partition string (Parquet and Delta store it)."""
    r = harness.post("/v1/tables/clicks/updates", json={"rows": [{"url": "/a\x00b", "n": 1}]})
    assert r.status_code == 202, r.text
    harness.wait_loaded("clicks", 1)
    assert [row["url"] for row in harness.rows("clicks")] == ["/a\x00b"]


def test_a_refused_key_can_be_used_for_the_corrected_request(harness: Harness) -> None:
    """A refused request does not consume its Idempotency-Key."""
    headers = {"Idempotency-Key": "retry-after-fix-1"}
    bad = harness.post(ORD, json={"rows": [{"order_id": "x"}]}, headers=dict(headers))
    assert bad.status_code == 422
    good = harness.post(ORD, json={"rows": [{"order_id": 1}]}, headers=dict(headers))
    assert good.status_code == 202 and "Idempotent-Replayed" not in good.headers


def _orders_schema() -> TableSchema:
    return TableSchema.model_validate(
        {"columns": [{"name": "order_id", "type": "int64", "nullable": False}, {"name": "country", "type": "string"}]}
    )


def test_what_is_checked_is_what_is_loaded(tmp_path: Path) -> None:
    """The owned copy is taken from the descriptor that was opened, then checked: rewriting
    the landing file afterwards changes nothing, and a refused copy is removed."""
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir()
    pq.write_table(pa.table({"order_id": pa.array([1], pa.int64()), "country": ["DE"]}), landing / "a.parquet")
    (ref,) = accept_files(["a.parquet"], landing, owned, _orders_schema(), "orders")
    (landing / "a.parquet").write_bytes(b"rewritten by the producer")
    assert pq.read_table(ref.path).column("order_id").to_pylist() == [1]
    pq.write_table(pa.table({"order_id": pa.array([2], pa.int64())}), landing / "c.parquet")
    pq.write_table(pa.table({"order_id": pa.array([None], pa.int64())}), landing / "b.parquet")
    with pytest.raises(Invalid, match="null values"):
        accept_files(["c.parquet", "b.parquet"], landing, owned, _orders_schema(), "orders")
    assert sorted(p.name for p in owned.iterdir()) == [Path(ref.path).name]


def test_a_symlink_swapped_in_after_a_check_is_not_followed(tmp_path: Path) -> None:
    """The race the old resolve-then-open code lost: a directory replaced by a link to
    elsewhere between the check and the open. Components are opened with O_NOFOLLOW."""
    landing, outside = tmp_path / "landing", tmp_path / "outside"
    (landing / "feed").mkdir(parents=True)
    outside.mkdir()
    pq.write_table(pa.table({"order_id": pa.array([7], pa.int64())}), outside / "x.parquet")
    os.rmdir(landing / "feed")
    os.symlink(outside, landing / "feed")  # what a swap leaves behind
    with pytest.raises(BadRequest, match="symbolic link"):
        accept_files(["feed/x.parquet"], landing, tmp_path / "owned", _orders_schema(), "orders")
    assert not (tmp_path / "owned").exists() or not any((tmp_path / "owned").iterdir())


def test_a_fifo_does_not_block_intake(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    os.mkfifo(landing / "p.parquet")
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(BadRequest, match="pipe"):
            accept_files(["p.parquet"], landing, tmp_path / "owned", _orders_schema(), "orders")
        done.set()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(10)
    assert done.is_set(), "opening a FIFO in the landing directory blocked"


def test_snapshot_compares_equal_when_nothing_happens(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        env = Env(h, h.settings.landing_path, tmp_path / "outside")
        assert differences(snapshot(env), snapshot(env)) == []


def _one_order_file(landing: Path, name: str) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"order_id": pa.array([1], pa.int64()), "country": ["DE"]}), landing / name)


def test_a_long_non_ascii_file_name_is_taken(tmp_path: Path) -> None:
    """The copy is named by the service: a 248-byte name of 3-byte characters once made the
    copy's name exceed the file system's 255-byte limit (an unhandled error, 500)."""
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    name = "日" * 80 + ".parquet"
    _one_order_file(landing, name)
    (ref,) = accept_files([name], landing, owned, _orders_schema(), "orders")
    assert Path(ref.path).parent == owned and ref.path.endswith(".parquet")
    assert pq.read_table(ref.path).column("order_id").to_pylist() == [1]


def test_a_file_above_the_size_limit_is_refused_before_copying(tmp_path: Path) -> None:
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    _one_order_file(landing, "a.parquet")
    with pytest.raises(TooLarge, match="max_landing_file_bytes"):
        accept_files(["a.parquet"], landing, owned, _orders_schema(), "orders", max_file_bytes=100)
    assert list(owned.iterdir()) == []


def test_a_file_growing_while_copied_is_copied_as_measured(tmp_path: Path) -> None:
    """The size checked against the limit is the size copied: appending later changes nothing."""
    from loader.intake.landing import _copy

    source, target = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(b"x" * 1000)
    with open(source, "rb") as src, open(target, "wb") as dst:
        with open(source, "ab") as grow:
            grow.write(b"y" * 1000)
            grow.flush()
        assert _copy(src.fileno(), dst.fileno(), 1000) == 1000
    assert target.read_bytes() == b"x" * 1000


@pytest.mark.parametrize("change", ["append", "truncate"])
def test_a_file_changing_while_it_is_copied_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A producer still writing its file: the copy could end mid-row (a CSV cut at a row
    boundary still parses), so a change in size or mtime during the copy is a 409."""
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir()
    (landing / "a.csv").write_text("order_id,country\n1,DE\n2,NL\n")
    real = landing_module._copy

    def racing(source: int, target: int, limit: int) -> int:
        if change == "append":
            with open(landing / "a.csv", "a") as grow:
                grow.write("3,FR\n")
        else:
            os.truncate(landing / "a.csv", 15)  # "order_id,count"
        return real(source, target, limit)

    monkeypatch.setattr(landing_module, "_copy", racing)
    with pytest.raises(Conflict, match="changed while it was being copied"):
        accept_files(["a.csv"], landing, owned, _orders_schema(), "orders")
    assert list(owned.iterdir()) == []


def test_the_copy_by_reads_fallback_copies_as_measured(tmp_path: Path) -> None:
    from loader.intake.landing import _copy_by_reads

    source, target = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(bytes(range(256)) * 10_000)
    with open(source, "rb") as src, open(target, "wb") as dst:
        assert _copy_by_reads(src.fileno(), dst.fileno(), 2_000_001) == 2_000_001
    assert target.read_bytes() == source.read_bytes()[:2_000_001]


def test_a_missing_landing_directory_is_a_clear_400(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="landing directory .* itself is missing"):
        accept_files(["a.parquet"], tmp_path / "nowhere", tmp_path / "owned", _orders_schema(), "orders")


@pytest.mark.parametrize(
    ("err", "expected"), [(errno.ENOSPC, Unavailable), (errno.EROFS, Unavailable), (errno.EIO, BadRequest)]
)
def test_a_failing_copy_is_refused_clearly_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, expected: type
) -> None:
    """The service's own disk full or read-only: 503 (retry later); a landing file that cannot
    be read: 400. Either way no copy is kept (a raw OSError was a 500)."""
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    _one_order_file(landing, "a.parquet")
    _one_order_file(landing, "b.parquet")
    real = landing_module._copy
    calls = []

    def failing(source: int, target: int, limit: int) -> int:
        calls.append(limit)
        if len(calls) == 2:
            raise OSError(err, os.strerror(err))
        return real(source, target, limit)

    monkeypatch.setattr(landing_module, "_copy", failing)
    with pytest.raises(expected) as refused:
        accept_files(["a.parquet", "b.parquet"], landing, owned, _orders_schema(), "orders")
    assert os.strerror(err) in refused.value.message
    assert list(owned.iterdir()) == []


def test_a_full_owned_files_disk_answers_503_with_retry_after(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_order_file(harness.settings.landing_path, "full.parquet")

    def full(source: int, target: int, limit: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(landing_module, "_copy", full)
    r = harness.post(ORD, json={"files": ["full.parquet"]})
    assert r.status_code == 503 and "Retry-After" in r.headers, r.text
    assert "No space left on device" in r.json()["message"]
    assert harness.status("orders")["last_sequence"] == 0


def test_only_unpaired_surrogate_escapes_trigger_the_check() -> None:
    """Escaped pairs (an ASCII-only encoder's emoji) are plain text: no walk of the document.
    Escapes are read left to right, so an escaped backslash before 'u' starts no escape."""
    assert not has_lone_surrogate_escape(json.dumps({"u": "a😀b" * 100}))
    paired = [r'"\ud83d\ude00"', r'"\uD83D\uDE00"', r'"\\ud800"', r'"\\\ud83d\ude00"', r'"\\\\"']
    lone = [r'"\ud83d"', r'"\uDE00"', r'"\ud83d\ud83d\ude00"', r'"\ude00\ud83d"', r'"\\ud800\udc00"']
    lone += [r'"\ud800x\udc00"', r'"\ud800\u0041"', r'"\ud800\\"']
    for text in paired:
        assert not has_lone_surrogate_escape(text), text
    for text in lone:
        assert has_lone_surrogate_escape(text), text
