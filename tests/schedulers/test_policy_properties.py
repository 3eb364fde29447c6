"""Every policy, on random small traces and on seeded generator workloads, produces a valid
schedule of the model (testing/invariants.py): each update loaded once and in order, full
batches, one batch per table at a time, at most P at once, exact processing times,
staleness >= LOW with the simulator agreeing with ``evaluate_schedule``; eager policies
never idle a worker while a table is available; MYOPIC picks the oldest pending release.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedulers import generators
from schedulers.freshness import evaluate_schedule
from schedulers.model import BatchRecord, TableSpec, Trace
from schedulers.registry import POLICIES, make_policy
from schedulers.simulator import simulate
from testing.depth import examples
from testing.invariants import (
    EAGER_POLICIES,
    check_coverage,
    check_durations,
    check_eager,
    check_freshness,
    check_full_batches,
    check_lowest_free_workers,
    check_myopic_rule,
    check_processors,
    check_schedule,
    check_table_exclusion,
    static_partition,
)

POLICY_NAMES = sorted(POLICIES)

# -- strategies ----------------------------------------------------------------------------

ALPHAS = st.one_of(
    st.just(0.0),
    st.sampled_from([0.01, 0.1, 0.25, 0.5, 0.9]),
    st.floats(0.0, 0.9, allow_subnormal=False),
)
OVERHEADS = st.sampled_from([0.0, 0.0, 0.0, 0.01, 0.25])
WEIGHTS = st.floats(0.5, 5.0)
PERIODS = st.one_of(st.none(), st.sampled_from([1.0, 1.5, 4.0, 10.0]), st.floats(0.25, 40.0))
#: Releases on a coarse grid collide across tables (same-instant releases, finishes and starts).
GRID_TIMES = st.integers(1, 40).map(lambda k: k * 0.5)
FREE_TIMES = st.floats(0.001, 20.0, allow_subnormal=False)


@st.composite
def traces(draw: st.DrawFn, max_tables: int = 6, max_updates: int = 40) -> Trace:
    n = draw(st.integers(1, max_tables))
    all_hinted = draw(st.booleans())  # a static GroupAndRun partition half of the time
    specs = [
        TableSpec(
            name=f"t{i}",
            alpha=draw(ALPHAS),
            overhead=draw(OVERHEADS),
            weight=draw(WEIGHTS),
            period=draw(st.floats(0.25, 40.0) if all_hinted else PERIODS),
        )
        for i in range(n)
    ]
    times = draw(st.sampled_from([GRID_TIMES, FREE_TIMES, st.one_of(GRID_TIMES, FREE_TIMES)]))
    size = draw(st.integers(0, max_updates))  # uniform, not hypothesis' bias to short lists
    raw = draw(st.lists(st.tuples(st.integers(0, n - 1), times), min_size=size, max_size=size))
    per_table: dict[int, set[float]] = defaultdict(set)
    for tid, release in raw:
        per_table[tid].add(release)
    events = sorted((release, tid) for tid, releases in per_table.items() for release in releases)
    if events and draw(st.booleans()):  # same-instant releases of different tables in any order
        keys = draw(st.permutations(range(len(events))))
        events = [e for _, e in sorted(zip(keys, events, strict=True), key=lambda x: (x[1][0], x[0]))]
    return Trace(
        tables=specs,
        update_tables=[tid for _, tid in events],
        update_releases=[release for release, _ in events],
    )


def run_and_check(trace: Trace, policy_name: str, workers: int, **options: object):
    result = simulate(trace, make_policy(policy_name, **options), workers, record_schedule=True)
    assert result.schedule is not None
    assert make_policy(policy_name).eager == (policy_name in EAGER_POLICIES)
    # When GroupAndRun's partition provably never changed, check the per-group rules too.
    groups = static_partition(trace, result) if policy_name == "group-and-run" else None
    check_schedule(trace, result.schedule, workers, policy_name, result=result, groups=groups)
    return result


# -- random traces --------------------------------------------------------------------------


#: Every policy with its defaults, plus non-default options that change its timing.
POLICY_CASES = [(name, {}) for name in POLICY_NAMES] + [
    ("interval", {"period": 0.75}),
    ("group-and-run", {"tolerance": 1.0, "regroup_gap": 0.0}),
    ("group-and-run-wc", {"tolerance": 1.0, "regroup_gap": 0.5}),
]


@pytest.mark.parametrize(
    ("policy_name", "options"),
    POLICY_CASES,
    ids=[name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in POLICY_CASES],
)
@settings(max_examples=examples(80), suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), workers=st.integers(1, 4))
def test_random_trace_schedules_satisfy_invariants(policy_name: str, options: dict, trace: Trace, workers: int) -> None:
    run_and_check(trace, policy_name, workers, **options)


@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_tables=3, max_updates=25), workers=st.integers(1, 3))
def test_zero_cost_tables_batch_and_run_at_once(trace: Trace, workers: int) -> None:
    """alpha = overhead = 0: every batch is zero-length, so staleness is exactly LOW."""
    trace = dataclasses.replace(
        trace,
        tables=[spec.model_copy(update={"alpha": 0.0, "overhead": 0.0}) for spec in trace.tables],
    )
    for policy_name in ("fifo", "myopic", "max-benefit", "group-and-run-wc", "no-batching"):
        result = run_and_check(trace, policy_name, workers)
        assert all(b.start == b.last_release == b.finish for b in result.schedule), policy_name
        assert result.freshness.total_staleness == pytest.approx(result.freshness.low_bound, rel=1e-12)


# -- seeded generator workloads -------------------------------------------------------------

WORKLOADS = {
    "quasiperiodic": lambda: generators.quasiperiodic(
        tables=9, periods=(1.0, 5.0, 25.0), horizon=120.0, utilization=0.6, workers=3, seed=11
    ),
    "quasiperiodic-overhead": lambda: generators.quasiperiodic(
        tables=6,
        periods=(2.0, 3.0),
        horizon=80.0,
        utilization=0.4,
        workers=2,
        overhead=0.05,
        seed=5,
    ),
    "poisson": lambda: generators.poisson(
        tables=8,
        rate_range=(0.05, 2.0),
        horizon=120.0,
        utilization=0.8,
        workers=3,
        weighting="skewed",
        seed=7,
    ),
    "bursty": lambda: generators.bursty(tables=6, horizon=150.0, utilization=0.7, workers=2, seed=3),
    "counterexample": lambda: generators.stretch_counterexample(tables=4, workers=2),
}
WORKLOAD_WORKERS = {
    "quasiperiodic": 3,
    "quasiperiodic-overhead": 2,
    "poisson": 3,
    "bursty": 2,
    "counterexample": 2,
}


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("policy_name", POLICY_NAMES)
def test_generator_workload_schedules_satisfy_invariants(workload: str, policy_name: str) -> None:
    trace = WORKLOADS[workload]()
    assert trace.n_updates > 0
    for workers in sorted({1, WORKLOAD_WORKERS[workload]}):
        result = run_and_check(trace, policy_name, workers)
        assert result.freshness.updates == trace.n_updates


def test_counterexample_stretch_is_unbounded_for_every_policy() -> None:
    """Section 4: the huge-then-tiny update pair forces stretch >= alpha * huge / tiny."""
    huge, tiny = 100.0, 0.01
    trace = generators.stretch_counterexample(tables=4, huge=huge, tiny=tiny, utilization=0.5, workers=2)
    alpha = trace.tables[0].alpha
    for policy_name in POLICY_NAMES:
        result = run_and_check(trace, policy_name, 2)
        assert result.freshness.max_stretch >= alpha * huge / tiny


# -- the checkers catch what they claim to --------------------------------------------------
# Trace: A (alpha 0.5) released at 1 and 2, B (alpha 0.5) released at 1.5.

TINY = Trace(
    tables=[TableSpec(name="A", alpha=0.5), TableSpec(name="B", alpha=0.5)],
    update_tables=[0, 1, 0],
    update_releases=[1.0, 1.5, 2.0],
)


def _batch(table: str, proc: int, start: float, first: float, last: float, n: int, prev: float) -> BatchRecord:
    return BatchRecord(table, proc, start, start + 0.5 * (last - prev), first, last, n)


GOOD = [
    _batch("A", 0, 1.0, 1.0, 1.0, 1, 0.0),  # [1, 1.5)
    _batch("B", 0, 1.5, 1.5, 1.5, 1, 0.0),  # [1.5, 2.25)
    _batch("A", 1, 2.0, 2.0, 2.0, 1, 1.0),  # [2, 2.5)
]


def test_checkers_accept_a_valid_schedule() -> None:
    for policy_name in ("myopic", "fifo"):
        check_schedule(TINY, GOOD, 2, policy_name)


@pytest.mark.parametrize(
    ("check", "schedule", "workers", "needle"),
    [
        (check_coverage, GOOD[:2], 2, "never loaded"),
        (check_coverage, [GOOD[0], GOOD[1], GOOD[0]], 2, "not the next run"),
        (
            check_full_batches,
            [_batch("A", 0, 2.0, 1.0, 1.0, 1, 0.0), GOOD[1], _batch("A", 0, 3.0, 2.0, 2.0, 1, 1.0)],
            2,
            "every pending",
        ),
        (
            check_table_exclusion,
            [BatchRecord("A", 0, 1.0, 2.1, 1.0, 1.0, 1), GOOD[1], GOOD[2]],
            2,
            "overlap",
        ),
        (
            check_table_exclusion,
            [_batch("A", 0, 0.5, 1.0, 1.0, 1, 0.0), GOOD[1], GOOD[2]],
            2,
            "before its update",
        ),
        (
            check_processors,
            [GOOD[0], GOOD[1], _batch("A", 2, 2.0, 2.0, 2.0, 1, 1.0)],
            2,
            "not in [0, 2)",
        ),
        (
            check_processors,
            [GOOD[0], GOOD[1], _batch("A", 0, 2.0, 2.0, 2.0, 1, 1.0)],
            2,
            "two batches at once",
        ),
        (check_durations, [GOOD[0], GOOD[1], dataclasses.replace(GOOD[2], finish=2.6)], 2, "took"),
        (
            check_eager,
            [
                GOOD[0],
                _batch("B", 0, 1.5, 1.5, 1.5, 1, 0.0),
                _batch("A", 0, 2.25, 2.0, 2.0, 1, 1.0),
            ],
            2,
            "(g)",
        ),
        (check_eager, [GOOD[0], _batch("B", 1, 1.75, 1.5, 1.5, 1, 0.0), GOOD[2]], 2, "(g)"),
        (
            check_lowest_free_workers,
            [GOOD[0], _batch("B", 1, 1.5, 1.5, 1.5, 1, 0.0), _batch("A", 0, 2.0, 2.0, 2.0, 1, 1.0)],
            2,
            "lowest free",
        ),
    ],
)
def test_checkers_reject_broken_schedules(check, schedule, workers, needle) -> None:
    with pytest.raises(AssertionError, match=re.escape(needle)):
        check(TINY, schedule, workers, "myopic")


def test_myopic_checker_rejects_younger_choice() -> None:
    # A released at 1, B at 1.5; one worker busy until 3 with a third table C: at 3 the
    # free worker must take A (oldest pending 1), not B.
    trace = Trace(
        tables=[
            TableSpec(name="A", alpha=0.0),
            TableSpec(name="B", alpha=0.0),
            TableSpec(name="C", alpha=1.0),
        ],
        update_tables=[2, 0, 1],
        update_releases=[0.5, 1.0, 1.5],
    )
    c = BatchRecord("C", 0, 0.5, 1.0, 0.5, 0.5, 1)
    late = BatchRecord("C", 0, 0.5, 3.0, 0.5, 0.5, 1)
    ok = [c, BatchRecord("A", 0, 1.0, 1.0, 1.0, 1.0, 1), BatchRecord("B", 0, 1.5, 1.5, 1.5, 1.5, 1)]
    check_myopic_rule(trace, ok, 1, "myopic")
    bad = [
        late,
        BatchRecord("B", 0, 3.0, 3.0, 1.5, 1.5, 1),
        BatchRecord("A", 0, 3.0, 3.0, 1.0, 1.0, 1),
    ]
    with pytest.raises(AssertionError, match="MYOPIC"):
        check_myopic_rule(trace, bad, 1, "myopic")
    # The other order is MYOPIC's, zero-length batches re-using worker 0 in a second round.
    good = [
        late,
        BatchRecord("A", 0, 3.0, 3.0, 1.0, 1.0, 1),
        BatchRecord("B", 0, 3.0, 3.0, 1.5, 1.5, 1),
    ]
    check_myopic_rule(trace, good, 1, "myopic")
    check_lowest_free_workers(trace, good, 1, "myopic")


def test_freshness_checker_rejects_simulator_disagreement() -> None:
    result = simulate(TINY, make_policy("myopic"), 2, record_schedule=True)
    check_freshness(TINY, result.schedule, 2, "myopic", result=result)
    skewed = dataclasses.replace(
        result,
        freshness=dataclasses.replace(result.freshness, total_staleness=result.freshness.total_staleness * 1.001),
    )
    with pytest.raises(AssertionError, match="total_staleness"):
        check_freshness(TINY, result.schedule, 2, "myopic", result=skewed)


# -- evaluate_schedule scores a schedule, whatever the order of its records ----------------


@settings(max_examples=examples(30), suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_tables=4, max_updates=30), workers=st.integers(1, 3), data=st.data())
def test_evaluate_schedule_ignores_record_order(trace: Trace, workers: int, data: st.DataObject) -> None:
    """A schedule read back from a file in another order (say, grouped by table) is the same
    schedule: evaluate_schedule sorts the records itself and must give the same figures."""
    for policy_name in ("myopic", "no-batching"):
        schedule = simulate(trace, make_policy(policy_name), workers, record_schedule=True).schedule
        shuffled = data.draw(st.permutations(schedule), label=f"{policy_name} records")
        assert evaluate_schedule(trace, shuffled) == evaluate_schedule(trace, schedule)


def test_evaluate_schedule_orders_same_instant_zero_length_batches_by_data() -> None:
    """Minimal case of the above: table A (alpha = overhead = 0) has updates at 0.7 and 0.9
    pending when the only worker frees at 1.0; no-batching loads them as two zero-length
    batches [1.0, 1.0). Listed newest first, they are still a valid schedule."""
    trace = Trace(
        tables=[TableSpec(name="A", alpha=0.0), TableSpec(name="B", alpha=1.0)],
        update_tables=[1, 0, 0],
        update_releases=[0.5, 0.7, 0.9],
    )
    schedule = simulate(trace, make_policy("no-batching"), 1, record_schedule=True).schedule
    assert [(b.table, b.start, b.finish, b.first_release) for b in schedule] == [
        ("B", 0.5, 1.0, 0.5),
        ("A", 1.0, 1.0, 0.7),
        ("A", 1.0, 1.0, 0.9),
    ]
    assert evaluate_schedule(trace, list(reversed(schedule))) == evaluate_schedule(trace, schedule)
