"""Table schemas: the column types a warehouse table may have, and their mappings.

One small type vocabulary is shared by intake validation (JSON rows), the WAL payload
(Arrow), Spark (DDL strings) and Delta (through Arrow), so that a table written by
either Delta writer path reads back with the same types everywhere.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from enum import Enum

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Column names a latest table's load uses for itself (loader/loading/sinks/upsert.py).
RESERVED_PREFIX = "__loader_"


class ColumnType(str, Enum):
    string = "string"
    int32 = "int32"
    int64 = "int64"
    float32 = "float32"
    float64 = "float64"
    boolean = "boolean"
    date = "date"
    timestamp = "timestamp"  # microseconds, UTC (Delta's `timestamp`)


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
    ColumnType.int32: (-(2**31), 2**31 - 1),
    ColumnType.int64: (-(2**63), 2**63 - 1),
}
DATE_MIN = dt.date(1, 1, 1)
DATE_MAX = dt.date(9999, 12, 31)
TIMESTAMP_MIN = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
TIMESTAMP_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)


ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    ColumnType.string: pa.string(),
    ColumnType.int32: pa.int32(),
    ColumnType.int64: pa.int64(),
    ColumnType.float32: pa.float32(),
    ColumnType.float64: pa.float64(),
    ColumnType.boolean: pa.bool_(),
    ColumnType.date: pa.date32(),
    ColumnType.timestamp: pa.timestamp("us", tz="UTC"),
}

SPARK_TYPES: dict[ColumnType, str] = {
    ColumnType.string: "STRING",
    ColumnType.int32: "INT",
    ColumnType.int64: "BIGINT",
    ColumnType.float32: "FLOAT",
    ColumnType.float64: "DOUBLE",
    ColumnType.boolean: "BOOLEAN",
    ColumnType.date: "DATE",
    ColumnType.timestamp: "TIMESTAMP",
}


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
    type: ColumnType
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

    def arrow(self) -> pa.Schema:
        return _arrow_schema(self)

    def spark_ddl(self) -> str:
        return ", ".join(f"`{c.name}` {SPARK_TYPES[c.type]}{'' if c.nullable else ' NOT NULL'}" for c in self.columns)


@functools.lru_cache(maxsize=1024)
def _arrow_schema(schema: TableSchema) -> pa.Schema:
    """Built once per distinct schema (every update is checked against it). A cache beside
    the frozen model rather than on it: ``model_copy(update=...)`` would copy a cached value."""
    return pa.schema([pa.field(c.name, ARROW_TYPES[c.type], nullable=c.nullable) for c in schema.columns])
