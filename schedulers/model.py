"""Data that crosses module lines: table specs, traces, batch records, live table state.

The model is the one of Bateni et al. section 2: table i receives updates at release
times r_i1 < r_i2 < ...; the update released at r_ij carries data for (r_i,j-1, r_ij]
with r_i0 = 0, and a batch of total length L takes overhead_i + alpha_i * L seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schedulers.keys.cost import Rewrite
from schedulers.keys.queue import DEFAULT_KEY_POLICY, KeyPolicy

#: Smoothing factor of the online period estimate (an EWMA of update lengths).
#: 1/8 follows the TCP RTT estimator: stable under quasiperiodic jitter in [B/2, B],
#: yet it follows a real change of rate within a few dozen updates.
PERIOD_EWMA_GAIN = 0.125


class KeyedSpec(BaseModel):
    """A latest table (UpStream section 5) as the scheduler knows it.

    Its batch loads the values waiting in the updates it takes, one per key, so it costs
    ``overhead + per_key * keys + rewrite.seconds(keys)`` rather than the append model's
    ``alpha * length`` (``rewrite``: the stored rows a MERGE copies, schedulers/keys/cost.py):
    however many updates a hot key got while it waited, it is upserted once. And with
    ``max_keys_per_batch`` a batch takes only the updates at the head of the key queue.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Where a key's new value waits (``schedulers.keys.queue``).
    policy: KeyPolicy = DEFAULT_KEY_POLICY
    max_keys_per_batch: int | None = Field(default=None, ge=1, strict=True)
    #: Seconds to load one key's value (the live service fits it online).
    per_key: float = Field(default=0.0, ge=0.0, allow_inf_nan=False, strict=True)
    #: What the table's upsert rewrites beyond its keys (a MERGE: the files holding them;
    #: schedulers/keys/cost.py). The default rewrites nothing.
    rewrite: Rewrite = Rewrite()


class TableSpec(BaseModel):
    """A table as the scheduler knows it: cost model, priority and optional period hint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    # strict: a number written as a string ("0.1") or a bool is a mistake in a trace or
    # an API call, not something to coerce; ints are still accepted for floats.
    alpha: float = Field(ge=0.0, allow_inf_nan=False, strict=True)
    overhead: float = Field(default=0.0, ge=0.0, allow_inf_nan=False, strict=True)
    weight: float = Field(default=1.0, gt=0.0, allow_inf_nan=False, strict=True)
    period: float | None = Field(default=None, gt=0.0, allow_inf_nan=False, strict=True)
    #: A latest table's key queue (None: an append table).
    keyed: KeyedSpec | None = None
    #: A join view over these tables (docs/join-views.md): it has no updates of its own; each
    #: load of an input that commits releases one, when it commits (schedulers/simulator.py).
    view_of: tuple[str, ...] | None = Field(default=None, min_length=1)

    @field_validator("name")
    @classmethod
    def _no_blank_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("table name must not be blank")
        return value

    @field_validator("view_of")
    @classmethod
    def _distinct_inputs(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("a view names each input table once")
        return value


@dataclass
class Trace:
    """A workload: tables plus the update stream, held column-wise.

    Columns (not one object per update) because a million-update trace must fit in
    memory cheaply and the simulator walks it in order.
    """

    tables: list[TableSpec]
    update_tables: list[int] = field(default_factory=list)
    update_releases: list[float] = field(default_factory=list)
    #: The keys each update carries, by update (empty when no table is keyed; () for an
    #: update of an append table). Only latest tables' updates need them.
    update_keys: list[tuple[int | str, ...]] = field(default_factory=list)

    @property
    def n_updates(self) -> int:
        return len(self.update_releases)

    def table_index(self) -> dict[str, int]:
        return {spec.name: i for i, spec in enumerate(self.tables)}

    def views_over(self) -> list[list[int]]:
        """Per table: the views whose input it is (ids); checked by ``traces.parse_trace``."""
        index = self.table_index()
        over: list[list[int]] = [[] for _ in self.tables]
        for vid, spec in enumerate(self.tables):
            for name in spec.view_of or ():
                over[index[name]].append(vid)
        return over

    def releases_by_table(self) -> list[list[float]]:
        per_table: list[list[float]] = [[] for _ in self.tables]
        for tid, release in zip(self.update_tables, self.update_releases):
            per_table[tid].append(release)
        return per_table


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One executed batch: a line of the schedule output."""

    table: str
    processor: int
    start: float
    finish: float
    first_release: float
    last_release: float
    n_updates: int
    #: The job the batch ran in (batches of one multi-table job share it), and its table count.
    job: int | None = None
    job_tables: int = 1

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "table": self.table,
            "processor": self.processor,
            "start": self.start,
            "finish": self.finish,
            "first_release": self.first_release,
            "last_release": self.last_release,
            "n_updates": self.n_updates,
        }
        if self.job_tables > 1:
            out["job"] = self.job
            out["job_tables"] = self.job_tables
        return out


class TableState:
    """Live scheduling state of one table, read by policies through the view.

    Releases are kept as one list with a cursor (``dispatched``) rather than a queue of
    update objects: everything before the cursor is in a finished or running batch,
    everything from it on is pending. That keeps every question a policy asks O(1).
    """

    __slots__ = (
        "tid",
        "name",
        "weight",
        "alpha",
        "overhead",
        "period_hint",
        "period_estimate",
        "releases",
        "dispatched",
        "running",
        "current_upto",
        "paused",
        "origin",
        "resident_bytes",
        "keyed",
        "per_key",
        "rewrite",
        "max_keys",
        "waiting_keys",
        "batch_keys",
        "batch_updates",
    )

    def __init__(self, tid: int, spec: TableSpec, origin: float = 0.0) -> None:
        self.tid = tid
        self.name = spec.name
        self.weight = spec.weight
        self.alpha = spec.alpha
        self.overhead = spec.overhead
        self.period_hint = spec.period
        self.period_estimate: float | None = None
        self.releases: list[float] = []
        self.dispatched = 0
        self.running = False
        #: r_i0: start of the first update's data interval (0 in traces; the live
        #: service uses the table's registration time or the last loaded release).
        self.origin = origin
        self.current_upto = origin
        self.paused = False
        #: Payload bytes of pending updates held in memory (Chain's memory pressure).
        self.resident_bytes = 0
        #: A latest table's key queue, as its driver last reported it (``set_keys``): the
        #: keys waiting, and the updates and keys the next batch would take.
        self.keyed = spec.keyed is not None
        self.per_key = spec.keyed.per_key if spec.keyed is not None else 0.0
        self.rewrite = spec.keyed.rewrite if spec.keyed is not None else Rewrite()
        self.max_keys = spec.keyed.max_keys_per_batch if spec.keyed is not None else None
        self.waiting_keys = 0
        self.batch_keys = 0
        self.batch_updates: int | None = None

    # -- what the driver calls -------------------------------------------------
    def release(self, at: float) -> None:
        """Record a newly released update and fold its length into the period estimate."""
        previous = self.releases[-1] if self.releases else self.origin
        length = at - previous
        estimate = self.period_estimate
        self.period_estimate = length if estimate is None else estimate + PERIOD_EWMA_GAIN * (length - estimate)
        self.releases.append(at)

    def set_keys(self, waiting: int, batch_keys: int, batch_updates: int | None) -> None:
        """A latest table's key queue changed: ``waiting`` keys, of which the next batch
        loads ``batch_keys`` from ``batch_updates`` updates at the head (None: all)."""
        self.waiting_keys = waiting
        self.batch_keys = batch_keys
        self.batch_updates = batch_updates

    # -- what policies read ----------------------------------------------------
    @property
    def pending_count(self) -> int:
        return len(self.releases) - self.dispatched

    @property
    def available(self) -> bool:
        """Paper section 4: some update pending and no batch of this table running."""
        return not self.running and not self.paused and len(self.releases) > self.dispatched

    @property
    def oldest_pending(self) -> float:
        return self.releases[self.dispatched] if len(self.releases) > self.dispatched else math.inf

    @property
    def newest_pending(self) -> float:
        return self.releases[-1] if len(self.releases) > self.dispatched else math.inf

    @property
    def pending_start(self) -> float:
        """Start of the data interval of the oldest pending update (r_i,j-1)."""
        d = self.dispatched
        return self.releases[d - 1] if d > 0 else self.origin

    @property
    def pending_length(self) -> float:
        """Length of the batch a worker would start now (sum of pending update lengths)."""
        if len(self.releases) <= self.dispatched:
            return 0.0
        return self.releases[-1] - self.pending_start

    @property
    def period(self) -> float | None:
        """The table's update period: the operator's hint when given, else the estimate."""
        return self.period_hint if self.period_hint is not None else self.period_estimate

    def predicted_duration(self, length: float) -> float:
        return self.overhead + self.alpha * length

    # -- the batch a worker would start now ---------------------------------------
    # Policies rank tables by these, not by ``pending_length``: a latest table's batch may
    # take only the head of its queue (``max_keys_per_batch``), and costs by keys.
    @property
    def batch_count(self) -> int:
        """Pending updates the next batch takes."""
        pending = len(self.releases) - self.dispatched
        limit = self.batch_updates
        if limit is None or limit >= pending:
            return pending
        return max(1, limit)  # (a batch takes at least one update)

    @property
    def batch_length(self) -> float:
        """How far the next batch moves the table's freshness: the data it makes current."""
        count = self.batch_count
        if not count:
            return 0.0
        return self.releases[self.dispatched + count - 1] - self.pending_start

    @property
    def batch_work(self) -> float:
        """The next batch's seconds beyond the overhead: per key loaded for a latest
        table, and the rows its upsert rewrites; per second of data otherwise (section 2's
        alpha * L)."""
        if self.keyed:
            return self.per_key * self.batch_keys + self.rewrite.seconds(self.batch_keys)
        return self.alpha * self.batch_length

    @property
    def batch_duration(self) -> float:
        """Predicted seconds of the next batch, as a job of its own."""
        return self.overhead + self.batch_work

    @property
    def backlog_seconds(self) -> float:
        """Predicted seconds to make the table current (every pending update loaded): one
        batch, or for a latest table whose batches ``max_keys_per_batch`` bounds, as many
        as its waiting keys need, each paying the overhead."""
        if not self.keyed or self.max_keys is None or self.batch_count >= self.pending_count:
            return self.batch_duration
        batches = max(1, math.ceil(self.waiting_keys / self.max_keys))
        rewrites = batches * self.rewrite.seconds(math.ceil(self.waiting_keys / batches))
        return batches * self.overhead + self.per_key * self.waiting_keys + rewrites

    def forget_loaded(self) -> None:
        """Drop releases of finished batches (a long-running service must not keep them all).

        Keeps the last dispatched release (it is r_i,j-1 of the oldest pending update) by
        moving it into ``origin``; only valid while no batch of the table is running.
        """
        if self.running or self.dispatched == 0:
            return
        self.origin = self.releases[self.dispatched - 1]
        del self.releases[: self.dispatched]
        self.dispatched = 0
