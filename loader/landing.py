"""Updates that name files in the landing directory instead of carrying rows.

Before the update is acknowledged each file is checked (inside the landing directory, a
regular file, readable as its format with the table's schema, read in bounded chunks)
and copied into storage the service owns (an in-kernel copy), then fsynced: after the
202 the producer may delete, rename over or rewrite its landing file in place without
affecting what gets loaded.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from loader.errors import BadRequest, Invalid
from loader.schema import TableSchema
from loader.updates import FileFormat, FileRef

#: Rows per chunk when a landing file is checked (bounded memory whatever the file's size).
CHUNK_ROWS = 65_536

_EXTENSIONS = {
    ".parquet": FileFormat.parquet,
    ".csv": FileFormat.csv,
    ".json": FileFormat.json,
    ".jsonl": FileFormat.json,
    ".ndjson": FileFormat.json,
}


def _format_of(path: Path, declared: str | None) -> FileFormat:
    if declared is not None:
        try:
            return FileFormat(declared)
        except ValueError:
            raise BadRequest(f"file format {declared!r} is not one of parquet, csv, json") from None
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise BadRequest(
            f"cannot tell the format of {path.name!r} from its extension; name it .parquet/.csv/.json "
            'or give {"path": ..., "format": ...}'
        )
    return fmt


def _conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.Table:
    """Columns by name as the table declares them: missing ones null, unknown ones an error."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    extra = [name for name in table.column_names if name not in schema.names]
    if extra:
        raise ValueError(f"unknown column {extra[0]!r}")
    for name in schema.names:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
    return table.select(schema.names).cast(schema)


def iter_landing_file(path: Path, fmt: FileFormat, schema: pa.Schema) -> Iterator[pa.Table]:
    """A landing file in bounded chunks, typed by the table (the rules Spark applies when loading).

    Streaming keeps a multi-gigabyte feed file from being held in the service's memory
    while intake checks it.
    """
    if fmt is FileFormat.parquet:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS):
            yield _conform(batch, schema)
        return
    if fmt is FileFormat.csv:
        options = pa_csv.ConvertOptions(column_types=schema, include_columns=schema.names, include_missing_columns=True)
        reader = pa_csv.open_csv(path, convert_options=options)
    else:
        parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        reader = pa_json.open_json(path, parse_options=parse)
    for batch in reader:
        yield _conform(batch, schema)


def read_landing_file(path: Path, fmt: FileFormat, schema: pa.Schema) -> pa.Table:
    """The whole file as one table (small files: tests and the Spark-free sink)."""
    return pa.concat_tables([schema.empty_table(), *iter_landing_file(path, fmt, schema)])


def _check_nulls(table: pa.Table, schema: TableSchema, name: str) -> None:
    for column in schema.columns:
        if not column.nullable and table.column(column.name).null_count:
            raise Invalid(f"file {name!r}: column {column.name!r} is required but has nulls", column=column.name)


def accept_files(specs: list[Any], landing: Path, owned: Path, schema: TableSchema, table: str) -> tuple[FileRef, ...]:
    """Validate every named file, then take ownership of all of them (or of none)."""
    if not specs:
        raise Invalid(f"update for table {table!r} names no files", table=table)
    root = landing.resolve()
    checked: list[tuple[Path, FileFormat]] = []
    for spec in specs:
        if isinstance(spec, str):
            raw, declared = spec, None
        elif isinstance(spec, dict) and isinstance(spec.get("path"), str) and set(spec) <= {"path", "format"}:
            raw, declared = spec["path"], spec.get("format")
        else:
            raise BadRequest('each entry of "files" is a path string or {"path": ..., "format": ...}')
        candidate = Path(raw)
        resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if not resolved.is_relative_to(root):
            raise BadRequest(f"file {raw!r} is outside the landing directory {root}; put feed files there first")
        if not resolved.is_file():
            raise BadRequest(f"file {raw!r} does not exist in the landing directory {root} (or is not a regular file)")
        fmt = _format_of(resolved, declared)
        try:
            for chunk in iter_landing_file(resolved, fmt, schema.arrow()):
                _check_nulls(chunk, schema, raw)
        except (pa.ArrowException, ValueError, OSError) as exc:
            raise Invalid(
                f"file {raw!r} does not match the schema of table {table!r}: {exc}", table=table, file=raw
            ) from None
        checked.append((resolved, fmt))
    owned.mkdir(parents=True, exist_ok=True)
    refs: list[FileRef] = []
    for resolved, fmt in checked:
        target = owned / f"{uuid.uuid4().hex}-{resolved.name}"
        # A copy, not a hard link: a link shares the producer's inode, so rewriting the
        # landing file in place after the 202 would change what gets loaded.
        shutil.copyfile(resolved, target)
        with open(target, "rb") as handle:
            os.fsync(handle.fileno())
        refs.append(FileRef(path=str(target), format=fmt, size=target.stat().st_size))
    directory = os.open(owned, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return tuple(refs)
