"""Compaction of a deletion-vector latest table: deleted rows purged, small files merged, sorted.

The deletion-vector upsert (loader/loading/sinks/upsert_dv.py) leaves each load's batch as a
small file and the rows it replaced marked deleted in older files. Both cost readers (more
files to open, rows read then dropped) and the upsert itself (each small file's key range
spans the batch's, so every one is searched). This rewrites, with the rows each file's
deletion vector deletes left out:

- every file of fewer than ``small_rows`` rows, and
- every file whose deletion vector deletes at least ``purge_fraction`` of its rows,

sorted by key into files of at most ``target_rows`` rows in row groups of
``upsert_dv.ROW_GROUP_ROWS`` (so a key's lookup reads one row group of each), at most
``bin_rows`` rows per commit (memory stays bounded). Each commit removes the rewritten files
(with their deletion vectors, as the log names them) and adds the new ones, ``dataChange``
false, as the protocol's OPTIMIZE does; it is the next log entry, written only if no writer
took that version: a lost race (a load committed meanwhile) leaves the table as it was and the
next run tries again. The files are written in a staging directory and moved in at the commit
(log_commit.publish_and_commit): a crash before it leaves them there, removed when the table
is next opened for loads; after it the table is whole (``compact.latest.before-commit`` and
``.after-commit`` failpoints).

Why not deltalake's ``optimize.compact``: it rewrites only files below its target size (a
large file's deletion vector is never purged) and writes files neither sorted by key nor in
small row groups (a lookup would read whole files). It does honour deletion vectors
(tests/loader/loading/test_upsert_dv.py), so running it is safe, only slower for the upsert.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from loader.core import failpoints
from loader.core.durable_files import fsync_file
from loader.core.evolution import conform_rows
from loader.core.schema import TableSchema
from loader.loading.sinks.add_actions import file_stats
from loader.loading.sinks.deletion_vectors import read as read_vector
from loader.loading.sinks.delta_table import STAGING_PREFIX
from loader.loading.sinks.live_files import LiveFile, LiveFiles
from loader.loading.sinks.log_commit import ENGINE, checkpoint_due, publish_and_commit
from loader.loading.sinks.table_rules import TableRules
from loader.loading.sinks.upsert_dv import ROW_GROUP_ROWS, dv_refusal

TARGET_ROWS = 1 << 20
SMALL_ROWS = 1 << 16
PURGE_FRACTION = 0.1
BIN_ROWS = 4 << 20


@dataclass
class Compacted:
    """What one compaction of a table did."""

    commits: int = 0
    files_removed: int = 0
    files_added: int = 0
    rows_purged: int = 0
    lost_race: bool = False
    #: Why the table refuses the compaction's commit (its writer features), if it does.
    refused: str | None = None


def compact_latest(
    root: Path,
    schema: TableSchema,
    target_rows: int = TARGET_ROWS,
    small_rows: int = SMALL_ROWS,
    purge_fraction: float = PURGE_FRACTION,
    bin_rows: int = BIN_ROWS,
) -> Compacted:
    """The module docstring's compaction of the table at ``root`` (run while no load of it runs)."""
    done = Compacted()
    delta = DeltaTable(str(root))
    rules = TableRules.read(root.name, delta)
    refused = rules.refusal("merge") or dv_refusal(rules)
    if refused is not None:  # (what the table's loads refuse, its compaction does not write either)
        done.refused = str(refused)
        return done
    live = LiveFiles(root)
    live.advance(delta.version())
    chosen = []
    for name, file in live.files.items():
        rows = int(file.stat().get("numRecords", 0))
        deleted = file.dv.cardinality if file.dv is not None else 0
        if rows < small_rows or (rows and deleted / rows >= purge_fraction):
            chosen.append((name, file, rows))
    if len(chosen) < 2 and not any(f.dv is not None for _, f, _ in chosen):
        return done  # one small file and nothing to purge: a rewrite would change nothing
    bins: list[list[tuple[str, LiveFile, int]]] = [[]]
    for entry in sorted(chosen, key=lambda e: e[0]):
        if bins[-1] and sum(e[2] for e in bins[-1]) + entry[2] > bin_rows:
            bins.append([])
        bins[-1].append(entry)
    for members in bins:
        if not _commit_bin(root, schema, live, members, target_rows, done):
            done.lost_race = True
            break
    return done


def _commit_bin(
    root: Path,
    schema: TableSchema,
    live: LiveFiles,
    members: list[tuple[str, LiveFile, int]],
    target: int,
    done: Compacted,
) -> bool:
    arrow = schema.arrow()
    parts, purged = [], 0
    for name, file, _ in members:
        # (conform_rows: a file written before the table's schema evolved, as the table is now)
        data = conform_rows(pq.read_table(root / name), schema)
        if file.dv is not None:
            gone = read_vector(root, file.dv)
            keep = pc.invert(pc.is_in(pa.array(np.arange(data.num_rows)), pa.array(sorted(gone), pa.int64())))
            data = data.filter(keep)
            purged += len(gone)
        parts.append(data)
    rows = pa.concat_tables(parts).sort_by([(k, "ascending") for k in schema.key]) if parts else arrow.empty_table()
    now = int(time.time() * 1000)
    staging = root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        adds, staged = [], []
        for start in range(0, rows.num_rows, target):
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            path = staging / name
            pq.write_table(rows.slice(start, target), path, row_group_size=ROW_GROUP_ROWS, compression="snappy")
            fsync_file(path)
            staged.append(path)
            adds.append(
                {
                    "path": name,
                    "partitionValues": {},
                    "size": path.stat().st_size,
                    "modificationTime": now,
                    "dataChange": False,
                    "stats": file_stats(str(path), schema).to_json(),
                }
            )
        removes = [file.remove_action(now, data_change=False) for _, file, _ in members]
        info = {
            "timestamp": now,
            "operation": "OPTIMIZE",
            "operationParameters": {"strategy": "deletion-vector purge, sorted by key"},
            "engineInfo": ENGINE,
            "operationMetrics": {
                "numRemovedFiles": len(removes),
                "numAddedFiles": len(adds),
                "numDeletedRowsPurged": purged,
            },
        }
        actions = [{"commitInfo": info}, *({"remove": r} for r in removes), *({"add": a} for a in adds)]
        entry = "".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) + "\n" for a in actions).encode()
        failpoints.hit("compact.latest.before-commit")
        version = live.version + 1
        if not publish_and_commit(root, staged, version, entry):
            return False
        failpoints.hit("compact.latest.after-commit")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    live.apply(version, actions)
    done.commits += 1
    done.files_removed += len(removes)
    done.files_added += len(adds)
    done.rows_purged += purged
    delta = DeltaTable(str(root))
    if checkpoint_due(version, delta.metadata().configuration):
        delta.create_checkpoint()
    return True


def vacuum_vectors(root: Path, retention_hours: float, now: float | None = None) -> int:
    """Delete the deletion vector files no live file names and older than the retention; how
    many went.

    Why here: deltalake 1.6.6's vacuum keeps every ``deletion_vector_*.bin`` (measured: it
    neither lists nor deletes one the log no longer names), and each deletion-vector upsert
    writes one, so without this a table loaded every second gains 86,400 a day. The rule is
    VACUUM's for data files: unreferenced by the current version and older than the
    retention (a reader time-travelling further back than the retention may miss them, as it
    may miss data files). A vector file of an upsert still running is younger than any
    sensible retention; one that is named again by a commit after the listing is not deleted,
    since the live files are read after the listing.
    """
    cutoff = (time.time() if now is None else now) - retention_hours * 3600.0
    candidates = [p for p in root.glob("deletion_vector_*.bin") if p.is_file() and p.stat().st_mtime < cutoff]
    if not candidates:
        return 0
    live = LiveFiles(root)
    live.advance(DeltaTable(str(root)).version())
    named = {f.dv.file(root) for f in live.files.values() if f.dv is not None}
    removed = 0
    for path in candidates:
        if path not in named:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
