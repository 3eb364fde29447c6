"""Read a Delta table back the three ways users do: deltalake, DuckDB and Spark.

Spark has no Delta reader here (no Delta JVM jars) and DuckDB's ``delta`` extension is
downloaded at first use (no network), so both read exactly the Parquet files that the
Delta log lists: what a Delta reader would read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
from deltalake import DeltaTable, QueryBuilder

from loader.core.schema import TableSchema
from loader.loading.sinks import deletion_vectors
from loader.loading.sinks.live_files import LiveFiles


def read_delta(path: Path) -> pa.Table:
    """The table through deltalake, reading files with pyarrow's local filesystem.

    ``to_pyarrow_table()`` with deltalake's own filesystem handler makes the interpreter
    abort at exit ("terminate called without an active exception", deltalake 1.6.6), which
    would turn a green pytest run into exit code 134.
    """
    delta = DeltaTable(str(path))
    if has_deletion_vectors(delta):  # (the pyarrow reader refuses them; the query engine applies them)
        return read_delta_query(delta)
    fs = pa_fs.SubTreeFileSystem(str(path.resolve()), pa_fs.LocalFileSystem())
    return delta.to_pyarrow_table(filesystem=fs)


def has_deletion_vectors(delta: DeltaTable) -> bool:
    return "deletionVectors" in (delta.protocol().reader_features or [])


def read_delta_query(delta: DeltaTable) -> pa.Table:
    """The table through deltalake's query engine (DataFusion), which applies deletion vectors."""
    return pa.table(QueryBuilder().register("t", delta).execute("SELECT * FROM t").read_all())


def read_duckdb(path: Path, version: int | None = None) -> pa.Table:
    """The table's files through DuckDB; a table with deletion vectors has each file's
    deleted rows left out by their position (``file_row_number``), as a Delta reader does."""
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    delta = DeltaTable(str(path), version=version)
    if not has_deletion_vectors(delta):
        return con.read_parquet(delta.file_uris(), hive_partitioning=True).to_arrow_table()
    live = LiveFiles(path)
    live.advance(delta.version())
    parts = []
    for name, file in live.files.items():
        rows = con.read_parquet(str(path / name), file_row_number=True).to_arrow_table()
        if file.dv is not None:
            gone = pa.array(sorted(deletion_vectors.read(path, file.dv)), pa.int64())
            rows = rows.filter(pc.invert(pc.is_in(rows.column("file_row_number"), gone)))
        parts.append(rows.drop_columns(["file_row_number"]))
    return pa.concat_tables(parts) if parts else read_delta_query(delta).schema.empty_table()


#: DuckDB's name of each column type.
DUCKDB_TYPES = {
    "string": "VARCHAR",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMPTZ",
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "binary": "BLOB",
    "timestamp_ntz": "TIMESTAMP",
}


def duckdb_type(declared: str) -> str:
    """DuckDB's name of a column type (a decimal's name is DuckDB's too)."""
    return declared.upper() if declared.startswith("decimal(") else DUCKDB_TYPES[declared]


def live_files(path: Path) -> dict[str, dict[str, str | None]]:
    """The data files the Delta log's JSON commits hold now (added, not removed), each with
    its partition values as the log writes them (strings). Tables with a checkpoint are
    not read here (tests make none)."""
    log = path / "_delta_log"
    if (log / "_last_checkpoint").exists():
        raise ValueError(f"{log} has a checkpoint, which this JSON-commit reader does not read; use read_delta")
    files: dict[str, dict[str, str | None]] = {}
    for commit in sorted(log.glob("*.json")):
        # (not splitlines: a partition value's U+2028 or U+0085 is written raw, inside a line)
        for line in commit.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                files[action["add"]["path"]] = action["add"].get("partitionValues") or {}
            elif "remove" in action:
                files.pop(action["remove"]["path"], None)
    return files


def read_duckdb_log(path: Path, schema: TableSchema) -> pa.Table:
    """The table through DuckDB as a Delta reader reads it, without the ``delta`` extension:
    the Parquet files the log lists, and each file's partition values taken from the log and
    cast by DuckDB to the table's types (``read_duckdb`` parses them from directory names,
    as text, which Spark escapes)."""
    files = live_files(path)
    partitions = list(schema.partition_by)
    kinds = {c.name: c.type.value for c in schema.columns}
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    if not files:
        return schema.arrow().empty_table()
    uris = {str(path.resolve() / unquote(p)): values for p, values in files.items()}
    listing = pa.table(
        {"__file": list(uris), **{name: [values.get(name) for values in uris.values()] for name in partitions}}
    )
    con.register("listing", listing)
    data_columns = ", ".join(f'd."{c.name}"' for c in schema.columns if c.name not in partitions)
    typed = "".join(f', CAST(l."{name}" AS {duckdb_type(kinds[name])}) AS "{name}"' for name in partitions)
    paths = ", ".join("'" + uri.replace("'", "''") + "'" for uri in uris)
    query = (
        f"SELECT {data_columns}{typed} FROM read_parquet([{paths}], filename = true, hive_partitioning = false) d "
        'JOIN listing l ON d.filename = l."__file"'
    )
    return con.sql(query).to_arrow_table().select(schema.names)


def read_spark(spark: Any, path: Path, schema: TableSchema) -> pa.Table:
    frame = (
        spark.read.schema(schema.spark_ddl().replace(" NOT NULL", ""))
        .option("basePath", str(path))
        .parquet(*DeltaTable(str(path)).file_uris())
    )
    return frame.toArrow()  # Arrow keeps timestamps tz-aware (collect() gives naive datetimes)


def canonical(table: pa.Table | list[dict[str, Any]], columns: list[str] | None = None) -> list[str]:
    """Rows as sorted JSON strings: equal lists mean the same rows, each as often."""
    rows = table.to_pylist() if isinstance(table, pa.Table) else table
    keep = columns or sorted({k for r in rows for k in r})
    return sorted(json.dumps({k: r.get(k) for k in keep}, sort_keys=True, default=str) for r in rows)


def loosened(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every nested field nullable: what a reader's nested values are cast to for
    comparing them (pyarrow's cast refuses a NOT NULL field's null child under a null parent,
    which is no value at all)."""
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, loosened(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(pa.field("key", loosened(kind.key_type), nullable=False), loosened(kind.item_type))
    if pa.types.is_list(kind):
        return pa.list_(pa.field("element", loosened(kind.value_type)))
    return kind


def loosened_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, loosened(f.type)) for f in schema])
