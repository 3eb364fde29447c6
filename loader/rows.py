"""Validate JSON rows against a table schema and turn them into an Arrow table.

Written by hand rather than with a per-table pydantic model because the error must name
the first offending row and column in the producer's terms, one bad row rejects the
whole update, and the result must be columnar (Arrow) for the WAL and Spark.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from loader.errors import Invalid
from loader.schema import ColumnType, TableSchema

_INT_RANGE = {ColumnType.int32: (-(2**31), 2**31 - 1), ColumnType.int64: (-(2**63), 2**63 - 1)}
_EPOCH_DATE = dt.date(1970, 1, 1)


class _Bad(ValueError):
    pass


def _integer(kind: ColumnType) -> Callable[[Any], int]:
    lo, hi = _INT_RANGE[kind]

    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise _Bad(f"expected an integer, got {value!r}")
        if not lo <= value <= hi:
            raise _Bad(f"{value} is out of range for {kind.value}")
        return value

    return convert


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"expected a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise _Bad("number is too large for a float") from None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {value!r}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"expected true or false, got {value!r}")
    return value


def _date(value: Any) -> dt.date:
    if not isinstance(value, str):
        raise _Bad(f"expected a date string YYYY-MM-DD, got {value!r}")
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise _Bad(f"expected a date YYYY-MM-DD, got {value!r}") from None


def parse_timestamp(value: Any) -> dt.datetime:
    """ISO-8601 (naive means UTC) or Unix seconds, as an aware UTC datetime."""
    if isinstance(value, bool):
        raise _Bad(f"expected a timestamp, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise _Bad(f"expected a finite Unix time, got {value!r}")
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise _Bad(f"Unix time {value!r} is out of range") from None
    if not isinstance(value, str):
        raise _Bad(f"expected an ISO-8601 timestamp or Unix seconds, got {value!r}")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"expected an ISO-8601 timestamp such as 2026-01-31T12:00:00Z, got {value!r}") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC)


_CONVERTERS: dict[ColumnType, Callable[[Any], Any]] = {
    ColumnType.string: _string,
    ColumnType.int32: _integer(ColumnType.int32),
    ColumnType.int64: _integer(ColumnType.int64),
    ColumnType.float32: _float,
    ColumnType.float64: _float,
    ColumnType.boolean: _boolean,
    ColumnType.date: _date,
    ColumnType.timestamp: parse_timestamp,
}


def rows_to_arrow(rows: Sequence[Any], schema: TableSchema, table: str) -> pa.Table:
    """All rows valid, or Invalid naming the first bad row (0-based) and column."""
    if not rows:
        raise Invalid(f"update for table {table!r} has no rows; send at least one row", table=table)
    columns = schema.columns
    names = {c.name for c in columns}
    out: list[list[Any]] = [[] for _ in columns]
    plan = [(c.name, c.nullable, _CONVERTERS[c.type], out[k]) for k, c in enumerate(columns)]
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise Invalid(f"row {index} of table {table!r} is not a JSON object", table=table, row=index, column=None)
        if len(row) > len(names) or not names.issuperset(row):
            unknown = sorted(set(row) - names)
            if unknown:
                raise Invalid(
                    f"row {index} of table {table!r} has unknown column {unknown[0]!r}; columns are {sorted(names)}",
                    table=table,
                    row=index,
                    column=unknown[0],
                )
        for name, nullable, convert, column in plan:
            value = row.get(name)
            if value is None:
                if not nullable:
                    raise Invalid(
                        f"row {index} of table {table!r}: column {name!r} is required (not nullable)",
                        table=table,
                        row=index,
                        column=name,
                    )
                column.append(None)
                continue
            try:
                column.append(convert(value))
            except _Bad as exc:
                raise Invalid(
                    f"row {index} of table {table!r}: column {name!r}: {exc}", table=table, row=index, column=name
                ) from None
    arrow_schema = schema.arrow()
    try:
        return pa.Table.from_arrays(
            [pa.array(values, type=field.type) for values, field in zip(out, arrow_schema)], schema=arrow_schema
        )
    except (pa.ArrowInvalid, OverflowError) as exc:  # e.g. a float32 overflow
        raise Invalid(f"rows of table {table!r} do not fit the schema: {exc}", table=table) from None
