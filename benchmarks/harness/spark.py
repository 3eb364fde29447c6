"""What the Spark-load benchmarks share: a session stopped on the way out, the product's sink over
a temporary warehouse, a timed call, a batch."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from loader.core.updates import Batch, Update

T = TypeVar("T")


@contextmanager
def session(master: str = "local[2]", **settings: Any) -> Iterator[Any]:
    """``build_spark_session(master, **settings)``, stopped when the block ends (errors included)."""
    from loader.loading.spark import build_spark_session

    spark = build_spark_session(master, **settings)
    try:
        yield spark
    finally:
        spark.stop()


@contextmanager
def sink(prefix: str = "bench-", **settings: Any) -> Iterator[tuple[Any, Any]]:
    """A session (``session(**settings)``) and a ``DeltaRsSink`` over a temporary warehouse, both gone after."""
    from loader.loading.sinks.delta_rs import DeltaRsSink

    with session(**settings) as spark, tempfile.TemporaryDirectory(prefix=prefix) as warehouse:
        yield spark, DeltaRsSink(Path(warehouse), spark)


def timed(function: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``function(*args)`` and its wall seconds."""
    began = time.perf_counter()
    out = function(*args)
    return out, time.perf_counter() - began


def one_update(table: str, seq: int, rows: pa.Table) -> Batch:
    """A batch of one update: sequence ``seq``, arrived at ``seq`` seconds."""
    return Batch(table, (Update(table, seq, float(seq), rows),))
