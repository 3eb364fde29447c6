"""What a landing file's column may hold for each column type, and how it becomes that type.

Why a module of its own: Spark reads a Parquet file by its physical types and fails the
whole load on a mismatch (``FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH``), while
pyarrow's cast turns almost anything into almost anything (the string ``"1"`` into an
integer, a timestamp into its raw number). Intake once checked files with that cast, so it
acknowledged files that no load could read. Here every pair of a file's type and a table's
type is decided once, for every reader:

- *loaded as is*: Spark reads the column as the table's type, with the values pyarrow
  reads (``AS_IS``); the owned copy is loaded untouched;
- *converted*: an exact conversion (integer widths when every value fits, float16/float32
  to float64, integers to floats when every value is exact, timestamps of any unit and zone
  to UTC microseconds when exact, date64 to date32, large, dictionary and binary strings to
  string); intake then writes the owned copy again as Parquet with the table's exact Arrow
  schema (loader/intake/landing.py), so the load reads what intake checked;
- *refused*: every other pair (text to numbers, floats or decimals to integers, dates to
  timestamps...), named with the column and both types; and any value outside the column
  type's domain (loader/core/schema.py), named with its row.

CSV and JSON files are text, parsed by pyarrow with the table's types (``text_schema``);
their owned copy is always that parse as Parquet, so Spark never parses text by rules of
its own (it failed on ``0x10``, which pyarrow reads as 16).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from loader.core.schema import (
    ARROW_TYPES,
    DATE_MAX,
    DATE_MIN,
    FLOAT32_MAX,
    INT_RANGES,
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    ColumnType,
)

#: The column type of each table Arrow type (ARROW_TYPES is one to one; decimals: ``column_kind``).
COLUMN_TYPES: dict[pa.DataType, ColumnType] = {arrow: kind for kind, arrow in ARROW_TYPES.items()}


def column_kind(arrow: pa.DataType) -> ColumnType:
    """The kind of a table column's Arrow type."""
    return ColumnType.decimal if pa.types.is_decimal(arrow) else COLUMN_TYPES[arrow]

_EPOCH = dt.date(1970, 1, 1)
_DAYS = ((DATE_MIN - _EPOCH).days, (DATE_MAX - _EPOCH).days)
_MICROS = (
    (TIMESTAMP_MIN - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1),
    (TIMESTAMP_MAX - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1),
)
#: Integers a float holds exactly, whatever their value: up to 2**(mantissa bits + 1).
_EXACT_INTEGERS = {ColumnType.float32: 2**24, ColumnType.float64: 2**53}
_F32 = struct.Struct("<f")


class Unloadable(ValueError):
    """A landing file's column that the table cannot take: the column, and the row when one
    value is to blame (numbered from the file's first row)."""

    def __init__(self, message: str, column: str, row: int | None = None) -> None:
        super().__init__(message)
        self.column = column
        self.row = row


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _is_bytes(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind)


_SMALL_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16())

#: File types Spark's Parquet reader reads as the table's type, value for value as pyarrow
#: reads them (each pair measured: tests/system/test_type_domain.py); a column of any other
#: accepted type is converted. Timestamps in nanoseconds are read by the load's frame as
#: longs and divided (loader/loading/sinks/frame.py), so they too load as they are.
AS_IS: dict[ColumnType, Callable[[pa.DataType], bool]] = {
    ColumnType.string: lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t),
    ColumnType.binary: lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t),
    ColumnType.int8: lambda t: t == pa.int8(),
    ColumnType.int16: lambda t: t in (pa.int8(), pa.int16(), pa.uint8()),
    ColumnType.int32: lambda t: t in _SMALL_INTS,
    ColumnType.int64: lambda t: t in _SMALL_INTS or t in (pa.int64(), pa.uint32()),
    ColumnType.float32: lambda t: t == pa.float32(),
    # (not uint32: Spark reads a UINT_32 column asked for as a double as signed, 2**32-1 as -1.0)
    ColumnType.float64: lambda t: t in (pa.float32(), pa.float64()) or t in _SMALL_INTS,
    ColumnType.boolean: lambda t: t == pa.bool_(),
    ColumnType.date: lambda t: t in (pa.date32(), pa.date64()),
    ColumnType.timestamp: lambda t: pa.types.is_timestamp(t) and t.unit in ("ms", "us", "ns"),
    # (nanoseconds are converted: the frame's division of longs yields instants, not wall-clock times)
    ColumnType.timestamp_ntz: lambda t: pa.types.is_timestamp(t) and t.tz is None and t.unit in ("ms", "us"),
    ColumnType.decimal: pa.types.is_decimal,  # of the very precision and scale (``loads_as_is``)
}


def loads_as_is(file_schema: pa.Schema, table: pa.Schema) -> bool:
    """Whether Spark reads every column the file shares with the table as the table's type
    (dictionary encoding is the file's business: Spark decodes it)."""
    for field in table:
        if field.name not in file_schema.names:
            continue  # read as null
        kind = file_schema.field(field.name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if is_nested(field.type):
            if kind != field.type:  # (a file of the very type, nullability and names included)
                return False
            continue
        if not AS_IS[column_kind(field.type)](kind):
            return False
        if pa.types.is_decimal(field.type) and kind != field.type:  # Spark does not rescale a file's decimals
            return False
    return True


def text_schema(table: pa.Schema, json: bool) -> pa.Schema:
    """The types a CSV or JSON file's text is parsed to: the table's, but float32 columns
    as float64 (so that a finite number beyond float32 is told from a written infinity) and,
    in JSON, dates as text (pyarrow's JSON reader takes a date only as a day number; a JSON
    row's date is "YYYY-MM-DD"), and binary columns as text: base64, as in a JSON row."""
    fields = []
    for field in table:
        if is_nested(field.type):  # CSV: refused unless absent or null (``_nested_column``); JSON lines
            # with a nested column are read row by row (loader/intake/landing.py, json_rows_chunks)
            keep = json and not any(pa.types.is_map(t) for t in _types_in(field.type))
            fields.append(field.with_nullable(True) if keep else pa.field(field.name, pa.string()))
            continue
        kind = column_kind(field.type)
        if kind is ColumnType.float32:
            field = field.with_type(pa.float64())
        elif kind is ColumnType.binary:
            field = field.with_type(pa.string())
        elif json and kind is ColumnType.date:
            field = field.with_type(pa.string())
        fields.append(field.with_nullable(True))
    return pa.schema(fields)


def conform(chunk: pa.RecordBatch | pa.Table, table: pa.Schema, text: bool, first_row: int = 0) -> pa.Table:
    """A chunk of a landing file as the table's columns: by name, missing ones null, each
    converted by the rules of the module docstring; Unloadable otherwise.

    ``text``: the chunk was parsed from CSV or JSON (``text_schema``): floats are decimal
    numbers rounded to float32 as a JSON row's are, dates are "YYYY-MM-DD".
    ``first_row``: the chunk's first row in the file, to name a row.
    """
    data = pa.Table.from_batches([chunk]) if isinstance(chunk, pa.RecordBatch) else chunk
    extra = [name for name in data.column_names if name not in table.names]
    if extra:
        raise Unloadable(f"unknown column {extra[0]!r}; the table's columns are {table.names}", extra[0])
    columns = []
    for field in table:
        if field.name in data.column_names:
            values = data.column(field.name)
            columns.append(_convert(values, field.name, field.type, text, first_row))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    # The table's schema as it is: a null in a required column is the caller's to name (with
    # its row), as the cast this replaced refused it without one.
    return pa.Table.from_arrays(columns, schema=table)


def _convert(values: pa.ChunkedArray, name: str, target: pa.DataType, text: bool, first_row: int) -> pa.ChunkedArray:
    source = values.type
    if pa.types.is_dictionary(source):
        source = source.value_type
        values = pc.cast(values, source)
    if pa.types.is_null(source):  # a column of nulls only (pandas writes one for an empty object column)
        return pc.cast(values, target)
    if is_nested(target):
        return _nested_column(values, name, target, text, first_row)
    kind = column_kind(target)
    converted = _RULES[kind](_Column(values, source, name, kind, text, first_row, target))
    if converted is None:
        raise Unloadable(_refusal(name, source, kind, target), name)
    if kind is ColumnType.decimal:
        _check_precision(converted, name, target, first_row)
    else:
        _check_domain(converted, name, kind, first_row)
    return converted


#: For digits past a precision of 38 (decimal's context: 28 digits would round the bounds).
_DIGITS = decimal.Context(prec=80)


def _check_precision(values: pa.ChunkedArray, name: str, target: pa.DataType, first: int) -> None:
    """Every decimal within its precision: pyarrow's CSV and JSON readers rescale an integer's
    text (``-100000000000000000000000000000`` into decimal(38,9)) without checking that the
    digits still fit, and a Parquet file may hold such a value; Spark then fails every load."""
    top = _DIGITS.subtract(
        _DIGITS.power(10, target.precision - target.scale), decimal.Decimal(1).scaleb(-target.scale)
    )
    index = _first(pc.greater(pc.abs(values), pa.scalar(top, target)))
    if index is not None:
        raise Unloadable(
            f"row {first + index}: column {name!r} holds a value of more than {target.precision} digits, "
            f"outside {_shown(target)}",
            name,
            first + index,
        )


#: What to write a column of each type as, in the terms of the tools that write Parquet.
WRITE_AS: dict[ColumnType, str] = {
    ColumnType.string: "string (Parquet BYTE_ARRAY, UTF8)",
    ColumnType.binary: "binary (Parquet BYTE_ARRAY); base64 text in CSV and JSON files",
    ColumnType.int8: "int8 (Parquet INT32, INT(8))",
    ColumnType.int16: "an integer type of at most 16 bits (Parquet INT32, INT(16))",
    ColumnType.timestamp_ntz: "a timestamp without time zone (Parquet TIMESTAMP, isAdjustedToUTC=false)",
    ColumnType.decimal: "a decimal of the column's scale or an integer (Parquet DECIMAL)",
    ColumnType.int32: "an integer type of at most 32 bits (Parquet INT32)",
    ColumnType.int64: "an integer type (Parquet INT64)",
    ColumnType.float32: "float32 (Parquet FLOAT)",
    ColumnType.float64: "float64 (Parquet DOUBLE)",
    ColumnType.boolean: "bool (Parquet BOOLEAN)",
    ColumnType.date: "date32 (Parquet DATE)",
    ColumnType.timestamp: "a timestamp (Parquet TIMESTAMP, in any unit and zone)",
}


def _refusal(name: str, source: pa.DataType, kind: ColumnType, target: pa.DataType) -> str:
    """Why a file's column type is not taken, and what to write instead."""
    numeric = pa.types.is_integer(source) or pa.types.is_floating(source) or pa.types.is_decimal(source)
    if _is_text(source) or _is_bytes(source):
        why = "text is not parsed into another type"
    elif kind is ColumnType.string:
        why = "only text is taken for a string column (a value is not turned into text)"
    elif kind is ColumnType.binary:
        why = "only bytes are taken for a binary column"
    elif pa.types.is_timestamp(source) and kind is ColumnType.timestamp_ntz:
        why = "a timestamp with a time zone is an instant, which a wall-clock time of no zone cannot hold"
    elif kind is ColumnType.decimal and pa.types.is_floating(source):
        why = "a binary float is not converted to a decimal (it holds no exact decimal digits)"
    elif pa.types.is_decimal(source):
        why = "a decimal is converted neither to an integer nor to a binary float"
    elif pa.types.is_floating(source) and kind in INT_RANGES:
        why = "a floating-point number is not converted to an integer (it may not be whole)"
    elif pa.types.is_timestamp(source) or pa.types.is_date(source):
        why = "dates and timestamps are converted only to their own kind, never to a number or to each other"
    elif numeric and kind in (ColumnType.date, ColumnType.timestamp, ColumnType.timestamp_ntz):
        why = "a number is not converted to a date or a timestamp (its unit and epoch are not known)"
    elif pa.types.is_boolean(source) or kind is ColumnType.boolean:
        why = "booleans and numbers are not converted into each other"
    else:
        why = "this type is not converted"
    shown = f"column {name!r} is {source} in the file but {_shown(target)} in the table"
    return f"{shown}, and {why}; write it as {WRITE_AS[kind]}"


def _shown(target: pa.DataType) -> str:
    """A column type as the table declares it, with its Arrow type where the names differ."""
    kind, arrow = column_kind(target), str(target)
    declared = f"decimal({target.precision},{target.scale})" if kind is ColumnType.decimal else kind.value
    return declared if arrow == declared else f"{declared} ({arrow})"


@dataclass(frozen=True, slots=True)
class _Column:
    """A file's column on its way to its table column's type, with what naming a bad value needs."""

    values: pa.ChunkedArray
    source: pa.DataType  # (dictionary encoding removed)
    name: str
    kind: ColumnType
    text: bool  # parsed from CSV or JSON
    first: int  # the file's row of the chunk's first row
    target: pa.DataType  # the table column's Arrow type

    def bad(self, index: int, value: object, why: str) -> Unloadable:
        """The refusal of the value at ``index`` of the chunk (numbered in the file)."""
        row = self.first + index
        return Unloadable(
            f"row {row}: column {self.name!r} ({self.source} in the file, {_shown(self.target)} in the table) holds "
            f"{value!r}, {why}",
            self.name,
            row,
        )


def _first(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """The first index where ``mask`` is true, None where it never is."""
    index = int(pc.index(mask, True).as_py())
    return None if index < 0 else index


# -- one rule per column type: the converted column, or None for a type it does not take ----------
def _to_string(column: _Column) -> pa.ChunkedArray | None:
    if _is_text(column.source):
        return pc.cast(column.values, pa.string())
    if not _is_bytes(column.source):
        return None
    try:
        return pc.cast(column.values, pa.string())  # checks that every value is UTF-8
    except pa.ArrowInvalid:
        for index, value in enumerate(column.values.to_pylist()):
            try:
                if value is not None:
                    value.decode("utf-8")
            except UnicodeDecodeError:
                raise column.bad(index, value[:40], "which is not UTF-8 text; write the column as text") from None
        raise


def _to_integer(column: _Column) -> pa.ChunkedArray | None:
    if not pa.types.is_integer(column.source):
        return None
    try:
        return pc.cast(column.values, ARROW_TYPES[column.kind])  # safe: refuses a value that does not fit
    except pa.ArrowInvalid:
        lo, hi = INT_RANGES[column.kind]
        for index, value in enumerate(column.values.to_pylist()):
            if value is not None and not lo <= value <= hi:
                raise column.bad(index, value, f"which is outside {column.kind.value}'s range {lo}..{hi}") from None
        raise


def _to_float(column: _Column) -> pa.ChunkedArray | None:
    values, source, target = column.values, column.source, ARROW_TYPES[column.kind]
    if source == target or (pa.types.is_floating(source) and source.bit_width < target.bit_width):
        return pc.cast(values, target)  # equal, or a widening: exact
    if pa.types.is_integer(source):
        limit = _EXACT_INTEGERS[column.kind]
        bounds = pc.min_max(values)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None or (-limit <= low and high <= limit):
            return pc.cast(values, target)
        for index, value in enumerate(values.to_pylist()):
            if value is not None and int(_rounded(float(value), column.kind)) != value:
                raise column.bad(index, value, f"which {column.kind.value} cannot hold exactly; write it as a float")
        return pc.cast(values, target, safe=False)
    if source == pa.float64() and column.kind is ColumnType.float32:
        narrowed = pc.cast(values, target, safe=False)
        if column.text:  # a decimal number: rounded to the nearest float32, refused if that overflows
            bad = pc.and_(pc.is_inf(narrowed), pc.invert(pc.is_inf(values)))
            why = f"which is beyond float32's largest finite value {FLOAT32_MAX!r}"
        else:  # a binary float64: taken only when float32 holds it exactly
            bad = pc.and_(pc.not_equal(pc.cast(narrowed, pa.float64()), values), pc.invert(pc.is_nan(values)))
            why = "which float32 cannot hold exactly; write the column as float32, or declare it float64"
        index = _first(bad)
        if index is not None:
            raise column.bad(index, values[index].as_py(), why)
        return narrowed
    return None


def _rounded(value: float, kind: ColumnType) -> float:
    return _F32.unpack(_F32.pack(value))[0] if kind is ColumnType.float32 else value


def _to_boolean(column: _Column) -> pa.ChunkedArray | None:
    return column.values if column.source == pa.bool_() else None


def _to_date(column: _Column) -> pa.ChunkedArray | None:
    values, source = column.values, column.source
    if source == pa.date32():
        return values
    if source == pa.date64():
        try:
            return pc.cast(values, pa.date32())  # safe: refuses a time of day
        except pa.ArrowInvalid:
            whole = pc.equal(pc.cast(pc.cast(values, pa.date32(), safe=False), pa.date64()), values)
            index = _first(pc.invert(whole))
            if index is None:
                raise
            raise column.bad(index, values[index].as_py(), "which has a time of day") from None
    if column.text and _is_text(source):  # a JSON file's "YYYY-MM-DD"
        try:
            return pc.cast(values, pa.date32())
        except pa.ArrowInvalid:
            for index, value in enumerate(values.to_pylist()):
                try:
                    if value is not None:
                        pc.cast(pa.array([value]), pa.date32())
                except pa.ArrowInvalid:
                    raise column.bad(index, value, "which is not a date YYYY-MM-DD") from None
            raise
    return None


def _to_binary(column: _Column) -> pa.ChunkedArray | None:
    if column.text and _is_text(column.source):  # base64, as in a JSON row
        decoded = []
        for index, value in enumerate(column.values.to_pylist()):
            try:
                decoded.append(None if value is None else base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                raise column.bad(index, value[:40], "which is not base64 text (standard alphabet, padded)") from None
        return pa.chunked_array([pa.array(decoded, pa.binary())])
    if _is_bytes(column.source) or pa.types.is_fixed_size_binary(column.source):
        return pc.cast(column.values, pa.binary())
    return None


def _to_decimal(column: _Column) -> pa.ChunkedArray | None:
    """Decimals of any precision and scale, and integers, when every value fits exactly."""
    values, source, target = column.values, column.source, column.target
    if pa.types.is_integer(source):
        values = pc.cast(values, pa.decimal128(20, 0))  # exact for every 64-bit integer
    elif not pa.types.is_decimal(source):
        return None
    try:
        return pc.cast(values, target)  # safe: refuses a value that would lose digits
    except pa.ArrowInvalid:
        for index, value in enumerate(values.to_pylist()):
            if value is None:
                continue
            try:
                pa.array([value]).cast(target)
            except pa.ArrowInvalid:
                raise column.bad(
                    index, str(value), f"which {_shown(target)} cannot hold exactly (it is not rounded)"
                ) from None
        raise


def _to_timestamp(column: _Column) -> pa.ChunkedArray | None:
    values, source = column.values, column.source
    if not pa.types.is_timestamp(source):
        return None
    if column.kind is ColumnType.timestamp_ntz and source.tz is not None:
        return None
    # A timestamp without a zone is UTC, as a JSON row's is (pyarrow's cast keeps its value).
    try:
        return pc.cast(values, column.target)  # safe: refuses what microseconds cannot hold
    except pa.ArrowInvalid:
        raw = pc.cast(values, pa.int64())
        if source.unit == "ns":
            index = _first(pc.not_equal(pc.multiply(pc.divide(raw, 1000), 1000), raw))
            why = "nanoseconds, which are not whole microseconds (Delta's timestamps hold microseconds)"
        else:
            per_second = {"s": 1, "ms": 1_000, "us": 1_000_000}[source.unit]
            low, high = (m * per_second // 1_000_000 for m in _MICROS)
            index = _first(pc.or_(pc.less(raw, low), pc.greater(raw, high)))
            why = f"a raw value outside the years {TIMESTAMP_MIN.year} to {TIMESTAMP_MAX.year}"
        if index is None:
            raise
        raise column.bad(index, raw[index].as_py(), why) from None


_RULES: dict[ColumnType, Callable[[_Column], pa.ChunkedArray | None]] = {
    ColumnType.string: _to_string,
    ColumnType.binary: _to_binary,
    ColumnType.int8: _to_integer,
    ColumnType.int16: _to_integer,
    ColumnType.decimal: _to_decimal,
    ColumnType.timestamp_ntz: _to_timestamp,
    ColumnType.int32: _to_integer,
    ColumnType.int64: _to_integer,
    ColumnType.float32: _to_float,
    ColumnType.float64: _to_float,
    ColumnType.boolean: _to_boolean,
    ColumnType.date: _to_date,
    ColumnType.timestamp: _to_timestamp,
}


def _check_domain(values: pa.ChunkedArray, name: str, kind: ColumnType, first: int) -> None:
    """Dates and timestamps within years 1 to 9999 (loader/core/schema.py): Arrow holds more,
    and a value beyond would fail every load of its batch (or read back as another)."""
    if kind is ColumnType.date:
        raw, (low, high) = pc.cast(values, pa.int32()), _DAYS
        shown = f"{DATE_MIN.isoformat()} to {DATE_MAX.isoformat()}"
    elif kind in (ColumnType.timestamp, ColumnType.timestamp_ntz):
        raw, (low, high) = pc.cast(values, pa.int64()), _MICROS
        shown = f"{TIMESTAMP_MIN.isoformat()} to {TIMESTAMP_MAX.isoformat()}"
    else:
        return
    index = _first(pc.or_(pc.less(raw, low), pc.greater(raw, high)))
    if index is not None:
        value = raw[index].as_py()
        text = _day(value) if kind is ColumnType.date else _instant(value)
        if kind is ColumnType.timestamp_ntz:  # a wall-clock time: no zone to name
            text = text.removesuffix("Z")
        raise Unloadable(
            f"row {first + index}: column {name!r} holds {text}, outside the {kind.value} range {shown} that Spark, "
            "Delta and their readers hold",
            name,
            first + index,
        )


# -- nested columns (struct, array, map) ---------------------------------------------------------
# Taken from Parquet (and Arrow) files only when the file's column has the table's shape: the same
# struct fields in the same order, lists and maps where the table has them, and at each leaf the
# table's very type (no conversion inside a nested value). Nullability is checked value by value
# (a file's schema may call a field nullable that holds no null), and so is every leaf's domain:
# dates and timestamps in years 1 to 9999, decimals within their precision.


def is_nested(kind: pa.DataType) -> bool:
    return pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_map(kind)


def _types_in(kind: pa.DataType) -> list[pa.DataType]:
    """``kind`` and every type nested in it."""
    if pa.types.is_struct(kind):
        return [kind, *(t for f in kind for t in _types_in(f.type))]
    if pa.types.is_map(kind):
        return [kind, *_types_in(kind.key_type), *_types_in(kind.item_type)]
    if pa.types.is_list(kind):
        return [kind, *_types_in(kind.value_type)]
    return [kind]


def _shape_difference(source: pa.DataType, target: pa.DataType, path: str) -> str | None:
    """Where ``source`` differs from ``target`` other than in nullability and in the names of a
    list's element and a map's entries, as ``path: why``; None when it does not."""
    if pa.types.is_map(target):
        if not pa.types.is_map(source):
            return f"{path}: {source} in the file, a map in the table"
        return _shape_difference(source.key_type, target.key_type, f"{path}{{key}}") or _shape_difference(
            source.item_type, target.item_type, f"{path}{{value}}"
        )
    if pa.types.is_list(target):
        if not pa.types.is_list(source) or pa.types.is_map(source):
            return f"{path}: {source} in the file, a list (array) in the table"
        return _shape_difference(source.value_type, target.value_type, f"{path}[]")
    if pa.types.is_struct(target):
        if not pa.types.is_struct(source):
            return f"{path}: {source} in the file, a struct in the table"
        have, want = [f.name for f in source], [f.name for f in target]
        if have != want:
            return f"{path}: a struct of fields {have[:20]} in the file, {want[:20]} in the table"
        for index, field in enumerate(target):
            found = _shape_difference(source.field(index).type, field.type, f"{path}.{field.name}")
            if found:
                return found
        return None
    if source != target:
        return f"{path}: {source} in the file, {target} in the table (inside a nested column, types are not converted)"
    return None


def _nested_column(
    values: pa.ChunkedArray, name: str, target: pa.DataType, text: bool, first_row: int
) -> pa.ChunkedArray:
    if text:
        if values.null_count == len(values):
            return pa.chunked_array([pa.nulls(len(values), target)])
        raise Unloadable(
            f"column {name!r} is of a nested type ({target}), which a CSV landing file does not carry; "
            "send the file as JSON lines or Parquet, or its rows as JSON rows",
            name,
        )
    difference = _shape_difference(values.type, target, name)
    if difference is not None:
        raise Unloadable(
            f"column {name!r} does not have the table's nested type: {difference}; write it as {target}", name
        )
    # Checked as the file holds it (the leaves are of the table's types, the nullability is the
    # table's), then cast: the cast refuses a null where the table holds none, without a row.
    whole = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    _check_nested(whole, target, None, name, name, first_row)
    return values.cast(target) if values.type != target else values


def _row(rows: pa.Array | None, index: int) -> int:
    return index if rows is None else rows[index].as_py()


def _check_nested(
    array: pa.Array, target: pa.DataType, rows: pa.Array | None, path: str, name: str, first: int
) -> None:
    """Every value of ``array`` (of type ``target``; ``rows``: each value's row in the chunk, None
    when the n-th value is row n) within its type: no null where the type holds none, leaves
    within their domain; Unloadable naming the row and the path otherwise."""

    def refuse(index: int, where: str, why: str) -> Unloadable:
        row = first + _row(rows, index)
        return Unloadable(f"row {row}: column {name!r}: {where}: {why}", name, row)

    if pa.types.is_struct(target):
        valid = array.is_valid()
        for index, field in enumerate(target):
            child = pc.struct_field(array, [index])
            where = f"{path}.{field.name}"
            if not field.nullable:
                found = _first(pc.and_(valid, child.is_null()))
                if found is not None:
                    raise refuse(found, where, "null, but the field is not nullable")
            _check_nested(child, field.type, rows, where, name, first)
        return
    if pa.types.is_list(target) or pa.types.is_map(target):
        if len(array) == 0 or array.null_count == len(array):
            return
        if pa.types.is_map(target):  # as the list of its entries (key, value) it is
            array = pa.ListArray.from_arrays(array.offsets, array.values, mask=array.is_null())
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
        parents = pa.array(np.repeat(np.arange(len(array)), lengths))  # each element's list
        inner_rows = parents if rows is None else pc.take(rows, parents)
        flat = pc.list_flatten(array)  # (a null list holds no element, whatever its offsets say)
        if pa.types.is_map(target):
            keys, items = pc.struct_field(flat, [0]), pc.struct_field(flat, [1])
            found = _first(keys.is_null())
            if found is not None:
                raise refuse(found, f"{path}{{key}}", "a null map key, which no map key may be")
            _check_nested(keys, target.key_type, inner_rows, f"{path}{{key}}", name, first)
            if not target.item_field.nullable:
                found = _first(items.is_null())
                if found is not None:
                    raise refuse(found, f"{path}{{value}}", "a null value, but valueContainsNull is false")
            _check_nested(items, target.item_type, inner_rows, f"{path}{{value}}", name, first)
            return
        element = target.value_field
        if not element.nullable:
            found = _first(flat.is_null())
            if found is not None:
                position = found - _first(pc.equal(parents, parents[found]))  # type: ignore[operator]
                raise refuse(found, f"{path}[{position}]", "a null element, but containsNull is false")
        _check_nested(flat, element.type, inner_rows, f"{path}[]", name, first)
        return
    if array.null_count == len(array):
        return
    kind = column_kind(target)
    if kind is ColumnType.decimal:
        top = _DIGITS.subtract(
            _DIGITS.power(10, target.precision - target.scale), decimal.Decimal(1).scaleb(-target.scale)
        )
        found = _first(pc.greater(pc.abs(array), pa.scalar(top, target)))
        if found is not None:
            raise refuse(found, path, f"a value of more than {target.precision} digits, outside {_shown(target)}")
    elif kind is ColumnType.date or kind in (ColumnType.timestamp, ColumnType.timestamp_ntz):
        raw = pc.cast(array, pa.int32() if kind is ColumnType.date else pa.int64())
        low, high = _DAYS if kind is ColumnType.date else _MICROS
        found = _first(pc.or_(pc.less(raw, low), pc.greater(raw, high)))
        if found is not None:
            value = raw[found].as_py()
            text = _day(value) if kind is ColumnType.date else _instant(value)
            raise refuse(found, path, f"{text}, outside the {kind.value} range of years 1 to 9999")


def _civil(days: int) -> tuple[int, int, int]:
    """Year, month, day of a day number from 1970-01-01 in the proleptic Gregorian calendar,
    for any year (Python's date stops at 1 and 9999; the values refused here lie beyond)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _day(days: int) -> str:
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d}"


def _instant(micros: int) -> str:
    days, rest = divmod(micros, 86_400_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    return f"{_day(days)}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}Z"
