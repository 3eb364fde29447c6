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
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypeVar

from deltalake import DeltaTable, TableFeatures
from deltalake.transaction import AddAction, RemoveAction

from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.durability.transactions import app_id, load_commit, load_metadata
from loader.loading.sinks.add_actions import file_stats, log_path, partition_values
from loader.loading.sinks.base import load_each
from loader.loading.sinks.delta_table import (
    ENABLE_DELETION_VECTORS,
    STAGING_PREFIX,
    DeltaSinkBase,
    remove_staging,
    unloaded_part,
)
from loader.loading.sinks.frame import build_batch_frame
from loader.loading.sinks.group_job import GroupMember, describe, run_group_job
from loader.loading.sinks.log_cleanup import clean_expired, cleanup_enabled, retention_seconds
from loader.loading.sinks.log_commit import PLAIN_FEATURES, checkpoint_due, commit_next, log_entry
from loader.loading.sinks.table_rules import RuleChecks, TableRules, committing, opening
from loader.loading.sinks.upsert import ordered_rows, upsert_with_deltalake
from loader.loading.sinks.upsert_dv import KeyIndex
from loader.loading.spark import DEFAULT_LEAN, is_connect, lean_write_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Where Hadoop's FileOutputCommitter keeps task attempts under its output directory
#: (``_temporary/<application attempt, 0>/_temporary``); made by the loader with the
#: ``staging_dirs_premade`` lean change. Should the layout ever differ, Hadoop makes its
#: own directories as before: slower, never wrong.
COMMITTER_WORK_DIR = PurePosixPath("_temporary", "0", "_temporary")
#: Threads for a group job's per-table steps (``parallel_tables``): on 2 cores, 4 measured
#: 1.7x faster than one for deltalake's open-and-commit of 16 tables; more gain nothing there.
TABLE_THREADS = 4

Item = TypeVar("Item")
#: A group member ready for the job: the part of its batch not committed yet, its schema,
#: handle, staging directory, rules, descriptor and the seconds its preparation took.
Prepared = tuple[Batch, TableSchema, DeltaTable, Path, TableRules, GroupMember, float]
Outcome = TypeVar("Outcome")


class DeltaRsSink(DeltaSinkBase):
    """The embedded default (no Delta jars): one Spark job writes the batch's Parquet files
    into a staging directory, they are renamed into the table, and one ``deltalake`` commit
    adds them with the table's application transaction (see the module docstring)."""

    name = "delta-rs"

    def __init__(self, warehouse: Path, spark: SparkSession, lean: Iterable[str] = DEFAULT_LEAN) -> None:
        super().__init__(warehouse, spark, lean)
        #: Handles kept by the ``cached_table`` lean change, one per table (one load of a table at a time).
        self._handles: dict[str, DeltaTable] = {}
        #: With ``known_commits``: per table, the version its cached handle reached after this
        #: sink's own last commit, and that commit's application transaction version.
        self._known: dict[str, tuple[int, int]] = {}
        self.checks = RuleChecks(spark)
        #: Per latest table declared ``upsert = "deletion-vectors"``: what its upserts reuse.
        self._indexes: dict[str, KeyIndex] = {}
        #: A group job's per-table steps (``parallel_tables``), made at the first group job.
        self._table_pool: ThreadPoolExecutor | None = None

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        super().ensure_table(table, schema)
        self.cleanup(table)

    def cleanup(self, table: str) -> int:
        """Remove staging directories of crashed loads; only while no load of ``table`` runs."""
        self._handles.pop(table, None)
        self._known.pop(table, None)
        self._indexes.pop(table, None)
        return remove_staging(self.table_path(table))

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        table, seq = batch.table, batch.last_seq
        path = self.table_path(table)
        with opening(table):
            delta = self._current_table(table)
        todo = unloaded_part(batch, self._committed(table, delta))
        if todo is None:
            return LoadResult(table, seq, rows=0, delta_version=None, skipped=True)
        batch = todo
        rules = TableRules.read(table, delta)  # as of the version the commit is made against

        staging = path / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            if schema.latest:  # one upsert by key (loader/loading/sinks/upsert.py)
                index, rules = self._key_index(table, schema, delta, rules)
                result = upsert_with_deltalake(
                    self.spark, delta, batch, schema, staging / "in", rules, self.checks, index
                )
                if index is not None and result.delta_version is not None:  # a direct commit: its checkpoint
                    if checkpoint_due(result.delta_version, delta.metadata().configuration):
                        self._checkpoint(table, delta)
                return result
            refused = rules.refusal("append")
            if refused is not None:
                raise refused
            started, spark_start = time.perf_counter(), time.time()
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
            spark_marks = {"spark_start": spark_start, "spark_end": time.time()}
            failpoints.hit("load.after-spark-write")
            return self._commit_staged(batch, schema, delta, staging / "out", spark_seconds, rules, spark_marks)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _key_index(
        self, table: str, schema: TableSchema, delta: DeltaTable, rules: TableRules
    ) -> tuple[KeyIndex | None, TableRules]:
        """The table's ``KeyIndex`` when it is declared ``upsert = "deletion-vectors"`` (None:
        MERGE), and its rules as the load commits against them. A table without the feature yet
        (created before it was declared so) gets it, with the property that tells Delta writers
        to write deletion vectors, in one commit each (its rules then read again)."""
        if schema.upsert != "deletion-vectors":
            self._indexes.pop(table, None)
            return None, rules
        if "deletionVectors" not in rules.features or rules.deletion_vectors_enabled is None:
            # (a crash between the two commits leaves the feature without the property: unset, so
            # set here; a property someone set to false is theirs, and the load is refused)
            if "deletionVectors" not in rules.features:
                delta.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
            delta.alter.set_table_properties({ENABLE_DELETION_VECTORS: "true"})
            delta.update_incremental()
            self._known.pop(table, None)
            rules = TableRules.read(table, delta)
        index = self._indexes.get(table)
        if index is None or index.schema != schema:
            index = self._indexes[table] = KeyIndex(self.table_path(table), schema)
        return index, rules

    def _current_table(self, table: str) -> DeltaTable:
        """The table's deltalake handle at its newest version, from which the app transaction is read.

        With ``cached_table`` the handle of the last load is brought up to date (commits of
        maintenance included); one that cannot be is dropped and the table opened afresh.
        """
        path = str(self.table_path(table))
        if "cached_table" not in self.lean:
            return DeltaTable(path)
        delta = self._handles.pop(table, None)
        known = self._known.pop(table, None)
        if delta is not None and known is not None and "known_commits" in self.lean and known[0] == delta.version():
            # The log's versions are consecutive files: our own entry still there and none after
            # it, no commit after ours; anyone else's commit is that next file. (Log cleanup
            # removes old entries only, oldest first: once ours is gone, later ones may be too,
            # and the handle is brought up to date.)
            log_dir = self.table_path(table) / "_delta_log"
            if (log_dir / f"{known[0]:020d}.json").exists() and not (log_dir / f"{known[0] + 1:020d}.json").exists():
                self._handles[table] = delta
                self._known[table] = known
                return delta
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

    def _committed(self, table: str, delta: DeltaTable) -> int:
        """The last sequence number the table's log holds for this loader (its application
        transaction's version, read from the log unless this sink's own last commit says it:
        only the loader writes its transaction, so no later commit of anyone else changes it)."""
        known = self._known.get(table)
        if known is not None and known[0] == delta.version():
            return known[1]
        return delta.transaction_version(app_id(table)) or 0

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
        one Delta commit per table with that table's application transaction.

        A crash between two tables' commits leaves some committed (their transaction
        versions say so: the WAL replay skips them) and the others as a single-table crash
        would. Partitioned tables' batches are loaded by their own jobs, and so are those of
        tables with row rules (CHECK constraints, invariants, generated columns: checked with
        Spark SQL, which the group job's pyarrow tasks do not run); a table that refuses the
        write is refused here, before the job.

        The per-table steps (before the job: the handle brought up to date, the transaction
        and rules read, the batch described; after it: publish and commit) run on
        ``TABLE_THREADS`` threads with the ``parallel_tables`` lean change, one table after
        another without it. Each table's steps are its own: its handle, its staging
        directory, its commit; deltalake's Rust core releases the GIL while it reads and
        writes the log.
        """
        outcomes: list[LoadResult | BaseException | None] = [None] * len(batches)
        todo: list[tuple[int, *Prepared]] = []  # type: ignore[valid-type]
        for i, prepared in enumerate(self._each(self._prepare_member, list(zip(batches, schemas)))):
            if isinstance(prepared, tuple):
                todo.append((i, *prepared))
            else:  # an outcome already (skipped, refused, failed), or None: a job of its own
                outcomes[i] = prepared
        try:
            if todo:
                spark_start, started = time.time(), time.perf_counter()
                written = run_group_job(self.spark, [entry[6] for entry in todo], self.parallelism())
                spark_seconds = time.perf_counter() - started
                spark_marks = {"spark_start": spark_start, "spark_end": time.time()}
                failpoints.hit("load.after-spark-write")

                def commit(position: int) -> LoadResult | BaseException:
                    i, part, schema, delta, staging, rules, _, prepared = todo[position]
                    outcome = written[position]
                    if outcome.error is not None:
                        return RuntimeError(f"loading {part.table} in a group job failed: {outcome.error}")
                    try:
                        began = time.perf_counter()
                        result = self._commit_staged(
                            part, schema, delta, staging / "out", spark_seconds, rules, spark_marks
                        )
                        own = prepared + outcome.seconds + (time.perf_counter() - began)
                        return dataclasses.replace(result, own_seconds=own)
                    except Exception as exc:  # this table's commit; the others stand
                        return exc
                    finally:  # on the table's own thread (the ``finally`` below finds it gone)
                        shutil.rmtree(staging, ignore_errors=True)

                # The first table alone, then the others (on the table threads): a crash
                # between commits has a first table committed and the others not.
                done = [commit(0)]
                if len(todo) > 1:
                    failpoints.hit("load.group.between-commits")
                    done += self._each(commit, list(range(1, len(todo))))
                for entry, outcome in zip(todo, done):
                    outcomes[entry[0]] = outcome
        finally:  # what a failed job (or a failed commit step) left
            for entry in todo:
                shutil.rmtree(entry[4], ignore_errors=True)
        alone = [i for i, outcome in enumerate(outcomes) if outcome is None]  # partitioned, latest, rules: own jobs
        for i, outcome in zip(alone, load_each(self, [batches[i] for i in alone], [schemas[i] for i in alone])):
            outcomes[i] = outcome
        return [o for o in outcomes if o is not None]

    def _prepare_member(self, item: tuple[Batch, TableSchema]) -> LoadResult | BaseException | None | Prepared:
        """A group member before the job: its outcome already (skipped, refused, failed), None
        for a job of its own, or what the job and its commit need (the part of the batch not
        committed yet, its handle, staging directory, rules, descriptor and the seconds of this).
        Never raises: on the table threads a raise would end the others' preparation unseen."""
        try:
            return self._prepare(*item)
        except Exception as exc:
            return exc

    def _prepare(self, batch: Batch, schema: TableSchema) -> LoadResult | BaseException | None | Prepared:
        if schema.partition_by or schema.latest:  # jobs of their own (an upsert is not an append)
            return None
        began = time.perf_counter()
        with opening(batch.table):
            delta = self._current_table(batch.table)
        part = unloaded_part(batch, self._committed(batch.table, delta))
        rules = TableRules.read(batch.table, delta)  # (a failure: the table's outcome, _prepare_member)
        if part is None:
            return LoadResult(batch.table, batch.last_seq, rows=0, delta_version=None, skipped=True)
        refused = rules.refusal("append")
        if refused is not None:
            return refused
        if rules.row_rules:  # a job of its own, which checks them with Spark SQL
            return None
        staging = self.table_path(batch.table) / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            member = describe(part, schema, staging)
        except Exception as exc:  # e.g. a null in a NOT NULL column: this table's outcome
            shutil.rmtree(staging, ignore_errors=True)
            return exc
        return part, schema, delta, staging, rules, member, time.perf_counter() - began

    def _each(self, step: Callable[[Item], Outcome], items: list[Item]) -> list[Outcome]:
        """``step`` over ``items`` in order: on the table threads with ``parallel_tables``."""
        if "parallel_tables" not in self.lean or len(items) < 2:
            return [step(item) for item in items]
        if self._table_pool is None:
            self._table_pool = ThreadPoolExecutor(TABLE_THREADS, thread_name_prefix="table")
        return list(self._table_pool.map(step, items))

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
        marks: dict[str, float] | None = None,
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
        stamps = dict(marks or {})
        try:
            started = time.perf_counter()
            stamps["publish_start"] = time.time()
            actions, rows = self._publish(output, path, schema, published)
            moved = time.perf_counter()
            stamps["commit_start"] = time.time()
            failpoints.hit("load.after-publish")
            ours = delta.version() + 1  # the version a direct commit takes
            direct = self._direct_commit(table, delta, rules, actions, seq, batch.updates[-1].release, rows)
            if not direct:
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
            stamps["commit_end"] = time.time()
            failpoints.hit("load.after-commit")
        finally:
            if not committed:
                self._unpublish(table, seq, published)
        # create_write_transaction does not refresh this handle; one writer per table, so
        # the newest version is this commit.
        delta.update_incremental()
        if direct and checkpoint_due(ours, delta.metadata().configuration):
            self._checkpoint(table, delta)
        if "known_commits" in self.lean and self._handles.get(table) is delta:
            self._known[table] = (delta.version(), seq)
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
            marks=stamps,
        )

    def _direct_commit(
        self,
        table: str,
        delta: DeltaTable,
        rules: TableRules,
        actions: list[AddAction],
        seq: int,
        data_until: float,
        rows: int,
    ) -> bool:
        """The append as the next log entry itself (loader/loading/sinks/log_commit.py), for a
        plain table with ``direct_commit``; False when that is not for this table or another
        writer took the version first (then deltalake commits, and its checks decide)."""
        if "direct_commit" not in self.lean or not rules.features <= PLAIN_FEATURES:
            return False
        entry = log_entry(actions, app_id(table), seq, load_metadata(data_until), rows)
        return commit_next(self.table_path(table), delta.version() + 1, entry)  # (``ours`` above)

    def _checkpoint(self, table: str, delta: DeltaTable) -> None:
        """What deltalake's post-commit hook does at a checkpoint version: the checkpoint, then
        the expired log files cleaned (unless the table turns that off). A failure here leaves
        the commit as it is: the log is whole without a checkpoint, only slower to read."""
        try:
            delta.create_checkpoint()
            configuration = delta.metadata().configuration
            retention = retention_seconds(configuration)
            # (not deltalake's cleanup_metadata: log_cleanup.py says why)
            if cleanup_enabled(configuration) and retention is not None:
                clean_expired(self.table_path(table) / "_delta_log", retention, delta.version())
        except Exception:
            log.warning("could not write a checkpoint of %s at version %d", table, delta.version(), exc_info=True)

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
