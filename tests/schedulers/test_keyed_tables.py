"""Latest tables among the others: the table-level model, policies and simulator read a
latest table's key queue (schedulers/model.py, schedulers/keys/backlog.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedulers.generators import poisson
from schedulers.keys.workloads import with_latest_tables
from schedulers.max_benefit import MaxBenefitPolicy, benefit_rate
from schedulers.model import KeyedSpec, TableSpec, TableState, Trace
from schedulers.myopic import MyopicPolicy
from schedulers.simulator import simulate
from schedulers.traces import TraceError, parse_trace, read_trace, write_trace

LATEST = TableSpec(name="quotes", alpha=1.0, overhead=1.0, keyed=KeyedSpec(max_keys_per_batch=2, per_key=0.5))


def test_a_latest_tables_batch_costs_by_keys_and_stops_at_the_bound() -> None:
    state = TableState(0, LATEST)
    for at in (1.0, 2.0, 3.0):
        state.release(at)
    state.set_keys(waiting=6, batch_keys=2, batch_updates=1)
    assert (state.batch_count, state.batch_length) == (1, 1.0)
    assert state.batch_duration == 1.0 + 0.5 * 2  # not alpha * 3 s of data
    # Catching up takes 6 / 2 batches, each paying the overhead.
    assert state.backlog_seconds == 3 * 1.0 + 0.5 * 6
    assert benefit_rate(state) == pytest.approx(3.0 / 6.0)
    assert benefit_rate(state, catch_up=False) == pytest.approx(1.0 / 2.0)
    append = TableState(1, TableSpec(name="events", alpha=1.0, overhead=1.0))
    append.release(3.0)
    assert (append.batch_count, append.batch_duration, append.backlog_seconds) == (1, 4.0, 4.0)


def keyed_trace() -> Trace:
    return Trace(
        tables=[LATEST.model_copy(update={"keyed": KeyedSpec(per_key=0.5)})],
        update_tables=[0, 0, 0],
        update_releases=[1.0, 2.0, 3.0],
        update_keys=[("a", "b"), ("a",), ("c", "a")],
    )


def test_the_simulator_charges_a_latest_table_per_key_it_loads() -> None:
    result = simulate(keyed_trace(), MyopicPolicy(), 1, record_schedule=True)
    assert result.schedule is not None
    # t=1: update 1 (a, b) costs 1 + 2 * 0.5; t=3: updates 2 and 3 hold a and c once each.
    assert [(b.start, b.finish, b.n_updates) for b in result.schedule] == [(1.0, 3.0, 1), (3.0, 5.0, 2)]
    figures = result.keyed["quotes"]
    assert (figures.keys_loaded, figures.superseded) == (4, 1)
    assert figures.application.keys == 3


def test_a_bound_on_keys_splits_a_backlog_into_batches() -> None:
    trace = keyed_trace()
    trace.tables = [LATEST]  # at most 2 keys a batch
    trace.update_releases = [1.0, 1.5, 2.0]
    trace.update_keys = [("a", "b"), ("c",), ("d",)]
    result = simulate(trace, MyopicPolicy(), 1, record_schedule=True)
    assert result.schedule is not None
    assert [b.n_updates for b in result.schedule] == [1, 2]  # (c) and (d) fit one batch of 2 keys
    assert result.freshness.updates == 3


def test_hiding_keys_from_the_policy_changes_its_view_not_the_work() -> None:
    trace = with_latest_tables(poisson(tables=6, horizon=200, utilization=0.8, workers=2, seed=3), 3, keys=20, seed=3)
    aware = simulate(trace, MaxBenefitPolicy(), 2)
    blind = simulate(trace, MaxBenefitPolicy(), 2, key_costs=False)
    assert aware.freshness.updates == blind.freshness.updates == trace.n_updates
    assert aware.keyed.keys() == blind.keyed.keys() == {s.name for s in trace.tables[:3]}
    # Every value is loaded or superseded, either way.
    for result in (aware, blind):
        for name, figures in result.keyed.items():
            tid = [s.name for s in trace.tables].index(name)
            rows = sum(len(k) for t, k in zip(trace.update_tables, trace.update_keys) if t == tid)
            assert figures.keys_loaded + figures.superseded == rows


def test_latest_tables_draw_reproducible_keys_with_a_cost_per_row_like_the_append_model() -> None:
    base = poisson(tables=4, horizon=100, seed=1)
    once, again = with_latest_tables(base, 2, rows=5, seed=7), with_latest_tables(base, 2, rows=5, seed=7)
    assert once.update_keys == again.update_keys
    spec = once.tables[0]
    assert spec.keyed is not None and spec.period is not None
    assert spec.keyed.per_key == pytest.approx(spec.alpha * spec.period / 5)
    assert once.tables[2].keyed is None
    assert all(len(k) == (5 if t < 2 else 0) for t, k in zip(once.update_tables, once.update_keys))


def test_a_trace_file_carries_latest_tables_and_their_keys(tmp_path: Path) -> None:
    trace = with_latest_tables(poisson(tables=3, horizon=50, seed=2), 1, keys=4, rows=2, max_keys_per_batch=3)
    write_trace(trace, tmp_path / "t.jsonl")
    back = read_trace(tmp_path / "t.jsonl")
    assert back.tables == trace.tables and back.update_keys == trace.update_keys
    assert simulate(back, MyopicPolicy(), 2).freshness == simulate(trace, MyopicPolicy(), 2).freshness


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ('{"type":"update","table":"q","release":1}', "latest table: its updates need 'keys'"),
        ('{"type":"update","table":"e","release":1,"keys":[1]}', "append table: drop 'keys'"),
        ('{"type":"update","table":"q","release":1,"keys":[true]}', "list of integers or strings"),
        ('{"type":"update","table":"q","release":1,"keys":null}', "list of integers or strings"),
    ],
)
def test_a_trace_with_wrong_keys_is_refused_by_line(update: str, message: str) -> None:
    lines = [
        '{"type":"table","name":"q","alpha":0.1,"keyed":{"per_key":0.01}}',
        '{"type":"table","name":"e","alpha":0.1}',
        update,
    ]
    with pytest.raises(TraceError, match=message) as caught:
        parse_trace(lines, "t.jsonl")
    assert "t.jsonl line 3" in str(caught.value)
