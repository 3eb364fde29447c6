"""Row validation: the whole update or nothing, errors naming the first bad row and column."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.core.errors import Invalid
from loader.core.schema import TableSchema
from loader.intake.rows import rows_to_arrow
from testing.depth import examples

SCHEMA = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "small", "type": "int32"},
            {"name": "price", "type": "float64"},
            {"name": "name", "type": "string"},
            {"name": "ok", "type": "boolean"},
            {"name": "day", "type": "date"},
            {"name": "at", "type": "timestamp"},
        ],
        "partition_by": ["day"],
    }
)


def test_valid_rows_become_typed_arrow() -> None:
    table = rows_to_arrow(
        [
            {
                "id": 1,
                "small": 2,
                "price": 3,
                "name": "a",
                "ok": True,
                "day": "2026-01-02",
                "at": "2026-01-02T03:04:05+01:00",
            },
            {"id": 2, "at": 0},
        ],
        SCHEMA,
        "t",
    )
    assert table.schema == SCHEMA.arrow()
    assert table.num_rows == 2
    assert table.column("price").to_pylist() == [3.0, None]
    assert table.column("day").to_pylist()[0] == dt.date(2026, 1, 2)
    assert table.column("at").to_pylist()[0] == dt.datetime(2026, 1, 2, 2, 4, 5, tzinfo=dt.UTC)
    assert table.column("at").to_pylist()[1] == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "row,column,fragment",
    [
        ({"id": "1"}, "id", "expected an integer"),
        ({"id": True}, "id", "expected an integer"),
        ({"id": 1, "small": 2**31}, "small", "out of range"),
        ({"id": 1, "price": "x"}, "price", "expected a number"),
        ({"id": 1, "name": 5}, "name", "expected a string"),
        ({"id": 1, "ok": 1}, "ok", "expected true or false"),
        ({"id": 1, "day": "02/01/2026"}, "day", "YYYY-MM-DD"),
        ({"id": 1, "at": "yesterday"}, "at", "ISO-8601"),
        ({"id": None}, "id", "required"),
        ({"small": 1}, "id", "required"),
        ({"id": 1, "colour": "red"}, "colour", "unknown column"),
    ],
)
def test_first_bad_row_and_column_are_named(row: dict, column: str, fragment: str) -> None:
    good = {"id": 7}
    with pytest.raises(Invalid) as info:
        rows_to_arrow([good, good, row, {"id": "also bad"}], SCHEMA, "t")
    assert info.value.details["row"] == 2
    assert info.value.details["column"] == column
    assert fragment in info.value.message
    assert "row 2" in info.value.message


def test_non_object_row_and_empty_update() -> None:
    with pytest.raises(Invalid, match="row 0 .* not a JSON object"):
        rows_to_arrow([[1, 2]], SCHEMA, "t")
    with pytest.raises(Invalid, match="no rows"):
        rows_to_arrow([], SCHEMA, "t")


@settings(max_examples=examples(80), deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["id", "small", "name", "x"]),
            st.one_of(st.none(), st.integers(), st.text(max_size=3), st.booleans()),
        ),
        max_size=5,
    )
)
def test_either_everything_or_a_clear_error(rows: list[dict]) -> None:
    try:
        table = rows_to_arrow(rows, SCHEMA, "t")
    except Invalid as exc:
        assert exc.message
        return
    assert table.num_rows == len(rows)
    assert table.column("id").null_count == 0


FAST_SCHEMA = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "small", "type": "int32"},
            {"name": "v", "type": "float64"},
            {"name": "s", "type": "string"},
            {"name": "b", "type": "boolean"},
        ]
    }
)
JSON_VALUE = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)  # (JSON has no NaN; 1e400 parses to inf)
    | st.text(max_size=5)
    | st.lists(st.integers(), max_size=2)
)
JSON_ROW = st.dictionaries(st.sampled_from(["id", "small", "v", "s", "b", "extra"]), JSON_VALUE, max_size=6)


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(st.lists(JSON_ROW | st.integers(), min_size=1, max_size=12))
def test_whole_column_checks_accept_only_what_conversion_leaves_unchanged(rows: list) -> None:
    """The fast path (``_checked_columns``) may decline anything, but what it accepts must be
    exactly what value-by-value conversion returns; everything else goes that way, so the
    error names the same row and column."""
    from loader.intake.rows import _checked_columns, _converted_columns, _plan

    plan = _plan(FAST_SCHEMA)
    rows = rows * -(-8 // len(rows))  # (at least FAST_MIN_ROWS: fewer never take the fast path)
    fast = _checked_columns(rows, plan)
    try:
        slow = _converted_columns(rows, plan, "t")
    except Invalid:
        assert fast is None
        return
    if fast is not None:
        assert fast == slow and all(
            type(a) is type(b) for fc, sc in zip(fast, slow) for a, b in zip(fc, sc)
        )  # (1 == 1.0: the types too)


def test_many_valid_rows_take_the_whole_column_checks() -> None:
    from loader.intake.rows import _checked_columns, _plan

    rows = [{"id": k, "small": None, "v": k / 2, "s": f"r{k}", "b": k % 2 == 0} for k in range(10)]
    assert _checked_columns(rows, _plan(FAST_SCHEMA)) is not None
    assert rows_to_arrow(rows, FAST_SCHEMA, "t").column("v").to_pylist() == [k / 2 for k in range(10)]


EXTREMES = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "f32", "type": "float32"},
            {"name": "at", "type": "timestamp"},
            {"name": "day", "type": "date"},
            {"name": "part", "type": "string"},
        ],
        "partition_by": ["part"],
    }
)


@pytest.mark.parametrize(
    "row,column,value",
    [
        ({"f32": 3.4028235e38}, "f32", 3.4028234663852886e38),  # float32's largest as printed: rounds to it
        ({"f32": -3.4028235e38}, "f32", -3.4028234663852886e38),
        ({"f32": 1.401298464324817e-45}, "f32", 1.401298464324817e-45),  # the smallest subnormal
        ({"f32": 1e-46}, "f32", 0.0),  # rounded to the nearest float32
        ({"at": "9999-12-31T23:59:59.999999Z"}, "at", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)),
        ({"at": "0001-01-01T00:00:00Z"}, "at", dt.datetime(1, 1, 1, tzinfo=dt.UTC)),
        ({"at": "0001-01-01T01:00:00+01:00"}, "at", dt.datetime(1, 1, 1, tzinfo=dt.UTC)),
        ({"at": "2025-12-31T23:30:00-01:00"}, "at", dt.datetime(2026, 1, 1, 0, 30, tzinfo=dt.UTC)),  # across a year
        ({"at": "2026-01-01T00:00:00.1234560Z"}, "at", dt.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC)),
        ({"at": -62135596800}, "at", dt.datetime(1, 1, 1, tzinfo=dt.UTC)),
        ({"at": 253402300799}, "at", dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)),
        ({"day": "0001-01-01"}, "day", dt.date(1, 1, 1)),
        ({"day": "9999-12-31"}, "day", dt.date(9999, 12, 31)),
        ({"part": "\U0001f600 x"}, "part", "\U0001f600 x"),
    ],
)
def test_the_extremes_of_each_domain_are_taken(row: dict, column: str, value: object) -> None:
    table = rows_to_arrow([{"id": 1, **row}], EXTREMES, "t")
    assert table.column(column).to_pylist() == [value]


@pytest.mark.parametrize(
    "row,column,fragment",
    [
        ({"f32": 3.4028235677973366e38}, "f32", "out of range for float32"),  # rounds to infinity
        ({"f32": -1e39}, "f32", "out of range for float32"),
        ({"at": "9999-12-31T23:30:00-01:00"}, "at", "out of range in UTC"),
        ({"at": "0001-01-01T00:30:00+01:00"}, "at", "out of range in UTC"),
        ({"at": "2026-01-01T00:00:00.1234567Z"}, "at", "digits below microseconds"),
        ({"at": 253402300800}, "at", "years 1 to 9999"),
        ({"day": "0000-12-31"}, "day", "YYYY-MM-DD"),
        ({"part": ""}, "part", "empty string"),
        ({"part": "__HIVE_DEFAULT_PARTITION__"}, "part", "read back as null"),
    ],
)
def test_a_value_no_reader_holds_is_refused_naming_row_and_column(row: dict, column: str, fragment: str) -> None:
    with pytest.raises(Invalid) as info:
        rows_to_arrow([{"id": 1, "part": "a"}, {"id": 2, **row}], EXTREMES, "t")
    assert (info.value.details["row"], info.value.details["column"]) == (1, column)
    assert fragment in info.value.message and "row 1" in info.value.message, info.value.message
