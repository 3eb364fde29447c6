"""Join views in the simulator (the "what if" for views): a view's updates are its inputs'
commits, released as each input batch finishes; every input commit reaches the view in a
later view load; the view is scheduled by the policy like a table; traces declare views
with ``view_of`` and carry no updates for them."""

from __future__ import annotations

import pytest

from schedulers.freshness import ScheduleError, evaluate_schedule
from schedulers.generators import jittered_feeds
from schedulers.model import TableSpec, Trace
from schedulers.registry import POLICIES, make_policy
from schedulers.simulator import simulate
from schedulers.traces import TraceError, parse_trace, trace_lines

SALES = TableSpec(name="sales", alpha=0.05, overhead=0.2)
CUSTOMERS = TableSpec(name="customers", alpha=0.02, overhead=0.3)
VIEW = TableSpec(name="v", alpha=0.01, overhead=0.05, weight=2.0, view_of=("sales", "customers"))


def feeds(seed: int, seconds: float = 300.0, tables: list[TableSpec] | None = None) -> Trace:
    return jittered_feeds(tables or [SALES, CUSTOMERS, VIEW], (1.0, 4.0), seconds, seed)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("workers", [1, 3])
def test_every_input_commit_reaches_the_view_in_a_later_view_load(policy: str, workers: int) -> None:
    result = simulate(feeds(7), make_policy(policy), workers, record_schedule=True)
    assert result.schedule is not None
    inputs = sorted({b.finish for b in result.schedule if b.table != "v"})
    views = [b for b in result.schedule if b.table == "v"]
    figures = {t.name: t for t in result.freshness.tables}
    # One view update per instant an input batch finished, released then.
    assert figures["v"].updates == len(inputs) == sum(b.n_updates for b in views)
    released = [r for b in views for r in (b.first_release, b.last_release)]
    assert set(released) <= set(inputs)
    for finish in inputs:  # absorbed by a view load that starts at or after the commit
        assert any(b.start >= finish and b.first_release <= finish <= b.last_release for b in views)
    assert all(views[k].finish <= views[k + 1].start for k in range(len(views) - 1))
    assert figures["v"].staleness >= figures["v"].low_bound > 0


def test_a_view_in_a_multi_table_job_pays_its_whole_overhead() -> None:
    """The service runs a view's load apart from the tables' Spark job (loader/service.py)."""
    trace = feeds(3, seconds=120.0)
    grouped = simulate(
        trace, make_policy("myopic", max_tables_per_job=3, job_overhead=0.2), 1, record_schedule=True, job_overhead=0.2
    )
    assert grouped.schedule is not None
    jobs: dict[int, list] = {}
    for batch in grouped.schedule:
        if batch.job is not None:
            jobs.setdefault(batch.job, []).append(batch)
    with_view = [b for b in jobs.values() if any(x.table == "v" for x in b) and len(b) > 1]
    assert with_view
    for batches in with_view:
        view = next(b for b in batches if b.table == "v")
        assert view.finish - view.start >= VIEW.overhead + 0.2 - 1e-9  # its own 0.05 plus the tables' job


def test_a_trace_declares_views_and_carries_no_updates_for_them() -> None:
    trace = feeds(5, seconds=30.0)
    lines = list(trace_lines(trace))
    assert '"view_of": ["sales", "customers"]' in lines[2] and not any('"table": "v"' in line for line in lines)
    again = parse_trace(lines)
    assert again.tables == trace.tables and again.update_releases == trace.update_releases
    with pytest.raises(TraceError, match="is a view: its updates are its inputs' loads"):
        parse_trace([*lines, '{"type":"update","table":"v","release":99.0}'])
    bad = '{"type":"table","name":"w","alpha":0.1,"view_of":["sales","nope"]}'
    with pytest.raises(TraceError, match="reads 'nope', which is not a table declared before it"):
        parse_trace([lines[0], bad])
    over_view = '{"type":"table","name":"w","alpha":0.1,"view_of":["v"]}'
    with pytest.raises(TraceError, match="reads 'v'"):
        parse_trace([*lines[:3], over_view])
    with pytest.raises(ScheduleError, match="score it with the simulator"):
        evaluate_schedule(trace, [])


def test_what_if_a_view_weighs_more() -> None:
    """The simulator answers "what if" about a view: a heavier view is loaded more often
    and is fresher, under a policy that reads weights, at the same workload."""
    light = feeds(11, tables=[SALES, CUSTOMERS, VIEW.model_copy(update={"weight": 0.2})])
    heavy = feeds(11, tables=[SALES, CUSTOMERS, VIEW.model_copy(update={"weight": 20.0})])
    figures = []
    for trace in (light, heavy):
        result = simulate(trace, make_policy("max-benefit"), 1)
        figures.append({t.name: t for t in result.freshness.tables}["v"])
    assert figures[1].staleness < figures[0].staleness
    assert figures[1].batches > figures[0].batches


def test_a_report_scores_a_schedule_with_views_as_the_simulator_did() -> None:
    """``loader report`` rebuilds a view's releases from its inputs' batches in the schedule."""
    from cli.plots import build_run

    trace = feeds(9, seconds=60.0)
    result = simulate(trace, make_policy("myopic"), 2, record_schedule=True)
    assert result.schedule is not None
    run = build_run(trace, result.schedule)
    assert run.notes() == []
    assert run.summary.total_staleness == pytest.approx(result.freshness.total_staleness)
    assert run.summary.low_bound == pytest.approx(result.freshness.low_bound)
