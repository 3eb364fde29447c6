"""Multi-table jobs in the pure core: the grouping rule, its bound, and the simulator's cost model."""

from __future__ import annotations

from collections import defaultdict

import pytest

from schedulers.freshness import evaluate_schedule
from schedulers.generators import many_feeds
from schedulers.job_groups import GroupedPolicy, job_cost
from schedulers.model import TableSpec, TableState, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate


def poisson(tables: int, rate: float, seconds: float, seed: int) -> Trace:
    return many_feeds(tables=tables, rate=rate, horizon=seconds, seed=seed, overhead=0.17, alpha=0.0005)


@pytest.mark.parametrize("policy", ["myopic", "max-benefit", "fifo"])
@pytest.mark.parametrize(("max_tables", "overhead"), [(1, 0.15), (16, 0.0)])
def test_without_a_shared_cost_or_room_the_schedule_is_the_base_policys(
    policy: str, max_tables: int, overhead: float
) -> None:
    trace = poisson(30, 0.5, 60, 3)
    base = simulate(trace, make_policy(policy), 2, record_schedule=True, job_overhead=overhead)
    grouped = simulate(
        trace,
        GroupedPolicy(make_policy(policy), max_tables, overhead) if max_tables > 1 else make_policy(policy),
        2,
        record_schedule=True,
        job_overhead=overhead,
    )
    assert grouped.schedule == base.schedule


@pytest.mark.parametrize("rule", ["rate", "delay"])
@pytest.mark.parametrize("policy", ["myopic", "max-benefit"])
def test_grouped_schedules_load_everything_once_within_the_bound_at_the_models_cost(policy: str, rule: str) -> None:
    trace = poisson(120, 0.5, 60, 5)
    shared = 0.15
    result = simulate(
        trace,
        make_policy(policy, max_tables_per_job=8, job_overhead=shared, group_rule=rule),
        2,
        record_schedule=True,
        job_overhead=shared,
    )
    assert result.schedule is not None
    # The ledger's figures are the schedule's, re-evaluated from scratch.
    again = evaluate_schedule(trace, result.schedule)
    assert again.total_staleness == pytest.approx(result.freshness.total_staleness)
    assert again.updates == trace.n_updates
    jobs: dict[int, list] = defaultdict(list)
    for record in result.schedule:
        if record.job is not None:
            jobs[record.job].append(record)
    assert jobs, "an overloaded system should form multi-table jobs"
    for members in jobs.values():
        assert 2 <= len(members) <= 8 and {m.job_tables for m in members} == {len(members)}
        assert len({(m.processor, m.start, m.finish) for m in members}) == 1
        # O once, plus each table's own overhead beyond O and its work (alpha x length).
        specs = {s.name: s for s in trace.tables}
        releases = trace.releases_by_table()
        expected = shared
        for m in members:
            spec = specs[m.table]
            rel = releases[int(m.table[1:])]
            first = rel.index(m.first_release)
            start_of_data = rel[first - 1] if first else 0.0
            expected += max(0.0, spec.overhead - shared) + spec.alpha * (m.last_release - start_of_data)
        assert members[0].finish - members[0].start == pytest.approx(expected)


def test_grouping_beats_single_table_jobs_when_the_fixed_cost_dominates() -> None:
    trace = poisson(200, 0.5, 120, 7)
    single = simulate(trace, make_policy("myopic"), 2, job_overhead=0.15).freshness.staleness_ratio
    rate = simulate(trace, make_policy("myopic", max_tables_per_job=32, job_overhead=0.15), 2, job_overhead=0.15)
    delay = simulate(
        trace, make_policy("myopic", max_tables_per_job=32, job_overhead=0.15, group_rule="delay"), 2, job_overhead=0.15
    )
    assert rate.freshness.staleness_ratio < delay.freshness.staleness_ratio < single / 2
    groups = rate.policy_state["job_groups"]
    assert groups["max_tables_per_job"] == 32 and groups["mean_tables_per_job"] > 2


def _view(lengths: list[float], overhead: float = 0.2, at: float = 10.0) -> list[TableState]:
    """Tables whose one pending update, released at ``at``, carries ``length`` seconds of data."""
    states = []
    for tid, length in enumerate(lengths):
        spec = TableSpec(name=f"t{tid}", alpha=0.0, overhead=overhead)
        state = TableState(tid, spec, origin=at - length)
        state.release(at + tid * 1e-3)
        states.append(state)
    return states


def test_the_rate_rule_leaves_out_a_table_with_little_to_gain() -> None:
    # Three tables with 10 s pending and one with 0.01 s: the last one's rate is below the job's.
    view = _view([10.0, 10.0, 10.0, 0.01])
    policy = GroupedPolicy(make_policy("myopic"), 8, job_overhead=0.15)
    policy.attach(view, 1)
    for tid in range(len(view)):
        policy.notify(tid, 11.0)
    group = policy.choose_group(0, 11.0, idle_after=0)
    assert sorted(group) == [0, 1, 2]
    assert job_cost([view[t] for t in group], 0.15) == pytest.approx(0.15 + 3 * 0.05)


def test_no_group_while_another_worker_is_idle_and_the_bound_holds() -> None:
    view = _view([5.0] * 10)
    policy = GroupedPolicy(make_policy("myopic"), 4, job_overhead=0.15)
    policy.attach(view, 2)
    for tid in range(10):
        policy.notify(tid, 6.0)
    first = policy.choose_group(0, 6.0, idle_after=1)
    assert len(first) == 1
    view[first[0]].running = True
    policy.notify(first[0], 6.0)
    assert len(policy.choose_group(1, 6.0, idle_after=0)) == 4


def test_policies_bound_to_workers_or_timers_are_refused_with_advice() -> None:
    with pytest.raises(ValueError, match="max_tables_per_job = 1"):
        make_policy("group-and-run", max_tables_per_job=4)
    with pytest.raises(ValueError, match="unknown grouping rule"):
        make_policy("myopic", max_tables_per_job=4, group_rule="greedy")
