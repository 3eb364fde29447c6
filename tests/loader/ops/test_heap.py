"""Collection pauses stay short with a backlog: what is alive at a tick is frozen (skipped by
collections) and handed back to the collector once the backlog has drained (at most every ten
minutes), or after an hour in any case, so garbage cycles among frozen objects are collected,
late but surely; cycles already garbage at a tick are collected, not frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from loader.ops.heap import HeapKeeper, collection_paused


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Iterator[Clock]:
    yield Clock()
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_a_backlog_is_frozen_out_of_every_collection(clock: Clock) -> None:
    keeper = HeapKeeper(clock=clock)
    backlog = [[i] for i in range(10_000)]  # long-lived containers, as pending updates are
    keeper.tick()
    assert gc.get_freeze_count() >= len(backlog)
    collected = {id(o) for generation in range(3) for o in gc.get_objects(generation=generation)}
    assert id(backlog) not in collected and id(backlog[-1]) not in collected
    fresh = [0]  # allocated after the tick: collectable as ever
    assert id(fresh) in {id(o) for o in gc.get_objects(generation=0)}


def test_frozen_objects_go_back_once_the_backlog_drained_at_most_every_ten_minutes(clock: Clock) -> None:
    frozen = {"count": 1000}
    keeper = HeapKeeper(clock=clock, frozen=lambda: frozen["count"])
    keeper.tick()
    assert keeper.baseline == 1000
    frozen["count"] = 50_000  # a backlog
    clock.now = 601
    keeper.tick()
    assert keeper.unfreezes == 0, "a backlog stays frozen: its full collection would be long"
    frozen["count"] = 1200  # loaded
    clock.now = 602
    keeper.tick()
    assert keeper.unfreezes == 1
    clock.now = 1000
    keeper.tick()
    assert keeper.unfreezes == 1, "at most every ten minutes"
    frozen["count"] = 50_000
    clock.now = 602 + 3600
    keeper.tick()
    assert keeper.unfreezes == 2, "every hour in any case"


def test_cycles_already_garbage_at_a_tick_are_collected_not_frozen(clock: Clock) -> None:
    keeper = HeapKeeper(clock=clock)
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    keeper.tick()
    assert gone() is None


def test_cycles_frozen_while_alive_are_collected_after_the_unfreeze(clock: Clock) -> None:
    keeper = HeapKeeper(clock=clock)
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    keeper.tick()  # frozen while alive
    del a, b
    gc.collect()
    assert alive() is not None, "a dead cycle waits in the permanent generation"

    clock.now = 3601
    keeper.tick()
    assert gc.get_freeze_count() == 0 and keeper.unfreezes == 1
    gc.collect()
    assert alive() is None
    keeper.tick()  # frozen again from the next tick on
    assert gc.get_freeze_count() > 0
    keeper.stop()
    assert gc.get_freeze_count() == 0


def test_start_up_state_is_built_without_collections_then_frozen(clock: Clock) -> None:
    """``collection_paused``: no collection while the service builds what lives on; then it
    is frozen (later collections skip it) and the collector is on again, also after a failure."""
    collections: list[object] = []

    def seen(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    gc.callbacks.append(seen)
    try:
        before = gc.get_freeze_count()
        with collection_paused():
            assert not gc.isenabled()
            state = [Node() for _ in range(50_000)]  # far past the collector's thresholds
        assert not collections and gc.isenabled()
        assert gc.get_freeze_count() >= before + len(state)
        with pytest.raises(RuntimeError), collection_paused():
            raise RuntimeError("recovery failed")
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(seen)
