"""A Spark-free sink for fast API and recovery tests: same exactly-once contract, deltalake only.

The real sinks (Spark-written Parquet) are covered by tests/loader/loading/test_sinks.py and the
end-to-end tests; this one lets the HTTP and recovery logic be tested in milliseconds.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from loader.core.evolution import conform_rows
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.durability.transactions import app_id, load_commit
from loader.intake.landing import read_landing_file
from loader.loading.sinks.base import load_each
from loader.loading.sinks.delta_table import create_table, schema_differences, unloaded_part
from loader.loading.sinks.upsert import ORDER_COLUMN, commit_upsert, ordered_rows


class ArrowSink:
    name = "arrow-test"

    def __init__(self, warehouse: Path, fail: threading.Event | None = None) -> None:
        self.warehouse = warehouse
        self.fail = fail or threading.Event()
        self.loads = 0

    def table_path(self, table: str) -> Path:
        return self.warehouse / table

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        path = self.table_path(table)
        if not (path / "_delta_log").is_dir():  # (not asking deltalake: 1.5 ms to fail)
            create_table(path, schema.arrow(), list(schema.partition_by))
            return
        differences = schema_differences(DeltaTable(str(path)), schema)
        if differences:
            raise ValueError(f"Delta table {table!r} exists with another schema: " + "; ".join(differences))

    def committed_seq(self, table: str) -> int:
        return DeltaTable(str(self.table_path(table))).transaction_version(app_id(table)) or 0

    def load_group(self, batches: list[Batch], schemas: list[TableSchema]) -> list[LoadResult | BaseException]:
        """No multi-table job here: one load per table, each its own commit."""
        return load_each(self, batches, schemas)

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        if self.fail.is_set():
            raise RuntimeError("injected failure")
        todo = unloaded_part(batch, self.committed_seq(batch.table))
        if todo is None:
            return LoadResult(batch.table, batch.last_seq, rows=0, delta_version=None, skipped=True)
        batch = todo
        if schema.latest:
            return self._upsert(batch, schema)
        started = time.time()  # (the "Spark job" here: the rows read, as the real sinks stamp it)
        parts = [conform_rows(t, schema) for t in [*batch.row_tables, *(ref.read() for ref in batch.spilled)]]
        parts += [read_landing_file(Path(f.path), f.format, schema.arrow()) for f in batch.files]
        data = pa.concat_tables(parts)
        marks = {"spark_start": started, "spark_end": time.time()}
        marks["publish_start"] = marks["commit_start"] = marks["spark_end"]
        write_deltalake(
            str(self.table_path(batch.table)),
            data,
            mode="append",
            partition_by=list(schema.partition_by) or None,
            commit_properties=load_commit(batch.table, batch.last_seq, batch.updates[-1].release),
        )
        self.loads += 1
        version = DeltaTable(str(self.table_path(batch.table))).version()
        marks["commit_end"] = time.time()
        return LoadResult(batch.table, batch.last_seq, rows=data.num_rows, delta_version=version, marks=marks)

    def _upsert(self, batch: Batch, schema: TableSchema) -> LoadResult:
        """The real sinks' rule (loader/loading/sinks/upsert.py) with the newest value per key
        chosen in Python instead of a Spark job: also the oracle of the upsert tests."""
        rows = ordered_rows(batch, schema)
        order = [schema.order_by] if schema.order_by else []
        newest: dict[tuple[object, ...], dict[str, object]] = {}
        for row in rows.to_pylist():
            key = tuple(row[k] for k in schema.key)
            rank = [row[c] for c in [*order, ORDER_COLUMN]]
            held = newest.get(key)
            if held is None or rank >= [held[c] for c in [*order, ORDER_COLUMN]]:
                newest[key] = row
        chosen = pa.Table.from_pylist(list(newest.values()), schema=rows.schema).select(schema.names)
        delta = DeltaTable(str(self.table_path(batch.table)))
        metrics = commit_upsert(
            delta, conform_rows(chosen, schema), schema, batch.table, batch.last_seq, batch.updates[-1].release
        )
        self.loads += 1
        applied = metrics.get("num_target_rows_inserted", 0) + metrics.get("num_target_rows_updated", 0)
        return LoadResult(
            batch.table,
            batch.last_seq,
            rows=chosen.num_rows,
            delta_version=delta.version(),
            details={"superseded_rows": float(rows.num_rows - applied)},
        )
