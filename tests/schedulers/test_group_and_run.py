"""GroupAndRun (Bateni et al. section 4, Figure 2) and its work-conserving variant.

Theorem 4.3: on groups of B-quasiperiodic tables, with p >= 2g, alpha <= (p - g)/(8t) and
alpha <= 1/8, GROUPANDRUN keeps every update's stretch below 3. Its proof goes through
Lemma 4.2 (every update waits at most B/6 before its batch starts), which is checked too.
"""

from __future__ import annotations

import math

import pytest

from schedulers import generators
from schedulers.model import TableSpec, Trace
from schedulers.registry import make_policy
from schedulers.simulator import SimulationResult, simulate
from testing.invariants import (
    Groups,
    check_eager,
    check_group_binding,
    check_schedule,
    static_partition,
)

TABLES = 12
SEEDS = (0, 1, 2)
#: (periods B of the groups, workers p); every case has p >= 2g and periods > 2x apart.
THEOREM_CASES = [
    ((10.0,), 2),
    ((10.0,), 4),
    ((1.0,), 6),
    ((1.0,), 8),
    ((1.0, 10.0), 4),
    ((1.0, 10.0), 6),
    ((2.0, 9.0), 8),
    ((1.0, 10.0, 100.0), 6),
    ((1.0, 10.0, 100.0), 8),
    ((1.0, 3.0, 9.0), 6),
    ((1.0, 3.0, 9.0), 8),
]


def theorem_alpha(workers: int, groups: int, tables: int) -> float:
    """The largest alpha Theorem 4.3 allows: min((p - g) / (8t), 1/8)."""
    return min((workers - groups) / (8 * tables), 1 / 8)


def theorem_trace(periods: tuple[float, ...], workers: int, seed: int, tables: int = TABLES) -> Trace:
    """A quasiperiodic workload at the theorem's largest alpha (the generator sets
    alpha = utilization * workers / tables, so utilization = alpha * tables / workers)."""
    alpha = theorem_alpha(workers, len(periods), tables)
    trace = generators.quasiperiodic(
        tables=tables,
        periods=periods,
        horizon=min(600.0, max(100.0, 60.0 * max(periods))),
        utilization=alpha * tables / workers * (1 - 1e-12),
        workers=workers,
        seed=seed,
    )
    assert all(spec.alpha <= alpha for spec in trace.tables)
    return trace


def run(trace: Trace, policy_name: str, workers: int) -> SimulationResult:
    return simulate(trace, make_policy(policy_name), workers, record_schedule=True)


def case_id(case: tuple[tuple[float, ...], int]) -> str:
    periods, workers = case
    return f"B={'-'.join(f'{b:g}' for b in periods)}_p={workers}"


# -- Theorem 4.3 ----------------------------------------------------------------------------


@pytest.mark.parametrize("tables", [TABLES, 13])
@pytest.mark.parametrize("case", THEOREM_CASES, ids=case_id)
def test_faithful_stretch_below_3_under_theorem_conditions(case, tables: int) -> None:
    periods, workers = case
    g = len(periods)
    assert workers >= 2 * g
    for seed in SEEDS:
        trace = theorem_trace(periods, workers, seed, tables=tables)
        alpha = max(spec.alpha for spec in trace.tables)
        assert alpha <= (workers - g) / (8 * tables) and alpha <= 1 / 8
        result = run(trace, "group-and-run", workers)
        groups = static_partition(trace, result)
        assert groups is not None, "hinted periods > 2x apart with p >= 2g: the partition never changes"
        check_schedule(trace, result.schedule, workers, "group-and-run", result=result, groups=groups)

        # Lemma 4.2: no update waits more than B/6 for its batch to start (the first
        # update of a batch waits longest).
        period = {spec.name: spec.period for spec in trace.tables}
        worst = max(result.schedule, key=lambda b: (b.start - b.first_release) / period[b.table])
        assert worst.start - worst.first_release <= period[worst.table] / 6, (seed, worst)

        # Theorem 4.3: stretch < [B + B/6 + (7B/6) alpha] / (B/2) = (7/3)(1 + alpha) < 3.
        stretch = result.freshness.max_stretch
        assert math.isfinite(stretch)
        assert stretch <= (7 / 3) * (1 + alpha) < 3, (seed, stretch)


# -- the partition and the worker split -----------------------------------------------------


@pytest.mark.parametrize("tables", [TABLES, 13, 7])
@pytest.mark.parametrize("case", THEOREM_CASES, ids=case_id)
def test_groups_follow_figure_2(case, tables: int) -> None:
    periods, workers = case
    trace = theorem_trace(periods, workers, seed=0, tables=tables)
    result = run(trace, "group-and-run", workers)
    summary = result.summary()
    groups = summary["groups"]
    hint = {spec.name: spec.period for spec in trace.tables}
    t = len(trace.tables)

    # One group per period B (they are > 2x apart), every table in exactly one group.
    assert len(groups) == len(periods)
    names = [name for group in groups for name in group["tables"]]
    assert sorted(names) == sorted(hint)
    g = len(groups)
    assert workers >= 2 * g

    assigned: list[int] = []
    for group in groups:
        members = group["tables"]
        # Step 1: periods in one group span a factor of at most 2.
        spread = [hint[name] for name in members]
        assert max(spread) <= 2 * min(spread), group
        lo, hi = group["period_range"]
        assert lo == min(spread) and hi == max(spread)
        # Step 2: p_k = ceil((p - g) |T_k| / t) workers.
        assert len(group["workers"]) == math.ceil((workers - g) * len(members) / t), group
        assigned.extend(group["workers"])
    # Worker ids are distinct, in [0, p); the rest are spare.
    assert len(assigned) == len(set(assigned)) <= workers
    assert all(0 <= w < workers for w in assigned)
    assert sorted(assigned + summary["spare_workers"]) == list(range(workers))
    assert result.policy_state["regroups"] == 1


@pytest.mark.parametrize("case", THEOREM_CASES, ids=case_id)
def test_faithful_runs_each_batch_on_a_worker_of_its_group(case) -> None:
    periods, workers = case
    trace = theorem_trace(periods, workers, seed=1)
    result = run(trace, "group-and-run", workers)
    groups = Groups.from_summary(result.summary()["groups"])
    check_group_binding(trace, result.schedule, workers, "group-and-run", groups)
    spare = set(result.summary()["spare_workers"])
    assert not [b for b in result.schedule if b.processor in spare], "spare workers must stay idle"
    # Inside its group the faithful policy is eager (and MYOPIC, checked by check_schedule).
    check_eager(trace, result.schedule, workers, "group-and-run", groups=groups)


def test_faithful_is_not_eager_when_it_has_spare_workers() -> None:
    """p = 6, g = 3, 12 tables: each group gets ceil(3 * 4 / 12) = 1 worker, 3 are spare;
    the faithful algorithm leaves them idle while tables wait (so it is not eager)."""
    trace = generators.quasiperiodic(
        tables=12, periods=(1.0, 10.0, 100.0), horizon=200.0, utilization=0.3, workers=6, seed=4
    )
    result = run(trace, "group-and-run", 6)
    assert result.summary()["spare_workers"] == [3, 4, 5]
    assert {b.processor for b in result.schedule} <= {0, 1, 2}
    with pytest.raises(AssertionError, match=r"\(g\)"):
        check_eager(trace, result.schedule, 6, "group-and-run")


def test_groups_are_merged_when_p_below_2g() -> None:
    """Three periods but p = 4: adjacent groups merge until g <= p // 2; every table still
    has a group and every update is loaded."""
    workers = 4
    trace = generators.quasiperiodic(
        tables=12,
        periods=(1.0, 10.0, 100.0),
        horizon=300.0,
        utilization=0.2,
        workers=workers,
        seed=2,
    )
    for policy_name in ("group-and-run", "group-and-run-wc"):
        result = run(trace, policy_name, workers)
        groups = result.summary()["groups"]
        assert len(groups) <= workers // 2
        assert sorted(n for group in groups for n in group["tables"]) == sorted(s.name for s in trace.tables)
        assert any(group["period_range"][1] > 2 * group["period_range"][0] for group in groups)
        check_schedule(trace, result.schedule, workers, policy_name, result=result)


# -- the work-conserving variant ------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [((1.0, 10.0, 100.0), 6), ((1.0, 3.0, 9.0), 8), ((1.0, 10.0), 4), ((1.0, 10.0, 100.0), 4)],
    ids=case_id,
)
def test_work_conserving_variant_is_eager(case) -> None:
    periods, workers = case
    # Heavier than the theorem allows, so that queues form and idle workers matter.
    trace = generators.quasiperiodic(
        tables=12,
        periods=periods,
        horizon=min(400.0, 40.0 * max(periods)),
        utilization=0.6,
        workers=workers,
        seed=3,
    )
    result = run(trace, "group-and-run-wc", workers)
    assert make_policy("group-and-run-wc").eager and not make_policy("group-and-run").eager
    check_schedule(trace, result.schedule, workers, "group-and-run-wc", result=result)  # includes (g)


def test_work_conserving_vs_faithful_on_one_workload() -> None:
    periods, workers = (1.0, 10.0, 100.0), 6
    for seed in SEEDS:
        trace = theorem_trace(periods, workers, seed)
        faithful = run(trace, "group-and-run", workers)
        wc = run(trace, "group-and-run-wc", workers)
        for result in (faithful, wc):
            assert result.freshness.updates == trace.n_updates
            assert sum(b.n_updates for b in result.schedule) == trace.n_updates
            assert math.isfinite(result.freshness.max_stretch)
            assert math.isfinite(result.freshness.total_staleness)
        # Lending idle and spare workers does not cost staleness here (observed wc/faithful
        # ratios 0.994-0.998 on these seeds).
        assert wc.freshness.total_staleness <= faithful.freshness.total_staleness * 1.05


def test_merged_groups_do_not_churn() -> None:
    # Five period classes spanning 81x on 4 workers force merging down to 2 groups; a
    # merged group's window is its whole span, so steady tables never change group.
    trace = generators.quasiperiodic(
        tables=40, periods=(1, 3, 9, 27, 81), utilization=0.5, workers=4, horizon=2000, seed=1
    )
    policy = make_policy("group-and-run")
    simulate(trace, policy, workers=4)
    assert policy.regroups <= 2, policy.regroups


def test_a_table_that_leaves_every_window_keeps_its_group_until_the_regroup_gap() -> None:
    """A table whose period estimate drifts out of its group's window, into no other group's,
    stays where it is (the partition is marked for a regroup) until the regroup gap has passed:
    a table is never left without a group, and one stray estimate does not repartition."""
    specs = [TableSpec(name=n, alpha=0.001, period=p) for n, p in (("a", 1.0), ("b", 1.0), ("c", 10.0), ("d", 10.0))]
    specs.append(TableSpec(name="e", alpha=0.001))  # no hint: its period is estimated
    updates = [(0, t + 1.0) for t in range(12)] + [(1, t + 1.5) for t in range(12)]
    updates += [(2, 1.0), (2, 11.0), (3, 1.0), (3, 11.0)]
    updates += [(4, t + 1.0) for t in range(11)] + [(4, 44.0)]  # every 1 s, then after 33 s: about 5 s
    updates.sort(key=lambda u: u[1])
    trace = Trace(tables=specs, update_tables=[t for t, _ in updates], update_releases=[r for _, r in updates])
    policy = make_policy("group-and-run", regroup_gap=1e6)
    simulate(trace, policy, workers=4)
    assert policy.regroups == 1 and policy._dirty  # marked, not regrouped within the gap
    assert policy._group_of[4] == policy._group_of[0]  # e kept the 1-s group it had


def test_the_first_period_known_makes_the_groups_whatever_the_regroup_gap() -> None:
    """No table had a period at the start (no hints), so there are no groups: the first table
    whose period is estimated makes them at once rather than wait out the regroup gap."""
    specs = [TableSpec(name=n, alpha=0.001) for n in ("a", "b")]
    updates = sorted([(0, t + 1.0) for t in range(5)] + [(1, 2.0 * t + 1.5) for t in range(3)], key=lambda u: u[1])
    trace = Trace(tables=specs, update_tables=[t for t, _ in updates], update_releases=[r for _, r in updates])
    policy = make_policy("group-and-run", regroup_gap=1e6)
    result = simulate(trace, policy, workers=2)
    assert policy.regroups >= 2 and 0 in policy._group_of
    assert result.freshness.updates == trace.n_updates  # every update loaded
