"""The stage model of a job (schedulers/stage_costs.py): fitted from measured jobs, and in the
simulator each table of a job becomes current at its own commit, the worker free after the reply."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from schedulers.freshness import evaluate_schedule
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.stage_costs import MeasuredJob, StageCosts, fit_stage_costs
from tests.schedulers.test_job_groups import poisson

COSTS = StageCosts(
    before_fixed=0.02,
    before_per_table=0.003,
    spark_fixed=0.15,
    spark_per_table=0.001,
    commit_per_table=0.005,
    after_fixed=0.01,
)


def test_the_fit_recovers_the_costs_of_noisy_jobs() -> None:
    rng = random.Random(37)
    jobs = []
    for _ in range(400):
        n = rng.randint(1, 32)
        noise = lambda: rng.gauss(0, 0.002)  # noqa: E731
        before = COSTS.before_fixed + COSTS.before_per_table * n + noise()
        spark = COSTS.spark_fixed + COSTS.spark_per_table * n + noise()
        commits = [COSTS.commit_per_table + rng.gauss(0, 0.001) for _ in range(n)]
        jobs.append(MeasuredJob(n, before, spark, commits, COSTS.after_fixed + noise()))
    fitted = fit_stage_costs(jobs)
    assert fitted.jobs == 400
    for name in ("before_fixed", "before_per_table", "spark_fixed", "spark_per_table", "commit_per_table"):
        assert getattr(fitted, name) == pytest.approx(getattr(COSTS, name), abs=0.002), name
    assert fit_stage_costs([]) == StageCosts()
    with pytest.raises(ValueError, match="commit_per_table"):
        StageCosts(commit_per_table=-1.0)


def test_a_jobs_tables_become_current_one_commit_after_another() -> None:
    trace = poisson(40, 0.5, 60.0, seed=37)
    result = simulate(
        trace, make_policy("myopic", max_tables_per_job=32), 2, record_schedule=True, job_overhead=0.15, stages=COSTS
    )
    assert result.schedule is not None
    jobs: dict[int, list] = defaultdict(list)
    for batch in result.schedule:
        if batch.job is not None:
            jobs[batch.job].append(batch)
    assert jobs, "the policy formed multi-table jobs"
    for members in jobs.values():
        visible, end = COSTS.offsets([0.0] * len(members))
        start = members[0].start
        assert [b.finish - start for b in members] == pytest.approx(visible)
        assert max(b.finish for b in members) < start + end  # the reply after the last commit
    # Every update loaded once, and the ledger is the schedule's own accounting.
    assert sum(b.n_updates for b in result.schedule) == len(trace.update_releases)
    assert evaluate_schedule(trace, result.schedule).total_staleness == pytest.approx(result.freshness.total_staleness)
