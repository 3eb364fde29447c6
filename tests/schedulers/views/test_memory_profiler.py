"""Section 5's memory allocation by priority and section 4.3 / Appendix A's Profiler.

``allocate``: claims sorted by priority net / need (highest first), each granted
min(max(need, one entry), remaining) rounded down to whole entries; none for net <= 0.
``Profiler``: d_ij = rate(R_i) * mean(delta_j), c_ij = sum(tau_j) / sum(delta_j), miss_prob
from a Bloom filter of alpha * W_d bits per window of W_d keys (b / W_d) or observed
misses / probes, and section 4.1's benefit, cost and proc.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.views.memory import Grant, MemoryClaim, allocate
from schedulers.views.pipelines import Candidate
from schedulers.views.profiler import DEFAULT_CLIP, ENTRY_BYTES, REFERENCE_BYTES, Profiler
from testing.depth import examples

# -- allocate ------------------------------------------------------------------------------


def claim(group: str, net: float, need: float, entry_bytes: float = 10.0) -> MemoryClaim:
    return MemoryClaim(group, net, need, entry_bytes)


def test_no_budget_grants_every_positive_claim() -> None:
    """Without a budget a cache gets buckets for twice the keys it expects (section 3.3), 64 at least."""
    claims = [claim("a", 5.0, 100.0), claim("b", 0.0, 50.0), claim("c", -1.0, 10.0), claim("d", 1e-9, 1e9)]
    grants = allocate(claims, None)
    assert set(grants) == {"a", "d"}
    assert grants["a"].entries == 64  # 2 * 100 / 10 = 20 expected: the floor of 64 buckets
    assert grants["d"].entries == 2 * 10**8


def test_no_claims() -> None:
    assert allocate([], None) == {}
    assert allocate([], 1000.0) == {}


def test_budget_goes_by_priority_not_net() -> None:
    # priorities: a 10/100 = 0.1, b 30/600 = 0.05, c 4/20 = 0.2
    claims = [claim("a", 10.0, 100.0), claim("b", 30.0, 600.0), claim("c", 4.0, 20.0)]
    grants = allocate(claims, 250.0)
    # c first (20 bytes, 2 entries), then a (100 bytes), then b gets the remaining 130.
    assert grants == {"c": Grant(2, 20.0), "a": Grant(10, 100.0), "b": Grant(13, 130.0)}
    assert list(grants) == ["c", "a", "b"]
    assert sum(g.bytes for g in grants.values()) <= 250.0


def test_partial_grant_is_whole_entries() -> None:
    grants = allocate([claim("a", 1.0, 1000.0, entry_bytes=30.0)], 100.0)
    assert grants == {"a": Grant(3, 90.0)}  # floor(100 / 30) entries


def test_remaining_below_one_entry_skips_the_claim_not_the_rest() -> None:
    claims = [
        claim("first", 10.0, 95.0, entry_bytes=5.0),  # priority 0.105: takes 95 of 100
        claim("big", 5.0, 100.0, entry_bytes=40.0),  # priority 0.05: 5 bytes left < 40
        claim("small", 1.0, 100.0, entry_bytes=2.0),  # priority 0.01: fits 2 entries
    ]
    assert allocate(claims, 100.0) == {"first": Grant(19, 95.0), "small": Grant(2, 4.0)}


def test_budget_smaller_than_one_entry_grants_nothing() -> None:
    assert allocate([claim("a", 5.0, 100.0, entry_bytes=64.0)], 63.0) == {}


def test_need_below_one_entry_is_rounded_up_to_one_entry() -> None:
    assert allocate([claim("a", 5.0, 3.0, entry_bytes=64.0)], 1000.0) == {"a": Grant(1, 64.0)}


def test_entry_bytes_below_one_count_as_one() -> None:
    assert allocate([claim("a", 5.0, 10.0, entry_bytes=0.25)], 1000.0) == {"a": Grant(10, 10.0)}


def test_non_positive_net_gets_nothing_even_with_memory() -> None:
    claims = [claim("zero", 0.0, 10.0), claim("neg", -5.0, 10.0), claim("pos", 1.0, 10.0)]
    assert allocate(claims, 1e6) == {"pos": Grant(1, 10.0)}


def test_zero_budget() -> None:
    assert allocate([claim("a", 5.0, 10.0)], 0.0) == {}


CLAIMS = st.lists(
    st.builds(
        MemoryClaim,
        group=st.integers(0, 10**6),
        net=st.integers(-20, 50).map(float),
        need=st.integers(0, 2000).map(float),
        entry_bytes=st.integers(0, 300).map(float),
    ),
    max_size=8,
    unique_by=lambda c: c.group,
)


def priority(c: MemoryClaim) -> float:
    return c.net / c.need if c.need > 0 else math.inf


@settings(derandomize=True, deadline=None, max_examples=examples(100))
@given(CLAIMS, st.integers(0, 5000).map(float))
def test_allocation_properties(claims: list[MemoryClaim], budget: float) -> None:
    """Integer sizes keep the arithmetic exact. Provable from the greedy loop:

    - grants fit the budget; each is >= 1 whole entry, at most max(need, one entry), to a
      claim of positive net;
    - ``remaining`` only decreases, and after a claim is under-served (given fewer entries
      than max(need, entry) holds) it is below that claim's entry size. So every claim of
      strictly lower priority than an under-served positive claim X was granted, in total,
      less than X's entry size, and the leftover memory is below X's entry size.
    """
    grants = allocate(claims, budget)
    total = sum(g.bytes for g in grants.values())
    assert total <= budget
    by_group = {c.group: c for c in claims}
    for group, grant in grants.items():
        c = by_group[group]
        entry = max(c.entry_bytes, 1.0)
        assert c.net > 0
        assert grant.entries is not None and grant.entries >= 1
        assert grant.bytes == grant.entries * entry
        assert grant.bytes <= max(c.need, entry)
    for x in claims:
        if x.net <= 0:
            assert x.group not in grants
            continue
        entry = max(x.entry_bytes, 1.0)
        wanted = math.floor(max(x.need, entry) / entry)
        got = grants[x.group].entries if x.group in grants else 0
        if got == wanted:
            continue
        assert got < wanted
        assert budget - total < entry
        lower = sum(g.bytes for group, g in grants.items() if priority(by_group[group]) < priority(x))
        assert lower < entry


@settings(derandomize=True, deadline=None, max_examples=examples(40))
@given(CLAIMS)
def test_ample_budget_serves_every_positive_claim_fully(claims: list[MemoryClaim]) -> None:
    budget = sum(max(c.need, c.entry_bytes, 1.0) for c in claims)
    grants = allocate(claims, budget)
    assert set(grants) == {c.group for c in claims if c.net > 0}
    for c in claims:
        if c.net > 0:
            entry = max(c.entry_bytes, 1.0)
            assert grants[c.group].entries == math.floor(max(c.need, entry) / entry)


# -- Profiler ------------------------------------------------------------------------------

#: In the chain r - s - t, t's cache over [s r] keyed on B (r=0, s=1, t=2).
T_SR = Candidate(pipeline=2, start=0, segment=(1, 0), key=(1,))


def test_profiler_rejects_bad_parameters() -> None:
    for bad in ({"window": 0}, {"bloom_tuples": 0}, {"bloom_alpha": 0}, {"rate_window": 0}):
        with pytest.raises(ValueError):
            Profiler(3, [T_SR], **bad)


def test_rate_is_share_of_recent_updates() -> None:
    profiler = Profiler(3, [], rate_window=4)
    assert profiler.rate(0) == 0.0
    profiler.note_update(0)
    assert profiler.rate(0) == 1.0
    for i in (1, 0, 0):  # a full block: 0, 1, 0, 0
        profiler.note_update(i)
    assert (profiler.rate(0), profiler.rate(1), profiler.rate(2)) == (0.75, 0.25, 0.0)
    profiler.note_update(2)  # a quarter of the window is the new block: 3/4 of the last one's shares
    assert (profiler.rate(0), profiler.rate(1), profiler.rate(2)) == (0.5625, 0.1875, 0.25)
    for i in (2, 2, 2):
        profiler.note_update(i)
    assert (profiler.rate(0), profiler.rate(1), profiler.rate(2)) == (0.0, 0.0, 1.0)


@settings(derandomize=True, deadline=None, max_examples=examples(40))
@given(st.lists(st.integers(0, 2), max_size=40), st.integers(1, 10))
def test_rate_follows_last_updates(updates: list[int], window: int) -> None:
    """Exact at a block's end; between, a mix of the last full block's shares and the current one's."""
    profiler = Profiler(3, [], rate_window=window)
    for k, i in enumerate(updates, start=1):
        profiler.note_update(i)
        rates = [profiler.rate(j) for j in range(3)]
        assert sum(rates) == pytest.approx(1.0)
        current = updates[k - k % window : k]
        last = updates[max(0, k - k % window - window) : k - k % window]
        for j in range(3):
            shares = [part.count(j) / len(part) for part in (current, last) if part]
            assert min(shares) - 1e-12 <= rates[j] <= max(shares) + 1e-12
            if k % window == 0:
                assert rates[j] == pytest.approx(last.count(j) / window)


def test_d_and_c_from_profiled_updates() -> None:
    profiler = Profiler(3, [], window=2, rate_window=4)
    for i in (2, 0, 2, 1):
        profiler.note_update(i)  # rate(2) = 0.5
    profiler.record_profiled(2, [1, 10, 99], [7.0, 7.0])  # evicted by the window of 2
    profiler.record_profiled(2, [1, 4, 2], [0.5, 2.0])
    profiler.record_profiled(2, [1, 2, 6], [0.3, 1.0])
    assert profiler.profiled(2) == 2 and profiler.profiled(0) == 0
    # d = rate * mean(delta): position 0: 0.5 * 1, position 1: 0.5 * 3, output: 0.5 * 4.
    assert profiler.d(2, 0) == pytest.approx(0.5)
    assert profiler.d(2, 1) == pytest.approx(1.5)
    assert profiler.d(2, 2) == pytest.approx(2.0)
    # c = sum(tau) / sum(delta): (0.5 + 0.3) / 2 and (2 + 1) / 6.
    assert profiler.c(2, 0) == pytest.approx(0.4)
    assert profiler.c(2, 1) == pytest.approx(0.5)
    assert profiler.op_cost(2, 1) == pytest.approx(1.5 * 0.5)
    # Nothing profiled: zero, not a division by zero.
    assert profiler.d(0, 1) == 0.0 and profiler.c(0, 1) == 0.0


def fed_keys(keys: list[object], window: int = 10, tuples: int = 100, alpha: int = 4) -> Profiler:
    profiler = Profiler(3, [T_SR], window=window, bloom_tuples=tuples, bloom_alpha=alpha)
    for key in keys:
        profiler.probe_key(T_SR, key)
    return profiler


def test_bloom_all_equal_keys_miss_once_per_window() -> None:
    profiler = fed_keys([("k", 7)] * 1000)
    assert profiler.miss_prob(T_SR) == pytest.approx(1 / 100)


def test_bloom_all_distinct_keys_miss_almost_always() -> None:
    profiler = fed_keys([(k,) for k in range(1000)])
    # 100 keys into 400 bits: about 400 * (1 - e^-0.25) = 88.5 bits set.
    assert 0.85 <= profiler.miss_prob(T_SR) <= 1.0


def test_bloom_few_distinct_keys() -> None:
    profiler = fed_keys([k % 5 for k in range(1000)], alpha=64)
    assert profiler.miss_prob(T_SR) == pytest.approx(5 / 100, abs=1 / 100)


def test_bloom_counts_whole_windows_only() -> None:
    profiler = fed_keys(list(range(99)))
    assert profiler.miss_prob(T_SR) == 1.0  # no observation yet: assume every probe misses
    assert not profiler.ready(T_SR)
    profiler = fed_keys([0] * 100 + list(range(99)), window=10)
    assert profiler.miss_prob(T_SR) == pytest.approx(0.01)  # the partial window is not counted


def test_restart_miss_window_drops_partial_window() -> None:
    profiler = fed_keys(list(range(50)))
    profiler.restart_miss_window(T_SR)
    for _ in range(100):
        profiler.probe_key(T_SR, "same")
    assert profiler.miss_prob(T_SR) == pytest.approx(0.01)


def test_forget_miss_clears_observations() -> None:
    profiler = fed_keys(["same"] * 200)
    assert profiler.miss_prob(T_SR) == pytest.approx(0.01)
    profiler.forget_miss(T_SR)
    assert profiler.miss_prob(T_SR) == 1.0


def test_probe_outcome_is_misses_over_probes_per_window() -> None:
    profiler = Profiler(3, [T_SR], window=2, bloom_tuples=4)
    for hit in (True, False, False, True):  # 2 / 4
        profiler.probe_outcome(T_SR, hit)
    assert profiler.miss_prob(T_SR) == pytest.approx(0.5)
    for hit in (False, False, False):  # partial window: not yet observed
        profiler.probe_outcome(T_SR, hit)
    assert profiler.miss_prob(T_SR) == pytest.approx(0.5)
    profiler.probe_outcome(T_SR, False)  # 4 / 4
    assert profiler.miss_prob(T_SR) == pytest.approx(0.75)
    for _ in range(4):  # 0 / 4 evicts the first 0.5 (W = 2)
        profiler.probe_outcome(T_SR, True)
    assert profiler.miss_prob(T_SR) == pytest.approx(0.5)


def test_ready_needs_w_miss_observations_and_w_profiled_per_pipeline() -> None:
    profiler = Profiler(3, [T_SR], window=2, bloom_tuples=2)
    for i in range(3):
        profiler.record_profiled(i, [1, 1, 1], [1.0, 1.0])
    profiler.probe_outcome(T_SR, False)
    profiler.probe_outcome(T_SR, False)  # one miss observation
    assert not profiler.ready(T_SR)
    profiler.probe_outcome(T_SR, True)
    profiler.probe_outcome(T_SR, True)  # two
    assert not profiler.ready(T_SR)  # one profiled tuple per pipeline
    profiler.record_profiled(2, [1, 1, 1], [1.0, 1.0])
    profiler.record_profiled(1, [1, 1, 1], [1.0, 1.0])
    assert not profiler.ready(T_SR)  # r (a member of the segment) has one
    profiler.record_profiled(0, [1, 1, 1], [1.0, 1.0])
    assert profiler.ready(T_SR)


def test_ready_ignores_pipelines_outside_the_cache() -> None:
    cache = Candidate(pipeline=0, start=0, segment=(1, 2), key=(0,))
    profiler = Profiler(4, [cache], window=1, bloom_tuples=1)
    profiler.probe_key(cache, "k")
    for i in (0, 1, 2):
        profiler.record_profiled(i, [1, 1, 1, 1], [1.0, 1.0, 1.0])
    assert profiler.profiled(3) == 0
    assert profiler.ready(cache)


def test_kappa_falls_back_to_cost_per_tuple_in_or_out() -> None:
    profiler = Profiler(3, [])
    assert profiler.kappa() == (1.0, 1.0)
    profiler.record_profiled(0, [1, 3, 2], [4.0, 6.0])
    # Units: operator 0 handles 1 in + 3 out, operator 1 handles 3 in + 2 out: 9; cost 10.
    assert profiler.kappa() == pytest.approx((10 / 9, 10 / 9))
    profiler.probe_cost_sample(3.0, 2)
    profiler.probe_cost_sample(5.0, 0)  # no units: ignored
    profiler.update_cost_sample(0.9, 3)
    assert profiler.kappa() == pytest.approx((1.5, 0.3))


def test_estimate_reproduces_section_4_1() -> None:
    """t's cache over [s r] in the chain r - s - t, every statistic set by hand."""
    profiler = Profiler(3, [T_SR], window=2, bloom_tuples=4, rate_window=4)
    for i in (0, 0, 1, 2):
        profiler.note_update(i)
    rate = {0: 0.5, 1: 0.25, 2: 0.25}
    # Pipeline t: delta into s, into r, out; tau in s, in r.
    profiler.record_profiled(2, [1, 3, 6], [2.0, 8.0])
    profiler.record_profiled(2, [1, 5, 2], [2.0, 12.0])
    # Pipelines of the segment's inputs: their first operator's output is position 1.
    profiler.record_profiled(1, [1, 2, 3], [1.0, 1.0])  # s joins r first
    profiler.record_profiled(0, [1, 3, 3], [1.0, 1.0])  # r joins s first
    profiler.probe_cost_sample(1.0, 2)  # kappa_probe 0.5
    profiler.update_cost_sample(0.6, 3)  # kappa_update 0.2
    for hit in (False, True, True, True):  # miss_prob 0.25
        profiler.probe_outcome(T_SR, hit)

    d = {
        (2, 0): rate[2] * (1 + 1) / 2,
        (2, 1): rate[2] * (3 + 5) / 2,
        (2, 2): rate[2] * (6 + 2) / 2,
        (1, 1): rate[1] * 2,
        (0, 1): rate[0] * 3,
    }
    c = {(2, 0): (2.0 + 2.0) / (1 + 1), (2, 1): (8.0 + 12.0) / (3 + 5)}
    segment = d[(2, 0)] * c[(2, 0)] + d[(2, 1)] * c[(2, 1)]  # sum_{l=j..k} d_il c_il
    entry = d[(2, 2)] / d[(2, 0)]  # d_i,k+1 / d_ij tuples per entry
    probe_cost = 0.5 * (1 + entry)
    update_cost = 0.2
    miss = 0.25
    benefit = segment - d[(2, 0)] * probe_cost - miss * (segment + d[(2, 2)] * update_cost)
    proc = d[(2, 0)] * probe_cost + miss * (segment + d[(2, 2)] * update_cost)
    cost = update_cost * (d[(1, 1)] + d[(0, 1)])  # update_cost * sum_l d_l,k-j+1
    memory = 10 * (ENTRY_BYTES + REFERENCE_BYTES * entry)
    # The numbers, for the record: segment 0.25*2 + 1*2.5 = 3, entry 4, probe 2.5.
    assert (segment, entry, probe_cost) == (3.0, 4.0, 2.5)
    assert benefit == pytest.approx(1.575) and proc == pytest.approx(1.425) and cost == pytest.approx(0.4)

    estimate = profiler.estimate(T_SR, distinct_keys=10)
    assert estimate.segment_cost == pytest.approx(segment)
    assert estimate.entry_tuples == pytest.approx(entry)
    assert estimate.probe_cost == pytest.approx(probe_cost)
    assert estimate.update_cost == pytest.approx(update_cost)
    assert estimate.miss_prob == pytest.approx(miss)
    assert estimate.proc == pytest.approx(proc)
    assert estimate.benefit == pytest.approx(benefit)
    assert estimate.benefit == pytest.approx(estimate.segment_cost - estimate.proc)
    assert estimate.cost == pytest.approx(cost)
    assert estimate.net == pytest.approx(benefit - cost)
    assert estimate.memory == pytest.approx(memory)


def test_estimate_of_unobserved_cache_assumes_every_probe_misses() -> None:
    profiler = Profiler(3, [T_SR])
    profiler.note_update(2)
    profiler.record_profiled(2, [1, 2, 2], [1.0, 2.0])
    estimate = profiler.estimate(T_SR, distinct_keys=0)
    # miss 1: proc = d_in * probe + segment + d_out * update >= segment, so no benefit.
    assert estimate.miss_prob == 1.0
    assert estimate.benefit < 0
    assert estimate.memory == 0.0


def test_a_timing_outlier_counts_at_most_clip_times_the_median() -> None:
    """A collector pause in one timed probe would multiply a mean of W = 10 (ours: clipped);
    cost_clip None keeps the paper's plain average."""
    clipped, plain = Profiler(3, [T_SR], window=10), Profiler(3, [T_SR], window=10, clip=None)
    for profiler in (clipped, plain):
        for _ in range(9):
            profiler.probe_cost_sample(2e-6, 1)
        profiler.probe_cost_sample(100e-6, 1)
    assert clipped.kappa()[0] == pytest.approx((9 * 2e-6 + DEFAULT_CLIP * 2e-6) / 10)
    assert plain.kappa()[0] == pytest.approx((9 * 2e-6 + 100e-6) / 10)
    for _ in range(10):  # a real change: clipped until it is the median, then counted whole
        clipped.probe_cost_sample(20e-6, 1)
    assert 10e-6 < clipped.kappa()[0] < 20e-6
    for _ in range(10):
        clipped.probe_cost_sample(20e-6, 1)
    assert clipped.kappa()[0] == pytest.approx(20e-6)


def test_the_rate_forgets_what_is_older_than_its_window() -> None:
    """Blocks end every rate_window updates, read or not: a burst is seen within one window."""
    profiler = Profiler(3, [], rate_window=1000)
    for i in [0] * 10_000 + [1] * 1_000:
        profiler.note_update(i)
    assert profiler.rate(1) == 1.0 and profiler.rate(0) == 0.0
    for _ in range(500):
        profiler.note_update(0)
    assert profiler.rate(0) == pytest.approx(0.5)
