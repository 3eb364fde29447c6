"""The data that crosses module lines between intake, the WAL, the pending store and sinks.

An update's payload is either rows (an Arrow table, validated against the table's
schema) or files in the landing directory that Spark reads itself, so large feeds never
travel through the API or the driver's memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

#: The largest record the write-ahead log holds: a frame's payload limit (loader/durability/wal_format.py;
#: bigger lengths there are damage, not records). Intake keeps a request's rows well below it.
MAX_RECORD_BYTES = 1 << 30
#: ``Update.arrived`` packs (update sequence, row position) into one integer.
ARRIVAL_SHIFT = 32


def arrival(seq: int, position: int) -> int:
    """A row's arrival order: by update sequence, then position in the update."""
    return (seq << ARRIVAL_SHIFT) | position


class FileFormat(str, Enum):
    parquet = "parquet"
    csv = "csv"
    json = "json"  # JSON Lines, as Spark reads it


@dataclass(frozen=True, slots=True)
class FileRef:
    """A landing file: absolute resolved path (inside the landing directory) and format."""

    path: str
    format: FileFormat
    size: int


@dataclass(frozen=True, slots=True)
class SpilledRows:
    """An update's rows while they live in a spill segment (``loader.pending.spill.segments``).

    Rows ``offset .. offset+rows`` of the Parquet file at ``path``, which holds
    ``segment_rows`` rows of consecutive updates of one table, in order.
    """

    path: str
    offset: int
    rows: int
    segment_rows: int
    nbytes: int

    def read(self) -> pa.Table:
        """The update's rows out of its segment (the driver's path; a load job reads whole
        segments itself, loader/loading/sinks/frame.py)."""
        return pq.read_table(self.path).slice(self.offset, self.rows)


@dataclass(frozen=True, slots=True)
class Update:
    """One acknowledged update of one table.

    ``seq`` is table-local and strictly increasing; ``release`` is the end of the data
    interval the update carries (Unix seconds), r_ij in the model.
    """

    table: str
    seq: int
    release: float
    rows: pa.Table | None = None
    files: tuple[FileRef, ...] = ()
    #: Where the rows are while spilled to disk (then ``rows`` is None).
    spilled: SpilledRows | None = None
    #: Latest tables: the arrival of each row, ``seq << 32 | position`` of the update the
    #: row came with, once the pending store moved rows between updates (a key's new value
    #: into the place of its waiting one, loader/pending/keyed.py). Empty: every row arrived
    #: with this update, in this order. The newest value of a key is the largest arrival.
    arrived: tuple[int, ...] = ()

    @property
    def resident_bytes(self) -> int:
        """Payload bytes this update holds in memory (what the pending store budgets)."""
        # get_total_buffer_size keeps the GIL (~0.5 us); Table.nbytes releases and retakes
        # it, which costs milliseconds whenever a loader thread is running Python.
        return self.rows.get_total_buffer_size() if self.rows is not None else 0

    @property
    def nbytes(self) -> int:
        spilled = self.spilled.nbytes if self.spilled is not None else 0
        return self.resident_bytes + spilled + sum(f.size for f in self.files)

    @property
    def n_rows(self) -> int | None:
        """Row count when known before loading (rows payloads); None for files."""
        if self.files:
            return None
        if self.spilled is not None:
            return self.spilled.rows
        return self.rows.num_rows if self.rows is not None else None


@dataclass(frozen=True, slots=True)
class WalRecord:
    """One acknowledged update plus what the idempotency store needs to rebuild itself.

    ``response`` is the body the client was sent (replayed for a retry with the same
    Idempotency-Key); ``created_at`` starts the key's retention period. Both round-trip
    exactly (JSON floats are written with ``repr``).
    """

    update: Update
    idempotency_key: str | None = None
    request_hash: str | None = None
    response: dict[str, Any] | None = None
    created_at: float = field(default_factory=time.time)
    #: The rows' record batch as an Arrow IPC message, when intake received them so: written
    #: as they are (loader/durability/wal_format.py), not encoded again. Never read back.
    rows_message: bytes | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """All pending updates of one table at dispatch time: one Delta append.

    ``last_seq`` is the Delta transaction version of the commit (exactly-once key).
    """

    table: str
    updates: tuple[Update, ...]

    def __post_init__(self) -> None:
        if not self.updates:
            raise ValueError("a batch holds at least one update")
        seqs = [u.seq for u in self.updates]
        if any(b <= a for a, b in zip(seqs, seqs[1:])):
            raise ValueError(f"batch sequence numbers must increase: {seqs}")

    @property
    def first_seq(self) -> int:
        return self.updates[0].seq

    @property
    def last_seq(self) -> int:
        return self.updates[-1].seq

    @property
    def row_tables(self) -> list[pa.Table]:
        return [u.rows for u in self.updates if u.rows is not None]

    @property
    def spilled(self) -> list[SpilledRows]:
        return [u.spilled for u in self.updates if u.spilled is not None]

    @property
    def files(self) -> list[FileRef]:
        return [f for u in self.updates for f in u.files]

    @property
    def nbytes(self) -> int:
        return sum(u.nbytes for u in self.updates)


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What a sink reports after loading a batch."""

    table: str
    last_seq: int
    rows: int
    delta_version: int | None
    #: True when the Delta log already held this transaction (a replay after a crash).
    skipped: bool = False
    files_written: int = 0
    bytes_written: int = 0
    details: dict[str, float] = field(default_factory=dict)
    #: In a job shared by several tables: the seconds this table's own part took (its input
    #: file, its Parquet write on an executor, its publish and commit). The dispatcher splits
    #: the job's duration by these, so each table's cost estimate learns from its own work,
    #: not from what the estimates predicted (a split by prediction would feed itself back).
    #: None when the sink cannot tell.
    own_seconds: float | None = None
    #: Wall-clock instants (epoch seconds) of the job's stages this load passed, by name
    #: (loader/core/timeline.py): stamped by the sink, the worker process and the service.
    marks: dict[str, float] = field(default_factory=dict)
