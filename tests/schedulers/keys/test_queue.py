"""Update queues (UpStream section 5): each policy against a plain model of what it promises."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.keys.queue import KEY_POLICIES, KeyQueue, ResidentIntervals
from schedulers.keys.simulator import simulate_keys
from schedulers.keys.workloads import keyed_workload
from testing.depth import examples


@dataclass
class Model:
    """What an update queue holds, written the slow obvious way."""

    policy: str
    order: list[str] = field(default_factory=list)
    newest: dict[str, float] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)
    offers: dict[str, int] = field(default_factory=dict)

    def offer(self, key: str, at: float) -> None:
        if key in self.newest:
            self.offers[key] += 1
            if self.policy == "fifo-uq":
                self.order.remove(key)
                self.order.append(key)
        else:
            self.order.append(key)
            self.first[key] = at
            self.offers[key] = 1
        self.newest[key] = at

    def take(self, n: int | None) -> list[tuple[str, float, float, int]]:
        count = len(self.order) if n is None else min(n, len(self.order))
        out = []
        for key in self.order[:count]:
            out.append((key, self.newest.pop(key), self.first.pop(key), self.offers.pop(key) - 1))
        del self.order[:count]
        return out


operations = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.sampled_from("abcdef"), st.floats(0.0, 5.0)),
        st.tuples(st.just("take"), st.one_of(st.none(), st.integers(1, 4)), st.just(0.0)),
    ),
    max_size=60,
)


@pytest.mark.parametrize("policy", ["fifo-uq", "in-place"])
@settings(max_examples=examples(80), deadline=None, derandomize=True)
@given(ops=operations)
def test_update_queue_serves_the_newest_value_of_each_key_in_the_policys_order(policy: str, ops: list) -> None:
    queue: KeyQueue[float] = KeyQueue(policy)
    model = Model(policy)
    now = 0.0
    for op, arg, step in ops:
        if op == "offer":
            now += step
            queue.offer(arg, now, now)
            model.offer(arg, now)
        else:
            got = [(w.key, w.value, w.first_enqueued, w.superseded) for w in queue.take(arg)]
            assert got == model.take(arg)
        assert [w.key for w in queue] == model.order
        assert queue.oldest_enqueued() == (min(model.first.values()) if model.first else None)


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(ops=operations)
def test_linecutting_without_a_known_cost_is_in_place(ops: list) -> None:
    cutting: KeyQueue[float] = KeyQueue("linecutting")  # c = 0: nothing cuts
    in_place: KeyQueue[float] = KeyQueue("in-place")
    now = 0.0
    for op, arg, step in ops:
        if op == "offer":
            now += step
            cutting.offer(arg, now, now)
            in_place.offer(arg, now, now)
        else:
            assert [w.key for w in cutting.take(arg)] == [w.key for w in in_place.take(arg)]
    assert cutting.cuts == 0


def test_a_slow_updater_cuts_to_the_front_and_a_fast_one_keeps_its_place() -> None:
    """Section 5.3: k cuts when 1/u_k > c * n (n: keys waiting when k updated)."""
    queue: KeyQueue[str] = KeyQueue("linecutting", cost_per_key=1.0)
    for at in (0.0, 0.5, 1.0, 1.5):  # "fast" updates every half second
        queue.offer("fast", "v", at)
    queue.offer("a", "v", 1.6)
    queue.offer("b", "v", 1.7)
    # 1.6 s since the origin for a, 1.7 for b: a waits behind fast (n=1, 1.6 > 1), b behind
    # two keys (n=2, 1.7 < 2): a cut, b did not
    assert [w.key for w in queue] == ["a", "fast", "b"]
    queue.offer("fast", "v2", 2.0)  # interval ~0.5 < c * n = 2: stays in place
    assert [w.key for w in queue] == ["a", "fast", "b"]
    queue.offer("slow", "v", 30.0)  # never seen for 30 s: cuts in front of 3 keys
    assert [w.key for w in queue] == ["slow", "a", "fast", "b"]
    assert queue.cuts == 2
    assert queue.update_interval("fast") < 1.0 < queue.update_interval("slow")


def test_fifo_uq_moves_an_overwritten_key_back_but_keeps_its_first_enqueue() -> None:
    queue: KeyQueue[int] = KeyQueue("fifo-uq")
    queue.offer("ibm", 1, 0.0)
    queue.offer("msft", 1, 1.0)
    assert queue.offer("ibm", 2, 2.0) == 1  # the superseded value comes back to the caller
    taken = queue.take()
    assert [(w.key, w.value, w.first_enqueued, w.superseded) for w in taken] == [
        ("msft", 1, 1.0, 0),
        ("ibm", 2, 0.0, 1),
    ]


def test_unknown_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="fifo-uq, in-place, linecutting"):
        KeyQueue("lifo")
    assert set(KEY_POLICIES) == {"fifo-uq", "in-place", "linecutting", "linecutting-faster", "linecutting-bounded"}


@pytest.mark.parametrize("load", [0.9, 2.0, 5.0])
def test_with_one_rate_for_every_key_the_faster_reading_of_n_is_in_place(load: float) -> None:
    """UpStream section 5.3: when all keys update at one rate, LINECUTTING and IN-PLACE
    "perform exactly the same". With n counting only the faster waiting keys and u_k known,
    no key is faster than another: nothing cuts. The literal n (every waiting key) cuts."""
    workload = keyed_workload("uniform", keys=10, load=load, updates=3_000, seed=7)
    in_place = simulate_keys(workload, "in-place")
    faster = simulate_keys(workload, "linecutting-faster", known_rates=True)
    literal = simulate_keys(workload, "linecutting", known_rates=True)
    assert faster.cuts == 0 and faster.queue.mean == in_place.queue.mean
    assert faster.application.mean == in_place.application.mean
    assert literal.cuts > 0 and literal.queue.mean != in_place.queue.mean


def test_the_faster_reading_counts_only_waiting_keys_that_update_faster() -> None:
    queue: KeyQueue[int] = KeyQueue(
        "linecutting-faster", cost_per_key=1.0, known_intervals={"fast1": 1.0, "fast2": 1.0, "slow": 50.0, "mid": 1.5}
    )
    queue.offer("fast1", 1, 0.0)
    queue.offer("fast2", 1, 0.1)
    queue.offer("mid", 1, 0.2)  # 2 faster keys wait: 1.5 > 1.0 * 2 fails, it does not cut
    queue.offer("slow", 1, 0.3)  # 3 faster keys wait: 50 > 3, it cuts to the front
    assert [w.key for w in queue] == ["slow", "fast1", "fast2", "mid"] and queue.cuts == 1
    assert [w.key for w in queue.take(2)] == ["slow", "fast1"]
    queue.offer("mid", 2, 0.4)  # waiting, and now 1.5 > 1.0 * 1: a waiting key cuts too (section 5.3's test)
    assert [w.key for w in queue] == ["mid", "fast2"] and queue.cuts == 2


def test_resident_intervals_count_strictly_faster_keys_other_than_the_one_asking() -> None:
    intervals = ResidentIntervals()
    for key, interval in (("a", 1.0), ("b", 2.0), ("c", 2.0), ("d", 5.0)):
        intervals.set(key, interval)
    assert intervals.faster("x", 2.0) == 1 and intervals.faster("x", 2.5) == 3
    assert intervals.faster("b", 2.5) == 2  # (b itself is not counted)
    intervals.set("a", 9.0)  # its estimate changed
    intervals.discard("c")
    intervals.set("e", None)  # never seen: not counted
    assert intervals.faster("x", 3.0) == 1 and len(intervals) == 3
