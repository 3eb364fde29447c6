"""Staleness per key as UpStream defines it (section 5.1), integrated over a run.

- Application staleness of key k at time t: t minus the arrival time of the first value
  of k that the loaded table does not reflect yet; 0 when the loaded value is k's newest.
- Queue staleness of key k at time t: t minus the first enqueue of k while k waits, from
  that enqueue until k is next taken from the queue; 0 otherwise.

The paper's "overall average staleness" of a key is the area under its plot divided by
the run time; a table's figure is the mean over its keys (with the p99 and the maximum
over keys beside it, so a few starved keys show). Pure: times are given by the caller.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


class StalenessArea:
    """Area under each key's staleness plot, where staleness is ``t - since`` while stale."""

    __slots__ = ("_since", "_from", "area")

    def __init__(self) -> None:
        self._since: dict[Hashable, float] = {}
        self._from: dict[Hashable, float] = {}
        self.area: dict[Hashable, float] = {}

    def set(self, key: Hashable, since: float | None, at: float) -> None:
        """From ``at`` on, ``key`` has been stale since ``since`` (None: it is fresh)."""
        self._close(key, at)
        if since is None:
            self._since.pop(key, None)
            self._from.pop(key, None)
        else:
            self._since[key] = since
            self._from[key] = at

    def since(self, key: Hashable) -> float | None:
        return self._since.get(key)

    def finish(self, at: float) -> dict[Hashable, float]:
        """Every key's area up to ``at`` (segments still open are counted up to it)."""
        for key in list(self._since):
            self._close(key, at)
            self._from[key] = at
        return dict(self.area)

    def _close(self, key: Hashable, at: float) -> None:
        since = self._since.get(key)
        if since is None:
            self.area.setdefault(key, 0.0)
            return
        start = self._from[key]
        self.area[key] = self.area.get(key, 0.0) + ((at - since) ** 2 - (start - since) ** 2) / 2.0


class ApplicationStaleness:
    """Application staleness: arrivals wait to be reflected by a delivered (loaded) value."""

    __slots__ = ("_unreflected", "plot")

    def __init__(self) -> None:
        self._unreflected: dict[Hashable, deque[float]] = {}
        self.plot = StalenessArea()

    def arrived(self, key: Hashable, at: float) -> None:
        pending = self._unreflected.setdefault(key, deque())
        pending.append(at)
        if len(pending) == 1:
            self.plot.set(key, at, at)

    def delivered(self, key: Hashable, value_arrived: float, at: float) -> None:
        """A value of ``key`` that arrived at ``value_arrived`` is loaded at ``at``: it
        reflects every arrival of the key up to its own (the newest value wins)."""
        pending = self._unreflected.get(key)
        if not pending:
            return
        while pending and pending[0] <= value_arrived:
            pending.popleft()
        self.plot.set(key, pending[0] if pending else None, at)


@dataclass(frozen=True)
class StalenessFigures:
    """A run's staleness over its keys: each key's time-average, then mean, p99 and max."""

    mean: float
    p99: float
    max: float
    keys: int

    @classmethod
    def of(cls, areas: dict[Hashable, float], keys: Iterable[Hashable], duration: float) -> StalenessFigures:
        """Each key's area over ``duration`` (its time-average), then over keys."""
        return cls.over([areas.get(k, 0.0) / duration for k in keys] if duration > 0 else [])

    @classmethod
    def over(cls, values: list[float]) -> StalenessFigures:
        """Mean, p99 (nearest rank) and max of one value per key; only the top 1% is
        sorted, as the live service computes this at every scrape (loader/pending/keyed.py)."""
        if not values:
            return cls(0.0, 0.0, 0.0, 0)
        top = heapq.nlargest(len(values) - math.ceil(0.99 * len(values)) + 1, values)
        return cls(sum(values) / len(values), top[-1], top[0], len(values))

    def scaled(self, unit: float) -> StalenessFigures:
        """The same figures in units of ``unit`` (the paper plots them in units of C_t)."""
        return StalenessFigures(self.mean / unit, self.p99 / unit, self.max / unit, self.keys)
