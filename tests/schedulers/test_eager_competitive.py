"""Corollary 3.2 (Bateni et al. section 3): with alpha = max alpha_i = C p / t, C < 0.366,
the staleness of any eager algorithm is at most a constant times LOW, and the constant
tends to 1 as alpha -> 0.

On fixed seeded workloads (20 tables, 2 workers) the utilization, hence every alpha_i,
is swept down; for each eager policy the staleness ratio (total staleness / LOW) must be
>= 1, non-increasing as alpha shrinks, and within 2% of 1 at the smallest alpha.
"""

from __future__ import annotations

from functools import cache

import pytest

from schedulers import generators
from schedulers.model import Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from testing.invariants import check_schedule

TABLES, WORKERS, SEED = 20, 2, 1
UTILIZATIONS = (0.4, 0.1, 0.02, 0.004)  # alpha ~ utilization * WORKERS / TABLES
EAGER = ("fifo", "myopic", "max-benefit", "group-and-run-wc")
#: Allowed increase of the ratio between two successive (smaller) alphas.
MONOTONE_SLACK = 1e-6


@cache
def workload(kind: str, utilization: float) -> Trace:
    if kind == "poisson":
        return generators.poisson(
            tables=TABLES,
            rate_range=(0.05, 1.0),
            horizon=500.0,
            utilization=utilization,
            workers=WORKERS,
            seed=SEED,
        )
    return generators.quasiperiodic(
        tables=TABLES,
        periods=(1.0, 10.0, 100.0),
        horizon=500.0,
        utilization=utilization,
        workers=WORKERS,
        seed=SEED,
    )


@pytest.mark.parametrize("kind", ["poisson", "quasiperiodic"])
@pytest.mark.parametrize("policy_name", EAGER)
def test_staleness_ratio_tends_to_one_as_alpha_shrinks(kind: str, policy_name: str) -> None:
    ratios: list[float] = []
    for utilization in UTILIZATIONS:
        trace = workload(kind, utilization)
        # C = max alpha_i * t / p is 0.4 (quasiperiodic) and 0.75 (poisson) at utilization
        # 0.4, beyond Corollary 3.2's C < 0.366 (a harder starting point); from 0.1 on
        # (C <= 0.19) the premise holds.
        result = simulate(trace, make_policy(policy_name), WORKERS)
        ratio = result.freshness.staleness_ratio
        assert ratio >= 1.0, (utilization, ratio)
        ratios.append(ratio)
    points = list(zip(UTILIZATIONS, ratios, strict=True))
    for (u0, r0), (u1, r1) in zip(points, points[1:], strict=False):
        assert r1 <= r0 + MONOTONE_SLACK, f"ratio rose from {r0} (utilization {u0}) to {r1} (utilization {u1})"
    assert ratios[-1] < 1.02, ratios


@pytest.mark.parametrize("kind", ["poisson", "quasiperiodic"])
def test_sweep_schedules_are_valid(kind: str) -> None:
    """The schedules behind the sweep satisfy the model's invariants (largest alpha)."""
    trace = workload(kind, UTILIZATIONS[0])
    for policy_name in EAGER:
        result = simulate(trace, make_policy(policy_name), WORKERS, record_schedule=True)
        check_schedule(trace, result.schedule, WORKERS, policy_name, result=result)
