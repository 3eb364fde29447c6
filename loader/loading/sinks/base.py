"""The sink contract: load one batch into one warehouse table, exactly once.

A sink is called from worker threads, at most one batch per table at a time (the
dispatcher guarantees it), so implementations need no per-table locking of their own.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.loading.sinks.view_join import ViewJob


class Sink(Protocol):
    """A Delta writer, as the service's ``BatchHandler.load`` uses it: make sure a table
    exists with its schema, and load one batch as one commit, exactly once."""

    #: "delta-rs" (Spark-written Parquet, deltalake commit) or "delta-spark" (native).
    name: str

    def table_path(self, table: str) -> Path: ...

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        """Create the Delta table if missing; refuse (ValueError) if it exists with another schema."""

    def committed_seq(self, table: str) -> int:
        """Last sequence number committed for ``table`` (its app transaction version), 0 if none."""

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        """Append the batch as one Delta commit carrying (app_id(table), batch.last_seq)
        (loader/durability/transactions.py).

        If the table's transaction version is already >= batch.last_seq the batch was
        committed before a crash: write nothing and return ``skipped=True``.
        """

    def load_group(self, batches: list[Batch], schemas: list[TableSchema]) -> list[LoadResult | BaseException]:
        """Several tables' batches, each committed exactly as ``load`` would (its own
        transaction): one outcome per batch, in order, a failure as the exception.
        Sinks that cannot share a job between tables use :func:`load_each`."""

    def join_view(self, job: ViewJob) -> pa.Table:
        """A join view's delta for one view load, computed by one Spark job (engine ``spark``,
        loader/loading/sinks/view_join.py); the view's commit is the caller's."""


def load_each(sink: Sink, batches: list[Batch], schemas: list[TableSchema]) -> list[LoadResult | BaseException]:
    """``load_group`` for a sink without multi-table jobs: one load per table, in order,
    each one's wall time its own part of the whole."""
    outcomes: list[LoadResult | BaseException] = []
    for batch, schema in zip(batches, schemas):
        try:
            started = time.perf_counter()
            result = sink.load(batch, schema)
            outcomes.append(dataclasses.replace(result, own_seconds=time.perf_counter() - started))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes
