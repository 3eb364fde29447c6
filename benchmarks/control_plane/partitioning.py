"""100,000 tables across loader instances, checked with the simulator (docs/scaling.md).

Every table gets Poisson updates at one rate (``schedulers.generators.many_feeds``), every
load is a single-table job of fixed cost, policy myopic, ``schedulers.simulator.simulate``
as it is. k instances x P workers: tables partitioned by crc32(name) mod k, as a
deployment would route them, each instance simulated alone (instances share nothing but
the warehouse, so this is exact for the model); "pooled" is one instance with all k x P
workers. Figures over [0, horizon], so a drain after the last update does not count
(``testing.observed_staleness``). Simulator time: the sum over instances (one machine
simulating all) and the largest instance's (instances simulated in parallel).
"""

from __future__ import annotations

import bisect
import math
import statistics
import time
import zlib
from typing import Any

from schedulers.generators import many_feeds
from schedulers.model import BatchRecord, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from testing.observed_staleness import ObservedUpdate, summarize
from testing.report import log

SEED = 14
RATE, JOB_SECONDS = 0.01, 0.2
#: (tables, horizon s, configurations: (instances, workers per instance)), quick and full.
QUICK = (10_000, 600.0, [(1, 2), (10, 2), (1, 20)])
FULL = (100_000, 1200.0, [(1, 2), (10, 2), (50, 2), (100, 2), (1, 200), (10, 20)])


def partition(trace: Trace, instances: int) -> list[Trace]:
    """One trace per instance: the tables whose crc32(name) mod k is its number, in trace order."""
    if instances == 1:
        return [trace]
    owner = [zlib.crc32(spec.name.encode()) % instances for spec in trace.tables]
    parts = [Trace(tables=[]) for _ in range(instances)]
    local = []  # each table's number in its instance
    for spec, k in zip(trace.tables, owner):
        local.append(len(parts[k].tables))
        parts[k].tables.append(spec)
    for tid, release in zip(trace.update_tables, trace.update_releases):
        parts[owner[tid]].update_tables.append(local[tid])
        parts[owner[tid]].update_releases.append(release)
    return parts


def freshness(trace: Trace, schedule: list[BatchRecord], horizon: float) -> dict[str, float]:
    """Staleness over [0, horizon] of this schedule and of the ideal one, every update visible
    when the batch that loaded it finished; update latencies."""
    index = trace.table_index()
    done: list[list[BatchRecord]] = [[] for _ in trace.tables]
    for record in sorted(schedule, key=lambda b: b.finish):
        done[index[record.table]].append(record)
    observed = {}
    for tid, releases in enumerate(trace.releases_by_table()):
        lasts = [b.last_release for b in done[tid]]
        observed[tid] = [ObservedUpdate(r, done[tid][bisect.bisect_left(lasts, r)].finish) for r in releases]
    summary = summarize(observed, 0.0, horizon, dict.fromkeys(observed, 0.0), math.inf)
    return {
        "mean_staleness_s": summary.mean_staleness,
        "ideal_mean_staleness_s": summary.ideal_mean_staleness,
        "ratio_to_ideal": summary.ratio,
        "mean_latency_s": statistics.fmean(u.visible - u.arrival for us in observed.values() for u in us),
        "p99_latency_s": summary.latency_p99,
    }


def run_configuration(trace: Trace, instances: int, workers: int, horizon: float) -> dict[str, Any]:
    parts = partition(trace, instances)
    schedule: list[BatchRecord] = []
    runs: list[float] = []
    batches = 0
    for part in parts:
        began = time.perf_counter()
        result = simulate(part, make_policy("myopic"), workers, record_schedule=True)
        runs.append(time.perf_counter() - began)
        schedule.extend(result.schedule or ())
        batches += result.freshness.batches
    return {
        "instances": instances,
        "workers_per_instance": workers,
        "tables_per_instance": [len(p.tables) for p in parts],
        "batches": batches,
        "simulate_s_total": sum(runs),
        "simulate_s_largest": max(runs),
        **freshness(trace, schedule, horizon),
    }


def measure(quick: bool) -> dict[str, Any]:
    tables, horizon, configurations = QUICK if quick else FULL
    log(f"partitioning: {tables:,} tables, {len(configurations)} configurations")
    began = time.perf_counter()
    trace = many_feeds(tables=tables, rate=RATE, horizon=horizon, overhead=JOB_SECONDS, seed=SEED)
    return {
        "tables": tables,
        "rate_per_table": RATE,
        "horizon_s": horizon,
        "job_seconds": JOB_SECONDS,
        "updates": trace.n_updates,
        "generate_s": time.perf_counter() - began,
        "configurations": [run_configuration(trace, k, p, horizon) for k, p in configurations],
    }
