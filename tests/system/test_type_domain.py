"""One type domain at intake and at load (issue 33): what intake accepts is loaded, once,
and reads back unchanged with deltalake, DuckDB and Spark; what it refuses gets a 422
naming the row and the column.

The service runs in-process (as in test_e2e.py) with the embedded default writer on the
session's Spark. Hypothesis draws, per example, a table (unpartitioned, or partitioned by
a column of any type), JSON rows (or NDJSON) over each type's whole domain and its
extremes, and a landing file (Parquet of any physical type a column may arrive as, or
CSV, or JSON lines); the test's own model of the domain (``Cell``) says which values are
taken, as what, and which row and column a refusal names. A second test loads, table type
by table type, every Parquet type intake accepts, each at its extremes.

A failed load attempt logs an ERROR, which fails the test (tests/conftest.py): every
accepted value must load at the first attempt. The suite draws 4 examples per table
layout (each a load read back three ways, about half a second); ``python -m
trials.properties`` draws ten times as many, ``HYPOTHESIS_PROFILE=explore`` new ones.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import itertools
import json
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from loader.config import Settings
from loader.core.schema import INT_RANGES, ColumnType, Primitive, TableSchema, parse_type
from loader.loading.sinks import make_sink
from testing.depth import examples
from testing.service_harness import OPERATOR, Harness
from testing.tables import read_delta, read_duckdb_log, read_spark

pytestmark = pytest.mark.slow

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
EPOCH = dt.datetime(1970, 1, 1)
MICROS_MIN = (dt.datetime(1, 1, 1) - EPOCH) // dt.timedelta(microseconds=1)
MICROS_MAX = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - EPOCH) // dt.timedelta(microseconds=1)
DAYS_MIN, DAYS_MAX = (dt.date(1, 1, 1) - EPOCH.date()).days, (dt.date(9999, 12, 31) - EPOCH.date()).days
F32 = struct.Struct("<f")

COLUMNS: list[tuple[str, Primitive]] = [
    (name, parse_type(declared))
    for name, declared in [
        ("s", "string"),
        ("i32", "int32"),
        ("i64", "int64"),
        ("f32", "float32"),
        ("f64", "float64"),
        ("b", "boolean"),
        ("d", "date"),
        ("ts", "timestamp"),
        ("i8", "byte"),
        ("i16", "short"),
        ("dec", "decimal(38,9)"),
        ("dz", "decimal(18,0)"),
        ("bin", "binary"),
        ("ntz", "timestamp_ntz"),
    ]
]


def table_schema(partition: str | None) -> TableSchema:
    return TableSchema.model_validate(
        {
            "columns": [{"name": "id", "type": "int64", "nullable": False}]
            + [{"name": name, "type": kind.value} for name, kind in COLUMNS],
            "partition_by": [partition] if partition else [],
        }
    )


# -- the model: what a value is taken as, or why it is refused ---------------------------------
@dataclass(frozen=True)
class Cell:
    """One value as sent, and what intake must make of it: ``value`` in canonical form
    (floats by ``float.hex``, dates as days and timestamps as microseconds from 1970),
    or ``bad``: "value" (refused while the value is converted) or "partition" (a partition
    value no directory can hold, refused once the column is whole)."""

    sent: Any
    value: Any = None
    bad: str | None = None


NULL = Cell(None)


def _float32(value: float) -> float | None:
    """``value`` rounded to float32 (as Arrow rounds it); None when that overflows."""
    try:
        return float(F32.unpack(F32.pack(value))[0])
    except OverflowError:
        return None


def _micros(moment: dt.datetime) -> int:
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def _iso(micros: int) -> str:
    return (EPOCH + dt.timedelta(microseconds=micros)).isoformat(timespec="microseconds") + "Z"


def _string_cell(text: str, partition: bool) -> Cell:
    if partition and not _names_a_directory(text):
        return Cell(text, bad="partition")
    return Cell(text, text)


def _names_a_directory(text: str) -> bool:
    """Whether a partition value reads back as itself (rows.check_partition_values)."""
    return text not in ("", HIVE_NULL) and "\x00" not in text


@dataclass(frozen=True)
class Raw:
    """JSON text sent as it is (a number Python's json cannot write)."""

    text: str


@dataclass(frozen=True)
class Domain:
    """A column type's values in one form: cells of values the column takes, and cells of
    values it refuses (None where the form has none)."""

    good: st.SearchStrategy[Cell]
    bad: st.SearchStrategy[Cell] | None


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)  # NUL and astral characters included
STRING_EXTREMES = st.sampled_from(["", "\x00", "\U0010ffff", "\U0001f600", " ", "a" * 40, "\u2028\x85"])
#: What a string partition column takes: no NUL, not empty, not the null directory's name.
DIRECTORY_TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=6
) | (st.sampled_from(["\U0010ffff", "\U0001f600", " ", "a" * 40, "a/b=c%", "\u2028\x85"]))
NULL_PARTITIONS = st.sampled_from(["", HIVE_NULL, "a\x00b"])
#: The largest float64 that rounds to a finite float32 (the next one is the halfway point to 2**128).
F32_ROUNDS_FINITE = math.nextafter(3.4028235677973366e38, 0.0)


def json_domain(declared: Primitive, partition: bool) -> Domain:
    """A JSON row's values for a column of ``kind``: the whole domain and its extremes, and
    values just outside it (``Raw`` text where Python's json cannot write them)."""
    kind = declared.kind
    if kind is ColumnType.decimal:
        return decimal_domain(declared)
    if kind is ColumnType.binary:
        return Domain(
            (st.binary(max_size=8) | st.sampled_from([b"", bytes(range(256))])).map(
                lambda b: Cell(base64.b64encode(b).decode(), b)
            ),
            st.sampled_from(["AAE", "A*E=", "AAE=\n", 5]).map(lambda v: Cell(v, bad="value")),
        )
    if kind is ColumnType.timestamp_ntz:
        return ntz_domain()
    if kind is ColumnType.string:
        good = (DIRECTORY_TEXT if partition else TEXT | STRING_EXTREMES).map(lambda t: Cell(t, t))
        bad = st.just(Cell(5, bad="value"))
        return Domain(good, bad | NULL_PARTITIONS.map(lambda t: Cell(t, bad="partition")) if partition else bad)
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return Domain(
            st.integers(lo, hi).map(lambda v: Cell(v, v))
            | st.integers(max(lo, -(2**52)), min(hi, 2**52)).map(lambda v: Cell(float(v), v)),  # as 5.0
            (st.sampled_from([hi + 1, lo - 1, 2**64, 1.5, "1", True]) | st.integers(hi + 1, 2**70)).map(
                lambda v: Cell(v, bad="value")
            ),
        )
    if kind is ColumnType.float32:

        def rounded(value: Any) -> Cell:
            near = _float32(value) if isinstance(value, float) else None
            return Cell(value, near.hex()) if near is not None else Cell(value, bad="value")

        return Domain(
            st.one_of(
                st.floats(width=32, allow_nan=False, allow_infinity=False),
                st.floats(-F32_ROUNDS_FINITE, F32_ROUNDS_FINITE),  # rounded to the nearest float32
                st.sampled_from([3.4028235e38, -3.4028235e38, 1e-46, 1.401298464324817e-45, -0.0, F32_ROUNDS_FINITE]),
            ).map(rounded),
            st.one_of(
                st.floats(min_value=3.4028235677973366e38, allow_infinity=False),
                st.sampled_from([-3.4028235677973366e38, -1e39, "1.5"]),
            ).map(rounded),
        )
    if kind is ColumnType.float64:
        return Domain(
            st.one_of(
                st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Cell(f, f.hex())),
                st.integers(-(2**64), 2**64).map(lambda v: Cell(v, float(v).hex())),
                st.sampled_from([1.7976931348623157e308, 5e-324, -0.0]).map(lambda f: Cell(f, f.hex())),
            ),
            st.sampled_from([Raw("1e400"), Raw("-1e400"), "1.0", True]).map(lambda v: Cell(v, bad="value")),
        )
    if kind is ColumnType.boolean:
        return Domain(
            st.booleans().map(lambda b: Cell(b, b)), st.sampled_from([1, "true"]).map(lambda v: Cell(v, bad="value"))
        )
    if kind is ColumnType.date:
        return Domain(
            (st.dates() | st.sampled_from([dt.date(1, 1, 1), dt.date(9999, 12, 31)])).map(
                lambda d: Cell(d.isoformat(), (d - EPOCH.date()).days)
            ),
            st.sampled_from(["0000-12-31", "2024-02-30", "10000-01-01", 19000]).map(lambda v: Cell(v, bad="value")),
        )
    return timestamp_domain()


def _decimal_bounds(declared: Primitive) -> tuple[decimal.Decimal, decimal.Decimal]:
    precision, scale = declared.precision or 0, declared.scale or 0
    exact = decimal.Context(prec=80)  # (the default 28 digits would round 38-digit bounds)
    top = exact.subtract(exact.power(10, precision - scale), decimal.Decimal(1).scaleb(-scale))
    return -top, top


def _scaled(digits: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    """Decimals of at most ``digits`` digits, ``scale`` of them after the point, extremes
    included (built from integers: hypothesis's decimals round to 28 digits)."""
    top = 10**digits - 1
    return (st.integers(-top, top) | st.sampled_from([-top, top, 0])).map(lambda n: decimal.Decimal(f"{n}E-{scale}"))


def decimal_domain(declared: Primitive) -> Domain:
    """Decimals at their column's scale, sent as JSON numbers (parsed exactly) or strings,
    with trailing zeros past the scale; refused: a digit past the scale, one digit too many
    before the point, NaN, non-numbers."""
    scale = declared.scale or 0
    low, high = _decimal_bounds(declared)
    values = _scaled(declared.precision or 0, scale)

    def sent(value: decimal.Decimal, form: int) -> Cell:
        text = format(value, "f")
        if form == 0:
            return Cell(Raw(text), value)
        if form == 1:
            return Cell(text, value)
        return Cell(Raw(text + ("" if "." in text else ".") + "000"), value)  # zeros past the scale

    bad = [
        st.just(Cell(Raw(format(decimal.Context(prec=80).add(high, 1), "f")), bad="value")),
        st.just(Cell("NaN", bad="value")),
        st.just(Cell(True, bad="value")),
        st.just(Cell(Raw("1e400"), bad="value")),
        st.just(Cell(Raw(format(low, "f") + ("" if scale else ".") + "1"), bad="value")),
    ]
    return Domain(st.builds(sent, values, st.integers(0, 2)), st.one_of(*bad))


def ntz_domain() -> Domain:
    wall = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
    edges = st.sampled_from([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)])
    return Domain(
        (wall | edges).map(lambda m: Cell(m.isoformat(), _micros(m))),
        st.one_of(
            wall.map(lambda m: Cell(m.isoformat() + "Z", bad="value")),
            wall.map(lambda m: Cell(m.isoformat(timespec="microseconds") + "1", bad="value")),
            st.sampled_from([Cell(0, bad="value"), Cell("yesterday", bad="value")]),
        ),
    )


def timestamp_domain() -> Domain:
    wall = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
    edges = st.sampled_from([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)])
    offsets = st.none() | st.just("naive") | st.integers(-(23 * 60 + 59), 23 * 60 + 59) | st.sampled_from([-60, 60])

    def written(moment: dt.datetime, offset: int | str | None) -> Cell:
        micros = _micros(moment)
        if offset is None:
            text = moment.isoformat() + "Z"
        elif offset == "naive":
            text = moment.isoformat()  # naive means UTC
        else:
            assert isinstance(offset, int)
            hours, minutes = divmod(abs(offset), 60)
            text = f"{moment.isoformat()}{'+' if offset >= 0 else '-'}{hours:02d}:{minutes:02d}"
            micros -= offset * 60_000_000  # across a day, a year, or out of the range
        return Cell(text, micros) if MICROS_MIN <= micros <= MICROS_MAX else Cell(text, bad="value")

    def sub_microsecond(moment: dt.datetime, digit: int) -> Cell:
        text = moment.isoformat(timespec="microseconds") + f"{digit}Z"
        return Cell(text, _micros(moment)) if digit == 0 else Cell(text, bad="value")

    def seconds(value: int) -> Cell:
        return Cell(value, value * 10**6) if MICROS_MIN <= value * 10**6 <= MICROS_MAX else Cell(value, bad="value")

    low, high = MICROS_MIN // 10**6, MICROS_MAX // 10**6
    return Domain(
        st.one_of(
            st.builds(written, wall | edges, offsets).filter(lambda c: c.bad is None),
            st.builds(sub_microsecond, wall, st.just(0)),
            st.integers(low, high).map(seconds),
        ),
        st.one_of(
            st.builds(written, edges, st.sampled_from([-60, 60, -(23 * 60), 23 * 60])).filter(
                lambda c: c.bad is not None
            ),
            st.builds(sub_microsecond, wall, st.integers(1, 9)),
            (st.integers(high + 1, high + 10**6) | st.integers(low - 10**6, low - 1)).map(seconds),
            st.just(Cell("yesterday", bad="value")),
        ),
    )


def _json(value: Any) -> str:
    return value.text if isinstance(value, Raw) else json.dumps(value)


def _column_cells(draw: st.DrawFn, domain: Domain, count: int, spoil: bool) -> list[Cell]:
    """``count`` cells, about one in six null; with ``spoil``, one of them refused."""
    cells = [NULL if draw(st.integers(0, 5)) == 0 else draw(domain.good) for _ in range(count)]
    if spoil:
        assert domain.bad is not None
        cells[draw(st.integers(0, count - 1))] = draw(domain.bad)
    return cells


@st.composite
def json_rows(draw: st.DrawFn, schema: TableSchema, ids: Iterator[int]) -> list[dict[str, Cell]]:
    """1-4 rows: an id, and per column a value, null, or nothing (the key left out); one
    update in three holds a value the column refuses."""
    partition = schema.partition_by[0] if schema.partition_by else None
    count = draw(st.integers(1, 4))
    spoiled = draw(st.sampled_from([n for n, _ in COLUMNS])) if draw(st.integers(0, 2)) == 0 else None
    rows: list[dict[str, Cell]] = []
    for _ in range(count):
        id_ = next(ids)
        rows.append({"id": Cell(id_, id_)})
    for name, kind in COLUMNS:
        cells = _column_cells(draw, json_domain(kind, name == partition), count, name == spoiled)
        for row, cell in zip(rows, cells):
            if cell is NULL and draw(st.booleans()):
                continue  # the key left out: null as well
            row[name] = cell
    return rows


def rows_refusal(rows: list[dict[str, Cell]], schema: TableSchema) -> tuple[int, str] | None:
    """The row and column a 422 must name: the first value refused while converting (row by
    row, columns in table order), else the first partition value refused."""
    for index, row in enumerate(rows):
        for name in schema.names:
            if name in row and row[name].bad == "value":
                return index, name
    for index, row in enumerate(rows):
        for name in schema.partition_by:
            if name in row and row[name].bad == "partition":
                return index, name
    return None


def expected_rows(rows: list[dict[str, Cell]], schema: TableSchema) -> list[tuple]:
    return [tuple(row[name].value if name in row else None for name in schema.names) for row in rows]


# -- landing files: a column's physical type, and its values ----------------------------------
def _array(arrow: pa.DataType, cells: list[Cell]) -> pa.Array:
    values = [c.sent for c in cells]
    if pa.types.is_dictionary(arrow):
        return pa.array(values, pa.string()).dictionary_encode()
    if arrow == pa.date32():
        return pa.array(values, pa.int32()).cast(arrow)
    if pa.types.is_decimal(arrow):
        return pa.array(values, pa.decimal128(38, arrow.scale)).cast(arrow)
    if pa.types.is_date(arrow) or pa.types.is_timestamp(arrow):
        return pa.array(values, pa.int64()).cast(arrow)
    return pa.array(values, arrow)


def _ints(low: int, high: int, lo: int, hi: int) -> Domain:
    """Integers of a file type spanning ``low..high`` into a column of range ``lo..hi``."""
    good = st.integers(max(low, lo), min(high, hi)).map(lambda v: Cell(v, v))
    bad = []
    if high > hi:
        bad.append(st.integers(hi + 1, high))
    if low < lo:
        bad.append(st.integers(low, lo - 1))
    return Domain(good, st.one_of(*bad).map(lambda v: Cell(v, bad="value")) if bad else None)


def _floats_into(
    kind: ColumnType, values: st.SearchStrategy[Any], inexact: st.SearchStrategy[Any] | None = None
) -> Domain:
    """Binary numbers into a float column, taken only when the float holds them exactly:
    ``values`` all are held, ``inexact`` draws those that may not be."""

    def cell(value: Any) -> Cell:
        if isinstance(value, float) and math.isnan(value):
            return Cell(value, value.hex())
        near = _float32(float(value)) if kind is ColumnType.float32 else float(value)
        if near is None or (near != value if isinstance(value, float) else int(near) != value):
            return Cell(value, bad="value")
        return Cell(value, near.hex())

    bad = None if inexact is None else inexact.map(cell).filter(lambda c: c.bad is not None)
    return Domain(values.map(cell).filter(lambda c: c.bad is None), bad)


def file_domains(declared: Primitive, partition: bool) -> tuple[list[tuple[pa.DataType, Domain]], list[pa.DataType]]:
    """The physical types a column of ``kind`` takes from a Parquet file, with their values,
    and types it refuses whatever the values."""
    kind = declared.kind
    if kind is ColumnType.decimal:
        precision, scale = declared.precision or 0, declared.scale or 0
        low, high = _decimal_bounds(declared)
        exact = _scaled(precision, scale)
        # A finer file type (3 more digits after the point): taken when those digits are zeros.
        whole = min(38 - (scale + 3), precision - scale)
        finer = st.integers(-(10 ** (whole + scale + 3)) + 1, 10 ** (whole + scale + 3) - 1)
        wide = (
            pa.decimal128(38, scale + 3),
            Domain(
                _scaled(whole + scale, scale).map(lambda v: Cell(v, v)),
                finer.filter(lambda n: n % 1000 != 0).map(
                    lambda n: Cell(decimal.Decimal(f"{n}E-{scale + 3}"), bad="value")
                ),
            ),
        )
        ints = st.integers(max(int(low), -(2**63)), min(int(high), 2**63 - 1))
        return [
            (declared.arrow, Domain(exact.map(lambda v: Cell(v, v)), None)),
            wide,
            (pa.int64(), Domain(ints.map(lambda v: Cell(v, decimal.Decimal(v))), None)),
        ], [pa.float64(), pa.string()]
    if kind is ColumnType.binary:
        data = st.binary(max_size=8).map(lambda b: Cell(b, b))
        return [(pa.binary(), Domain(data, None)), (pa.large_binary(), Domain(data, None))], [pa.string()]
    if kind is ColumnType.timestamp_ntz:
        naive: list[tuple[pa.DataType, Domain]] = []
        for unit in ("s", "ms", "us"):
            per_second = {"s": 1, "ms": 1000, "us": 10**6}[unit]
            low, high = MICROS_MIN * per_second // 10**6, MICROS_MAX * per_second // 10**6
            naive.append(
                (
                    pa.timestamp(unit),
                    Domain(
                        (st.integers(low, high) | st.sampled_from([low, high])).map(
                            lambda r, p=per_second: Cell(r, r * 10**6 // p)
                        ),
                        st.integers(high + 1, high + 10 * per_second).map(lambda r: Cell(r, bad="value")),
                    ),
                )
            )
        nanos = Domain(
            st.integers(-(2**63) // 1000 + 1, (2**63 - 1) // 1000).map(lambda m: Cell(m * 1000, m)),
            st.integers(-(2**63), 2**63 - 1).filter(lambda r: r % 1000 != 0).map(lambda r: Cell(r, bad="value")),
        )
        return naive + [(pa.timestamp("ns"), nanos)], [pa.timestamp("us", "UTC"), pa.date32()]
    if kind is ColumnType.string:
        text = DIRECTORY_TEXT if partition else TEXT | STRING_EXTREMES
        refused = NULL_PARTITIONS.map(lambda t: Cell(t, bad="partition")) if partition else None
        as_bytes = Domain(
            text.map(lambda t: Cell(t.encode(), t)),
            st.just(Cell(b"\xff\xfe", bad="value"))
            | (NULL_PARTITIONS.map(lambda t: Cell(t.encode(), bad="partition")) if partition else st.nothing()),
        )
        strings = Domain(text.map(lambda t: Cell(t, t)), refused)
        return [
            (pa.string(), strings),
            (pa.large_string(), strings),
            (pa.dictionary(pa.int32(), pa.string()), strings),
            (pa.binary(), as_bytes),
        ], [pa.int64()]
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        widths = [(pa.int8(), 8, True), (pa.int16(), 16, True), (pa.int32(), 32, True), (pa.int64(), 64, True)]
        widths += [(pa.uint16(), 16, False), (pa.uint32(), 32, False), (pa.uint64(), 64, False)]
        domains = [
            (arrow, _ints(-(2 ** (bits - 1)) if signed else 0, 2 ** (bits - 1) - 1 if signed else 2**bits - 1, lo, hi))
            for arrow, bits, signed in widths
        ]
        return domains, [pa.float64(), pa.string()]
    if kind is ColumnType.float32:
        return [
            (pa.float32(), _floats_into(kind, st.floats(width=32))),
            (pa.float16(), _floats_into(kind, st.floats(width=16))),
            (pa.float64(), _floats_into(kind, st.floats(width=32), st.floats(allow_nan=False))),
            (pa.int8(), _floats_into(kind, st.integers(-(2**7), 2**7 - 1))),
            (
                pa.int64(),
                _floats_into(
                    kind,
                    st.integers(-(2**24), 2**24) | st.integers(0, 62).map(lambda e: 2**e),
                    st.integers(2**24 + 1, 2**40),
                ),
            ),
        ], [pa.decimal128(10, 2)]
    if kind is ColumnType.float64:
        return [
            (pa.float64(), _floats_into(kind, st.floats())),
            (pa.float32(), _floats_into(kind, st.floats(width=32))),
            (pa.int32(), _floats_into(kind, st.integers(-(2**31), 2**31 - 1))),
            (pa.uint32(), _floats_into(kind, st.integers(0, 2**32 - 1))),
            (pa.int64(), _floats_into(kind, st.integers(-(2**53), 2**53), st.integers(2**53 + 1, 2**63 - 1))),
        ], [pa.string()]
    if kind is ColumnType.boolean:
        return [(pa.bool_(), Domain(st.booleans().map(lambda b: Cell(b, b)), None))], [pa.int8()]
    if kind is ColumnType.date:
        days = st.integers(DAYS_MIN, DAYS_MAX) | st.sampled_from([DAYS_MIN, DAYS_MAX])
        outside = st.integers(DAYS_MAX + 1, DAYS_MAX + 10**6) | st.integers(DAYS_MIN - 10**6, DAYS_MIN - 1)
        return [
            (pa.date32(), Domain(days.map(lambda d: Cell(d, d)), outside.map(lambda d: Cell(d, bad="value")))),
            (pa.date64(), Domain(days.map(lambda d: Cell(d * 86_400_000, d)), None)),
        ], [pa.timestamp("us")]
    domains: list[tuple[pa.DataType, Domain]] = []
    for unit in ("s", "ms", "us"):
        per_second = {"s": 1, "ms": 1000, "us": 10**6}[unit]
        low, high = MICROS_MIN * per_second // 10**6, MICROS_MAX * per_second // 10**6
        good = (st.integers(low, high) | st.sampled_from([low, high])).map(
            lambda r, p=per_second: Cell(r, r * 10**6 // p)
        )
        bad = (st.integers(high + 1, high + 10 * per_second) | st.integers(low - 10 * per_second, low - 1)).map(
            lambda r: Cell(r, bad="value")
        )
        domains += [
            (pa.timestamp(unit, zone), Domain(good, bad)) for zone in (None, "UTC", "+05:30", "America/New_York")
        ]
    nanos = Domain(
        st.integers(-(2**63) // 1000 + 1, (2**63 - 1) // 1000).map(lambda m: Cell(m * 1000, m)),
        st.integers(-(2**63), 2**63 - 1).filter(lambda r: r % 1000 != 0).map(lambda r: Cell(r, bad="value")),
    )
    domains += [(pa.timestamp("ns", zone), nanos) for zone in (None, "UTC")]
    return domains, [pa.date32(), pa.int64()]


@dataclass(frozen=True)
class LandingFile:
    name: str
    write: Callable[[Path], None]
    rows: list[dict[str, Cell]]
    refusal: tuple[int | None, str] | None


@st.composite
def parquet_files(draw: st.DrawFn, schema: TableSchema, ids: Iterator[int]) -> LandingFile:
    """A Parquet file whose columns each have one of the physical types the column may
    arrive as; one file in three holds a refused type or value in one column."""
    partition = schema.partition_by[0] if schema.partition_by else None
    count = draw(st.integers(1, 4))
    columns: dict[str, pa.Array] = {"id": pa.array([next(ids) for _ in range(count)], pa.int64())}
    rows: list[dict[str, Cell]] = [{"id": Cell(v, v)} for v in columns["id"].to_pylist()]
    spoiled = draw(st.sampled_from([n for n, _ in COLUMNS])) if draw(st.integers(0, 2)) == 0 else None
    refusal: tuple[int | None, str] | None = None
    for name, kind in COLUMNS:
        domains, refused = file_domains(kind, name == partition)
        if name == spoiled:
            choice = draw(st.sampled_from(refused + [(arrow, d) for arrow, d in domains if d.bad is not None]))
        elif draw(st.integers(0, 9)) == 0:
            continue  # not in the file: null
        else:
            choice = draw(st.sampled_from(domains))
        if isinstance(choice, pa.DataType):  # a type the column refuses, whatever its values
            columns[name] = _some_values(choice, count)
            refusal = refusal or (None, name)
            continue
        arrow, domain = choice
        cells = _column_cells(draw, domain, count, name == spoiled)
        columns[name] = _array(arrow, cells)
        for row, cell in zip(rows, cells):
            row[name] = cell
        bad = next((k for k, c in enumerate(cells) if c.bad == "value"), None)
        if bad is not None:
            refusal = refusal or (bad, name)
    if refusal is None and partition is not None:
        bad = next((k for k, row in enumerate(rows) if row.get(partition, NULL).bad == "partition"), None)
        refusal = (bad, partition) if bad is not None else None
    table = pa.table(columns)
    # INT96 (Spark's legacy timestamps) holds nanoseconds, read at microseconds as Spark does:
    # drawn for the other units only, whose values it holds exactly.
    ts_type = table.schema.field("ts").type if "ts" in table.column_names else None
    int96 = draw(st.integers(0, 5)) == 0 and not (ts_type is not None and getattr(ts_type, "unit", "") == "ns")

    def write(path: Path) -> None:
        pq.write_table(table, path, use_deprecated_int96_timestamps=int96)

    return LandingFile(f"f{columns['id'][0].as_py()}.parquet", write, rows, refusal)


def _some_values(kind: pa.DataType, count: int) -> pa.Array:
    """A column of a refused type: a value of it, or nulls (refused all the same)."""
    samples: list[tuple[pa.DataType, Any]] = [
        (pa.int64(), 1),
        (pa.int8(), 1),
        (pa.float64(), 1.0),
        (pa.string(), "1"),
        (pa.date32(), dt.date(2024, 1, 1)),
        (pa.timestamp("us"), dt.datetime(2024, 1, 1)),
        (pa.decimal128(10, 2), decimal.Decimal("1.50")),
        (pa.timestamp("us", "UTC"), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
    ]
    sample = next(value for arrow, value in samples if arrow == kind)
    return pa.array([sample] + [None] * (count - 1), kind)


@st.composite
def text_files(draw: st.DrawFn, schema: TableSchema, ids: Iterator[int]) -> LandingFile:
    """A CSV or JSON-lines file of values every column takes (text is parsed by intake and
    loaded from that parse; ``test_file_types.py`` covers the refusals)."""
    partition = schema.partition_by[0] if schema.partition_by else None
    fmt = draw(st.sampled_from(["csv", "jsonl"]))
    rows: list[dict[str, Cell]] = []
    for _ in range(draw(st.integers(1, 4))):
        id_ = next(ids)
        row = {"id": Cell(id_, id_)}
        for name, kind in COLUMNS:
            row[name] = draw(_text_cell(kind, fmt, name == partition))
        rows.append(row)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["id", *(n for n, _ in COLUMNS)])
        for row in rows:
            writer.writerow([row["id"].sent, *(row[n].sent for n, _ in COLUMNS)])
        text = buffer.getvalue()
    else:
        text = "".join(json.dumps({n: c.sent for n, c in row.items()}) + "\n" for row in rows)

    def write(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    return LandingFile(f"f{rows[0]['id'].sent}.{fmt}", write, rows, None)


def _text_cell(declared: Primitive, fmt: str, partition: bool) -> st.SearchStrategy[Cell]:
    empty = "" if fmt == "csv" else None  # CSV's null, but for strings (there: "")
    kind = declared.kind
    if kind is ColumnType.decimal:
        values = _scaled(declared.precision or 0, declared.scale or 0)
        return st.just(Cell(empty, None)) | values.map(lambda v: Cell(format(v, "f"), v))
    if kind is ColumnType.binary:  # base64 (a CSV's empty field is an empty string: no bytes)
        return st.just(Cell(empty, b"" if fmt == "csv" else None)) | st.binary(max_size=8).map(
            lambda b: Cell(base64.b64encode(b).decode(), b)
        )
    if kind is ColumnType.timestamp_ntz:
        return st.just(Cell(empty, None)) | st.integers(MICROS_MIN, MICROS_MAX).map(
            lambda m: Cell((EPOCH + dt.timedelta(microseconds=m)).isoformat(timespec="microseconds"), m)
        )
    if kind is ColumnType.string:
        # (a line break is CSV's row end; a partition value names a directory: no NUL, not empty)
        chars = st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\x00" if partition else "\r\n")
        return st.text(chars, min_size=1 if partition else 0, max_size=6).map(lambda t: Cell(t, t))
    null = st.just(Cell(empty, None))
    if kind in INT_RANGES:
        return null | st.integers(*INT_RANGES[kind]).map(lambda v: Cell(v, v))
    if kind in (ColumnType.float32, ColumnType.float64):
        floats = st.floats(allow_nan=False, allow_infinity=fmt == "csv", width=32 if kind is ColumnType.float32 else 64)

        def number(f: float) -> Cell:
            return Cell(repr(f) if fmt == "csv" else f, f.hex())

        return null | floats.map(number)
    if kind is ColumnType.boolean:
        return null | st.booleans().map(lambda b: Cell(("true" if b else "false") if fmt == "csv" else b, b))
    if kind is ColumnType.date:
        return null | st.dates().map(lambda d: Cell(d.isoformat(), (d - EPOCH.date()).days))
    return null | st.integers(MICROS_MIN, MICROS_MAX).map(lambda m: Cell(_iso(m), m))


# -- reading a table back ------------------------------------------------------------------------
def canonical(table: pa.Table, schema: TableSchema) -> list[tuple]:
    """Rows in the model's canonical form, sorted by id."""
    columns = []
    for column in schema.columns:
        values = table.column(column.name)
        kind = column.type.kind
        if kind in (ColumnType.timestamp, ColumnType.timestamp_ntz):
            columns.append(values.cast(pa.int64()).to_pylist())
        elif kind is ColumnType.date:
            columns.append(values.cast(pa.int32()).to_pylist())
        elif kind in (ColumnType.float32, ColumnType.float64):
            columns.append([None if v is None else float(v).hex() for v in values.to_pylist()])
        else:
            columns.append(values.to_pylist())
    return sorted(zip(*columns), key=lambda row: row[0])


@pytest.fixture(scope="module")
def service(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    def spark_sink(settings: Settings):  # type: ignore[no-untyped-def]
        return make_sink("delta-rs", settings.warehouse_path, spark)

    with Harness(tmp_path_factory.mktemp("domain") / "data", sink=spark_sink) as harness:
        yield harness


_TABLES = itertools.count()


def _register(service: Harness, schema: TableSchema) -> str:
    name = f"domain_{next(_TABLES)}"
    body = {"name": name, "schema": schema.model_dump(mode="json", exclude_defaults=True)}
    r = service.post("/v1/admin/tables", token=OPERATOR, json=body)
    assert r.status_code == 201, r.text
    return name


def _answered(r: Any, refusal: tuple[int | None, str] | None) -> bool:
    """202 when the model takes everything, else a 422 naming its row and column; True when accepted."""
    if refusal is None:
        assert r.status_code == 202, r.text
        return True
    assert r.status_code == 422, r.text
    body = r.json()
    row, column = refusal
    assert body.get("column") == column, (refusal, body)
    if row is not None:
        assert body.get("row") == row and f"row {row}" in body["message"], (refusal, body)
    return False


def _read_back_three_ways(spark: Any, path: Path, schema: TableSchema, expected: list[tuple]) -> None:
    want = sorted(expected, key=lambda row: row[0])
    assert canonical(read_delta(path).select(schema.names), schema) == want
    assert canonical(read_duckdb_log(path, schema), schema) == want
    assert canonical(read_spark(spark, path, schema).select(schema.names), schema) == want


@settings(
    max_examples=examples(4),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(data=st.data())
@pytest.mark.parametrize("partition", [None, "s", "i64", "f32", "b", "d", "ts", "i8", "dz", "ntz"])
def test_what_intake_accepts_is_loaded_once_and_reads_back_unchanged(
    spark, service: Harness, partition: str | None, data: st.DataObject
) -> None:
    """``partition``: the table's partition column (each type names directories its own way)."""
    schema = table_schema(partition)
    table = _register(service, schema)
    ids = itertools.count(1)
    loaded: list[tuple] = []
    last = 0

    rows = data.draw(json_rows(schema, ids), label="rows")
    objects = ["{" + ", ".join(f"{json.dumps(n)}: {_json(c.sent)}" for n, c in row.items()) + "}" for row in rows]
    if data.draw(st.booleans(), label="ndjson"):
        body, media = "\n".join(objects), "application/x-ndjson"
    else:
        body, media = '{"rows": [' + ", ".join(objects) + "]}", "application/json"
    r = service.post(f"/v1/tables/{table}/updates", content=body.encode(), headers={"Content-Type": media})
    event(f"rows: {r.status_code}")
    if _answered(r, rows_refusal(rows, schema)):
        loaded += expected_rows(rows, schema)
        last = r.json()["updates"][0]["sequence"]

    files = data.draw(st.sampled_from([parquet_files, parquet_files, text_files]), label="format")
    file = data.draw(files(schema, ids), label="file")
    file.write(service.settings.landing_path / f"{table}-{file.name}")
    r = service.post(f"/v1/tables/{table}/updates", json={"files": [f"{table}-{file.name}"]})
    event(f"{Path(file.name).suffix} file: {r.status_code}")
    if _answered(r, file.refusal):
        loaded += expected_rows(file.rows, schema)
        last = r.json()["updates"][0]["sequence"]

    if last:
        service.wait_loaded(table, last, timeout=120)
        _read_back_three_ways(spark, service.settings.warehouse_path / table, schema, loaded)
        assert service.status(table)["failures"] == 0


#: Per column type, every Parquet type intake takes for it, each at its extremes.
EVERY_TAKEN_TYPE: dict[ColumnType, list[pa.Array]] = {
    ColumnType.string: [
        pa.array(["", "\x00", "\U0010ffff", None]),
        pa.array(["a" * 100, None], pa.large_string()),
        pa.array(["x", "y", "x"]).dictionary_encode(),
        pa.array([b"", "\u00e9".encode(), None], pa.binary()),
    ],
    ColumnType.int32: [
        pa.array([-(2**7), 2**7 - 1], pa.int8()),
        pa.array([-(2**15), 2**15 - 1], pa.int16()),
        pa.array([-(2**31), 2**31 - 1, None], pa.int32()),
        pa.array([0, 2**8 - 1], pa.uint8()),
        pa.array([0, 2**16 - 1], pa.uint16()),
        pa.array([-(2**31), 2**31 - 1], pa.int64()),
        pa.array([0, 2**31 - 1], pa.uint32()),
        pa.array([0, 2**31 - 1], pa.uint64()),
    ],
    ColumnType.int64: [
        pa.array([-(2**15), 2**15 - 1], pa.int16()),
        pa.array([-(2**31), 2**31 - 1], pa.int32()),
        pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
        pa.array([0, 2**8 - 1], pa.uint8()),
        pa.array([0, 2**16 - 1], pa.uint16()),
        pa.array([0, 2**32 - 1], pa.uint32()),
        pa.array([0, 2**63 - 1], pa.uint64()),
    ],
    ColumnType.float32: [
        pa.array([-(2**7), 2**7 - 1], pa.int8()),
        pa.array([0, 2**16 - 1], pa.uint16()),
        pa.array(
            [3.4028234663852886e38, -3.4028234663852886e38, 1.401298464324817e-45, -0.0, math.nan, math.inf, None],
            pa.float32(),
        ),
        pa.array([65504.0, -6e-08], pa.float16()),
        pa.array([3.4028234663852886e38, -1.401298464324817e-45, -math.inf], pa.float64()),
        pa.array([2**24, -(2**63)], pa.int64()),
    ],
    ColumnType.float64: [
        pa.array(
            [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -0.0, math.nan, -math.inf, None], pa.float64()
        ),
        pa.array([3.4028234663852886e38, 1.401298464324817e-45], pa.float32()),
        pa.array([65504.0], pa.float16()),
        pa.array([-(2**7), 2**7 - 1], pa.int8()),
        pa.array([-(2**15), 2**15 - 1], pa.int16()),
        pa.array([-(2**31), 2**31 - 1], pa.int32()),
        pa.array([0, 2**8 - 1], pa.uint8()),
        pa.array([0, 2**16 - 1], pa.uint16()),
        pa.array([0, 2**32 - 1], pa.uint32()),
        pa.array([2**53, -(2**63)], pa.int64()),
        pa.array([2**63], pa.uint64()),
    ],
    ColumnType.boolean: [pa.array([True, False, None])],
    ColumnType.date: [
        pa.array([DAYS_MIN, DAYS_MAX, None], pa.int32()).cast(pa.date32()),
        pa.array([DAYS_MIN * 86_400_000, DAYS_MAX * 86_400_000], pa.int64()).cast(pa.date64()),
    ],
    ColumnType.timestamp: [
        pa.array([MICROS_MIN, MICROS_MAX, None], pa.int64()).cast(pa.timestamp("us", "UTC")),
        pa.array([MICROS_MIN, MICROS_MAX], pa.int64()).cast(pa.timestamp("us")),
        pa.array([MICROS_MIN // 1000, MICROS_MAX // 1000], pa.int64()).cast(pa.timestamp("ms", "America/New_York")),
        pa.array([MICROS_MIN // 10**6, MICROS_MAX // 10**6], pa.int64()).cast(pa.timestamp("s", "+05:30")),
        pa.array([-(2**63) // 1000 * 1000 + 1000, (2**63 - 1) // 1000 * 1000], pa.int64()).cast(
            pa.timestamp("ns", "UTC")
        ),
        pa.array([0, 1000], pa.int64()).cast(pa.timestamp("ns")),
    ],
    ColumnType.int8: [
        pa.array([-(2**7), 2**7 - 1, None], pa.int8()),
        pa.array([-(2**7), 2**7 - 1], pa.int64()),
        pa.array([0, 2**7 - 1], pa.uint64()),
    ],
    ColumnType.int16: [
        pa.array([-(2**7), 2**7 - 1], pa.int8()),
        pa.array([-(2**15), 2**15 - 1, None], pa.int16()),
        pa.array([0, 2**8 - 1], pa.uint8()),
        pa.array([-(2**15), 2**15 - 1], pa.int32()),
    ],
    "decimal(38,9)": [
        pa.array(
            [decimal.Decimal("-" + "9" * 29 + "." + "9" * 9), decimal.Decimal("0E-9"), None], pa.decimal128(38, 9)
        ),
        pa.array([decimal.Decimal("1.5"), decimal.Decimal("-0.000000001")], pa.decimal128(10, 9)),
        pa.array([decimal.Decimal("12345678901234567.89")], pa.decimal128(19, 2)),
        pa.array([-(2**63), 2**63 - 1], pa.int64()),
        pa.array([0, 2**8 - 1], pa.uint8()),
    ],
    ColumnType.binary: [
        pa.array([b"", bytes(range(256)), None], pa.binary()),
        pa.array([b"\x00"], pa.large_binary()),
        pa.array([b"abcd"], pa.binary(4)),
    ],
    ColumnType.timestamp_ntz: [
        pa.array([MICROS_MIN, MICROS_MAX, None], pa.int64()).cast(pa.timestamp("us")),
        pa.array([MICROS_MIN // 1000, MICROS_MAX // 1000], pa.int64()).cast(pa.timestamp("ms")),
        pa.array([MICROS_MIN // 10**6, MICROS_MAX // 10**6], pa.int64()).cast(pa.timestamp("s")),
        pa.array([-(2**63) // 1000 * 1000 + 1000, (2**63 - 1) // 1000 * 1000], pa.int64()).cast(pa.timestamp("ns")),
    ],
}


def _canonical_source(values: pa.Array, declared: Primitive) -> list[Any]:
    """What a column taken from ``values`` must read back as, in canonical form."""
    kind = declared.kind
    if kind is ColumnType.decimal:
        return [None if v is None else decimal.Decimal(v) for v in values.to_pylist()]
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if kind is ColumnType.string:
        return [v.decode() if isinstance(v, bytes) else v for v in values.to_pylist()]
    if kind in (ColumnType.timestamp, ColumnType.timestamp_ntz):
        factor = {"s": 10**6, "ms": 1000, "us": 1, "ns": 1}[values.type.unit]
        return [
            None if v is None else (v // 1000 if values.type.unit == "ns" else v * factor)
            for v in values.cast(pa.int64()).to_pylist()
        ]
    if kind is ColumnType.date:
        days = values.cast(pa.date32()).cast(pa.int32())
        return days.to_pylist()
    if kind is ColumnType.float32:
        return [None if v is None else _float32(float(v)).hex() for v in values.to_pylist()]  # type: ignore[union-attr]
    if kind is ColumnType.float64:
        return [None if v is None else float(v).hex() for v in values.to_pylist()]
    return values.to_pylist()


@pytest.mark.parametrize("kind", list(EVERY_TAKEN_TYPE), ids=lambda k: getattr(k, "value", k))
def test_every_parquet_type_a_column_takes_loads_as_intake_read_it(spark, service: Harness, kind: str) -> None:
    """One update per table type naming one file per Parquet type the column takes (loaded as
    is, or converted by intake): one load, and every value reads back as the model says."""
    schema = TableSchema.model_validate(
        {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "v", "type": kind}]}
    )
    table = _register(service, schema)
    ids = itertools.count()
    names, expected = [], []
    for n, values in enumerate(EVERY_TAKEN_TYPE[kind]):
        column_ids = [next(ids) for _ in range(len(values))]
        name = f"{table}-{n}.parquet"
        pq.write_table(
            pa.table({"id": pa.array(column_ids, pa.int64()), "v": values}), service.settings.landing_path / name
        )
        names.append(name)
        expected += list(zip(column_ids, _canonical_source(values, schema.columns[1].type)))
    r = service.post(f"/v1/tables/{table}/updates", json={"files": names})
    assert r.status_code == 202, r.text
    service.wait_loaded(table, r.json()["updates"][0]["sequence"], timeout=120)
    _read_back_three_ways(spark, service.settings.warehouse_path / table, schema, expected)
