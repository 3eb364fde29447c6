"""What the Spark-load benchmarks share: a session stopped on the way out, the product's sink over
a temporary warehouse, a timed call, a batch; the small table they load, (id int64 not null,
v float64, s string), and table declarations from their columns' short form (``declared``, ``schema``)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from loader.core.schema import TableSchema
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


def timed(function: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """``function(*args, **kwargs)`` and its wall seconds."""
    began = time.perf_counter()
    out = function(*args, **kwargs)
    return out, time.perf_counter() - began


def one_update(table: str, seq: int, rows: pa.Table) -> Batch:
    """A batch of one update: sequence ``seq``, arrived at ``seq`` seconds."""
    return Batch(table, (Update(table, seq, float(seq), rows),))


def declared(*columns: str) -> dict[str, Any]:
    """A schema in the loader's declaration format, its columns written ``"name type"`` or ``"name type not null"``."""
    parsed = [{"name": c.split()[0], "type": c.split()[1], "nullable": not c.endswith(" not null")} for c in columns]
    return {"columns": parsed}


def schema(*columns: str, **declaration: Any) -> TableSchema:
    """A table schema from its columns' short form (``declared``) and the rest of its declaration
    (``key``, ``order_by``, ...)."""
    return TableSchema.model_validate(declared(*columns) | declaration)


SCHEMA = schema("id int64 not null", "v float64", "s string")


def small_rows(ids: Sequence[int], label: str = "row", typed: bool = True) -> pa.Table:
    """One row per id: ``v`` half the id, ``s`` a label and the id's last three digits; ``typed``:
    with the schema's Arrow types (else pyarrow's inferred ones)."""
    data = {"id": list(ids), "v": [i * 0.5 for i in ids], "s": [f"{label}-{i % 1000:04d}" for i in ids]}
    return pa.table(data, schema=SCHEMA.arrow()) if typed else pa.table(data)
