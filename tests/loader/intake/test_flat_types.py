"""The flat types of issue 35 at intake: int8, int16, decimal(p,s), binary and timestamp_ntz,
declared by the loader's short names or Delta's, in JSON rows (decimals parsed from their
text, never through a float) and in landing files."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from loader.core.errors import Invalid
from loader.core.schema import ColumnType, Primitive, TableSchema, parse_type
from loader.intake.landing import accept_files, read_landing_file
from loader.intake.requests import parse_multi, parse_single
from loader.intake.rows import rows_to_arrow

D = decimal.Decimal


def _schema(kind: str, partition: bool = False) -> TableSchema:
    return TableSchema.model_validate(
        {
            "columns": [{"name": "k", "type": "int64", "nullable": False}, {"name": "v", "type": kind}],
            "partition_by": ["v"] if partition else [],
        }
    )


# -- declarations ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "declared,canonical,arrow,spark",
    [
        ("byte", "int8", pa.int8(), "TINYINT"),
        ("int8", "int8", pa.int8(), "TINYINT"),
        ("short", "int16", pa.int16(), "SMALLINT"),
        ("integer", "int32", pa.int32(), "INT"),
        ("long", "int64", pa.int64(), "BIGINT"),
        ("float", "float32", pa.float32(), "FLOAT"),
        ("double", "float64", pa.float64(), "DOUBLE"),
        ("decimal(10,2)", "decimal(10,2)", pa.decimal128(10, 2), "DECIMAL(10,2)"),
        ("decimal(38, 0)", "decimal(38,0)", pa.decimal128(38, 0), "DECIMAL(38,0)"),
        ("binary", "binary", pa.binary(), "BINARY"),
        ("timestamp_ntz", "timestamp_ntz", pa.timestamp("us"), "TIMESTAMP_NTZ"),
        ("timestamp", "timestamp", pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
        ("date", "date", pa.date32(), "DATE"),
        ("boolean", "boolean", pa.bool_(), "BOOLEAN"),
        ("string", "string", pa.string(), "STRING"),
    ],
)
def test_short_and_delta_names_declare_the_same_type(declared: str, canonical: str, arrow: pa.DataType, spark: str):
    kind = _schema(declared).columns[1].type
    assert (kind.value, kind.arrow, kind.spark) == (canonical, arrow, spark)
    assert _schema(declared).model_dump(mode="json")["columns"][1]["type"] == canonical
    assert TableSchema.model_validate_json(_schema(declared).model_dump_json()) == _schema(declared)


def test_a_delta_schema_string_declares_its_primitive_types():
    """A table's schema pasted from its log (``schemaString``) names these types as Delta does."""
    from deltalake import Schema

    arrow = pa.schema(
        [
            ("a", pa.int8()),
            ("b", pa.int16()),
            ("c", pa.decimal128(12, 3)),
            ("d", pa.binary()),
            ("e", pa.timestamp("us")),
        ]
    )
    fields = json.loads(Schema.from_arrow(arrow).to_json())["fields"]
    schema = TableSchema.model_validate({"columns": [{"name": f["name"], "type": f["type"]} for f in fields]})
    assert schema.arrow() == arrow


@pytest.mark.parametrize(
    "declared,message",
    [
        ("decimal(39,2)", "precision 39 must be 1 to 38"),
        ("decimal(0,0)", "precision 0 must be 1 to 38"),
        ("decimal(5,6)", "scale 6 must be 0 to the precision"),
        ("decimal", "needs its precision and scale"),
        ("int128", "unknown column type 'int128'"),
        ({"type": "struct", "fields": []}, "a struct type.s fields must be a list of at least one field"),
    ],
)
def test_a_type_outside_the_vocabulary_is_refused_naming_it(declared: object, message: str):
    with pytest.raises(ValidationError, match=message):
        _schema(declared)  # type: ignore[arg-type]


def test_binary_and_fractional_decimal_partition_columns_are_refused_at_registration():
    with pytest.raises(ValidationError, match="binary, which Spark cannot partition by"):
        _schema("binary", partition=True)
    with pytest.raises(ValidationError, match="partition by a decimal of scale 0"):
        _schema("decimal(10,2)", partition=True)
    for kind in ("byte", "short", "decimal(20,0)", "timestamp_ntz"):
        assert _schema(kind, partition=True).partition_by == ("v",)


def test_parse_type_is_the_identity_on_a_parsed_type():
    kind = parse_type("decimal(7,3)")
    assert parse_type(kind) is kind and kind == Primitive(ColumnType.decimal, 7, 3)


# -- JSON rows -----------------------------------------------------------------------------------
def _one(kind: str, value: object) -> object:
    return rows_to_arrow([{"k": 1, "v": value}], _schema(kind), "t").column("v")[0].as_py()


def _refusal(kind: str, value: object) -> str:
    with pytest.raises(Invalid) as info:
        rows_to_arrow([{"k": 0}, {"k": 1, "v": value}], _schema(kind), "t")
    assert (info.value.details["row"], info.value.details["column"]) == (1, "v")
    return str(info.value)


@pytest.mark.parametrize(
    "kind,value,expected",
    [
        ("int8", -128, -128),
        ("int8", 127.0, 127),
        ("int16", -(2**15), -(2**15)),
        ("int16", 2**15 - 1, 2**15 - 1),
        ("decimal(19,2)", "12345678901234567.89", D("12345678901234567.89")),
        ("decimal(19,2)", D("12345678901234567.89"), D("12345678901234567.89")),
        ("decimal(5,1)", "1.50", D("1.5")),
        ("decimal(5,1)", "-1.5E+2", D("-150.0")),
        ("decimal(5,1)", 7, D("7.0")),
        ("decimal(38,38)", "0." + "9" * 38, D("0." + "9" * 38)),
        ("decimal(38,0)", str(10**38 - 1), D(10**38 - 1)),
        ("decimal(3,0)", "0E+999999", D(0)),
        ("binary", "", b""),
        ("binary", base64.b64encode(bytes(range(256))).decode(), bytes(range(256))),
        ("timestamp_ntz", "2024-03-10T02:30:00", dt.datetime(2024, 3, 10, 2, 30)),
        ("timestamp_ntz", "0001-01-01T00:00:00.000000", dt.datetime(1, 1, 1)),
        ("timestamp_ntz", "9999-12-31 23:59:59.9999990", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ],
)
def test_a_json_value_of_a_new_type_is_taken_exactly(kind: str, value: object, expected: object):
    assert _one(kind, value) == expected


@pytest.mark.parametrize(
    "kind,value,why",
    [
        ("int8", 128, "128 is out of range for int8"),
        ("int16", -(2**15) - 1, "out of range for int16"),
        ("int8", 1.5, "expected an integer"),
        ("decimal(5,1)", "1.55", "more than the 1 digits after the point"),
        ("decimal(5,1)", "10000", "more than the 4 digits before the point"),
        ("decimal(5,1)", "9999.95", "more than the 1 digits after the point"),
        ("decimal(5,1)", "NaN", "expected a decimal number"),
        ("decimal(5,1)", "Infinity", "expected a decimal number"),
        ("decimal(5,1)", " 1", "expected a decimal number"),
        ("decimal(5,1)", "1_0", "expected a decimal number"),
        ("decimal(5,1)", 1.5, "expected a decimal number"),  # a float: never taken as a decimal
        ("decimal(5,1)", True, "expected a decimal number"),
        ("decimal(5,1)", D("1E+999999999"), "digits before the point"),
        ("decimal(5,1)", D("1E-999999999"), "digits after the point"),
        ("binary", "AAE", "expected base64 text"),
        ("binary", "A*E=", "expected base64 text"),
        ("binary", "AAE=\n", "expected base64 text"),
        ("binary", 5, "expected base64 text"),
        ("timestamp_ntz", "2024-01-02T03:04:05Z", "has a UTC offset"),
        ("timestamp_ntz", "2024-01-02T03:04:05+01:00", "has a UTC offset"),
        ("timestamp_ntz", 1700000000, "without offset"),
        ("timestamp_ntz", "2024-01-02T03:04:05.1234567", "below microseconds"),
        ("timestamp_ntz", "yesterday", "expected an ISO-8601"),
    ],
)
def test_a_json_value_outside_a_new_types_domain_is_refused_naming_row_and_column(kind: str, value: object, why: str):
    assert why in _refusal(kind, value)


def test_a_decimal_number_in_a_request_body_never_passes_through_a_float():
    schema = _schema("decimal(19,2)")
    body = b'{"rows": [{"k": 1, "v": 12345678901234567.89}, {"k": 2, "v": 0.1}]}'
    exact = parse_single(body, "application/json", "t", None, exact=schema.exact_numbers)
    assert rows_to_arrow(exact.rows, schema, "t").column("v").to_pylist() == [D("12345678901234567.89"), D("0.10")]
    ndjson = parse_single(b'{"k": 1, "v": 1.25}\n', "application/x-ndjson", "t", None, exact=True)
    assert rows_to_arrow(ndjson.rows, schema, "t").column("v").to_pylist() == [D("1.25")]
    (update,) = parse_multi(b'{"updates": [{"table": "t", "rows": [{"k": 1, "v": 1e-2}]}]}', None, exact=True)
    assert rows_to_arrow(update.rows, schema, "t").column("v").to_pylist() == [D("0.01")]


def test_other_columns_of_a_table_parsed_exactly_take_numbers_as_before():
    """Parsed exactly (the table has a decimal column), a float column's 0.1 is still the
    float 0.1, an integer column's 5.0 the integer 5, a timestamp's 1.5 seconds 1.5 s."""
    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "k", "type": "int64", "nullable": False},
                {"name": "f", "type": "float64"},
                {"name": "g", "type": "float32"},
                {"name": "i", "type": "int16"},
                {"name": "t", "type": "timestamp"},
                {"name": "v", "type": "decimal(4,1)"},
            ]
        }
    )
    body = b'{"rows": [{"k": 1, "f": 0.1, "g": 0.1, "i": 5.0, "t": 1.5, "v": 1.0}], "data_until": 2.5}'
    request = parse_single(body, "application/json", "t", None, exact=True)
    assert request.data_until == 2.5
    row = rows_to_arrow(request.rows, schema, "t").to_pylist()[0]
    assert row["f"] == 0.1 and row["i"] == 5 and row["v"] == D("1.0")
    assert row["g"] == pa.array([0.1], pa.float32())[0].as_py()
    assert row["t"] == dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=dt.UTC)
    many = rows_to_arrow(request.rows * 10, schema, "t")  # (the whole-column path declines Decimals)
    assert many.column("f").to_pylist() == [0.1] * 10


def test_a_refused_decimal_is_quoted_as_its_json_text():
    message = _refusal("decimal(3,2)", D("1.234"))
    assert "1.234 has more than the 2 digits after the point" in message


# -- landing files -------------------------------------------------------------------------------
def _take(tmp_path: Path, kind: str, values: pa.Array):  # type: ignore[no-untyped-def]
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array(range(len(values)), pa.int64()), "v": values}), landing / "f.parquet")
    (ref,) = accept_files(["f.parquet"], landing, owned, _schema(kind), "t")
    return read_landing_file(Path(ref.path), ref.format, _schema(kind).arrow()).column("v").to_pylist()


@pytest.mark.parametrize(
    "kind,values,expected",
    [
        ("int8", pa.array([-128, 127, None], pa.int8()), [-128, 127, None]),
        ("int8", pa.array([-128, 127], pa.int64()), [-128, 127]),
        ("int16", pa.array([0, 255], pa.uint8()), [0, 255]),
        ("int16", pa.array([-(2**15), 2**15 - 1], pa.int32()), [-(2**15), 2**15 - 1]),
        ("decimal(10,2)", pa.array([D("1.50"), None], pa.decimal128(10, 2)), [D("1.50"), None]),
        ("decimal(10,2)", pa.array([D("1.5"), D("-99999999.9")], pa.decimal128(12, 1)), [D("1.50"), D("-99999999.90")]),
        ("decimal(20,0)", pa.array([-(2**63), 2**63 - 1], pa.int64()), [D(-(2**63)), D(2**63 - 1)]),
        ("binary", pa.array([b"", b"\x00\xff", None], pa.binary()), [b"", b"\x00\xff", None]),
        ("binary", pa.array([b"ab"], pa.large_binary()), [b"ab"]),
        ("binary", pa.array([b"abcd"], pa.binary(4)), [b"abcd"]),
        (
            "timestamp_ntz",
            pa.array([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us")),
            [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)],
        ),
        (
            "timestamp_ntz",
            pa.array([1000, 0], pa.int64()).cast(pa.timestamp("ns")),
            [dt.datetime(1970, 1, 1, 0, 0, 0, 1), dt.datetime(1970, 1, 1)],
        ),
        ("timestamp_ntz", pa.array([0], pa.int64()).cast(pa.timestamp("s")), [dt.datetime(1970, 1, 1)]),
    ],
)
def test_a_file_column_a_new_type_takes_is_loaded_exactly(
    tmp_path: Path, kind: str, values: pa.Array, expected: list
) -> None:
    assert _take(tmp_path, kind, values) == expected


@pytest.mark.parametrize(
    "kind,values,why",
    [
        ("int8", pa.array([0, 128], pa.int16()), "row 1: column 'v'"),
        ("decimal(10,2)", pa.array([D("1.5"), D("1.555")], pa.decimal128(10, 3)), "row 1: column 'v'"),
        ("decimal(3,0)", pa.array([1, 1000], pa.int64()), "row 1: column 'v'"),
        ("decimal(10,2)", pa.array([1.5], pa.float64()), "a binary float is not converted to a decimal"),
        ("binary", pa.array(["AAE="]), "text is not parsed into another type"),
        ("timestamp_ntz", pa.array([0], pa.int64()).cast(pa.timestamp("us", "UTC")), "is an instant"),
        ("timestamp", pa.array([0], pa.int64()).cast(pa.timestamp("us")).cast(pa.int64()), "not converted"),
    ],
)
def test_a_file_column_a_new_type_refuses_is_named(tmp_path: Path, kind: str, values: pa.Array, why: str) -> None:
    with pytest.raises(Invalid, match="column 'v'") as info:
        _take(tmp_path, kind, values)
    assert why in str(info.value)


def test_text_files_carry_new_types_as_json_rows_do(tmp_path: Path) -> None:
    """CSV and JSON lines: decimals exactly from their text, binary as base64, timestamp_ntz
    without an offset."""
    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "k", "type": "int64", "nullable": False},
                {"name": "d", "type": "decimal(38,2)"},
                {"name": "b", "type": "binary"},
                {"name": "t", "type": "timestamp_ntz"},
                {"name": "s", "type": "short"},
            ]
        }
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "f.csv").write_text("k,d,b,t,s\n1,12345678901234567.89,AP8=,2024-03-10T02:30:00,-32768\n")
    (landing / "f.jsonl").write_text('{"k": 1, "d": 12345678901234567.89, "b": "AP8=", "t": "2024-03-10T02:30:00"}\n')
    want = {"k": 1, "d": D("12345678901234567.89"), "b": b"\x00\xff", "t": dt.datetime(2024, 3, 10, 2, 30)}
    for name in ("f.csv", "f.jsonl"):
        (ref,) = accept_files([name], landing, tmp_path / "owned", schema, "t")
        row = read_landing_file(Path(ref.path), ref.format, schema.arrow()).to_pylist()[0]
        assert {n: row[n] for n in want} == want
    (landing / "bad.csv").write_text("k,d,b,t,s\n1,1.5,not base64!,2024-03-10T02:30:00,1\n")
    with pytest.raises(Invalid, match="not base64"):
        accept_files(["bad.csv"], landing, tmp_path / "owned", schema, "t")


@pytest.mark.parametrize(
    "name,text",
    [
        ("f.csv", "k,d\n1,1\n2,-100000000000000000000000000000\n"),
        ("f.jsonl", '{"k": 1}\n{"k": 2, "d": "100000000000000000000000000000"}\n'),
    ],
)
def test_a_text_integer_past_a_decimals_precision_is_refused_naming_its_row(tmp_path: Path, name: str, text: str):
    """pyarrow's readers rescale an integer's text to the column's scale without checking
    that its digits still fit (30 + 9 digits into decimal(38,9)); Spark would fail the load."""
    schema = TableSchema.model_validate(
        {"columns": [{"name": "k", "type": "int64", "nullable": False}, {"name": "d", "type": "decimal(38,9)"}]}
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / name).write_text(text)
    with pytest.raises(Invalid, match="row 1: column 'd' holds a value of more than 38 digits"):
        accept_files([name], landing, tmp_path / "owned", schema, "t")
