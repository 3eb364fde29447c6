"""Delta ``add`` actions for Parquet files Spark wrote: partition values and statistics.

Statistics come from the Parquet footers (no data is read), in the shape Delta Spark and
delta-rs write them, so readers can skip files: numRecords, and per data column
minValues/maxValues/nullCount. Bounds that cannot be stated exactly are left out or
widened, never narrowed: a reader may then read a file it could have skipped, never skip
one it needed.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from loader.core.schema import ColumnType, Primitive, TableSchema

#: Spark's directory name for a null (or empty-string) partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: Longest string bound kept (Delta Spark's default prefix length); longer max bounds are dropped.
STRING_PREFIX = 32

_FRACTION = re.compile(r"\.(\d+)")
#: The last millisecond a timestamp can have (9999-12-31T23:59:59.999): its ceiling does not exist.
_LAST_MILLISECOND = dt.datetime.max.replace(microsecond=999_000, tzinfo=dt.UTC)


@dataclass
class _Bounds:
    """Running min/max/nullCount of one column over a file's row groups."""

    low: Any = None
    high: Any = None
    exact: bool = True  # False once a row group with values lacks min/max
    nulls: int | None = 0

    def add(self, stats: Any, rows: int) -> None:
        if stats is None:
            self.exact, self.nulls = False, None
            return
        if self.nulls is not None:
            self.nulls = self.nulls + stats.null_count if stats.has_null_count else None
        if stats.has_null_count and stats.null_count == rows:
            return  # all null: no bounds to merge
        if not stats.has_min_max:
            self.exact = False
            return
        low, high = stats.min, stats.max
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)


@dataclass
class FileStats:
    num_records: int
    min_values: dict[str, Any] = field(default_factory=dict)
    max_values: dict[str, Any] = field(default_factory=dict)
    null_count: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "numRecords": self.num_records,
                "minValues": self.min_values,
                "maxValues": self.max_values,
                "nullCount": self.null_count,
            },
            separators=(",", ":"),
            allow_nan=False,
        )


def _timestamp(value: Any) -> dt.datetime:
    if hasattr(value, "to_pydatetime"):  # pandas.Timestamp
        value = value.to_pydatetime()
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _millis(value: dt.datetime) -> str:
    # isoformat, not strftime: "%Y" leaves years before 1000 unpadded ("1-01-01"), which readers cannot parse.
    return value.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def _bound(value: Any, kind: ColumnType, upper: bool) -> Any:
    """A statistic as Delta's JSON holds it, or None when it cannot be a safe bound.

    None for decimals, binary and timestamp_ntz: a missing bound only costs a reader's
    skipping of the file, a bound in a form a reader takes differently costs rows."""
    if kind in (ColumnType.decimal, ColumnType.binary, ColumnType.timestamp_ntz):
        return None
    if kind is ColumnType.timestamp:
        # Delta stats hold milliseconds: floor the lower bound, ceil the upper one.
        ts = _timestamp(value)
        floored = ts.replace(microsecond=ts.microsecond // 1000 * 1000)
        if upper and floored != ts:
            if floored == _LAST_MILLISECOND:  # no millisecond above it: the exact value is the bound
                return ts.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
            floored += dt.timedelta(milliseconds=1)
        return _millis(floored)
    if kind is ColumnType.date:
        return value.isoformat()
    if kind in (ColumnType.float32, ColumnType.float64):
        return float(value) if math.isfinite(value) else None
    if kind is ColumnType.string:
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                return None
        if len(value) > STRING_PREFIX:
            return None if upper else value[:STRING_PREFIX]  # a prefix is a lower bound
        return value
    if kind is ColumnType.boolean:
        return bool(value)
    return int(value)


def file_stats(path: str, schema: TableSchema) -> FileStats:
    """Statistics of one Parquet file from its footer (the data columns it holds)."""
    meta = pq.read_metadata(path)
    bounds: dict[str, _Bounds] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            stats = chunk.statistics if chunk.is_stats_set else None
            bounds.setdefault(chunk.path_in_schema, _Bounds()).add(stats, group.num_rows)
    out = FileStats(num_records=meta.num_rows)
    # (nested columns' leaves are named by their path, ``s.a``: no statistics, which costs skipping only)
    kinds = {c.name: c.type.kind for c in schema.columns if isinstance(c.type, Primitive)}
    for name, b in bounds.items():
        kind = kinds.get(name)
        if kind is None:
            continue
        if b.nulls is not None:
            out.null_count[name] = b.nulls
        if b.exact and b.low is not None:
            low, high = _bound(b.low, kind, upper=False), _bound(b.high, kind, upper=True)
            if low is not None:
                out.min_values[name] = low
            if high is not None:
                out.max_values[name] = high
    return out


def _partition_value(raw: str, kind: ColumnType) -> str | None:
    """Spark's escaped directory value as Delta's partitionValues string."""
    if raw == HIVE_NULL:
        return None
    value = unquote(raw)
    if kind is ColumnType.timestamp:
        # Spark writes "2024-01-02 03:04:05.12" (session zone UTC, fraction trimmed);
        # Delta's unambiguous form is ISO-8601 in UTC with microseconds.
        text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), value)
        parsed = dt.datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    if kind is ColumnType.timestamp_ntz:
        # Delta's form for a timestamp without zone: "YYYY-MM-DD HH:MM:SS.ffffff", the wall-clock time.
        text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), value)
        return dt.datetime.fromisoformat(text).isoformat(sep=" ", timespec="microseconds")
    return value


def partition_values(relative: PurePosixPath, schema: TableSchema) -> dict[str, str | None]:
    """Partition values of a file from its hive-style directories (``col=value/...``)."""
    kinds = {c.name: c.type.kind for c in schema.columns if isinstance(c.type, Primitive)}
    values: dict[str, str | None] = {}
    for part in relative.parent.parts:
        name, sep, raw = part.partition("=")
        if not sep or name not in kinds:
            raise ValueError(f"unexpected directory {part!r} in written file {relative}")
        values[name] = _partition_value(raw, kinds[name])
    missing = set(schema.partition_by) - set(values)
    if missing:
        raise ValueError(f"written file {relative} lacks partition directories for {sorted(missing)}")
    return values


def log_path(relative: PurePosixPath) -> str:
    """The add action's path as ``deltalake`` wants it: the plain relative path.

    The Delta log stores a percent-encoded URI, but ``create_write_transaction`` encodes
    the path itself; encoding here too would make Spark's ``%3A`` directories unreadable.
    """
    return relative.as_posix()
