"""A latest table's cost model knows what its upsert rewrites (schedulers/keys/cost.py): the
expected rows a MERGE copies, shared by the policies' predictions and the simulator's truth,
the table growing as batches store new keys, and the rewrite's per-row cost learned."""

from __future__ import annotations

import random

import pytest

from schedulers.keys.cost import MIN_COPIED, Rewrite, learned
from schedulers.model import KeyedSpec, TableSpec, TableState, Trace
from schedulers.myopic import MyopicPolicy
from schedulers.simulator import simulate


def test_the_rows_a_merge_rewrites_are_those_of_the_files_its_keys_fall_in() -> None:
    """S keys in files of f: k random keys touch S * (1 - (1 - f/S)^k) rows on average."""
    rewrite = Rewrite(stored_keys=10_000, file_keys=1_000, per_row=1e-6)
    rng = random.Random(5)
    for k in (1, 3, 10, 40):
        trials = [len({rng.randrange(10) for _ in range(k)}) * 1_000 for _ in range(4000)]
        assert rewrite.rows(k) == pytest.approx(sum(trials) / len(trials), rel=0.03)
    assert rewrite.rows(10_000) == pytest.approx(10_000)  # every file
    assert rewrite.seconds(1) == pytest.approx(1e-3)
    assert Rewrite(stored_keys=10_000, file_keys=0).rows(50) == 0.0  # deletion vectors: none
    assert rewrite.grown(500).stored_keys == 10_500 and rewrite.grown(0) is rewrite


def test_the_per_row_cost_is_learned_from_merges_that_copied_enough() -> None:
    first = learned(Rewrite(), 1_000_000, 100_000.0, 300_000, 0.3)
    assert (first.stored_keys, first.file_keys, first.per_row) == (1_000_000, 100_000, pytest.approx(1e-6))
    again = learned(first, 1_000_050, 100_005.0, 100_000, 0.3)  # 3e-6 a row: a quarter of the way
    assert again.per_row == pytest.approx(1e-6 + 0.25 * 2e-6)
    small = learned(again, 10, 10.0, MIN_COPIED - 1, 5.0)  # too few rows to teach anything
    assert small.per_row == again.per_row
    half = learned(again, 1_000_050, 100_005.0, 0, None, held=(50, 50))  # half its keys were new
    assert half.held_share == pytest.approx(1.0 - 0.25 * 0.5)
    assert half.rows(8) == pytest.approx(again.rows(7))  # 8 keys, 7 of them held: 8 * 0.875
    vectors = learned(again, 2_000_000, 0.0, 0, None)  # a deletion-vector load: nothing rewritten
    assert vectors.rows(100) == 0.0 and vectors.per_row == again.per_row


def test_the_policy_predicts_what_the_simulator_charges_and_both_see_the_table_grow() -> None:
    """One model: the policy's predicted batch and the simulator's charge agree, and new keys
    make the next MERGE dearer (files of 10 keys, 0.01 s a copied row)."""
    rewrite = Rewrite(stored_keys=100, file_keys=10, per_row=0.01)
    spec = TableSpec(name="accounts", alpha=0.0, overhead=1.0, keyed=KeyedSpec(per_key=0.1, rewrite=rewrite))
    state = TableState(0, spec)
    state.release(1.0)
    state.set_keys(waiting=2, batch_keys=2, batch_updates=1)
    predicted = state.batch_duration
    assert predicted == pytest.approx(1.0 + 0.2 + 0.01 * rewrite.rows(2))
    trace = Trace(
        tables=[spec],
        update_tables=[0, 0],
        update_releases=[1.0, 100.0],
        update_keys=[("a", "b"), ("a", "c")],
    )
    result = simulate(trace, MyopicPolicy(), 1, record_schedule=True)
    assert result.schedule is not None
    first, second = result.schedule
    assert first.finish - first.start == pytest.approx(predicted)
    grown = rewrite.grown(2)  # a and b stored by the first batch
    assert second.finish - second.start == pytest.approx(1.0 + 0.2 + 0.01 * grown.rows(2))
    assert second.finish - second.start > predicted
