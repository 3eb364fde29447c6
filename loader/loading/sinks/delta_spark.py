"""The native writer: Delta Spark appends the batch frame itself (needs Delta's JVM jars);
a latest table's batch is Delta's own MERGE.

Delta's idempotent writes (``txnAppId``/``txnVersion``) make the append and the app
transaction one commit. The log is read with ``deltalake`` (as for delta-rs), so the
exactly-once check and the table checks are the same code for both paths.

The table's own rules are Delta Spark's to enforce here (it is the reference writer:
CHECK constraints, invariants, generated and identity columns, its table features), and
the loader writes only through ``format("delta")`` and ``DeltaTable.merge``, which apply
them. The loader adds what it does on the embedded path at the table level: a MERGE into an
append-only table is refused before any work, and Delta's errors that blame the table
(append-only, unsupported features, a concurrent protocol or metadata change) become
``TableRefusesWrites``/``TableChanged`` (loader/loading/sinks/table_rules.py), so they are
retried, never quarantined.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.durability.transactions import DATA_UNTIL_KEY, app_id
from loader.loading.sinks.base import load_each
from loader.loading.sinks.delta_table import DeltaSinkBase, unloaded_part
from loader.loading.sinks.frame import build_batch_frame, spark_struct
from loader.loading.sinks.probe import choose_writer
from loader.loading.sinks.table_rules import TableRules, native_writing, opening
from loader.loading.sinks.upsert import merge_predicates, newest_per_key, ordered_rows
from loader.loading.spark import DEFAULT_LEAN, is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Delta Spark's commitInfo.userMetadata of the session's next commits: it carries the
#: batch's data interval end (``DATA_UNTIL_KEY=value``), as the embedded writer's custom field does.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


class DeltaSparkSink(DeltaSinkBase):
    """The native writer: Delta Spark appends the batch frame with ``txnAppId``/``txnVersion``,
    so rows and application transaction are one commit; the exactly-once check before it
    reads the log with ``deltalake``, as for the embedded writer."""

    name = "delta-spark"

    def __init__(self, warehouse: Path, spark: SparkSession, lean: Iterable[str] = DEFAULT_LEAN) -> None:
        choose_writer("delta-spark", spark)  # DeltaJarsMissing now, not at the first load
        super().__init__(warehouse, spark, lean)

    def load_group(self, batches: list[Batch], schemas: list[TableSchema]) -> list[LoadResult | BaseException]:
        """No multi-table job here: one load per table, each its own commit."""
        return load_each(self, batches, schemas)

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        table, seq, txn_app = batch.table, batch.last_seq, app_id(batch.table)
        with opening(table):
            todo = unloaded_part(batch, self.committed_seq(table))
        if todo is None:
            return LoadResult(table, seq, rows=0, delta_version=None, skipped=True)
        batch = todo
        if schema.latest:
            delta = self.open(table)
            refused = None if delta is None else TableRules.read(table, delta).refusal("merge", "delta-spark")
            if refused is not None:
                raise refused
            with native_writing(table):
                return self._upsert(batch, schema)
        started, spark_start = time.perf_counter(), time.time()
        scratch = self.table_path(table) / f".staging-{uuid.uuid4().hex}"  # hidden from Delta
        try:
            writer = (
                build_batch_frame(self.spark, batch, schema, scratch, lean=self.lean)
                .write.format("delta")
                .mode("append")
                .option("txnAppId", txn_app)
                .option("txnVersion", str(seq))
                .option("userMetadata", f"{DATA_UNTIL_KEY}={batch.updates[-1].release!r}")
            )
            if schema.partition_by:
                writer = writer.partitionBy(*schema.partition_by)
            with native_writing(table):
                writer.save(str(self.table_path(table)))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        done, spark_end = time.perf_counter(), time.time()
        failpoints.hit("load.after-commit")
        delta = self.open(table)
        assert delta is not None
        metrics = (delta.history(1) or [{}])[0].get("operationMetrics") or {}
        return LoadResult(
            table,
            seq,
            rows=int(metrics.get("numOutputRows", 0)),
            delta_version=delta.version(),
            files_written=int(metrics.get("numFiles", 0)),
            bytes_written=int(metrics.get("numOutputBytes", 0)),
            details={"spark_seconds": done - started},
            # (Delta's own writer commits inside the Spark job)
            marks={"spark_start": spark_start, "spark_end": spark_end, "commit_end": spark_end},
        )

    def _upsert(self, batch: Batch, schema: TableSchema) -> LoadResult:
        """A latest table's batch as Delta's own MERGE (loader/loading/sinks/upsert.py).

        Delta's idempotent DML takes the application transaction from the session's
        ``spark.databricks.delta.write.txnAppId``/``txnVersion``; a session of its own per
        load (classic mode: ``newSession``, same SparkContext) keeps two workers' merges
        from seeing each other's. Over Spark Connect each worker process has its own.
        """
        from delta.tables import DeltaTable as SparkDeltaTable

        table, seq = batch.table, batch.last_seq
        started = time.perf_counter()
        session = self.spark if is_connect(self.spark) else self.spark.newSession()
        rows = ordered_rows(batch, schema)
        scratch = self.table_path(table) / f".staging-{uuid.uuid4().hex}"
        on, newer = merge_predicates(schema)
        try:
            session.conf.set("spark.databricks.delta.write.txnAppId", app_id(table))
            session.conf.set("spark.databricks.delta.write.txnVersion", str(seq))
            session.conf.set(USER_METADATA, f"{DATA_UNTIL_KEY}={batch.updates[-1].release!r}")
            if rows.num_rows:
                source = newest_per_key(session, rows, schema, scratch)
                target = SparkDeltaTable.forPath(session, str(self.table_path(table)))
                # Spark SQL quotes names with backticks (DataFusion's double quotes above).
                merger = target.alias("t").merge(source.alias("s"), on.replace('"', "`"))
                merger = merger.whenMatchedUpdateAll(newer.replace('"', "`") if newer else None)
                failpoints.hit("load.upsert.before-merge")
                failpoints.hit("load.upsert.mid-merge")
                merger.whenNotMatchedInsertAll().execute()
            if self.committed_seq(table) < seq:  # no row changed, so no commit: the transaction alone
                session.createDataFrame([], schema=spark_struct(schema)).write.format("delta").mode("append").option(
                    "txnAppId", app_id(table)
                ).option("txnVersion", str(seq)).save(str(self.table_path(table)))
        finally:
            session.conf.unset("spark.databricks.delta.write.txnAppId")
            session.conf.unset("spark.databricks.delta.write.txnVersion")
            session.conf.unset(USER_METADATA)
            shutil.rmtree(scratch, ignore_errors=True)
        failpoints.hit("load.upsert.after-merge")
        failpoints.hit("load.after-commit")
        delta = self.open(table)
        assert delta is not None
        metrics = (delta.history(1) or [{}])[0].get("operationMetrics") or {}
        inserted = int(metrics.get("numTargetRowsInserted", 0))
        updated = int(metrics.get("numTargetRowsUpdated", 0))
        return LoadResult(
            table,
            seq,
            rows=int(metrics.get("numSourceRows", 0)),
            delta_version=delta.version(),
            files_written=int(metrics.get("numTargetFilesAdded", 0)),
            details={
                "spark_seconds": time.perf_counter() - started,
                "superseded_rows": float(rows.num_rows - inserted - updated),
                "rows_inserted": float(inserted),
                "rows_updated": float(updated),
            },
        )
