"""Loads of latest-state tables: one upsert by key per batch, exactly once.

A latest table (``mode = "latest"``, docs/latest-tables.md) keeps one row per key. A
batch may hold several values of one key (within an update and across updates); only the
newest is written, the others are *superseded* (counted, never silently dropped):

1. Spark prepares the batch: one row per key, the one with the largest ``order_by``
   (ties and tables without ``order_by``: the one that arrived last, by the sequence of
   the update it came with, then its position there: ``Update.arrived``, as the pending
   store may have moved it into an older update's place). Spark runs it as for any load, so a cluster does the work;
   a small batch of a table without row rules is prepared in process (``in_process``).
2. The embedded writer commits it with the ``deltalake`` package's MERGE: a key the table
   lacks is inserted; a key it holds is updated unless the stored ``order_by`` is newer
   (an older value never overwrites a newer one). The commit carries the same application
   transaction ``(app_id(table), last_seq)`` as an append, so a batch replayed after a
   crash is skipped (``unloaded_part``) and a crash at any step loads nothing twice.

A MERGE that changes nothing (every value older than the stored one) makes no Delta
commit; an empty commit then records the transaction, or the table's committed sequence
would lag behind what it holds. A crash between the two replays the no-op MERGE.

The table's own rules (loader/loading/sinks/table_rules.py) are read from the handle the
MERGE runs against: a MERGE into an append-only table, or one needing a writer feature the
loader does not honour, is refused before any work; the newest value per key is checked
against the table's CHECK constraints, invariants and generated columns in step 1's Spark
job (it is what the MERGE writes), with each row's arrival carried along so that a
violation names its update and row.

The native writer (delta-spark) runs the same preparation and Delta's own ``MERGE``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from loader.core import failpoints
from loader.core.evolution import conform_rows
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult, arrival
from loader.durability.transactions import load_commit
from loader.intake.landing import read_landing_file
from loader.loading.sinks.frame import INLINE_ROWS_MAX_BYTES, arrow_frame, spark_struct
from loader.loading.sinks.table_rules import LOCATOR, RuleChecks, TableRules, committing
from loader.loading.sinks.upsert_dv import KeyIndex, commit_with_deletion_vectors, dv_refusal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Arrival order of a row inside a batch (``Update.arrived``: the sequence number of the
#: update it came with, then its position there). Never written to the table.
ORDER_COLUMN = "__loader_arrival"
#: At most this many bytes of landing files are read to locate the rows that failed a load
#: (``ordered_rows``); updates past them are found by bisection instead.
LOCATE_FILE_BYTES = 256 << 20
RANK_COLUMN = "__loader_rank"


class LatestFilesUnsupported(ValueError):
    """Latest tables take rows in the request; landing files are appended by Spark unseen."""


def ordered_rows(batch: Batch, schema: TableSchema, read_files: bool = False) -> pa.Table:
    """The batch's rows (in memory or spilled) with their arrival order.

    ``read_files``: read updates of landing files too, as intake checked them (locating a
    row among an append's rows after a failed load; up to ``LOCATE_FILE_BYTES`` of files;
    the updates past them, and those whose files cannot be read, are left out), rather than
    refuse them (a latest table takes rows only).
    """
    arrow = schema.arrow()
    parts = []
    segments: dict[str, pa.Table] = {}  # each spill segment or hand-off file read once
    file_bytes = 0
    for update in batch.updates:
        data = update.rows
        if update.files and not read_files:
            raise LatestFilesUnsupported(
                f"update {update.seq} of latest table {batch.table!r} holds landing files; a latest table takes rows"
            )
        if update.files:
            file_bytes += sum(f.size for f in update.files)
            if file_bytes > LOCATE_FILE_BYTES:
                continue
            try:
                data = pa.concat_tables([read_landing_file(Path(f.path), f.format, arrow) for f in update.files])
            except Exception:  # (a file damaged since intake: its update is found by bisection, the others named)
                continue
        if data is None and update.spilled is not None:
            ref = update.spilled
            if ref.path not in segments:
                segments[ref.path] = pq.read_table(ref.path)
            data = segments[ref.path].slice(ref.offset, ref.rows)
        if data is None or data.num_rows == 0:
            continue
        n = data.num_rows
        data = conform_rows(data, schema)
        order = update.arrived or [arrival(update.seq, i) for i in range(n)]
        parts.append(data.append_column(ORDER_COLUMN, pa.array(order, pa.int64())))
    return (
        pa.concat_tables(parts)
        if parts
        else pa.schema([*arrow, pa.field(ORDER_COLUMN, pa.int64(), False)]).empty_table()
    )


def newest_per_key(
    spark: SparkSession, rows: pa.Table, schema: TableSchema, scratch: Path, keep_order: bool = False
) -> DataFrame:
    """Step 1 of the module docstring, as one lazily evaluated Spark frame in table order
    (``keep_order``: with each row's arrival after the table's columns, as ``ORDER_COLUMN``)."""
    from pyspark.sql.types import LongType, StructField

    struct = spark_struct(schema)
    struct = struct.add(StructField(ORDER_COLUMN, LongType(), True))
    if rows.nbytes <= INLINE_ROWS_MAX_BYTES:
        frame = arrow_frame(spark, rows, struct)
    else:  # executors read a file rather than the rows passing through the driver
        scratch.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, scratch / "rows.parquet", compression="none")
        frame = spark.read.schema(struct).parquet(str(scratch / "rows.parquet"))
    keys = ", ".join(f"`{k}`" for k in schema.key)
    newest = ([f"`{schema.order_by}` DESC"] if schema.order_by else []) + [f"{ORDER_COLUMN} DESC"]
    ranked = frame.selectExpr(
        *[f"`{n}`" for n in schema.names],
        ORDER_COLUMN,
        f"row_number() OVER (PARTITION BY {keys} ORDER BY {', '.join(newest)}) AS {RANK_COLUMN}",
    )
    kept = [ORDER_COLUMN] if keep_order else []
    return ranked.where(f"{RANK_COLUMN} = 1").select(*[f"`{n}`" for n in schema.names], *kept)


def in_process(rows: pa.Table, schema: TableSchema, rules: TableRules) -> bool:
    """Whether step 1 runs in this process rather than as a Spark job: a batch small enough
    to reach Spark inline anyway (``INLINE_ROWS_MAX_BYTES``), a table without row rules (they
    are Spark SQL), and keys Spark and pyarrow group alike (not floating point: -0.0, NaN).

    Why: the Spark job costs a latest table's load about 0.1 s whatever the batch, about as
    much as the rest of a deletion-vector upsert, and a latest table's staleness follows its
    load's cost (BENCHMARKS.md, "One keyed feed as a latest table and as an append table")."""
    floats = any(pa.types.is_floating(schema.arrow().field(k).type) for k in schema.key)
    return rows.nbytes <= INLINE_ROWS_MAX_BYTES and not rules.row_rules and not floats


def newest_in_process(rows: pa.Table, schema: TableSchema) -> pa.Table:
    """Step 1 with pyarrow: per key the row ``newest_per_key`` keeps (the largest ``order_by``,
    ties and tables without it to the latest arrival), in the table's columns."""
    newest = ([(schema.order_by, "descending")] if schema.order_by else []) + [(ORDER_COLUMN, "descending")]
    ordered = rows.sort_by([*((k, "ascending") for k in schema.key), *newest])
    if ordered.num_rows > 1:  # the first row of each run of equal keys
        same = None
        for k in schema.key:
            column = ordered.column(k)
            equal = pc.equal(column.slice(1), column.slice(0, ordered.num_rows - 1))
            same = equal if same is None else pc.and_(same, equal)
        first = pa.concat_arrays([pa.array([True]), pc.invert(same).combine_chunks()])
        ordered = ordered.filter(first)
    return conform_rows(ordered.select(schema.names), schema)


def merge_predicates(schema: TableSchema) -> tuple[str, str | None]:
    """The MERGE's match condition and its update condition (DataFusion SQL: quoted names)."""
    on = " AND ".join(f't."{k}" = s."{k}"' for k in schema.key)
    newer = f's."{schema.order_by}" >= t."{schema.order_by}"' if schema.order_by else None
    return on, newer


def upsert_with_deltalake(
    spark: SparkSession,
    delta: DeltaTable,
    batch: Batch,
    schema: TableSchema,
    scratch: Path,
    rules: TableRules | None = None,
    checks: RuleChecks | None = None,
    index: KeyIndex | None = None,
) -> LoadResult:
    """Steps 1 and 2 of the module docstring for the embedded writer; ``rules`` are the
    table's as of ``delta``'s version (read here if not given), checked with ``checks``.
    A table declared ``upsert = "deletion-vectors"`` commits with deletion vectors instead
    of the MERGE (loader/loading/sinks/upsert_dv.py), through ``index``, the table's own."""
    table, seq = batch.table, batch.last_seq
    rules = rules if rules is not None else TableRules.read(table, delta)
    vectors = schema.upsert == "deletion-vectors"
    refused = rules.refusal("merge") or (dv_refusal(rules) if vectors else None)
    if refused is not None:
        raise refused
    checks = checks if checks is not None else RuleChecks(spark)
    started, spark_start = time.perf_counter(), time.time()
    rows = ordered_rows(batch, schema)
    if rows.num_rows and in_process(rows, schema, rules):
        newest = newest_in_process(rows, schema)
    elif rows.num_rows:
        newest_frame = newest_per_key(spark, rows, schema, scratch, keep_order=True)
        frame = checks.applied(newest_frame, rules, schema, ORDER_COLUMN)
        try:
            newest = conform_rows(frame.toArrow().select(schema.names), schema)  # (a nested NOT NULL too)
        except Exception as exc:
            located = newest_frame.withColumnRenamed(ORDER_COLUMN, LOCATOR)
            violation = checks.explain(exc, rules, schema, batch, scratch, located=located)
            if violation is None:
                raise
            raise violation from exc
    else:
        newest = schema.arrow().empty_table()
    spark_seconds = time.perf_counter() - started
    spark_end = time.time()
    failpoints.hit("load.after-spark-write")
    failpoints.hit("load.upsert.before-merge")
    if vectors:
        if index is None:
            raise ValueError(f"the deletion-vector upsert of {table!r} needs the table's KeyIndex")
        metrics = commit_with_deletion_vectors(index, delta.version(), newest, table, seq, batch.updates[-1].release)
        delta.update_incremental()
    else:
        metrics = commit_upsert(delta, newest, schema, table, seq, batch.updates[-1].release, rules)
    inserted, updated = metrics.get("num_target_rows_inserted", 0), metrics.get("num_target_rows_updated", 0)
    done = time.perf_counter()
    failpoints.hit("load.upsert.after-merge")
    failpoints.hit("load.after-commit")
    return LoadResult(
        table,
        seq,
        rows=newest.num_rows,
        delta_version=delta.version(),
        files_written=int(metrics.get("num_target_files_added", 0)),
        details={
            **({"rows_marked_deleted": float(metrics["num_rows_marked_deleted"])} if vectors else {}),
            # What the upsert rewrote of the table, for the cost model (schedulers/keys/cost.py)
            **_rewrite_details(delta, metrics, index if vectors else None),
            "spark_seconds": spark_seconds,
            "commit_seconds": done - started - spark_seconds,
            # Every value of the batch that is not the key's stored value now: older than
            # another of the batch, or than the one the table held.
            "superseded_rows": float(rows.num_rows - inserted - updated),
            "rows_inserted": float(inserted),
            "rows_updated": float(updated),
        },
        # (the MERGE publishes and commits in one step)
        marks=dict(spark_start=spark_start, spark_end=spark_end, commit_start=spark_end, commit_end=time.time()),
    )


def _rewrite_details(delta: DeltaTable, metrics: dict[str, int], index: KeyIndex | None) -> dict[str, float]:
    """The table's rows and rows per file after the load, and the rows the MERGE copied in
    how long (deletion vectors: no file rewritten)."""
    if index is not None:
        files = index.live.files.values()
        stored = sum(int(f.stat().get("numRecords", 0)) - (f.dv.cardinality if f.dv else 0) for f in files)
        return {"stored_rows": float(stored), "file_rows": 0.0, "rows_copied": 0.0}
    counts = pa.table(delta.get_add_actions(flatten=True)).column("num_records")
    stored, files = int(pc.sum(counts).as_py() or 0), len(counts)
    out = {"stored_rows": float(stored), "file_rows": stored / files if files else 0.0}
    out["rows_copied"] = float(metrics.get("num_target_rows_copied", 0))
    if "execution_time_ms" in metrics:
        out["rewrite_seconds"] = metrics["execution_time_ms"] / 1000.0
    return out


def commit_upsert(
    delta: DeltaTable,
    newest: pa.Table,
    schema: TableSchema,
    table: str,
    seq: int,
    data_until: float | None = None,
    rules: TableRules | None = None,
) -> dict[str, int]:
    """Step 2 of the module docstring: ``newest`` (one row per key) merged into ``delta``
    with the batch's application transaction; the MERGE's row counts.

    Both commits are made against ``delta``'s version, where ``rules`` were read: one that
    another writer's new protocol or metadata overtook fails (``TableChanged``), and the
    retry checks the rules again.
    """
    rules = rules if rules is not None else TableRules.read(table, delta)
    with committing(rules, merge=True):
        return _merge(delta, newest, schema, table, seq, data_until)


def _merge(
    delta: DeltaTable, newest: pa.Table, schema: TableSchema, table: str, seq: int, data_until: float | None
) -> dict[str, int]:
    on, newer = merge_predicates(schema)
    before = delta.version()
    commit = load_commit(table, seq, data_until)
    metrics: dict[str, int] = {}
    failpoints.hit("load.upsert.mid-merge")  # armed with a delay: the kill lands inside the MERGE
    if newest.num_rows:
        # Not the library's streamed execution: that hides the source's key range from the
        # planner, so every file is scanned; the source is one batch's keys, in memory
        # already. With it, a batch of clustered keys on a Z-ordered 10M-row table merges in
        # 0.52x the time; keys spread over every file gain nothing (BENCHMARKS.md, "upsert
        # against append").
        merger = delta.merge(
            newest, on, source_alias="s", target_alias="t", streamed_exec=False, commit_properties=commit
        )
        metrics = dict(merger.when_matched_update_all(predicate=newer).when_not_matched_insert_all().execute())
    if delta.version() == before:  # nothing changed, so no commit: record the transaction alone
        delta.create_write_transaction([], "append", delta.schema(), commit_properties=commit)
    delta.update_incremental()
    return metrics
