"""Following commit logs from outside (testing/commit_logs.py): a Delta log written by
deltalake and a Structured Streaming file-sink log in Spark's format, each entry found
once, with the files it added, however quickly the next one follows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from testing.commit_logs import MalformedLogEntry, follower, live_files, value_counts


def _rows(uid: int, n: int = 3) -> pa.Table:
    return pa.table({"u": pa.array([uid] * n, pa.int64()), "r": pa.array(range(n), pa.int32())})


def test_delta_log_entries_are_found_once_with_their_files(tmp_path: Path) -> None:
    root = tmp_path / "t"
    log = follower("delta", root, time.time)
    assert log.poll() == []  # no table yet
    write_deltalake(str(root), _rows(1))
    write_deltalake(str(root), _rows(2), mode="append")
    first = log.poll()
    assert [c.version for c in first] == [0, 1]
    assert first[0].previous_check is not None and first[0].seen >= first[0].previous_check
    # Right after the last look: the directory's coarse timestamp must not hide a new entry.
    assert log.poll() == []
    write_deltalake(str(root), _rows(3, n=5), mode="append")
    (third,) = log.poll()
    assert third.version == 2 and len(third.added) == 1
    assert value_counts(third.added[0], "u") == {3: 5}
    files = live_files(first + [third])
    assert sorted(sum((list(value_counts(p, "u")) for p in files), [])) == [1, 2, 3]


def _sink_entry(path: Path, action: str = "add") -> str:
    return json.dumps({"path": path.as_uri(), "size": 1, "isDir": False, "action": action})


def test_spark_sink_log_batches_and_compactions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    meta = out / "_spark_metadata"
    meta.mkdir(parents=True)
    files = []
    for uid in range(4):
        files.append(out / f"part-{uid}.parquet")
        pq.write_table(_rows(uid), files[-1])
    log = follower("spark-sink", out, time.time)
    (meta / "0").write_text("v1\n" + _sink_entry(files[0]), encoding="utf-8")
    (meta / "1").write_text("v1\n" + _sink_entry(files[1]) + "\n" + _sink_entry(files[2]), encoding="utf-8")
    seen = log.poll()
    assert [(c.version, len(c.added)) for c in seen] == [(0, 1), (1, 2)]
    # A compact entry lists every live file so far; only the new one is its own.
    compact = "\n".join(["v1", *(_sink_entry(f) for f in files)])
    (meta / "2.compact").write_text(compact, encoding="utf-8")
    (batch,) = log.poll()
    assert batch.version == 2 and batch.added == (str(files[3]),)
    assert value_counts(batch.added[0], "u") == {3: 3}


def test_unknown_kinds_and_foreign_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown commit log kind"):
        follower("iceberg", tmp_path, time.time)
    meta = tmp_path / "_spark_metadata"
    meta.mkdir()
    (meta / "0").write_text('v1\n{"path": "s3://bucket/x.parquet", "action": "add"}', encoding="utf-8")
    with pytest.raises(MalformedLogEntry, match="not a local file"):
        follower("spark-sink", tmp_path, time.time).poll()
