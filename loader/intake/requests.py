"""Parse and validate request bodies into update requests, before anything is accepted.

Bodies are parsed here rather than by FastAPI's model binding because the contract
needs 400 for malformed JSON (FastAPI answers 422), NDJSON bodies, and 422 messages
that name the first bad row and column. Validation is all-or-nothing: the caller gets
either every update of the request ready for the WAL, or an error and no side effect.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from loader.core.errors import BadRequest, Invalid, NotFound, TooLarge, Unsupported
from loader.core.schema import Array, ColumnType, DataTypeValue, Map, Primitive, Struct, TableSchema, check_name
from loader.core.updates import MAX_RECORD_BYTES
from loader.intake.columnar import read_json_rows, read_ndjson, reads_as_columns
from loader.intake.rows import QUOTE_CHARS, _Bad, parse_timestamp, quote

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl", "application/json-lines")


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """One update as the producer sent it: ``rows`` not yet checked against the schema, or
    ``columns``, rows a columnar reader has already checked and typed as the table's Arrow
    schema (loader/intake/columnar_bodies.py), which validation takes as they are."""

    table: str
    rows: list[Any] | None
    files: list[Any] | None
    data_until: float | None
    columns: pa.Table | None = None


@dataclass(slots=True)
class ValidUpdate:
    """An update whose payload passed validation, waiting for its sequence number."""

    table: str
    data_until: float | None
    rows: pa.Table | None = None
    files: tuple[Any, ...] = ()
    #: The rows as one Arrow IPC record batch message, when they came so (an acceptor's,
    #: api/acceptors/): the WAL writes these bytes rather than encoding the rows again.
    message: bytes | None = None

    @property
    def resident_bytes(self) -> int:
        """What the update will hold in the pending store's memory (its rows)."""
        return self.rows.get_total_buffer_size() if self.rows is not None else 0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (use null for a missing value)")


#: Python's parser also takes NaN, Infinity and -Infinity, which JSON (RFC 8259) has not.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
#: For a table with decimal columns: every number with a fraction or an exponent as the
#: Decimal of its text, so that a decimal column's value never passes through a float (the
#: other columns' converters take a Decimal as the float it would have parsed to).
_EXACT_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=decimal.Decimal)
#: Escapes that decide whether a surrogate escape is paired: an escaped backslash (so that
#: ``\\ud800`` is read as a backslash and text, not as an escape) and a surrogate escape.
_ESCAPE_TOKENS = re.compile(r"\\\\|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ANY_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def has_lone_surrogate_escape(text: str) -> bool:
    """Whether the (decoded) JSON text holds a ``\\uD800``-``\\uDBFF`` escape not directly
    followed by a ``\\uDC00``-``\\uDFFF`` one, or the reverse: a lone surrogate, which is not Unicode.

    Paired escapes (how ASCII-only encoders such as Python's ``json.dumps`` write emoji) are
    plain text, so only documents that hold a lone one pay for ``_lone_surrogate``'s walk.
    The scan reads escapes left to right, as the parser does, so an escaped backslash
    before ``u`` is not mistaken for the start of an escape.
    """
    if _ANY_SURROGATE_ESCAPE.search(text) is None:
        return False
    high_end = -1  # where the last unpaired high surrogate escape ended
    for token in _ESCAPE_TOKENS.finditer(text):
        start, escape = token.start(), token.group()
        if high_end >= 0 and start != high_end:
            return True  # the high half was followed by something other than an escape
        if escape == "\\\\":
            if high_end >= 0:
                return True
            continue
        if escape[3] in "cdefCDEF":  # a low half
            if high_end < 0:
                return True
            high_end = -1
        elif high_end >= 0:
            return True  # two high halves in a row
        else:
            high_end = token.end()
    return high_end >= 0


def _lone_surrogate(document: Any) -> str | None:
    """The first string (or key) holding an unpaired surrogate, found without recursion.

    The parser joins escaped pairs into one character, so any surrogate left is unpaired;
    such a string cannot be encoded as UTF-8 (Arrow, the WAL and every response would fail).
    """
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return ascii(item)[:QUOTE_CHARS]
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def loads_json(text: bytes, what: str, exact: bool = False) -> Any:
    """Strict JSON: UTF-8 (or UTF-16/32 with its BOM, as RFC 8259 readers accept), no NaN or
    Infinity, no unpaired surrogate escapes; BadRequest naming the problem otherwise."""
    try:
        decoded = text.decode(json.detect_encoding(text))
        document = (_EXACT_DECODER if exact else _DECODER).decode(decoded)
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"{what} is not valid JSON: bytes {exc.start}..{exc.end} are not valid {exc.encoding}; send UTF-8 JSON"
        ) from None
    except RecursionError:
        raise BadRequest(f"{what} is not valid JSON: it is nested too deeply; send UTF-8 JSON") from None
    except ValueError as exc:
        reason = str(exc)
        if "integer string conversion" in reason:  # Python's 4300-digit cap on int literals
            reason = "a number has more digits than any column type can hold"
        raise BadRequest(f"{what} is not valid JSON: {reason}; send UTF-8 JSON") from None
    if has_lone_surrogate_escape(decoded):
        bad = _lone_surrogate(document)
        if bad is not None:
            raise BadRequest(
                f"{what} is not valid JSON text: the string {bad} holds an unpaired UTF-16 surrogate escape, "
                "which is not a Unicode character; send UTF-8 JSON with valid characters"
            )
    return document


def check_table_name(name: Any, where: str = "") -> str:
    """404 for a table name that no table can have (path traversal, NUL, too long, not a
    string), without quoting more of it than QUOTE_CHARS characters."""
    if isinstance(name, str):
        try:
            return check_name(name, "table name")
        except ValueError:
            pass
    raise NotFound(
        f"{where}table {quote(name)} does not exist: table names are letters, digits and underscores (at most "
        "128); register a table with POST /v1/admin/tables"
    )


def _data_until(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, decimal.Decimal):  # parsed exactly for a decimal column
        value = float(value)
    try:
        moment = parse_timestamp(value)
    except _Bad as exc:
        raise Invalid(f"data_until: {exc}") from None
    return moment.timestamp()


def _update_from_object(obj: Any, table: str | None, where: str) -> UpdateRequest:
    if not isinstance(obj, dict):
        raise Invalid(
            f'{where} must be a JSON object such as {{"rows": [...]}} or {{"files": [...]}}, not {quote(obj)}'
        )
    allowed = {"rows", "files", "data_until"} | ({"table"} if table is None else set())
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise Invalid(f"{where} has unknown field {unknown[0]!r}; allowed fields are {sorted(allowed)}")
    if table is None:
        table = obj.get("table")
        if not isinstance(table, str):
            raise Invalid(f'{where} needs "table": the name of the table the update is for')
        check_table_name(table, f"{where}: ")
    has_rows, has_files = "rows" in obj, "files" in obj
    if has_rows == has_files:
        raise Invalid(f'{where} must hold exactly one of "rows" (a list of objects) or "files" (a list of paths)')
    payload = obj["rows"] if has_rows else obj["files"]
    if not isinstance(payload, list):
        what = "of objects, one per row" if has_rows else "of paths in the landing directory"
        raise Invalid(f'{where}: "{"rows" if has_rows else "files"}" must be a JSON list {what}')
    if has_files and not payload:
        # Accepted, an update with neither rows nor files would fail every load of its table.
        raise Invalid(f'{where}: "files" names no files; name at least one')
    return UpdateRequest(
        table=table,
        rows=payload if has_rows else None,
        files=payload if has_files else None,
        data_until=_data_until(obj.get("data_until")),
    )


def _media_type(content_type: str | None) -> str:
    return (content_type or "application/json").split(";")[0].strip().lower()


def parse_single(
    body: bytes,
    content_type: str | None,
    table: str,
    data_until_param: str | None,
    exact: bool = False,
    schema: TableSchema | None = None,
) -> UpdateRequest:
    """Body of POST /v1/tables/{table}/updates: JSON object or NDJSON rows; ``exact``: numbers
    with a fraction as Decimals (the table has decimal columns). With the table's ``schema``,
    NDJSON rows are read as columns where they can be (loader/intake/columnar.py)."""
    media = _media_type(content_type)
    if media in NDJSON_TYPES:
        columns = read_ndjson(body, schema, table) if schema is not None and reads_as_columns(body, schema) else None
        rows = None
        if columns is None:
            rows = []
            for number, line in enumerate(body.splitlines(), start=1):
                if line.strip():
                    rows.append(loads_json(line, f"NDJSON line {number}", exact))
        until = _data_until(_maybe_number(data_until_param)) if data_until_param is not None else None
        return UpdateRequest(table=table, rows=rows, files=None, data_until=until, columns=columns)
    if media != "application/json":
        raise Unsupported(
            f"content type {media!r} is not supported; use application/json, application/x-ndjson, "
            "application/vnd.apache.arrow.stream or application/vnd.apache.parquet"
        )
    columns = read_json_rows(body, schema, table) if schema is not None and reads_as_columns(body, schema) else None
    if columns is not None:
        request = UpdateRequest(table=table, rows=None, files=None, data_until=None, columns=columns)
    else:
        request = _update_from_object(loads_json(body, "request body", exact), table, "request body")
    if data_until_param is not None:
        if request.data_until is not None:
            raise Invalid("data_until given both as a query parameter and in the body; give it once")
        request = dataclasses.replace(request, data_until=_data_until(_maybe_number(data_until_param)))
    return request


def parse_multi(body: bytes, content_type: str | None, exact: bool = False) -> list[UpdateRequest]:
    """Body of POST /v1/updates: {"updates": [{"table": ..., "rows"|"files": ...}, ...]}; ``exact``
    as for ``parse_single`` (the tables are known only once the body is parsed: the caller
    parses it again, exactly, when one of them has decimal columns)."""
    media = _media_type(content_type)
    if media != "application/json":
        raise Unsupported(f"content type {media!r} is not supported; POST /v1/updates takes application/json")
    obj = loads_json(body, "request body", exact)
    if not isinstance(obj, dict) or set(obj) != {"updates"} or not isinstance(obj["updates"], list):
        raise Invalid(f'request body must be {{"updates": [ {{"table": ..., "rows": [...]}}, ... ]}}, not {quote(obj)}')
    if not obj["updates"]:
        raise Invalid('"updates" is empty; send at least one update')
    return [_update_from_object(item, None, f"updates[{k}]") for k, item in enumerate(obj["updates"])]


#: Bytes of Arrow memory per value of each column type (a string's offset; its characters
#: are no more than the body held), and about as many again for the parser's lists.
_WIDTH = {
    ColumnType.string: 4,
    ColumnType.binary: 4,
    ColumnType.int8: 1,
    ColumnType.int16: 2,
    ColumnType.timestamp_ntz: 8,
    ColumnType.decimal: 16,
    ColumnType.int32: 4,
    ColumnType.int64: 8,
    ColumnType.float32: 4,
    ColumnType.float64: 8,
    ColumnType.boolean: 1,
    ColumnType.date: 4,
    ColumnType.timestamp: 8,
}


def _width(kind: DataTypeValue) -> int:
    """Bytes of a value of ``kind`` (a null one too: a struct's fields take their room),
    not counting an array's or map's elements (``_elements``)."""
    if isinstance(kind, Primitive):
        return _WIDTH[kind.kind]
    if isinstance(kind, Struct):
        return 1 + sum(_width(f.type) for f in kind.fields)
    return 4  # an array's or map's offset


def _elements(kind: DataTypeValue, value: Any) -> int:
    """Bytes of the elements of the arrays and maps inside ``value`` (a JSON value, unchecked)."""
    if isinstance(kind, Primitive) or value is None:
        return 0
    if isinstance(kind, Struct):
        if type(value) is not dict:
            return 0
        return sum(_elements(f.type, value.get(f.name)) for f in kind.fields if not f.type.primitive)
    if type(value) not in (list, dict):
        return 0
    if isinstance(kind, Array):
        inner = kind.element
        total = len(value) * _width(inner)
        return total if inner.primitive else total + sum(_elements(inner, v) for v in value)
    entries = len(value) * (_width(kind.key) + _width(kind.value_type))
    if kind.value_type.primitive:
        return entries
    items = value.values() if type(value) is dict else [e.get("value") for e in value if type(e) is dict]
    return entries + sum(_elements(kind.value_type, v) for v in items)


#: A request's rows may take this many times ``max_body_bytes`` as columns. JSON rows are
#: usually larger than their columns; a row such as ``{}`` of a wide table of nullable
#: columns is not (3 bytes of JSON, 8 bytes per column), so without a cap a body within
#: the limit could ask for gigabytes of memory and a WAL record past its 1 GiB limit.
EXPANSION = 4


def _element_width(kind: DataTypeValue) -> int:
    """The widest element of any array or map inside ``kind`` (0: none)."""
    if isinstance(kind, Primitive):
        return 0
    if isinstance(kind, Struct):
        return max((_element_width(f.type) for f in kind.fields), default=0)
    if isinstance(kind, Array):
        return max(_width(kind.element), _element_width(kind.element))
    assert isinstance(kind, Map)
    return max(_width(kind.key) + _width(kind.value_type), _element_width(kind.key), _element_width(kind.value_type))


@functools.lru_cache(maxsize=1024)
def _widest_element(schema: TableSchema) -> int:
    return max((_element_width(c.type) for c in schema.columns), default=0)


def check_expansion(
    requests: list[UpdateRequest], schemas: dict[str, TableSchema], max_body_bytes: int, body_bytes: int | None = None
) -> None:
    """413 before any row is converted when a request's rows would take too much memory.

    ``body_bytes``: the request body's length. Every element of an array or a map takes at
    least one byte of it (a separator or a bracket), so the elements cost at most that many
    times the widest element: when even that fits, the rows' values are not walked (a walk
    of a nested request cost 5 ms of its 30 at 500 rows of 750 bytes)."""
    limit = expansion_limit(max_body_bytes)
    total = 0
    for request in requests:
        if request.rows is None and request.columns is None:
            continue
        schema = schemas[request.table]
        width = sum(_width(c.type) for c in schema.columns)
        count = len(request.rows) if request.rows is not None else request.columns.num_rows  # type: ignore[union-attr]
        total += count * width
        if request.rows is None:  # (columns already made: their values are not walked)
            if total > limit:
                raise TooLarge(_expanded(total, count, request.table, width, limit))
            continue
        bounded = body_bytes is not None and total + body_bytes * _widest_element(schema) <= limit
        if schema.nested and not bounded:  # an array's or map's elements cost as many values again each
            total += sum(
                _elements(c.type, row.get(c.name))
                for row in request.rows
                if type(row) is dict
                for c in schema.columns
                if not c.type.primitive
            )
        if total > limit:
            raise TooLarge(_expanded(total, count, request.table, width, limit))


def _expanded(total: int, rows: int, table: str, width: int, limit: int) -> str:
    return (
        f"the rows of this request would take about {total:,} bytes of memory as columns "
        f"({rows:,} rows of table {table!r} at {width} bytes each), more than the "
        f"limit of {limit:,} bytes ({EXPANSION} x max_body_bytes); send fewer rows per request"
    )


def columns_fit(body: bytes, schema: TableSchema, max_body_bytes: int) -> bool:
    """Whether a body of ``schema``'s rows may be read as columns: pyarrow's reader builds
    every column of every row it reads (15,000 rows ``{}`` of 64 columns: 45 KB of body,
    7.7 MB of columns), so a body that could hold more rows than ``check_expansion`` allows
    goes to the row path, which refuses it before converting anything. Each row is at least
    one "{" (a nested row more)."""
    return body.count(b"{") * sum(_width(c.type) for c in schema.columns) <= expansion_limit(max_body_bytes)


def expansion_limit(max_body_bytes: int) -> int:
    """The bytes a request's rows may take in memory as columns, whatever their body's form."""
    return min(EXPANSION * max_body_bytes, MAX_RECORD_BYTES // 2)


def _maybe_number(value: str) -> Any:
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else value
