"""Offline cache selection (section 4.4, Appendix B) against a brute force over every
nonoverlapping subset, on instances built from real views: random acyclic join graphs of 3
to 6 inputs (stars, chains, trees mixing both), random valid pipeline orders, the
candidates they allow and random benefits and costs. Plus the paper's 6-way star.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedulers.views.declaration import JoinGraph, ViewError, ViewInput, check, declared
from schedulers.views.pipelines import Candidate, candidates, check_orders, conflicts, global_candidates
from schedulers.views.selection import (
    SELECTION_METHODS,
    Instance,
    net_benefit,
    select,
    shared_groups,
    total_cost,
)
from testing.depth import examples
from tests.schedulers.views.strategies import valid_orders

#: Brute force enumerates 2^m subsets: keep m small.
MAX_CANDIDATES = 10
SCHEMAS = {"t": {"a": "int", **{f"b{i}": "int" for i in range(1, 7)}}}
SETTINGS = settings(
    derandomize=True,
    deadline=None,
    max_examples=examples(40),
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
TOL = 1e-9


def graph_of(n: int, predicates: Sequence[str]) -> JoinGraph:
    spec = declared("v", [ViewInput(f"r{i}", "t") for i in range(n)], predicates, ["r0.a"])
    return check(spec, SCHEMAS)


def star(n: int) -> JoinGraph:
    return graph_of(n, [f"r{i}.a = r{i + 1}.a" for i in range(n - 1)])


# -- strategies ----------------------------------------------------------------------------


@st.composite
def graphs(draw: st.DrawFn) -> JoinGraph:
    n = draw(st.integers(3, 6))
    shape = draw(st.sampled_from(["star", "chain", "tree"]))
    predicates = []
    for i in range(1, n):
        if shape == "star":
            parent, column = i - 1, "a"
        elif shape == "chain":
            parent, column = i - 1, f"b{i}"
        else:
            parent, column = draw(st.integers(0, i - 1)), draw(st.sampled_from(["a", f"b{i}"]))
        predicates.append(f"r{parent}.{column} = r{i}.{column}")
    try:
        return graph_of(n, predicates)
    except ViewError:
        assume(False)
        raise


@st.composite
def instances(draw: st.DrawFn, physical: bool = False, unshared: bool = False, global_: bool = False) -> Instance:
    """``physical``: benefit(C) <= the cost of C's operators (proc >= 0), as measured
    estimates are and as Appendix B's bound assumes. ``unshared``: one cache per group.
    ``global_``: section 6's globally-consistent candidates join, up to a drawn m."""
    graph = draw(graphs())
    orders = draw(valid_orders(graph))
    found = list(candidates(graph, orders))
    if global_:
        found = found[: MAX_CANDIDATES // 2]
        found += global_candidates(graph, orders, found, draw(st.integers(len(found) + 1, MAX_CANDIDATES)))
    if found and (len(found) > MAX_CANDIDATES or draw(st.booleans())):
        most = min(len(found), MAX_CANDIDATES)
        picks = draw(st.lists(st.sampled_from(range(len(found))), unique=True, min_size=most // 2, max_size=most))
        found = [found[k] for k in sorted(picks)]
    if unshared:
        seen: set[object] = set()
        found = [c for c in found if not (c.group in seen or seen.add(c.group))]
    scale = draw(st.sampled_from([1.0, 0.25, 0.1]))
    ops = {(i, j): draw(st.integers(0, 20)) for i in range(graph.n) for j in range(graph.n - 1)}
    cost = {c.group: draw(st.integers(0, 40)) * scale for c in found}
    benefit = {}
    for c in found:
        replaced = sum(ops[(c.pipeline, j)] for j in range(c.start, c.end + 1))
        if physical:
            benefit[c] = (replaced - draw(st.integers(0, 2 * replaced + 10))) * scale
        else:
            benefit[c] = draw(st.integers(-20, 60)) * scale
    return Instance(tuple(found), benefit, cost, {op: value * scale for op, value in ops.items()})


def nonoverlapping(chosen: frozenset[Candidate] | Sequence[Candidate]) -> bool:
    return not any(a.overlaps(b) for a, b in combinations(chosen, 2))


def usable(chosen: frozenset[Candidate] | Sequence[Candidate]) -> bool:
    """No two caches overlap or skip where the other is maintained (section 6's rule)."""
    return not any(conflicts(a, b) for a, b in combinations(chosen, 2))


def brute_force(instance: Instance) -> float:
    """The best net benefit over every subset of candidates one plan can use together."""
    best = 0.0
    for size in range(1, len(instance.candidates) + 1):
        for subset in combinations(instance.candidates, size):
            if usable(subset):
                best = max(best, net_benefit(instance, subset))
    return best


def harmonic(n: int) -> float:
    return sum(1 / k for k in range(1, n + 1))


# -- properties ----------------------------------------------------------------------------


@SETTINGS
@given(instances(unshared=True))
def test_tree_is_optimal_without_shared_caches(instance: Instance) -> None:
    chosen = select(instance, "tree")
    assert nonoverlapping(chosen)
    assert net_benefit(instance, chosen) == pytest.approx(brute_force(instance), abs=TOL)
    assert select(instance) == chosen  # auto takes the tree when nothing is shared


@SETTINGS
@given(instances())
def test_exhaustive_and_auto_are_optimal(instance: Instance) -> None:
    best = brute_force(instance)
    exhaustive = select(instance, "exhaustive")
    assert nonoverlapping(exhaustive)
    assert net_benefit(instance, exhaustive) == pytest.approx(best, abs=TOL)
    auto = select(instance, "auto", exhaustive_limit=MAX_CANDIDATES)
    assert net_benefit(instance, auto) == pytest.approx(best, abs=TOL)
    # Never a cache that could be dropped for free: every chosen group pays for itself.
    for group in {c.group for c in exhaustive}:
        mine = [c for c in exhaustive if c.group == group]
        assert sum(instance.benefit[c] for c in mine) - instance.cost[group] > -TOL


@SETTINGS
@given(instances(physical=True))
def test_greedy_is_within_the_harmonic_bound(instance: Instance) -> None:
    greedy = select(instance, "greedy")
    assert nonoverlapping(greedy) and greedy <= set(instance.candidates)
    optimum = sum(instance.op_cost.values()) - brute_force(instance)
    assert total_cost(instance, greedy) <= harmonic(len(instance.op_cost)) * optimum + TOL


@SETTINGS
@given(instances(), st.sampled_from(SELECTION_METHODS))
def test_every_method_returns_usable_caches_deterministically(instance: Instance, method: str) -> None:
    chosen = select(instance, method)  # type: ignore[arg-type]
    assert chosen <= set(instance.candidates)
    assert nonoverlapping(chosen)
    assert select(instance, method) == chosen  # type: ignore[arg-type]
    # Appendix B's total cost is the other face of the net benefit.
    assert total_cost(instance, chosen) == pytest.approx(
        sum(instance.op_cost.values()) - net_benefit(instance, chosen), abs=1e-6
    )
    if method != "greedy":  # exact or Theorem 4.1: never worse than using no cache
        assert net_benefit(instance, chosen) >= -TOL


@SETTINGS
@given(instances())
def test_auto_routes_by_sharing(instance: Instance) -> None:
    if not shared_groups(instance):
        assert select(instance, "auto", exhaustive_limit=0) == select(instance, "tree")
    else:
        assert select(instance, "auto", exhaustive_limit=0) == select(instance, "greedy")
        assert select(instance, "auto") == select(instance, "exhaustive")


@SETTINGS
@given(instances(global_=True))
def test_subsets_is_optimal_with_global_caches(instance: Instance) -> None:
    """Section 6: exhaustive search over the 2^m combinations, conflicts respected; auto
    takes it whenever a globally-consistent cache is a candidate, and the forest-based
    methods refuse such an instance."""
    chosen = select(instance, "subsets")
    assert usable(chosen) and chosen <= set(instance.candidates)
    assert net_benefit(instance, chosen) == pytest.approx(brute_force(instance), abs=TOL)
    if instance.global_:
        assert select(instance) == chosen
        for method in ("tree", "exhaustive", "greedy"):
            with pytest.raises(ValueError, match="subsets"):
                select(instance, method)  # type: ignore[arg-type]


# -- the paper's 6-way star ----------------------------------------------------------------

FIGURE_5A = ((1, 2, 3, 4, 5), (0, 2, 3, 4, 5), (0, 1, 3, 4, 5), (0, 1, 2, 4, 5), (0, 1, 2, 3, 5), (0, 1, 2, 3, 4))
ALIASES = tuple(f"r{i}" for i in range(6))


def figure_5a() -> tuple[Candidate, ...]:
    graph = star(6)
    return candidates(graph, check_orders(graph, FIGURE_5A))


def uniform_instance(
    chosen: Sequence[Candidate],
    benefit: dict[str, float],
    cost: dict[int, float],
    op_cost: float = 5.0,
) -> Instance:
    """Benefits by cache name (default 0) and costs by segment length (default 5)."""
    return Instance(
        tuple(chosen),
        {c: benefit.get(c.name(ALIASES), 0.0) for c in chosen},
        {c.group: cost.get(c.length, 5.0) for c in chosen},
        {(i, j): op_cost for i in range(6) for j in range(5)},
    )


def test_figure_5a_star_has_ten_candidates_in_four_groups() -> None:
    found = figure_5a()
    assert len(found) == 10
    assert sorted(len(c.segment) for c in found) == [2, 2, 2, 2, 3, 3, 3, 4, 4, 5]
    instance = uniform_instance(found, {}, {})
    assert len(shared_groups(instance)) == 3  # {r0 r1} x4, {r0 r1 r2} x3, {r0..r3} x2
    for method in SELECTION_METHODS:
        assert select(instance, method) == frozenset()  # nothing is worth its cost


def test_a_shared_group_worth_only_together_is_chosen() -> None:
    found = figure_5a()
    pairs = [c for c in found if c.length == 2]
    # Each r0-r1 cache saves 3 but the store costs 10: alone -7, the four together +2.
    instance = uniform_instance(found, {c.name(ALIASES): 3.0 for c in pairs}, {2: 10.0})
    assert all(instance.benefit[c] - instance.cost[c.group] < 0 for c in pairs)
    assert select(instance, "tree") == frozenset()
    for method in ("exhaustive", "auto", "greedy"):
        chosen = select(instance, method)  # type: ignore[arg-type]
        assert chosen == frozenset(pairs), method
        assert net_benefit(instance, chosen) == pytest.approx(2.0)


def test_a_nested_child_beats_its_parent() -> None:
    found = [c for c in figure_5a() if c.pipeline == 5]
    child, parent = found[0], found[1]
    assert parent.covers(child) and child.length == 2 and parent.length == 3
    # child: 10 - 2 = 8; parent: 12 - 6 = 6; the larger ones are worth nothing.
    names = {child.name(ALIASES): 10.0, parent.name(ALIASES): 12.0}
    instance = uniform_instance(found, names, {2: 2.0, 3: 6.0})
    assert not shared_groups(instance)
    for method in SELECTION_METHODS:
        assert select(instance, method) == frozenset({child}), method  # type: ignore[arg-type]
    # And the other way round: the parent wins once it saves enough more (15 - 6 = 9 > 8).
    names[parent.name(ALIASES)] = 15.0
    instance = uniform_instance(found, names, {2: 2.0, 3: 6.0})
    for method in ("tree", "exhaustive", "auto"):
        assert select(instance, method) == frozenset({parent}), method  # type: ignore[arg-type]
    # The greedy is only an approximation: the child's cost-rate (2 + 0) / 2 beats the
    # parent's (6 + 0) / 3, it takes the child first and the parent no longer pays.
    assert select(instance, "greedy") == frozenset({child})


def test_greedy_takes_a_lone_cache_only_when_it_pays() -> None:
    lone = figure_5a()[:1]
    name = lone[0].name(ALIASES)
    assert select(uniform_instance(lone, {name: 6.0}, {2: 5.0}), "greedy") == frozenset(lone)
    assert select(uniform_instance(lone, {name: 4.0}, {2: 5.0}), "greedy") == frozenset()


def test_greedy_pays_a_group_once() -> None:
    # The r0-r1 group taken for one pipeline's caches is free for the others afterwards.
    found = [c for c in figure_5a() if c.length == 2]
    benefits = {c.name(ALIASES): 1.0 for c in found}
    benefits[found[0].name(ALIASES)] = 9.0
    instance = uniform_instance(found, benefits, {2: 8.0})
    best = brute_force(instance)
    assert best == pytest.approx(9.0 + 3 * 1.0 - 8.0)
    assert net_benefit(instance, select(instance, "greedy")) == pytest.approx(best)


# -- refusals ------------------------------------------------------------------------------


def test_refuses_inconsistent_instances() -> None:
    found = figure_5a()
    good = uniform_instance(found, {}, {})
    with pytest.raises(ValueError, match="benefit"):
        Instance(found, {}, good.cost, good.op_cost)
    with pytest.raises(ValueError, match="cost"):
        Instance(found, good.benefit, {}, good.op_cost)
    with pytest.raises(ValueError, match=">= 0"):
        Instance(found, good.benefit, {g: -1.0 for g in good.cost}, good.op_cost)
    with pytest.raises(ValueError, match="op_cost"):
        Instance(found, good.benefit, good.cost, {})
    with pytest.raises(ValueError, match="twice"):
        Instance(found + found[:1], good.benefit, good.cost, good.op_cost)
    left, right = Candidate(0, 0, (1, 2), (0,)), Candidate(0, 1, (2, 3), (0,))
    with pytest.raises(ValueError, match="prefix invariant"):
        Instance((left, right), {left: 1.0, right: 1.0}, {left.group: 0.0, right.group: 0.0}, good.op_cost)
    with pytest.raises(ValueError, match="method"):
        select(good, "random")  # type: ignore[arg-type]
    nested = [c for c in found if c.pipeline == 5][:2]
    with pytest.raises(ValueError, match="overlap"):
        net_benefit(good, nested)
    assert math.isclose(total_cost(good, ()), sum(good.op_cost.values()))
