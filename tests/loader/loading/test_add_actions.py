"""Delta statistics and partition values at the ends of the timestamp range (issue 33).

The upper bound of a timestamp column is its maximum rounded up to a millisecond; for
9999-12-31T23:59:59.999999 there is no such millisecond, and computing it failed every
load of the batch (``OverflowError: date value out of range``) after intake had answered
202. Years before 1000 were written unpadded ("1-01-01T..."), which deltalake cannot
parse: a filtered read then skipped files it needed.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.schema import TableSchema
from loader.loading.sinks.add_actions import file_stats, partition_values

UTC = dt.UTC
SCHEMA = TableSchema.model_validate(
    {"columns": [{"name": "ts", "type": "timestamp"}, {"name": "d", "type": "date"}], "partition_by": ["d"]}
)


def _stats(tmp_path: Path, moments: list[dt.datetime]) -> dict:
    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"ts": pa.array(moments, pa.timestamp("us", "UTC"))}), path)
    return json.loads(file_stats(str(path), SCHEMA).to_json())


def test_the_bounds_of_the_last_microsecond_are_stated_not_overflowed(tmp_path: Path) -> None:
    stats = _stats(tmp_path, [dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)])
    assert stats["minValues"]["ts"] == "9999-12-31T23:59:59.999Z"  # floored: still a lower bound
    assert stats["maxValues"]["ts"] == "9999-12-31T23:59:59.999999Z"  # no millisecond above it: the value itself


def test_bounds_before_year_1000_are_padded_to_four_digits(tmp_path: Path) -> None:
    stats = _stats(tmp_path, [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(999, 12, 31, 0, 0, 0, 1, tzinfo=UTC)])
    assert stats["minValues"]["ts"] == "0001-01-01T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "0999-12-31T00:00:00.001Z"  # rounded up, as every upper bound


def test_timestamp_partition_values_are_padded_to_four_digits() -> None:
    schema = TableSchema.model_validate(
        {"columns": [{"name": "ts", "type": "timestamp"}, {"name": "v", "type": "int64"}], "partition_by": ["ts"]}
    )
    relative = PurePosixPath("ts=0001-01-01 00%3A00%3A00/part-0.parquet")
    assert partition_values(relative, schema) == {"ts": "0001-01-01T00:00:00.000000Z"}
