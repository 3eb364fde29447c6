"""LINECUTTING-BOUNDED (schedulers/keys/queue.py): a joining key cuts part of the line, never
more than a round or its own update interval, and the fast keys do not starve."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from decimal import Decimal, getcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.keys.queue import KeyQueue, KeyRates, place
from schedulers.keys.simulator import simulate_keys
from schedulers.keys.workloads import KeyedWorkload, keyed_workload
from testing.depth import examples

POLICY = "linecutting-bounded"


def rates_with(fast_wait: float) -> KeyRates:
    rates = KeyRates()
    rates.fast_wait = fast_wait
    return rates


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(
    fast_wait=st.floats(1e-3, 1e6, allow_nan=False),
    interval=st.floats(0.0, 1e9, allow_nan=False),
    more=st.floats(0.0, 1e6, allow_nan=False),
)
def test_the_advance_solves_the_fluid_optimum_and_stays_below_the_round_and_the_interval(
    fast_wait: float, interval: float, more: float
) -> None:
    rates = rates_with(fast_wait)
    ahead = rates.advance(interval)
    assert 0.0 <= ahead <= min(fast_wait, interval)
    # A = W_f - W where W^2 / 2 + W * I = W_f^2 / 2 (module docstring), worked out in 60 digits
    getcontext().prec = 60
    w_f, i = Decimal(fast_wait), Decimal(interval)
    wait = (i * i + w_f * w_f).sqrt() - i
    assert wait * wait / 2 + wait * i == pytest.approx(w_f * w_f / 2, rel=Decimal("1e-40"))
    assert ahead == pytest.approx(float(w_f - wait), rel=1e-9, abs=1e-12 * fast_wait)
    assert rates.advance(interval + more) >= ahead  # the slower the key, the further it cuts


def test_the_advance_at_its_limits() -> None:
    assert KeyRates().advance(5.0) == 0.0  # W_f unknown: IN-PLACE
    rates = rates_with(10.0)
    assert rates.advance(0.0) == 0.0  # a key updating continually joins at the tail
    assert rates.advance(1e15) == pytest.approx(10.0)  # a key never seen: nearly a round, not more, no NaN
    assert rates.advance(10.0) == pytest.approx(10.0 * (2 - math.sqrt(2)))


def test_the_fast_wait_learns_only_from_keys_that_waited_longer_than_their_interval() -> None:
    rates = KeyRates()
    rates.observe("fast", 0.0)
    rates.observe("fast", 1.0)  # interval 1
    rates.observe("slow", 50.0)  # interval 50 (since the origin)
    rates.served("slow", 8.0)  # shorter than its interval: says nothing of the fast keys
    rates.served("never-seen", 8.0)
    assert rates.fast_wait == 0.0
    rates.served("fast", 8.0)
    assert rates.fast_wait == 8.0  # the first sample as it is
    rates.served("fast", 16.0)
    assert rates.fast_wait == pytest.approx(9.0)  # then an EWMA, gain 1/8


def test_place_joins_by_advance_and_keeps_a_waiting_key_in_place() -> None:
    assert place(POLICY, waiting=False, slow=False) == "advance"
    assert place(POLICY, waiting=False, slow=True) == "advance"
    assert place(POLICY, waiting=True, slow=True) == "keep"
    # the paper's three unchanged
    assert place("linecutting", waiting=True, slow=True) == "front"
    assert place("linecutting", waiting=False, slow=False) == "tail"
    assert place("in-place", waiting=True, slow=True) == "keep"
    assert place("fifo-uq", waiting=True, slow=False) == "tail"


@dataclass
class Model:
    """LINECUTTING-BOUNDED the slow obvious way: keys sorted by virtual join time."""

    joined: list[tuple[float, int, str]] = field(default_factory=list)  # (virtual join, join number, key)
    first: dict[str, float] = field(default_factory=dict)
    newest: dict[str, float] = field(default_factory=dict)
    joins: int = 0
    cuts: int = 0

    def offer(self, key: str, at: float, interval: float, fast_wait: float) -> float | None:
        """The advance given to ``key`` if it joined."""
        self.newest[key] = at
        if key in self.first:
            return None
        ahead = fast_wait + interval - math.sqrt(interval**2 + fast_wait**2) if fast_wait > 0 else 0.0
        ahead = min(interval, fast_wait, max(0.0, ahead))  # the bound, exact: f + i - sqrt(..) rounds above a tiny i
        self.joins += 1
        if any(at - ahead < v for v, _, _ in self.joined):
            self.cuts += 1
        self.joined.append((at - ahead, self.joins, key))
        self.joined.sort()
        self.first[key] = at
        return ahead

    def order(self) -> list[str]:
        return [key for _, _, key in self.joined]

    def take(self, n: int | None) -> list[tuple[str, float, float]]:
        count = len(self.joined) if n is None else min(n, len(self.joined))
        out = [(key, self.newest.pop(key), self.first.pop(key)) for _, _, key in self.joined[:count]]
        del self.joined[:count]
        return out


operations = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.sampled_from("abcdefg"), st.floats(0.0, 5.0)),
        st.tuples(st.just("take"), st.one_of(st.none(), st.integers(1, 3)), st.floats(0.0, 5.0)),
    ),
    max_size=80,
)


def check_against_model(ops: list, learned: float) -> int:
    """Run ``ops`` on the queue and the model side by side; the queue's cuts."""
    queue: KeyQueue[float] = KeyQueue(POLICY)
    queue.rates.fast_wait = learned  # as if learned already (0: learned from the takes here)
    model = Model()
    now = 0.0
    for op, arg, step in ops:
        now += step
        if op == "offer":
            fast_wait = queue.rates.fast_wait
            queue.offer(arg, now, now)
            interval = queue.update_interval(arg)
            assert interval is not None
            ahead = model.offer(arg, now, interval, fast_wait)
            if ahead is not None:
                # the bound: every key that has waited at least the newcomer's advance stays ahead of it
                assert ahead <= fast_wait and ahead <= interval
                order = [w.key for w in queue]
                for key, first in model.first.items():
                    if key != arg and now - first >= ahead:
                        assert order.index(key) < order.index(arg)
        else:
            got = [(w.key, w.value, w.first_enqueued) for w in queue.take(arg, at=now)]
            assert got == model.take(arg)
        assert [w.key for w in queue] == model.order()
        assert queue.cuts == model.cuts
        assert queue.oldest_enqueued() == (min(model.first.values()) if model.first else None)
    return queue.cuts


@settings(max_examples=examples(150), deadline=None, derandomize=True)
@given(ops=operations, learned=st.sampled_from([0.0, 1.0, 4.0]))
def test_keys_are_served_by_virtual_join_time_and_never_pass_a_key_that_waited_their_advance(
    ops: list, learned: float
) -> None:
    check_against_model(ops, learned)


@pytest.mark.parametrize("seed", range(20))
def test_the_same_on_long_seeded_runs_with_fast_and_slow_keys(seed: int) -> None:
    rng = random.Random(seed)
    keys = "aaaaaabbbbbbccccdefghij"  # a to c update often, d to j rarely
    ops = [
        ("offer", rng.choice(keys), rng.expovariate(4.0))
        if rng.random() < 0.8
        else ("take", rng.choice([None, 1, 1, 2, 3]), rng.expovariate(4.0))
        for _ in range(400)
    ]
    assert check_against_model(ops, learned=0.0) > 0  # (these do cut)


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(ops=operations)
def test_without_waits_reported_it_is_in_place(ops: list) -> None:
    bounded: KeyQueue[float] = KeyQueue(POLICY, cost_per_key=1.0)  # take() without at: W_f stays 0
    in_place: KeyQueue[float] = KeyQueue("in-place", cost_per_key=1.0)
    now = 0.0
    for op, arg, step in ops:
        now += step
        if op == "offer":
            bounded.offer(arg, now, now)
            in_place.offer(arg, now, now)
        else:
            assert [w.key for w in bounded.take(arg)] == [w.key for w in in_place.take(arg)]
    assert bounded.cuts == 0


def _worst_wait(policy: str, workload: KeyedWorkload, cost: float = 1.0) -> float:
    """The longest any key waited, under a loader taking one key per ``cost`` (the paper's setting)."""
    queue: KeyQueue[float] = KeyQueue(policy, cost_per_key=cost)
    free = worst = 0.0
    for at, key in workload.arrivals:
        while len(queue) and free <= at:
            (taken,) = queue.take(1, at=free)
            worst = max(worst, free - taken.first_enqueued)
            free += cost
        queue.offer(key, at, at)
        if free <= at:  # the loader is idle: the key goes at once
            queue.take(1, at=at)
            free = at + cost
    return worst


@pytest.mark.parametrize("slow", [5, 7, 8, 9])
def test_fast_keys_do_not_starve_where_linecutting_makes_them(slow: int) -> None:
    """No key waits more than about two rounds (2 * keys * c) however many keys cut."""
    workload = keyed_workload("two-class", keys=10, load=5.0, slow=slow, updates=10_000, seed=slow)
    assert _worst_wait(POLICY, workload) <= 2 * 10 * 1.0
    assert _worst_wait("linecutting", workload) > 2 * 10 * 1.0


@pytest.mark.parametrize("seed", [0, 2])
def test_figure_9_matches_linecutting_with_few_slow_keys_and_beats_in_place_with_many(seed: int) -> None:
    def ratios(slow: int) -> tuple[float, float]:
        w = keyed_workload("two-class", keys=10, load=5.0, slow=slow, updates=10_000, seed=seed)
        in_place, cutting, bounded = (simulate_keys(w, p).queue.mean for p in ("in-place", "linecutting", POLICY))
        return in_place / cutting, in_place / bounded

    for slow in (0, 10):  # one rate: about IN-PLACE (the estimates' noise reorders a little)
        assert ratios(slow)[1] > 0.98
    for slow in (2, 4):  # where the paper's rule gains, at least as much
        cutting, bounded = ratios(slow)
        assert bounded >= cutting and bounded > 1.0
    for slow in (7, 8):  # where it loses half, a gain
        cutting, bounded = ratios(slow)
        assert cutting < 0.6 and bounded > 1.03


def test_below_load_1_and_with_small_batches_it_is_no_worse_than_in_place() -> None:
    short = keyed_workload("two-class", keys=10, load=0.9, slow=5, updates=10_000, seed=0)
    in_place, cutting, bounded = (simulate_keys(short, p).queue.mean for p in ("in-place", "linecutting", POLICY))
    assert in_place / cutting < 0.6  # every key passes the paper's test in a short queue
    assert in_place / bounded > 0.98
    many = keyed_workload("zipf", keys=1000, theta=0.9, load=0.8, updates=10_000, seed=0)
    staleness = {
        p: simulate_keys(many, p, overhead=50.0, max_keys=50).application.mean
        for p in ("in-place", "linecutting", POLICY)
    }
    assert staleness[POLICY] < staleness["in-place"] < staleness["linecutting"]
