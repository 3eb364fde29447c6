"""The Re-optimizer's state machine (section 4.5) driven by hand-fed Profiler observations."""

from __future__ import annotations

from schedulers.views.declaration import ViewInput, check, declared
from schedulers.views.memory import DEFAULT_BUCKETS_PER_KEY, buckets
from schedulers.views.pipelines import candidates, check_orders
from schedulers.views.profiler import Profiler
from schedulers.views.reoptimizer import Reoptimizer, ReoptimizerSettings

W = 3
BLOOM = 20


def setup(interval: float = 100, budget: float | None = None) -> tuple[Reoptimizer, Profiler]:
    spec = declared(
        "rst",
        [ViewInput("r", "R"), ViewInput("s", "S"), ViewInput("t", "T")],
        ["r.a = s.a", "s.b = t.b"],
        ["r.a"],
    )
    graph = check(spec, {"R": {"a": "long"}, "S": {"a": "long", "b": "long"}, "T": {"b": "long"}})
    found = candidates(graph, check_orders(graph, [(1, 2), (0, 2), (1, 0)]))
    assert [c.name(spec.aliases) for c in found] == ["t:[s r]"]
    profiler = Profiler(3, found, window=W, bloom_tuples=BLOOM)
    settings = ReoptimizerSettings(interval=interval, check_after=1, memory_budget=budget)
    return Reoptimizer(found, profiler, settings), profiler


def feed(profiler: Profiler, fan_out: int, repeat_keys: bool) -> None:
    """W profiled updates in every pipeline, and W Bloom windows at T's first operator.

    T's pipeline: each T tuple meets ``fan_out`` S tuples, each meeting ``fan_out`` R tuples;
    every operator costs one unit per tuple in and out. The Bloom windows see one key
    (a cache would hit) or all different keys (it would miss)."""
    c = next(iter(profiler._miss))
    for _ in range(W):
        for i in range(3):
            profiler.note_update(i)
        profiler.record_profiled(2, [1, fan_out, fan_out * fan_out], [1 + fan_out, fan_out + fan_out * fan_out])
        profiler.record_profiled(0, [1, 1, 1], [2, 2])
        profiler.record_profiled(1, [1, 1, 1], [2, 2])
    for k in range(W * BLOOM):
        profiler.probe_key(c, (0,) if repeat_keys else (k,))


def distinct(_c: object) -> float:
    return 10.0


def test_lifecycle_profiled_used_dropped_profiled_again() -> None:
    reoptimizer, profiler = setup()
    (c,) = reoptimizer.candidates
    assert reoptimizer.states[c] == "profiled" and not reoptimizer.used
    assert not reoptimizer.tick(1, distinct)  # step 2: not W observations yet
    feed(profiler, fan_out=4, repeat_keys=True)
    assert reoptimizer.tick(2, distinct)  # step 3: selection
    assert reoptimizer.used == (c,) and reoptimizer.reoptimizations == 1
    assert reoptimizer.estimates[c].net > 0
    # Refinement (a): the segment stops fanning out and its probes stop hitting: dropped at once.
    for _ in range(W):
        profiler.record_profiled(2, [1, 0, 0], [1, 0])
    for k in range(W):
        for _ in range(BLOOM):
            profiler.probe_outcome(c, hit=False)
        del k
    assert reoptimizer.tick(3, distinct)
    assert reoptimizer.states[c] == "unused" and reoptimizer.drops == 1
    # Step 4: after the interval everything is profiled again.
    assert reoptimizer.tick(2 + 100, distinct)
    assert reoptimizer.states[c] == "profiled"


def test_a_dropped_cache_comes_back_when_its_figures_do() -> None:
    """Refinement (a) drops a cache, then its figures return to those that chose it: the next
    re-optimization uses it again. (Refinement (c) keeps the last selection when nothing moved;
    that selection had lost the dropped cache, and kept it lost for the rest of the run.)"""
    reoptimizer, profiler = setup()
    (c,) = reoptimizer.candidates
    feed(profiler, fan_out=4, repeat_keys=True)
    assert reoptimizer.tick(1, distinct) and reoptimizer.used == (c,)
    for _ in range(W):
        profiler.record_profiled(2, [1, 0, 0], [1, 0])
    for _ in range(W * BLOOM):
        profiler.probe_outcome(c, hit=False)
    assert reoptimizer.tick(2, distinct) and reoptimizer.used == ()
    reoptimizer.tick(1 + 100, distinct)  # the interval: profiled again
    assert reoptimizer.states[c] == "profiled"
    feed(profiler, fan_out=4, repeat_keys=True)  # the figures that chose it
    assert reoptimizer.tick(102, distinct)
    assert reoptimizer.used == (c,) and reoptimizer.reoptimizations == 2


def test_cache_that_does_not_pay_is_not_used() -> None:
    reoptimizer, profiler = setup()
    feed(profiler, fan_out=1, repeat_keys=False)  # nothing to save, every probe a miss
    reoptimizer.tick(1, distinct)
    (c,) = reoptimizer.candidates
    assert reoptimizer.states[c] == "unused"
    assert reoptimizer.estimates[c].net < 0


def test_memory_budget_below_one_entry_leaves_the_cache_unused() -> None:
    reoptimizer, profiler = setup(budget=1.0)
    feed(profiler, fan_out=4, repeat_keys=True)
    reoptimizer.tick(1, distinct)
    (c,) = reoptimizer.candidates
    assert reoptimizer.states[c] == "unused" and not reoptimizer.used


def test_memory_budget_bounds_the_entries() -> None:
    reoptimizer, profiler = setup(budget=1000.0)
    feed(profiler, fan_out=4, repeat_keys=True)
    reoptimizer.tick(1, distinct)
    (c,) = reoptimizer.candidates
    grant = reoptimizer.grants[c.group]
    assert reoptimizer.used == (c,)
    assert grant.entries is not None and grant.entries >= 1 and grant.bytes <= 1000.0


def test_unchanged_estimates_keep_the_plan_without_selecting() -> None:
    """Refinement (c): at the next re-optimization nothing moved by 20%: no new selection."""
    reoptimizer, profiler = setup(interval=10)
    feed(profiler, fan_out=4, repeat_keys=True)
    reoptimizer.tick(1, distinct)
    (c,) = reoptimizer.candidates
    assert reoptimizer.used == (c,)
    reoptimizer.tick(11, distinct)  # the interval: the used cache hides no smaller one, it stays used
    assert reoptimizer.states[c] == "used"
    assert reoptimizer.used == (c,) and reoptimizer.reoptimizations == 1


def test_forced_plan_never_changes() -> None:
    """Its caches stay; only their buckets follow the keys, by A-Caching's own sizing rule
    (at the first update, then when it moves by a quarter, checked every tenth of an
    interval), so a static plan compares like for like."""
    reoptimizer, profiler = setup()
    (c,) = reoptimizer.candidates
    reoptimizer.force([c])
    feed(profiler, fan_out=1, repeat_keys=False)
    keys = [40.0] * 100 + [200.0] * 100 + [210.0] * 100  # a jump, then a drift of 5%
    sized = [now for now in range(1, 300) if reoptimizer.tick(now, lambda _c, now=now: keys[now])]
    assert sized == [1, 101] and reoptimizer.used == (c,)  # checked every I/10: moved past a quarter once
    assert reoptimizer.capacity(c.group) == buckets(200.0, DEFAULT_BUCKETS_PER_KEY) == 400
    unsized, profiler = setup()
    unsized.force(unsized.candidates, sized=False)
    assert not any(unsized.tick(now, distinct) for now in range(1, 300))
    assert unsized.capacity(c.group) is None


def test_a_caches_buckets_move_only_when_the_rule_moves_them_by_a_quarter() -> None:
    """As a forced plan's: re-sizing a direct-mapped store drops the entries that now collide."""
    reoptimizer, profiler = setup()
    (c,) = reoptimizer.candidates
    now = 0
    for keys, entries in ((100.0, 200), (110.0, 200), (300.0, 600)):
        now += 101  # an interval: profiled again, then selected (or kept, refinement c)
        reoptimizer.tick(now, lambda _c, keys=keys: keys)
        feed(profiler, fan_out=4, repeat_keys=True)
        assert reoptimizer.tick(now + 1, lambda _c, keys=keys: keys)
        assert reoptimizer.used == (c,) and reoptimizer.capacity(c.group) == entries
