"""Staleness of tables as an outside reader saw them (Bateni et al., section 2.1).

At time t a table's staleness is t minus the arrival time of the newest update visible
in the warehouse at t. ``visible`` is when the reader first saw the commit holding the
update (``testing.commit_logs``), ``arrival`` when the system accepted it; the *ideal*
system makes every update visible the instant it arrives, so its staleness is the age of
the newest arrival, the floor no loader can go below. Means are time averages over a
window, then averaged over tables (every table counts alike). Updates need not become
visible in arrival order: the newest visible arrival is a running maximum.

Pure arithmetic on plain numbers, shared by the benchmark and its tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schedulers.freshness import segment_staleness


@dataclass(frozen=True, slots=True)
class ObservedUpdate:
    arrival: float
    #: When the outside reader first saw it; None if it never became visible.
    visible: float | None


def _visibility_steps(updates: Sequence[ObservedUpdate], end: float) -> list[tuple[float, float]]:
    return sorted((u.visible, u.arrival) for u in updates if u.visible is not None and u.visible < end)


def staleness_integral(updates: Sequence[ObservedUpdate], start: float, end: float, base: float) -> float:
    """Integral over [start, end] of t - (newest arrival visible by t); ``base`` stands for
    that arrival while no update is visible (e.g. when the table was last known current)."""
    if end <= start:
        return 0.0
    newest = base
    t = start
    total = 0.0
    for visible, arrival in _visibility_steps(updates, end):
        if visible > t:
            total += segment_staleness(t, visible, newest)
            t = visible
        newest = max(newest, arrival)
    return total + segment_staleness(t, end, newest)


def max_staleness(updates: Sequence[ObservedUpdate], start: float, end: float, base: float) -> float:
    """Largest staleness over [start, end]: reached just before a visibility or at the end."""
    newest = base
    worst = 0.0
    for visible, arrival in _visibility_steps(updates, end):
        if visible > start:
            worst = max(worst, visible - newest)
        newest = max(newest, arrival)
    return max(worst, end - newest)


def as_ideal(updates: Sequence[ObservedUpdate]) -> list[ObservedUpdate]:
    """The same updates, each visible the instant it arrived."""
    return [ObservedUpdate(u.arrival, u.arrival) for u in updates]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); inf sorts last; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@dataclass(frozen=True, slots=True)
class TableStaleness:
    name: str
    mean_staleness: float
    ideal_mean_staleness: float
    max_staleness: float
    #: Updates that arrived in the window, and how many of them never became visible.
    window_updates: int
    never_visible: int
    #: Longest arrival-to-visibility time of a window update (inf if one never became visible).
    max_latency: float


@dataclass(frozen=True, slots=True)
class StalenessSummary:
    start: float
    end: float
    tables: tuple[TableStaleness, ...]
    mean_staleness: float
    ideal_mean_staleness: float
    ratio: float
    #: Arrival-to-visibility latency of the updates that arrived in the window (seconds).
    latency_p50: float
    latency_p99: float
    latency_max: float
    window_updates: int
    never_visible: int
    starved_after: float
    starved: tuple[str, ...] = field(default=())

    @property
    def worst_table(self) -> TableStaleness:
        return max(self.tables, key=lambda t: t.mean_staleness)


def table_staleness(
    name: str, updates: Sequence[ObservedUpdate], start: float, end: float, base: float
) -> tuple[TableStaleness, list[float]]:
    """One table's figures over [start, end], and the latencies of its window updates."""
    length = end - start
    ideal = as_ideal(updates)
    latencies = [
        math.inf if u.visible is None else max(0.0, u.visible - u.arrival) for u in updates if start <= u.arrival < end
    ]
    figures = TableStaleness(
        name=name,
        mean_staleness=staleness_integral(updates, start, end, base) / length,
        ideal_mean_staleness=staleness_integral(ideal, start, end, base) / length,
        max_staleness=max_staleness(updates, start, end, base),
        window_updates=len(latencies),
        never_visible=sum(1 for x in latencies if math.isinf(x)),
        max_latency=max(latencies, default=0.0),
    )
    return figures, latencies


def summarize(
    tables: Mapping[str, Sequence[ObservedUpdate]],
    start: float,
    end: float,
    base: Mapping[str, float],
    starved_after: float,
) -> StalenessSummary:
    """Every table's staleness over [start, end] and the system's averages.

    A table is *starved* when one of its window updates took longer than ``starved_after``
    seconds to become visible, or never did.
    """
    if end <= start:
        raise ValueError(f"empty window [{start}, {end}]")
    if not tables:
        raise ValueError("no tables to summarize")
    per_table: list[TableStaleness] = []
    latencies: list[float] = []
    for name, updates in tables.items():
        figures, table_latencies = table_staleness(name, updates, start, end, base[name])
        per_table.append(figures)
        latencies.extend(table_latencies)
    mean = sum(t.mean_staleness for t in per_table) / len(per_table)
    ideal = sum(t.ideal_mean_staleness for t in per_table) / len(per_table)
    return StalenessSummary(
        start=start,
        end=end,
        tables=tuple(per_table),
        mean_staleness=mean,
        ideal_mean_staleness=ideal,
        ratio=mean / ideal if ideal > 0 else float("nan"),
        latency_p50=percentile(latencies, 0.50),
        latency_p99=percentile(latencies, 0.99),
        latency_max=max(latencies, default=float("nan")),
        window_updates=len(latencies),
        never_visible=sum(t.never_visible for t in per_table),
        starved_after=starved_after,
        starved=tuple(t.name for t in per_table if t.max_latency > starved_after),
    )
