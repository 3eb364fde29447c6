"""The embedded default writer: Spark writes Parquet, the ``deltalake`` package commits it.

No Delta JVM jars are needed. One load is one Spark job writing the batch as Parquet
into ``<table>/.staging-<uuid>/out/`` (its in-memory rows reach Spark as a Parquet file
in ``.../in/``); the files are then renamed into the table's root or
hive-style partition directories (the same filesystem, so a rename is one metadata
operation) and committed as one Delta transaction carrying ``(app_id(table), last_seq)``.

Crash safety: the app transaction is read before anything is written, so a replayed
batch is skipped. A crash before the commit leaves a staging directory (removed by
``cleanup``/``ensure_table``) or renamed files no commit references, which readers
ignore and vacuum deletes.

The table's own rules (loader/loading/sinks/table_rules.py) are read from the same handle
as the app transaction, before any Spark work: a table that needs a writer feature the
loader does not honour is refused; its CHECK constraints, invariants and generated columns
are checked (and generated columns filled) inside the load's Spark job; the commit is made
against that handle's version, so a protocol or metadata change by another writer since
then fails it (delta-rs's conflict check) and the retry checks again.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.durability.transactions import app_id, load_commit
from loader.loading.sinks.add_actions import file_stats, log_path, partition_values
from loader.loading.sinks.base import load_each
from loader.loading.sinks.delta_table import STAGING_PREFIX, DeltaSinkBase, remove_staging, unloaded_part
from loader.loading.sinks.frame import build_batch_frame
from loader.loading.sinks.group_job import describe, run_group_job
from loader.loading.sinks.table_rules import RuleChecks, TableRules, committing, opening
from loader.loading.sinks.upsert import ordered_rows, upsert_with_deltalake
from loader.loading.spark import DEFAULT_LEAN, is_connect, lean_write_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Where Hadoop's FileOutputCommitter keeps task attempts under its output directory
#: (``_temporary/<application attempt, 0>/_temporary``); made by the loader with the
#: ``staging_dirs_premade`` lean change. Should the layout ever differ, Hadoop makes its
#: own directories as before: slower, never wrong.
COMMITTER_WORK_DIR = PurePosixPath("_temporary", "0", "_temporary")


class DeltaRsSink(DeltaSinkBase):
    """The embedded default (no Delta jars): one Spark job writes the batch's Parquet files
    into a staging directory, they are renamed into the table, and one ``deltalake`` commit
    adds them with the table's application transaction (see the module docstring)."""

    name = "delta-rs"

    def __init__(self, warehouse: Path, spark: SparkSession, lean: Iterable[str] = DEFAULT_LEAN) -> None:
        super().__init__(warehouse, spark, lean)
        #: Handles kept by the ``cached_table`` lean change, one per table (one load of a table at a time).
        self._handles: dict[str, DeltaTable] = {}
        self.checks = RuleChecks(spark)

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        super().ensure_table(table, schema)
        self.cleanup(table)

    def cleanup(self, table: str) -> int:
        """Remove staging directories of crashed loads; only while no load of ``table`` runs."""
        self._handles.pop(table, None)
        return remove_staging(self.table_path(table))

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        table, seq = batch.table, batch.last_seq
        path = self.table_path(table)
        with opening(table):
            delta = self._current_table(table)
        todo = unloaded_part(batch, delta.transaction_version(app_id(table)) or 0)
        if todo is None:
            return LoadResult(table, seq, rows=0, delta_version=None, skipped=True)
        batch = todo
        rules = TableRules.read(table, delta)  # as of the version the commit is made against

        staging = path / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            if schema.latest:  # one upsert by key (loader/loading/sinks/upsert.py)
                return upsert_with_deltalake(self.spark, delta, batch, schema, staging / "in", rules, self.checks)
            refused = rules.refusal("append")
            if refused is not None:
                raise refused
            started = time.perf_counter()
            frame = build_batch_frame(self.spark, batch, schema, staging / "in", lean=self.lean)
            frame = self.checks.applied(frame, rules, schema)
            try:
                self._write_parquet(frame, staging / "out", schema)
            except Exception as exc:
                arrivals = functools.partial(ordered_rows, batch, schema, read_files=True)
                violation = self.checks.explain(exc, rules, schema, batch, staging / "locate", arrivals)
                if violation is None:
                    raise
                raise violation from exc
            spark_seconds = time.perf_counter() - started
            failpoints.hit("load.after-spark-write")
            return self._commit_staged(batch, schema, delta, staging / "out", spark_seconds, rules)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _current_table(self, table: str) -> DeltaTable:
        """The table's deltalake handle at its newest version, from which the app transaction is read.

        With ``cached_table`` the handle of the last load is brought up to date (commits of
        maintenance included); one that cannot be is dropped and the table opened afresh.
        """
        path = str(self.table_path(table))
        if "cached_table" not in self.lean:
            return DeltaTable(path)
        delta = self._handles.pop(table, None)
        if delta is not None:
            try:
                delta.update_incremental()
            except Exception:
                log.warning("could not bring the cached handle of %s up to date; opening it afresh", table)
                delta = None
        if delta is None:
            delta = DeltaTable(path)
        self._handles[table] = delta
        return delta

    def _write_parquet(self, frame: DataFrame, output: Path, schema: TableSchema) -> None:
        """One Spark job writing ``frame`` as Parquet into ``output`` (a directory of this load)."""
        if "staging_dirs_premade" in self.lean:
            (output / COMMITTER_WORK_DIR).mkdir(parents=True)
            writer = frame.write.mode("append")  # into the (empty) directory just made
        else:
            writer = frame.write.mode("errorifexists")
        options = lean_write_options(self.lean)
        if options:
            writer = writer.options(**options)
        if schema.partition_by or "few_round_trips" not in self.lean:
            writer = writer.partitionBy(*schema.partition_by)
        writer.parquet(str(output))

    def _publish(
        self, staging: Path, root: Path, schema: TableSchema, published: list[Path]
    ) -> tuple[list[AddAction], int]:
        """Move Spark's part files into the table and describe them; empty files are dropped."""
        actions: list[AddAction] = []
        rows = 0
        for source in sorted(staging.rglob("part-*.parquet")):
            relative = PurePosixPath(source.relative_to(staging).as_posix())
            stats = file_stats(str(source), schema)
            if stats.num_records == 0:
                continue
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():  # Spark's names carry the job's UUID; a clash is a bug
                raise FileExistsError(f"{target} already exists; refusing to overwrite table data")
            os.replace(source, target)
            published.append(target)
            info = target.stat()
            actions.append(
                AddAction(
                    path=log_path(relative),
                    size=info.st_size,
                    partition_values=partition_values(relative, schema),
                    modification_time=info.st_mtime_ns // 1_000_000,
                    data_change=True,
                    stats=stats.to_json(),
                )
            )
            rows += stats.num_records
        return actions, rows

    def load_group(self, batches: list[Batch], schemas: list[TableSchema]) -> list[LoadResult | BaseException]:
        """Several tables' batches in one Spark job (loader/loading/sinks/group_job.py), then
        one Delta commit per table with that table's application transaction, in order.

        A crash between two tables' commits leaves the earlier ones committed (their
        transaction versions say so: the WAL replay skips them) and the later ones as a
        single-table crash would. Partitioned tables' batches are loaded by their own jobs,
        and so are those of tables with row rules (CHECK constraints, invariants, generated
        columns: checked with Spark SQL, which the group job's pyarrow tasks do not run); a
        table that refuses the write is refused here, before the job.
        """
        outcomes: list[LoadResult | BaseException | None] = [None] * len(batches)
        todo: list[tuple[int, Batch, TableSchema, DeltaTable, Path, TableRules]] = []
        for i, (batch, schema) in enumerate(zip(batches, schemas)):
            if schema.partition_by or schema.latest:  # jobs of their own (an upsert is not an append)
                continue
            try:
                with opening(batch.table):
                    delta = self._current_table(batch.table)
                part = unloaded_part(batch, delta.transaction_version(app_id(batch.table)) or 0)
                rules = TableRules.read(batch.table, delta)
            except Exception as exc:
                outcomes[i] = exc
                continue
            if part is None:
                outcomes[i] = LoadResult(batch.table, batch.last_seq, rows=0, delta_version=None, skipped=True)
                continue
            refused = rules.refusal("append")
            if refused is not None:
                outcomes[i] = refused
                continue
            if rules.row_rules:  # a job of its own, which checks them with Spark SQL
                continue
            staging = self.table_path(batch.table) / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
            todo.append((i, part, schema, delta, staging, rules))
        try:
            started = time.perf_counter()
            members = []
            described: list[float] = []  # each member's driver-side preparation, seconds
            for entry in list(todo):
                i, part, schema, _, staging, _ = entry
                began = time.perf_counter()
                try:
                    members.append(describe(part, schema, staging))
                    described.append(time.perf_counter() - began)
                except Exception as exc:  # e.g. a null in a NOT NULL column: this table's outcome
                    outcomes[i] = exc
                    todo.remove(entry)
                    shutil.rmtree(staging, ignore_errors=True)
            if todo:
                written = run_group_job(self.spark, members, self.parallelism())
                spark_seconds = time.perf_counter() - started
                failpoints.hit("load.after-spark-write")
                for position, ((i, part, schema, delta, staging, rules), outcome, prepared) in enumerate(
                    zip(todo, written, described)
                ):
                    if position:
                        failpoints.hit("load.group.between-commits")
                    if outcome.error is not None:
                        outcomes[i] = RuntimeError(f"loading {part.table} in a group job failed: {outcome.error}")
                        continue
                    try:
                        began = time.perf_counter()
                        result = self._commit_staged(part, schema, delta, staging / "out", spark_seconds, rules)
                        own = prepared + outcome.seconds + (time.perf_counter() - began)
                        outcomes[i] = dataclasses.replace(result, own_seconds=own)
                    except Exception as exc:  # this table's commit; the others stand
                        outcomes[i] = exc
        finally:
            for _, _, _, _, staging, _ in todo:
                shutil.rmtree(staging, ignore_errors=True)
        alone = [i for i, outcome in enumerate(outcomes) if outcome is None]  # partitioned, latest, rules: own jobs
        for i, outcome in zip(alone, load_each(self, [batches[i] for i in alone], [schemas[i] for i in alone])):
            outcomes[i] = outcome
        return [o for o in outcomes if o is not None]

    def parallelism(self) -> int:
        """Tasks a group job may run at once: the executors' cores."""
        if not is_connect(self.spark):
            return max(1, int(self.spark.sparkContext.defaultParallelism))
        # Over Spark Connect there is no SparkContext here: the server's setting (set for a
        # local master by default_conf), else two tasks.
        value = self.spark.conf.get("spark.default.parallelism", None)
        return max(1, int(value)) if value else 2

    def _commit_staged(
        self,
        batch: Batch,
        schema: TableSchema,
        delta: DeltaTable,
        output: Path,
        spark_seconds: float,
        rules: TableRules,
    ) -> LoadResult:
        """Publish a batch's staged files into its table and commit them with its transaction;
        files published by a commit that did not land are removed again.

        The commit is made against ``delta``'s version, where ``rules`` were read and the
        batch checked: delta-rs refuses it if another writer changed the table's protocol or
        metadata since (``TableChanged``), so no rule added meanwhile is bypassed.
        """
        table, seq = batch.table, batch.last_seq
        path = self.table_path(table)
        published: list[Path] = []
        committed = False
        try:
            started = time.perf_counter()
            actions, rows = self._publish(output, path, schema, published)
            moved = time.perf_counter()
            failpoints.hit("load.after-publish")
            with committing(rules):
                delta.create_write_transaction(
                    list[AddAction | RemoveAction](actions),
                    "append",
                    delta.schema(),
                    partition_by=list(schema.partition_by) or None,
                    commit_properties=load_commit(table, seq, batch.updates[-1].release),
                )
            committed = True
            done = time.perf_counter()
            failpoints.hit("load.after-commit")
        finally:
            if not committed:
                self._unpublish(table, seq, published)
        # create_write_transaction does not refresh this handle; one writer per table, so
        # the newest version is this commit.
        delta.update_incremental()
        return LoadResult(
            table,
            seq,
            rows=rows,
            delta_version=delta.version(),
            files_written=len(actions),
            bytes_written=sum(a.size for a in actions),
            details={
                "spark_seconds": spark_seconds,
                "publish_seconds": moved - started,
                "commit_seconds": done - moved,
            },
        )

    def _unpublish(self, table: str, seq: int, files: list[Path]) -> None:
        """Delete moved files after a failed commit, unless the commit did land after all."""
        if not files:
            return
        try:
            if self.committed_seq(table) >= seq:
                return
        except Exception:  # cannot tell: leave the files to vacuum rather than risk the table
            log.exception("could not check whether the commit of %s seq %d landed", table, seq)
            return
        for file in files:
            file.unlink(missing_ok=True)
