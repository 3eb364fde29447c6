"""Discrete-event simulator: replays a trace through a policy on a simulated clock.

It drives policies through exactly the contract the live service uses (see
``schedulers.base.Policy``), so a simulated answer is what the service would have done
given the same arrivals and processing times.

Event order at one instant: batches finishing at that instant are retired, then updates
released at that instant are queued, then free workers choose in increasing index. A
batch started at time s therefore holds every pending update released at or before s.
A worker may be given several tables at once (a multi-table job, ``schedulers.job_groups``):
their batches start together and finish together, at the job's predicted end.

Join views (``TableSpec.view_of``) are units whose updates are derived, as in the service
(loader/loading/views/registry.py): when a batch of an input finishes, each view over it
gets an update released then, when the input's commit becomes loadable for the view (the
model's release time). A view's staleness is so its lag behind its inputs' commits, the
part its own loads decide. Inputs finishing at one instant give one update. A view in a
multi-table job pays its whole overhead: the service runs a view's load on the worker
apart from the tables' Spark job.

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
from schedulers.keys.backlog import KeyBacklog, TakenKey
from schedulers.keys.cost import Rewrite
from schedulers.keys.staleness import ApplicationStaleness, StalenessFigures
from schedulers.model import BatchRecord, TableSpec, TableState, Trace
from schedulers.stage_costs import StageCosts

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
    #: Latest tables' keys, by table name.
    keyed: dict[str, KeyedFigures] = field(default_factory=dict)

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
        if self.keyed:
            out["keyed"] = {name: figures.summary() for name, figures in self.keyed.items()}
        if "groups" in self.policy_state:
            out["groups"] = self.policy_state["groups"]
            out["spare_workers"] = self.policy_state.get("spare_workers", [])
        return out


Member = tuple[int, int, int, "list[TakenKey] | None"]  # (tid, lo, hi, a latest table's keys)


def _work(
    spec: TableSpec, state: TableState, lo: int, hi: int, taken: list[TakenKey] | None, rewrite: Rewrite
) -> float:
    """A batch's seconds beyond the overhead, as it really runs: per key for a latest table,
    and the stored rows its upsert rewrites (``rewrite``: the table as its batches grew it;
    schedulers/keys/cost.py)."""
    if taken is not None and spec.keyed is not None:
        return spec.keyed.per_key * len(taken) + rewrite.seconds(len(taken))
    rel = state.releases
    return state.alpha * (rel[hi - 1] - (rel[lo - 1] if lo else 0.0))


def _job_seconds(
    specs: list[TableSpec],
    states: list[TableState],
    members: list[Member],
    job_overhead: float,
    rewrites: list[Rewrite],
) -> float:
    """The job's duration under the cost model of ``schedulers.job_groups`` (views apart)."""
    if len(members) == 1:
        tid, lo, hi, taken = members[0]
        return states[tid].overhead + _work(specs[tid], states[tid], lo, hi, taken, rewrites[tid])
    total = job_overhead if any(specs[m[0]].view_of is None for m in members) else 0.0
    for tid, lo, hi, taken in members:
        state = states[tid]
        shared = job_overhead if specs[tid].view_of is None else 0.0
        total += max(0.0, state.overhead - shared) + _work(specs[tid], state, lo, hi, taken, rewrites[tid])
    return total


@dataclass(frozen=True)
class KeyedFigures:
    """A latest table's keys over a simulated run (UpStream section 5.1)."""

    #: Application staleness: each key's time-average over [0, makespan], then over keys.
    application: StalenessFigures
    keys_loaded: int
    superseded: int
    cuts: int

    def summary(self) -> dict[str, Any]:
        return {
            "application_staleness": self.application.mean,
            "application_staleness_p99": self.application.p99,
            "application_staleness_max": self.application.max,
            "keys_loaded": self.keys_loaded,
            "superseded": self.superseded,
            "cuts": self.cuts,
        }


def simulate(
    trace: Trace,
    policy: Policy,
    workers: int,
    *,
    record_schedule: bool = False,
    progress: ProgressCallback | None = None,
    sizes: Sequence[int] | None = None,
    job_overhead: float = 0.0,
    key_costs: bool = True,
    stages: StageCosts | None = None,
) -> SimulationResult:
    """Run ``policy`` with ``workers`` workers over ``trace`` and account freshness.

    ``sizes`` (payload bytes per update, in trace order) makes tables' ``resident_bytes``
    real, for memory-aware policies (``schedulers.chain``), and the peaks are reported.
    ``job_overhead``: the part of every table's overhead that is the fixed cost of a job,
    paid once by a multi-table job (``schedulers.job_groups``); single-table jobs cost
    what they always did.

    Latest tables (``TableSpec.keyed``, their updates' keys in ``trace.update_keys``) keep
    a key queue (``schedulers.keys.backlog``): a batch takes the updates at its head that
    ``max_keys_per_batch`` allows and costs ``per_key`` per key it loads. The policy sees
    that (``TableState.set_keys``); ``key_costs=False`` hides it, so the policy predicts a
    latest table's batch as an append table's (all pending updates, ``alpha`` per second
    of data), as the service did before it knew keys: the what-if of BENCHMARKS.md.

    ``stages``: the live machinery's measured stage costs (``schedulers.stage_costs``). A
    job then lasts what they say for its number of tables, and each table becomes current
    at its own commit, one after another, rather than all at the job's end; the policy
    still decides with the tables' estimates and ``job_overhead``, as the live one does.
    """
    if job_overhead < 0 or not math.isfinite(job_overhead):
        raise ValueError("job_overhead must be a finite number of seconds >= 0")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    began = time.perf_counter()
    specs = trace.tables
    backlogs: list[KeyBacklog | None] = [
        None if spec.keyed is None else KeyBacklog(spec.keyed.policy, spec.keyed.max_keys_per_batch) for spec in specs
    ]
    if any(b is not None for b in backlogs) and len(trace.update_keys) != len(trace.update_releases):
        raise ValueError("a trace with latest tables must give each update its keys (update_keys)")
    seen = [ApplicationStaleness() if b is not None else None for b in backlogs]
    keys_loaded = [0] * len(specs)
    #: Per latest table, the trace's keys stored so far (``KeyedSpec.rewrite.stored_keys``
    #: counts the keys held before the trace, apart from these).
    stored: list[set[object]] = [set() for _ in specs]
    rewrites = [spec.keyed.rewrite if spec.keyed is not None else Rewrite() for spec in specs]
    states = [
        TableState(tid, spec if key_costs else spec.model_copy(update={"keyed": None}))
        for tid, spec in enumerate(specs)
    ]

    def sync_keys(tid: int) -> None:
        backlog = backlogs[tid]
        if backlog is not None and key_costs:
            updates, keys = backlog.batch()
            states[tid].set_keys(backlog.waiting_keys, keys, updates if backlog.max_keys is not None else None)

    views_over = trace.views_over()
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
    # finish, job number, worker, [(tid, lo, hi, keys) per table of the job]
    running: list[tuple[float, int, int, list[Member]]] = []
    #: With ``stages``: per running job, when each member's commit ends.
    visible: dict[int, list[float]] = {}
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
            _, number, worker, members = heapq.heappop(running)
            commits = visible.pop(number, None)
            for position, (tid, lo, hi, taken) in enumerate(members):
                state = states[tid]
                rel = state.releases
                at = now if commits is None else commits[position]  # (stages: its own commit)
                ledger.record_batch(tid, at, rel, lo, hi, rel[lo - 1] if lo else 0.0)
                if cumulative is not None:
                    in_flight -= cumulative[tid][hi] - cumulative[tid][lo]
                state.running = False
                state.current_upto = rel[hi - 1]
                if taken is not None:
                    app = seen[tid]
                    assert app is not None
                    for key in taken:
                        app.delivered(key.key, key.arrived, at)
                    keys_loaded[tid] += len(taken)
                    backlog = backlogs[tid]
                    assert backlog is not None
                    # c learns when the batch ends, as in the live store (a group's member: its own part)
                    backlog.loaded(len(taken), state.overhead + _work(specs[tid], state, lo, hi, taken, rewrites[tid]))
                    new = {key.key for key in taken} - stored[tid]
                    stored[tid] |= new
                    rewrites[tid] = rewrites[tid].grown(len(new))
                    if state.keyed:  # the policy's view (key_costs): the table as it is
                        state.rewrite = rewrites[tid]
            heapq.heappush(free, worker)
            for tid, _, _, _ in members:
                notify(tid, now)
            for tid, _, _, _ in members:
                for vid in views_over[tid]:  # the input committed: its views have an update
                    view = states[vid]
                    previous = view.releases[-1] if view.releases else 0.0
                    if previous == now and view.dispatched < len(view.releases):
                        continue  # another input's commit at this instant: the same update
                    release = now if now > previous else math.nextafter(previous, inf)  # (zero-cost jobs)
                    view.release(release)
                    ledger.note_release(vid, release - previous)
                    if cumulative is not None:
                        cumulative[vid].append(cumulative[vid][-1])
                    notify(vid, now)

        while i < n and releases[i] <= now:
            tid = tids[i]
            states[tid].release(releases[i])
            backlog = backlogs[tid]
            if backlog is not None:
                row_keys = trace.update_keys[i]
                backlog.arrive(row_keys, releases[i])
                app = seen[tid]
                assert app is not None
                for key in row_keys:
                    app.arrived(key, releases[i])
                sync_keys(tid)
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
                members: list[Member] = []
                for tid in group:
                    state = states[tid]
                    if not state.available:
                        raise SimulationError(
                            f"policy {policy.name} chose table {state.name!r}, which is not available"
                        )
                    rel = state.releases
                    lo = state.dispatched
                    backlog = backlogs[tid]
                    hi = len(rel) if backlog is None else lo + backlog.batch()[0]
                    if limit is not None:
                        hi = min(hi, lo + limit)
                    members.append((tid, lo, hi, None if backlog is None else backlog.take(hi - lo, now)))
                if stages is None:
                    finish = now + _job_seconds(specs, states, members, job_overhead, rewrites)
                    commits = None
                else:
                    offsets, seconds = stages.offsets([0.0] * len(members))
                    finish = now + seconds
                    commits = [now + offset for offset in offsets]
                    visible[job] = commits
                for position, (tid, lo, hi, taken) in enumerate(members):
                    if taken is not None:
                        sync_keys(tid)
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
                                finish if commits is None else commits[position],
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
    keyed: dict[str, KeyedFigures] = {}
    for tid, backlog in enumerate(backlogs):
        app = seen[tid]
        if backlog is None or app is None:
            continue
        areas = app.plot.finish(now)
        keyed[specs[tid].name] = KeyedFigures(
            application=StalenessFigures.of(areas, areas.keys(), now),
            keys_loaded=keys_loaded[tid],
            superseded=backlog.superseded,
            cuts=backlog.cuts,
        )
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
        keyed=keyed,
    )
