"""Table schemas: the column types a warehouse table may have, and their mappings.

One small type vocabulary is shared by intake validation (JSON rows), the WAL payload
(Arrow), Spark (DDL strings) and Delta (through Arrow), so that a table written by
either Delta writer path reads back with the same types everywhere.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

import pyarrow as pa
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
    model_validator,
)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Column names a latest table's load uses for itself (loader/loading/sinks/upsert.py).
RESERVED_PREFIX = "__loader_"


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
    """A column's type. One class of a small family so that nested types fit beside it: a
    struct, array or map type will be another frozen class with the same members (``value``,
    ``arrow``, ``spark``, ``delta``), holding its fields' or elements' types, and
    ``parse_type`` will read Delta's JSON objects (``{"type": "struct", ...}``) into them."""

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


def decimal(precision: int, scale: int) -> Primitive:
    if not 1 <= precision <= DECIMAL_MAX_PRECISION:
        raise ValueError(f"decimal precision {precision} must be 1 to {DECIMAL_MAX_PRECISION}")
    if not 0 <= scale <= precision:
        raise ValueError(f"decimal scale {scale} must be 0 to the precision ({precision})")
    return Primitive(ColumnType.decimal, precision, scale)


def parse_type(value: Any) -> Primitive:
    """A declared type: a Primitive, or a name (short or Delta's, case-insensitive as Delta's
    are), ValueError naming the accepted forms otherwise."""
    if isinstance(value, Primitive):
        return value
    if isinstance(value, str):
        name = value.strip().lower()
        kind = _KIND_NAMES.get(name)
        if kind is not None and kind is not ColumnType.decimal:
            return Primitive(kind)
        match = _DECIMAL.match(name)
        if match:
            return decimal(int(match.group(1)), int(match.group(2)))
        if name == "decimal":
            raise ValueError("a decimal type needs its precision and scale, e.g. decimal(10,2)")
    if isinstance(value, dict) and value.get("type") in ("struct", "array", "map"):
        raise ValueError(f"{value['type']} types are not supported yet; declare primitive columns")
    names = sorted(n for n in _KIND_NAMES if n != "decimal")
    raise ValueError(f"unknown column type {str(value)[:60]!r}; types are {names} and decimal(precision,scale)")


#: A column's declared type as pydantic reads, writes (its canonical name) and documents it.
DataType = Annotated[
    Primitive,
    PlainValidator(parse_type),
    PlainSerializer(lambda t: t.value, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "description": "A short name (int64, float64, ...), Delta's name (long, double, ...) or decimal(p,s).",
            "examples": ["int64", "long", "decimal(10,2)", "timestamp_ntz"],
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
        return any(c.type.kind is ColumnType.decimal for c in self.columns)

    def arrow(self) -> pa.Schema:
        return _arrow_schema(self)

    def spark_ddl(self) -> str:
        return ", ".join(f"`{c.name}` {c.type.spark}{'' if c.nullable else ' NOT NULL'}" for c in self.columns)


@functools.lru_cache(maxsize=1024)
def _arrow_schema(schema: TableSchema) -> pa.Schema:
    """Built once per distinct schema (every update is checked against it). A cache beside
    the frozen model rather than on it: ``model_copy(update=...)`` would copy a cached value."""
    return pa.schema([pa.field(c.name, c.type.arrow, nullable=c.nullable) for c in schema.columns])
