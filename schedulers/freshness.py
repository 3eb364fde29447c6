"""Exact staleness, stretch and LOW arithmetic (Bateni et al. section 2.1 and 2.2).

Shared by the simulator and the live service so that both report the same numbers.

- Staleness S_i(tau) = tau - (release time of the newest update of table i whose batch
  has finished by tau; 0 if none). Between two finishes of table i it grows with slope
  1, so its integral over one segment is a trapezoid.
- LOW = 1/2 * sum of L_ij^2: at any tau the table cannot be fresher than the newest
  release, so each update contributes at least the triangle of its own length.
- Stretch of update (i, j) = (finish of its batch - r_i,j-1) / L_ij.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schedulers.model import BatchRecord, TableSpec, Trace


@dataclass(frozen=True, slots=True)
class TableFreshness:
    name: str
    weight: float
    updates: int
    batches: int
    staleness: float
    low_bound: float
    max_stretch: float


@dataclass(frozen=True, slots=True)
class FreshnessSummary:
    updates: int
    batches: int
    total_staleness: float
    low_bound: float
    staleness_ratio: float
    max_stretch: float
    weighted_staleness: float
    weighted_low_bound: float
    weighted_ratio: float
    tables: tuple[TableFreshness, ...]


@dataclass(frozen=True, slots=True)
class TableAccount:
    """One table's running accounts, enough to continue them later (the live service keeps
    them across restarts, so its exported counters neither reset nor count twice)."""

    current_upto: float
    last_finish: float
    staleness: float = 0.0
    low_bound: float = 0.0
    max_stretch: float = 0.0
    updates: int = 0
    batches: int = 0


def segment_staleness(previous_finish: float, finish: float, current_upto: float) -> float:
    """Integral of tau - current_upto over [previous_finish, finish] (a trapezoid)."""
    return (finish - previous_finish) * ((finish - current_upto) + (previous_finish - current_upto)) * 0.5


def batch_stretches(finish: float, previous_release: float, releases: Sequence[float]) -> list[float]:
    """Stretch of each update of one batch (the live service's histogram observations)."""
    out = []
    start = previous_release
    for release in releases:
        out.append((finish - start) / (release - start))
        start = release
    return out


def low_triangle(length: float) -> float:
    return 0.5 * length * length


def _ratio(numerator: float, denominator: float) -> float:
    if denominator > 0.0:
        return numerator / denominator
    return 1.0 if numerator == 0.0 else float("inf")


class FreshnessLedger:
    """Running freshness accounts, fed batch by batch as they finish.

    Batches of one table never overlap, so finishes arrive in order per table and the
    staleness integral can be accumulated segment by segment without keeping history.
    """

    __slots__ = ("names", "weights", "_upto", "_last_finish", "_staleness", "_low", "_stretch", "_updates", "_batches")

    def __init__(self, tables: Sequence[TableSpec] = ()) -> None:
        self.names: list[str] = []
        self.weights: list[float] = []
        self._upto: list[float] = []
        self._last_finish: list[float] = []
        self._staleness: list[float] = []
        self._low: list[float] = []
        self._stretch: list[float] = []
        self._updates: list[int] = []
        self._batches: list[int] = []
        for spec in tables:
            self.add_table(spec.name, spec.weight)

    def add_table(
        self, name: str, weight: float = 1.0, origin: float = 0.0, account: TableAccount | None = None
    ) -> int:
        """``origin`` is when accounting starts and what the table is current up to then;
        ``account`` continues accounts saved earlier instead."""
        a = account or TableAccount(current_upto=origin, last_finish=origin)
        self.names.append(name)
        self.weights.append(weight)
        self._staleness.append(a.staleness)
        self._low.append(a.low_bound)
        self._stretch.append(a.max_stretch)
        self._upto.append(a.current_upto)
        self._last_finish.append(a.last_finish)
        self._updates.append(a.updates)
        self._batches.append(a.batches)
        return len(self.names) - 1

    def account(self, tid: int) -> TableAccount:
        return TableAccount(
            current_upto=self._upto[tid],
            last_finish=self._last_finish[tid],
            staleness=self._staleness[tid],
            low_bound=self._low[tid],
            max_stretch=self._stretch[tid],
            updates=self._updates[tid],
            batches=self._batches[tid],
        )

    def set_weight(self, tid: int, weight: float) -> None:
        self.weights[tid] = weight

    def add_low(self, tid: int, low: float, updates: int) -> None:
        """Credit LOW for released updates (the simulator adds a whole trace at once)."""
        self._low[tid] += low
        self._updates[tid] += updates

    def note_release(self, tid: int, length: float) -> None:
        self._low[tid] += 0.5 * length * length
        self._updates[tid] += 1

    def record_batch(
        self, tid: int, finish: float, releases: Sequence[float], lo: int, hi: int, previous_release: float
    ) -> None:
        """Account a finished batch holding releases[lo:hi]; previous_release is r_i,lo-1."""
        upto = self._upto[tid]
        last = self._last_finish[tid]
        self._staleness[tid] += (finish - last) * ((finish - upto) + (last - upto)) * 0.5
        worst = self._stretch[tid]
        start = previous_release
        for j in range(lo, hi):
            release = releases[j]
            stretch = (finish - start) / (release - start)
            if stretch > worst:
                worst = stretch
            start = release
        self._stretch[tid] = worst
        self._upto[tid] = releases[hi - 1]
        self._last_finish[tid] = finish
        self._batches[tid] += 1

    # -- reading ----------------------------------------------------------------
    def current_upto(self, tid: int) -> float:
        return self._upto[tid]

    def staleness_at(self, tid: int, now: float) -> float:
        """Instantaneous staleness S_i(now) (the live service's gauge)."""
        return now - self._upto[tid]

    def staleness_integral_at(self, tid: int, now: float) -> float:
        """Integral of S_i from the origin to ``now``, the open segment since the last finish included.

        Non-decreasing in ``now`` and equal to the closed accounts at every finish, so the
        live service can export it as a counter.
        """
        last = self._last_finish[tid]
        total = self._staleness[tid]
        if now > last:
            total += segment_staleness(last, now, self._upto[tid])
        return total

    def low_bound(self, tid: int) -> float:
        return self._low[tid]

    def max_stretch(self, tid: int) -> float:
        return self._stretch[tid]

    def table(self, tid: int) -> TableFreshness:
        return TableFreshness(
            name=self.names[tid],
            weight=self.weights[tid],
            updates=self._updates[tid],
            batches=self._batches[tid],
            staleness=self._staleness[tid],
            low_bound=self._low[tid],
            max_stretch=self._stretch[tid],
        )

    def summary(self) -> FreshnessSummary:
        tables = tuple(self.table(tid) for tid in range(len(self.names)))
        total = sum(t.staleness for t in tables)
        low = sum(t.low_bound for t in tables)
        weighted = sum(t.weight * t.staleness for t in tables)
        weighted_low = sum(t.weight * t.low_bound for t in tables)
        return FreshnessSummary(
            updates=sum(t.updates for t in tables),
            batches=sum(t.batches for t in tables),
            total_staleness=total,
            low_bound=low,
            staleness_ratio=_ratio(total, low),
            max_stretch=max((t.max_stretch for t in tables), default=0.0),
            weighted_staleness=weighted,
            weighted_low_bound=weighted_low,
            weighted_ratio=_ratio(weighted, weighted_low),
            tables=tables,
        )


def low_bounds(trace: Trace) -> list[float]:
    """Per-table LOW of a trace."""
    lows = [0.0] * len(trace.tables)
    previous = [0.0] * len(trace.tables)
    for tid, release in zip(trace.update_tables, trace.update_releases):
        length = release - previous[tid]
        lows[tid] += 0.5 * length * length
        previous[tid] = release
    return lows


class ScheduleError(ValueError):
    """A schedule that is not a valid execution of its trace."""


def evaluate_schedule(trace: Trace, batches: Iterable[BatchRecord]) -> FreshnessSummary:
    """Recompute every figure from a schedule alone, independently of the simulator.

    Used by tests (the simulator must agree with it) and to score schedules produced
    elsewhere. Checks that the batches of each table cover its updates contiguously,
    in order, without overlapping in time.
    """
    views = [spec.name for spec in trace.tables if spec.view_of is not None]
    if views:
        raise ScheduleError(
            f"the trace declares views ({views[0]!r}...), whose releases are the simulation's own; "
            "score it with the simulator, not a schedule"
        )
    index = trace.table_index()
    per_table = trace.releases_by_table()
    ledger = FreshnessLedger(trace.tables)
    lows = low_bounds(trace)
    for tid, low in enumerate(lows):
        ledger.add_low(tid, low, len(per_table[tid]))
    cursor = [0] * len(trace.tables)
    last_finish = [0.0] * len(trace.tables)
    for batch in sorted(batches, key=lambda b: (b.finish, b.start, b.first_release)):
        tid = index.get(batch.table)
        if tid is None:
            raise ScheduleError(f"batch names unknown table {batch.table!r}")
        releases = per_table[tid]
        lo = cursor[tid]
        hi = lo + batch.n_updates
        if batch.n_updates < 1 or hi > len(releases):
            raise ScheduleError(f"batch of {batch.table!r} at {batch.start} holds more updates than remain")
        if releases[lo] != batch.first_release or releases[hi - 1] != batch.last_release:
            raise ScheduleError(f"batch of {batch.table!r} at {batch.start} is not the next run of its updates")
        if batch.start < releases[hi - 1]:
            raise ScheduleError(
                f"batch of {batch.table!r} starts at {batch.start} before its update {releases[hi - 1]}"
            )
        if batch.start < last_finish[tid] or batch.finish < batch.start:
            raise ScheduleError(f"batches of {batch.table!r} overlap at {batch.start}")
        previous = releases[lo - 1] if lo else 0.0
        ledger.record_batch(tid, batch.finish, releases, lo, hi, previous)
        cursor[tid] = hi
        last_finish[tid] = batch.finish
    for tid, releases in enumerate(per_table):
        if cursor[tid] != len(releases):
            raise ScheduleError(f"table {trace.tables[tid].name!r}: {len(releases) - cursor[tid]} updates never loaded")
    return ledger.summary()
