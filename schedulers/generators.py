"""Seeded workload generators for ``loader gen-trace`` and the benchmarks.

Every random generator takes a ``seed`` and is reproducible: the same arguments give the
same trace, byte for byte. The stretch counterexample is deterministic and takes no
seed. Utilization is sum(alpha_i) / workers, the load the paper's section 2 says must
stay below 1 for the workers to keep up.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from schedulers.model import TableSpec, Trace

WEIGHTINGS = ("uniform", "skewed")


def _weights(rng: random.Random, n: int, weighting: str) -> list[float]:
    if weighting == "uniform":
        return [1.0] * n
    if weighting == "skewed":  # log-uniform on [1, 20]: a few tables matter far more
        return [round(20.0 ** rng.random(), 3) for _ in range(n)]
    raise ValueError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")


def _alphas(rng: random.Random, n: int, total: float, spread: float) -> list[float]:
    """n alphas summing to ``total``; spread > 0 draws them log-normally, capped at 1."""
    if spread <= 0.0:
        return [total / n] * n
    raw = [rng.lognormvariate(0.0, spread) for _ in range(n)]
    scale = total / sum(raw)
    return [min(1.0, a * scale) for a in raw]


def _assemble(tables: list[TableSpec], per_table: Sequence[Sequence[float]]) -> Trace:
    events = sorted((release, tid) for tid, releases in enumerate(per_table) for release in releases)
    return Trace(
        tables=tables,
        update_tables=[tid for _, tid in events],
        update_releases=[release for release, _ in events],
    )


def _check(utilization: float, workers: int, horizon: float, tables: int) -> None:
    if tables < 1 or workers < 1:
        raise ValueError("tables and workers must be at least 1")
    if not (0.0 < utilization) or not math.isfinite(utilization):
        raise ValueError("utilization must be a positive number (sum of alphas / workers)")
    if not (horizon > 0.0):
        raise ValueError("horizon must be positive")


def quasiperiodic(
    *,
    tables: int = 30,
    periods: Sequence[float] = (1.0, 10.0, 100.0),
    horizon: float = 1000.0,
    utilization: float = 0.5,
    workers: int = 4,
    overhead: float = 0.0,
    weighting: str = "uniform",
    seed: int = 0,
) -> Trace:
    """Groups of B-quasiperiodic tables (section 4): inter-arrival uniform in [B/2, B].

    Tables are dealt round-robin to the periods; each table's ``period`` hint is its B.
    All tables get the same alpha, utilization * workers / tables, as in Theorem 4.3.
    """
    _check(utilization, workers, horizon, tables)
    if not periods or any(p <= 0 for p in periods):
        raise ValueError("periods must be positive")
    rng = random.Random(seed)
    alpha = utilization * workers / tables
    weights = _weights(rng, tables, weighting)
    specs: list[TableSpec] = []
    per_table: list[list[float]] = []
    for i in range(tables):
        b = float(periods[i % len(periods)])
        specs.append(TableSpec(name=f"q{i:04d}", alpha=alpha, overhead=overhead, weight=weights[i], period=b))
        releases: list[float] = []
        at = rng.uniform(b / 2, b)
        while at <= horizon:
            releases.append(at)
            at += rng.uniform(b / 2, b)
        per_table.append(releases)
    return _assemble(specs, per_table)


def poisson(
    *,
    tables: int = 30,
    rate_range: tuple[float, float] = (0.01, 1.0),
    horizon: float = 1000.0,
    utilization: float = 0.5,
    workers: int = 4,
    alpha_spread: float = 0.5,
    overhead: float = 0.0,
    weighting: str = "uniform",
    seed: int = 0,
) -> Trace:
    """Poisson arrivals, each table with its own rate drawn log-uniformly from rate_range."""
    _check(utilization, workers, horizon, tables)
    low, high = rate_range
    if not (0.0 < low <= high):
        raise ValueError("rate_range must be 0 < low <= high")
    rng = random.Random(seed)
    weights = _weights(rng, tables, weighting)
    alphas = _alphas(rng, tables, utilization * workers, alpha_spread)
    specs: list[TableSpec] = []
    per_table: list[list[float]] = []
    for i in range(tables):
        rate = math.exp(rng.uniform(math.log(low), math.log(high)))
        specs.append(
            TableSpec(name=f"p{i:04d}", alpha=alphas[i], overhead=overhead, weight=weights[i], period=1.0 / rate)
        )
        releases: list[float] = []
        at = rng.expovariate(rate)
        while at <= horizon:
            if not releases or at > releases[-1]:
                releases.append(at)
            at += rng.expovariate(rate)
        per_table.append(releases)
    return _assemble(specs, per_table)


def many_feeds(
    *, tables: int, rate: float, horizon: float, alpha: float = 0.0, overhead: float = 0.0, seed: int = 0
) -> Trace:
    """Many alike small feeds: every table at the same Poisson rate and cost (issue 14's
    workloads: 50 and 200 tables at 0.5 updates/s, 1,000 at 0.1/s), where the fixed cost of
    a job, not the data, limits freshness."""
    if tables < 1 or rate <= 0 or horizon <= 0:
        raise ValueError("tables, rate and horizon must be positive")
    rng = random.Random(seed)
    specs = [TableSpec(name=f"t{i}", alpha=alpha, overhead=overhead, period=1.0 / rate) for i in range(tables)]
    per_table: list[list[float]] = []
    for _ in range(tables):
        releases: list[float] = []
        at = rng.expovariate(rate)
        while at < horizon:
            releases.append(at)
            at += rng.expovariate(rate)
        per_table.append(releases)
    return _assemble(specs, per_table)


def bursty(
    *,
    tables: int = 30,
    flow_rate: float = 0.01,
    pareto_shape: float = 1.5,
    pareto_scale: float = 10.0,
    burst_rate: float = 5.0,
    background_rate: float = 0.05,
    horizon: float = 1000.0,
    utilization: float = 0.5,
    workers: int = 4,
    alpha_spread: float = 0.5,
    overhead: float = 0.0,
    weighting: str = "uniform",
    seed: int = 0,
) -> Trace:
    """On/off traffic: flows start as a Poisson process (``flow_rate`` per table per second)
    and last a Pareto(shape, scale) time, during which updates arrive at ``burst_rate``;
    between flows a table trickles at ``background_rate``. Heavy-tailed flow lengths give
    the long bursts that make batching matter.
    """
    _check(utilization, workers, horizon, tables)
    rng = random.Random(seed)
    weights = _weights(rng, tables, weighting)
    alphas = _alphas(rng, tables, utilization * workers, alpha_spread)
    specs: list[TableSpec] = []
    per_table: list[list[float]] = []
    for i in range(tables):
        specs.append(TableSpec(name=f"b{i:04d}", alpha=alphas[i], overhead=overhead, weight=weights[i]))
        stamps: set[float] = set()
        at = rng.expovariate(background_rate)
        while at <= horizon:
            stamps.add(at)
            at += rng.expovariate(background_rate)
        flow = rng.expovariate(flow_rate)
        while flow <= horizon:
            end = min(horizon, flow + pareto_scale * rng.paretovariate(pareto_shape))
            at = flow + rng.expovariate(burst_rate)
            while at <= end:
                stamps.add(at)
                at += rng.expovariate(burst_rate)
            flow += rng.expovariate(flow_rate)
        per_table.append(sorted(s for s in stamps if s > 0.0))
    return _assemble(specs, per_table)


def stretch_counterexample(
    *,
    tables: int = 4,
    huge: float = 100.0,
    tiny: float = 0.01,
    utilization: float = 0.5,
    workers: int = 2,
) -> Trace:
    """Section 4's example that no algorithm bounds stretch in general: each table gets an
    enormous update of length ``huge`` then a minuscule one of length ``tiny``; the tiny
    one cannot finish before the huge one is loaded, so stretch >= alpha * huge / tiny
    under every policy. Tables are offset by ``tiny`` / (2 * tables) to keep releases distinct.
    """
    _check(utilization, workers, huge, tables)
    if not (0.0 < tiny < huge):
        raise ValueError("need 0 < tiny < huge")
    alpha = min(1.0, utilization * workers / tables)
    offset = tiny / (2 * tables)
    specs = [TableSpec(name=f"c{i:04d}", alpha=alpha) for i in range(tables)]
    per_table = [[huge + i * offset, huge + i * offset + tiny] for i in range(tables)]
    return _assemble(specs, per_table)


GENERATORS = {
    "quasiperiodic": quasiperiodic,
    "poisson": poisson,
    "bursty": bursty,
    "counterexample": stretch_counterexample,
}


def jittered_feeds(tables: Sequence[TableSpec], periods: Sequence[float], horizon: float, seed: int) -> Trace:
    """Table k updated every ``periods[k]`` seconds with uniform jitter in [P/2, P] (the
    paper's quasi-periodic feeds, given their periods) until ``horizon``. ``tables`` may end
    with join views (``view_of``), which get no updates of their own."""
    rng = random.Random(seed)
    per_table: list[list[float]] = []
    for period in periods:
        releases, t = [], 0.0
        while True:
            t += rng.uniform(period / 2, period)
            if t > horizon:
                break
            releases.append(t)
        per_table.append(releases)
    per_table += [[] for _ in range(len(tables) - len(periods))]
    return _assemble(list(tables), per_table)
