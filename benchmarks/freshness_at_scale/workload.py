"""The workloads: N tables, Poisson arrivals per table, 100 rows per update, seeded.

Every system of one workload replays the same schedule (same seed). Each row carries the
id of its update (``u``), so that the outside reader can tell which updates a commit
made visible and count, at the end, the rows of every update (nothing lost, nothing
twice). Update ids 0..N-1 are the priming updates (one per table, visible before the
measurement starts), the scheduled ones follow in arrival order.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

#: The tables' schema in the loader's declaration format (loader/core/tables.py).
SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "u", "type": "int64", "nullable": False},
        {"name": "r", "type": "int32", "nullable": False},
        {"name": "v", "type": "float64"},
        {"name": "s", "type": "string"},
    ]
}
ARROW_SCHEMA = pa.schema(
    [
        pa.field("u", pa.int64(), nullable=False),
        pa.field("r", pa.int32(), nullable=False),
        pa.field("v", pa.float64()),
        pa.field("s", pa.string()),
    ]
)
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
    def total_rate(self) -> float:
        return self.tables * self.rate

    @property
    def horizon(self) -> float:
        return self.warmup + self.duration

    def table_names(self) -> list[str]:
        width = max(4, len(str(self.tables - 1)))
        return [f"t{i:0{width}d}" for i in range(self.tables)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Arrival:
    """A scheduled update: ``offset`` seconds after the start, of table ``table`` (index)."""

    offset: float
    table: int
    uid: int


def schedule(workload: Workload) -> list[Arrival]:
    """Poisson arrivals of every table over the horizon, merged in time order.

    Seeded per workload (seed, table count), so every system replays the same schedule.
    """
    rng = np.random.default_rng([workload.seed, workload.tables])
    events: list[tuple[float, int]] = []
    for table in range(workload.tables):
        t = 0.0
        while True:
            t += float(rng.exponential(1.0 / workload.rate))
            if t >= workload.horizon:
                break
            events.append((t, table))
    events.sort()
    first = workload.tables  # 0..N-1 are the priming updates
    return [Arrival(offset, table, first + k) for k, (offset, table) in enumerate(events)]


def priming(workload: Workload) -> list[Arrival]:
    """One update per table at the start, visible before the window opens."""
    return [Arrival(0.0, table, table) for table in range(workload.tables)]


def rows_json(uid: int, rows: int) -> list[dict[str, Any]]:
    return [{"u": uid, "r": r, "v": uid + r / 1000.0, "s": f"u{uid:08d}-r{r:03d}"} for r in range(rows)]


def update_body(uid: int, rows: int) -> bytes:
    """The JSON body of ``POST /v1/tables/{t}/updates`` for one update."""
    return json.dumps({"rows": rows_json(uid, rows)}, separators=(",", ":")).encode()


def rows_arrow(uid: int, rows: int) -> pa.Table:
    """The same rows as an Arrow table (the peer's landing files)."""
    r = np.arange(rows, dtype=np.int32)
    return pa.table(
        {
            "u": pa.array(np.full(rows, uid, dtype=np.int64)),
            "r": pa.array(r),
            "v": pa.array(uid + r / 1000.0),
            "s": pa.array([f"u{uid:08d}-r{x:03d}" for x in range(rows)]),
        },
        schema=ARROW_SCHEMA,
    )
