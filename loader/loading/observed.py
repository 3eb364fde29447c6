"""What production really saw: a bounded record of observed releases and finished batches.

The live service keeps a release only until it is loaded (``TableState.forget_loaded``),
so the simulator's "what if" questions need a separate, cheap record of arrivals. It is
kept here, fed by the dispatcher, and exported by ``GET /v1/admin/trace`` (the
simulator's trace format) and ``GET /v1/admin/schedule`` (its schedule format).

Both records are rings stored column-wise in ``array.array`` (unboxed doubles and ints):

- releases: (table id, release), 12 bytes an entry; at the default cap of 1,000,000
  entries 12 MB (grown on demand, so a quiet service holds less). Recording one is two
  appends or two slot writes: O(1), nothing kept per entry but the 12 bytes.
- batches: (table id, worker, start, finish, first release, last release, updates),
  48 bytes an entry; 100,000 batches (the default) take 4.8 MB.

Beside them, the newest jobs' timelines (loader/core/timeline.py, ``GET /v1/admin/jobs``):
objects, about 2 KB a job of ten tables (21 MB for the default 10,000 jobs) (``observed_jobs_max``).

When a ring is full the oldest entry is overwritten. For each table the ring remembers
the newest release it dropped (the start of the data interval of the table's oldest
recorded update) and how many it dropped, so an export states what it is missing.

Time origin of an export. The simulator assumes every table is current up to 0 at time 0
(r_i0 = 0). An export subtracts one origin from every time: the earliest start of the
data interval of any exported table's first exported update (its registration time or
what it was current up to when the service started, or the release before it when that
one was dropped or is outside the ``since`` window). The table that starts earliest then
gets its true first interval; any other table's first interval stretches back to that
moment, as the simulator would have it anyway. Epoch seconds of similar magnitude
subtract exactly (Sterbenz), so shifted releases keep their order and stay strictly
increasing per table, and the trace and schedule of one origin match to the bit.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from loader.core.timeline import JobTimeline
from schedulers.model import BatchRecord

#: Default caps (``observed_trace_max_updates``, ``observed_schedule_max_batches``).
DEFAULT_MAX_UPDATES = 1_000_000
DEFAULT_MAX_BATCHES = 100_000
#: Bytes an entry of each ring holds (see the module docstring).
BYTES_PER_UPDATE = 12
BYTES_PER_BATCH = 48
#: Lines per chunk of a streamed export.
CHUNK_LINES = 8192


@dataclass(frozen=True, slots=True)
class ObservedTable:
    """A table line of an exported trace: name, measured cost model, weight, period hint."""

    name: str
    alpha: float
    overhead: float
    weight: float
    period: float | None
    #: A join view's input tables (its updates are not exported: the simulator derives them).
    view_of: tuple[str, ...] | None = None


@dataclass
class TraceSnapshot:
    """Releases copied out of the ring (oldest first), ready to be shifted and written."""

    tables: list[ObservedTable]
    #: Exported table ids (indices into the dispatcher's tables), in table-line order.
    tids: list[int]
    update_tids: np.ndarray
    releases: np.ndarray
    #: Per exported table: start of the data interval of its first exported update.
    starts: dict[int, float]
    origin: float
    recorded: int
    dropped: int
    capacity: int
    names: dict[int, str] = field(default_factory=dict)
    #: The policy in force and the worker count, the baseline of a "what if".
    policy: str = ""
    workers: int = 0
    #: The measured fixed cost of a Spark job (``loader simulate --job-overhead``).
    job_overhead: float = 0.0

    def _views(self) -> list[int]:
        """The exported views' table ids."""
        return [tid for tid, spec in zip(self.tids, self.tables) if spec.view_of is not None]

    @property
    def n_updates(self) -> int:
        """Update lines written (a view's updates are not: the simulator derives them)."""
        views = self._views()
        if not views:
            return int(self.releases.size)
        return int(np.count_nonzero(~np.isin(self.update_tids, views)))

    def headers(self) -> dict[str, str]:
        return {
            "X-Trace-Origin": repr(self.origin),
            "X-Trace-Updates": str(self.n_updates),
            "X-Trace-Recorded": str(self.recorded),
            "X-Trace-Dropped": str(self.dropped),
            "X-Trace-Capacity": str(self.capacity),
            "X-Loader-Policy": self.policy,
            "X-Loader-Workers": str(self.workers),
            "X-Loader-Job-Overhead": repr(self.job_overhead),
        }

    def lines(self) -> Iterator[str]:
        """The trace, JSON Lines in chunks: table lines, then updates sorted by release."""
        out = []
        for spec in self.tables:
            out.append(
                json.dumps(
                    {
                        "type": "table",
                        "name": spec.name,
                        "alpha": spec.alpha,
                        "overhead": spec.overhead,
                        "weight": spec.weight,
                        "period": spec.period,
                    }
                    | ({"view_of": list(spec.view_of)} if spec.view_of is not None else {})
                )
            )
        yield "".join(line + "\n" for line in out)
        if not self.n_updates:
            return
        # Stable: equal releases keep the order the service saw them in.
        views = self._views()
        order = np.argsort(self.releases, kind="stable")
        if views:
            order = order[~np.isin(self.update_tids[order], views)]
        shifted = (self.releases[order] - self.origin).tolist()
        tids = self.update_tids[order].tolist()
        prefix = {tid: '{"type":"update","table":' + json.dumps(self.names[tid]) + ',"release":' for tid in self.tids}
        last: dict[int, float] = {}
        nextafter = math.nextafter
        chunk: list[str] = []
        for tid, release in zip(tids, shifted):
            previous = last.get(tid, 0.0)
            if release <= previous:  # only if an origin far below the releases rounded two together
                release = nextafter(previous, math.inf)
            last[tid] = release
            chunk.append(f"{prefix[tid]}{release!r}}}\n")
            if len(chunk) >= CHUNK_LINES:
                yield "".join(chunk)
                chunk = []
        if chunk:
            yield "".join(chunk)


@dataclass
class ScheduleSnapshot:
    """Batches copied out of the ring (columns, finishing order); records are built lazily,
    on the thread that writes the response."""

    names: dict[int, str]
    #: tid, worker, start, finish, first release, last release, updates (unshifted).
    columns: list[np.ndarray]
    origin: float
    recorded: int
    dropped: int
    capacity: int

    @property
    def n_batches(self) -> int:
        return int(self.columns[0].size)

    def headers(self) -> dict[str, str]:
        return {
            "X-Schedule-Origin": repr(self.origin),
            "X-Schedule-Batches": str(self.n_batches),
            "X-Schedule-Recorded": str(self.recorded),
            "X-Schedule-Dropped": str(self.dropped),
            "X-Schedule-Capacity": str(self.capacity),
        }

    def records(self) -> Iterator[BatchRecord]:
        tids, workers, starts, finishes, firsts, lasts, counts = (column.tolist() for column in self.columns)
        origin, names = self.origin, self.names
        for tid, worker, start, finish, first, last, count in zip(
            tids, workers, starts, finishes, firsts, lasts, counts
        ):
            yield BatchRecord(
                table=names[tid],
                processor=worker,
                start=start - origin,
                finish=finish - origin,
                first_release=first - origin,
                last_release=last - origin,
                n_updates=count,
            )

    def lines(self) -> Iterator[str]:
        chunk: list[str] = []
        for batch in self.records():
            chunk.append(json.dumps(batch.as_dict()) + "\n")
            if len(chunk) >= CHUNK_LINES:
                yield "".join(chunk)
                chunk = []
        if chunk:
            yield "".join(chunk)


@dataclass(frozen=True, slots=True)
class LoadsSince:
    """A table's loads over a window, oldest first, and where its staleness line starts."""

    #: The line is known from here on (the window's start, or later: the table was added,
    #: or the ring dropped its loads, after it).
    start: float
    #: What the table was current up to at ``start``.
    upto: float
    finishes: list[float]
    #: The newest release each load brought: the table is current up to it from the finish.
    lasts: list[float]


class _Ring:
    """Column arrays filled up to ``capacity``, then overwritten oldest first."""

    def __init__(self, capacity: int, typecodes: str) -> None:
        self.capacity = capacity
        self.columns = [array(code) for code in typecodes]
        self.next = 0  # the slot written next (the oldest entry once full)
        self.recorded = 0

    @property
    def size(self) -> int:
        return len(self.columns[0])

    def ordered(self, column: int) -> array:
        """A copy of one column, oldest entry first."""
        data = self.columns[column]
        if len(data) < self.capacity or self.next == 0:
            return array(data.typecode, data)
        return data[self.next :] + data[: self.next]


class ObservedRecord:
    """The service's record of releases and finished batches (event-loop thread only).

    ``max_updates`` / ``max_batches`` of 0 turn the respective record off.
    """

    def __init__(
        self, max_updates: int = DEFAULT_MAX_UPDATES, max_batches: int = DEFAULT_MAX_BATCHES, max_jobs: int = 0
    ) -> None:
        if max_updates < 0 or max_batches < 0 or max_jobs < 0:
            raise ValueError("ring capacities must be >= 0")
        #: The newest jobs' timelines, oldest first; how many were recorded in all.
        self.jobs: deque[JobTimeline] = deque(maxlen=max_jobs)
        self.jobs_recorded = 0
        self._releases = _Ring(max_updates, "id")  # table id, release
        self._tids, self._rels = self._releases.columns
        self._batches = _Ring(max_batches, "iiddddq")
        #: Per table id: start of the data interval of its oldest recorded update, and how
        #: many of its releases the ring has dropped.
        self._floor: list[float] = []
        self._dropped: list[int] = []
        self._batch_dropped: list[int] = []
        #: Per table id: finish and last release of the newest batch the ring dropped (at
        #: first: when the table was added and what it was current up to then), where a
        #: staleness line that reaches back before its recorded batches starts.
        self._before_finish: list[float] = []
        self._before_upto: list[float] = []

    # -- fed by the dispatcher ------------------------------------------------------------
    def add_table(self, tid: int, origin: float, added: float = -math.inf) -> None:
        """``origin``: what the table is current up to when added, at ``added`` (epoch seconds;
        -inf: as far back as anyone asks)."""
        if tid != len(self._floor):
            raise ValueError(f"table ids must be added in order (expected {len(self._floor)}, got {tid})")
        self._floor.append(origin)
        self._dropped.append(0)
        self._batch_dropped.append(0)
        self._before_finish.append(added)
        self._before_upto.append(origin)

    def release(self, tid: int, release: float) -> None:
        """Record one release: the hot path, O(1) (two appends, or two slot writes once full)."""
        ring = self._releases
        capacity = ring.capacity
        if not capacity:
            return
        ring.recorded += 1
        tids, rels = self._tids, self._rels
        if len(rels) < capacity:
            tids.append(tid)
            rels.append(release)
            return
        i = ring.next
        old = tids[i]
        self._floor[old] = rels[i]  # the table's oldest recorded update now starts here
        self._dropped[old] += 1
        tids[i] = tid
        rels[i] = release
        i += 1
        ring.next = 0 if i == capacity else i

    def job(self, timeline: JobTimeline) -> None:
        if self.jobs.maxlen:
            self.jobs.append(timeline)
            self.jobs_recorded += 1

    def snapshot_jobs(self, since: float | None = None) -> list[JobTimeline]:
        """The recorded jobs reported at or after ``since`` (epoch seconds), oldest first."""
        return [j for j in self.jobs if since is None or j.marks["reported"] >= since]

    def batch(
        self, tid: int, worker: int, start: float, finish: float, first: float, last: float, updates: int
    ) -> None:
        ring = self._batches
        capacity = ring.capacity
        if not capacity:
            return
        ring.recorded += 1
        values = (tid, worker, start, finish, first, last, updates)
        columns = ring.columns
        if len(columns[0]) < capacity:
            for column, value in zip(columns, values):
                column.append(value)
            return
        i = ring.next
        old = columns[0][i]
        self._batch_dropped[old] += 1
        self._before_finish[old] = columns[3][i]
        self._before_upto[old] = columns[5][i]
        for column, value in zip(columns, values):
            column[i] = value
        i += 1
        ring.next = 0 if i == capacity else i

    # -- read by the export ---------------------------------------------------------------
    @property
    def max_updates(self) -> int:
        return self._releases.capacity

    @property
    def max_batches(self) -> int:
        return self._batches.capacity

    @property
    def memory_bytes(self) -> int:
        """Bytes the rings hold now (what they grow to: capacity x bytes per entry)."""
        return self._releases.size * BYTES_PER_UPDATE + self._batches.size * BYTES_PER_BATCH

    def snapshot_trace(
        self, tables: Sequence[ObservedTable], tids: Sequence[int], since: float | None = None
    ) -> TraceSnapshot:
        """Copy out the releases of ``tids`` (at or after ``since``, epoch seconds), oldest
        first; cheap enough for the event loop (two memcpy-like copies and a mask)."""
        ring = self._releases
        update_tids = np.frombuffer(ring.ordered(0), dtype=np.int32) if ring.size else np.empty(0, np.int32)
        releases = np.frombuffer(ring.ordered(1), dtype=np.float64) if ring.size else np.empty(0, np.float64)
        wanted = np.zeros(len(self._floor), dtype=bool)
        wanted[list(tids)] = True
        keep = wanted[update_tids] if update_tids.size else np.zeros(0, dtype=bool)
        starts: dict[int, float] = {tid: self._floor[tid] for tid in tids}
        if since is not None and releases.size:
            # A table's first exported update starts where its newest release before the
            # window ends (or at the floor when the ring holds none).
            before = keep & (releases < since)
            newest = np.full(len(self._floor), -np.inf)
            np.maximum.at(newest, update_tids[before], releases[before])
            for tid in tids:
                if newest[tid] > -np.inf:
                    starts[tid] = float(newest[tid])
            keep &= releases >= since
        update_tids = update_tids[keep]
        releases = releases[keep]
        present = set(np.unique(update_tids).tolist())
        candidates = [starts[tid] for tid in tids if tid in present]
        # Nothing recorded: the tables' own starts, so a schedule export still begins near 0.
        origin = min(candidates or [self._floor[tid] for tid in tids] or [0.0])
        dropped = sum(self._dropped[tid] for tid in tids)
        return TraceSnapshot(
            tables=list(tables),
            tids=list(tids),
            update_tids=update_tids,
            releases=releases,
            starts={tid: starts[tid] for tid in tids if tid in present},
            origin=origin,
            recorded=ring.recorded,
            dropped=dropped,
            capacity=ring.capacity,
            names={tid: spec.name for tid, spec in zip(tids, tables)},
        )

    def loads_since(self, tids: Sequence[int], since: float) -> dict[int, LoadsSince]:
        """Each table's loads that finished at or after ``since`` (epoch seconds), and what
        it was current up to before them: its staleness over the window, exactly.

        Copies three columns of the batch ring (at the default 100,000 batches 2 MB, about
        a millisecond): cheap enough for the event loop at a page's refresh rate.
        """
        ring = self._batches
        if ring.size:
            # Copies: a view would pin the arrays' buffers, and an append then raises BufferError.
            owners = np.frombuffer(ring.columns[0], dtype=np.int32).copy()
            finishes = np.frombuffer(ring.columns[3], dtype=np.float64).copy()
            lasts = np.frombuffer(ring.columns[5], dtype=np.float64).copy()
        else:
            owners, finishes, lasts = np.empty(0, np.int32), np.empty(0), np.empty(0)
        out = {}
        for tid in tids:
            mine = owners == tid
            finish, last = finishes[mine], lasts[mine]
            earlier = finish < since
            if earlier.any():  # the newest recorded load before the window
                start, upto = since, float(last[earlier][np.argmax(finish[earlier])])
            else:  # none recorded: the newest dropped one, or the table's addition
                start, upto = max(since, self._before_finish[tid]), self._before_upto[tid]
            order = np.argsort(finish[~earlier], kind="stable")
            out[tid] = LoadsSince(
                start=start,
                upto=upto,
                finishes=finish[~earlier][order].tolist(),
                lasts=last[~earlier][order].tolist(),
            )
        return out

    def snapshot_schedule(self, names: dict[int, str], origin: float, since: float | None = None) -> ScheduleSnapshot:
        """Finished batches of the tables in ``names`` (finished at or after ``since``),
        in finishing order, times shifted by ``origin``."""
        ring = self._batches
        dtypes = (np.int32, np.int32, np.float64, np.float64, np.float64, np.float64, np.int64)
        columns = [
            np.frombuffer(ring.ordered(k), dtype=dtype) if ring.size else np.empty(0, dtype)
            for k, dtype in enumerate(dtypes)
        ]
        wanted = np.zeros(len(self._floor), dtype=bool)
        wanted[list(names)] = True
        keep = wanted[columns[0]]
        if since is not None:
            keep &= columns[3] >= since
        return ScheduleSnapshot(
            names=dict(names),
            columns=[column[keep] for column in columns],
            origin=origin,
            recorded=ring.recorded,
            dropped=sum(self._batch_dropped[tid] for tid in names),
            capacity=ring.capacity,
        )
