"""Chain memory-pressure mode (Babcock, Babu, Datar, Motwani, "Chain", SIGMOD 2003, section 4).

Chain schedules, at every instant, the work on the steepest segment of its operator
path's lower envelope: the one that frees the most memory per unit of processing time;
it is optimal for memory among all strategies on lower envelopes (Theorem 1). A load
job is a one-operator path whose progress chart goes from (0, resident bytes of the
table's pending batch) to (predicted load time, 0): a single segment, its own lower
envelope, slope = resident bytes / predicted seconds. Ties go to the earliest arrival,
as in the paper.

Chain ignores staleness and can starve a table, as its authors note (section 6). So it
is a *mode*: above a high watermark of resident pending bytes (summed over tables) this
policy picks Chain's table; below a low watermark it defers to the configured staleness
policy again (hysteresis, so it does not flap); and any available table whose staleness
has reached the cap is loaded first, stalest first, whatever the pressure.

Pure like every policy: it reads ``resident_bytes`` from the table view and keeps the
total up to date from notifications.
"""

from __future__ import annotations

from typing import Any

from schedulers.base import LazyHeap, Policy, TableView

#: Predicted durations below this count as this (a zero-cost model would divide by zero).
MIN_SECONDS = 1e-6


class ChainPressure(Policy):
    name = "chain"

    def __init__(self, base: Policy, high_bytes: int, low_bytes: int, staleness_cap: float) -> None:
        if not 0 <= low_bytes < high_bytes:
            raise ValueError("the low watermark must be below the high watermark")
        if staleness_cap <= 0:
            raise ValueError("the staleness cap must be positive")
        self.base = base
        self.name = f"{base.name}+chain"  # type: ignore[misc]
        self.eager = base.eager  # type: ignore[misc]
        self.worker_agnostic = base.worker_agnostic  # type: ignore[misc]
        self.timed = base.timed  # type: ignore[misc]
        self.batch_limit = base.batch_limit
        self.high = high_bytes
        self.low = low_bytes
        self.cap = staleness_cap
        self.pressure = False
        self.total = 0
        self.entered = 0
        self._resident: dict[int, int] = {}
        self._chain = LazyHeap()
        self._stale = LazyHeap()

    def attach(self, view: TableView, workers: int) -> None:
        # The base policy indexes the tables itself; this one starts from zero bytes and
        # learns each table's resident bytes from the notifications that follow.
        self.view = view
        self.workers = workers
        self.total = 0
        self._resident = {}
        self.base.attach(view, workers)

    def table_added(self, tid: int) -> None:
        self.base.table_added(tid)

    def notify(self, tid: int, now: float) -> None:
        self.base.notify(tid, now)
        state = self.view[tid]
        resident = state.resident_bytes  # type: ignore[attr-defined]
        self.total += resident - self._resident.get(tid, 0)
        self._resident[tid] = resident
        if self.total > self.high and not self.pressure:
            self.pressure = True
            self.entered += 1
        elif self.total < self.low:
            self.pressure = False
        if state.available:
            seconds = max(MIN_SECONDS, state.batch_duration)
            # Bytes the next batch frees: all of them, or (a latest table's batch bounded by
            # keys) its share of the pending updates.
            freed = resident * state.batch_count / max(1, state.pending_count)
            self._chain.set(tid, (-freed / seconds, state.oldest_pending))
            self._stale.set(tid, state.pending_start)
        else:
            self._chain.set(tid, None)
            self._stale.set(tid, None)

    def choose(self, worker: int, now: float) -> int | None:
        if not self.pressure:
            return self.base.choose(worker, now)
        stalest = self._stale.peek()
        if stalest is not None and now - stalest[0] >= self.cap:
            return stalest[1]  # no starvation: a table at the cap goes first
        top = self._chain.peek()
        return None if top is None else top[1]

    def next_wakeup(self, now: float) -> float | None:
        return self.base.next_wakeup(now) if self.base.timed else None

    def describe(self) -> dict[str, Any]:
        return {
            **self.base.describe(),
            "pressure_mode": {
                "active": self.pressure,
                "resident_bytes": self.total,
                "high_watermark_bytes": self.high,
                "low_watermark_bytes": self.low,
                "staleness_cap_seconds": self.cap,
                "times_entered": self.entered,
            },
        }


def with_pressure(policy: Policy, enabled: bool, budget: int, high: float, low: float, cap: float) -> Policy:
    """The configured policy, wrapped in the pressure mode when enabled (watermarks as fractions of M)."""
    if not enabled:
        return policy
    return ChainPressure(policy, int(high * budget), int(low * budget), cap)
