"""The workloads: N tables, Poisson arrivals per table, 100 rows per update, seeded.

Every system of one workload replays the same schedule (same seed). Each row carries the
id of its update (``u``), so that the outside reader can tell which updates a commit
made visible and count, at the end, the rows of every update (nothing lost, nothing
twice). Update ids 0..N-1 are the priming updates (one per table, visible before the
measurement starts), the scheduled ones follow in arrival order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from loader.core.schema import TableSchema

#: The tables' schema in the loader's declaration format (loader/core/tables.py).
SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "u", "type": "int64", "nullable": False},
        {"name": "r", "type": "int32", "nullable": False},
        {"name": "v", "type": "float64"},
        {"name": "s", "type": "string"},
    ]
}
ARROW_SCHEMA = TableSchema.model_validate(SCHEMA).arrow()
UPDATE_ID = "u"


@dataclass(frozen=True)
class Workload:
    tables: int
    #: Poisson arrivals per second of each table.
    rate: float
    #: Seconds of arrivals before the measurement window opens (the backlog of a cold
    #: start settles), and the window itself.
    warmup: float
    duration: float
    rows_per_update: int = 100
    seed: int = 14

    @property
    def name(self) -> str:
        return f"{self.tables} tables"

    @property
    def horizon(self) -> float:
        return self.warmup + self.duration

    def table_names(self) -> list[str]:
        width = max(4, len(str(self.tables - 1)))
        return [f"t{i:0{width}d}" for i in range(self.tables)]


def schedule(workload: Workload) -> list[list[Any]]:
    """``[offset s, table, update id]`` of every table's Poisson arrivals over the horizon, in
    time order. Seeded per workload (seed, table count), so every system replays the same schedule."""
    rng = np.random.default_rng([workload.seed, workload.tables])
    events: list[tuple[float, int]] = []
    for table in range(workload.tables):
        t = float(rng.exponential(1.0 / workload.rate))
        while t < workload.horizon:
            events.append((t, table))
            t += float(rng.exponential(1.0 / workload.rate))
    events.sort()
    return [[offset, table, workload.tables + k] for k, (offset, table) in enumerate(events)]


def priming(workload: Workload) -> list[list[Any]]:
    """One update per table at the start, visible before the window opens."""
    return [[0.0, table, table] for table in range(workload.tables)]


def rows_json(uid: int, rows: int) -> list[dict[str, Any]]:
    return [{"u": uid, "r": r, "v": uid + r / 1000.0, "s": f"u{uid:08d}-r{r:03d}"} for r in range(rows)]


def update_body(uid: int, rows: int) -> bytes:
    """The JSON body of ``POST /v1/tables/{t}/updates`` for one update."""
    return json.dumps({"rows": rows_json(uid, rows)}, separators=(",", ":")).encode()


def rows_arrow(uid: int, rows: int) -> pa.Table:
    """The same rows as an Arrow table (the peer's landing files)."""
    return pa.Table.from_pylist(rows_json(uid, rows), schema=ARROW_SCHEMA)
