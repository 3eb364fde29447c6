"""Two non-eager peers that users run today, kept for comparison only.

- ``interval``: every table is loaded on a fixed trigger period, as a per-table
  micro-batch stream (Spark Structured Streaming's ``trigger(processingTime=...)``) would.
  Triggers fire at multiples of the period, k * T, counted from time 0. At a trigger a
  table with new data becomes due; due tables take free workers in due order. If a
  batch overruns its period, the next batch of that table is due as soon as it finishes
  (Spark starts the next micro-batch at once); a trigger with no new data does nothing.
  The period is ``period`` when set, else the table's period hint, else
  ``default_period``.
- ``no-batching``: one update per job, oldest release first (FIFO over updates): MYOPIC's
  order without the batching that the paper's model relies on.
"""

from __future__ import annotations

import heapq
import itertools
import math

from schedulers.base import LazyHeap, Policy, TableView
from schedulers.myopic import MyopicPolicy


class IntervalPolicy(Policy):
    name = "interval"
    eager = False
    timed = True

    def __init__(self, period: float | None = None, default_period: float = 10.0) -> None:
        for value in (period, default_period):
            if value is not None and not (value > 0.0 and math.isfinite(value)):
                raise ValueError("interval trigger period must be a positive number of seconds")
        self.period = period
        self.default_period = default_period

    def attach(self, view: TableView, workers: int) -> None:
        self._triggers: list[tuple[float, int]] = []
        self._armed: dict[int, float] = {}
        self._due = LazyHeap()
        self._sequence = itertools.count()
        self._last_start: dict[int, float] = {}
        self._was_running: dict[int, bool] = {}
        super().attach(view, workers)

    def trigger_period(self, tid: int) -> float:
        if self.period is not None:
            return self.period
        hint = self.view[tid].period_hint
        return hint if hint is not None else self.default_period

    def _next_boundary(self, tid: int, after: float, strictly: bool) -> float:
        # Triggers fire at k * period. Division alone misplaces k by one when the
        # quotient rounds (4.3 / 0.1 = 42.99..., 7 * 0.3 > 2.1), so step k until the
        # product itself, the value compared with the clock, is on the right side.
        period = self.trigger_period(tid)
        k = math.floor(after / period)
        if strictly:
            while k * period <= after:
                k += 1
            while k > 0 and (k - 1) * period > after:
                k -= 1
        else:
            while k * period < after:
                k += 1
            while k > 0 and (k - 1) * period >= after:
                k -= 1
        return k * period

    def notify(self, tid: int, now: float) -> None:
        info = self.view[tid]
        was_running = self._was_running.get(tid, False)
        self._was_running[tid] = info.running
        if info.running:
            if not was_running:
                self._last_start[tid] = now
            return
        if info.pending_count == 0 or tid in self._armed or tid in self._due:
            return
        last_start = self._last_start.get(tid)
        trigger = self._next_boundary(tid, last_start, strictly=True) if last_start is not None else 0.0
        if trigger < now:
            if was_running:  # the batch overran a trigger: Spark starts the next one at once
                trigger = now
            else:  # triggers passed with no data; wait for the next one
                trigger = self._next_boundary(tid, now, strictly=False)
        self._armed[tid] = trigger
        heapq.heappush(self._triggers, (trigger, tid))

    def _fire(self, now: float) -> None:
        triggers = self._triggers
        while triggers and triggers[0][0] <= now:
            at, tid = heapq.heappop(triggers)
            if self._armed.get(tid) == at:
                del self._armed[tid]
                self._due.set(tid, (at, next(self._sequence)))

    def choose(self, worker: int, now: float) -> int | None:
        self._fire(now)
        while True:
            tid = self._due.pop()
            if tid is None or self.view[tid].available:
                return tid

    def next_wakeup(self, now: float) -> float | None:
        self._fire(now)
        return self._triggers[0][0] if self._triggers else None


class NoBatchingPolicy(MyopicPolicy):
    name = "no-batching"
    eager = True
    batch_limit = 1
