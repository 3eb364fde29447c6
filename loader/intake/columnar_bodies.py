"""Request bodies that carry columns: an Arrow IPC stream or a Parquet file, read into the
table's exact Arrow schema (``UpdateRequest.columns``) or refused.

Why a reader of its own rather than rows: a producer that already holds columns (a pyarrow
Table, a DataFrame) would otherwise turn every value into JSON text and the service turn
it back; here a stream whose types are the table's is taken without converting a value.
What is still checked is what every other path checks, by the same code:

- **Arrow IPC stream** (``application/vnd.apache.arrow.stream``): its schema must be the
  table's, checked on the schema message alone before any batch is read: every column's
  type equal to the table's (nested types: the same struct fields and leaf types; the
  names Arrow gives a list's element and a map's entries are not compared; a column of
  Arrow's null type, nulls only, fits any), a mismatch a 422 naming the column and both
  types. Nullability is decided by the values, not the schema: a nullable field may go into
  a NOT NULL column when it holds no null (pyarrow calls every field nullable unless told
  otherwise), and a null is refused naming its row.
  A dictionary-encoded column is a type mismatch (send it decoded): a dictionary is how a
  small body asks for a large table.
- **Parquet** (``application/vnd.apache.parquet``, also ``application/x-parquet``): the rules
  of a Parquet landing file (loader/intake/file_types.py): exact conversions (integer
  widths, timestamp units, large strings...) or a 422 naming the column and both types.

Both: a column the body lacks is null (refused in a NOT NULL column), values must lie in
their type's domain (``conform``: dates and timestamps in years 1 to 9999, decimals within
their precision, nested values' nullability), partition values must make directories
(``check_partition_values``); NaN and infinities in float columns are taken, as from a
landing file. An unknown column is refused, or dropped for a table whose
``on_new_fields`` is ``ignore``; ``add`` does not infer new columns from a columnar body
(their types would be the producer's Arrow types, not declared ones): the 422 says so.

Bombs: the body is bounded by ``max_body_bytes``, but what it decodes to is not (a
compressed IPC buffer, a Parquet file declaring a billion rows, a dictionary of one long
string repeated). What a body may decode to is bounded as a JSON request's rows are
(``EXPANSION`` x ``max_body_bytes``, requests.py), checked on what the body declares before
anything is decoded (a Parquet footer's row count times the row's width and its row
groups' uncompressed sizes; the uncompressed length of each compressed IPC buffer: pyarrow
would allocate it unasked), and again on what was read, chunk by chunk: Parquet text,
top-level or inside a nested column, is read as dictionaries and measured from its
dictionary before it is decoded: 413. An uncompressed IPC stream is read without a copy, so
it takes the body's own bytes. What no check here reaches, as for a Parquet landing file: a
page whose header declares more than the footer does, and a list whose elements a few
bytes of run-length levels make into millions (a chunk's rows are decoded before they are
measured, CHUNK_ROWS at a time).
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loader.core.errors import BadRequest, Invalid, TooLarge
from loader.core.schema import TableSchema
from loader.intake.file_types import Unloadable, _shape_difference, _shown, _types_in, conform, is_nested
from loader.intake.requests import (
    EXPANSION,
    UpdateRequest,
    _data_until,
    _maybe_number,
    _media_type,
    _width,
    expansion_limit,
)
from loader.intake.rows import RESEND, check_partition_values

ARROW_STREAM = "application/vnd.apache.arrow.stream"
PARQUET = "application/vnd.apache.parquet"
#: The media types of columnar bodies (``application/x-parquet``: what several tools send).
COLUMNAR_TYPES = (ARROW_STREAM, PARQUET, "application/x-parquet")
#: Rows of a Parquet body decoded at a time: what one chunk may cost before it is measured.
CHUNK_ROWS = 8192


def is_columnar(content_type: str | None) -> bool:
    return _media_type(content_type) in COLUMNAR_TYPES


def parse_columnar(
    body: bytes,
    content_type: str | None,
    table: str,
    data_until_param: str | None,
    schema: TableSchema,
    new_fields: str,
    max_body_bytes: int,
) -> UpdateRequest:
    """A columnar body of ``POST /v1/tables/{table}/updates`` as an update of checked columns;
    BadRequest (unreadable), Invalid (columns or values), TooLarge (what it decodes to)."""
    until = _data_until(_maybe_number(data_until_param)) if data_until_param is not None else None
    limit = expansion_limit(max_body_bytes)
    arrow = _media_type(content_type) == ARROW_STREAM
    try:
        if arrow:
            columns = _from_stream(body, schema, table, new_fields, limit)
        else:
            columns = _from_parquet(body, schema, table, new_fields, limit)
    except UnicodeDecodeError:  # (pyarrow decodes a schema's names when they are asked for)
        raise BadRequest(
            f"the request body's {'Arrow' if arrow else 'Parquet'} schema names a column or field in bytes that are "
            "not UTF-8 text; name them in UTF-8"
        ) from None
    if columns.num_rows == 0:
        raise Invalid(f"update for table {table!r} has no rows; send at least one row", table=table)
    if schema.partition_by:
        check_partition_values(columns, schema, f"table {table!r}")
    return UpdateRequest(table=table, rows=None, files=None, data_until=until, columns=columns)


# -- the columns a body names ---------------------------------------------------------------------------


def _kept_columns(names: list[str], schema: TableSchema, table: str, new_fields: str, what: str) -> list[str]:
    """The body's columns the table takes; Invalid for an unknown one (unless ``ignore``), a
    repeated one, or a NOT NULL column the body lacks."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise Invalid(f"{what} holds column {name[:60]!r} twice; send each column once; {RESEND}", column=name[:60])
        seen.add(name)
    known = set(schema.names)
    unknown = [n for n in names if n not in known]
    if unknown and new_fields != "ignore":
        how = (
            "a table declared with on_new_fields = \"add\" adds new fields from JSON rows only (a columnar body's "
            "types are its writer's, not declared ones): send the rows with the new field as JSON, or add the "
            f"column first (PATCH /v1/admin/tables/{table}/schema)"
            if new_fields == "add"
            else "send only the table's columns (a table declared with on_new_fields = \"ignore\" drops others)"
        )
        raise Invalid(
            f"{what} has unknown column {unknown[0][:60]!r}; the columns of table {table!r} are {schema.names[:50]}; "
            f"{how}; {RESEND}",
            table=table,
            column=unknown[0][:60],
        )
    for column in schema.columns:
        if not column.nullable and column.name not in seen:
            raise Invalid(
                f"{what} lacks column {column.name!r}, which is required (not nullable) in table {table!r}; "
                f"{RESEND}",
                table=table,
                column=column.name,
            )
    kept = [n for n in names if n in known]
    if not kept:
        raise Invalid(
            f"{what} holds none of the columns of table {table!r} ({schema.names[:50]}); {RESEND}", table=table
        )
    return kept


def _check_nulls(columns: pa.Table, schema: TableSchema, table: str) -> None:
    for column in schema.columns:
        values = columns.column(column.name)
        if not column.nullable and values.null_count:
            row = pc.index(pc.is_null(values), True).as_py()
            raise Invalid(
                f"row {row} of table {table!r}: column {column.name!r} is required (not nullable) but null; {RESEND}",
                table=table,
                row=row,
                column=column.name,
            )


def _conformed(chunk: pa.Table, arrow: pa.Schema, table: str, what: str, first_row: int) -> pa.Table:
    """``conform`` (file_types.py): the table's columns, each value in its type's domain."""
    try:
        return conform(chunk, arrow, text=False, first_row=first_row)
    except Unloadable as exc:
        details = {"row": exc.row} if exc.row is not None else {}
        raise Invalid(
            f"{what} cannot be loaded into table {table!r}: {exc}; {RESEND}", table=table, column=exc.column, **details
        ) from None
    except (pa.ArrowException, ValueError) as exc:  # (a value no check above names: still the body's)
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise Invalid(f"{what} cannot be loaded into table {table!r}: {reason}; {RESEND}", table=table) from None


def _too_large(what: str, size: int, limit: int, table: str) -> TooLarge:
    return TooLarge(
        f"{what} would take {size:,} bytes of memory decoded, more than the limit of {limit:,} bytes "
        f"({EXPANSION} x max_body_bytes); send fewer rows per request",
        table=table,
    )


# -- Arrow IPC streams -------------------------------------------------------------------------------------


def _unreadable(exc: BaseException) -> BadRequest:
    reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return BadRequest(
        f"the request body is not a readable Arrow IPC stream ({reason}); send the stream format "
        "(pyarrow.ipc.new_stream), not the file format, whole"
    )


def _from_stream(body: bytes, schema: TableSchema, table: str, new_fields: str, limit: int) -> pa.Table:
    arrow = schema.arrow()
    what = "the Arrow stream"
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(body))
        first = reader.read_next_message()
        if first.type != "schema":
            raise pa.ArrowInvalid(f"it starts with a {first.type} message, not its schema")
        stream = pa.ipc.read_schema(first)
    except StopIteration:
        raise BadRequest("the request body is an empty Arrow IPC stream; send the stream with its schema") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        if body.startswith(b"ARROW1"):
            raise BadRequest(
                "the request body is in the Arrow IPC file format (it starts with ARROW1); send the stream format "
                "(pyarrow.ipc.new_stream) as application/vnd.apache.arrow.stream"
            ) from None
        raise _unreadable(exc) from None
    kept = _kept_columns(stream.names, schema, table, new_fields, what)
    for name in kept:
        source, target = stream.field(name).type, arrow.field(name).type
        if pa.types.is_null(source):
            continue  # nulls only (pandas' type for an empty object column): taken as a file's are
        difference = _shape_difference(source, target, name) if is_nested(target) else None
        if difference is not None or (not is_nested(target) and source != target):
            where = f" ({difference.replace(' in the file', ' in the stream')[:300]})" if difference else ""
            shown = str(target) if is_nested(target) else _shown(target)
            raise Invalid(
                f"column {name!r} is {str(source)[:200]} in the Arrow stream but {shown[:200]} in table "
                f"{table!r}{where}; send the table's Arrow types (cast the column to {str(target)[:200]}; "
                f"dictionary-encoded columns decoded); {RESEND}",
                table=table,
                column=name,
            )
    batches: list[pa.RecordBatch] = []
    decoded = 0
    try:
        for message in reader:
            if message.type == "dictionary":  # (a dictionary batch: of a column the table drops)
                raise Invalid(
                    f"{what} holds a dictionary-encoded column, which the service does not decode (a dictionary is "
                    f"how a small body asks for a large table), also of a column table {table!r} drops; send every "
                    f"column decoded; {RESEND}",
                    table=table,
                )
            if message.type != "record batch":
                raise pa.ArrowInvalid(f"a {message.type} message where record batches were expected")
            decoded += _declared_bytes(message)
            if decoded > limit:
                raise _too_large(what, decoded, limit, table)
            batch = pa.ipc.read_record_batch(message, stream)
            batch.validate(full=True)  # offsets, UTF-8: a corrupt batch is the producer's, not a crash
            batches.append(batch)
    except (pa.ArrowException, OSError, ValueError, IndexError, struct.error) as exc:
        raise _unreadable(exc) from None
    data = pa.Table.from_batches(batches, schema=stream).select(kept)
    size = data.get_total_buffer_size()  # (buffers that overlap in the body each count in full)
    if size > limit:
        raise _too_large(what, size, limit, table)
    columns = _conformed(data, arrow, table, what, 0)
    _check_nulls(columns, schema, table)
    return columns


_U16, _U32, _I32, _I64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<q")


class _Flat:
    """Just enough of a flatbuffer to read an IPC message's header (format/Message.fbs):
    pyarrow decompresses a buffer into what its first 8 bytes declare, unasked."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def field(self, table: int, index: int) -> int | None:
        """Where field ``index`` of the table at ``table`` is, None when absent."""
        vtable = table - _I32.unpack_from(self.data, table)[0]
        entry = 4 + 2 * index
        if entry >= _U16.unpack_from(self.data, vtable)[0]:
            return None
        offset = _U16.unpack_from(self.data, vtable + entry)[0]
        return table + offset if offset else None

    def ref(self, at: int) -> int:
        return at + _U32.unpack_from(self.data, at)[0]


#: Message.header's union type of a record batch (format/Message.fbs).
_RECORD_BATCH = 3


def _declared_bytes(message: pa.ipc.Message) -> int:
    """What a record batch message's body decodes to: its own size when uncompressed (pyarrow
    then reads it without a copy), else the uncompressed lengths its buffers declare."""
    body = message.body
    size = body.size if body is not None else 0
    flat = _Flat(message.metadata.to_pybytes())
    root = flat.ref(0)
    kind_at, header_at = flat.field(root, 1), flat.field(root, 2)
    if kind_at is None or header_at is None:
        return size
    kind, batch = flat.data[kind_at], flat.ref(header_at)
    if kind != _RECORD_BATCH:
        return size
    if flat.field(batch, 3) is None or body is None:  # no BodyCompression: not compressed
        return size
    buffers_at = flat.field(batch, 2)
    if buffers_at is None:
        return size
    vector = flat.ref(buffers_at)
    count = _U32.unpack_from(flat.data, vector)[0]
    raw = body.to_pybytes()
    total = 0
    for k in range(count):
        offset, length = struct.unpack_from("<qq", flat.data, vector + 4 + 16 * k)
        if length < 8:
            continue  # an empty buffer
        if offset < 0 or offset + 8 > len(raw):
            raise ValueError(f"buffer {k} lies outside the message body")
        declared = _I64.unpack_from(raw, offset)[0]
        total += length - 8 if declared == -1 else max(declared, 0)  # -1: stored uncompressed
    return total


# -- Parquet -----------------------------------------------------------------------------------------------


def _from_parquet(body: bytes, schema: TableSchema, table: str, new_fields: str, limit: int) -> pa.Table:
    arrow = schema.arrow()
    what = "the Parquet body"
    try:
        probe = pq.ParquetFile(pa.BufferReader(body), coerce_int96_timestamp_unit="us")
        metadata, file_schema = probe.metadata, probe.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable_parquet(exc) from None
    kept = _kept_columns(file_schema.names, schema, table, new_fields, what)
    # Refused types are named from the footer, before a value is read.
    decoded = pa.schema([file_schema.field(n).with_type(_decoded_type(file_schema.field(n).type)) for n in kept])
    _conformed(decoded.empty_table(), arrow, table, what, 0)
    width = sum(_width(c.type) for c in schema.columns)
    declared = max(metadata.num_rows * width, _uncompressed(metadata))
    if declared > limit:
        raise _too_large(f"{what} ({metadata.num_rows:,} rows)", declared, limit, table)
    # Text leaves (top-level or inside a nested column) are read as dictionaries: a dictionary
    # the file encodes is measured before it is decoded (a plain column costs no more so).
    text = _text_leaves(metadata, kept)
    chunks: list[pa.Table] = []
    size = first_row = 0
    try:
        reader = pq.ParquetFile(pa.BufferReader(body), coerce_int96_timestamp_unit="us", read_dictionary=text)
        for batch in reader.iter_batches(batch_size=CHUNK_ROWS, columns=kept):
            size += sum(_decoded_size(column) for column in batch.columns)
            if size > limit:
                raise _too_large(what, size, limit, table)
            chunk = pa.Table.from_arrays(
                [column.cast(_decoded_type(column.type)) for column in batch.columns], names=batch.schema.names
            )
            chunks.append(_conformed(chunk, arrow, table, what, first_row))
            first_row += batch.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable_parquet(exc) from None
    columns = pa.concat_tables([arrow.empty_table(), *chunks])
    _check_nulls(columns, schema, table)
    return columns


def _unreadable_parquet(exc: BaseException) -> BadRequest:
    reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return BadRequest(f"the request body is not a readable Parquet file ({reason}); send a whole Parquet file")


def _uncompressed(metadata: pq.FileMetaData) -> int:
    """The uncompressed bytes the footer declares for its row groups.

    Not per column chunk: pyarrow 26 aborts the process (a C++ exception through a noexcept
    call, not a Python error) on ``RowGroupMetaData.column(i)`` of a chunk whose size
    statistics are malformed, which a body can hold; reading such a file raises OSError."""
    return sum(max(metadata.row_group(group).total_byte_size, 0) for group in range(metadata.num_row_groups))


def _text_leaves(metadata: pq.FileMetaData, kept: list[str]) -> list[str]:
    """The paths of the text (and plain bytes) leaves of the kept columns."""
    columns = metadata.schema
    paths = []
    for index in range(len(columns)):
        leaf = columns.column(index)
        top = leaf.path.split(".", 1)[0]  # (a table's column names hold no dot)
        if leaf.physical_type == "BYTE_ARRAY" and leaf.logical_type.type in ("STRING", "NONE") and top in kept:
            paths.append(leaf.path)
    return paths


def _has_dictionary(kind: pa.DataType) -> bool:
    return any(pa.types.is_dictionary(t) for t in _types_in(kind))


def _decoded_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every dictionary replaced by its values' type."""
    if pa.types.is_dictionary(kind):
        return kind.value_type
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_decoded_type(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(
            kind.key_field.with_type(_decoded_type(kind.key_type)),
            kind.item_field.with_type(_decoded_type(kind.item_type)),
        )
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_decoded_type(kind.value_type)))
    return kind


def _decoded_size(array: pa.Array) -> int:
    """The bytes ``array`` takes once its dictionaries are decoded, measured from each
    dictionary's value lengths without decoding (a slice counts only its own values)."""
    kind = array.type
    if not _has_dictionary(kind):
        return array.nbytes
    if pa.types.is_dictionary(kind):
        lengths = pc.take(pc.binary_length(array.dictionary), array.indices)
        return (pc.sum(lengths).as_py() or 0) + 4 * len(array) + array.indices.nbytes
    if pa.types.is_struct(kind):
        return (len(array) + 7) // 8 + sum(_decoded_size(array.field(k)) for k in range(kind.num_fields))
    # A list or a map: its offsets, and its values (a map's: its entries, a struct of key and value).
    if pa.types.is_map(kind):
        array = pa.ListArray.from_arrays(array.offsets, array.values)
    return 4 * (len(array) + 1) + _decoded_size(pc.list_flatten(array))
