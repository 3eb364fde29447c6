"""A join view's delta computed by a Spark job: the MJoin pipelines over one view load's
worth of input changes (the ``spark`` view engine, docs/join-views.md "Where the work runs").

The delta rule: when a view load moves inputs R_1..R_n from their old states to their new
ones, V(new) - V(old) = sum over k of  ΔR_k ⋈ (R_j new, j < k) ⋈ (R_j old, j > k),  with
ΔR_k = R_k(new) - R_k(old) as a signed multiset: insertions +1, deletions -1 (section 3.1
of Babu et al.; a latest table's upsert is a delete and an insert, a window's expiry a
deletion). Term k runs input k's MJoin pipeline: ΔR_k joined with the other inputs in
that pipeline's order, each step on every predicate between what is joined and the next
input (Spark keeps the order given: cost-based join reordering is off by default). The
terms are summed by output row into (row, change of copies), the view's delta, which the
loader commits with its MERGE (``view_delta.py``), as it does the driver engine's.

Every state is a set of the Delta table's Parquet files, listed by the loader from the
inputs' logs (``loader/loading/views/commits.py``): a whole input's state at a version is
its snapshot's files, a seconds window's the files its versions added. Files are immutable,
so ΔR_k is read as the files of the new state missing from the old (+1) and those of the
old missing from the new (-1). Executors read them where they lie: the warehouse is where
every load writes, so the job runs on a cluster as it does locally.

Join values compare null-safe (``<=>``): a null matches a null, as in the driver engine,
so both engines keep the same view.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pyarrow as pa

from loader.core.schema import TableSchema
from loader.loading.sinks.frame import escape_glob, spark_struct
from loader.loading.spark import sql_functions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: The sign of a delta row, and the change of copies in the job's answer.
SIGN = "__loader_sign"


@dataclass(frozen=True)
class JobInput:
    """One input of the view (an alias over a table) as the job reads it."""

    alias: str
    #: The input table's directory (partition values are read from the paths under it).
    table_path: str
    schema: TableSchema
    #: Parquet files of its state before the load and after it.
    old: tuple[str, ...]
    new: tuple[str, ...]

    @property
    def added(self) -> tuple[str, ...]:
        old = set(self.old)
        return tuple(f for f in self.new if f not in old)

    @property
    def removed(self) -> tuple[str, ...]:
        new = set(self.new)
        return tuple(f for f in self.old if f not in new)


@dataclass(frozen=True)
class ViewJob:
    """Everything the job needs: plain data, pickled to a load worker process."""

    view: str
    inputs: tuple[JobInput, ...]
    #: Per join attribute, the (input, column) pairs it equates (``JoinGraph.attributes``).
    attributes: tuple[tuple[tuple[int, str], ...], ...]
    #: Each input's MJoin pipeline order (section 3.1).
    orders: tuple[tuple[int, ...], ...]
    #: (input, column, output name), in the view's order.
    outputs: tuple[tuple[int, str, str], ...]
    #: The answer's column holding each row's change of copies.
    count_column: str


def _name(k: int, column: str) -> str:
    return f"i{k}_{column}"


def _read(spark: SparkSession, F: ModuleType, item: JobInput, k: int, files: tuple[str, ...]) -> DataFrame:  # noqa: N803
    struct = spark_struct(item.schema)
    if files:
        reader = spark.read.schema(struct)
        if item.schema.partition_by:
            reader = reader.option("basePath", item.table_path)
        frame = reader.parquet(*[escape_glob(f) for f in files])
    else:
        frame = spark.createDataFrame([], struct)
    return frame.select(*[F.col(f"`{c}`").alias(_name(k, c)) for c in item.schema.names])


def _on(F: ModuleType, job: ViewJob, joined: set[int], j: int) -> Column:  # noqa: N803
    """Every predicate between the inputs joined so far and input j (one per attribute they share)."""
    conditions = []
    for members in job.attributes:
        mine = [(i, c) for i, c in members if i in joined]
        theirs = [(i, c) for i, c in members if i == j]
        if mine and theirs:
            conditions.append(F.col(_name(*mine[0])).eqNullSafe(F.col(_name(*theirs[0]))))
    if not conditions:  # pipelines.check_orders refuses such an order; never a cross product
        raise ValueError(f"view {job.view!r}: input {j} joins nothing before it in a pipeline")
    return functools.reduce(lambda a, b: a & b, conditions)


def view_delta_frame(spark: SparkSession, job: ViewJob) -> DataFrame | None:
    """The job's DataFrame: (outputs, change of copies) for rows whose copies change; None
    when no input changed."""
    F = sql_functions(spark)  # noqa: N806
    old = [_read(spark, F, item, k, item.old) for k, item in enumerate(job.inputs)]
    new = [old[k] if item.new == item.old else _read(spark, F, item, k, item.new) for k, item in enumerate(job.inputs)]
    terms = []
    for k, item in enumerate(job.inputs):
        added, removed = item.added, item.removed
        if not added and not removed:
            continue
        parts = [
            _read(spark, F, item, k, files).withColumn(SIGN, F.lit(sign))
            for files, sign in ((added, 1), (removed, -1))
            if files
        ]
        term = functools.reduce(lambda a, b: a.unionByName(b), parts)
        joined = {k}
        for j in job.orders[k]:
            term = term.join(new[j] if j < k else old[j], on=_on(F, job, joined, j), how="inner")
            joined.add(j)
        terms.append(term.select(*[F.col(_name(i, c)).alias(name) for i, c, name in job.outputs], F.col(SIGN)))
    if not terms:
        return None
    names = [name for _, _, name in job.outputs]
    union = functools.reduce(lambda a, b: a.unionByName(b), terms)
    summed = union.groupBy(*[F.col(f"`{n}`") for n in names]).agg(F.sum(SIGN).cast("long").alias(job.count_column))
    return summed.where(F.col(job.count_column) != 0)


def run_view_job(spark: SparkSession, job: ViewJob) -> pa.Table:
    """Run the job (one Spark action); its answer comes back as Arrow: the load's changes,
    which the loader commits (module docstring)."""
    frame = view_delta_frame(spark, job)
    if frame is None:
        fields = [pa.field(name, pa.null()) for _, _, name in job.outputs]
        return pa.table({f.name: pa.array([], f.type) for f in [*fields, pa.field(job.count_column, pa.int64())]})
    return frame.toArrow()


def write_answer(table: pa.Table, path: Path) -> None:
    """A worker's answer for the service (Arrow IPC: typed, and read back without copying)."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_answer(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as source:  # read into memory: the file goes after
        return pa.ipc.open_file(source).read_all()
