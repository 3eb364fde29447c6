"""The small table the Spark benchmarks load: (id int64 not null, v float64, s string)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from loader.core.schema import TableSchema

COLUMNS = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "v", "type": "float64"},
    {"name": "s", "type": "string"},
]
SCHEMA = TableSchema.model_validate({"columns": COLUMNS})


def small_rows(ids: Sequence[int], label: str = "row", typed: bool = True) -> pa.Table:
    """One row per id: ``v`` half the id, ``s`` a label and the id's last three digits; ``typed``:
    with the schema's Arrow types (else pyarrow's inferred ones)."""
    data = {"id": list(ids), "v": [i * 0.5 for i in ids], "s": [f"{label}-{i % 1000:04d}" for i in ids]}
    return pa.table(data, schema=SCHEMA.arrow()) if typed else pa.table(data)
