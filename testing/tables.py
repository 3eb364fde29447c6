"""Read a Delta table back the three ways users do: deltalake, DuckDB and Spark.

Spark has no Delta reader here (no Delta JVM jars) and DuckDB's ``delta`` extension is
downloaded at first use (no network), so both read exactly the Parquet files that the
Delta log lists: what a Delta reader would read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.fs as pa_fs
from deltalake import DeltaTable

from loader.core.schema import TableSchema


def read_delta(path: Path) -> pa.Table:
    """The table through deltalake, reading files with pyarrow's local filesystem.

    ``to_pyarrow_table()`` with deltalake's own filesystem handler makes the interpreter
    abort at exit ("terminate called without an active exception", deltalake 1.6.6), which
    would turn a green pytest run into exit code 134.
    """
    fs = pa_fs.SubTreeFileSystem(str(path.resolve()), pa_fs.LocalFileSystem())
    return DeltaTable(str(path)).to_pyarrow_table(filesystem=fs)


def read_duckdb(path: Path) -> pa.Table:
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    uris = DeltaTable(str(path)).file_uris()
    return con.read_parquet(uris, hive_partitioning=True).to_arrow_table()


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
