"""MJoin pipeline orders and the candidate caches they allow (Babu et al. section 3.2).

Definition 3.2 (prefix invariant): a cache over the segment R_ij..R_ik of pipeline i is a
candidate iff, for every input R_il of the segment, the first k - j operators of R_il's
own pipeline join the segment's other inputs. The tests re-check the definition and the
key (join attributes between the inputs before the segment and the segment) on their own
and compare with ``candidates`` by brute force over every segment of every pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.views.declaration import JoinGraph, ViewError, ViewInput, check, declared
from schedulers.views.pipelines import (
    Candidate,
    Orders,
    candidates,
    check_orders,
    conflicts,
    default_orders,
    global_candidates,
)
from testing.depth import examples
from tests.schedulers.views.strategies import valid_orders

SCHEMAS = {
    "R": {"a": "long"},
    "S": {"a": "long", "b": "long"},
    "T": {"b": "long"},
    "wide": {c: "long" for c in "abcd"},
}
SETTINGS = settings(derandomize=True, deadline=None, max_examples=examples(60))


def chain() -> JoinGraph:
    """R(A) - S(A, B) - T(B): inputs r=0, s=1, t=2; attribute A=0, B=1."""
    spec = declared(
        "v",
        [ViewInput("r", "R"), ViewInput("s", "S"), ViewInput("t", "T")],
        ["r.a = s.a", "s.b = t.b"],
        ["r.a"],
    )
    return check(spec, SCHEMAS)


CHAIN_ALIASES = ("r", "s", "t")


def wide_graph(n: int, predicates: Sequence[str]) -> JoinGraph:
    spec = declared("v", [ViewInput(f"r{i + 1}", "wide") for i in range(n)], predicates, ["r1.a"])
    return check(spec, SCHEMAS)


def star(n: int) -> JoinGraph:
    return wide_graph(n, [f"r{i}.a = r{i + 1}.a" for i in range(1, n)])


# -- strategies ----------------------------------------------------------------------------


@st.composite
def graphs(draw: st.DrawFn) -> JoinGraph:
    """Stars, chains and trees mixing both, 2 to 6 inputs (all accepted by ``check``)."""
    n = draw(st.integers(2, 6))
    shape = draw(st.sampled_from(["star", "chain", "tree"]))
    used: list[set[str]] = [set() for _ in range(n)]
    predicates = []
    for i in range(1, n):
        if shape == "star":
            parent, column = draw(st.integers(0, i - 1)), "a"
        elif shape == "chain":
            parent = i - 1
            column = draw(st.sampled_from([c for c in "abcd" if c not in used[parent]]))
        else:
            parent, column = draw(st.integers(0, i - 1)), draw(st.sampled_from("abcd"))
        predicates.append(f"r{parent + 1}.{column} = r{i + 1}.{column}")
        used[parent].add(column)
        used[i].add(column)
    return wide_graph(n, predicates)


# -- independent oracles -------------------------------------------------------------------


def attributes_of(graph: JoinGraph, i: int) -> set[int]:
    return {a for a, members in enumerate(graph.attributes) if any(m == i for m, _ in members)}


def no_cross_product(graph: JoinGraph, i: int, order: Sequence[int]) -> bool:
    joined = attributes_of(graph, i)
    for j in order:
        if not attributes_of(graph, j) & joined:
            return False
        joined |= attributes_of(graph, j)
    return True


def prefix_invariant(orders: Orders, segment: Sequence[int]) -> bool:
    """Definition 3.2: for each R_il of the segment, its first k - j operators join inputs
    of {R_ij..R_ik} - R_il."""
    width = len(segment) - 1
    members = set(segment)
    return all(set(orders[m][:width]) <= members - {m} and len(orders[m][:width]) == width for m in segment)


def key_of(graph: JoinGraph, before: set[int], segment: Sequence[int]) -> tuple[int, ...]:
    left = set().union(*(attributes_of(graph, i) for i in before))
    right = set().union(*(attributes_of(graph, i) for i in segment))
    return tuple(sorted(left & right))


def brute_force(graph: JoinGraph, orders: Orders) -> set[tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
    found = set()
    for i, order in enumerate(orders):
        for start in range(len(order)):
            for stop in range(start + 2, len(order) + 1):
                segment = order[start:stop]
                key = key_of(graph, {i, *order[:start]}, segment)
                if prefix_invariant(orders, segment) and key:
                    found.add((i, start, tuple(segment), key))
    return found


def as_tuple(candidate: Candidate) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    return candidate.pipeline, candidate.start, candidate.segment, candidate.key


# -- default_orders ------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_default_orders_are_permutations_without_cross_products(data: st.DataObject) -> None:
    graph = data.draw(graphs())
    ranked = data.draw(st.booleans())
    rank = data.draw(st.permutations(range(graph.n))) if ranked else None
    orders = default_orders(graph, (lambda i, j: rank[j]) if rank else None)
    assert len(orders) == graph.n
    for i, order in enumerate(orders):
        assert sorted(order) == [j for j in range(graph.n) if j != i]
        assert no_cross_product(graph, i, order)
    assert check_orders(graph, orders) == orders


def test_default_orders_chain() -> None:
    assert default_orders(chain()) == ((1, 2), (0, 2), (1, 0))


def test_default_orders_follow_rank_among_connected_inputs() -> None:
    graph = chain()
    # r prefers t, but t is not connected to r alone: s must come first.
    assert default_orders(graph, lambda i, j: {0: 2.0, 1: 1.0, 2: 0.0}[j]) == ((1, 2), (2, 0), (1, 0))


def test_default_orders_star_by_declaration_order() -> None:
    assert default_orders(star(4)) == ((1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2))


# -- check_orders --------------------------------------------------------------------------


def test_check_orders_accepts_and_normalises() -> None:
    assert check_orders(chain(), [[1, 2], [2, 0], [1, 0]]) == ((1, 2), (2, 0), (1, 0))


@pytest.mark.parametrize(
    "orders, fragment",
    [
        ([[1, 2], [0, 2]], "one order per input (3), got 2"),
        ([[1, 2], [0, 2], [1, 0], [0, 1]], "one order per input (3), got 4"),
        ([[1, 2], [0, 2], [1]], "orders[2]: must list every other input once"),
        ([[1, 1], [0, 2], [1, 0]], "orders[0]: must list every other input once"),
        ([[1, 2], [1, 2], [1, 0]], "orders[1]: must list every other input once"),
        ([[1, 2], [0, 2], [1, 0, 2]], "orders[2]: must list every other input once"),
        ([[2, 1], [0, 2], [1, 0]], "orders[0]: input 2 joins nothing before it (a cross product)"),
        ([[1, 2], [0, 2], [0, 1]], "orders[2]: input 0 joins nothing before it (a cross product)"),
    ],
)
def test_check_orders_refuses(orders: list[list[int]], fragment: str) -> None:
    with pytest.raises(ViewError) as caught:
        check_orders(chain(), orders)
    assert fragment in str(caught.value)


@SETTINGS
@given(st.data())
def test_check_orders_agrees_with_oracle(data: st.DataObject) -> None:
    graph = data.draw(graphs())
    orders = [tuple(data.draw(st.permutations([j for j in range(graph.n) if j != i]))) for i in range(graph.n)]
    valid = all(no_cross_product(graph, i, order) for i, order in enumerate(orders))
    if valid:
        assert check_orders(graph, orders) == tuple(orders)
    else:
        with pytest.raises(ViewError, match="cross product"):
            check_orders(graph, orders)


# -- candidates: the paper's examples ------------------------------------------------------


def test_chain_candidate_is_t_over_s_r() -> None:
    """Orders r:(s,t), s:(r,t), t:(s,r). In t's pipeline [s r]: s joins r first and r joins
    s first, so the prefix invariant holds (Example 3.4's R_2, R_3 segment). In r's pipeline
    [s t] fails (s joins r first, not t); in s's [r t] fails (r joins s first)."""
    graph = chain()
    orders = check_orders(graph, [(1, 2), (0, 2), (1, 0)])
    found = candidates(graph, orders)
    assert [c.name(CHAIN_ALIASES) for c in found] == ["t:[s r]"]
    (cache,) = found
    assert cache == Candidate(pipeline=2, start=0, segment=(1, 0), key=(1,))  # keyed on B
    assert graph.attributes[cache.key[0]] == ((1, "b"), (2, "b"))
    assert cache.end == 1 and cache.length == 2 and cache.members == {0, 1}
    assert cache.update_points == {0: 1, 1: 1}


def test_chain_candidate_moves_to_r_when_s_joins_t_first() -> None:
    """Orders r:(s,t), s:(t,r), t:(s,r): now s joins t first and t joins s first, so r's
    [s t] holds (keyed on A, between r and the segment); t's [s r] no longer does (s's
    first join is t, not r), and s's [t r] neither (t's first join is s, not r)."""
    graph = chain()
    orders = check_orders(graph, [(1, 2), (2, 0), (1, 0)])
    found = candidates(graph, orders)
    assert [c.name(CHAIN_ALIASES) for c in found] == ["r:[s t]"]
    assert found[0] == Candidate(pipeline=0, start=0, segment=(1, 2), key=(0,))


def test_two_way_join_has_no_candidates() -> None:
    graph = wide_graph(2, ["r1.a = r2.a"])
    assert candidates(graph, default_orders(graph)) == ()


def test_six_way_star_shared_group() -> None:
    graph = star(6)
    orders = check_orders(
        graph,
        [(1, 2, 3, 4, 5), (0, 2, 3, 4, 5), (0, 1, 3, 4, 5), (0, 1, 2, 4, 5), (0, 1, 2, 3, 5), (0, 1, 2, 3, 4)],
    )
    found = candidates(graph, orders)
    assert {as_tuple(c) for c in found} == brute_force(graph, orders)
    pair = [c for c in found if c.members == {0, 1}]
    assert sorted(c.pipeline for c in pair) == [2, 3, 4, 5]
    assert all(c.start == 0 and c.key == (0,) for c in pair)
    assert len({c.group for c in pair}) == 1
    assert pair[0].group == (frozenset({0, 1}), (0,))
    # No other candidate shares that group; every candidate's members are a prefix set
    # {r1..rm} of the global preference.
    assert all(c.group != pair[0].group for c in found if c not in pair)
    assert {c.members for c in found} == {frozenset(range(m)) for m in range(2, 6)}
    names = {c.name([f"r{i}" for i in range(1, 7)]) for c in found}
    assert {"r3:[r1 r2]", "r4:[r1 r2]", "r4:[r1 r2 r3]", "r6:[r1 r2 r3 r4 r5]"} <= names


def test_segments_of_one_operator_are_not_candidates() -> None:
    graph = star(4)
    assert all(c.length >= 2 for c in candidates(graph, default_orders(graph)))


# -- candidates: properties ----------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_candidates_equal_brute_force(data: st.DataObject) -> None:
    graph = data.draw(graphs())
    orders = data.draw(valid_orders(graph))
    found = candidates(graph, orders)
    assert len(found) == len(set(found))
    assert {as_tuple(c) for c in found} == brute_force(graph, orders)


@SETTINGS
@given(st.data())
def test_every_candidate_satisfies_definition_3_2(data: st.DataObject) -> None:
    graph = data.draw(graphs())
    orders = data.draw(valid_orders(graph))
    for cache in candidates(graph, orders):
        order = orders[cache.pipeline]
        assert order[cache.start : cache.end + 1] == cache.segment
        assert cache.length >= 2
        assert cache.key
        assert cache.key == key_of(graph, {cache.pipeline, *order[: cache.start]}, cache.segment)
        assert prefix_invariant(orders, cache.segment)
        assert cache.pipeline not in cache.members
        assert cache.update_points == {m: cache.length - 1 for m in cache.segment}


@SETTINGS
@given(st.data())
def test_overlapping_candidates_nest(data: st.DataObject) -> None:
    """Section 4.4: with the prefix invariant, overlapping caches of one pipeline nest."""
    graph = data.draw(graphs())
    found = candidates(graph, data.draw(valid_orders(graph)))
    for a in found:
        for b in found:
            if a.overlaps(b):
                assert a.covers(b) or b.covers(a)


@settings(max_examples=examples(60), derandomize=True, deadline=None)
@given(data=st.data())
def test_no_candidate_spans_another_candidates_maintenance_point(data: st.DataObject) -> None:
    """Candidate C2 is maintained in each of its inputs' pipelines after |C2| - 1 operators.
    No candidate C1 of such a pipeline starts before that point and ends at or after it: by
    the prefix invariant their inputs' own pipelines would need two incompatible prefixes.
    The executor relies on it (a lookup there would skip tuples C2 must see)."""
    graph = data.draw(graphs())
    found = candidates(graph, data.draw(valid_orders(graph)))
    for one in found:
        for other in found:
            if one.pipeline in other.members:
                assert not one.start < other.length - 1 <= one.end, (one, other)


# -- section 6: globally-consistent candidates ----------------------------------------------


def test_figure_12_global_cache_in_rs_order() -> None:
    """Fig. 12's switch: with s joining r first (the order under which t:[s r] is a prefix
    candidate), the S-T cache in r's pipeline fails Definition 3.2 but is a section 6 cache:
    X = s join t is all but one relation. In s's pipeline (r, t) the join with r comes first
    and is watched; in t's pipeline (s, r) s comes first, so the point follows it."""
    graph = chain()
    orders = check_orders(graph, [(1, 2), (0, 2), (1, 0)])
    prefix = candidates(graph, orders)
    (found,) = global_candidates(graph, orders, prefix)
    assert found.name(CHAIN_ALIASES) == "r:[s t]*"
    assert found.scope == "global" and found.key == (0,)  # keyed on A
    assert found.update_points == {1: 2, 2: 1}
    assert found.watched == {1: (0, 2)}  # t's pipeline needs no watch
    assert conflicts(found, prefix[0])  # r's lookup would skip t:[s r]'s point in r's pipeline
    assert global_candidates(graph, orders, prefix, limit=1) == ()  # p >= m: none


def upkeep_exact(graph: JoinGraph, orders: Orders, segment: Sequence[int]) -> bool:
    """In each segment input's pipeline, a segment input joins on no attribute that only
    inputs outside the segment bind so far."""
    for m in segment:
        bound_inside, bound = attributes_of(graph, m), attributes_of(graph, m)
        for j in orders[m]:
            if j in segment and (attributes_of(graph, j) & bound) - bound_inside:
                return False
            bound |= attributes_of(graph, j)
            if j in segment:
                bound_inside |= attributes_of(graph, j)
    return True


def global_oracle(graph: JoinGraph, orders: Orders, prefix: Sequence[Candidate], limit: int) -> list[tuple]:
    """Section 6's list, rebuilt: X all but one relation, then all but two, ..., in pipeline
    order; connected, keyed, not already a prefix candidate; m - p of them at most."""
    taken = {(c.pipeline, c.start, c.segment) for c in prefix}
    out = []
    for size in range(graph.n - 1, 1, -1):
        for i, order in enumerate(orders):
            for start in range(len(order) - size + 1):
                segment = tuple(order[start : start + size])
                key = key_of(graph, {i, *order[:start]}, segment)
                inner = set(segment)
                reached, todo = {segment[0]}, [segment[0]]
                while todo:
                    for j in graph.neighbours(todo.pop()) & inner - reached:
                        reached.add(j)
                        todo.append(j)
                if (i, start, segment) in taken or not key or reached != inner:
                    continue
                if not upkeep_exact(graph, orders, segment):
                    continue
                out.append((i, start, segment, key))
    return out[: max(0, limit - len(prefix))]


@SETTINGS
@given(st.data())
def test_global_candidates_follow_section_6(data: st.DataObject) -> None:
    graph = data.draw(graphs())
    orders = data.draw(valid_orders(graph))
    limit = data.draw(st.integers(0, 10))
    prefix = candidates(graph, orders)
    found = global_candidates(graph, orders, prefix, limit)
    assert [as_tuple(c) for c in found] == global_oracle(graph, orders, prefix, limit)
    for cache in found:
        assert cache.scope == "global" and not prefix_invariant(orders, cache.segment)
        for m, q, w in cache.points:
            own = orders[m]
            # The point follows the segment's other inputs; the watch starts at the first
            # input outside the segment joined before it.
            assert set(cache.segment) - {m} <= set(own[:q]) and own[q - 1] in cache.segment
            outside = [p for p in range(q) if own[p] not in cache.segment]
            assert w == (outside[0] if outside else q)


@settings(max_examples=examples(60), derandomize=True, deadline=None)
@given(data=st.data())
def test_prefix_candidates_conflict_only_by_overlapping(data: st.DataObject) -> None:
    """``conflicts`` adds nothing between prefix-invariant candidates: section 4's forest
    stays as it was, and only section 6's caches bring the other conflicts."""
    graph = data.draw(graphs())
    found = candidates(graph, data.draw(valid_orders(graph)))
    for one in found:
        for other in found:
            if one is not other:
                assert conflicts(one, other) == one.overlaps(other)
