"""The small table the Spark benchmarks load, (id int64 not null, v float64, s string), and
table declarations from their columns' short form (``declared``, ``schema``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from loader.core.schema import TableSchema


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
