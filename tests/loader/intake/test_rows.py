"""Row validation: the whole update or nothing, errors naming the first bad row and column."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.core.errors import Invalid
from loader.core.schema import TableSchema
from loader.intake.rows import rows_to_arrow

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


@settings(max_examples=200, deadline=None)
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
