"""What a feed's new fields become (``on_new_fields = "add"``): loader/intake/inference.py."""

from __future__ import annotations

import pytest

from loader.core.errors import Invalid
from loader.core.schema import Column, TableSchema
from loader.intake.inference import infer_columns

SCHEMA = TableSchema(columns=(Column(name="id", type="int64", nullable=False),))


def _types(rows: list[dict]) -> dict[str, str]:
    return {c.name: str(c.type) for c in infer_columns(rows, SCHEMA, "t", max_depth=32)}


def test_scalars_infer_the_types_json_can_say_and_every_added_column_is_nullable() -> None:
    rows = [{"id": 1, "n": 3, "x": 2.5, "s": "a", "b": True}, {"id": 2, "n": -4, "x": 7}]
    columns = infer_columns(rows, SCHEMA, "t", max_depth=32)
    assert [(c.name, str(c.type), c.nullable) for c in columns] == [
        ("n", "int64", True),
        ("x", "float64", True),  # an integer and a number: a number
        ("s", "string", True),
        ("b", "boolean", True),
    ]


def test_a_field_seen_only_as_null_or_as_an_empty_list_waits() -> None:
    assert _types([{"id": 1, "later": None, "empty": []}, {"id": 2, "later": None}]) == {}
    assert _types([{"id": 1, "later": None}, {"id": 2, "later": "now"}]) == {"later": "string"}


def test_no_new_field_infers_nothing() -> None:
    assert infer_columns([{"id": 1}], SCHEMA, "t", max_depth=32) == []


@pytest.mark.parametrize(
    ("rows", "named"),
    [
        ([{"id": 1, "v": "a"}, {"id": 2, "v": 3}], r"row 1 of table 't': new field v: a string and an integer"),
        ([{"id": 1, "v": True}, {"id": 2, "v": 1.5}], r"new field v: true or false and a number"),
        ([{"id": 1, "v": 2**63}], r"new field v: the integer .* does not fit an int64"),
    ],
)
def test_values_that_disagree_are_refused_naming_the_field(rows: list[dict], named: str) -> None:
    with pytest.raises(Invalid, match=named) as caught:
        infer_columns(rows, SCHEMA, "t", max_depth=32)
    assert caught.value.details["column"] == "v"
