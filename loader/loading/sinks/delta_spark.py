"""The native writer: Delta Spark appends the batch frame itself (needs Delta's JVM jars).

Delta's idempotent writes (``txnAppId``/``txnVersion``) make the append and the app
transaction one commit. The log is read with ``deltalake`` (as for delta-rs), so the
exactly-once check and the table checks are the same code for both paths.
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
from loader.durability.transactions import app_id
from loader.loading.sinks.base import load_each
from loader.loading.sinks.delta_table import DeltaSinkBase, unloaded_part
from loader.loading.sinks.frame import build_batch_frame
from loader.loading.sinks.probe import choose_writer
from loader.loading.spark import DEFAULT_LEAN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
        todo = unloaded_part(batch, self.committed_seq(table))
        if todo is None:
            return LoadResult(table, seq, rows=0, delta_version=None, skipped=True)
        batch = todo
        started = time.perf_counter()
        scratch = self.table_path(table) / f".staging-{uuid.uuid4().hex}"  # hidden from Delta
        try:
            writer = (
                build_batch_frame(self.spark, batch, schema, scratch, lean=self.lean)
                .write.format("delta")
                .mode("append")
                .option("txnAppId", txn_app)
                .option("txnVersion", str(seq))
            )
            if schema.partition_by:
                writer = writer.partitionBy(*schema.partition_by)
            writer.save(str(self.table_path(table)))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        done = time.perf_counter()
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
        )
