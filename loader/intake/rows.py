"""Validate JSON rows against a table schema and turn them into an Arrow table.

Written by hand rather than with a per-table pydantic model because the error must name
the first offending row and column in the producer's terms, one bad row rejects the
whole update, and the result must be columnar (Arrow) for the WAL and Spark.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from loader.core.errors import Invalid
from loader.core.schema import (
    FLOAT32_MAX,
    INT_RANGES,
    Array,
    ColumnType,
    DataTypeValue,
    Map,
    Primitive,
    Struct,
    TableSchema,
)

_INT_RANGE = INT_RANGES
_F32 = struct.Struct("<f")
#: A fraction of a second with digits past the sixth (Python's parser drops them unread).
_SUB_MICROSECOND = re.compile(r"[.,]\d{6}(\d+)")
_EPOCH_DATE = dt.date(1970, 1, 1)
#: What a refused update's producer should do: nothing of it was kept.
RESEND = "nothing of the update was accepted: fix it and send the whole update again"
#: Longest excerpt of a producer's value quoted back in an error (errors never echo a
#: multi-megabyte value).
QUOTE_CHARS = 60
#: Longest directory name most filesystems allow (ext4, xfs, NFS): a partition value
#: becomes one ``column=value`` directory when Spark writes the batch.
MAX_DIRECTORY_NAME_BYTES = 255
#: Characters Spark escapes as %XX in a partition directory name
#: (``ExternalCatalogUtils.charToEscape``); NUL is not among them.
_SPARK_ESCAPED = "[\\x01-\\x1f\"#%'*/:=?\\\\\\x7f{\\[\\]^]"
#: The directory name Spark writes for a null partition value, and that every reader
#: (Spark, Delta, delta-rs, the loader's own commit) reads back as null.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


class _Bad(ValueError):
    """A value outside its type's domain; ``path`` is where inside a nested value (``[3].sku``),
    empty for a column's value itself."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def quote(value: Any) -> str:
    """A value as the producer wrote it (JSON), cut to QUOTE_CHARS, safe to put in a response."""
    if isinstance(value, decimal.Decimal):  # a JSON number parsed exactly: its text
        text = str(value)
        return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = ascii(value)
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


def _integer(kind: ColumnType) -> Callable[[Any], int]:
    lo, hi = _INT_RANGE[kind]

    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, decimal.Decimal):  # parsed exactly: the float it would have been
                value = float(value)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise _Bad(f"expected an integer, got {quote(value)}")
        if not lo <= value <= hi:
            raise _Bad(f"{value} is out of range for {kind.value}")
        return value

    return convert


def _float(value: Any) -> float:
    if isinstance(value, decimal.Decimal):  # parsed exactly (decimal columns): the float it would have been
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"expected a number, got {quote(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise _Bad("number is too large for a float") from None
    # JSON has no NaN or Infinity; a literal such as 1e400 parses to inf.
    if not math.isfinite(number):
        raise _Bad(f"expected a finite number, got {quote(value)}")
    return number


def _float32(value: Any) -> float:
    """Rounded to the nearest float32 by Arrow; refused only when that rounding overflows
    (3.4028235e38, float32's largest value as printed, is above it as a float64 and is taken)."""
    number = _float(value)
    try:
        _F32.pack(number)  # the same rounding as Arrow's conversion, OverflowError where it gives infinity
    except OverflowError:
        raise _Bad(
            f"{quote(value)} is out of range for float32 (largest finite value {FLOAT32_MAX!r}); "
            "declare the column float64 for larger numbers"
        ) from None
    return number


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {quote(value)}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"expected true or false, got {quote(value)}")
    return value


def _date(value: Any) -> dt.date:
    if not isinstance(value, str):
        raise _Bad(f"expected a date string YYYY-MM-DD, got {quote(value)}")
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise _Bad(f"expected a date YYYY-MM-DD, got {quote(value)}") from None


def parse_timestamp(value: Any) -> dt.datetime:
    """ISO-8601 (naive means UTC) or Unix seconds, as an aware UTC datetime."""
    if isinstance(value, bool):
        raise _Bad(f"expected an ISO-8601 timestamp or Unix seconds, got {quote(value)}")
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise _Bad(f"expected a finite Unix time, got {quote(value)}")
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise _Bad(f"Unix time {quote(value)} is out of range (years 1 to 9999 in UTC)") from None
    if not isinstance(value, str):
        raise _Bad(f"expected an ISO-8601 timestamp or Unix seconds, got {quote(value)}")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"expected an ISO-8601 timestamp such as 2026-01-31T12:00:00Z, got {quote(value)}") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=dt.UTC)
    try:
        return parsed.astimezone(dt.UTC)
    except OverflowError:  # e.g. 9999-12-31T23:00:00-05:00 is past year 9999 in UTC
        raise _Bad(f"timestamp {quote(value)} is out of range in UTC (years 1 to 9999)") from None


def _micros_only(value: str) -> None:
    extra = _SUB_MICROSECOND.search(value)
    if extra is not None and extra.group(1).strip("0"):
        raise _Bad(
            f"timestamp {quote(value)} has digits below microseconds, which a timestamp column cannot hold; "
            "send at most 6 fractional digits"
        )


def _timestamp(value: Any) -> dt.datetime:
    """A timestamp column's value: ``parse_timestamp``, refusing digits below microseconds,
    which the column cannot hold (a landing file's nanoseconds are refused alike)."""
    if isinstance(value, str):
        _micros_only(value)
    return parse_timestamp(value)


def _timestamp_ntz(value: Any) -> dt.datetime:
    """A wall-clock time: ISO-8601 without an offset. Neither an offset nor Unix seconds is
    taken: either names an instant, which a time of no zone cannot hold without choosing one."""
    if not isinstance(value, str):
        raise _Bad(f"expected an ISO-8601 date and time without offset such as 2026-01-31T12:00:00, got {quote(value)}")
    _micros_only(value)
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"expected an ISO-8601 date and time such as 2026-01-31T12:00:00, got {quote(value)}") from None
    if parsed.tzinfo is not None:
        raise _Bad(
            f"{quote(value)} has a UTC offset, but a timestamp_ntz column holds a wall-clock time of no zone; "
            "send it without the offset (or declare the column timestamp)"
        )
    return parsed


def _binary(value: Any) -> bytes:
    """Base64 (standard alphabet, padded), the one way JSON text carries any bytes."""
    if not isinstance(value, str):
        raise _Bad(f"expected base64 text, got {quote(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(
            f"expected base64 text (standard alphabet A-Z a-z 0-9 + /, padded with =), got {quote(value)}"
        ) from None


#: A decimal's digits as JSON text: what Decimal() reads less its extras (spaces, "_", NaN).
_DECIMAL_TEXT = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
#: Room for any value a decimal column may be asked to take, before it is checked.
_EXACT = decimal.Context(prec=100, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[decimal.InvalidOperation])


_A_DECIMAL = 'expected a decimal number (a JSON number or a string such as "12.34")'


def _decimal(kind: Primitive) -> Callable[[Any], decimal.Decimal]:
    precision, scale = kind.precision or 0, kind.scale or 0
    unit = decimal.Decimal(1).scaleb(-scale)
    limit = decimal.Decimal(10) ** (precision - scale)

    def convert(value: Any) -> decimal.Decimal:
        if isinstance(value, str):
            if not _DECIMAL_TEXT.fullmatch(value):
                raise _Bad(f"{_A_DECIMAL}, got {quote(value)}")
            number = decimal.Decimal(value)
        elif isinstance(value, decimal.Decimal):
            number = value
        elif isinstance(value, int) and not isinstance(value, bool):
            number = decimal.Decimal(value)
        else:
            raise _Bad(f"{_A_DECIMAL}, got {quote(value)}")
        if not number.is_finite():
            raise _Bad(f"expected a finite decimal number, got {quote(value)}")
        if number.is_zero():
            return decimal.Decimal(0).quantize(unit)
        if number.adjusted() >= precision - scale:
            raise _Bad(
                f"{quote(value)} has more than the {precision - scale} digits before the point that {kind} holds"
            )
        exact = number.quantize(unit, context=_EXACT) if number.adjusted() > -200 else None
        if exact is None or exact != number:
            raise _Bad(
                f"{quote(value)} has more than the {scale} digits after the point that {kind} holds (it is not "
                "rounded); send at most that many, or declare a larger scale"
            )
        if exact.copy_abs() >= limit:  # (not abs(): it rounds to the context's 28 digits)
            raise _Bad(f"{quote(value)} is out of range for {kind}")
        return exact

    return convert


_CONVERTERS: dict[ColumnType, Callable[[Any], Any]] = {
    ColumnType.string: _string,
    ColumnType.binary: _binary,
    ColumnType.int8: _integer(ColumnType.int8),
    ColumnType.int16: _integer(ColumnType.int16),
    ColumnType.timestamp_ntz: _timestamp_ntz,
    ColumnType.int32: _integer(ColumnType.int32),
    ColumnType.int64: _integer(ColumnType.int64),
    ColumnType.float32: _float32,
    ColumnType.float64: _float,
    ColumnType.boolean: _boolean,
    ColumnType.date: _date,
    ColumnType.timestamp: _timestamp,
}


@dataclass(frozen=True, slots=True)
class _RowPlan:
    """What checking rows against one schema needs, worked out once per schema: the
    pydantic model's hash (an ``lru_cache`` key) and the Arrow schema's fields cost more
    than the conversion of a small update's rows."""

    schema: TableSchema  # held: the plan is found by ``id(schema)``, which stays unique while it lives
    names: frozenset[str]
    columns: tuple[tuple[str, bool, Callable[[Any], Any]], ...]
    arrow: pa.Schema
    types: tuple[pa.DataType, ...]
    #: Per column (name, nullable, check of a whole column), when every column's type has a
    #: check; None otherwise (dates, timestamps and float32 are converted value by value).
    fast: tuple[tuple[str, bool, Callable[[list[Any]], bool]], ...] | None


def _ints(lo: int, hi: int) -> Callable[[list[Any]], bool]:
    def check(values: list[Any]) -> bool:
        return all(type(v) is int for v in values) and lo <= min(values) and max(values) <= hi

    return check


def _floats(values: list[Any]) -> bool:
    return all(type(v) is float for v in values) and all(map(math.isfinite, values))


#: Whole-column checks: True when every (non-null) value is already what the converter
#: would return unchanged, so the values can go to Arrow as they are. False sends the rows
#: through the value-by-value conversion, which accepts what these do not (an integral
#: float for an integer) and names the first bad row and column.
_COLUMN_CHECKS: dict[ColumnType, Callable[[list[Any]], bool]] = {
    ColumnType.string: lambda values: all(type(v) is str for v in values),
    ColumnType.int8: _ints(*_INT_RANGE[ColumnType.int8]),
    ColumnType.int16: _ints(*_INT_RANGE[ColumnType.int16]),
    ColumnType.int32: _ints(*_INT_RANGE[ColumnType.int32]),
    ColumnType.int64: _ints(*_INT_RANGE[ColumnType.int64]),
    ColumnType.float64: _floats,
    ColumnType.boolean: lambda values: all(type(v) is bool for v in values),
}

def _converter(kind: DataTypeValue) -> Callable[[Any], Any]:
    if isinstance(kind, Primitive):
        return _decimal(kind) if kind.kind is ColumnType.decimal else _CONVERTERS[kind.kind]
    if isinstance(kind, Struct):
        return _struct(kind)
    if isinstance(kind, Array):
        return _array(kind)
    return _map(kind)


def _null(path: str, nullable: bool, present: bool, what: str) -> None:
    if not nullable:
        raise _Bad(f"{what} is required (not nullable) but {'null' if present else 'missing'}", path)


def _struct(kind: Struct) -> Callable[[Any], dict[str, Any]]:
    """A JSON object of the struct's fields (a missing field is null), as a dict of every field."""
    fields = tuple((f.name, f.nullable, _converter(f.type)) for f in kind.fields)
    names = frozenset(f.name for f in kind.fields)

    def convert(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise _Bad(f"expected a JSON object of fields {sorted(names)[:10]}, got {quote(value)}")
        if not names.issuperset(value):
            unknown = sorted(str(k) for k in set(value) - names)[0]
            raise _Bad(f"unknown field {quote(unknown)}; fields are {sorted(names)[:20]}")
        out = {}
        for name, nullable, inner in fields:
            item = value.get(name)
            if item is None:
                _null(f".{name}", nullable, name in value, "the field")
                out[name] = None
                continue
            try:
                out[name] = inner(item)
            except _Bad as exc:
                raise _Bad(str(exc), f".{name}{exc.path}") from None
        return out

    return convert


def _array(kind: Array) -> Callable[[Any], list[Any]]:
    inner, contains_null = _converter(kind.element), kind.contains_null

    def convert(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _Bad(f"expected a JSON array, got {quote(value)}")
        out = []
        for index, item in enumerate(value):
            if item is None:
                _null(f"[{index}]", contains_null, True, "an element (containsNull is false)")
                out.append(None)
                continue
            try:
                out.append(inner(item))
            except _Bad as exc:
                raise _Bad(str(exc), f"[{index}]{exc.path}") from None
        return out

    return convert


def _map(kind: Map) -> Callable[[Any], list[tuple[Any, Any]]]:
    """A JSON object (for string keys), or a JSON array of ``{"key": ..., "value": ...}``
    entries (keys of any type); a key is never null and never repeats."""
    keys, values, contains_null = _converter(kind.key), _converter(kind.value_type), kind.value_contains_null
    text_keys = isinstance(kind.key, Primitive) and kind.key.kind is ColumnType.string

    def entry(key: Any, item: Any, where: str, out: list[tuple[Any, Any]], seen: set[Any]) -> None:
        if key is None:
            raise _Bad("a map key is null, which no map key may be", where)
        try:
            converted = keys(key)
        except _Bad as exc:
            raise _Bad(f"key: {exc}", where) from None
        if converted in seen:
            raise _Bad(f"key {quote(key)} repeats; a map holds each key once", where)
        seen.add(converted)
        if item is None:
            _null(where, contains_null, True, "a value (valueContainsNull is false)")
            out.append((converted, None))
            return
        try:
            out.append((converted, values(item)))
        except _Bad as exc:
            raise _Bad(str(exc), f"{where}{exc.path}") from None

    def convert(value: Any) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        seen: set[Any] = set()
        if type(value) is dict:
            if not text_keys:
                raise _Bad(
                    f"a map of {kind.key} keys is a JSON array of {{\"key\": ..., \"value\": ...}} entries "
                    f"(a JSON object's keys are strings), got {quote(value)}"
                )
            for key, item in value.items():
                entry(key, item, f"[{quote(key)}]", out, seen)
            return out
        if type(value) is not list:
            raise _Bad(
                f'expected a JSON object or an array of {{"key": ..., "value": ...}} entries, got {quote(value)}'
            )
        for index, item in enumerate(value):
            if type(item) is not dict or "key" not in item or not {"key", "value"}.issuperset(item):
                raise _Bad(f'expected an entry {{"key": ..., "value": ...}}, got {quote(item)}', f"[{index}]")
            entry(item["key"], item.get("value"), f"[{index}]", out, seen)
        return out

    return convert


def _column_check(kind: DataTypeValue) -> Callable[[list[Any]], bool] | None:
    """A whole-column check of (non-null) values of ``kind``, nested types included: a struct's
    fields, a list's elements and a map's values are checked as columns of their own (a few
    list passes per level instead of a call per value; pyarrow then builds the nested array
    from the Python values in C++). None when some part of the type has no check."""
    if isinstance(kind, Primitive):
        return _COLUMN_CHECKS.get(kind.kind)
    if isinstance(kind, Struct):
        return _struct_check(kind)
    if isinstance(kind, Array):
        return _items_check(_column_check(kind.element), kind.contains_null, list, lambda v: v)
    if isinstance(kind, Map) and isinstance(kind.key, Primitive) and kind.key.kind is ColumnType.string:
        # A JSON object's keys are strings, never null and never repeated: only its values to check.
        return _items_check(_column_check(kind.value_type), kind.value_contains_null, dict, dict.values)
    return None


def _present_ok(column: list[Any], nullable: bool, check: Callable[[list[Any]], bool]) -> bool:
    present = [v for v in column if v is not None] if None in column else column
    return (present is column or nullable) and (not present or check(present))


def _struct_check(kind: Struct) -> Callable[[list[Any]], bool] | None:
    fields = [(f.name, f.nullable, _column_check(f.type)) for f in kind.fields]
    if any(check is None for _, _, check in fields):
        return None
    names = frozenset(f.name for f in kind.fields)

    def check(values: list[Any]) -> bool:
        if not all(type(v) is dict and names.issuperset(v) for v in values):
            return False
        return all(_present_ok([v.get(name) for v in values], nullable, sub) for name, nullable, sub in fields)  # type: ignore[arg-type]

    return check


def _items_check(
    sub: Callable[[list[Any]], bool] | None, contains_null: bool, container: type, items: Callable[[Any], Any]
) -> Callable[[list[Any]], bool] | None:
    if sub is None:
        return None

    def check(values: list[Any]) -> bool:
        if not all(type(v) is container for v in values):
            return False
        return _present_ok([x for v in values for x in items(v)], contains_null, sub)

    return check


_PLANS: dict[int, _RowPlan] = {}
#: Fewer rows than this are converted value by value: the column passes cost as much.
FAST_MIN_ROWS = 8


def _plan(schema: TableSchema) -> _RowPlan:
    plan = _PLANS.get(id(schema))
    if plan is None or plan.schema is not schema:
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        arrow = schema.arrow()
        plan = _RowPlan(
            schema,
            frozenset(c.name for c in schema.columns),
            tuple((c.name, c.nullable, _converter(c.type)) for c in schema.columns),
            arrow,
            tuple(f.type for f in arrow),
            tuple((c.name, c.nullable, _column_check(c.type)) for c in schema.columns)  # type: ignore[misc]
            if all(_column_check(c.type) is not None for c in schema.columns)
            else None,
        )
        _PLANS[id(schema)] = plan
    return plan


def rows_to_arrow(rows: Sequence[Any], schema: TableSchema, table: str, first_row: int = 0) -> pa.Table:
    """All rows valid, or Invalid naming the first bad row (0-based, counted from ``first_row``:
    a landing file's rows are checked a chunk at a time) and column."""
    if not rows:
        raise Invalid(f"update for table {table!r} has no rows; send at least one row", table=table)
    rowplan = _plan(schema)
    checked = _checked_columns(rows, rowplan)
    out = checked if checked is not None else _converted_columns(rows, rowplan, table, first_row)
    try:
        data = pa.Table.from_arrays(
            [pa.array(values, type=kind) for values, kind in zip(out, rowplan.types)], schema=rowplan.arrow
        )
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise Invalid(f"rows of table {table!r} do not fit the schema: {exc}; {RESEND}", table=table) from None
    if schema.partition_by:
        check_partition_values(data, schema, f"table {table!r}", first_row)
    return data


def _checked_columns(rows: Sequence[Any], plan: _RowPlan) -> list[list[Any]] | None:
    """The columns as they are, when whole-column checks find every value valid (a few
    list passes instead of a function call per value: 1.75x faster at 1,000 rows, 1.5x at
    30, no faster at 3); None when any check fails, a type has none, or the rows are few."""
    if plan.fast is None or len(rows) < FAST_MIN_ROWS:
        return None
    names = plan.names
    for row in rows:
        if type(row) is not dict or len(row) > len(names) or not names.issuperset(row):
            return None
    out = []
    for name, nullable, check in plan.fast:
        column = [row.get(name) for row in rows]
        present = [v for v in column if v is not None] if None in column else column
        if (present is not column and not nullable) or (present and not check(present)):
            return None
        out.append(column)
    return out


def _converted_columns(rows: Sequence[Any], rowplan: _RowPlan, table: str, first_row: int = 0) -> list[list[Any]]:
    """Every value converted (``_CONVERTERS``), or Invalid naming the first bad row and column."""
    names = rowplan.names
    out: list[list[Any]] = [[] for _ in rowplan.columns]
    plan = [(name, nullable, convert, out[k]) for k, (name, nullable, convert) in enumerate(rowplan.columns)]
    for index, row in enumerate(rows, start=first_row):
        if not isinstance(row, dict):
            raise Invalid(
                f"row {index} of table {table!r} is not a JSON object but {quote(row)}; {RESEND}",
                table=table,
                row=index,
                column=None,
            )
        if len(row) > len(names) or not names.issuperset(row):
            unknown = sorted(set(row) - names)
            if unknown:
                raise Invalid(
                    f"row {index} of table {table!r} has unknown column {quote(unknown[0])}; columns are "
                    f"{sorted(names)[:50]} (a table declared with on_new_fields = \"add\" takes new fields as "
                    f"columns, one with \"ignore\" drops them); {RESEND}",
                    table=table,
                    row=index,
                    column=unknown[0] if len(unknown[0]) <= QUOTE_CHARS else unknown[0][:QUOTE_CHARS] + "...",
                )
        for name, nullable, convert, column in plan:
            value = row.get(name)
            if value is None:
                if not nullable:
                    raise Invalid(
                        f"row {index} of table {table!r}: column {name!r} is required (not nullable) but "
                        f"{'null' if name in row else 'missing'}; {RESEND}",
                        table=table,
                        row=index,
                        column=name,
                    )
                column.append(None)
                continue
            try:
                column.append(convert(value))
            except _Bad as exc:
                if exc.path:
                    where = f"{name}{exc.path}"
                    raise Invalid(
                        f"row {index} of table {table!r}: column {name!r}: {where}: {exc}; {RESEND}",
                        table=table,
                        row=index,
                        column=name,
                        path=where,
                    ) from None
                raise Invalid(
                    f"row {index} of table {table!r}: column {name!r}: {exc}; {RESEND}",
                    table=table,
                    row=index,
                    column=name,
                ) from None
    return out


def check_partition_values(data: pa.Table, schema: TableSchema, where: str, first_row: int = 0) -> None:
    """Refuse string partition values that no directory can hold as they are.

    Spark writes each partition value as a ``column=value`` directory: a NUL cannot be in
    a file name (Spark does not escape it), a name past 255 bytes is refused by the
    filesystem, and an empty string and ``__HIVE_DEFAULT_PARTITION__`` both become the
    directory every reader reads as null. Accepted, such a row would make every load of
    the table fail or read back as another value, so it is refused at intake with the
    first such row named. ``first_row`` numbers the rows of a file chunk.
    """
    for name in schema.partition_by:
        column = data.column(name)
        if not pa.types.is_string(column.type) or column.null_count == len(column):
            continue
        found = []
        for mask, why in (
            (
                pc.match_substring(column, "\x00"),
                "holds a NUL character, which cannot be in the directory name Spark writes it to",
            ),
            (
                pc.equal(column, ""),
                "holds an empty string, which a partition directory cannot name: Spark and Delta store it as "
                "null; send a non-empty value (or null)",
            ),
            (
                pc.equal(column, HIVE_NULL),
                f"holds {HIVE_NULL!r}, the directory name that Spark and Delta read back as null; send another "
                "value (or null)",
            ),
        ):
            if pc.any(mask).as_py():
                found.append((pc.index(mask, True).as_py(), why))
        if found:
            index, why = min(found)
            row = first_row + index
            raise Invalid(f"row {row} of {where}: partition column {name!r} {why}; {RESEND}", row=row, column=name)
        budget = MAX_DIRECTORY_NAME_BYTES - len(name.encode()) - 1
        lengths = pc.binary_length(column)
        if (pc.max(lengths).as_py() or 0) * 3 <= budget:  # escaping at most triples a byte
            continue
        escaped = pc.add(lengths, pc.multiply(pc.count_substring_regex(column, _SPARK_ESCAPED), 2))
        too_long = pc.greater(escaped, budget)
        if pc.any(too_long).as_py():
            index = pc.index(too_long, True).as_py()
            row = first_row + index
            raise Invalid(
                f"row {row} of {where}: partition column {name!r} holds a value of {escaped[index].as_py()} "
                f"bytes as a directory name, more than the {budget} a {name}=value directory may take; "
                f"shorten the value; {RESEND}",
                row=row,
                column=name,
            )
