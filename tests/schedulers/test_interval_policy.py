"""The ``interval`` peer (``schedulers.peers.IntervalPolicy``) on tiny hand traces.

Documented trigger semantics (module docstring of schedulers/peers.py):

- triggers fire at k * T, counted from time 0;
- at a trigger a table with new data becomes due; due tables take free workers in due order;
- a batch that overruns its period is followed at once by the next if data is pending
  (Spark starts the next micro-batch immediately), otherwise the next trigger is the first
  boundary after the batch's start;
- a trigger with no new data does nothing;
- T = ``period`` if set, else the table's period hint, else ``default_period``.

All times below are exact binary fractions unless a test is about rounding.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.model import TableSpec, Trace
from schedulers.peers import IntervalPolicy
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from testing.depth import examples


def trace_of(tables: list[TableSpec], releases: dict[str, list[float]]) -> Trace:
    index = {spec.name: i for i, spec in enumerate(tables)}
    events = sorted((r, index[name]) for name, rs in releases.items() for r in rs)
    return Trace(tables=tables, update_tables=[t for _, t in events], update_releases=[r for r, _ in events])


def run(trace: Trace, workers: int = 1, policy: IntervalPolicy | None = None) -> list[tuple[str, float, float, int]]:
    policy = policy if policy is not None else IntervalPolicy(period=10.0)
    result = simulate(trace, policy, workers, record_schedule=True)
    return [(b.table, b.start, b.finish, b.n_updates) for b in result.schedule]


def test_policy_flags() -> None:
    policy = make_policy("interval")
    assert isinstance(policy, IntervalPolicy)
    assert policy.timed and not policy.eager


def test_triggers_at_multiples_of_the_period_from_zero() -> None:
    # T = 10, alpha = 1/8.
    #   release 3  -> due at the boundary 10: batch [10, 10 + 3/8 = 10.375].
    #   trigger 20 has no new data: nothing happens.
    #   release 25 -> next boundary after the last start (10) is 20 < 25, which passed
    #                 without data, so the table waits for 30: [30, 30 + 22/8 = 32.75].
    #   release 40 -> the boundary after 30 is 40 = the release: [40, 40 + 15/8 = 41.875].
    trace = trace_of([TableSpec(name="a", alpha=0.125)], {"a": [3.0, 25.0, 40.0]})
    assert run(trace) == [("a", 10.0, 10.375, 1), ("a", 30.0, 32.75, 1), ("a", 40.0, 41.875, 1)]


def test_release_exactly_on_a_boundary_is_loaded_at_that_boundary() -> None:
    trace = trace_of([TableSpec(name="a", alpha=0.125)], {"a": [10.0]})
    assert run(trace) == [("a", 10.0, 11.25, 1)]


def test_updates_between_triggers_form_one_batch() -> None:
    # releases 1, 2, 3 -> all due at 10, one batch of length 3: [10, 10 + 3 * 0.5 = 11.5].
    trace = trace_of([TableSpec(name="a", alpha=0.5)], {"a": [1.0, 2.0, 3.0]})
    assert run(trace) == [("a", 10.0, 11.5, 3)]


def test_idle_worker_does_not_load_before_the_trigger() -> None:
    # Not eager: with a free worker the release at 1 still waits for the trigger at 10.
    trace = trace_of([TableSpec(name="a", alpha=0.0)], {"a": [1.0]})
    assert run(trace, workers=4) == [("a", 10.0, 10.0, 1)]


def test_data_during_a_short_batch_waits_for_the_next_boundary() -> None:
    # alpha 1: release 5 -> [10, 15]; release 12 arrives while it runs. The batch ended
    # before the boundary 20, so the next batch starts at 20, not at 15: [20, 20 + 7 = 27].
    trace = trace_of([TableSpec(name="a", alpha=1.0)], {"a": [5.0, 12.0]})
    assert run(trace) == [("a", 10.0, 15.0, 1), ("a", 20.0, 27.0, 1)]


def test_overrun_batch_is_followed_at_once_when_data_is_pending() -> None:
    # alpha 1: release 15 -> due at 20: [20, 20 + 15 = 35], overrunning the trigger at 30.
    # Release 22 is pending at 35, so the next batch starts at once: [35, 35 + 7 = 42].
    # Release 43 comes after that batch finished: the boundary after its start (35) is 40,
    # already passed without data, so it waits for 50: [50, 50 + (43 - 22) = 71].
    trace = trace_of([TableSpec(name="a", alpha=1.0)], {"a": [15.0, 22.0, 43.0]})
    assert run(trace) == [("a", 20.0, 35.0, 1), ("a", 35.0, 42.0, 1), ("a", 50.0, 71.0, 1)]


def test_overrun_without_pending_data_does_not_start_early() -> None:
    # [20, 35] overruns 30, but the next release (36) arrives after it finished: next
    # boundary after the start 20 is 30 < 36 -> wait for 40: [40, 40 + (36 - 15) = 61].
    trace = trace_of([TableSpec(name="a", alpha=1.0)], {"a": [15.0, 36.0]})
    assert run(trace) == [("a", 20.0, 35.0, 1), ("a", 40.0, 61.0, 1)]


def test_release_at_the_finish_of_an_overrun_batch_waits_for_a_boundary() -> None:
    # Event order: the batch [20, 35] finishes, then the release at 35 is queued. Nothing
    # was pending at the finish, so this is not an overrun follow-up: wait for 40.
    trace = trace_of([TableSpec(name="a", alpha=1.0)], {"a": [15.0, 35.0]})
    assert run(trace) == [("a", 20.0, 35.0, 1), ("a", 40.0, 60.0, 1)]


def test_due_tables_wait_for_a_free_worker_in_due_order() -> None:
    # One worker, period hints: A 20, B 10, C 15 (tid order A < B < C).
    #   A releases at 1 -> due 20; B at 2 -> due 10; C at 3 -> due 15.
    #   10: B starts, alpha 10, length 2: [10, 30]. C becomes due at 15 and A at 20; both wait.
    #   30: the worker frees: C (due 15) before A (due 20) although A has the lower id:
    #       C [30, 30 + 3 = 33], then A [33, 33 + 1 = 34].
    tables = [
        TableSpec(name="A", alpha=1.0, period=20.0),
        TableSpec(name="B", alpha=10.0, period=10.0),
        TableSpec(name="C", alpha=1.0, period=15.0),
    ]
    trace = trace_of(tables, {"A": [1.0], "B": [2.0], "C": [3.0]})
    assert run(trace, policy=IntervalPolicy()) == [
        ("B", 10.0, 30.0, 1),
        ("C", 30.0, 33.0, 1),
        ("A", 33.0, 34.0, 1),
    ]


def test_due_tables_batch_what_is_pending_when_they_finally_start() -> None:
    # A: hint 10, alpha 10, release 1 -> [10, 20]. B: hint 10, release 2 -> due at 10 but the
    # only worker is busy; B's release 15 arrives while it waits: at 20 one batch of both
    # (length 15, alpha 1): [20, 35].
    tables = [TableSpec(name="A", alpha=10.0, period=10.0), TableSpec(name="B", alpha=1.0, period=10.0)]
    trace = trace_of(tables, {"A": [1.0], "B": [2.0, 15.0]})
    assert run(trace, policy=IntervalPolicy()) == [("A", 10.0, 20.0, 1), ("B", 20.0, 35.0, 2)]


def test_two_workers_serve_tables_due_at_the_same_trigger() -> None:
    tables = [TableSpec(name="A", alpha=1.0), TableSpec(name="B", alpha=1.0), TableSpec(name="C", alpha=1.0)]
    trace = trace_of(tables, {"A": [1.0], "B": [2.0], "C": [4.0]})
    result = simulate(trace, IntervalPolicy(period=8.0), 2, record_schedule=True)
    rows = sorted((b.start, b.table, b.processor, b.finish) for b in result.schedule)
    # A [8, 9] and B [8, 10] on workers 0 and 1; C waits for the first free worker (A's, at 9).
    assert rows == [(8.0, "A", 0, 9.0), (8.0, "B", 1, 10.0), (9.0, "C", 0, 13.0)]


def test_period_option_hint_and_default() -> None:
    tables = [TableSpec(name="hinted", alpha=0.0, period=4.0), TableSpec(name="plain", alpha=0.0)]
    trace = trace_of(tables, {"hinted": [1.0], "plain": [1.0]})
    # No option: the hint (4) for one table, default_period (10) for the other.
    assert sorted(run(trace, 2, IntervalPolicy())) == [("hinted", 4.0, 4.0, 1), ("plain", 10.0, 10.0, 1)]
    assert sorted(run(trace, 2, IntervalPolicy(default_period=2.0))) == [
        ("hinted", 4.0, 4.0, 1),
        ("plain", 2.0, 2.0, 1),
    ]
    # period overrides both; through the registry as the CLI does.
    assert sorted(run(trace, 2, make_policy("interval", period=6.0))) == [
        ("hinted", 6.0, 6.0, 1),
        ("plain", 6.0, 6.0, 1),
    ]
    policy = IntervalPolicy(default_period=3.0)
    simulate(trace, policy, 1)
    assert (policy.trigger_period(0), policy.trigger_period(1)) == (4.0, 3.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_invalid_periods_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="period"):
        IntervalPolicy(period=bad)
    with pytest.raises(ValueError, match="period"):
        IntervalPolicy(default_period=bad)


def test_no_updates_no_batches() -> None:
    trace = Trace(tables=[TableSpec(name="a", alpha=1.0)])
    assert run(trace) == []


def test_next_batch_waits_for_the_next_boundary_with_a_decimal_period() -> None:
    # BUG (reported): T = 0.1. Release 4.25 -> due at the boundary 43 * 0.1 = 4.3: batch
    # [4.3, 4.3425]. Release 4.33 arrives while it runs; the batch did not overrun the next
    # boundary (4.4), so the next batch must start at 4.4. The policy recomputes "the first
    # boundary after the last start" as (floor(4.3 / 0.1) + 1) * 0.1, and 4.3 / 0.1 =
    # 42.99999999999999, giving 4.3 itself: the batch is treated as an overrun and the next
    # one starts at once, at 4.3425.
    trace = trace_of([TableSpec(name="a", alpha=0.01)], {"a": [4.25, 4.33]})
    schedule = run(trace, policy=IntervalPolicy(period=0.1))
    assert schedule[0][1] == pytest.approx(4.3)
    assert schedule[1][1] == pytest.approx(4.4), schedule


def test_release_exactly_on_a_decimal_boundary_is_loaded_at_that_boundary() -> None:
    # BUG (reported), same root cause: T = 0.3 and 7 * 0.3 == 2.1 exactly in floating point,
    # so a release at 2.1 falls on the trigger at 2.1 and must be loaded there (as a release
    # at 10 is with T = 10). The policy computes ceil(2.1 / 0.3) * 0.3 with 2.1 / 0.3 =
    # 7.000000000000001, i.e. the boundary 2.4: a whole period late.
    assert 7 * 0.3 == 2.1
    trace = trace_of([TableSpec(name="a", alpha=0.01)], {"a": [2.1]})
    schedule = run(trace, policy=IntervalPolicy(period=0.3))
    assert schedule[0][1] == 2.1, schedule


# -- property: a single table on one worker against a direct reference ----------------------


def reference_starts(releases: list[float], alpha: float, period: float) -> list[float]:
    """Batch starts under the documented rules, boundaries being the float values k * T."""

    def first_at_or_after(x: float) -> float:
        k = max(0, math.floor(x / period) - 2)
        while k * period < x:
            k += 1
        return k * period

    def first_after(x: float) -> float:
        k = max(0, math.floor(x / period) - 2)
        while k * period <= x:
            k += 1
        return k * period

    starts: list[float] = []
    i, n = 0, len(releases)
    last_start = finish = None
    previous_release = 0.0
    while i < n:
        r = releases[i]
        if last_start is None:
            start = first_at_or_after(r)
        else:
            boundary = first_after(last_start)
            if r < finish:  # pending when the batch finished: overrun -> at once
                start = max(boundary, finish)
            else:
                start = boundary if boundary >= r else first_at_or_after(r)
        j = i
        while j < n and releases[j] <= start:
            j += 1
        finish = start + alpha * (releases[j - 1] - previous_release)
        previous_release = releases[j - 1]
        starts.append(start)
        last_start = start
        i = j
    return starts


@settings(max_examples=examples(80))
@given(
    grid=st.lists(st.integers(1, 600), min_size=1, max_size=25, unique=True),
    alpha=st.sampled_from([0.01, 0.3, 1.5]),
    period=st.sampled_from([0.1, 0.25, 0.3, 0.7, 1.0, 2.5]),
)
def test_single_table_matches_reference(grid: list[int], alpha: float, period: float) -> None:
    releases = [k / 100 for k in sorted(grid)]
    trace = trace_of([TableSpec(name="a", alpha=alpha)], {"a": releases})
    result = simulate(trace, IntervalPolicy(period=period), 1, record_schedule=True)
    assert [b.start for b in result.schedule] == reference_starts(releases, alpha, period)
