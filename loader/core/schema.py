"""Table schemas: the column types a warehouse table may have, and their mappings.

One small type vocabulary is shared by intake validation (JSON rows), the WAL payload
(Arrow), Spark (DDL strings) and Delta (through Arrow), so that a table written by
either Delta writer path reads back with the same types everywhere.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal

import pyarrow as pa
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Column names a latest table's load uses for itself (loader/loading/sinks/upsert.py).
RESERVED_PREFIX = "__loader_"
#: A latest table's upsert (``TableSchema.upsert``).
UpsertStrategy = Literal["merge", "deletion-vectors"]


class ColumnType(str, Enum):
    """The kind of a primitive column type (a decimal's precision and scale are on ``Primitive``)."""

    string = "string"
    binary = "binary"  # bytes; base64 text in JSON
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    float32 = "float32"
    float64 = "float64"
    boolean = "boolean"
    date = "date"
    timestamp = "timestamp"  # microseconds, UTC (Delta's `timestamp`)
    timestamp_ntz = "timestamp_ntz"  # microseconds, a wall-clock time of no zone (Delta's `timestamp_ntz`)
    decimal = "decimal"  # exact: decimal(precision, scale)


# -- the type domain ---------------------------------------------------------------------------
# What a column of each type can hold, the same for every way a value arrives (JSON rows,
# NDJSON, landing files) and every reader of the table: a value outside it is refused at
# intake, because accepted it would make every load of its batch fail (or read back as
# something else). Dates and timestamps: the range Spark, Delta, delta-rs, DuckDB and
# Python's datetime all hold, years 1 to 9999 (Arrow's date32 and int64 microseconds hold
# far more, so a file can carry a value no reader can show). Floats: IEEE 754, float32
# values rounded to the nearest float32 (a finite value whose rounding overflows is
# refused); files may also hold NaN and infinities, which JSON cannot express.

#: Largest finite float32; a finite number beyond it would become infinity.
FLOAT32_MAX = 3.4028234663852886e38
INT_RANGES: dict[ColumnType, tuple[int, int]] = {
    ColumnType.int8: (-(2**7), 2**7 - 1),
    ColumnType.int16: (-(2**15), 2**15 - 1),
    ColumnType.int32: (-(2**31), 2**31 - 1),
    ColumnType.int64: (-(2**63), 2**63 - 1),
}
DATE_MIN = dt.date(1, 1, 1)
DATE_MAX = dt.date(9999, 12, 31)
TIMESTAMP_MIN = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
TIMESTAMP_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)
# Decimals: exact, at most ``precision`` digits of which ``scale`` after the point (Delta's and
# Spark's limit: precision 38); a value needing more digits is refused, never rounded (1.50
# fits scale 1, 1.55 does not). Binary: any bytes (base64 in JSON). timestamp_ntz: the same
# years as timestamp, a wall-clock time that no reader shifts by a zone.
DECIMAL_MAX_PRECISION = 38


#: The Arrow type of each kind but decimal (whose type has its precision and scale).
ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    ColumnType.string: pa.string(),
    ColumnType.binary: pa.binary(),
    ColumnType.int8: pa.int8(),
    ColumnType.int16: pa.int16(),
    ColumnType.int32: pa.int32(),
    ColumnType.int64: pa.int64(),
    ColumnType.float32: pa.float32(),
    ColumnType.float64: pa.float64(),
    ColumnType.boolean: pa.bool_(),
    ColumnType.date: pa.date32(),
    ColumnType.timestamp: pa.timestamp("us", tz="UTC"),
    ColumnType.timestamp_ntz: pa.timestamp("us"),
}

SPARK_TYPES: dict[ColumnType, str] = {
    ColumnType.string: "STRING",
    ColumnType.binary: "BINARY",
    ColumnType.int8: "TINYINT",
    ColumnType.int16: "SMALLINT",
    ColumnType.int32: "INT",
    ColumnType.int64: "BIGINT",
    ColumnType.float32: "FLOAT",
    ColumnType.float64: "DOUBLE",
    ColumnType.boolean: "BOOLEAN",
    ColumnType.date: "DATE",
    ColumnType.timestamp: "TIMESTAMP",
    ColumnType.timestamp_ntz: "TIMESTAMP_NTZ",
}

#: The name of each kind but decimal in Delta's schema JSON (the log's ``schemaString``).
DELTA_NAMES: dict[ColumnType, str] = {
    ColumnType.string: "string",
    ColumnType.binary: "binary",
    ColumnType.int8: "byte",
    ColumnType.int16: "short",
    ColumnType.int32: "integer",
    ColumnType.int64: "long",
    ColumnType.float32: "float",
    ColumnType.float64: "double",
    ColumnType.boolean: "boolean",
    ColumnType.date: "date",
    ColumnType.timestamp: "timestamp",
    ColumnType.timestamp_ntz: "timestamp_ntz",
}
#: Every name a primitive type may be declared by: the loader's short names and Delta's.
_KIND_NAMES: dict[str, ColumnType] = {**{k.value: k for k in ColumnType}, **{n: k for k, n in DELTA_NAMES.items()}}
_DECIMAL = re.compile(r"^decimal\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)$")


@dataclass(frozen=True, slots=True)
class Primitive:
    """A primitive column type. One class of a small family: ``Struct``, ``Array`` and ``Map``
    (below) are frozen classes with the same members (``value``, ``arrow``, ``spark``,
    ``delta``) holding their fields' or elements' types, and ``parse_type`` reads Delta's
    JSON objects (``{"type": "struct", ...}``) into them."""

    kind: ColumnType
    precision: int | None = None  # decimal only
    scale: int | None = None  # decimal only

    @property
    def value(self) -> str:
        """The canonical declaration: the short name, or ``decimal(p,s)``."""
        if self.kind is ColumnType.decimal:
            return f"decimal({self.precision},{self.scale})"
        return self.kind.value

    def __str__(self) -> str:
        return self.value

    @property
    def arrow(self) -> pa.DataType:
        if self.kind is ColumnType.decimal:
            return pa.decimal128(self.precision, self.scale)
        return ARROW_TYPES[self.kind]

    @property
    def spark(self) -> str:
        if self.kind is ColumnType.decimal:
            return f"DECIMAL({self.precision},{self.scale})"
        return SPARK_TYPES[self.kind]

    @property
    def delta(self) -> str:
        """The type as Delta's schema JSON names it."""
        return self.value if self.kind is ColumnType.decimal else DELTA_NAMES[self.kind]

    @property
    def primitive(self) -> bool:
        return True

    @property
    def depth(self) -> int:
        """Levels of nesting: 0 for a primitive, 1 for a struct of primitives, and so on."""
        return 0

    @property
    def field_count(self) -> int:
        """Struct fields, array elements and map keys and values inside (none here)."""
        return 0

    def leaves(self) -> Iterator[Primitive]:
        yield self


# -- nested types ------------------------------------------------------------------------------
# Declared in Delta's own schema JSON (the transaction log's ``schemaString``), each level with
# its own nullability: a struct's fields (``nullable``), an array's elements (``containsNull``),
# a map's values (``valueContainsNull``; a map's keys are never null). Arrow names an array's
# element ``element``, as Parquet's LIST annotation and delta-rs do (pyarrow compares list and
# map types without the names of their element and entries).


@dataclass(frozen=True, slots=True)
class StructField:
    """One field of a struct type (metadata, which Delta's JSON may carry, is not kept)."""

    name: str
    type: DataTypeValue
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class Struct:
    fields: tuple[StructField, ...]

    @property
    def value(self) -> str:
        """A readable canonical name, nullability included: ``struct<a:int64 not null,b:string>``."""
        return (
            "struct<"
            + ",".join(f"{f.name}:{f.type.value}{'' if f.nullable else ' not null'}" for f in self.fields)
            + ">"
        )

    def __str__(self) -> str:
        return self.value

    @property
    def arrow(self) -> pa.DataType:
        return pa.struct([pa.field(f.name, f.type.arrow, nullable=f.nullable) for f in self.fields])

    @property
    def spark(self) -> str:
        return (
            "STRUCT<"
            + ", ".join(f"`{f.name}`: {f.type.spark}{'' if f.nullable else ' NOT NULL'}" for f in self.fields)
            + ">"
        )

    @property
    def delta(self) -> dict[str, Any]:
        return {
            "type": "struct",
            "fields": [
                {"name": f.name, "type": f.type.delta, "nullable": f.nullable, "metadata": {}} for f in self.fields
            ],
        }

    @property
    def primitive(self) -> bool:
        return False

    @property
    def depth(self) -> int:
        return 1 + max((f.type.depth for f in self.fields), default=0)

    @property
    def field_count(self) -> int:
        return sum(1 + f.type.field_count for f in self.fields)

    def leaves(self) -> Iterator[Primitive]:
        for f in self.fields:
            yield from f.type.leaves()


@dataclass(frozen=True, slots=True)
class Array:
    element: DataTypeValue
    contains_null: bool = True

    @property
    def value(self) -> str:
        return f"array<{self.element.value}{'' if self.contains_null else ' not null'}>"

    def __str__(self) -> str:
        return self.value

    @property
    def arrow(self) -> pa.DataType:
        return pa.list_(pa.field("element", self.element.arrow, nullable=self.contains_null))

    @property
    def spark(self) -> str:
        """Spark's DDL has no NOT NULL for elements: ``containsNull`` is kept by the Arrow and
        Delta schemas, and intake refuses a null element where it is false."""
        return f"ARRAY<{self.element.spark}>"

    @property
    def delta(self) -> dict[str, Any]:
        return {"type": "array", "elementType": self.element.delta, "containsNull": self.contains_null}

    @property
    def primitive(self) -> bool:
        return False

    @property
    def depth(self) -> int:
        return 1 + self.element.depth

    @property
    def field_count(self) -> int:
        return 1 + self.element.field_count

    def leaves(self) -> Iterator[Primitive]:
        yield from self.element.leaves()


@dataclass(frozen=True, slots=True)
class Map:
    key: DataTypeValue
    value_type: DataTypeValue
    value_contains_null: bool = True

    @property
    def value(self) -> str:
        return f"map<{self.key.value},{self.value_type.value}{'' if self.value_contains_null else ' not null'}>"

    def __str__(self) -> str:
        return self.value

    @property
    def arrow(self) -> pa.DataType:
        return pa.map_(
            pa.field("key", self.key.arrow, nullable=False),
            pa.field("value", self.value_type.arrow, nullable=self.value_contains_null),
        )

    @property
    def spark(self) -> str:
        return f"MAP<{self.key.spark}, {self.value_type.spark}>"

    @property
    def delta(self) -> dict[str, Any]:
        return {
            "type": "map",
            "keyType": self.key.delta,
            "valueType": self.value_type.delta,
            "valueContainsNull": self.value_contains_null,
        }

    @property
    def primitive(self) -> bool:
        return False

    @property
    def depth(self) -> int:
        return 1 + max(self.key.depth, self.value_type.depth)

    @property
    def field_count(self) -> int:
        return 2 + self.key.field_count + self.value_type.field_count

    def leaves(self) -> Iterator[Primitive]:
        yield from self.key.leaves()
        yield from self.value_type.leaves()


#: Any column type.
DataTypeValue = Primitive | Struct | Array | Map

#: Defaults of the limits on a declared type (the settings ``intake.max_nesting_depth`` and
#: ``intake.max_schema_fields`` apply them at registration, ``check_limits``). ``parse_type``
#: itself stops at HARD_MAX_DEPTH, whatever the settings, so that no declaration makes it recurse
#: without bound.
MAX_NESTING_DEPTH = 32
MAX_SCHEMA_FIELDS = 10_000
HARD_MAX_DEPTH = 128


def decimal(precision: int, scale: int) -> Primitive:
    if not 1 <= precision <= DECIMAL_MAX_PRECISION:
        raise ValueError(f"decimal precision {precision} must be 1 to {DECIMAL_MAX_PRECISION}")
    if not 0 <= scale <= precision:
        raise ValueError(f"decimal scale {scale} must be 0 to the precision ({precision})")
    return Primitive(ColumnType.decimal, precision, scale)


_NESTED_FORMS = (
    '{"type": "struct", "fields": [{"name": ..., "type": ..., "nullable": ..., "metadata": {}}]}, '
    '{"type": "array", "elementType": ..., "containsNull": ...} or '
    '{"type": "map", "keyType": ..., "valueType": ..., "valueContainsNull": ...}'
)


def parse_type(value: Any) -> DataTypeValue:
    """A declared type: a type object, a name (short or Delta's, case-insensitive as Delta's
    are), or Delta's JSON object of a struct, array or map type (to any depth up to
    HARD_MAX_DEPTH); ValueError naming the path to the bad part and the accepted forms otherwise."""
    return _parse(value, "", 0)


def _at(path: str) -> str:
    """The path's prefix of a message (a long one cut in its middle)."""
    if len(path) > 100:
        path = f"{path[:60]}...{path[-30:]}"
    return f"{path}: " if path else ""


def _parse(value: Any, path: str, depth: int) -> DataTypeValue:
    if isinstance(value, (Primitive, Struct, Array, Map)):
        return value
    if isinstance(value, str):
        name = value.strip().lower()
        kind = _KIND_NAMES.get(name)
        if kind is not None and kind is not ColumnType.decimal:
            return Primitive(kind)
        match = _DECIMAL.match(name)
        if match:
            try:
                return decimal(int(match.group(1)), int(match.group(2)))
            except ValueError as exc:
                raise ValueError(f"{_at(path)}{exc}") from None
        if name == "decimal":
            raise ValueError(f"{_at(path)}a decimal type needs its precision and scale, e.g. decimal(10,2)")
    if isinstance(value, dict) and value.get("type") in ("struct", "array", "map"):
        if depth >= HARD_MAX_DEPTH:
            raise ValueError(f"{_at(path)}types nest deeper than {HARD_MAX_DEPTH} levels")
        return _nested(value, path, depth + 1)
    names = sorted(n for n in _KIND_NAMES if n != "decimal")
    raise ValueError(
        f"{_at(path)}unknown column type {_excerpt(value)}; types are {names}, decimal(precision,scale) and "
        f"Delta's nested types: {_NESTED_FORMS}"
    )


def _excerpt(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict) else "{" + ", ".join(repr(k) for k in list(value)[:5]) + ", ...}"
    return text if len(text) <= 60 else text[:57] + "..."


def _keys(value: dict[str, Any], path: str, required: set[str], optional: set[str]) -> None:
    missing = sorted(required - set(value))
    unknown = sorted(set(value) - required - optional)
    what = {"struct": "a struct", "array": "an array", "map": "a map"}[value["type"]]
    if missing:
        raise ValueError(f"{_at(path)}{what} type needs {missing}")
    if unknown:
        raise ValueError(f"{_at(path)}{what} type has no {[str(k)[:60] for k in unknown[:5]]}")


def _flag(value: Any, name: str, path: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{_at(path)}{name} must be true or false, not {_excerpt(value)}")
    return value


def _nested(value: dict[str, Any], path: str, depth: int) -> DataTypeValue:
    kind = value["type"]
    if kind == "array":
        _keys(value, path, {"type", "elementType"}, {"containsNull"})
        element = _parse(value["elementType"], f"{path}[]", depth)
        return Array(element, _flag(value.get("containsNull", True), "containsNull", path))
    if kind == "map":
        _keys(value, path, {"type", "keyType", "valueType"}, {"valueContainsNull"})
        key = _parse(value["keyType"], f"{path}{{key}}", depth)
        if not key.primitive:
            raise ValueError(
                f"{path}{{key}}: a map's keys are of a primitive type here (a string, number, date...), not "
                f"{key.value[:80]} (an array of structs holds entries of any key)"
            )
        item = _parse(value["valueType"], f"{path}{{value}}", depth)
        return Map(key, item, _flag(value.get("valueContainsNull", True), "valueContainsNull", path))
    _keys(value, path, {"type", "fields"}, set())
    fields = value["fields"]
    if not isinstance(fields, list) or not fields:
        raise ValueError(f"{_at(path)}a struct type's fields must be a list of at least one field")
    out, seen = [], set()
    for index, item in enumerate(fields):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"{_at(path)}field {index} must be an object with a name, type and nullable")
        name = item["name"]
        where = f"{path}.{name}" if path else name
        unknown = sorted(set(item) - {"name", "type", "nullable", "metadata"})
        if unknown or "type" not in item:
            raise ValueError(f"{where}: a field has a name, type, nullable and metadata only")
        if "metadata" in item and not isinstance(item["metadata"], dict):
            raise ValueError(f"{where}: metadata must be an object")
        check_name(name, "field name")
        if name.lower() in seen:
            raise ValueError(f"{where}: the struct has another field of this name (case-insensitive)")
        seen.add(name.lower())
        out.append(
            StructField(name, _parse(item["type"], where, depth), _flag(item.get("nullable", True), "nullable", where))
        )
    return Struct(tuple(out))


def check_limits(schema: TableSchema, max_depth: int, max_fields: int) -> None:
    """ValueError when a column's type nests deeper than ``max_depth`` or the schema holds
    more than ``max_fields`` columns, struct fields, array elements and map keys and values
    in all (each a column a reader must plan)."""
    deep = [c.name for c in schema.columns if c.type.depth > max_depth]
    if deep:
        raise ValueError(f"columns {deep[:5]} nest types deeper than {max_depth} levels (intake.max_nesting_depth)")
    total = sum(1 + c.type.field_count for c in schema.columns)
    if total > max_fields:
        raise ValueError(
            f"the schema has {total} columns and nested fields in all, more than {max_fields} "
            "(intake.max_schema_fields)"
        )


def _serialize(value: DataTypeValue) -> str | dict[str, Any]:
    return value.value if isinstance(value, Primitive) else value.delta


#: A column's declared type as pydantic reads, writes (a primitive's canonical name, a nested
#: type's Delta JSON) and documents it.
DataType = Annotated[
    DataTypeValue,
    PlainValidator(parse_type),
    PlainSerializer(_serialize),
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "string",
                    "description": "A short name (int64, float64, ...), Delta's name (long, double, ...) or "
                    "decimal(p,s).",
                },
                {
                    "type": "object",
                    "description": "A nested type as Delta's schema JSON writes it, to any depth (each level "
                    "with its own nullability): " + _NESTED_FORMS,
                    "properties": {"type": {"enum": ["struct", "array", "map"]}},
                    "required": ["type"],
                },
            ],
            "examples": [
                "int64",
                "long",
                "decimal(10,2)",
                "timestamp_ntz",
                {"type": "array", "elementType": "string", "containsNull": False},
                {
                    "type": "struct",
                    "fields": [{"name": "sku", "type": "string", "nullable": False, "metadata": {}}],
                },
            ],
        }
    ),
]


def check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"{what} {value!r} must start with a letter or underscore and hold only letters, digits and "
            "underscores (at most 128 characters)"
        )
    return value


class Column(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: DataType
    nullable: bool = True

    @model_validator(mode="before")
    @classmethod
    def _delta_field(cls, data: Any) -> Any:
        """A field of Delta's schema JSON is a column as it is: its ``metadata`` (not kept) may come along."""
        if isinstance(data, dict) and "metadata" in data:
            if not isinstance(data["metadata"], dict):
                raise ValueError("metadata must be an object")
            data = {k: v for k, v in data.items() if k != "metadata"}
        return data

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value, "column name")


class TableSchema(BaseModel):
    """Ordered columns plus the partition columns (a subset, written as directories).

    A latest-state table (``mode = "latest"`` in its declaration, loader/core/tables.py)
    also has a ``key``, the columns that name a row (one row per key in the table), and
    optionally ``order_by``, the column whose larger value is the newer one (else arrival
    order decides). They belong to the schema because every writer needs them: a load of
    such a table is an upsert by key, not an append.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: tuple[Column, ...] = Field(min_length=1)
    partition_by: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    order_by: str | None = None
    #: Latest tables: how a load replaces stored keys (docs/latest-tables.md, "Choosing the
    #: upsert"): ``merge`` rewrites the files holding them (deltalake's MERGE), ``deletion-vectors``
    #: marks their rows deleted and writes only the batch (loader/loading/sinks/upsert_dv.py).
    upsert: UpsertStrategy = "merge"

    @model_serializer(mode="wrap")
    def _without_default_upsert(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``upsert`` only where it is not the default, so schemas saved before it read the same."""
        data = handler(self)
        if isinstance(data, dict) and data.get("upsert") == "merge":
            del data["upsert"]
        return data

    @model_validator(mode="before")
    @classmethod
    def _delta_schema(cls, data: Any) -> Any:
        """A table's schema as its Delta log writes it (``{"type": "struct", "fields": [...]}``,
        the ``schemaString``), its fields the columns; partition_by and the rest may stand beside."""
        if isinstance(data, dict) and data.get("type") == "struct" and "fields" in data and "columns" not in data:
            return {"columns": data["fields"], **{k: v for k, v in data.items() if k not in ("type", "fields")}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TableSchema:
        names = [c.name for c in self.columns]
        lowered = [n.lower() for n in names]
        duplicates = sorted({n for n in lowered if lowered.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate column names (case-insensitive): {duplicates}")
        unknown = [p for p in self.partition_by if p not in names]
        if unknown:
            raise ValueError(f"partition columns {unknown} are not columns of the table; columns are {names}")
        if len(set(self.partition_by)) != len(self.partition_by):
            raise ValueError("partition columns repeat")
        if len(self.partition_by) == len(names):
            raise ValueError("at least one column must not be a partition column")
        by_name = {c.name: c for c in self.columns}
        for what, chosen in (
            ("partition columns", self.partition_by),
            ("key columns", self.key),
            ("order_by column", (self.order_by,) if self.order_by in by_name else ()),
        ):
            nested = [n for n in chosen if n in by_name and not by_name[n].type.primitive]
            if nested:
                raise ValueError(
                    f"{what} {nested} are of nested types ({', '.join(str(by_name[n].type)[:80] for n in nested)}); "
                    f"{what} must be of a primitive type"
                )
        binary = [p for p in self.partition_by if by_name[p].type.kind is ColumnType.binary]
        if binary:
            raise ValueError(
                f"partition columns {binary} are binary, which Spark cannot partition by; partition by another "
                "column (or declare it string)"
            )
        fractional = [
            p for p in self.partition_by if by_name[p].type.kind is ColumnType.decimal and by_name[p].type.scale
        ]
        if fractional:
            raise ValueError(
                f"partition columns {fractional} are decimals with digits after the point, whose negative values "
                "the deltalake package (delta-rs) misreads from a partition directory (-0.50 as 0.-50), so that "
                "no reader of its could read the table; partition by a decimal of scale 0 or by another column"
            )
        reserved = [n for n in names if n.lower().startswith(RESERVED_PREFIX)]
        if self.key and reserved:
            raise ValueError(
                f"columns {reserved} of a latest table: names starting {RESERVED_PREFIX!r} are the loader's"
            )
        unknown = [k for k in self.key if k not in by_name]
        if unknown:
            raise ValueError(f"key columns {unknown} are not columns of the table; columns are {names}")
        if len(set(self.key)) != len(self.key):
            raise ValueError("key columns repeat")
        nullable = [k for k in self.key if by_name[k].nullable]
        if nullable:
            raise ValueError(f'key columns {nullable} must be declared "nullable": false (a key names one row)')
        if self.upsert != "merge":
            if not self.key:
                raise ValueError(
                    f'upsert = "{self.upsert}" is for latest tables (mode = "latest"), which upsert by key'
                )
            if self.partition_by:
                raise ValueError(
                    f'upsert = "{self.upsert}" writes unpartitioned tables only; drop partition_by or use upsert '
                    '= "merge"'
                )
            floats = [k for k in self.key if by_name[k].type.kind in (ColumnType.float32, ColumnType.float64)]
            if floats:
                raise ValueError(
                    f'key columns {floats} are floating point, which upsert = "{self.upsert}" does not match as '
                    'Spark does (-0.0 and 0.0, NaN): key by another type or use upsert = "merge"'
                )
        if self.order_by is not None:
            if not self.key:
                raise ValueError("order_by needs a key: it decides which of a key's values is the newest")
            if self.order_by not in by_name:
                raise ValueError(f"order_by column {self.order_by!r} is not a column of the table; columns are {names}")
            if self.order_by in self.key:
                raise ValueError(f"order_by column {self.order_by!r} is part of the key; choose another column")
            if by_name[self.order_by].nullable:
                raise ValueError(f'order_by column {self.order_by!r} must be declared "nullable": false')
        return self

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def latest(self) -> bool:
        """A latest-state table: loads upsert by ``key`` (loader/loading/sinks/upsert.py)."""
        return bool(self.key)

    @property
    def exact_numbers(self) -> bool:
        """Whether JSON numbers must be parsed from their text (a decimal column takes them exactly)."""
        return any(
            c.type.kind is ColumnType.decimal
            if isinstance(c.type, Primitive)
            else any(leaf.kind is ColumnType.decimal for leaf in c.type.leaves())
            for c in self.columns
        )

    @property
    def nested(self) -> bool:
        """Whether a column is of a struct, array or map type."""
        return not all(c.type.primitive for c in self.columns)

    def arrow(self) -> pa.Schema:
        return _arrow_schema(self)

    def spark_ddl(self) -> str:
        return ", ".join(f"`{c.name}` {c.type.spark}{'' if c.nullable else ' NOT NULL'}" for c in self.columns)


@functools.lru_cache(maxsize=1024)
def _arrow_schema(schema: TableSchema) -> pa.Schema:
    """Built once per distinct schema (every update is checked against it). A cache beside
    the frozen model rather than on it: ``model_copy(update=...)`` would copy a cached value."""
    return pa.schema([pa.field(c.name, c.type.arrow, nullable=c.nullable) for c in schema.columns])
