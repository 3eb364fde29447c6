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
next run tries again. A crash before the commit leaves unnamed files for vacuum; after it the
table is whole (``compact.latest.before-commit`` and ``.after-commit`` failpoints).

Why not deltalake's ``optimize.compact``: it rewrites only files below its target size (a
large file's deletion vector is never purged) and writes files neither sorted by key nor in
small row groups (a lookup would read whole files). It does honour deletion vectors
(tests/loader/loading/test_upsert_dv.py), so running it is safe, only slower for the upsert.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.loading.sinks.add_actions import file_stats
from loader.loading.sinks.deletion_vectors import read as read_vector
from loader.loading.sinks.live_files import LiveFile, LiveFiles
from loader.loading.sinks.log_commit import ENGINE, checkpoint_due, commit_next
from loader.loading.sinks.upsert_dv import ROW_GROUP_ROWS

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
    live = LiveFiles(root)
    live.advance(DeltaTable(str(root)).version())
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
        data = pq.read_table(root / name).select(schema.names).cast(arrow)
        if file.dv is not None:
            gone = read_vector(root, file.dv)
            keep = pc.invert(pc.is_in(pa.array(range(data.num_rows), pa.int64()), pa.array(sorted(gone), pa.int64())))
            data = data.filter(keep)
            purged += len(gone)
        parts.append(data)
    rows = pa.concat_tables(parts).sort_by([(k, "ascending") for k in schema.key]) if parts else arrow.empty_table()
    now = int(time.time() * 1000)
    written: list[Path] = []
    try:
        adds = []
        for start in range(0, rows.num_rows, target):
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            pq.write_table(rows.slice(start, target), root / name, row_group_size=ROW_GROUP_ROWS, compression="snappy")
            written.append(root / name)
            adds.append(
                {
                    "path": name,
                    "partitionValues": {},
                    "size": (root / name).stat().st_size,
                    "modificationTime": now,
                    "dataChange": False,
                    "stats": file_stats(str(root / name), schema).to_json(),
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
        if not commit_next(root, version, entry):
            return False
        written = []
        failpoints.hit("compact.latest.after-commit")
    finally:
        for path in written:
            path.unlink(missing_ok=True)
    live.apply(version, json.loads("[" + ",".join(json.dumps(a) for a in actions) + "]"))
    done.commits += 1
    done.files_removed += len(removes)
    done.files_added += len(adds)
    done.rows_purged += purged
    delta = DeltaTable(str(root))
    if checkpoint_due(version, delta.metadata().configuration):
        delta.create_checkpoint()
    return True
