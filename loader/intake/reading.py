"""A submit request's body read into checked updates against a table's schema: the steps that
need nothing but the body, the schema and the limits.

Why apart from ``loader.intake.submission``: they are the costly, stateless part of intake,
and the service runs them in two places. ``Intake.submit_one`` and ``submit_many`` call them
on the event loop (or the parse thread), and so do the acceptor processes
(api/acceptors/process.py), which hand the service the checked columns only. One code
path means both accept exactly the same bodies with exactly the same values.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from loader.core.schema import TableSchema
from loader.intake.columnar import reads_as_columns
from loader.intake.columnar_bodies import is_columnar, parse_columnar
from loader.intake.inference import nested_columns, unknown_fields
from loader.intake.requests import UpdateRequest, ValidUpdate, columns_fit, parse_single
from loader.intake.rows import rows_to_arrow

#: Bodies from this size up are parsed on a thread (below it, the hop costs more than it frees).
PARSE_THREAD_BYTES = 64 << 10
#: The one thread that parses them: it frees the event loop's core; more would each keep a
#: heap of pyarrow's allocator (mimalloc) of their own.
_PARSER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-parse")


def _released(read: Callable[[], UpdateRequest]) -> UpdateRequest:
    """``read()``, then what pyarrow's allocator (mimalloc) holds of its reader's scratch
    buffers given back (about 1 µs): kept, they grew the service by 30 MiB in a 96 MiB burst
    of 400 KB bodies, against 14 MiB when rows were read by Python (tests/system/test_spill_e2e.py)."""
    try:
        return read()
    finally:
        pa.default_memory_pool().release_unused()


async def read_single(
    body: bytes,
    content_type: str | None,
    table: str,
    data_until: str | None,
    schema: TableSchema,
    new_fields: str,
    max_body_bytes: int,
) -> UpdateRequest:
    """The body of ``POST /v1/tables/{table}/updates`` parsed: rows, checked columns or files.

    A large body that pyarrow reads is read off the event loop: its readers let go of the
    GIL, so one request's rows are read on the other core while the loop serves the rest.
    (Rows read by Python hold the GIL: on a thread they only cost the hop, 30% of a nested
    0.5 MB body's intake.)
    """
    read: Callable[[], UpdateRequest]
    if is_columnar(content_type):  # Arrow IPC or Parquet: checked columns (columnar_bodies.py)
        read = functools.partial(
            parse_columnar, body, content_type, table, data_until, schema, new_fields, max_body_bytes
        )
        by_pyarrow = True
    else:
        columnar = schema if columns_fit(body, schema, max_body_bytes) else None
        by_pyarrow = columnar is not None and reads_as_columns(body, schema)
        read = functools.partial(parse_single, body, content_type, table, data_until, schema.exact_numbers, columnar)
    if by_pyarrow and len(body) >= PARSE_THREAD_BYTES:
        return await asyncio.get_running_loop().run_in_executor(_PARSER, _released, read)
    return read()


def changed_by_feed(request: UpdateRequest, schema: TableSchema, policy: str) -> bool:
    """Whether the table's ``on_new_fields`` policy has anything to do with this update's rows
    (``Intake.fields_from_feed``): a field the table lacks, or a nested column whose new
    struct fields it would add or drop. Only rows read by Python can bring one: checked
    columns were read with the table's schema."""
    if policy == "reject" or not request.rows:
        return False
    return bool(nested_columns(schema)) or bool(unknown_fields(request.rows, frozenset(schema.names)))


def checked(request: UpdateRequest, schema: TableSchema) -> ValidUpdate:
    """One update of rows checked against its table's schema (422 naming the row and column),
    as an Arrow table. An update of landing files is ``Intake``'s to check: it owns the files."""
    if request.columns is not None:
        return ValidUpdate(request.table, request.data_until, rows=request.columns)
    assert request.rows is not None, "an update of landing files"
    return ValidUpdate(request.table, request.data_until, rows=rows_to_arrow(request.rows, schema, request.table))


class StaleSchema(Exception):
    """The schema (or ``on_new_fields``) an update was checked against is no longer its table's."""


@dataclass(frozen=True, slots=True)
class CheckedUpdate:
    """An update an acceptor checked: its rows as one Arrow IPC record batch message (no
    schema message: the service has the schema), and what it was checked against."""

    table: str
    data_until: float | None
    fingerprint: str
    message: bytes | memoryview


_CHECKED_AGAINST: dict[int, tuple[TableSchema, str, pa.Schema]] = {}


def checked_against(schema: TableSchema, policy: str) -> tuple[str, pa.Schema]:
    """What an acceptor checks an update against, as the service can compare it (the schema's
    JSON digest and the table's ``on_new_fields``), and the schema's Arrow form. Cached by
    the schema object: a table's schema object is replaced, never changed, when its columns
    change (and hashing a schema, as ``TableSchema.arrow``'s cache does, costs 5 µs)."""
    cached = _CHECKED_AGAINST.get(id(schema))
    if cached is None or cached[0] is not schema:
        if len(_CHECKED_AGAINST) >= 4096:
            _CHECKED_AGAINST.clear()
        digest = hashlib.sha256(schema.model_dump_json().encode()).hexdigest()[:32]
        cached = _CHECKED_AGAINST[id(schema)] = (schema, digest, schema.arrow())
    return f"{cached[1]}:{policy}", cached[2]


def batch_message(rows: pa.Table) -> bytes | None:
    """The rows as one record batch's IPC message; None when they are no single batch."""
    batches = rows.to_batches()
    if len(batches) != 1:
        batches = rows.combine_chunks().to_batches()
    return batches[0].serialize().to_pybytes() if len(batches) == 1 else None
