"""Landing files by type: what each column type takes from a file, loaded as it is, converted
exactly into the table's type, or refused with a 422 naming the column (and the row when
one value is to blame). No Spark here: tests/system/test_type_domain.py loads every pair
this file accepts and reads it back.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loader.core.errors import Invalid
from loader.core.schema import ColumnType, TableSchema
from loader.core.updates import FileFormat
from loader.intake.landing import accept_files, read_landing_file

UTC = dt.UTC


def _schema(kind: str, partition: bool = False) -> TableSchema:
    return TableSchema.model_validate(
        {
            "columns": [{"name": "k", "type": "int64", "nullable": False}, {"name": "v", "type": kind}],
            "partition_by": ["v"] if partition else [],
        }
    )


def _take(tmp_path: Path, kind: str, values: pa.Array, **write: object):  # type: ignore[no-untyped-def]
    """``values`` as column v of a Parquet landing file, taken for a table whose v is ``kind``."""
    landing, owned = tmp_path / "landing", tmp_path / "owned"
    landing.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"k": pa.array(range(len(values)), pa.int64()), "v": values}), landing / "f.parquet", **write
    )
    (ref,) = accept_files(["f.parquet"], landing, owned, _schema(kind), "t")
    return ref


#: (table type, file column, loaded as it is): every pair intake takes.
TAKEN = [
    ("string", pa.array(["a", "", "\x00\U0001f600", None]), True),
    ("string", pa.array(["a", None], pa.large_string()), True),
    ("string", pa.array(["a", "b", "a"]).dictionary_encode(), True),
    ("string", pa.array([b"a", b"\xc3\xa9", None], pa.binary()), True),
    ("int32", pa.array([-(2**7), 2**7 - 1, None], pa.int8()), True),
    ("int32", pa.array([-(2**15), 2**15 - 1], pa.int16()), True),
    ("int32", pa.array([-(2**31), 2**31 - 1], pa.int32()), True),
    ("int32", pa.array([0, 2**16 - 1], pa.uint16()), True),
    ("int32", pa.array([-(2**31), 2**31 - 1, None], pa.int64()), False),
    ("int32", pa.array([0, 2**31 - 1], pa.uint32()), False),
    ("int32", pa.array([0, 2**31 - 1], pa.uint64()), False),
    ("int64", pa.array([-(2**63), 2**63 - 1, None], pa.int64()), True),
    ("int64", pa.array([0, 2**32 - 1], pa.uint32()), True),
    ("int64", pa.array([0, 2**63 - 1], pa.uint64()), False),
    (
        "float32",
        pa.array([3.4028234663852886e38, -0.0, 1.401298464324817e-45, float("nan"), float("inf")], pa.float32()),
        True,
    ),
    ("float32", pa.array([1.5, -65504.0], pa.float16()), False),
    ("float32", pa.array([0.5, 3.4028234663852886e38, float("-inf")], pa.float64()), False),  # exactly float32
    ("float32", pa.array([2**24, -(2**24)], pa.int64()), False),
    ("float64", pa.array([1.7976931348623157e308, 5e-324, -0.0, float("nan")], pa.float64()), True),
    ("float64", pa.array([0.1, None], pa.float32()), True),
    ("float64", pa.array([-(2**31), 2**31 - 1], pa.int32()), True),
    ("float64", pa.array([2**53, -(2**62)], pa.int64()), False),  # exact though large
    ("float64", pa.array([1.5], pa.float16()), False),
    ("boolean", pa.array([True, False, None]), True),
    ("date", pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None], pa.date32()), True),
    ("date", pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31)], pa.date64()), True),
    (
        "timestamp",
        pa.array(
            [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
            pa.timestamp("us", "UTC"),
        ),
        True,
    ),
    (
        "timestamp",
        pa.array([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999000)], pa.timestamp("ms")),
        True,
    ),
    ("timestamp", pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)], pa.timestamp("s", "Asia/Kolkata")), True),
    ("timestamp", pa.array([dt.datetime(1700, 1, 1, 0, 0, 0, 1, tzinfo=UTC)], pa.timestamp("ns", "UTC")), True),
    ("string", pa.nulls(2), False),
    ("timestamp", pa.nulls(2), False),
]


@pytest.mark.parametrize("kind,values,as_is", TAKEN, ids=[f"{k}<-{v.type}" for k, v, _ in TAKEN])
def test_a_file_type_the_column_takes_is_loaded_as_checked(
    tmp_path: Path, kind: str, values: pa.Array, as_is: bool
) -> None:
    ref = _take(tmp_path, kind, values)
    arrow = _schema(kind).arrow()
    copy = pq.read_table(ref.path)
    if as_is:  # the landing file's bytes, untouched
        assert Path(ref.path).read_bytes() == (tmp_path / "landing" / "f.parquet").read_bytes()
    else:  # written again with the table's exact types; the raw copy is gone
        assert copy.schema.equals(arrow) and ref.format is FileFormat.parquet
        assert [p.name for p in (tmp_path / "owned").iterdir()] == [Path(ref.path).name]
    loaded = read_landing_file(Path(ref.path), ref.format, arrow).column("v")
    assert loaded.type == arrow.field("v").type
    decoded = values.dictionary_decode() if pa.types.is_dictionary(values.type) else values
    expected = pa.array(decoded.to_pylist(), decoded.type) if not pa.types.is_null(values.type) else values
    if kind == "timestamp" and not pa.types.is_null(values.type):
        assert loaded.cast(pa.int64()).to_pylist() == [
            None
            if v is None
            else v
            * {"s": 10**6, "ms": 10**3, "us": 1, "ns": 1}[values.type.unit]
            // (1000 if values.type.unit == "ns" else 1)
            for v in values.cast(pa.int64()).to_pylist()
        ]
    else:
        assert [_same(v) for v in loaded.to_pylist()] == [
            _same(v) for v in expected.cast(loaded.type, safe=False).to_pylist()
        ]


def _same(value: object) -> object:
    """NaN equal to itself, -0.0 unequal to 0.0: floats by their bits."""
    return value.hex() if isinstance(value, float) else value


#: (table type, file column, what the 422 names): pairs refused whatever the values.
REFUSED_TYPES = [
    ("int64", pa.array(["1", "2"]), "text is not parsed"),
    ("int32", pa.array([1, 2], pa.int64()).cast(pa.float64()), "not converted to an integer"),
    ("int64", pa.array([decimal.Decimal("1")], pa.decimal128(5, 0)), "decimal"),
    ("float64", pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 1)), "decimal"),
    ("string", pa.array([1], pa.int64()), "only text"),
    ("boolean", pa.array([1], pa.int8()), "booleans and numbers"),
    ("int32", pa.array([True]), "booleans and numbers"),
    ("date", pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")), "only to their own kind"),
    ("timestamp", pa.array([dt.date(2024, 1, 1)], pa.date32()), "only to their own kind"),
    ("int64", pa.array([dt.date(2024, 1, 1)], pa.date32()), "only to their own kind"),
    ("timestamp", pa.array([1_700_000_000], pa.int64()), "unit and epoch"),
    ("date", pa.array(["2024-01-01"]), "text is not parsed"),
    ("string", pa.array([[1]], pa.list_(pa.int64())), "only text"),
]


@pytest.mark.parametrize("kind,values,fragment", REFUSED_TYPES, ids=[f"{k}<-{v.type}" for k, v, _ in REFUSED_TYPES])
def test_a_file_type_the_column_does_not_take_is_refused_naming_both(
    tmp_path: Path, kind: str, values: pa.Array, fragment: str
) -> None:
    with pytest.raises(Invalid) as info:
        _take(tmp_path, kind, values)
    message = info.value.message
    assert info.value.details["column"] == "v" and "row" not in info.value.details
    written = pq.read_schema(tmp_path / "landing" / "f.parquet").field("v").type  # (a list's item is renamed)
    assert f"column 'v' is {written} in the file but {kind}" in message and fragment in message, message
    assert "fix the file" in message
    assert not any((tmp_path / "owned").iterdir())  # nothing of a refused update is kept


#: (table type, file column, the row named, what the 422 says): one value is to blame.
REFUSED_VALUES = [
    ("int32", pa.array([1, 2**31, 3], pa.int64()), 1, "outside int32's range"),
    ("int64", pa.array([1, 2, 2**63], pa.uint64()), 2, "outside int64's range"),
    ("float32", pa.array([0.5, 0.1], pa.float64()), 1, "float32 cannot hold exactly"),
    ("float64", pa.array([1, 2**53 + 1], pa.int64()), 1, "cannot hold exactly"),
    ("timestamp", pa.array([1000, 1001], pa.timestamp("ns")), 1, "not whole microseconds"),
    ("timestamp", pa.array([0, 253402300800], pa.timestamp("s")), 1, "outside the timestamp range"),
    ("timestamp", pa.array([-62135596800001], pa.timestamp("ms", "UTC")), 0, "0000-12-31T23:59:59.999000Z"),
    ("date", pa.array([0, 2932897], pa.int32()).cast(pa.date32()), 1, "10000-01-01, outside the date range"),
    ("date", pa.array([-719163], pa.int32()).cast(pa.date32()), 0, "0000-12-31"),
    ("string", pa.array([b"ok", b"\xff"], pa.binary()), 1, "not UTF-8"),
]


@pytest.mark.parametrize(
    "kind,values,row,fragment", REFUSED_VALUES, ids=[f"{k}<-{v.type}" for k, v, _, _ in REFUSED_VALUES]
)
def test_a_value_outside_the_column_types_domain_is_refused_naming_its_row(
    tmp_path: Path, kind: str, values: pa.Array, row: int, fragment: str
) -> None:
    with pytest.raises(Invalid) as info:
        _take(tmp_path, kind, values)
    assert info.value.details["column"] == "v" and info.value.details["row"] == row
    assert f"row {row}: column 'v'" in info.value.message and fragment in info.value.message, info.value.message
    assert not any((tmp_path / "owned").iterdir())


def test_the_reported_files_are_converted_not_loaded_to_fail(tmp_path: Path) -> None:
    """Issue 33: an int32 column stored as int64 with small values is taken (and converted);
    an id stored as text is refused with both types named (it was acknowledged, then every
    load failed with PARQUET_COLUMN_DATA_TYPE_MISMATCH)."""
    ref = _take(tmp_path, "int32", pa.array([1, 2], pa.int64()))
    assert pq.read_schema(ref.path).field("v").type == pa.int32()
    with pytest.raises(Invalid, match=r"column 'v' is string in the file but int64 in the table, and text"):
        _take(tmp_path / "again", "int64", pa.array(["1", "2"]))


def test_int96_timestamps_are_read_in_microseconds_over_the_whole_range(tmp_path: Path) -> None:
    values = pa.array([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us"))
    ref = _take(tmp_path, "timestamp", values, use_deprecated_int96_timestamps=True)
    loaded = read_landing_file(Path(ref.path), ref.format, _schema("timestamp").arrow())
    assert loaded.column("v").cast(pa.int64()).to_pylist() == values.cast(pa.int64()).to_pylist()


def _text_file(tmp_path: Path, name: str, text: str, kind: str, partition: bool = False):  # type: ignore[no-untyped-def]
    landing = tmp_path / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    (landing / name).write_text(text, encoding="utf-8")
    return accept_files([name], landing, tmp_path / "owned", _schema(kind, partition), "t")


@pytest.mark.parametrize(
    "kind,cells,expected",
    [
        ("float32", ["3.4028235e38", "-0.0", "1e-46", "inf"], [3.4028234663852886e38, -0.0, 0.0, float("inf")]),
        (
            "timestamp",
            ["9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00+00:00"],
            [dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(1, 1, 1, tzinfo=UTC)],
        ),
        ("date", ["0001-01-01", "9999-12-31"], [dt.date(1, 1, 1), dt.date(9999, 12, 31)]),
        ("int64", ["-9223372036854775808", "9223372036854775807"], [-(2**63), 2**63 - 1]),
    ],
)
def test_csv_and_json_copies_are_the_parse_intake_checked(
    tmp_path: Path, kind: str, cells: list[str], expected: list
) -> None:
    """Text files are loaded from their parse, as Parquet with the table's types: Spark never
    parses the text by rules of its own."""
    csv = "k,v\n" + "".join(f"{k},{cell}\n" for k, cell in enumerate(cells))
    (ref,) = _text_file(tmp_path, "f.csv", csv, kind)
    assert ref.format is FileFormat.parquet and pq.read_schema(ref.path).equals(_schema(kind).arrow())
    assert [_same(v) for v in pq.read_table(ref.path).column("v").to_pylist()] == [_same(v) for v in expected]
    if kind != "float32":  # (JSON has no infinity)
        lines = "".join(
            json.dumps({"k": k, "v": cell if kind in ("timestamp", "date") else json.loads(cell)}) + "\n"
            for k, cell in enumerate(cells)
        )
        (ref,) = _text_file(tmp_path / "json", "f.jsonl", lines, kind)
        assert pq.read_table(ref.path).column("v").to_pylist() == expected


@pytest.mark.parametrize(
    "name,text,kind,row,fragment",
    [
        ("f.csv", "k,v\n0,1.5\n1,1e39\n", "float32", 1, "beyond float32's largest finite value"),
        ("f.csv", "k,v\n0,9999-12-31T23:30:00-01:00\n", "timestamp", 0, "10000-01-01T00:30:00.000000Z, outside"),
        ("f.jsonl", '{"k": 0, "v": "2024-01-01"}\n{"k": 1, "v": "2024-02-30"}\n', "date", 1, "not a date YYYY-MM-DD"),
        ("f.jsonl", '{"k": 0, "v": "0001-01-01T00:30:00+01:00"}\n', "timestamp", 0, "0000-12-31T23:30:00.000000Z"),
    ],
)
def test_a_text_value_outside_the_domain_is_refused_naming_its_row(
    tmp_path: Path, name: str, text: str, kind: str, row: int, fragment: str
) -> None:
    with pytest.raises(Invalid) as info:
        _text_file(tmp_path, name, text, kind)
    assert (info.value.details["row"], info.value.details["column"]) == (row, "v")
    assert fragment in info.value.message, info.value.message


@pytest.mark.parametrize("value,fragment", [("", "empty string"), ("__HIVE_DEFAULT_PARTITION__", "read back as null")])
def test_a_partition_value_every_reader_would_read_as_null_is_refused(
    tmp_path: Path, value: str, fragment: str
) -> None:
    with pytest.raises(Invalid) as info:
        _text_file(
            tmp_path,
            "f.jsonl",
            f'{{"k": 0, "v": "x"}}\n{{"k": 1, "v": {json.dumps(value)}}}\n',
            "string",
            partition=True,
        )
    assert (info.value.details["row"], info.value.details["column"]) == (1, "v")
    assert fragment in info.value.message


def test_every_column_type_has_a_rule() -> None:
    from loader.intake.file_types import AS_IS, WRITE_AS

    assert set(AS_IS) == set(WRITE_AS) == set(ColumnType)
