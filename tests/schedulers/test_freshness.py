"""Hand-computed staleness, LOW and stretch (Bateni et al. section 2.1, Figure 1).

Every expected number below is worked out in the comments from the definitions:

- S_i(tau) = tau - (release of the newest update of table i whose batch finished by tau;
  0 if none); total staleness of table i = integral of S_i over [0, F_i], F_i = finish of
  the batch holding its last update. Between two finishes S_i grows with slope 1, so the
  integral is a sum of trapezoids: (b - a) * ((a - upto) + (b - upto)) / 2.
- LOW = 1/2 * sum_j L_ij^2 with L_ij = r_ij - r_i,j-1, r_i0 = 0.
- stretch of (i, j) = (finish of its batch - r_i,j-1) / L_ij.

All the numbers are dyadic rationals, so they are exact in binary floating point and
compared with ``==`` unless stated otherwise.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.freshness import (
    FreshnessLedger,
    ScheduleError,
    evaluate_schedule,
    low_bounds,
    low_triangle,
    segment_staleness,
)
from schedulers.model import BatchRecord, TableSpec, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from testing.depth import examples


def one_table_trace(releases: list[float], alpha: float = 1.0, overhead: float = 0.0) -> Trace:
    spec = TableSpec(name="t", alpha=alpha, overhead=overhead)
    return Trace(tables=[spec], update_tables=[0] * len(releases), update_releases=list(releases))


def two_table_trace(
    a_releases: list[float],
    b_releases: list[float],
    *,
    a: dict[str, float] | None = None,
    b: dict[str, float] | None = None,
) -> Trace:
    specs = [TableSpec(name="A", **(a or {"alpha": 1.0})), TableSpec(name="B", **(b or {"alpha": 1.0}))]
    events = sorted([(r, 0) for r in a_releases] + [(r, 1) for r in b_releases])
    return Trace(
        tables=specs,
        update_tables=[tid for _, tid in events],
        update_releases=[r for r, _ in events],
    )


# -- (a) the Figure 1 situation --------------------------------------------------------------
#
# One table, updates at r1 = 4, r2 = 6, r3 = 7 (lengths 4, 2, 1), alpha = 1, one worker.
#
# overhead 0:
#   u1 is released at 4 and a worker is free: s = 4, f = s + alpha * (r1 - r0) = 4 + 4 = 8.
#   u2 (6) and u3 (7) arrive while that batch runs (6, 7 < 8), so at s' = f = 8 both are
#   pending and are batched: f' = 8 + alpha * (r3 - r1) = 8 + 3 = 11.
#   staleness: [0, 8]  current up to 0:  trapezoid 8 * (0 + 8) / 2      = 32
#              [8, 11] current up to 4:  trapezoid 3 * (4 + 7) / 2      = 16.5
#              total (F = 11)                                            = 48.5
#   LOW = (4^2 + 2^2 + 1^2) / 2 = 21 / 2 = 10.5; ratio = 48.5 / 10.5 = 97 / 21
#   stretches: (f - 0) / r1 = 8 / 4 = 2, (f' - r1) / (r2 - r1) = 7 / 2 = 3.5,
#              (f' - r2) / (r3 - r2) = 5 / 1 = 5; max 5.
#
# overhead 0.5 (the same shape, each batch 0.5 s longer):
#   f = 4 + 0.5 + 4 = 8.5; s' = 8.5; f' = 8.5 + 0.5 + 3 = 12.
#   staleness: [0, 8.5] up to 0: 8.5 * 8.5 / 2 = 36.125; [8.5, 12] up to 4: 3.5 * (4.5 + 8) / 2
#              = 21.875; total 58.
#   LOW = 10.5 (overhead does not change it); stretches 8.5 / 4 = 2.125, 8 / 2 = 4, 6 / 1 = 6.

FIGURE1_RELEASES = [4.0, 6.0, 7.0]
FIGURE1_CASES = {
    # overhead: (f, f', staleness, stretches)
    0.0: (8.0, 11.0, 48.5, (2.0, 3.5, 5.0)),
    0.5: (8.5, 12.0, 58.0, (2.125, 4.0, 6.0)),
}
FIGURE1_LOW = 10.5


def figure1_schedule(f: float, f2: float) -> list[BatchRecord]:
    return [
        BatchRecord("t", 0, 4.0, f, 4.0, 4.0, 1),  # batch {u1} on [s, f]
        BatchRecord("t", 0, f, f2, 6.0, 7.0, 2),  # batch {u2, u3} on [s', f']
    ]


@pytest.mark.parametrize("overhead", sorted(FIGURE1_CASES))
def test_figure1_through_ledger(overhead: float) -> None:
    f, f2, staleness, stretches = FIGURE1_CASES[overhead]
    ledger = FreshnessLedger([TableSpec(name="t", alpha=1.0, overhead=overhead)])
    previous = 0.0
    for r in FIGURE1_RELEASES:
        ledger.note_release(0, r - previous)
        previous = r
    assert ledger.staleness_at(0, 3.0) == 3.0  # nothing loaded yet: S(tau) = tau
    ledger.record_batch(0, f, FIGURE1_RELEASES, 0, 1, 0.0)
    assert ledger.current_upto(0) == 4.0
    assert ledger.staleness_at(0, f) == f - 4.0  # the drop at f: from f to f - r1
    assert ledger.table(0).staleness == f * f / 2  # the first triangle
    assert ledger.table(0).max_stretch == stretches[0]
    ledger.record_batch(0, f2, FIGURE1_RELEASES, 1, 3, 4.0)
    assert ledger.current_upto(0) == 7.0
    assert ledger.staleness_at(0, f2) == f2 - 7.0

    table = ledger.table(0)
    assert (table.updates, table.batches) == (3, 2)
    assert table.staleness == staleness
    assert table.low_bound == FIGURE1_LOW
    assert table.max_stretch == max(stretches)

    summary = ledger.summary()
    assert summary.total_staleness == staleness
    assert summary.low_bound == FIGURE1_LOW
    assert summary.staleness_ratio == staleness / FIGURE1_LOW
    assert summary.max_stretch == max(stretches)
    assert summary.weighted_staleness == staleness  # weight 1
    assert summary.weighted_low_bound == FIGURE1_LOW
    assert (summary.updates, summary.batches) == (3, 2)


@pytest.mark.parametrize("overhead", sorted(FIGURE1_CASES))
def test_figure1_through_evaluate_schedule(overhead: float) -> None:
    f, f2, staleness, stretches = FIGURE1_CASES[overhead]
    trace = one_table_trace(FIGURE1_RELEASES, alpha=1.0, overhead=overhead)
    summary = evaluate_schedule(trace, figure1_schedule(f, f2))
    assert summary.total_staleness == staleness
    assert summary.low_bound == FIGURE1_LOW
    assert summary.staleness_ratio == staleness / FIGURE1_LOW
    assert summary.max_stretch == max(stretches)
    assert (summary.updates, summary.batches) == (3, 2)
    # Batch order in the input does not matter.
    assert evaluate_schedule(trace, figure1_schedule(f, f2)[::-1]) == summary


@pytest.mark.parametrize("overhead", sorted(FIGURE1_CASES))
@pytest.mark.parametrize("policy", ["myopic", "fifo", "max-benefit", "group-and-run-wc"])
def test_figure1_through_simulator(overhead: float, policy: str) -> None:
    # alpha = 1 > (r3 - r1) / r1 = 3 / 4: u2 and u3 arrive while u1's batch runs, so one
    # worker reproduces the Figure 1 schedule exactly (any eager policy: one table).
    f, f2, staleness, stretches = FIGURE1_CASES[overhead]
    trace = one_table_trace(FIGURE1_RELEASES, alpha=1.0, overhead=overhead)
    result = simulate(trace, make_policy(policy), 1, record_schedule=True)
    assert result.schedule == figure1_schedule(f, f2)
    assert result.makespan == f2
    summary = result.freshness
    assert summary.total_staleness == staleness
    assert summary.low_bound == FIGURE1_LOW
    assert summary.max_stretch == max(stretches)
    assert summary.staleness_ratio == staleness / FIGURE1_LOW
    assert summary == evaluate_schedule(trace, result.schedule)


def test_figure1_staleness_exceeds_low_strictly() -> None:
    # The shaded triangles of Figure 1 (LOW) lie strictly inside the staleness curve.
    trace = one_table_trace(FIGURE1_RELEASES)
    summary = simulate(trace, make_policy("myopic"), 1).freshness
    assert summary.total_staleness > summary.low_bound
    assert summary.staleness_ratio == 97 / 21


def test_helpers_are_the_trapezoid_and_triangle() -> None:
    assert segment_staleness(8.0, 11.0, 4.0) == 16.5
    assert segment_staleness(0.0, 8.0, 0.0) == 32.0
    assert low_triangle(4.0) == 8.0
    assert low_bounds(one_table_trace(FIGURE1_RELEASES)) == [FIGURE1_LOW]


def test_single_update_batches_only_when_alpha_is_small() -> None:
    # alpha = 0.5 < 3 / 4: u1 runs on [4, 6]; u2 is released at 6 = f, so (finishes, then
    # releases, then choices) it starts at 6 alone: [6, 6 + 0.5 * 2 = 7]; u3 is released at
    # 7 = that finish and runs [7, 7.5]. Staleness: [0, 6] up to 0 -> 18; [6, 7] up to 4 ->
    # (2 + 3) / 2 = 2.5; [7, 7.5] up to 6 -> 0.5 * (1 + 1.5) / 2 = 0.625; total 21.125.
    # Stretches: 6 / 4 = 1.5, (7 - 4) / 2 = 1.5, (7.5 - 6) / 1 = 1.5.
    trace = one_table_trace(FIGURE1_RELEASES, alpha=0.5)
    result = simulate(trace, make_policy("myopic"), 1, record_schedule=True)
    assert [(b.start, b.finish, b.n_updates) for b in result.schedule] == [
        (4.0, 6.0, 1),
        (6.0, 7.0, 1),
        (7.0, 7.5, 1),
    ]
    assert result.freshness.total_staleness == 21.125
    assert result.freshness.max_stretch == 1.5
    assert result.freshness.low_bound == FIGURE1_LOW


# -- (b) two tables, one worker, MYOPIC -------------------------------------------------------
#
# B: alpha 1, releases 2, 3.      A: alpha 1, release 3.5.      One worker.
#   t = 2:   B's u1 released, worker free -> B{2} on [2, 2 + 2 = 4].
#   t = 3:   B's u2 pending (B is running, so not available).
#   t = 3.5: A's u1 pending; A is available, the worker is busy.
#   t = 4:   B finishes (B now current up to 2); available: B (oldest pending 3) and
#            A (oldest pending 3.5). MYOPIC takes the oldest pending release: B.
#            B{3} on [4, 4 + (3 - 2) = 5].
#            (FIFO would take A: it has been available since 3.5, B only since 4.)
#   t = 5:   A{3.5} on [5, 5 + 3.5 = 8.5].
# Staleness B: [0, 4] up to 0 -> 8; [4, 5] up to 2 -> 1 * (2 + 3) / 2 = 2.5; total 10.5.
# Staleness A: [0, 8.5] up to 0 -> 8.5^2 / 2 = 36.125.
# Total 46.625. LOW: B (2^2 + 1^2) / 2 = 2.5, A 3.5^2 / 2 = 6.125; total 8.625.
# Stretches: B u1 4 / 2 = 2, B u2 (5 - 2) / 1 = 3, A u1 8.5 / 3.5 = 17 / 7; max 3.
#
# FIFO instead: A{3.5} on [4, 7.5], B{3} on [7.5, 8.5].
# Staleness A: 7.5^2 / 2 = 28.125; B: 8 + [4, 8.5] up to 2 -> 4.5 * (2 + 6.5) / 2 = 19.125,
# i.e. 27.125; total 55.25. Stretches: B u2 (8.5 - 2) / 1 = 6.5, A 7.5 / 3.5; max 6.5.

MYOPIC_A, MYOPIC_B = [3.5], [2.0, 3.0]


def test_two_tables_myopic_order_and_staleness() -> None:
    trace = two_table_trace(MYOPIC_A, MYOPIC_B)
    result = simulate(trace, make_policy("myopic"), 1, record_schedule=True)
    assert [(b.table, b.start, b.finish, b.n_updates) for b in result.schedule] == [
        ("B", 2.0, 4.0, 1),
        ("B", 4.0, 5.0, 1),  # B goes first at t = 4: oldest pending 3 < 3.5
        ("A", 5.0, 8.5, 1),
    ]
    f = result.freshness
    per_table = {t.name: t for t in f.tables}
    assert per_table["B"].staleness == 10.5
    assert per_table["A"].staleness == 36.125
    assert per_table["B"].low_bound == 2.5
    assert per_table["A"].low_bound == 6.125
    assert per_table["B"].max_stretch == 3.0
    assert per_table["A"].max_stretch == 8.5 / 3.5
    assert f.total_staleness == 46.625
    assert f.low_bound == 8.625
    assert f.max_stretch == 3.0
    assert f.staleness_ratio == 46.625 / 8.625
    assert result.makespan == 8.5
    assert f == evaluate_schedule(trace, result.schedule)


def test_two_tables_fifo_takes_the_other_order() -> None:
    trace = two_table_trace(MYOPIC_A, MYOPIC_B)
    result = simulate(trace, make_policy("fifo"), 1, record_schedule=True)
    assert [(b.table, b.start, b.finish) for b in result.schedule] == [
        ("B", 2.0, 4.0),
        ("A", 4.0, 7.5),
        ("B", 7.5, 8.5),
    ]
    assert result.freshness.total_staleness == 55.25
    assert result.freshness.max_stretch == 6.5
    assert result.freshness.low_bound == 8.625


# -- (c) weights ------------------------------------------------------------------------------
#
# The MYOPIC case above with weights A = 3, B = 0.5 (MYOPIC ignores weights: same schedule).
#   weighted staleness = 3 * 36.125 + 0.5 * 10.5 = 108.375 + 5.25 = 113.625
#   weighted LOW       = 3 * 6.125  + 0.5 * 2.5  = 18.375 + 1.25  = 19.625
# Unweighted totals are unchanged (46.625 and 8.625).


def test_weighted_staleness_and_low() -> None:
    trace = two_table_trace(MYOPIC_A, MYOPIC_B, a={"alpha": 1.0, "weight": 3.0}, b={"alpha": 1.0, "weight": 0.5})
    result = simulate(trace, make_policy("myopic"), 1, record_schedule=True)
    f = result.freshness
    assert f.weighted_staleness == 113.625
    assert f.weighted_low_bound == 19.625
    assert f.weighted_ratio == 113.625 / 19.625
    assert f.total_staleness == 46.625
    assert f.low_bound == 8.625
    assert {t.name: t.weight for t in f.tables} == {"A": 3.0, "B": 0.5}
    assert evaluate_schedule(trace, result.schedule) == f


def test_ledger_weight_change_applies_to_the_summary() -> None:
    ledger = FreshnessLedger([TableSpec(name="t", alpha=1.0)])
    ledger.note_release(0, 4.0)  # LOW 8
    ledger.record_batch(0, 8.0, [4.0], 0, 1, 0.0)  # staleness 32
    ledger.set_weight(0, 2.5)
    summary = ledger.summary()
    assert summary.weighted_staleness == 80.0
    assert summary.weighted_low_bound == 20.0
    assert summary.staleness_ratio == 4.0


def test_empty_ledger_and_trace_without_updates() -> None:
    summary = FreshnessLedger([TableSpec(name="t", alpha=1.0)]).summary()
    assert summary.total_staleness == 0.0
    assert summary.low_bound == 0.0
    assert summary.staleness_ratio == 1.0  # 0 / 0 is reported as 1
    assert summary.max_stretch == 0.0
    trace = Trace(tables=[TableSpec(name="t", alpha=1.0)])
    assert evaluate_schedule(trace, []) == summary


# -- (d) instantaneous loading: staleness == LOW exactly --------------------------------------
#
# alpha = 0, overhead 0: every update is loaded at its own release instant, so at every tau
# the table is current up to its newest release and S_i is exactly the LOW sawtooth.
# A: releases 1, 3, 6 -> LOW (1 + 4 + 9) / 2 = 7; B: releases 2, 3, 10 -> (4 + 1 + 49) / 2 = 27.
# (Both tables release at 3: one worker loads both at t = 3, one after the other.)

EAGER_POLICIES = ("fifo", "myopic", "max-benefit", "group-and-run-wc", "no-batching")


@pytest.mark.parametrize("policy", EAGER_POLICIES)
def test_instantaneous_loading_meets_low_exactly(policy: str) -> None:
    trace = two_table_trace([1.0, 3.0, 6.0], [2.0, 3.0, 10.0], a={"alpha": 0.0}, b={"alpha": 0.0})
    result = simulate(trace, make_policy(policy), 1, record_schedule=True)
    assert all(b.start == b.finish == b.last_release for b in result.schedule)
    f = result.freshness
    assert {t.name: t.staleness for t in f.tables} == {"A": 7.0, "B": 27.0}
    assert f.total_staleness == f.low_bound == 34.0
    assert f.staleness_ratio == 1.0
    assert f.max_stretch == 1.0


@st.composite
def instantaneous_traces(draw: st.DrawFn) -> Trace:
    n = draw(st.integers(1, 4))
    specs = [TableSpec(name=f"t{i}", alpha=0.0, weight=draw(st.sampled_from([0.5, 1.0, 3.0]))) for i in range(n)]
    events = []
    for tid in range(n):
        # A coarse grid makes tables release at the same instants.
        grid = draw(st.lists(st.integers(1, 30), max_size=8, unique=True))
        scale = draw(st.sampled_from([0.25, 1.0, 0.1]))
        events += [(k * scale, tid) for k in sorted(grid)]
    events.sort()
    return Trace(tables=specs, update_tables=[t for _, t in events], update_releases=[r for r, _ in events])


@settings(max_examples=examples(25))
@given(trace=instantaneous_traces(), workers=st.integers(1, 3), policy=st.sampled_from(EAGER_POLICIES))
def test_instantaneous_loading_meets_low_exactly_on_random_traces(trace: Trace, workers: int, policy: str) -> None:
    result = simulate(trace, make_policy(policy), workers, record_schedule=True)
    f = result.freshness
    assert f.total_staleness == f.low_bound
    assert f.weighted_staleness == f.weighted_low_bound
    for table in f.tables:
        assert table.staleness == table.low_bound
    if trace.n_updates:
        assert f.staleness_ratio == 1.0
        assert f.max_stretch == 1.0
    assert evaluate_schedule(trace, result.schedule) == f


# -- (e) evaluate_schedule rejects invalid schedules ------------------------------------------


def test_overlapping_batches_of_one_table_are_rejected() -> None:
    trace = one_table_trace(FIGURE1_RELEASES)
    batches = [
        BatchRecord("t", 0, 4.0, 8.0, 4.0, 4.0, 1),
        BatchRecord("t", 1, 7.0, 11.0, 6.0, 7.0, 2),  # starts at 7 < 8, the first's finish
    ]
    with pytest.raises(ScheduleError, match="overlap"):
        evaluate_schedule(trace, batches)


def test_finish_before_start_is_rejected() -> None:
    trace = one_table_trace([4.0])
    with pytest.raises(ScheduleError):
        evaluate_schedule(trace, [BatchRecord("t", 0, 5.0, 4.5, 4.0, 4.0, 1)])


def test_skipped_update_is_rejected() -> None:
    trace = one_table_trace(FIGURE1_RELEASES)
    batches = [
        BatchRecord("t", 0, 4.0, 8.0, 4.0, 4.0, 1),
        BatchRecord("t", 0, 8.0, 9.0, 7.0, 7.0, 1),  # u2 (6) skipped
    ]
    with pytest.raises(ScheduleError, match="not the next run"):
        evaluate_schedule(trace, batches)


def test_update_never_loaded_is_rejected() -> None:
    trace = one_table_trace(FIGURE1_RELEASES)
    batches = [BatchRecord("t", 0, 4.0, 8.0, 4.0, 4.0, 1), BatchRecord("t", 0, 8.0, 10.0, 6.0, 6.0, 1)]
    with pytest.raises(ScheduleError, match="1 updates never loaded"):
        evaluate_schedule(trace, batches)
    with pytest.raises(ScheduleError, match="never loaded"):
        evaluate_schedule(trace, [])


def test_unknown_table_is_rejected() -> None:
    trace = one_table_trace([4.0])
    with pytest.raises(ScheduleError, match="unknown table 'nope'"):
        evaluate_schedule(trace, [BatchRecord("nope", 0, 4.0, 8.0, 4.0, 4.0, 1)])


def test_batch_holding_more_updates_than_remain_is_rejected() -> None:
    trace = one_table_trace(FIGURE1_RELEASES)
    with pytest.raises(ScheduleError, match="more updates than remain"):
        evaluate_schedule(trace, [BatchRecord("t", 0, 7.0, 14.0, 4.0, 7.0, 4)])
    with pytest.raises(ScheduleError):
        evaluate_schedule(trace, [BatchRecord("t", 0, 7.0, 14.0, 4.0, 7.0, 0)])


def test_batch_starting_before_its_last_update_is_rejected() -> None:
    trace = one_table_trace(FIGURE1_RELEASES)
    # u1..u2 in one batch started at 5, before u2 (6) is released.
    with pytest.raises(ScheduleError, match="before its update"):
        evaluate_schedule(trace, [BatchRecord("t", 0, 5.0, 11.0, 4.0, 6.0, 2)])


def test_schedule_error_is_a_value_error() -> None:
    assert issubclass(ScheduleError, ValueError)


def test_a_ledger_continued_from_an_account_matches_one_never_interrupted() -> None:
    """What the live service relies on across restarts: export, restore, go on."""
    releases = [1.0, 2.5, 4.0, 7.0]
    whole = FreshnessLedger()
    whole.add_table("t", 2.0)
    for previous, release in zip([0.0, *releases], releases, strict=False):
        whole.note_release(0, release - previous)
    whole.record_batch(0, 3.0, releases, 0, 2, 0.0)
    saved = whole.account(0)
    resumed = FreshnessLedger()
    resumed.add_table("t", 2.0, account=saved)
    assert resumed.account(0) == saved
    for ledger in (whole, resumed):
        ledger.record_batch(0, 8.0, releases, 2, 4, 2.5)
    assert resumed.account(0) == whole.account(0)
    assert resumed.staleness_integral_at(0, 9.0) == whole.staleness_integral_at(0, 9.0)
