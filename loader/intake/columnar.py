"""JSON and NDJSON bodies read as columns: pyarrow's JSON reader with the table's explicit
schema, then whole-column checks of the row rules (loader/intake/rows.py).

Why: checking and converting each row in Python held intake at 7% of what one core
parses (issue 36); pyarrow's reader types the same bytes at about 190 MB/s. Why not
instead of rows.py: the row path is the rule, and words every refusal (the row, the
column, the path inside a nested value, the value as sent). So this path is allowed to
*accept* only what the row path accepts, with the very same values, and declines
(``None``) everywhere it cannot tell: any value pyarrow refuses, a form pyarrow takes that
rows.py does not (``NaN``, ``"+1.5"`` for a decimal, two objects on one line), a type it
does not convert here. The caller then runs the row path, which accepts or words the
refusal. A property test holds the two to that (tests/loader/intake/test_columnar.py).
"""

from __future__ import annotations

import decimal
import io
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from loader.core.schema import Array, ColumnType, DataTypeValue, Primitive, Struct, TableSchema
from loader.intake.rows import check_partition_values

#: What a timestamp column's text may look like here: the ISO-8601 forms producers send,
#: which Python's ``fromisoformat`` (the row path) reads the same way. Any other form
#: (a space for the ``T``, an hour without minutes, Unix seconds) goes to the row path.
_CLOCK = r"T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?"
_DAY = r"^(?:\d{3}[1-9]|\d{2}[1-9]\d|\d[1-9]\d{2}|[1-9]\d{3})-\d{2}-\d{2}"  # year 0001..9999
_DATE = _DAY + "$"
_TIMESTAMP_NTZ = _DAY + _CLOCK + "$"
_TIMESTAMP = _DAY + _CLOCK + r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)?$"
#: Microseconds of 0001-01-01T00:00:00 and of 9999-12-31T23:59:59.999999 (UTC): a time the
#: row path refuses as outside years 1 to 9999 once its offset is applied.
_FIRST_US, _LAST_US = -62_135_596_800_000_000, 253_402_300_799_999_999
#: A JSON number with an exponent (after ":", "," or "["), or a string that is one
#: ("1e-3"): what a decimal column may meet. Not hex or an escape ("3e5f", "\u00e9").
_EXPONENT = re.compile(rb'[:,\[]\s*-?\d+(?:\.\d*)?[eE]|"[-+]?\d*\.?\d*[eE][-+]?\d+"')
#: Bodies from this size up are read as columns: pyarrow's reader costs 110 to 170 µs a call
#: before its first byte (and each regex check compiles its pattern), so a small body is
#: read faster row by row (at 9 columns: 100 rows, 20 KB, 0.76 ms against 0.51; 300 rows,
#: 61 KB, 0.94 against 1.34).
COLUMNS_FROM = 32 << 10
#: Bodies from this size up are parsed on pyarrow's threads (below it, starting them costs more).
THREADED_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one schema's rows are read as columns, worked out once per schema."""

    parse: pa_json.ParseOptions
    #: A ``{"rows": [...]}`` body as one record (``rows_newlines``: one that spans lines).
    rows: pa_json.ParseOptions
    rows_newlines: pa_json.ParseOptions
    #: Per column: its name, whether it may hold nulls, and the conversion of the column as
    #: read to the table's type (None: the value is out of the row rules; decline).
    columns: tuple[tuple[str, bool, Callable[[pa.Array], pa.Array | None]], ...]
    arrow: pa.Schema
    #: Some column holds decimals (``_readable``: forms pyarrow's decimal reads otherwise).
    decimals: bool
    #: Some column is a struct or a list: a row may hold a "{" other than its first.
    nested: bool


#: Plans by ``id(schema)``, each with the schema it is for (held: its id stays unique while it lives).
_PLANS: dict[int, tuple[TableSchema, _Plan | None]] = {}


def _plan(schema: TableSchema) -> _Plan | None:
    """The plan of ``schema``; None when one of its columns is of a type read only row by row."""
    known = _PLANS.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    if len(_PLANS) >= 1024:
        _PLANS.clear()
    plan = _make_plan(schema)
    _PLANS[id(schema)] = (schema, plan)
    return plan


def reads_as_columns(body: bytes, schema: TableSchema) -> bool:
    """Whether ``body`` (of ``schema``'s rows) is tried here: from ``COLUMNS_FROM`` bytes, for a
    schema of types read here; else it goes straight to the row path."""
    return len(body) >= COLUMNS_FROM and _plan(schema) is not None


def _make_plan(schema: TableSchema) -> _Plan | None:
    fields, columns = [], []
    for column in schema.columns:
        reading = _reading(column.type)
        if reading is None:
            return None
        fields.append(pa.field(column.name, reading[0]))
        columns.append((column.name, column.nullable, reading[1]))
    parse = pa_json.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="error")
    body = pa.schema([pa.field("rows", pa.list_(pa.struct(fields)))])
    rows = pa_json.ParseOptions(explicit_schema=body, unexpected_field_behavior="error")
    rows_newlines = pa_json.ParseOptions(
        explicit_schema=body, unexpected_field_behavior="error", newlines_in_values=True
    )
    nested = any(not isinstance(c.type, Primitive) for c in schema.columns)
    return _Plan(parse, rows, rows_newlines, tuple(columns), schema.arrow(), schema.exact_numbers, nested)


Convert = Callable[[pa.Array], "pa.Array | None"]


def _reading(kind: DataTypeValue) -> tuple[pa.DataType, Convert] | None:
    """The type a value of ``kind`` is read as, and its conversion to ``kind``'s Arrow type;
    None for a type read only row by row (binary: base64; a map: pyarrow's reader takes no
    JSON object as a map)."""
    if isinstance(kind, Primitive):
        if kind.kind is ColumnType.decimal:
            return kind.arrow, _decimal(kind)
        return _PRIMITIVES.get(kind.kind)
    if isinstance(kind, Struct):
        parts = [_reading(f.type) for f in kind.fields]
        if any(p is None for p in parts):
            return None
        read = pa.struct([pa.field(f.name, p[0]) for f, p in zip(kind.fields, parts)])  # type: ignore[index]
        return read, _struct(kind, [p[1] for p in parts])  # type: ignore[index]
    if isinstance(kind, Array):
        part = _reading(kind.element)
        if part is None:
            return None
        return pa.list_(part[0]), _array(kind, part[1])
    return None


def _struct(kind: Struct, converts: list[Convert]) -> Convert:
    target = kind.arrow

    def convert(values: pa.Array) -> pa.Array | None:
        valid = values.is_valid()
        children = []
        for k, (field, change) in enumerate(zip(kind.fields, converts)):
            child = values.field(k)
            if not field.nullable and child.null_count and pc.any(pc.and_(valid, child.is_null())).as_py():
                return None  # a NOT NULL field null (or missing) in a row: the row path names its path
            converted = _converted(child, change, target.field(k).type)
            if converted is None:
                return None
            children.append(converted)
        mask = values.is_null() if values.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)

    return convert


def _array(kind: Array, change: Convert) -> Convert:
    target = kind.arrow

    def convert(values: pa.Array) -> pa.Array | None:
        if values.offset:
            return None  # (the reader's arrays start at 0; a slice would need its offsets rebased)
        elements = values.values
        if not kind.contains_null and elements.null_count:
            return None
        converted = _converted(elements, change, target.value_type)
        if converted is None:
            return None
        mask = values.is_null() if values.null_count else None
        return pa.ListArray.from_arrays(values.offsets, converted, type=target, mask=mask)

    return convert


def _converted(values: pa.Array, change: Convert, target: pa.DataType) -> pa.Array | None:
    """``change`` of ``values``, or of none when all are null (no value to check)."""
    if values.null_count == len(values):
        return pa.nulls(len(values), target)
    return change(values)


def _same(values: pa.Array) -> pa.Array:
    return values


def _finite(values: pa.Array) -> pa.Array | None:
    """JSON has no NaN or Infinity (the row path's parser refuses them; pyarrow's takes them).
    A negative zero is the row path's to read: the integer ``-0`` is its +0.0 (Python's int
    has no sign of zero), where pyarrow reads -0.0; ``-0.0`` is -0.0 on both."""
    if pc.all(pc.is_finite(values)).as_py() is False:
        return None
    zeros = pc.filter(values, pc.equal(values, 0.0))
    if len(zeros) and pc.any(pc.less(pc.divide(1.0, zeros), 0.0)).as_py():
        return None
    return values


def _float32(values: pa.Array) -> pa.Array | None:
    """Rounded to the nearest float32 as the row path's Arrow conversion rounds; a value whose
    rounding overflows is refused there (it names the largest float32): declined here."""
    if _finite(values) is None:
        return None
    narrow = pc.cast(values, pa.float32(), safe=False)
    return narrow if pc.all(pc.is_finite(narrow)).as_py() is not False else None


def _decimal(kind: Primitive) -> Callable[[pa.Array], pa.Array | None]:
    """pyarrow's reader checks a decimal's scale but not its precision (it takes 1e28 into a
    decimal(38,10)): a value of more digits before the point than the type holds is the row
    path's to refuse."""
    limit = decimal.Decimal(10) ** ((kind.precision or 0) - (kind.scale or 0))

    def convert(values: pa.Array) -> pa.Array | None:
        low, high = (v.as_py() for v in pc.min_max(values).values())
        return values if low is None or (-limit < low and high < limit) else None

    return convert


def _matching(values: pa.Array, pattern: str) -> bool:
    return pc.all(pc.match_substring_regex(values, pattern)).as_py() is not False


def _date(values: pa.Array) -> pa.Array | None:
    if not _matching(values, _DATE):
        return None
    try:
        return pc.cast(values, pa.date32())
    except pa.ArrowInvalid:  # a day the month lacks: the row path words it
        return None


def _timestamp_ntz(values: pa.Array) -> pa.Array | None:
    if not _matching(values, _TIMESTAMP_NTZ):
        return None
    try:
        return pc.cast(values, pa.timestamp("us"))
    except pa.ArrowInvalid:
        return None


def _timestamp(values: pa.Array) -> pa.Array | None:
    """ISO-8601 text, naive meaning UTC (the row path's rule), in years 1 to 9999 once in UTC."""
    if not _matching(values, _TIMESTAMP):
        return None
    naive = pc.match_substring_regex(values, _TIMESTAMP_NTZ)
    if pc.any(naive).as_py():
        values = pc.if_else(naive, pc.binary_join_element_wise(values, "Z", ""), values)
    try:
        instants = pc.cast(values, pa.timestamp("us", tz="UTC"))
    except pa.ArrowInvalid:
        return None
    micros = instants.cast(pa.int64())
    if len(micros) > micros.null_count:
        low, high = pc.min_max(micros).values()
        if low.as_py() < _FIRST_US or high.as_py() > _LAST_US:
            return None
    return instants


#: The type each column is read as (the table's own where pyarrow reads JSON the row path's way).
#: Per type read here: the type pyarrow's reader reads it as (the table's own where the
#: reader reads JSON the row path's way), and the conversion to the table's type.
_PRIMITIVES: dict[ColumnType, tuple[pa.DataType, Convert]] = {
    ColumnType.string: (pa.string(), _same),
    ColumnType.boolean: (pa.bool_(), _same),
    ColumnType.int8: (pa.int8(), _same),
    ColumnType.int16: (pa.int16(), _same),
    ColumnType.int32: (pa.int32(), _same),
    ColumnType.int64: (pa.int64(), _same),
    ColumnType.float32: (pa.float64(), _float32),
    ColumnType.float64: (pa.float64(), _finite),
    ColumnType.date: (pa.string(), _date),
    ColumnType.timestamp: (pa.string(), _timestamp),
    ColumnType.timestamp_ntz: (pa.string(), _timestamp_ntz),
}


def _one_object_per_line(body: bytes, rows: int, nested: bool) -> bool:
    """Whether ``body`` holds ``rows`` lines, each one JSON object from its first byte, as the
    row path splits it (``bytes.splitlines``). pyarrow's reader also takes two objects on
    one line and an object over several, which the row path refuses. In a flat table's
    rows a "{" only opens a row (no value is an object, and no string holds a raw newline),
    so when as many lines start with one as there are rows and lines, each row starts a
    line of its own and ends before the next. A nested table's rows hold objects: each line
    must also end with "}", and none may continue the row before it (a "{" after a "}"
    does not continue a JSON value), which only a look at every line tells."""
    if b"\r" in body and body.count(b"\r") != body.count(b"\r\n"):
        return False  # a lone CR ends a line for the row path, and is blank space for pyarrow's
    lines = body.count(b"\n") + (not body.endswith(b"\n"))
    if not rows == lines == body.count(b"\n{") + body.startswith(b"{"):
        return False
    if nested:
        text = body[:-1] if body.endswith(b"\n") else body
        return all(line.startswith(b"{") and line.rstrip(b"\r").endswith(b"}") for line in text.split(b"\n"))
    return True


def _readable(body: bytes, plan: _Plan) -> bool:
    """Whether the body holds nothing pyarrow's reader would take otherwise than the row path."""
    if b"NaN" in body or b"Infinity" in body:  # literals pyarrow reads and JSON has not (or text: either way)
        return False
    if plan.decimals and (b'"+' in body or _EXPONENT.search(body)):
        # "+1.5": pyarrow's decimal reads it, the row path's does not; and a decimal with an
        # exponent may round to zero there (2.39e-34 read as 0 in a decimal(38,10)), which the
        # row path refuses as digits past the scale. (Any number with one, in any column.)
        return False
    if not body.isascii():  # (a word at a time: 20x faster than decoding an ASCII body)
        try:
            body.decode("utf-8")  # pyarrow keeps invalid UTF-8 in strings unchecked
        except UnicodeDecodeError:
            return False
    return True


def _read(body: bytes, parse: pa_json.ParseOptions, one_object: bool = False) -> pa.Table | None:
    """``one_object``: the body is one JSON object, which must lie in one of the reader's
    blocks (1 MiB by default: a 2 MB ``{"rows": [...]}`` body would always be declined)."""
    threads = len(body) >= THREADED_BYTES and not one_object
    options = pa_json.ReadOptions(use_threads=threads, block_size=len(body) + 1) if one_object else None
    try:
        return pa_json.read_json(
            io.BytesIO(body),
            read_options=options or pa_json.ReadOptions(use_threads=threads),
            parse_options=parse,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def read_ndjson(body: bytes, schema: TableSchema, table: str) -> pa.Table | None:
    """The rows of an NDJSON body as the table's Arrow columns, exactly as ``rows_to_arrow``
    would make them; None when the row path must decide (module docstring). Raises only
    what ``rows_to_arrow`` raises for the same rows (a partition value no directory holds)."""
    plan = _plan(schema)
    if plan is None or not body or not _readable(body, plan):
        return None
    read = _read(body, plan.parse)
    if read is None or read.num_rows == 0 or not _one_object_per_line(body, read.num_rows, plan.nested):
        return None
    columns = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0) for c in read.columns]
    return _checked(columns, plan, schema, table)


def read_json_rows(body: bytes, schema: TableSchema, table: str) -> pa.Table | None:
    """The rows of a ``{"rows": [...]}`` body (the single-table route's JSON form) as the
    table's Arrow columns, as ``read_ndjson`` does; None when the body holds anything but
    its rows (``data_until`` is read by the row path) or the row path must decide."""
    plan = _plan(schema)
    if plan is None or not body.startswith(b"{") or not _readable(body, plan):
        return None
    read = _read(body, plan.rows_newlines if b"\n" in body or b"\r" in body else plan.rows, one_object=True)
    if read is None or read.num_rows != 1 or read.num_columns != 1:
        return None
    rows = read.column(0).chunk(0)  # one list: its values are the rows, from offset 0
    if rows.null_count or not len(rows.values) or rows.values.null_count:
        return None  # no rows, or a row that is null: the row path words it
    objects = rows.values
    return _checked([objects.field(k) for k in range(objects.type.num_fields)], plan, schema, table)


def _checked(columns: list[pa.Array], plan: _Plan, schema: TableSchema, table: str) -> pa.Table | None:
    arrays = []
    for (name, nullable, convert), values in zip(plan.columns, columns):
        if values.null_count and not nullable:
            return None
        converted = _converted(values, convert, plan.arrow.field(name).type)
        if converted is None:
            return None
        arrays.append(converted)
    data = pa.Table.from_arrays(arrays, schema=plan.arrow)
    if schema.partition_by:
        check_partition_values(data, schema, f"table {table!r}")
    return data
