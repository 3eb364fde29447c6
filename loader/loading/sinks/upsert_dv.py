"""A latest table's upsert that costs the batch, not the table: deletion vectors.

deltalake's MERGE rewrites every file holding a matched key and copies its other rows, so a
load of 100 random keys into a table of 10 million costs 10x an append (BENCHMARKS.md,
"upsert against append"). This strategy (``upsert = "deletion-vectors"``) writes what the
Delta protocol lets a writer write instead ("Deletion Vectors"; Delta's own MERGE does the
same where they are enabled):

1. the batch's keys are *located*: the files whose key bounds hold a batch key, in them the
   row groups whose key bounds do (files stay sorted by key: each load's own, and what
   compaction writes, loader/loading/sinks/dv_compaction.py), and in those the rows, less the
   rows the file's deletion vector already deletes. Row groups read are cached (files never
   change), so a cost grows with the batch's keys and the table's sorted runs, not its rows;
2. the batch's rows are written as one new sorted file; the located rows of each file go into
   one new deletion vector file (the file's old vector and the new rows);
3. one commit replaces each touched file's ``add`` with the same file and its new vector,
   adds the new file, and carries the load's application transaction (exactly once as any
   load: the replay of a committed batch is skipped). It is the next log entry, written only
   if no writer took that version (loader/loading/sinks/log_commit.py); a lost race fails the
   load as ``TableChanged`` and its retry locates again.

``order_by`` as in the MERGE: a stored value newer than the batch's keeps its row and the
batch's value is superseded. Readers apply the vectors (deltalake's scan and query engine,
Delta Spark, DuckDB's delta extension); deltalake's ``to_pyarrow_table``/``to_pyarrow_dataset``
refuse such tables (docs/latest-tables.md says which readers read what).
"""

from __future__ import annotations

import bisect
import json
import shutil
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap

from loader.core import failpoints
from loader.core.durable_files import fsync_file
from loader.core.schema import TableSchema
from loader.durability.transactions import app_id, load_metadata
from loader.loading.failures import TableChanged, TableRefusesWrites
from loader.loading.sinks import deletion_vectors as dvs
from loader.loading.sinks.add_actions import file_stats
from loader.loading.sinks.delta_table import STAGING_PREFIX
from loader.loading.sinks.live_files import LiveFile, LiveFiles
from loader.loading.sinks.log_commit import ENGINE, publish_and_commit
from loader.loading.sinks.table_rules import TableRules

#: Rows per row group of the files this strategy and its compaction write: a located key
#: reads one row group's key column (16,384 int64 keys: 128 KiB).
ROW_GROUP_ROWS = 16_384
#: Bytes of row groups' key columns kept per table between loads (files never change).
CACHE_BYTES = 64 << 20
POSITION = "__loader_position"
ROW = "__loader_row"
OLD_ORDER = "__loader_old_order"


@dataclass
class Located:
    """Where a batch's keys are stored: per file, the live rows holding them; per batch row,
    whether a stored value is newer (superseded) and whether its key was stored at all."""

    rows: dict[str, BitMap] = field(default_factory=dict)
    superseded: set[int] = field(default_factory=set)
    matched: set[int] = field(default_factory=set)
    row_groups_read: int = 0
    files_searched: int = 0


class KeyIndex:
    """What a table's upserts reuse between loads: its live files (replayed from the log),
    the files' footers, row groups' key columns and deletion vectors, all keyed by immutable
    files or descriptors, so nothing goes stale; one per table, used by its loads only."""

    def __init__(self, root: Path, schema: TableSchema, cache_bytes: int = CACHE_BYTES) -> None:
        self.root = root
        self.schema = schema
        self.live = LiveFiles(root)
        self.cache_bytes = cache_bytes
        self._footers: dict[str, tuple[pq.FileMetaData, list[tuple[int, int, Any, Any]]]] = {}
        self._groups: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._group_bytes = 0
        self._vectors: dict[dvs.Descriptor, BitMap] = {}

    def columns(self) -> list[str]:
        return list(self.schema.key) + ([self.schema.order_by] if self.schema.order_by else [])

    def locate(self, batch: pa.Table) -> Located:
        """Step 1 of the module docstring for ``batch`` (one row per key, the table's columns)."""
        schema, found = self.schema, Located()
        first = schema.key[0]
        wanted = sorted(v for v in batch.column(first).to_pylist())
        lowest, highest = wanted[0], wanted[-1]
        single = len(schema.key) == 1
        arrow = schema.arrow()
        # One key column: a set lookup per row group (pc.is_in) and a dict back to the batch's
        # row; several: a hash join of the row group with the batch (3x slower per group).
        value_set = batch.column(first).combine_chunks().cast(arrow.field(first).type)
        row_of = {key: i for i, key in enumerate(batch.column(first).to_pylist())} if single else {}
        probe = batch.select(list(schema.key)).append_column(ROW, pa.array(np.arange(batch.num_rows)))
        news = batch.column(schema.order_by).to_pylist() if schema.order_by else None
        for name, live in list(self.live.files.items()):
            if not _may_hold(live, first, lowest, highest):
                continue
            meta, groups = self._footer(name)
            chosen = [i for i, (_, _, low, high) in enumerate(groups) if low is None or _any_within(wanted, low, high)]
            if not chosen:
                continue
            found.files_searched += 1
            found.row_groups_read += len(chosen)
            rows, deleted = BitMap(), None
            for index, keys in zip(chosen, self._groups_of(name, meta, chosen)):
                offset = groups[index][0]
                if single:
                    hits = np.flatnonzero(pc.is_in(keys.column(first), value_set=value_set).to_numpy(False))
                    if not len(hits):
                        continue
                    column = keys.column(first)
                    matched = [(int(h), row_of[column[int(h)].as_py()]) for h in hits]
                else:
                    joined = keys.append_column(POSITION, pa.array(np.arange(keys.num_rows))).join(
                        probe, list(schema.key), join_type="inner"
                    )
                    if not joined.num_rows:
                        continue
                    matched = list(zip(joined.column(POSITION).to_pylist(), joined.column(ROW).to_pylist()))
                if deleted is None:
                    deleted = self.deleted_rows(live)
                olds = keys.column(OLD_ORDER) if news is not None else None
                for at, row in matched:
                    position = offset + at
                    if position in deleted:
                        continue
                    found.matched.add(row)
                    if olds is not None and news is not None and olds[at].as_py() > news[row]:
                        found.superseded.add(row)  # the stored value is newer: it stays
                    else:
                        rows.add(position)
            if rows:
                found.rows[name] = rows
        # A key stored newer in one file and older in another (never written so, but read
        # that way by a careful reader): the newer value stays, the older row stays too.
        return found

    def _footer(self, name: str) -> tuple[pq.FileMetaData, list[tuple[int, int, Any, Any]]]:
        cached = self._footers.get(name)
        if cached is None:
            meta = pq.read_metadata(self.root / name)
            first = self.schema.key[0]
            groups, offset = [], 0
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                low = high = None
                for c in range(group.num_columns):
                    chunk = group.column(c)
                    if chunk.path_in_schema == first and chunk.is_stats_set and chunk.statistics.has_min_max:
                        low, high = chunk.statistics.min, chunk.statistics.max
                groups.append((offset, group.num_rows, low, high))
                offset += group.num_rows
            cached = self._footers[name] = (meta, groups)
        return cached

    def _groups_of(self, name: str, meta: pq.FileMetaData, indexes: list[int]) -> list[pa.Table]:
        """The key (and order_by) columns of the file's row groups ``indexes``, cached; those
        not cached read with one open of the file."""
        out: list[pa.Table | None] = []
        missing = []
        for index in indexes:
            table = self._groups.get((name, index))
            if table is not None:
                self._groups.move_to_end((name, index))
            else:
                missing.append(len(out))
            out.append(table)
        if missing:
            handle = pq.ParquetFile(self.root / name, metadata=meta)
            arrow = self.schema.arrow()
            for at in missing:
                read = handle.read_row_group(indexes[at], columns=self.columns())
                table = pa.table({c: read.column(c).cast(arrow.field(c).type) for c in self.schema.key})
                if self.schema.order_by:
                    kind = arrow.field(self.schema.order_by).type
                    table = table.append_column(OLD_ORDER, read.column(self.schema.order_by).cast(kind))
                out[at] = table
                self._groups[(name, indexes[at])] = table
                self._group_bytes += table.nbytes
            while self._group_bytes > self.cache_bytes and len(self._groups) > 1:
                _, dropped = self._groups.popitem(last=False)
                self._group_bytes -= dropped.nbytes
        return [t for t in out if t is not None]

    def deleted_rows(self, live: LiveFile) -> BitMap:
        """The rows the file's deletion vector deletes (read once per vector)."""
        if live.dv is None:
            return BitMap()
        rows = self._vectors.get(live.dv)
        if rows is None:
            rows = self._vectors[live.dv] = dvs.read(self.root, live.dv)
        return rows

    def prune(self) -> None:
        """Drop what is cached of files no longer live (a compaction replaced them)."""
        gone = set(self._footers) - set(self.live.files)
        for name in gone:
            del self._footers[name]
        for key in [k for k in self._groups if k[0] in gone]:
            self._group_bytes -= self._groups.pop(key).nbytes
        live = {f.dv for f in self.live.files.values()}
        for vector in [v for v in self._vectors if v not in live]:
            del self._vectors[vector]


#: Writer features the loader honours (table_rules.HONOURED; the others are refused for every
#: write) that the deletion-vector upsert does not: a table that may record its changes
#: (change data feed) needs change files for the rows it replaces, which deltalake's MERGE
#: writes and this commit does not.
DV_UNSUPPORTED = frozenset({"changeDataFeed"})


def dv_refusal(rules: TableRules) -> TableRefusesWrites | None:
    """Why the table cannot take the deletion-vector upsert (None: it can)."""
    if "deletionVectors" not in rules.features:
        return rules.refuse(
            "writer_feature",
            'it is declared upsert = "deletion-vectors" but its protocol lacks the deletionVectors feature; '
            "the loader adds it when it loads (DeltaRsSink), or add it yourself (Delta Lake: ALTER TABLE ... "
            "SET TBLPROPERTIES ('delta.enableDeletionVectors' = true))",
        )
    enabled = rules.deletion_vectors_enabled
    if enabled is not None and enabled.strip().lower() != "true":
        return rules.refuse(
            "writer_feature",
            f"delta.enableDeletionVectors is {enabled!r}, and the protocol lets a writer write deletion vectors only "
            'while it is true: set it to true, or declare the table upsert = "merge"',
        )
    extra = sorted(rules.features & DV_UNSUPPORTED)
    if extra:
        return rules.refuse(
            "writer_feature",
            f"it supports writer feature(s) {extra}, whose change files the deletion-vector upsert does not write; "
            'declare it upsert = "merge", whose deltalake MERGE writes them, or drop the feature',
        )
    return None


def _may_hold(live: LiveFile, column: str, lowest: Any, highest: Any) -> bool:
    """Whether the file's key bounds (its ``stats``) overlap the batch's; numbers and strings
    only (other types' JSON bounds are text): the row groups' bounds decide for the rest."""
    stats = live.stat()
    low, high = stats.get("minValues", {}).get(column), stats.get("maxValues", {}).get(column)
    try:
        if isinstance(low, type(lowest)) and not isinstance(low, bool) and high is not None:
            return not (high < lowest or low > highest)
    except TypeError:
        pass
    return True


def _any_within(wanted: list[Any], low: Any, high: Any) -> bool:
    try:
        at = bisect.bisect_left(wanted, low)
        return at < len(wanted) and wanted[at] <= high
    except TypeError:  # (bounds of another Python type than the keys': read the group)
        return True


def commit_with_deletion_vectors(
    index: KeyIndex, version: int, newest: pa.Table, table: str, seq: int, data_until: float | None
) -> dict[str, int]:
    """Steps 1 to 3 of the module docstring against the table's ``version`` (``index`` is
    brought to it); the load's row counts, named as deltalake's MERGE names them."""
    schema, root = index.schema, index.root
    index.live.advance(version)
    index.prune()
    located = index.locate(newest) if newest.num_rows else Located()
    keep = [i for i in range(newest.num_rows) if i not in located.superseded]
    rows = newest.take(pa.array(keep, pa.int64())) if len(keep) < newest.num_rows else newest
    staging = root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    now = int(time.time() * 1000)
    try:
        lines: list[dict[str, Any]] = []
        staged: list[Path] = []
        if located.rows:
            touched = sorted(located.rows)
            vectors = [index.deleted_rows(index.live.files[n]) | located.rows[n] for n in touched]
            dv_file, descriptors = dvs.write_file(staging, vectors)  # (named by its UUID, found in the root)
            staged.append(dv_file)
            for name, descriptor in zip(touched, descriptors):
                live = index.live.files[name]
                lines.append({"remove": live.remove_action(now)})
                lines.append({"add": live.add_action(descriptor, now)})
        added = 0
        if rows.num_rows:
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            order = [(k, "ascending") for k in schema.key]
            pq.write_table(rows.sort_by(order), staging / name, row_group_size=ROW_GROUP_ROWS, compression="snappy")
            fsync_file(staging / name)
            staged.append(staging / name)
            info = (staging / name).stat()
            lines.append(
                {
                    "add": {
                        "path": name,
                        "partitionValues": {},
                        "size": info.st_size,
                        "modificationTime": info.st_mtime_ns // 1_000_000,
                        "dataChange": True,
                        "stats": file_stats(str(staging / name), schema).to_json(),
                    }
                }
            )
            added = 1
        deleted = sum(len(r) for r in located.rows.values())
        metrics = {
            "num_source_rows": newest.num_rows,
            "num_target_rows_inserted": rows.num_rows - len(located.matched - located.superseded),
            "num_target_rows_updated": len(located.matched - located.superseded),
            "num_target_rows_deleted": 0,
            "num_target_rows_copied": 0,
            "num_target_files_added": added,
            "num_target_files_removed": 0,
            "num_deletion_vectors_added": len(located.rows),
            "num_rows_marked_deleted": deleted,
            "num_row_groups_read": located.row_groups_read,
        }
        info = {
            "timestamp": now,
            "operation": "MERGE",
            "operationParameters": {"strategy": "deletion-vectors"},
            "engineInfo": ENGINE,
            **load_metadata(data_until),
            "operationMetrics": metrics,
        }
        txn = {"txn": {"appId": app_id(table), "version": seq, "lastUpdated": now}}
        actions = [{"commitInfo": info}, *lines, txn]
        entry = "".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) + "\n" for a in actions).encode()
        failpoints.hit("load.upsert.mid-merge")  # (as the MERGE's, for the crash trial's kill with a delay)
        failpoints.hit("load.upsert.dv-before-commit")
        if not publish_and_commit(root, staged, version + 1, entry):
            raise TableChanged(
                f"another writer committed version {version + 1} of table {table!r} first; the upsert's deletion "
                "vectors were computed against the version before, so the load is retried against the new one"
            )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    index.live.apply(version + 1, lines)
    return metrics
