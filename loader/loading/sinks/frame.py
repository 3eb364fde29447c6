"""One Spark DataFrame per batch: its in-memory rows plus its landing files, typed by the table.

Both writer paths append exactly this frame, so a table reads the same whichever wrote
it. Files are read with the table's explicit schema (never inferred, so no extra Spark
job) and matched to columns by name, as intake validated them (loader/intake/landing.py).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from loader.core.evolution import conform_rows
from loader.core.schema import Array, ColumnType, DataTypeValue, Map, Primitive, Struct, TableSchema
from loader.core.schema import Column as Column_
from loader.core.updates import Batch, FileFormat, FileRef, SpilledRows
from loader.loading.spark import DEFAULT_LEAN, sql_functions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

#: Batches up to this size are written by one task as one file (per partition value).
TARGET_FILE_BYTES = 128 << 20
#: In-memory rows up to this many Arrow bytes reach Spark inline (the ``inline_small_rows``
#: lean change); larger ones as a Parquet file that executors read.
INLINE_ROWS_MAX_BYTES = 1 << 20

#: Intake's pyarrow CSV null markers (its defaults), applied to non-string columns here too.
CSV_NULLS = tuple(pa_csv.ConvertOptions().null_values)

_GLOB = re.compile(r"([\\*?\[\]{}])")


def spark_struct(schema: TableSchema) -> StructType:
    """The table's Spark schema with every column nullable.

    NOT NULL is checked by :func:`_checked` instead: Spark folds ``isNull`` on a
    non-nullable column to false, which would let a null slip through unchecked.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = schema.arrow()
    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in arrow]), prefer_timestamp_ntz=True)


def arrow_frame(spark: SparkSession, rows: pa.Table, struct: StructType) -> DataFrame:
    """``rows`` as a Spark frame sent inline, every column in one chunk layout first: pyspark's
    ``createDataFrame`` silently drops rows of a table whose columns are chunked differently
    (a column appended to concatenated tables: 3 rows in, 1 out, pyspark 4), and the tables
    the loader hands it are built that way."""
    return spark.createDataFrame(rows.combine_chunks(), schema=struct)


def escape_glob(path: str) -> str:
    """Spark expands glob characters in paths; a landing file named ``a[1].csv`` is literal."""
    return _GLOB.sub(r"\\\1", path)


def nullable_ddl(schema: TableSchema) -> str:
    """The table's columns as a Spark DDL string, every column nullable (see ``spark_struct``).

    Handed to the reader as text, the schema is one py4j call; a ``StructType`` is two plus
    its JSON. Column names are plain identifiers (loader/core/schema.py checks them).
    """
    return ", ".join(f"`{c.name}` {c.type.spark}" for c in schema.columns)


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string expression that parses the same whatever the parser's
    settings (``escapedStringLiterals``, ANSI double-quoted identifiers): quotes and
    backslashes become ``char()`` calls, folded to constants by the optimizer."""
    pieces = [f"char({ord(p)})" if p in ("'", "\\") else f"'{p}'" for p in re.split(r"(['\\])", text) if p]
    return pieces[0] if len(pieces) == 1 else f"concat({', '.join(pieces)})"


def _rows_frame(
    spark: SparkSession, tables: Sequence[pa.Table], schema: TableSchema, scratch: Path, lean: frozenset[str]
) -> DataFrame:
    """In-memory rows, handed to Spark as a Parquet file that executors read, or inline.

    ``createDataFrame(arrow)`` serializes the rows in this process and sends them to the
    driver, which ships them inside the tasks: for a large batch that holds the GIL and
    the driver's memory while the service's request handler waits. pyarrow writes the
    file with the GIL released, and Spark's executors (in the JVM) do the reading. A
    small batch (``inline_small_rows``) goes inline all the same: a file costs it more
    (a listing, the Hadoop configuration broadcast to the reader, a Parquet reader) than
    its few kilobytes cost to send.
    """
    data = pa.concat_tables([conform_rows(t, schema) for t in tables])
    if "inline_small_rows" in lean and data.nbytes <= INLINE_ROWS_MAX_BYTES:
        return arrow_frame(spark, data, spark_struct(schema))
    scratch.mkdir(parents=True, exist_ok=True)
    written = scratch / "rows.parquet"
    pq.write_table(data, written, compression="none")
    path = escape_glob(str(written))
    if "few_round_trips" in lean:
        return spark.read.format("parquet").schema(nullable_ddl(schema)).load(path)
    return spark.read.schema(spark_struct(schema)).parquet(path)


def _spill_segments(refs: Sequence[SpilledRows]) -> tuple[list[str], list[pa.Table]]:
    """Spill segments the batch holds whole (read in place by Spark, written with the
    table's schema), and the rows of ones it holds only in part (after a restart's
    trimming, ``unloaded_part``), read here."""
    by_path: dict[str, list[SpilledRows]] = defaultdict(list)
    for ref in refs:
        by_path[ref.path].append(ref)
    whole: list[str] = []
    partial: list[pa.Table] = []
    for path, parts in by_path.items():
        if sum(r.rows for r in parts) == parts[0].segment_rows:
            whole.append(path)
        else:
            data = pq.read_table(path)
            partial.extend(data.slice(r.offset, r.rows) for r in parts)
    return whole, partial


def _csv_header(path: str) -> tuple[str, ...]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return tuple(next(csv.reader(handle), []))


def _from_csv_text(F: ModuleType, name: str, kind: DataType) -> Column:  # noqa: N803
    """A CSV field (read as text) converted the way intake's pyarrow reader converts it.

    Strings: empty is "" (never null). Other types: pyarrow's null markers are null,
    anything else must parse; a value that does not fails the job, ANSI mode or not.
    ``F``: the session's ``functions`` (loader.loading.spark.sql_functions).
    """
    from pyspark.sql.types import StringType

    raw = F.col(name)
    if isinstance(kind, StringType):
        return F.coalesce(raw, F.lit("")).alias(name)
    parsed = raw.cast(kind)
    bad = F.raise_error(F.concat(F.lit(f"CSV column {name!r}: cannot read "), raw, F.lit(f" as {kind.simpleString()}")))
    converted = F.when(parsed.isNull(), bad.cast(kind)).otherwise(parsed)
    return F.when(raw.isNull() | raw.isin(*CSV_NULLS), F.lit(None).cast(kind)).otherwise(converted).alias(name)


def _csv_frames(spark: SparkSession, files: Sequence[FileRef], schema: TableSchema) -> list[DataFrame]:
    """CSV files, one read per distinct header: columns by name, missing null, extras dropped."""
    F = sql_functions(spark)
    from pyspark.sql.types import StringType, StructField, StructType

    struct = spark_struct(schema)
    by_header: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for ref in files:
        by_header[_csv_header(ref.path)].append(ref.path)
    frames = []
    for header, paths in by_header.items():
        # Every field as text, bound by position (enforceSchema) to names taken from the
        # header itself; only exact-case names are table columns, as for pyarrow.
        fields = [StructField(n if n in struct.names else f"_extra_{i}", StringType()) for i, n in enumerate(header)]
        df = (
            spark.read.schema(StructType(fields))
            .options(header="true", enforceSchema="true", mode="FAILFAST")
            .csv([escape_glob(p) for p in paths])
        )
        frames.append(
            df.select(
                [
                    _from_csv_text(F, f.name, f.dataType)
                    if f.name in header
                    else F.lit(None).cast(f.dataType).alias(f.name)
                    for f in struct
                ]
            )
        )
    return frames


def _nanos_columns(path: str, names: Sequence[str]) -> frozenset[str]:
    """Columns stored as TIMESTAMP(NANOS) (pandas' default), which Spark reads only as longs."""
    parquet = pq.read_metadata(path).schema
    found = set()
    for i in range(len(parquet)):
        column = parquet.column(i)
        if column.path in names and column.logical_type.type == "TIMESTAMP":
            if json.loads(column.logical_type.to_json()).get("timeUnit") == "nanoseconds":
                found.add(column.path)
    return frozenset(found)


def _parquet_frames(spark: SparkSession, files: Sequence[FileRef], schema: TableSchema) -> list[DataFrame]:
    """Parquet files, columns by name; nanosecond timestamps (whole µs, intake checked) to µs."""
    F = sql_functions(spark)
    from pyspark.sql.types import LongType, StructField, StructType

    struct = spark_struct(schema)
    groups: dict[frozenset[str], list[str]] = defaultdict(list)
    for ref in files:
        groups[_nanos_columns(ref.path, struct.names)].append(escape_glob(ref.path))
    frames = []
    for nanos, paths in groups.items():
        if not nanos:
            frames.append(spark.read.schema(struct).parquet(*paths))
            continue
        read = StructType([StructField(f.name, LongType()) if f.name in nanos else f for f in struct])
        df = spark.read.schema(read).parquet(*paths)
        frames.append(
            df.select(
                [
                    F.timestamp_micros(F.expr(f"`{f.name}` div 1000")).alias(f.name)
                    if f.name in nanos
                    else F.col(f.name)
                    for f in struct
                ]
            )
        )
    return frames


def _files_frames(spark: SparkSession, files: Sequence[FileRef], schema: TableSchema) -> list[DataFrame]:
    frames = []
    parquet = [f for f in files if f.format is FileFormat.parquet]
    if parquet:
        frames.extend(_parquet_frames(spark, parquet, schema))
    json_files = [escape_glob(f.path) for f in files if f.format is FileFormat.json]
    if json_files:
        frames.append(spark.read.schema(spark_struct(schema)).option("mode", "FAILFAST").json(json_files))
    csv_files = [f for f in files if f.format is FileFormat.csv]
    if csv_files:
        frames.extend(_csv_frames(spark, csv_files, schema))
    return frames


# -- nested nullability ---------------------------------------------------------------------------
# Spark reads every nested field of a file as nullable, and writes its files as its frame's
# schema says: a NOT NULL struct field, a containsNull=false array or a valueContainsNull=false
# map would be written as nullable, and deltalake's reader (pyarrow) then refuses to cast such a
# file's struct field to the table's NOT NULL one where the struct is null. So a nested column
# is rebuilt in SQL with the table's nullability at every level: each NOT NULL part as
# ``coalesce(part, <a literal of its type>)`` (the literal stands only where the part's parent is
# null, which intake checked: a NOT NULL part of a present parent is never null).

_ZERO: dict[ColumnType, str] = {
    ColumnType.string: "''",
    ColumnType.binary: "X''",
    ColumnType.int8: "0Y",
    ColumnType.int16: "0S",
    ColumnType.int32: "0",
    ColumnType.int64: "0L",
    ColumnType.float32: "CAST(0 AS FLOAT)",
    ColumnType.float64: "CAST(0 AS DOUBLE)",
    ColumnType.boolean: "false",
    ColumnType.date: "DATE '1970-01-01'",
    ColumnType.timestamp: "TIMESTAMP_LTZ '1970-01-01 00:00:00Z'",
    ColumnType.timestamp_ntz: "TIMESTAMP_NTZ '1970-01-01 00:00:00'",
}


def _zero(kind: DataTypeValue) -> str:
    """A non-null literal expression of exactly ``kind`` (Spark's nullability of a cast that
    cannot fail is its operand's)."""
    if isinstance(kind, Primitive):
        if kind.kind is not ColumnType.decimal:
            return _ZERO[kind.kind]
        if kind.precision == kind.scale:  # 0.000 is decimal(3,3) as it is
            return "0." + "0" * (kind.scale or 0)
        return f"CAST(0BD AS DECIMAL({kind.precision},{kind.scale}))"
    if isinstance(kind, Struct):
        return "named_struct(" + ", ".join(f"'{f.name}', {_zero(f.type)}" for f in kind.fields) + ")"
    # An empty array or map of non-null elements (so that the coalesce's type keeps the part's
    # own containsNull, which Spark's DDL cannot say): one zero element, filtered away.
    if isinstance(kind, Array):
        return f"filter(array({_zero(kind.element)}), z -> false)"
    return f"map_filter(map({_zero(kind.key)}, {_zero(kind.value_type)}), (zk, zv) -> false)"


def _strict_parts(kind: DataTypeValue) -> bool:
    """Whether ``kind`` holds a NOT NULL part (a field, elements, values)."""
    if isinstance(kind, Struct):
        return any(not f.nullable or _strict_parts(f.type) for f in kind.fields)
    if isinstance(kind, Array):
        return not kind.contains_null or _strict_parts(kind.element)
    if isinstance(kind, Map):
        return not kind.value_contains_null or _strict_parts(kind.value_type)
    return False


def strict_sql(expr: str, kind: DataTypeValue, nullable: bool, depth: int = 0) -> str:
    """``expr`` (a value of ``kind``) with ``kind``'s nullability at every level."""
    if isinstance(kind, Struct):
        fields = ", ".join(
            f"'{f.name}', {strict_sql(f'{expr}.`{f.name}`', f.type, f.nullable, depth + 1)}" for f in kind.fields
        )
        built = f"named_struct({fields})"  # (never null itself)
        return f"CASE WHEN {expr} IS NULL THEN NULL ELSE {built} END" if nullable else built
    if isinstance(kind, Array):
        x = f"x{depth}"
        built = f"transform({expr}, {x} -> {strict_sql(x, kind.element, kind.contains_null, depth + 1)})"
    elif isinstance(kind, Map):
        k, v = f"k{depth}", f"v{depth}"
        inner = strict_sql(v, kind.value_type, kind.value_contains_null, depth + 1)
        built = f"transform_values({expr}, ({k}, {v}) -> {inner})"
    else:
        built = expr
    return built if nullable else f"coalesce({built}, {_zero(kind)})"


def _column_sql(column: Column_) -> str:
    """A column as the batch's frame selects it: a nested one with the table's nullability."""
    name = f"`{column.name}`"
    if column.type.primitive or not _strict_parts(column.type):
        return name
    return f"{strict_sql(name, column.type, nullable=True)} AS {name}"


def _checked_sql(schema: TableSchema) -> list[str]:
    """``_checked`` as SQL expressions, for one ``selectExpr`` call (a Column per column
    costs py4j round trips per function call)."""
    out = []
    for column in schema.columns:
        name = f"`{column.name}`"
        if column.nullable:
            out.append(_column_sql(column))
            continue
        message = _sql_string(f"column {column.name!r} is NOT NULL but a row of this batch holds null")
        value = _column_sql(column).rpartition(" AS ")[0] or name
        out.append(f"CASE WHEN {name} IS NULL THEN raise_error({message}) ELSE {value} END AS {name}")
    return out


def _checked(F: ModuleType, schema: TableSchema) -> list[Column]:  # noqa: N803
    """Columns in table order; a null in a NOT NULL column fails the job (nothing is committed)."""

    out = []
    for column in schema.columns:
        strict = _column_sql(column)
        col = F.col(column.name) if strict.startswith("`") else F.expr(strict.rpartition(" AS ")[0])
        if not column.nullable:
            message = F.lit(f"column {column.name!r} is NOT NULL but a row of this batch holds null")
            col = F.when(col.isNull(), F.raise_error(message)).otherwise(col)
        out.append(col.alias(column.name))
    return out


def build_batch_frame(
    spark: SparkSession,
    batch: Batch,
    schema: TableSchema,
    scratch: Path,
    target_file_bytes: int = TARGET_FILE_BYTES,
    lean: frozenset[str] = DEFAULT_LEAN,
) -> DataFrame:
    """The batch as one lazily evaluated DataFrame; no row of a large batch passes through the driver.

    ``scratch`` is a directory (that executors can read) for the batch's in-memory rows;
    the caller removes it once the frame has been written. ``lean`` names the lean changes
    (loader/loading/spark.py) followed: ``few_round_trips`` builds the same plan from SQL
    text, ``inline_small_rows`` sends a small batch's rows without a file.
    """
    frames: list[DataFrame] = []
    whole, partial = _spill_segments(batch.spilled)
    tables = batch.row_tables + partial
    if tables or not (batch.files or whole):  # a batch without payload still advances the sequence
        frames.append(_rows_frame(spark, tables or [schema.arrow().empty_table()], schema, scratch, lean))
    if whole:
        frames.append(spark.read.schema(spark_struct(schema)).parquet(*[escape_glob(p) for p in whole]))
    frames.extend(_files_frames(spark, batch.files, schema))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    # Coalesce never shuffles: small batches become one task writing one file.
    files = max(1, math.ceil(batch.nbytes / target_file_bytes))
    if "few_round_trips" in lean:
        # One statement whatever the number of columns (selectExpr pays a round trip per
        # expression); the frame is a temporary view under a random name for its duration.
        query = f"SELECT /*+ COALESCE({files}) */ {', '.join(_checked_sql(schema))} FROM {{batch}}"
        return spark.sql(query, batch=df)
    return df.select(_checked(sql_functions(spark), schema)).coalesce(files)
