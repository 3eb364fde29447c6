"""The update-queue simulator: UpStream's comparisons hold, and nothing is lost in the count."""

from __future__ import annotations

import pytest

from schedulers.keys.simulator import KEYED_POLICIES, compare_keys, simulate_keys
from schedulers.keys.staleness import ApplicationStaleness, StalenessArea, StalenessFigures
from schedulers.keys.workloads import key_rates, keyed_workload


def test_staleness_area_is_the_integral_of_the_sawtooth() -> None:
    area = StalenessArea()
    area.set("k", 1.0, 1.0)  # stale from 1 ...
    area.set("k", None, 3.0)  # ... to 3: a triangle of 2 x 2 / 2
    area.set("k", 4.0, 4.0)
    area.set("k", 5.0, 6.0)  # at 6 staleness drops from 2 to 1 (an older arrival reflected)
    totals = area.finish(7.0)  # and grows to 2 at 7
    assert totals["k"] == pytest.approx(2.0 + 2.0 + (2.0**2 - 1.0**2) / 2)


def test_application_staleness_counts_from_the_first_arrival_a_load_does_not_reflect() -> None:
    """Section 3.3's example: b arrives while a is loading, so a's delivery leaves b stale."""
    app = ApplicationStaleness()
    app.arrived("k", 0.0)  # a
    app.arrived("k", 2.0)  # b, while a loads
    app.delivered("k", 0.0, 3.0)  # a delivered: stale since b's arrival
    assert app.plot.since("k") == 2.0
    app.delivered("k", 2.0, 6.0)
    assert app.plot.since("k") is None
    assert app.plot.finish(6.0)["k"] == pytest.approx(3.0**2 / 2 + (4.0**2 - 1.0**2) / 2)


@pytest.mark.parametrize("shape", ["uniform", "two-class", "zipf"])
def test_every_arrival_is_loaded_superseded_or_still_waiting(shape: str) -> None:
    workload = keyed_workload(shape, keys=12, load=3.0, updates=3_000, seed=4, slow=3)
    for policy in KEYED_POLICIES:
        for max_keys, overhead in ((1, 0.0), (4, 2.0), (None, 5.0)):
            r = simulate_keys(workload, policy, max_keys=max_keys, overhead=overhead)
            assert r.loaded + r.superseded + r.unfinished == len(workload.arrivals), (policy, max_keys)
            if policy == "fifo-aq":
                assert r.superseded == 0
            else:
                assert r.peak_waiting <= workload.keys  # one value per key, whatever the backlog


def test_update_queues_keep_up_under_overload_where_the_append_queue_cannot() -> None:
    """Figure 7: at load 5 the append queue's staleness grows with the run, update queues' do not."""
    results = {r.policy: r for r in compare_keys(keyed_workload("uniform", keys=10, load=5.0, updates=10_000))}
    assert results["fifo-aq"].application.mean > 100 * results["in-place"].application.mean
    assert results["fifo-aq"].peak_waiting > 1_000


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_place_beats_fifo_uq_when_keys_update_at_one_rate(seed: int) -> None:
    """Section 5.2: IN-PLACE minimises staleness for uniform key rates."""
    workload = keyed_workload("uniform", keys=10, load=5.0, updates=10_000, seed=seed)
    in_place = simulate_keys(workload, "in-place")
    fifo = simulate_keys(workload, "fifo-uq")
    assert in_place.queue.mean < fifo.queue.mean
    assert in_place.application.mean < fifo.application.mean


def test_linecutting_is_in_place_when_every_key_is_fast_or_every_key_is_slow() -> None:
    """Figure 9's ends: with no slow (or only slow) updaters the two policies coincide."""
    for slow in (0, 10):
        workload = keyed_workload("two-class", keys=10, load=5.0, slow=slow, updates=10_000, seed=3)
        cutting, in_place = simulate_keys(workload, "linecutting"), simulate_keys(workload, "in-place")
        assert cutting.cuts == 0
        assert cutting.queue == in_place.queue and cutting.application == in_place.application


def test_linecutting_serves_few_slow_updaters_first() -> None:
    workload = keyed_workload("two-class", keys=10, load=5.0, slow=2, updates=10_000, seed=1)
    cutting, in_place = simulate_keys(workload, "linecutting"), simulate_keys(workload, "in-place")
    assert cutting.cuts > 0
    assert cutting.queue.mean < in_place.queue.mean


def test_the_same_seed_gives_the_same_run_and_bad_shapes_are_refused() -> None:
    a = keyed_workload("zipf", keys=20, theta=0.5, seed=9, updates=2_000)
    assert a == keyed_workload("zipf", keys=20, theta=0.5, seed=9, updates=2_000)
    assert (
        simulate_keys(a, "linecutting").summary()["queue_staleness"]
        == simulate_keys(a, "linecutting").summary()["queue_staleness"]
    )
    assert sum(key_rates("zipf", 5, theta=0.9)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown keyed workload"):
        keyed_workload("pareto")
    with pytest.raises(ValueError, match="unknown key policy"):
        simulate_keys(a, "lifo")
    assert StalenessFigures.of({}, [], 1.0).keys == 0
