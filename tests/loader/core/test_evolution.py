"""The rules of schema evolution (loader/core/evolution.py): what is applied, and a refusal
that names every column it cannot change and what to do instead."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from loader.core.errors import Conflict
from loader.core.evolution import cast_nested, conform_rows, plan_change
from loader.core.schema import TableSchema


def schema(*columns: str, **extra: Any) -> TableSchema:
    """``"id int64 not null"``, ``"note string"``, ..."""
    parsed = []
    for text in columns:
        name, kind, *rest = text.split()
        parsed.append({"name": name, "type": kind, "nullable": rest != ["not", "null"]})
    return TableSchema.model_validate({"columns": parsed, **extra})


OLD = schema("id int64 not null", "amount float32 not null", "note string")


def refusal(new: TableSchema, old: TableSchema = OLD, **kwargs: Any) -> str:
    with pytest.raises(Conflict) as info:
        plan_change("orders", old, new, widening=kwargs.pop("widening", False), **kwargs)
    assert info.value.status == 409 and info.value.message.startswith("table 'orders': ")
    return info.value.message


def test_the_same_schema_is_no_change() -> None:
    assert plan_change("orders", OLD, OLD, widening=False).empty


def test_nullable_columns_are_added_after_the_others_and_not_null_may_become_nullable() -> None:
    new = schema("id int64 not null", "amount float32", "note string", "currency string", "tags string")
    change = plan_change("orders", OLD, new, widening=False)
    assert [c.name for c in change.added] == ["currency", "tags"]
    assert change.relaxed == ("amount",) and change.widened == ()


def test_a_new_column_must_be_nullable() -> None:
    message = refusal(schema("id int64 not null", "amount float32 not null", "note string", "c string not null"))
    assert "new columns ['c'] must be nullable" in message and '"nullable": true' in message


def test_a_nullable_column_never_becomes_not_null() -> None:
    message = refusal(schema("id int64 not null", "amount float32 not null", "note string not null"))
    assert "column 'note' is nullable and cannot become NOT NULL" in message


def test_drops_and_renames_are_refused_and_say_why() -> None:
    assert "columns ['note'] are missing" in refusal(schema("id int64 not null", "amount float32 not null"))
    renamed = refusal(schema("id int64 not null", "amount float32 not null", "remark string"))
    assert "columns ['note'] are missing" in renamed and "column mapping" in renamed


def test_new_columns_go_after_the_existing_ones_which_keep_their_order() -> None:
    inserted = schema("id int64 not null", "currency string", "amount float32 not null", "note string")
    assert "keep their order, and new columns go after them" in refusal(inserted)
    swapped = schema("amount float32 not null", "id int64 not null", "note string")
    assert "keep their order" in refusal(swapped)


def test_widening_needs_a_writer_that_records_type_widening() -> None:
    wider = schema("id int64 not null", "amount float64 not null", "note string")
    message = refusal(wider)
    assert "column 'amount' cannot widen from float32 to float64" in message and "typeWidening" in message
    assert "add a new column of the wider type" in message  # what to do
    change = plan_change("orders", OLD, wider, widening=True)
    assert change.widened == (("amount", "float32", "float64"),)


def test_narrowing_or_another_type_is_refused_whatever_the_writer() -> None:
    old = schema("id int64 not null", "n int32")
    for kind in ("string", "float64", "boolean"):
        message = refusal(schema("id int64 not null", f"n {kind}"), old, widening=True)
        assert f"column 'n' cannot change from int32 to {kind}: only widening" in message
    assert "cannot change from int64 to int32" in refusal(schema("id int32 not null", "n int32"), old, widening=True)


def test_partitioning_key_and_order_by_never_change() -> None:
    old = schema("k int64 not null", "at int64 not null", "v string", key=["k"], order_by="at")
    assert "the key cannot change" in refusal(schema("k int64 not null", "at int64 not null", "v string"), old)
    reordered = schema("k int64 not null", "at int64 not null", "v string", "w int64 not null", key=["k"])
    message = refusal(reordered, old)
    assert "the order_by cannot change" in message and "new columns ['w'] must be nullable" in message
    parted = schema("id int64 not null", "day string")
    assert "partition columns cannot change" in refusal(
        schema("id int64 not null", "day string", partition_by=["day"]), parted
    )


def test_a_join_views_columns_keep_their_type_and_nullability() -> None:
    relaxed = schema("id int64", "amount float32 not null", "note string", "extra string")
    message = refusal(relaxed, view_columns={"orders_with_notes": ["id"]})
    assert "join view 'orders_with_notes' joins on ['id']" in message and "retire the view first" in message
    # Columns a view does not join on change as for any table.
    change = plan_change("orders", OLD, relaxed, widening=False, view_columns={"v": ["note"]})
    assert change.relaxed == ("id",) and [c.name for c in change.added] == ["extra"]


def test_every_refusal_is_named_in_one_answer() -> None:
    new = schema("id int32 not null", "amount float32 not null", "c string not null", key=[])
    message = refusal(schema("id int64 not null", "note string not null", "c string not null"))
    assert "missing" in message and "must be nullable" in message
    assert "cannot change from int64 to int32" in refusal(new)


def test_rows_of_an_earlier_schema_read_as_the_current_one_holds_them() -> None:
    old = schema("id int64 not null", "amount float32 not null")
    new = schema("id int64 not null", "amount float64", "note string")
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "amount": pa.array([1.5, 2.25], pa.float32())}, old.arrow())
    conformed = conform_rows(rows, new)
    assert conformed.schema.equals(new.arrow())
    assert conformed.to_pylist() == [{"id": 1, "amount": 1.5, "note": None}, {"id": 2, "amount": 2.25, "note": None}]
    assert conform_rows(conformed, new) is conformed  # rows of the current schema pass as they are


@pytest.mark.parametrize(
    ("old", "new", "widens"),
    [
        ("int8", "int64", True),
        ("int16", "int32", True),
        ("float32", "float64", True),
        ("date", "timestamp_ntz", True),
        ("decimal(10,2)", "decimal(12,2)", True),
        ("decimal(10,2)", "decimal(12,3)", False),
        ("decimal(10,2)", "decimal(9,2)", False),
        ("int64", "int32", False),
        ("timestamp", "timestamp_ntz", False),
        ("binary", "string", False),
    ],
)
def test_the_widenings_of_the_types_delta_widens(old: str, new: str, widens: bool) -> None:
    before, after = schema("id int64 not null", f"x {old}"), schema("id int64 not null", f"x {new}")
    if widens:
        assert plan_change("t", before, after, widening=True).widened == (("x", old, new),)
        assert "typeWidening" in refusal(after, before)
    else:
        assert "only widening" in refusal(after, before, widening=True)


def _items(*fields: dict, contains_null: bool = False) -> TableSchema:
    line = {"type": "struct", "fields": list(fields)}
    return TableSchema.model_validate(
        {
            "columns": [
                {"name": "id", "type": "long", "nullable": False},
                {"name": "items", "type": {"type": "array", "elementType": line, "containsNull": contains_null}},
            ]
        }
    )


SKU = {"name": "sku", "type": "string", "nullable": False}


def test_a_struct_takes_new_nullable_fields_at_its_end_and_nothing_else_changes() -> None:
    """Inside a nested column, a struct may gain nullable fields after its own (earlier rows
    read them as null); any other change of a nested column is refused, naming the path."""
    old = _items(SKU)
    new = _items(SKU, {"name": "note", "type": "string"})
    change = plan_change("orders", old, new, widening=True)
    assert change.fields_added == ("items[].note",) and not change.empty
    earlier = pa.Table.from_pylist([{"id": 1, "items": [{"sku": "a"}]}, {"id": 2, "items": None}], old.arrow())
    assert conform_rows(earlier, new).to_pylist() == [
        {"id": 1, "items": [{"sku": "a", "note": None}]},
        {"id": 2, "items": None},
    ]
    for changed, fragment in [
        (_items(SKU, {"name": "note", "type": "string", "nullable": False}), "items[].note: a new field must be"),
        (_items({**SKU, "nullable": True}), "items[].sku: a nested field keeps its nullability"),
        (_items({**SKU, "type": "binary"}), "items[].sku: string cannot become binary"),
        (_items({"name": "note", "type": "string"}, SKU), "stay, in their order"),
        (_items(SKU, contains_null=True), "items: an array keeps its containsNull"),
    ]:
        message = refusal(changed, old, widening=True)
        assert "column 'items' cannot change" in message and fragment in message, message


def test_a_not_null_field_under_a_null_struct_holds_no_null_that_a_cast_refuses() -> None:
    """As a Parquet reader gives them (a NOT NULL field null where its struct is null), rows come
    out of conform_rows with a value there, which pyarrow's cast (and pyspark's) then takes."""
    new = _items(SKU, contains_null=True)
    inner = new.arrow().field("items").type.value_type
    loose = pa.struct([pa.field("sku", pa.string())])
    read = pa.StructArray.from_arrays([pa.array(["a", None])], fields=list(loose), mask=pa.array([False, True]))
    items = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), read)
    rows = pa.table({"id": pa.array([1], pa.int64()), "items": items})
    with pytest.raises(pa.ArrowInvalid):
        rows.cast(new.arrow())
    conformed = conform_rows(rows, new)
    assert conformed.cast(new.arrow()).to_pylist() == [{"id": 1, "items": [{"sku": "a"}, None]}]
    assert conformed.schema.field("items").type.value_type == inner


def test_a_slice_of_nested_rows_with_nulls_casts_as_its_rows() -> None:
    """A chunk of a table cut into batches is a slice: its lists' offsets start past 0, and
    pyarrow builds no list from those and a null mask; the cast counts them from 0."""
    lists = pa.list_(pa.struct([pa.field("a", pa.int64())]))
    maps = pa.map_(pa.string(), pa.list_(pa.int64()))
    for kind, values in (
        (lists, [[{"a": 1}], None, [{"a": 2}, {"a": 3}], [], None, [{"a": 4}]]),
        (maps, [{"x": [1]}, None, {"y": [2], "z": None}, None, {"w": []}]),
    ):
        whole = pa.array(values, type=kind)
        for start, length in ((1, 3), (2, 3), (0, len(values))):
            part = whole.slice(start, length)
            assert cast_nested(part, kind).to_pylist() == part.to_pylist()
