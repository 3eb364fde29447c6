"""Column types (loader/core/schema.py): nested struct, array and map types declared in Delta's
schema JSON, to any depth, each level with its own nullability.

What matters: a schema pasted from a Delta log (``DeltaTable.schema().to_json()``) is taken as
it is and maps back to the same Arrow and Delta types; a declaration serializes to the same
JSON it was read from (primitives as their short names); a bad declaration names the path to
its bad part; partition, key and order_by columns stay primitive; the limits on depth and on
the number of fields hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from pydantic import TypeAdapter, ValidationError

from loader.core.schema import (
    HARD_MAX_DEPTH,
    Array,
    DataType,
    Map,
    Primitive,
    Struct,
    TableSchema,
    check_limits,
    parse_type,
)
from loader.loading.sinks.delta_table import create_table

ORDER_LINE = {
    "type": "struct",
    "fields": [
        {"name": "sku", "type": "string", "nullable": False, "metadata": {}},
        {"name": "qty", "type": "integer", "nullable": False, "metadata": {}},
        {"name": "price", "type": "decimal(18,4)", "nullable": True, "metadata": {}},
        {
            "name": "tags",
            "type": {"type": "array", "elementType": "string", "containsNull": False},
            "nullable": True,
            "metadata": {},
        },
    ],
}
NESTED_COLUMNS = [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "items", "type": {"type": "array", "elementType": ORDER_LINE, "containsNull": True}, "nullable": True},
    {
        "name": "attrs",
        "type": {"type": "map", "keyType": "string", "valueType": "timestamp_ntz", "valueContainsNull": False},
        "nullable": True,
        "metadata": {},
    },
    {
        "name": "deep",
        "type": {
            "type": "map",
            "keyType": "date",
            "valueType": {
                "type": "array",
                "elementType": {"type": "array", "elementType": "binary", "containsNull": True},
                "containsNull": False,
            },
            "valueContainsNull": True,
        },
        "nullable": False,
        "metadata": {},
    },
]


def nested_schema() -> TableSchema:
    return TableSchema.model_validate({"columns": NESTED_COLUMNS})


def test_a_schema_pasted_from_a_delta_log_reads_as_the_same_types(tmp_path: Path) -> None:
    """A real table's ``schema().to_json()`` fields, pasted as columns, give the table's very
    Arrow and Delta schemas back; the declaration round-trips through JSON unchanged."""
    schema = nested_schema()
    create_table(tmp_path / "t", schema.arrow())  # (deltalake's create, but for its nested timestamp_ntz)
    logged = json.loads(DeltaTable(str(tmp_path / "t")).schema().to_json())
    pasted = TableSchema.model_validate({"columns": logged["fields"]})
    assert pasted == schema
    assert TableSchema.model_validate(logged) == schema  # the whole schemaString, as the log has it
    assert pasted.arrow() == schema.arrow()
    assert json.loads(DeltaSchema.from_arrow(pasted.arrow()).to_json()) == logged
    for column, field in zip(pasted.columns, logged["fields"], strict=True):
        assert column.type.delta == field["type"]
    dumped = schema.model_dump(mode="json")
    assert dumped["columns"][0]["type"] == "int64"  # a primitive keeps its short name
    assert dumped["columns"][1]["type"] == NESTED_COLUMNS[1]["type"]
    assert TableSchema.model_validate(json.loads(json.dumps(dumped))) == schema
    assert schema.exact_numbers and schema.nested  # a decimal two levels down


def test_types_know_their_arrow_spark_and_delta_forms() -> None:
    line = parse_type(ORDER_LINE)
    assert isinstance(line, Struct) and line.fields[0].nullable is False
    assert line.spark == (
        "STRUCT<`sku`: STRING NOT NULL, `qty`: INT NOT NULL, `price`: DECIMAL(18,4), `tags`: ARRAY<STRING>>"
    )
    assert (
        line.value == "struct<sku:string not null,qty:int32 not null,price:decimal(18,4),tags:array<string not null>>"
    )
    assert line.depth == 2 and line.field_count == 5
    tags = parse_type({"type": "array", "elementType": "short", "containsNull": False})
    assert tags == Array(parse_type("int16"), contains_null=False)
    assert tags.arrow == pa.list_(pa.field("element", pa.int16(), nullable=False))
    kv = parse_type({"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True})
    assert isinstance(kv, Map) and kv.spark == "MAP<STRING, DOUBLE>"
    assert kv.arrow.item_field.nullable and not kv.arrow.key_field.nullable
    assert isinstance(parse_type("LONG"), Primitive)
    assert TypeAdapter(DataType).dump_python(kv, mode="json") == kv.delta
    assert nested_schema().spark_ddl().startswith("`id` BIGINT NOT NULL, `items` ARRAY<STRUCT<`sku`: STRING NOT NULL")
    documented = json.dumps(TypeAdapter(DataType).json_schema())
    assert "elementType" in documented and "decimal(p,s)" in documented


@pytest.mark.parametrize(
    ("declared", "fragment"),
    [
        ({"type": "struct", "fields": [{"name": "a", "type": "strin", "nullable": True}]}, "a: unknown column type"),
        (
            {"type": "array", "elementType": {"type": "struct", "fields": [{"name": "b", "type": "decimal(40,2)"}]}},
            "[].b: decimal precision 40",
        ),
        ({"type": "map", "keyType": "string", "valueType": {"type": "array"}}, "{value}: an array type needs"),
        ({"type": "map", "keyType": ORDER_LINE, "valueType": "string"}, "{key}: a map's keys are of a primitive"),
        ({"type": "struct", "fields": []}, "at least one field"),
        (
            {"type": "struct", "fields": [{"name": "a", "type": "integer"}, {"name": "A", "type": "integer"}]},
            "A: the struct",
        ),
        ({"type": "struct", "fields": [{"name": "a b", "type": "long"}]}, "field name 'a b'"),
        ({"type": "array", "elementType": "long", "containsNull": "yes"}, "containsNull must be true or false"),
        ({"type": "array", "elementType": "long", "extra": 1}, "has no ['extra']"),
        ({"type": "struct", "fields": [{"name": "a", "type": "long", "metadata": 3}]}, "a: metadata must be"),
    ],
)
def test_a_bad_declaration_names_the_path_to_its_bad_part(declared: dict, fragment: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_type(declared)
    assert fragment in str(refused.value)


def test_nesting_past_the_hard_limit_is_refused_without_recursing_on() -> None:
    declared: object = "long"
    for _ in range(HARD_MAX_DEPTH + 5):
        declared = {"type": "array", "elementType": declared}
    with pytest.raises(ValueError, match=f"deeper than {HARD_MAX_DEPTH} levels"):
        parse_type(declared)


@pytest.mark.parametrize("what", ["partition_by", "key", "order_by"])
def test_partition_key_and_order_by_columns_must_be_primitive(what: str) -> None:
    columns = [
        {"name": "id", "type": "long", "nullable": False},
        {"name": "n", "type": "long", "nullable": False},
        {"name": "s", "type": ORDER_LINE, "nullable": False},
    ]
    extra: dict[str, object] = {
        "partition_by": {"partition_by": ["s"]},
        "key": {"key": ["id", "s"]},
        "order_by": {"key": ["id"], "order_by": "s"},
    }[what]
    with pytest.raises(ValidationError, match="must be of a primitive type"):
        TableSchema.model_validate({"columns": columns, **extra})


def test_the_limits_on_depth_and_fields_hold() -> None:
    schema = nested_schema()
    check_limits(schema, max_depth=3, max_fields=schema_fields(schema))
    with pytest.raises(ValueError, match="deeper than 2 levels"):
        check_limits(schema, max_depth=2, max_fields=10_000)
    with pytest.raises(ValueError, match=f"has {schema_fields(schema)} columns and nested fields"):
        check_limits(schema, max_depth=32, max_fields=schema_fields(schema) - 1)


def schema_fields(schema: TableSchema) -> int:
    # id 1; items 1 + element 1 + line 5; attrs 1 + 2; deep 1 + key, value 2 + inner array 1
    assert sum(1 + c.type.field_count for c in schema.columns) == 16
    return 16
