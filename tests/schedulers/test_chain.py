"""Chain memory-pressure mode: the rule, the watermarks, the staleness cap, and what it buys in simulation."""

from __future__ import annotations

import random

from schedulers.chain import ChainPressure
from schedulers.generators import bursty
from schedulers.model import TableSpec, TableState
from schedulers.registry import make_policy
from schedulers.simulator import simulate


def tables(*specs: tuple[float, float, int]) -> list[TableState]:
    """(alpha, overhead, resident bytes) per table, each with one update released at t=10."""
    states = []
    for tid, (alpha, overhead, resident) in enumerate(specs):
        state = TableState(tid, TableSpec(name=f"t{tid}", alpha=alpha, overhead=overhead))
        state.release(10.0)
        state.resident_bytes = resident
        states.append(state)
    return states


def attached(states: list[TableState], high: int = 1000, low: int = 500, cap: float = 1e9) -> ChainPressure:
    policy = ChainPressure(make_policy("fifo"), high, low, cap)
    policy.attach(states, 1)
    for tid in range(len(states)):
        policy.notify(tid, 10.0)
    return policy


def test_under_pressure_the_batch_freeing_most_bytes_per_second_goes_first() -> None:
    # t0: 600 B in 1 s; t1: 900 B in 9 s; t2: 300 B in 0.1 s (3000 B/s, the steepest).
    states = tables((0.0, 1.0, 600), (0.0, 9.0, 900), (0.0, 0.1, 300))
    policy = attached(states)
    assert policy.pressure  # 1800 > 1000
    assert policy.choose(0, 10.0) == 2


def test_below_the_low_watermark_the_configured_policy_decides_again() -> None:
    states = tables((0.0, 1.0, 600), (0.0, 0.1, 500))
    states[0].releases[0] = 5.0  # t0 is older: FIFO's pick; t1 frees bytes faster: Chain's
    policy = attached(states, high=1000, low=500)
    assert policy.pressure and policy.choose(0, 10.0) == 1
    states[1].resident_bytes = 100
    policy.notify(1, 11.0)
    assert policy.pressure  # 700 B: between the watermarks, still on (hysteresis)
    states[0].resident_bytes = 300
    policy.notify(0, 11.0)
    assert not policy.pressure  # 400 B: below the low watermark
    assert policy.choose(0, 11.0) == 0  # FIFO again


def test_a_table_at_the_staleness_cap_is_loaded_first_even_under_pressure() -> None:
    states = tables((0.0, 1.0, 10), (0.0, 0.1, 5000))
    policy = attached(states, cap=100.0)
    assert policy.choose(0, 50.0) == 1  # Chain's pick
    assert policy.choose(0, 100.0) == 0  # t0 (current up to 0) has been stale for the cap: it goes first


def test_the_pressure_mode_lowers_the_peak_of_pending_bytes_in_simulation() -> None:
    trace = bursty(tables=20, horizon=600, utilization=0.7, workers=2, overhead=0.2, seed=0)
    rng = random.Random(0)
    heavy = [rng.choice([100, 1000, 20000]) for _ in trace.tables]
    sizes = [int(heavy[t] * rng.uniform(0.5, 1.5)) for t in trace.update_tables]
    plain = simulate(trace, make_policy("myopic"), 2, sizes=sizes)
    high = plain.peak_pending_bytes // 5
    chain = simulate(trace, ChainPressure(make_policy("myopic"), high, high // 2, 60.0), 2, sizes=sizes)
    assert chain.peak_pending_bytes < 0.5 * plain.peak_pending_bytes
    assert chain.freshness.total_staleness < 1.05 * plain.freshness.total_staleness  # what it costs
    assert chain.policy_state["pressure_mode"]["times_entered"] >= 1
