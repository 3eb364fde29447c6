"""NDJSON read as columns (loader/intake/columnar.py) accepts only what the row path accepts,
with the same values, and every refusal is the row path's own."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.core.errors import ServiceError
from loader.core.schema import TableSchema
from loader.intake.columnar import COLUMNS_FROM, read_json_rows, read_ndjson
from loader.intake.requests import parse_single
from loader.intake.rows import rows_to_arrow
from testing.depth import examples
from tests.loader.intake.test_nested_types import tables

NDJSON = "application/x-ndjson"
JSON = "application/json"
KINDS = (
    "string",
    "boolean",
    "int8",
    "int16",
    "int32",
    "int64",
    "float32",
    "float64",
    "date",
    "timestamp",
    "timestamp_ntz",
    "decimal(9,2)",
    "decimal(38,10)",
)


def row_path(body: bytes, schema: TableSchema, media: str = NDJSON) -> pa.Table | ServiceError:
    """What intake answered before columns: the rows parsed one by one, then checked."""
    try:
        request = parse_single(body, media, "t", None, schema.exact_numbers)
        if request.rows is None:
            raise AssertionError("the row path read no rows")
        return rows_to_arrow(request.rows, schema, "t")
    except ServiceError as exc:
        return exc


def column_path(body: bytes, schema: TableSchema, media: str = NDJSON) -> pa.Table | ServiceError | None:
    try:
        return (read_ndjson if media == NDJSON else read_json_rows)(body, schema, "t")
    except ServiceError as exc:
        return exc


def agree(body: bytes, schema: TableSchema, media: str = NDJSON) -> pa.Table | None:
    """The column path's table, asserting the row path gives the same (or the same error)."""
    fast = column_path(body, schema, media)
    if fast is None:
        return None
    slow = row_path(body, schema, media)
    if isinstance(fast, ServiceError):
        assert isinstance(slow, ServiceError) and (type(slow), slow.message) == (type(fast), fast.message)
        return None
    assert isinstance(slow, pa.Table), f"the columns took what the rows refuse: {slow}"
    assert fast.schema == slow.schema and fast.equals(slow), (fast.to_pylist(), slow.to_pylist())
    # (Arrow's equality takes -0.0 for 0.0: the signs of zeros compared too.)
    assert signed(fast.to_pylist()) == signed(slow.to_pylist())
    return fast


def signed(value: Any) -> Any:
    """``value`` with every float as (its sign, itself)."""
    if isinstance(value, float):
        return math.copysign(1.0, value), value
    if isinstance(value, dict):
        return {k: signed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [signed(v) for v in value]
    return value


def _schema(*columns: tuple[str, str, bool], partition: tuple[str, ...] = ()) -> TableSchema:
    return TableSchema.model_validate(
        {
            "columns": [{"name": n, "type": k, "nullable": nullable} for n, k, nullable in columns],
            "partition_by": list(partition),
        }
    )


EVENTS = _schema(
    ("id", "int64", False),
    ("user", "string", True),
    ("amount", "float64", True),
    ("score", "float32", True),
    ("ok", "boolean", True),
    ("day", "date", True),
    ("at", "timestamp", True),
    ("price", "decimal(9,2)", True),
)


def test_a_plain_body_is_read_as_columns_equal_to_the_rows() -> None:
    rows = [
        {
            "id": 1,
            "user": "a",
            "amount": 1.5,
            "score": 0.1,
            "ok": True,
            "day": "2026-11-28",
            "at": "2026-11-28T12:00:00.5Z",
            "price": "12.34",
        },
        {
            "id": 2,
            "user": None,
            "amount": 3,
            "score": 340282346638528859811704183484516925440,
            "day": "0001-01-01",
            "at": "2026-11-28T12:00:00",
            "price": 7,
        },
        {"id": 3, "at": "2026-11-28T12:00:00+05:30", "price": 0.5},
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    for form in (body, body + b"\n", body.replace(b"\n", b"\r\n") + b"\r\n"):
        assert agree(form, EVENTS) is not None, form
    for indent in (None, 2):
        assert agree(json.dumps({"rows": rows}, indent=indent).encode(), EVENTS, JSON) is not None, indent


@pytest.mark.parametrize(
    "body",
    [
        b'{"rows": [{"id": 1}], "data_until": 5}',  # the row path reads data_until
        b'{"rows": [{"id": 1}]} {"rows": [{"id": 2}]}',
        b'{"rows": [{"id": 1}, null]}',
        b'{"rows": []}',
        b'{"rows": null}',
        b'{"files": ["a.csv"]}',
        b'{"rows": [{"id": 1}], "rows": [{"id": 2}]}',
        b'[{"id": 1}]',
        b'{"rows": [{"id": 1, "amount": NaN}]}',
    ],
)
def test_a_json_body_with_more_than_its_rows_is_left_to_the_rows(body: bytes) -> None:
    assert column_path(body, EVENTS, JSON) is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": 1} {"id": 2}\n',  # two objects on a line: the rows' parser refuses it
        b'{"id":\n1}\n',  # an object over two lines
        b'{"id": 1}\r{"id": 2}\n',  # a lone CR ends a line for the rows
        b'{"id": 1, "amount": NaN}\n',
        b'{"id": 1, "amount": Infinity}\n',
        b'{"id": 1, "price": "+1.5"}\n',
        b'{"id": 1, "price": "1.234"}\n',
        b'{"id": 1, "id": 2}\n',  # duplicate keys: the last wins for the rows
        b'{"id": 1, "other": 2}\n',
        b'{"id": 1.0}\n',  # an integral float the rows take as 1
        b'{"id": 1, "at": 1764331200}\n',  # Unix seconds
        b'{"id": 1, "at": "2026-11-28 12:00:00Z"}\n',
        b'{"id": 1, "at": "0001-01-01T00:30:00+01:00"}\n',  # before year 1 in UTC
        b'{"id": 1, "day": "2026-02-30"}\n',
        b'{"id": 1, "day": "0000-01-01"}\n',
        b'{"id": 1, "user": "\xff"}\n',
        b'{"id": 1, "user": "\\ud800"}\n',
        b'{"id": null}\n',
        b"{}\n",
        b"\n",
        b'{"id": 1}\n\n{"id": 2}\n',
        b' {"id": 1}\n',
        b'[{"id": 1}]\n',
        b'{"id": 1, "score": 1e39}\n',
        b'{"id": 99999999999999999999}\n',
        b'{"id": 1, "price": 10000000}\n',  # 8 digits before the point of a decimal(9,2)
        b'{"id": 1, "price": "10000000.5"}\n',
        b'{"id": 1, "price": 2.394558133944942e-34}\n',  # pyarrow's reader rounds it to 0
        b'{"id": 1, "price": "2.394558133944942e-34"}\n',
        b'{"id": 1, "amount": -0}\n',  # the rows' +0.0 (an int has no sign), pyarrow's -0.0
        b'{"id": 1, "score": -0.0}\n',
    ],
)
def test_what_the_columns_cannot_tell_is_left_to_the_rows(body: bytes) -> None:
    """Each of these is either refused by the rows or read by them another way than
    pyarrow's reader would: the columns decline, and the rows decide."""
    assert column_path(body, EVENTS) is None


def test_a_partition_value_no_directory_holds_is_refused_as_the_rows_refuse_it() -> None:
    schema = _schema(("id", "int64", False), ("region", "string", True), partition=("region",))
    agree(b'{"id": 1, "region": "eu"}\n{"id": 2, "region": ""}\n', schema)
    assert isinstance(column_path(b'{"id": 2, "region": ""}\n', schema), ServiceError)


def test_a_table_of_binary_or_map_columns_is_read_row_by_row() -> None:
    for kind in ("binary", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}):
        schema = TableSchema.model_validate({"columns": [{"name": "id", "type": "long"}, {"name": "v", "type": kind}]})
        assert read_ndjson(b'{"id": 1}\n', schema, "t") is None


# -- the property: random flat schemas, values near and across each type's edges ------------------
def _values(kind: str) -> st.SearchStrategy[Any]:
    texts = st.sampled_from(
        [
            "2026-11-28",
            "2026-11-28T12:00:00",
            "2026-11-28T12:00:00Z",
            "2026-11-28T23:59:59.999999+14:00",
            "9999-12-31T23:59:59.999999",
            "0001-01-01T00:00:00Z",
            "2026-11-28T12:00:00.1234567Z",
            "2026-11-28T24:00:00",
            "2026-11-28 12:00:00",
            "2026-13-01",
            "12.34",
            "-0.5",
            "+1",
            "1e3",
            ".5",
            "abc",
            "",
            "é",
            "NaN",
            "true",
            "2026-11-28T12:00:00-00:00",
            "2026-11-28T12:00",
            "99999999999.99",
        ]
    )
    numbers = st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([0, -1, 127, 128, -129, 32767, 32768, 2**31, 2**63 - 1, 2**63, 1.0, 0.1, 3.4028236e38]),
        st.sampled_from([10**7, 9999999.99, 99999999.99, -(10**7) + 0.01, 10**28, 10**27 + 0.5, 2.5e-34]),
    )
    return st.one_of(st.none(), st.booleans(), numbers, texts, st.text(max_size=5))


@st.composite
def bodies(draw: st.DrawFn) -> tuple[TableSchema, bytes, str]:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=5))
    columns = [(f"c{k}", kind, draw(st.booleans())) for k, kind in enumerate(kinds)]
    schema = _schema(*columns)
    rows = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        row = {}
        for name, kind, _nullable in columns:
            if draw(st.integers(0, 9)) < 8:
                # Mostly values of the column's own kind, so that whole bodies pass.
                row[name] = draw(_values(kind)) if draw(st.booleans()) else draw(_valid(kind))
        rows.append(row)
    if draw(st.booleans()):
        indent = draw(st.sampled_from([None, 1]))
        return schema, json.dumps({"rows": rows}, indent=indent).encode(), JSON
    lines = [json.dumps(r) for r in rows]
    joiner = draw(st.sampled_from(["\n", "\r\n", "\n", " ", "\n\n", "\r"]))
    body = joiner.join(lines) + draw(st.sampled_from(["", "\n", "\r\n", " "]))
    return schema, body.encode(), NDJSON


def _valid(kind: str) -> st.SearchStrategy[Any]:
    if kind.startswith("int"):
        bits = int(kind[3:])
        return st.integers(min_value=-(2 ** (bits - 1)), max_value=2 ** (bits - 1) - 1)
    if kind.startswith("float"):
        return st.floats(allow_nan=False, allow_infinity=False, width=32 if kind == "float32" else 64)
    if kind.startswith("decimal"):
        return st.decimals(min_value=-9999999, max_value=9999999, places=2).map(str)
    return {
        "string": st.text(max_size=8),
        "boolean": st.booleans(),
        "date": st.dates().map(str),
        "timestamp": st.datetimes().map(lambda d: d.isoformat() + "Z"),
        "timestamp_ntz": st.datetimes().map(lambda d: d.isoformat()),
    }[kind]


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_the_columns_accept_only_what_the_rows_accept_with_the_same_values(
    drawn: tuple[TableSchema, bytes, str],
) -> None:
    schema, body, media = drawn
    agree(body, schema, media)


def test_a_decimal_tables_body_with_hex_text_or_escapes_is_still_read_as_columns() -> None:
    """Only a number with an exponent (or a string that is one) sends it to the rows."""
    body = b'{"id": 1, "user": "3e5f\\u00e9", "price": 12.5}\n{"id": 2, "user": "1e5x", "price": "7"}\n'
    assert agree(body, EVENTS) is not None


def test_a_json_body_over_several_of_the_readers_blocks_is_read_as_columns() -> None:
    row = {"id": 1, "user": "a" * 100, "amount": 1.5, "ok": True, "day": "2026-11-28", "at": "2026-11-28T12:00:00Z"}
    body = json.dumps({"rows": [row] * 20_000}).encode()
    assert len(body) > 2 << 20 and agree(body, EVENTS, JSON) is not None


def test_intake_reads_a_large_body_as_columns_and_a_small_one_row_by_row() -> None:
    """pyarrow's reader costs more than the rows' own checks below ``COLUMNS_FROM`` bytes."""
    row = {"id": 1, "user": "a", "amount": 1.5, "ok": True, "day": "2026-11-28", "at": "2026-11-28T12:00:00Z"}
    small = json.dumps(row).encode()
    large = b"\n".join([small] * (COLUMNS_FROM // len(small) + 1))
    for body, media in ((large, NDJSON), (b'{"rows": [' + large.replace(b"\n", b",") + b"]}", JSON)):
        read = parse_single(body, media, "t", None, schema=EVENTS)
        assert read.rows is None and read.columns is not None and read.columns.equals(row_path(body, EVENTS, media))
        assert parse_single(small, NDJSON, "t", None, schema=EVENTS).columns is None


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.booleans())
def test_nested_rows_read_as_columns_are_the_rows_own(drawn: tuple, as_object: bool) -> None:
    """Random nested schemas (structs and lists of every type; maps and binary leaves decline)
    and their rows: what the columns take, the rows take with the same values."""
    schema, sent, _ = drawn
    if as_object:
        agree(json.dumps({"rows": sent}).encode(), schema, JSON)
    else:
        agree("\n".join(json.dumps(row) for row in sent).encode(), schema)


def test_a_nested_row_is_read_as_columns_with_its_not_null_parts_checked() -> None:
    line = {"type": "struct", "fields": [{"name": "sku", "type": "string", "nullable": False, "metadata": {}}]}
    items = {"type": "array", "elementType": line, "containsNull": False}
    schema = TableSchema.model_validate({"columns": [{"name": "id", "type": "long"}, {"name": "items", "type": items}]})
    good = b'{"id": 1, "items": [{"sku": "a"}, {"sku": "b"}]}\n{"id": 2, "items": null}\n{"id": 3, "items": []}\n'
    assert agree(good, schema) is not None
    nulls = (b'{"id": 1, "items": [{"sku": null}]}\n', b'{"id": 1, "items": [{}]}\n', b'{"id": 1, "items": [null]}\n')
    for bad in nulls:
        assert column_path(bad, schema) is None and isinstance(row_path(bad, schema), ServiceError)
    split = b'{"id": 1, "items": [{"sku": "a"}\n,{"sku": "b"}]}\n'  # a row over two lines
    assert column_path(split, schema) is None
