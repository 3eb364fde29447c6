"""100,000 tables across loader instances, checked with the simulator (docs/scaling.md).

The trace: every table receives Poisson updates at the same rate; every load is a
single-table Spark job of fixed cost (today's ~0.2 s of overhead, alpha 0), the paper's
model as ``schedulers.simulator.simulate`` runs it, policy myopic (the service's default).

A configuration is k instances with P workers each. Tables are partitioned by a hash of
their name (crc32 mod k), as a deployment would route them, and each instance is
simulated alone on its tables' updates: instances share nothing but the warehouse, so
this is exact for the model. "pooled" is one instance with all k x P workers, the same
Spark capacity driven by a single control plane.

Figures over the window [0, horizon] (common to every configuration, so a drain after
the last update does not count): mean staleness (time average over tables and time),
the same for an ideal loader that makes every update visible the moment it arrives,
their ratio, and update latency (arrival to the finish of the job that loaded it),
mean and p99. The simulator's run time is the sum over instances (one machine
simulating all) and the largest instance's (instances simulated in parallel).
"""

from __future__ import annotations

import bisect
import math
import random
import time
import zlib
from typing import Any

from schedulers.model import BatchRecord, TableSpec, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate

SEED = 14


def workload(tables: int, rate: float, horizon: float, job_seconds: float) -> Trace:
    """Poisson updates at ``rate`` per table until ``horizon``; every job costs ``job_seconds``."""
    rng = random.Random(SEED)
    events: list[tuple[float, int]] = []
    specs = []
    for tid in range(tables):
        specs.append(TableSpec(name=f"t{tid:06d}", alpha=0.0, overhead=job_seconds, period=1.0 / rate))
        at = rng.expovariate(rate)
        while at <= horizon:
            events.append((at, tid))
            at += rng.expovariate(rate)
    events.sort()
    return Trace(tables=specs, update_tables=[t for _, t in events], update_releases=[r for r, _ in events])


def partition(trace: Trace, instances: int) -> list[Trace]:
    """One trace per instance: the tables whose crc32(name) mod k is its number, in trace order."""
    owner = [zlib.crc32(spec.name.encode()) % instances for spec in trace.tables]
    local: list[dict[int, int]] = [{} for _ in range(instances)]
    parts = [Trace(tables=[]) for _ in range(instances)]
    for tid, spec in enumerate(trace.tables):
        part = parts[owner[tid]]
        local[owner[tid]][tid] = len(part.tables)
        part.tables.append(spec)
    for tid, release in zip(trace.update_tables, trace.update_releases):
        k = owner[tid]
        parts[k].update_tables.append(local[k][tid])
        parts[k].update_releases.append(release)
    return parts


def _upto_integral(changes: list[tuple[float, float]], horizon: float) -> float:
    """Integral over [0, horizon] of current_upto(t), which is 0 until the first change and
    then the value of the latest change (at, value) with at <= t."""
    total, previous_at, previous_value = 0.0, 0.0, 0.0
    for at, value in changes:
        if at >= horizon:
            break
        total += previous_value * (at - previous_at)
        previous_at, previous_value = at, value
    return total + previous_value * (horizon - previous_at)


def freshness(trace: Trace, schedule: list[BatchRecord], horizon: float) -> dict[str, float]:
    """Staleness over [0, horizon] of this schedule and of the ideal one; update latencies."""
    releases = trace.releases_by_table()
    index = trace.table_index()
    batches: list[list[BatchRecord]] = [[] for _ in trace.tables]
    for record in schedule:
        batches[index[record.table]].append(record)
    n = len(trace.tables)
    square = n * horizon * horizon / 2
    actual = ideal = 0.0
    latencies: list[float] = []
    for tid in range(n):
        done = sorted(batches[tid], key=lambda b: b.finish)
        actual += _upto_integral([(b.finish, b.last_release) for b in done], horizon)
        ideal += _upto_integral([(r, r) for r in releases[tid]], horizon)
        lasts = [b.last_release for b in done]
        for release in releases[tid]:
            latencies.append(done[bisect.bisect_left(lasts, release)].finish - release)
    latencies.sort()
    mean = (square - actual) / (n * horizon)
    ideal_mean = (square - ideal) / (n * horizon)
    return {
        "mean_staleness_s": mean,
        "ideal_mean_staleness_s": ideal_mean,
        "ratio_to_ideal": mean / ideal_mean if ideal_mean else math.nan,
        "mean_latency_s": sum(latencies) / len(latencies) if latencies else math.nan,
        "p99_latency_s": latencies[int(0.99 * (len(latencies) - 1))] if latencies else math.nan,
    }


def run_configuration(trace: Trace, instances: int, workers: int, horizon: float) -> dict[str, Any]:
    parts = partition(trace, instances) if instances > 1 else [trace]
    schedule: list[BatchRecord] = []
    runs: list[float] = []
    batches = 0
    for part in parts:
        began = time.perf_counter()
        result = simulate(part, make_policy("myopic"), workers, record_schedule=True)
        runs.append(time.perf_counter() - began)
        assert result.schedule is not None
        schedule.extend(result.schedule)
        batches += result.freshness.batches
    figures = freshness(trace, schedule, horizon)
    return {
        "instances": instances,
        "workers_per_instance": workers,
        "workers": instances * workers,
        "tables_per_instance": [len(p.tables) for p in parts] if instances > 1 else [len(trace.tables)],
        "updates": trace.n_updates,
        "batches": batches,
        "simulate_s_total": sum(runs),
        "simulate_s_largest": max(runs),
        **figures,
    }


def measure(
    tables: int, rate: float, horizon: float, job_seconds: float, configurations: list[tuple[int, int]]
) -> dict[str, Any]:
    """``configurations``: (instances, workers per instance)."""
    began = time.perf_counter()
    trace = workload(tables, rate, horizon, job_seconds)
    generated = time.perf_counter() - began
    return {
        "tables": tables,
        "rate_per_table": rate,
        "horizon_s": horizon,
        "job_seconds": job_seconds,
        "updates": trace.n_updates,
        "generate_s": generated,
        "configurations": [run_configuration(trace, k, p, horizon) for k, p in configurations],
    }
