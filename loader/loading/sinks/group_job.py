"""One Spark job that writes several tables' batches: a small DataFrame of batch descriptors,
one row per table, mapped by executors that each write their tables' Parquet files.

Why not one DataFrame write per table: a Spark write costs about the same fixed 0.15-0.2 s
whatever its size (BENCHMARKS.md, "Per-batch cost"), and Spark has no write of several
outputs with different schemas in one job. A job over descriptors does: it pays job
start, planning and task launch once, and its tasks (``min(tables, parallelism)`` of
them, no shuffle) write each table's batch where that table's single-table load would
have written it, ``<table>/.staging-<uuid>/out/``. The driver then publishes and commits
each table on its own, with its own application transaction (loader/loading/sinks/delta_rs.py),
so crash safety per table is the single-table load's.

What executors read and write. A descriptor names the batch's inputs: the in-memory rows
(written by the driver as one Parquet file, as for a single-table load), spill segments
(slices by offset) and landing files. Executors read them with pyarrow by the rules intake
checked them with (``loader.intake.landing.iter_landing_file``: columns by name, missing
ones null, nanosecond timestamps to microseconds), which are the rules the Spark reader of
``frame.py`` was made to follow, and write one Parquet file per table shaped like Spark's
(every column nullable, timestamps as TIMESTAMP_MICROS UTC, Snappy), so a table reads the
same whichever path loaded a batch (tests/loading/sinks/test_group_job.py). A table's
failure (a NOT NULL column holding null, an unreadable file) is that table's outcome; the
job and the other tables go on.

Only unpartitioned tables go through here; a partitioned table's batch is loaded by its
own Spark job (the hive directory naming of partition values is Spark's to produce).
The executors import this module, so a cluster's Python workers need the loader package
(the Docker image has it; ``spark.pyspark.python`` points at this interpreter locally).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.evolution import conform_rows
from loader.core.schema import TableSchema
from loader.core.updates import Batch, FileFormat

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The answer of one task per table, as the job's result rows.
RESULT_SCHEMA = "table string, rows long, files long, error string, seconds double"


@dataclass(frozen=True)
class SpillSlice:
    path: str
    offset: int
    rows: int
    whole: bool


@dataclass(frozen=True)
class GroupMember:
    """One table's batch as a job descriptor: plain data, serialised to executors as JSON."""

    table: str
    schema_json: str
    output: str
    rows_file: str | None = None
    spilled: list[SpillSlice] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)  # (path, format)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> GroupMember:
        raw = json.loads(text)
        raw["spilled"] = [SpillSlice(**s) for s in raw["spilled"]]
        raw["files"] = [tuple(f) for f in raw["files"]]
        return cls(**raw)


@dataclass(frozen=True)
class MemberOutcome:
    table: str
    rows: int
    files: int
    error: str | None
    #: Wall seconds the executor spent on this table (reading its inputs, writing its file).
    seconds: float = 0.0


def describe(batch: Batch, schema: TableSchema, staging: Path) -> GroupMember:
    """The batch's descriptor; its in-memory rows are written to ``staging/in`` here (pyarrow,
    GIL released), as a single-table load hands them to Spark."""
    arrow = schema.arrow()
    rows_file: str | None = None
    tables = batch.row_tables
    if tables or not (batch.files or batch.spilled):  # a batch without payload still commits
        data = pa.concat_tables([conform_rows(t, schema) for t in tables] or [arrow.empty_table()])
        (staging / "in").mkdir(parents=True, exist_ok=True)
        rows_file = str(staging / "in" / "rows.parquet")
        pq.write_table(data, rows_file, compression="none")
    by_path: dict[str, list[tuple[int, int, int]]] = {}
    for ref in batch.spilled:
        by_path.setdefault(ref.path, []).append((ref.offset, ref.rows, ref.segment_rows))
    spilled: list[SpillSlice] = []
    for path, parts in by_path.items():
        if sum(p[1] for p in parts) == parts[0][2]:
            spilled.append(SpillSlice(path, 0, parts[0][2], True))
        else:
            spilled.extend(SpillSlice(path, offset, rows, False) for offset, rows, _ in parts)
    return GroupMember(
        table=batch.table,
        schema_json=schema.model_dump_json(),
        output=str(staging / "out"),
        rows_file=rows_file,
        spilled=spilled,
        files=[(f.path, f.format.value) for f in batch.files],
    )


def _spark_shaped(schema: TableSchema) -> pa.Schema:
    """The file schema Spark writes: the table's columns, every one nullable (NOT NULL is
    checked on the data, as ``frame._checked`` does)."""
    return pa.schema([f.with_nullable(True) for f in schema.arrow()])


def _chunks(member: GroupMember, schema: TableSchema) -> Iterator[pa.Table]:
    from loader.intake.landing import iter_landing_file

    arrow = schema.arrow()
    if member.rows_file is not None:
        yield pq.read_table(member.rows_file).cast(arrow)
    for piece in member.spilled:
        data = conform_rows(pq.read_table(piece.path), schema)  # (written under an earlier schema, maybe)
        yield data if piece.whole else data.slice(piece.offset, piece.rows)
    for path, fmt in member.files:
        yield from iter_landing_file(Path(path), FileFormat(fmt), arrow)


def write_member(member: GroupMember) -> MemberOutcome:
    """Executor side: the table's batch as one Parquet file in its staging output directory."""
    started = time.perf_counter()
    schema = TableSchema.model_validate_json(member.schema_json)
    file_schema = _spark_shaped(schema)
    required = [c.name for c in schema.columns if not c.nullable]
    out = Path(member.output)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    rows = 0
    try:
        with pq.ParquetWriter(target, file_schema, compression="snappy", coerce_timestamps="us") as writer:
            for chunk in _chunks(member, schema):
                for name in required:
                    if chunk.column(name).null_count:
                        raise ValueError(f"column {name!r} is NOT NULL but a row of this batch holds null")
                writer.write_table(chunk.cast(file_schema))
                rows += chunk.num_rows
    except Exception as exc:  # the table's outcome, reported to the driver; the job goes on
        target.unlink(missing_ok=True)
        return MemberOutcome(member.table, 0, 0, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
    return MemberOutcome(member.table, rows, 1, None, time.perf_counter() - started)


def _write_partition(batches: Iterator[pa.RecordBatch], members: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the task's descriptor indexes in, one outcome row per table out."""
    for batch in batches:
        outcomes = [write_member(GroupMember.from_json(members[i])) for i in batch.column(0).to_pylist()]
        yield pa.RecordBatch.from_pylist(
            [asdict(o) for o in outcomes],
            schema=pa.schema(
                [
                    ("table", pa.string()),
                    ("rows", pa.int64()),
                    ("files", pa.int64()),
                    ("error", pa.string()),
                    ("seconds", pa.float64()),
                ]
            ),
        )


def run_group_job(spark: SparkSession, members: Sequence[GroupMember], parallelism: int) -> list[MemberOutcome]:
    """One Spark job writing every member's batch; outcomes in the members' order.

    The descriptors travel inside the task closure (a few hundred bytes per table); the
    DataFrame is only their indexes, split into ``parallelism`` tasks without a shuffle.
    """
    encoded = [m.to_json() for m in members]
    slices = max(1, min(len(members), parallelism))

    def body(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_partition(batches, encoded)

    frame = spark.range(0, len(members), 1, slices).mapInArrow(body, RESULT_SCHEMA)
    by_table = {row["table"]: row for row in frame.collect()}
    outcomes = []
    for member in members:
        row = by_table.get(member.table)
        if row is None:
            outcomes.append(MemberOutcome(member.table, 0, 0, "the group job returned no outcome for this table"))
        else:
            outcomes.append(MemberOutcome(row["table"], row["rows"], row["files"], row["error"], row["seconds"]))
    return outcomes
