"""Seeded keyed workloads: which key updates when, for the update-queue simulator.

The shapes of UpStream's experiments (../shared/seeds/001_*): uniform rates (section 5.2,
Figure 7), two classes of slow and fast updaters (section 5.3, Figure 9: slow keys update
``ratio`` times less often than fast ones), and Zipf-distributed rates (section 7.2 and
the memory experiments, theta 0 to 0.9). Arrivals are Poisson per key, which the paper's
per-slot Bernoulli draws approximate.

The load factor is the paper's: arrivals per unit of time times the cost of processing one
update, so load 5 means updates come five times as fast as one-at-a-time loading could
take them, and only coalescing (an update queue) keeps the backlog bounded.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from schedulers.keys.queue import DEFAULT_KEY_POLICY, KeyPolicy
from schedulers.model import KeyedSpec, Trace

KEYED_SHAPES: tuple[str, ...] = ("uniform", "two-class", "zipf")


@dataclass(frozen=True)
class KeyedWorkload:
    """Arrivals ``(time, key index)`` in time order, and what generated them."""

    name: str
    rates: tuple[float, ...]
    arrivals: tuple[tuple[float, int], ...]
    horizon: float

    @property
    def keys(self) -> int:
        return len(self.rates)


def key_rates(shape: str, keys: int, *, slow: int = 0, ratio: float = 10.0, theta: float = 0.9) -> list[float]:
    """Relative update rates per key (they sum to 1)."""
    if keys < 1:
        raise ValueError("keys must be at least 1")
    if shape == "uniform":
        raw = [1.0] * keys
    elif shape == "two-class":
        if not 0 <= slow <= keys:
            raise ValueError(f"slow must be between 0 and the number of keys ({keys}), got {slow}")
        if not ratio >= 1.0:
            raise ValueError("ratio (how many times slower a slow key updates) must be at least 1")
        raw = [1.0] * (keys - slow) + [1.0 / ratio] * slow
    elif shape == "zipf":
        if not 0.0 <= theta < 10.0:
            raise ValueError("theta must be in [0, 10)")
        raw = [1.0 / (rank**theta) for rank in range(1, keys + 1)]
    else:
        raise ValueError(f"unknown keyed workload {shape!r}; choose one of {', '.join(KEYED_SHAPES)}")
    total = sum(raw)
    return [r / total for r in raw]


def keyed_workload(
    shape: str,
    *,
    keys: int = 10,
    load: float = 5.0,
    cost: float = 1.0,
    updates: int = 20_000,
    seed: int = 0,
    slow: int = 0,
    ratio: float = 10.0,
    theta: float = 0.9,
) -> KeyedWorkload:
    """About ``updates`` Poisson arrivals at ``load / cost`` updates per second in all."""
    if not (load > 0.0 and math.isfinite(load)):
        raise ValueError("load must be a positive number (arrival rate times the cost of one update)")
    if not (cost > 0.0 and math.isfinite(cost)):
        raise ValueError("cost (seconds to load one key) must be positive")
    if updates < 1:
        raise ValueError("updates must be at least 1")
    shares = key_rates(shape, keys, slow=slow, ratio=ratio, theta=theta)
    total_rate = load / cost
    horizon = updates / total_rate
    rng = random.Random(seed)
    arrivals = sorted((at, k) for k, share in enumerate(shares) for at in _poisson(rng, share * total_rate, horizon))
    label = {"uniform": "uniform", "two-class": f"two-class({slow} slow, {ratio:g}x)", "zipf": f"zipf({theta:g})"}
    return KeyedWorkload(
        name=f"{label[shape]}, {keys} keys, load {load:g}",
        rates=tuple(s * total_rate for s in shares),
        arrivals=tuple(arrivals),
        horizon=horizon,
    )


def _poisson(rng: random.Random, rate: float, horizon: float) -> Sequence[float]:
    times: list[float] = []
    at = rng.expovariate(rate)
    while at < horizon:
        times.append(at)
        at += rng.expovariate(rate)
    return times


def with_latest_tables(
    trace: Trace,
    tables: int,
    *,
    keys: int = 100,
    rows: int = 10,
    shape: str = "zipf",
    theta: float = 0.9,
    slow: int = 0,
    ratio: float = 10.0,
    policy: KeyPolicy = DEFAULT_KEY_POLICY,
    max_keys_per_batch: int | None = None,
    per_key: float | None = None,
    seed: int = 0,
) -> Trace:
    """``trace`` with its first ``tables`` tables made latest tables: each of their updates
    carries ``rows`` rows whose keys are drawn from ``keys`` keys with ``shape``'s rates
    (``key_rates``), for the table-level simulator (``schedulers.simulator``).

    A latest table's cost per key defaults to the cost of a row as the table's ``alpha``
    implies (alpha * period / rows: the same seconds per row an append load of the same
    updates would pay), so the two models differ only by what coalescing saves.
    """
    if not 0 <= tables <= len(trace.tables):
        raise ValueError(f"tables must be between 0 and the trace's {len(trace.tables)} tables")
    if rows < 1:
        raise ValueError("rows (per update) must be at least 1")
    shares = key_rates(shape, keys, slow=slow, ratio=ratio, theta=theta)
    rng = random.Random(seed)
    population = range(keys)
    specs = list(trace.tables)
    counts = [0] * len(specs)
    for tid in trace.update_tables:
        counts[tid] += 1
    span = max(trace.update_releases, default=0.0)
    for tid in range(tables):
        spec = specs[tid]
        period = spec.period if spec.period is not None else (span / counts[tid] if counts[tid] else 1.0)
        cost = per_key if per_key is not None else spec.alpha * period / rows
        specs[tid] = spec.model_copy(
            update={"keyed": KeyedSpec(policy=policy, max_keys_per_batch=max_keys_per_batch, per_key=cost)}
        )
    update_keys: list[tuple[int | str, ...]] = [
        tuple(rng.choices(population, weights=shares, k=rows)) if tid < tables else () for tid in trace.update_tables
    ]
    return Trace(specs, list(trace.update_tables), list(trace.update_releases), update_keys)
