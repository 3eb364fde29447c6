"""Discrete-event simulator: replays a trace through a policy on a simulated clock.

It drives policies through exactly the contract the live service uses (see
``schedulers.base.Policy``), so a simulated answer is what the service would have done
given the same arrivals and processing times.

Event order at one instant: batches finishing at that instant are retired, then updates
released at that instant are queued, then free workers choose in increasing index. A
batch started at time s therefore holds every pending update released at or before s.
A worker may be given several tables at once (a multi-table job, ``schedulers.job_groups``):
their batches start together and finish together, at the job's predicted end.

The trace is already sorted by release, so arrivals are read off it in order and only
running batches (at most P) and a timed policy's wake-up live in the heap: the event
loop costs O(log P) per event plus the policy's O(log t) per decision.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedulers.base import Policy
from schedulers.freshness import FreshnessLedger, FreshnessSummary, low_bounds
from schedulers.model import BatchRecord, TableState, Trace

ProgressCallback = Callable[[int], None]


class SimulationError(RuntimeError):
    """The policy broke the driver contract or left work undone."""


@dataclass
class SimulationResult:
    policy: str
    workers: int
    freshness: FreshnessSummary
    makespan: float
    wall_seconds: float
    policy_state: dict[str, Any] = field(default_factory=dict)
    schedule: list[BatchRecord] | None = None
    #: With update sizes: most payload bytes waiting (pending), and waiting or being loaded.
    peak_pending_bytes: int = 0
    peak_memory_bytes: int = 0

    def summary(self) -> dict[str, Any]:
        """The flat figures that ``loader simulate --json`` prints."""
        f = self.freshness
        out: dict[str, Any] = {
            "policy": self.policy,
            "workers": self.workers,
            "updates": f.updates,
            "batches": f.batches,
            "total_staleness": f.total_staleness,
            "low_bound": f.low_bound,
            "staleness_ratio": f.staleness_ratio,
            "max_stretch": f.max_stretch,
            "weighted_staleness": f.weighted_staleness,
            "weighted_low_bound": f.weighted_low_bound,
            "weighted_ratio": f.weighted_ratio,
            "makespan": self.makespan,
            "wall_seconds": self.wall_seconds,
        }
        if "groups" in self.policy_state:
            out["groups"] = self.policy_state["groups"]
            out["spare_workers"] = self.policy_state.get("spare_workers", [])
        return out


def _job_seconds(states: list[TableState], members: list[tuple[int, int, int]], job_overhead: float) -> float:
    """The job's duration under the cost model of ``schedulers.job_groups``."""
    if len(members) == 1:
        tid, lo, hi = members[0]
        state = states[tid]
        rel = state.releases
        return state.overhead + state.alpha * (rel[hi - 1] - (rel[lo - 1] if lo else 0.0))
    total = job_overhead
    for tid, lo, hi in members:
        state = states[tid]
        rel = state.releases
        total += max(0.0, state.overhead - job_overhead) + state.alpha * (rel[hi - 1] - (rel[lo - 1] if lo else 0.0))
    return total


def simulate(
    trace: Trace,
    policy: Policy,
    workers: int,
    *,
    record_schedule: bool = False,
    progress: ProgressCallback | None = None,
    sizes: Sequence[int] | None = None,
    job_overhead: float = 0.0,
) -> SimulationResult:
    """Run ``policy`` with ``workers`` workers over ``trace`` and account freshness.

    ``sizes`` (payload bytes per update, in trace order) makes tables' ``resident_bytes``
    real, for memory-aware policies (``schedulers.chain``), and the peaks are reported.
    ``job_overhead``: the part of every table's overhead that is the fixed cost of a job,
    paid once by a multi-table job (``schedulers.job_groups``); single-table jobs cost
    what they always did.
    """
    if job_overhead < 0 or not math.isfinite(job_overhead):
        raise ValueError("job_overhead must be a finite number of seconds >= 0")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    began = time.perf_counter()
    states = [TableState(tid, spec) for tid, spec in enumerate(trace.tables)]
    ledger = FreshnessLedger(trace.tables)
    per_table_counts = [0] * len(states)
    for tid in trace.update_tables:
        per_table_counts[tid] += 1
    for tid, low in enumerate(low_bounds(trace)):
        ledger.add_low(tid, low, per_table_counts[tid])

    policy.attach(states, workers)
    notify = policy.notify
    choose_group = policy.choose_group
    policy.observe_job_overhead(job_overhead)
    limit = policy.batch_limit
    agnostic = policy.worker_agnostic
    wakeup = policy.next_wakeup if policy.timed else None
    schedule: list[BatchRecord] | None = [] if record_schedule else None

    free = list(range(workers))  # a sorted list is a valid min-heap
    # finish, job number, worker, [(tid, lo, hi) per table of the job]
    running: list[tuple[float, int, int, list[tuple[int, int, int]]]] = []
    if sizes is not None and len(sizes) != len(trace.update_releases):
        raise ValueError("sizes must give one size per update of the trace")
    # Prefix sums of update sizes per table, aligned with each state's releases.
    cumulative: list[list[int]] | None = [[0] for _ in states] if sizes is not None else None
    pending_bytes = in_flight = peak_pending = peak_memory = 0
    job = 0
    tids = trace.update_tables
    releases = trace.update_releases
    n = len(releases)
    i = 0
    now = 0.0
    inf = math.inf
    report_every = 1 << 15
    next_report = report_every

    while True:
        t_next = releases[i] if i < n else inf
        if running and running[0][0] <= t_next:
            t_next = running[0][0]
        if wakeup is not None:
            t_wake = wakeup(now)
            if t_wake is not None and t_wake < t_next:
                t_next = t_wake
        if t_next == inf:
            break
        if t_next < now:
            raise SimulationError(f"time went backwards: {t_next} < {now} (trace not sorted?)")
        now = t_next

        while running and running[0][0] <= now:
            _, _, worker, members = heapq.heappop(running)
            for tid, lo, hi in members:
                state = states[tid]
                rel = state.releases
                ledger.record_batch(tid, now, rel, lo, hi, rel[lo - 1] if lo else 0.0)
                if cumulative is not None:
                    in_flight -= cumulative[tid][hi] - cumulative[tid][lo]
                state.running = False
                state.current_upto = rel[hi - 1]
            heapq.heappush(free, worker)
            for tid, _, _ in members:
                notify(tid, now)

        while i < n and releases[i] <= now:
            tid = tids[i]
            states[tid].release(releases[i])
            if cumulative is not None and sizes is not None:
                size = sizes[i]
                cumulative[tid].append(cumulative[tid][-1] + size)
                states[tid].resident_bytes += size
                pending_bytes += size
                peak_pending = max(peak_pending, pending_bytes)
                peak_memory = max(peak_memory, pending_bytes + in_flight)
            notify(tid, now)
            i += 1

        if free:
            idle: list[int] = []
            while free:
                worker = heapq.heappop(free)
                group = choose_group(worker, now, len(free))
                if not group:
                    idle.append(worker)
                    if agnostic:
                        break
                    continue
                job += 1
                members: list[tuple[int, int, int]] = []
                for tid in group:
                    state = states[tid]
                    if not state.available:
                        raise SimulationError(
                            f"policy {policy.name} chose table {state.name!r}, which is not available"
                        )
                    rel = state.releases
                    lo = state.dispatched
                    hi = len(rel) if limit is None else min(len(rel), lo + limit)
                    members.append((tid, lo, hi))
                finish = now + _job_seconds(states, members, job_overhead)
                for tid, lo, hi in members:
                    state = states[tid]
                    rel = state.releases
                    state.dispatched = hi
                    state.running = True
                    if cumulative is not None:
                        moved = cumulative[tid][hi] - cumulative[tid][lo]
                        state.resident_bytes -= moved
                        pending_bytes -= moved
                        in_flight += moved
                    notify(tid, now)
                    if schedule is not None:
                        schedule.append(
                            BatchRecord(
                                state.name,
                                worker,
                                now,
                                finish,
                                rel[lo],
                                rel[hi - 1],
                                hi - lo,
                                job if len(members) > 1 else None,
                                len(members),
                            )
                        )
                heapq.heappush(running, (finish, job, worker, members))
            for worker in idle:
                heapq.heappush(free, worker)

        if progress is not None and i >= next_report:
            progress(i)
            next_report = i + report_every

    left = sum(state.pending_count for state in states)
    if left:
        raise SimulationError(f"policy {policy.name} left {left} updates unloaded at the end of the trace")
    if progress is not None:
        progress(n)
    return SimulationResult(
        policy=policy.name,
        workers=workers,
        freshness=ledger.summary(),
        makespan=now,
        wall_seconds=time.perf_counter() - began,
        policy_state=policy.describe(),
        schedule=schedule,
        peak_pending_bytes=peak_pending,
        peak_memory_bytes=peak_memory,
    )
