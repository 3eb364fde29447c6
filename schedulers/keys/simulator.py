"""The update-queue simulator: one latest table's keys through a key policy, on a simulated clock.

UpStream's setting (../shared/seeds/001_*, sections 5.1-5.3): arrivals of (key, value)
enter the table's queue; one load at a time takes keys from the head and makes their
values visible when it finishes. The paper loads one key at a time at cost C_t; the
loader loads up to ``max_keys`` keys per batch at ``overhead + cost * keys`` (a Spark
job's fixed cost plus a per-key cost), which is the paper's model at ``max_keys = 1,
overhead = 0``.

``fifo-aq`` is the append queue the paper compares against (every value is loaded, in
arrival order, nothing coalesced); the others are ``schedulers.keys.queue``'s update
queues, the very objects the live pending store runs. Staleness is integrated over
[0, horizon] (arrivals stop there; loads still running then are not counted), and
reported in units of ``cost`` as the paper plots it.

Event order at one instant: a load finishing then is delivered before arrivals at that
instant are queued, and an idle loader starts as soon as something waits.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from schedulers.keys.queue import KEY_POLICIES, KeyQueue, learned_cost
from schedulers.keys.staleness import ApplicationStaleness, StalenessArea, StalenessFigures
from schedulers.keys.workloads import KeyedWorkload

#: What ``loader compare --keyed`` runs side by side: the append queue, then the update queues.
KEYED_POLICIES: tuple[str, ...] = ("fifo-aq", *KEY_POLICIES)


@dataclass(frozen=True)
class KeyedResult:
    policy: str
    workload: str
    #: Staleness figures over keys, in units of ``cost``.
    application: StalenessFigures
    queue: StalenessFigures
    #: Each key's time-averaged staleness, by key index, in units of ``cost``.
    application_by_key: tuple[float, ...]
    queue_by_key: tuple[float, ...]
    loaded: int
    superseded: int
    batches: int
    cuts: int
    #: Most values waiting at once (an update queue holds at most one per key).
    peak_waiting: int
    #: Values still waiting or being loaded at the horizon: every arrival is loaded,
    #: superseded or one of these.
    unfinished: int
    wall_seconds: float

    def summary(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "workload": self.workload,
            "application_staleness": self.application.mean,
            "application_staleness_p99": self.application.p99,
            "application_staleness_max": self.application.max,
            "queue_staleness": self.queue.mean,
            "queue_staleness_p99": self.queue.p99,
            "queue_staleness_max": self.queue.max,
            "loaded": self.loaded,
            "superseded": self.superseded,
            "batches": self.batches,
            "cuts": self.cuts,
            "peak_waiting": self.peak_waiting,
            "unfinished": self.unfinished,
            "wall_seconds": self.wall_seconds,
        }


def simulate_keys(
    workload: KeyedWorkload,
    policy: str,
    *,
    cost: float = 1.0,
    overhead: float = 0.0,
    max_keys: int | None = 1,
    known_rates: bool = False,
) -> KeyedResult:
    """Run ``workload`` through ``policy``; ``max_keys=None`` takes every waiting key.
    ``known_rates``: LINECUTTING's u_k are the workload's true rates (the paper's premise),
    not estimated from the arrivals as the live store must."""
    if policy not in KEYED_POLICIES:
        raise ValueError(f"unknown key policy {policy!r}; choose one of {', '.join(KEYED_POLICIES)}")
    if not cost > 0.0 or overhead < 0.0:
        raise ValueError("cost must be positive and overhead not negative")
    if max_keys is not None and max_keys < 1:
        raise ValueError("max_keys must be at least 1 (or None for no limit)")
    started = time.perf_counter()
    append = policy == "fifo-aq"
    known = {k: 1.0 / rate for k, rate in enumerate(workload.rates) if rate > 0.0} if known_rates else None
    keyed: KeyQueue[float] = KeyQueue(
        "in-place" if append else policy, cost_per_key=cost + overhead, known_intervals=known
    )
    appended: deque[tuple[int, float]] = deque()  # fifo-aq: (key, arrival), every value
    waiting_since: dict[Hashable, deque[float]] = {}  # fifo-aq: each key's queued arrivals
    application = ApplicationStaleness()
    queue_plot = StalenessArea()
    horizon = workload.horizon
    arrivals = workload.arrivals
    in_flight: list[tuple[Hashable, float]] = []
    busy_until: float | None = None
    loaded = superseded = batches = peak = 0
    i = 0
    while True:
        if busy_until is not None and (i >= len(arrivals) or busy_until <= arrivals[i][0]):
            now = busy_until
            if now > horizon:
                break
            for key, value_arrived in in_flight:
                application.delivered(key, value_arrived, now)
            loaded += len(in_flight)
            in_flight, busy_until = [], None
        elif i < len(arrivals):
            now, key = arrivals[i]
            i += 1
            application.arrived(key, now)
            if append:
                appended.append((key, now))
                mine = waiting_since.setdefault(key, deque())
                mine.append(now)
                if len(mine) == 1:
                    queue_plot.set(key, now, now)
            else:
                if key not in keyed:
                    queue_plot.set(key, now, now)  # section 5.1: queue staleness starts at first enqueue
                if keyed.offer(key, now, now) is not None:
                    superseded += 1
            peak = max(peak, len(appended) if append else len(keyed))
        else:
            break
        if busy_until is None and (appended if append else len(keyed)):
            if append:
                count = len(appended) if max_keys is None else min(max_keys, len(appended))
                in_flight = [appended.popleft() for _ in range(count)]
                for key, _ in in_flight:
                    mine = waiting_since[key]
                    mine.popleft()
                    queue_plot.set(key, mine[0] if mine else None, now)
            else:
                taken = keyed.take(max_keys, at=now)  # (their waits: LINECUTTING-BOUNDED's W_f)
                in_flight = [(w.key, w.arrived) for w in taken]
                for w in taken:
                    queue_plot.set(w.key, None, now)
            duration = overhead + cost * len(in_flight)
            # The live estimate of c: a batch's duration over its keys (queue.py's docstring).
            keyed.set_cost(learned_cost(keyed.cost_per_key, len(in_flight), duration))
            busy_until = now + duration
            batches += 1
    keys = range(workload.keys)
    app_areas, queue_areas = application.plot.finish(horizon), queue_plot.finish(horizon)
    return KeyedResult(
        policy=policy,
        workload=workload.name,
        application=StalenessFigures.of(app_areas, keys, horizon).scaled(cost),
        queue=StalenessFigures.of(queue_areas, keys, horizon).scaled(cost),
        application_by_key=tuple(app_areas.get(k, 0.0) / horizon / cost for k in keys),
        queue_by_key=tuple(queue_areas.get(k, 0.0) / horizon / cost for k in keys),
        loaded=loaded,
        superseded=superseded,
        batches=batches,
        cuts=keyed.cuts,
        peak_waiting=peak,
        unfinished=len(in_flight) + (len(appended) if append else len(keyed)),
        wall_seconds=time.perf_counter() - started,
    )


def compare_keys(
    workload: KeyedWorkload,
    *,
    cost: float = 1.0,
    overhead: float = 0.0,
    max_keys: int | None = 1,
    known_rates: bool = False,
) -> list[KeyedResult]:
    """Every key policy on one workload (``loader compare --keyed``)."""
    options = {"cost": cost, "overhead": overhead, "max_keys": max_keys, "known_rates": known_rates}
    return [simulate_keys(workload, p, **options) for p in KEYED_POLICIES]
