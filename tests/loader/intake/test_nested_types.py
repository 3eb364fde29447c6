"""Nested struct, array and map columns at intake (loader/intake/rows.py, file_types.py) and in
the tables they land in.

What matters: every value at every depth is checked by its own type's rules (decimals exact,
no NaN, timestamps in range, a NOT NULL field or element, a map key never null and never
repeated), and a refusal names the path to the value (``items[3].sku: expected a string, got
7``); a Parquet landing file's nested column is taken when it has the table's shape, its values
checked alike; and what intake accepts is what a Delta table written by deltalake holds, read
back by deltalake and DuckDB, exactly (a property over random schemas of depth up to 4 and
random rows).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.core.errors import Invalid
from loader.core.schema import (
    INT_RANGES,
    Array,
    ColumnType,
    DataTypeValue,
    Map,
    Primitive,
    Struct,
    StructField,
    TableSchema,
    parse_type,
)
from loader.intake.landing import accept_files
from loader.intake.requests import check_expansion, parse_multi, parse_single
from loader.intake.rows import rows_to_arrow
from loader.loading.sinks.delta_table import create_table
from testing.depth import examples
from testing.tables import loosened_schema, read_delta, read_duckdb

D = decimal.Decimal
UTC = dt.UTC

LINE = {
    "type": "struct",
    "fields": [
        {"name": "sku", "type": "string", "nullable": False, "metadata": {}},
        {"name": "qty", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "price", "type": "decimal(9,2)", "nullable": True, "metadata": {}},
    ],
}
ORDERS = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "long", "nullable": False},
            {"name": "items", "type": {"type": "array", "elementType": LINE, "containsNull": False}},
            {
                "name": "attrs",
                "type": {"type": "map", "keyType": "string", "valueType": "date", "valueContainsNull": False},
            },
            {
                "name": "by_day",
                "type": {
                    "type": "map",
                    "keyType": "date",
                    "valueType": {"type": "array", "elementType": "timestamp_ntz", "containsNull": True},
                },
            },
        ]
    }
)


def convert(rows: list[Any], schema: TableSchema = ORDERS) -> pa.Table:
    """Rows as intake reads them from a body: numbers exact where the schema has a decimal."""
    body = json.dumps({"rows": rows}).encode()
    return rows_to_arrow(parse_single(body, "application/json", "t", None, schema.exact_numbers).rows, schema, "t")


def test_nested_rows_become_the_tables_arrow_types() -> None:
    rows = [
        {
            "id": 1,
            "items": [{"sku": "a", "qty": 2, "price": "1.50"}, {"sku": "b", "price": 0.1}],
            "attrs": {"made": "2024-03-10"},
            "by_day": [{"key": "2024-01-01", "value": ["2024-01-01T02:30:00", None]}, {"key": "2024-01-02"}],
        },
        {"id": 2, "items": [], "attrs": None},
    ]
    data = convert(rows)
    assert data.schema == ORDERS.arrow()
    assert data.to_pylist() == [
        {
            "id": 1,
            "items": [{"sku": "a", "qty": 2, "price": D("1.50")}, {"sku": "b", "qty": None, "price": D("0.10")}],
            "attrs": [("made", dt.date(2024, 3, 10))],
            "by_day": [
                (dt.date(2024, 1, 1), [dt.datetime(2024, 1, 1, 2, 30), None]),
                (dt.date(2024, 1, 2), None),
            ],
        },
        {"id": 2, "items": [], "attrs": None, "by_day": None},
    ]


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ({"items": [{"sku": "a"}] * 3 + [{"sku": 7}]}, "items[3].sku", "expected a string, got 7"),
        ({"items": [{"sku": "a", "price": "1.005"}]}, "items[0].price", "more than the 2 digits after the point"),
        ({"items": [{"sku": "a", "price": "NaN"}]}, "items[0].price", "expected a decimal number"),
        ({"items": [{"sku": "a", "price": "1e400"}]}, "items[0].price", "more than the 7 digits before the point"),
        ({"items": [{"qty": 1}]}, "items[0].sku", "required (not nullable) but missing"),
        ({"items": [{"sku": "a", "colour": "red"}]}, "items[0]", 'unknown field "colour"'),
        ({"items": [None]}, "items[0]", "containsNull is false"),
        ({"items": {"sku": "a"}}, "", "expected a JSON array"),
        ({"attrs": {"made": None}}, 'attrs["made"]', "valueContainsNull is false"),
        ({"attrs": {"made": "2024-02-30"}}, 'attrs["made"]', "expected a date YYYY-MM-DD"),
        ({"by_day": [{"key": None, "value": []}]}, "by_day[0]", "a map key is null"),
        ({"by_day": [{"value": []}]}, "by_day[0]", 'expected an entry {"key": ..., "value": ...}'),
        ({"by_day": [{"key": "2024-01-01"}, {"key": "2024-01-01"}]}, "by_day[1]", "repeats"),
        ({"by_day": {"2024-01-01": []}}, "", 'JSON array of {"key": ..., "value": ...} entries'),
        ({"by_day": [{"key": "2024-01-01", "value": ["2024-01-01T00:00:00Z"]}]}, "by_day[0][0]", "UTC offset"),
        ({"by_day": [{"key": "x", "value": []}]}, "by_day[0]", "key: expected a date"),
    ],
)
def test_a_bad_value_at_any_depth_is_refused_naming_its_path(value: dict, path: str, fragment: str) -> None:
    rows = [{"id": 0}, {"id": 1, **value}]
    with pytest.raises(Invalid) as refused:
        convert(rows)
    message = refused.value.message
    column = next(iter(value))
    assert refused.value.details["row"] == 1 and refused.value.details["column"] == column
    assert fragment in message, message
    if path:
        assert f"row 1 of table 't': column {column!r}: {path}: " in message, message
        assert refused.value.details["path"] == path


def test_a_map_of_non_string_keys_takes_no_json_object_and_map_keys_are_exact() -> None:
    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "m", "type": {"type": "map", "keyType": "decimal(5,1)", "valueType": "binary"}},
            ]
        }
    )
    data = convert([{"m": [{"key": "1.0", "value": "AP8="}, {"key": 2, "value": None}]}], schema)
    assert data.column("m").to_pylist() == [[(D("1.0"), b"\x00\xff"), (D("2.0"), None)]]
    with pytest.raises(Invalid, match=r"m\[1\]: key 1.0 repeats"):
        convert([{"m": [{"key": "1.0", "value": None}, {"key": 1.00, "value": None}]}], schema)


def test_the_memory_estimate_counts_every_element() -> None:
    """A wide struct inside an array costs its width per element: a body of small elements
    cannot ask for more memory than the limit (413 before conversion)."""
    wide = {"type": "struct", "fields": [{"name": f"f{i}", "type": "decimal(38,0)"} for i in range(200)]}
    schema = TableSchema.model_validate({"columns": [{"name": "a", "type": {"type": "array", "elementType": wide}}]})
    request = parse_single(json.dumps({"rows": [{"a": [{}] * 2000}]}).encode(), "application/json", "t", None)
    body = len(json.dumps({"rows": [{"a": [{}] * 2000}]}))
    for length in (None, body):  # the bound by the body's length never lets it through
        with pytest.raises(Exception, match="rows of this request would take about"):
            check_expansion([request], {"t": schema}, max_body_bytes=1 << 16, body_bytes=length)
        check_expansion([request], {"t": schema}, max_body_bytes=16 << 20, body_bytes=length)


SIMPLE = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "long", "nullable": False},
            {
                "name": "user",
                "type": {
                    "type": "struct",
                    "fields": [
                        {"name": "name", "type": "string", "nullable": False, "metadata": {}},
                        {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": False}},
                    ],
                },
            },
            {"name": "scores", "type": {"type": "map", "keyType": "string", "valueType": "double"}},
        ]
    }
)


def test_many_rows_of_checkable_nested_types_take_the_column_checks_and_still_name_a_bad_value() -> None:
    """From FAST_MIN_ROWS rows on, nested columns of checkable types are checked column by
    column and built by pyarrow: the same table as value by value, and any bad value sends
    the rows value by value, which names it."""
    rows = [
        {"id": k, "user": {"name": f"u{k}", "tags": ["a", "b"][: k % 3]}, "scores": {"x": k * 0.5}} for k in range(12)
    ]
    rows[3]["user"] = None
    fast = rows_to_arrow(rows, SIMPLE, "t")
    assert fast.to_pylist()[0] == {"id": 0, "user": {"name": "u0", "tags": []}, "scores": [("x", 0.0)]}
    one_by_one = [rows_to_arrow([r], SIMPLE, "t").to_pylist()[0] for r in rows]  # (value by value)
    assert fast.equals(pa.Table.from_pylist(one_by_one, SIMPLE.arrow()))
    for bad, path in (
        ({"name": "u", "tags": ["a", None]}, "user.tags[1]"),
        ({"tags": []}, "user.name"),
        ({"name": "u", "tags": [], "extra": 1}, "user"),
    ):
        broken = [*rows[:9], {"id": 9, "user": bad}, *rows[10:]]
        with pytest.raises(Invalid, match=r"row 9 .*" + path.replace("[", r"\[").replace(".", r"\.")):
            rows_to_arrow(broken, SIMPLE, "t")


# -- landing files -------------------------------------------------------------------------------
def _take(tmp_path: Path, values: pa.Array, schema: TableSchema = ORDERS, column: str = "items") -> Path:
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(range(len(values)), pa.int64()), column: values}), landing / "f.parquet")
    (ref,) = accept_files(["f.parquet"], landing, owned, schema, "t")
    return Path(ref.path)


def test_a_parquet_file_of_the_tables_nested_shape_is_taken_and_checked(tmp_path: Path) -> None:
    items = ORDERS.arrow().field("items").type
    good = pa.array([[{"sku": "a", "qty": 1, "price": D("1.25")}], None, []], items)
    path = _take(tmp_path / "1", good)
    assert pq.read_table(path).column("items").to_pylist() == good.to_pylist()
    # The same shape with every field nullable in the file: taken, its nulls checked value by value.
    loose = pa.list_(
        pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int32()), pa.field("price", pa.decimal128(9, 2))])
    )
    taken = _take(tmp_path / "2", pa.array([[{"sku": "a", "qty": None, "price": None}]], loose))
    assert pq.read_table(taken).column("items").type == items  # written again with the table's type
    with pytest.raises(Invalid) as refused:
        _take(tmp_path / "3", pa.array([[{"sku": "a"}], [{"sku": "b"}, {"sku": None}]], loose))
    assert "row 1: column 'items': items[].sku: null, but the field is not nullable" in refused.value.message
    with pytest.raises(Invalid) as refused:
        _take(tmp_path / "4", pa.array([[{"sku": "a"}, None]], loose))
    assert "items[1]: a null element, but containsNull is false" in refused.value.message
    wrong = pa.list_(
        pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int64()), pa.field("price", pa.decimal128(9, 2))])
    )
    with pytest.raises(Invalid, match=r"items\[\].qty: int64 in the file, int32 in the table"):
        _take(tmp_path / "5", pa.array([[{"sku": "a", "qty": 1}]], wrong))
    late = pa.array(
        [[(dt.date(2024, 1, 1), [253402300800 * 10**6])]], pa.map_(pa.date32(), pa.list_(pa.timestamp("us")))
    )
    with pytest.raises(Invalid, match=r"row 0: column 'by_day': by_day\{value\}\[\]: 10000-01-01T00:00:00.000000"):
        _take(tmp_path / "6", late, column="by_day")


# -- the property: what intake takes is what the table holds, in every reader ---------------------
PRIMITIVES = [
    "string",
    "binary",
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "boolean",
    "date",
    "timestamp",
    "timestamp_ntz",
]
NAMES = st.sampled_from(["a", "b", "c", "d", "e"])


def primitive_types() -> st.SearchStrategy[DataTypeValue]:
    decimals = st.builds(lambda p, s: parse_type(f"decimal({p},{min(s, p)})"), st.integers(1, 38), st.integers(0, 38))
    return st.one_of(st.sampled_from(PRIMITIVES).map(parse_type), decimals)


def nested_types(depth: int) -> st.SearchStrategy[DataTypeValue]:
    if depth == 0:
        return primitive_types()
    inner = nested_types(depth - 1)
    structs = st.lists(st.tuples(NAMES, inner, st.booleans()), min_size=1, max_size=3, unique_by=lambda f: f[0]).map(
        lambda fields: Struct(tuple(StructField(n, t, nullable) for n, t, nullable in fields))
    )
    arrays = st.builds(Array, inner, st.booleans())
    maps = st.builds(Map, primitive_types(), inner, st.booleans())
    return st.one_of(primitive_types(), structs, arrays, maps)


def _decimals(kind: Primitive) -> st.SearchStrategy[D]:
    """Every decimal of the type, from its unscaled digits (exact: no 28-digit context)."""
    precision, scale = kind.precision or 1, kind.scale or 0
    exact = decimal.Context(prec=80)
    digits = st.integers(-(10**precision) + 1, 10**precision - 1)
    return digits.map(lambda unscaled: D(unscaled).scaleb(-scale, context=exact))


#: Each primitive's values as (what a JSON row gives, what a reader reads back); built once.
_PRIMITIVE_VALUES: dict[ColumnType, st.SearchStrategy[tuple[Any, Any]]] = {
    **{k: st.integers(*r).map(lambda v: (v, v)) for k, r in INT_RANGES.items()},
    ColumnType.string: st.text(max_size=4).map(lambda v: (v, v)),
    ColumnType.binary: st.binary(max_size=4).map(lambda v: (base64.b64encode(v).decode(), v)),
    ColumnType.float32: st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda v: (v, v)),
    ColumnType.float64: st.floats(allow_nan=False, allow_infinity=False).map(lambda v: (v, v)),
    ColumnType.boolean: st.booleans().map(lambda v: (v, v)),
    ColumnType.date: st.dates().map(lambda v: (v.isoformat(), v)),
    ColumnType.timestamp: st.datetimes(timezones=st.just(UTC)).map(lambda v: (v.isoformat(), v)),
    ColumnType.timestamp_ntz: st.datetimes().map(lambda v: (v.isoformat(), v)),
}


def draw_value(draw: st.DrawFn, kind: DataTypeValue, nullable: bool) -> tuple[Any, Any]:
    """(the value as a JSON row gives it, the value a reader reads back), drawn level by level
    (a strategy per schema would be built and validated anew for every example)."""
    if nullable and draw(st.integers(0, 4)) == 0:
        return None, None
    if isinstance(kind, Struct):
        got = [(f.name, draw_value(draw, f.type, f.nullable)) for f in kind.fields]
        return {n: j for n, (j, _) in got}, {n: v for n, (_, v) in got}
    if isinstance(kind, Array):
        got = [draw_value(draw, kind.element, kind.contains_null) for _ in range(draw(st.integers(0, 3)))]
        return [j for j, _ in got], [v for _, v in got]
    if isinstance(kind, Map):
        entries, seen = [], set()
        for _ in range(draw(st.integers(0, 3))):
            key = draw_value(draw, kind.key, False)
            if key[1] in seen:
                continue
            seen.add(key[1])
            entries.append((key, draw_value(draw, kind.value_type, kind.value_contains_null)))
        return [{"key": k[0], "value": v[0]} for k, v in entries], [(k[1], v[1]) for k, v in entries]
    if kind.kind is ColumnType.decimal:
        number = draw(_decimals(kind))
        return str(number), number
    return draw(_PRIMITIVE_VALUES[kind.kind])


@st.composite
def tables(draw: st.DrawFn) -> tuple[TableSchema, list[dict[str, Any]], list[dict[str, Any]]]:
    columns = draw(st.lists(st.tuples(nested_types(4), st.booleans()), min_size=1, max_size=3))
    schema = TableSchema.model_validate(
        {
            "columns": [{"name": "id", "type": "long", "nullable": False}]
            + [{"name": f"c{i}", "type": t, "nullable": n} for i, (t, n) in enumerate(columns)]
        }
    )
    sent, want = [], []
    for i in range(draw(st.integers(1, 10))):  # from 8 on, the column checks
        row = [draw_value(draw, c.type, c.nullable) for c in schema.columns[1:]]
        sent.append({"id": i, **{f"c{k}": j for k, (j, _) in enumerate(row)}})
        want.append({"id": i, **{f"c{k}": v for k, (_, v) in enumerate(row)}})
    return schema, sent, want


def _equal(got: Any, want: Any) -> bool:
    """Equal values, floats bit for bit (-0.0 is not 0.0) and decimals digit for digit."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_equal(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_equal(g, w) for g, w in zip(got, want))
    if isinstance(want, float):
        return isinstance(got, float) and (got == want and str(got) == str(want))
    if isinstance(want, D):
        return isinstance(got, D) and got == want
    return got == want and type(got) is type(want)


@settings(
    max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(tables())
def test_random_nested_tables_hold_exactly_what_was_sent(
    tmp_path_factory: pytest.TempPathFactory, drawn: tuple
) -> None:
    schema, sent, want = drawn
    data = convert(sent, schema)
    # Every intake form takes the rows to the same table: NDJSON, the multi-table route, and
    # a Parquet and a JSON-lines landing file of them (the JSON body is ``convert``'s).
    exact = schema.exact_numbers
    ndjson = "\n".join(json.dumps(row) for row in sent).encode()
    forms = {"ndjson": parse_single(ndjson, "application/x-ndjson", "t", None, exact).rows}
    multi = json.dumps({"updates": [{"table": "t", "rows": sent}]}).encode()
    forms["multi"] = parse_multi(multi, "application/json", exact=exact)[0].rows
    for form, rows in forms.items():
        assert rows_to_arrow(rows, schema, "t").equals(data), form
    landing = tmp_path_factory.mktemp("landing")
    pq.write_table(data, landing / "rows.parquet")
    (landing / "rows.jsonl").write_bytes(ndjson)
    for name in ("rows.parquet", "rows.jsonl"):
        (ref,) = accept_files([name], landing, landing / "owned", schema, "t")
        assert _equal(pq.read_table(ref.path).to_pylist(), data.to_pylist()), name
    path = tmp_path_factory.mktemp("nested") / "t"
    create_table(path, schema.arrow())
    write_deltalake(str(path), data, mode="append")
    assert read_delta(path).schema == schema.arrow()
    for reader in (read_delta, read_duckdb):
        back = reader(path).select(schema.names).cast(loosened_schema(schema.arrow()))
        got = sorted(back.to_pylist(), key=lambda r: r["id"])
        assert _equal(got, want), (reader.__name__, got, want)


def test_a_csv_file_carries_no_nested_column_but_may_leave_it_out(tmp_path: Path) -> None:
    schema = TableSchema.model_validate(
        {"columns": [{"name": "id", "type": "long"}, {"name": "items", "type": {"type": "array", "elementType": LINE}}]}
    )
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir()
    (landing / "with.csv").write_text("id,items\n1,x\n", encoding="utf-8")
    (landing / "without.csv").write_text("id\n1\n", encoding="utf-8")
    with pytest.raises(Invalid, match="which a CSV landing file does not carry; send the file as JSON lines"):
        accept_files(["with.csv"], landing, owned, schema, "t")
    (ref,) = accept_files(["without.csv"], landing, owned, schema, "t")
    assert pq.read_table(ref.path).to_pylist() == [{"id": 1, "items": None}]


def test_a_json_lines_file_carries_nested_columns_checked_as_ndjson_rows_are(tmp_path: Path) -> None:
    """Its lines are NDJSON rows: maps from objects, decimals exact inside structs, and a bad
    value named by the file, its row and its path; a line that is not JSON names its line."""
    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "id", "type": "long"},
                {"name": "items", "type": {"type": "array", "elementType": LINE}},
                {"name": "attrs", "type": {"type": "map", "keyType": "string", "valueType": "decimal(6,2)"}},
            ]
        }
    )
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir()
    (landing / "good.jsonl").write_text(
        '{"id": 1, "items": [{"sku": "a"}], "attrs": {"w": "1234.56"}}\n\n{"id": 2}\n', encoding="utf-8"
    )
    (ref,) = accept_files(["good.jsonl"], landing, owned, schema, "t")
    assert pq.read_table(ref.path).to_pylist() == [
        {"id": 1, "items": [{"sku": "a", "qty": None, "price": None}], "attrs": [("w", decimal.Decimal("1234.56"))]},
        {"id": 2, "items": None, "attrs": None},
    ]
    (landing / "bad.jsonl").write_text('{"id": 1}\n{"id": 2, "items": [{"sku": 7}]}\n', encoding="utf-8")
    with pytest.raises(Invalid, match=r'file "bad.jsonl": row 1 .*items\[0\]\.sku: expected a string, got 7') as bad:
        accept_files(["bad.jsonl"], landing, owned, schema, "t")
    assert bad.value.details["file"] == "bad.jsonl" and bad.value.details["path"] == "items[0].sku"
    (landing / "torn.jsonl").write_text('{"id": 1}\n{"id": \n', encoding="utf-8")
    with pytest.raises(Invalid, match=r'file "torn.jsonl": line 2 is not valid JSON'):
        accept_files(["torn.jsonl"], landing, owned, schema, "t")
    assert [p.name for p in owned.iterdir()] == [Path(ref.path).name]


