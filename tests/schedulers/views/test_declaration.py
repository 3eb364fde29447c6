"""Declaring a join view: what ``check`` accepts (chains, stars, trees of them, self-joins,
windows over append inputs) and what it refuses with a message naming the problem.

Babu et al. section 3.1: an n-way equi-join; columns equated directly or through other
predicates are one join attribute. Only alpha-acyclic shapes are maintainable.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.views.declaration import (
    MAX_INPUTS,
    ColumnRef,
    JoinGraph,
    OutputColumn,
    ViewError,
    ViewInput,
    Window,
    check,
    declared,
    parse_output,
    parse_predicate,
)
from testing.depth import examples

SCHEMAS: dict[str, dict[str, str]] = {
    "R": {"a": "long", "x": "string"},
    "S": {"a": "long", "b": "long"},
    "T": {"b": "long", "c": "long"},
    "U": {"b": "long", "c": "long"},
    "names": {"a": "string"},
    "wide": {"a": "long", "b": "long", "c": "long", "d": "long"},
}


def view(
    inputs: Sequence[ViewInput],
    predicates: Sequence[str],
    outputs: Sequence[str] = (),
    name: str = "v",
) -> JoinGraph:
    if not outputs:  # one column of a registered input: the checks under test come first
        known = [item for item in inputs if item.table in SCHEMAS] or list(inputs)
        outputs = [f"{known[0].alias}.{next(iter(SCHEMAS.get(known[0].table, {'a': ''})))}"]
    return check(declared(name, inputs, predicates, outputs), SCHEMAS)


def refused(fragment: str, inputs: Sequence[ViewInput], predicates: Sequence[str], **kwargs: object) -> str:
    with pytest.raises(ViewError) as caught:
        view(inputs, predicates, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert fragment in message, message
    return message


def chain_inputs() -> list[ViewInput]:
    return [ViewInput("r", "R"), ViewInput("s", "S"), ViewInput("t", "T")]


CHAIN = ["r.a = s.a", "s.b = t.b"]


def wide(n: int) -> list[ViewInput]:
    return [ViewInput(f"r{i}", "wide") for i in range(1, n + 1)]


def connected(graph: JoinGraph) -> bool:
    reached, frontier = {0}, [0]
    while frontier:
        for j in graph.neighbours(frontier.pop()):
            if j not in reached:
                reached.add(j)
                frontier.append(j)
    return len(reached) == graph.n


# -- accepted ------------------------------------------------------------------------------


def test_three_way_chain_graph() -> None:
    graph = view(chain_inputs(), CHAIN, ["r.a", "s.b", "t.c"])
    assert graph.n == 3
    # Attribute A equates r.a and s.a; attribute B equates s.b and t.b.
    assert graph.attributes == (((0, "a"), (1, "a")), ((1, "b"), (2, "b")))
    assert [dict(m) for m in graph.of_input] == [{0: "a"}, {0: "a", 1: "b"}, {1: "b"}]
    assert graph.neighbours(0) == {1}
    assert graph.neighbours(1) == {0, 2}
    assert graph.neighbours(2) == {1}
    assert graph.shared({0}, {1, 2}) == (0,)
    assert graph.shared({2}, {0, 1}) == (1,)
    assert graph.shared({0, 1}, {2}) == (1,)
    assert graph.shared({0}, {2}) == ()


def test_predicate_sides_may_be_written_either_way() -> None:
    forward = view(chain_inputs(), CHAIN)
    backward = view(chain_inputs(), ["t.b = s.b", "s.a = r.a"])
    assert forward == backward


@pytest.mark.parametrize(
    "predicates",
    [
        [f"r{i}.a = r{i + 1}.a" for i in range(1, 6)],  # pairwise
        [f"r1.a = r{i}.a" for i in range(2, 7)],  # hub
        ["r3.a = r5.a", "r1.a = r2.a", "r6.a = r2.a", "r4.a = r5.a", "r2.a = r5.a"],  # scrambled
    ],
    ids=["pairwise", "hub", "scrambled"],
)
def test_six_way_star_is_one_attribute(predicates: list[str]) -> None:
    graph = view(wide(6), predicates)
    assert graph.attributes == (tuple((i, "a") for i in range(6)),)
    assert all(dict(m) == {0: "a"} for m in graph.of_input)
    assert all(graph.neighbours(i) == set(range(6)) - {i} for i in range(6))


def test_redundant_predicate_in_star_is_fine() -> None:
    graph = view(wide(3), ["r1.a = r2.a", "r2.a = r3.a", "r1.a = r3.a", "r1.a = r2.a"])
    assert graph.attributes == (((0, "a"), (1, "a"), (2, "a")),)


def test_self_join_with_two_aliases() -> None:
    inputs = [ViewInput("boss", "S"), ViewInput("report", "S")]
    graph = view(inputs, ["boss.a = report.b"], ["boss.a", "report.a AS report_a"])
    assert graph.attributes == (((0, "a"), (1, "b")),)
    assert [dict(m) for m in graph.of_input] == [{0: "a"}, {0: "b"}]


@pytest.mark.parametrize("window", [Window("rows", 100), Window("rows", 1.0), Window("seconds", 2.5)])
def test_window_over_append_input(window: Window) -> None:
    inputs = [ViewInput("r", "R", window=window), ViewInput("s", "S", kind="latest"), ViewInput("t", "T")]
    assert view(inputs, CHAIN).n == 3


def test_outputs_with_as() -> None:
    spec = declared("orders_v", chain_inputs(), CHAIN, ["r.a", "s.a AS s_a", "t.c as t_c", "t.b  AS  tb"])
    assert spec.outputs == (
        OutputColumn(ColumnRef("r", "a"), "a"),
        OutputColumn(ColumnRef("s", "a"), "s_a"),
        OutputColumn(ColumnRef("t", "c"), "t_c"),
        OutputColumn(ColumnRef("t", "b"), "tb"),
    )
    check(spec, SCHEMAS)


def test_parse_predicate_accepts_spacing() -> None:
    assert parse_predicate("  r.a=s.b ") == (ColumnRef("r", "a"), ColumnRef("s", "b"))
    assert str(ColumnRef("r", "a")) == "r.a"


def test_tree_of_star_and_chain() -> None:
    # r1, r2, r3 star on a; r3 - r4 on b; r4 - r5 on c; r4 - r6 on c (star on c).
    predicates = ["r1.a = r2.a", "r2.a = r3.a", "r3.b = r4.b", "r4.c = r5.c", "r6.c = r4.c"]
    graph = view(wide(6), predicates)
    assert graph.attributes == (
        ((0, "a"), (1, "a"), (2, "a")),
        ((2, "b"), (3, "b")),
        ((3, "c"), (4, "c"), (5, "c")),
    )


def test_two_inputs_joined_on_two_attributes() -> None:
    # alpha-acyclic: one edge covers the other.
    graph = view(wide(2), ["r1.a = r2.a", "r1.b = r2.b"])
    assert len(graph.attributes) == 2
    assert graph.shared({0}, {1}) == (0, 1)


# -- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, MAX_INPUTS + 1])
def test_input_count_bounds(n: int) -> None:
    predicates = [f"r{i}.a = r{i + 1}.a" for i in range(1, n)] or ["r1.a = r1.b"]
    message = refused(f"got {n}", wide(n), predicates)
    assert "2 to 6 inputs" in message


def test_no_inputs() -> None:
    with pytest.raises(ViewError, match="got 0"):
        check(declared("v", [], [], []), SCHEMAS)


def test_duplicate_alias() -> None:
    message = refused("used twice", [ViewInput("S", "S"), ViewInput("S", "S")], ["S.a = S.b"])
    assert "distinct alias" in message


def test_bad_alias() -> None:
    inputs = [ViewInput("s", "S"), ViewInput("r-1", "R")]
    refused("alias 'r-1' must be letters", inputs, ["s.a = s.b"], outputs=["s.a"])


def test_unknown_table() -> None:
    message = refused("'orders' is not registered", [ViewInput("r", "orders"), ViewInput("s", "S")], ["r.a = s.a"])
    assert "view over a view" in message


def test_unknown_alias_in_predicate() -> None:
    message = refused("q.a names no input", chain_inputs(), ["r.a = q.a", "s.b = t.b"])
    assert "inputs: r, s, t" in message


def test_unknown_column_lists_columns() -> None:
    message = refused("has no column 'z'", chain_inputs(), ["r.a = s.a", "s.z = t.b"])
    assert "columns: a, b" in message


@pytest.mark.parametrize(
    "text",
    ["r.a < s.a", "r.a != s.a", "r.a = s.a OR r.b = s.b", "r.a <> s.a", "r.a >= s.a", "r.a like s.a"],
)
def test_non_equi_predicates(text: str) -> None:
    with pytest.raises(ViewError, match="is not an equality"):
        parse_predicate(text)


@pytest.mark.parametrize("text", ["r.a", "r.a = 3", "r = s", "r.a == s.a", "r.a = s.a AND r.b = s.b", ""])
def test_garbage_predicates(text: str) -> None:
    with pytest.raises(ViewError, match="must read alias.column = alias.column"):
        parse_predicate(text)


def test_declared_parses_predicates() -> None:
    with pytest.raises(ViewError, match="is not an equality"):
        declared("v", chain_inputs(), ["r.a > s.a"], ["r.a"])


def test_both_sides_same_input() -> None:
    refused("that is a filter", chain_inputs(), ["r.a = s.a", "s.a = s.b", "s.b = t.b"])


def test_type_mismatch() -> None:
    inputs = [ViewInput("r", "R"), ViewInput("n", "names")]
    message = refused("join columns must have the same type", inputs, ["r.a = n.a"])
    assert "r.a is long but n.a is string" in message


def test_input_joined_to_nothing() -> None:
    refused("input(s) t join with nothing", chain_inputs(), ["r.a = s.a"])


def test_no_predicates() -> None:
    refused("at least one equality", chain_inputs(), [])


def test_disconnected_components() -> None:
    inputs = chain_inputs() + [ViewInput("u", "U")]
    message = refused("inputs t, u are not joined to r", inputs, ["r.a = s.a", "t.b = u.b"])
    assert "cross product" in message


def test_cycle_through_different_attributes() -> None:
    inputs = [ViewInput(name, "wide") for name in "rst"]
    refused("form a cycle", inputs, ["r.a = s.a", "s.b = t.b", "t.c = r.c"])


def test_four_cycle_with_a_pendant() -> None:
    predicates = ["r1.a = r2.a", "r2.b = r3.b", "r3.c = r4.c", "r4.d = r1.d", "r4.a = r5.a"]
    message = refused("form a cycle", wide(5), predicates)
    # The pendant input r5 is reduced away; the cycle's inputs remain.
    assert "r1, r2, r3, r4 form" in message


def test_columns_of_one_input_equated_through_others() -> None:
    inputs = [ViewInput("r", "wide"), ViewInput("s", "wide")]
    message = refused("end up equated to each other", inputs, ["r.a = s.a", "s.a = r.b"])
    assert "r.a and r.b" in message


def test_window_on_latest_input() -> None:
    inputs = [ViewInput("r", "R", kind="latest", window=Window("rows", 10)), ViewInput("s", "S")]
    refused("is a latest table", inputs, ["r.a = s.a"])


@pytest.mark.parametrize("size", [0, -1, -0.5, float("nan"), float("inf")])
def test_window_size_not_positive(size: float) -> None:
    inputs = [ViewInput("r", "R", window=Window("seconds", size)), ViewInput("s", "S")]
    refused("size must be a finite number > 0", inputs, ["r.a = s.a"])


def test_rows_window_fractional() -> None:
    inputs = [ViewInput("r", "R", window=Window("rows", 2.5)), ViewInput("s", "S")]
    refused("whole number of rows", inputs, ["r.a = s.a"])


def test_window_kind() -> None:
    inputs = [ViewInput("r", "R", window=Window("minutes", 2)), ViewInput("s", "S")]  # type: ignore[arg-type]
    refused("kind must be rows or seconds", inputs, ["r.a = s.a"])


def test_rows_window_infinite_is_a_view_error() -> None:
    inputs = [ViewInput("r", "R", window=Window("rows", float("inf"))), ViewInput("s", "S")]
    refused("inputs.r.window", inputs, ["r.a = s.a"])


def test_duplicate_output_names() -> None:
    refused("'a' appears twice", chain_inputs(), CHAIN, outputs=["r.a", "s.a"])


def test_duplicate_output_names_after_as() -> None:
    refused("'x' appears twice", chain_inputs(), CHAIN, outputs=["r.x", "s.a AS x"])


def test_output_column_missing() -> None:
    message = refused("has no column 'q'", chain_inputs(), CHAIN, outputs=["t.q"])
    assert message.startswith("outputs: t.q")


def test_output_alias_missing() -> None:
    refused("q.a names no input", chain_inputs(), CHAIN, outputs=["q.a"])


def test_no_outputs() -> None:
    with pytest.raises(ViewError, match="at least one column"):
        check(declared("v", chain_inputs(), CHAIN, []), SCHEMAS)


@pytest.mark.parametrize("text", ["r.a AS 1x", "r.a AS my-name"])
def test_output_bad_name(text: str) -> None:
    with pytest.raises(ViewError, match="is not a valid column name"):
        parse_output(text)


@pytest.mark.parametrize("text", ["a", "r.", ".a", "r.a.b"])
def test_output_not_a_column(text: str) -> None:
    with pytest.raises(ViewError, match="is not a column reference"):
        parse_output(text)


@pytest.mark.parametrize("name", ["1view", "my-view", "", "v w"])
def test_bad_view_name(name: str) -> None:
    with pytest.raises(ViewError, match="must be letters, digits and _"):
        view(chain_inputs(), CHAIN, name=name)


# -- properties ----------------------------------------------------------------------------

COLUMNS = ("a", "b", "c", "d")


@st.composite
def shaped(draw: st.DrawFn) -> list[str]:
    """Stars, chains and trees of them over ``wide``: each new input joins one earlier one
    on a column of the same name, so every attribute is a subtree whose members all use
    that column: never two columns of one input, always alpha-acyclic."""
    n = draw(st.integers(2, MAX_INPUTS))
    shape = draw(st.sampled_from(["star", "chain", "tree"]))
    used: list[set[str]] = [set() for _ in range(n)]
    predicates = []
    for i in range(1, n):
        if shape == "star":
            parent, column = draw(st.integers(0, i - 1)), "a"
        elif shape == "chain":  # a new attribute at every link
            parent = i - 1
            column = draw(st.sampled_from([c for c in COLUMNS if c not in used[parent]]))
        else:
            parent, column = draw(st.integers(0, i - 1)), draw(st.sampled_from(COLUMNS))
        left, right = f"r{parent + 1}.{column}", f"r{i + 1}.{column}"
        predicates.append(f"{left} = {right}" if draw(st.booleans()) else f"{right} = {left}")
        used[parent].add(column)
        used[i].add(column)
    return predicates


@settings(derandomize=True, deadline=None, max_examples=examples(60))
@given(shaped())
def test_accepted_shapes_cover_every_input_and_are_connected(predicates: list[str]) -> None:
    n = 1 + len(predicates)
    graph = view(wide(n), predicates)
    assert graph.n == n
    assert all(graph.of_input[i] for i in range(n))
    assert {i for members in graph.attributes for i, _ in members} == set(range(n))
    assert connected(graph)
    for a, members in enumerate(graph.attributes):
        inputs = [i for i, _ in members]
        assert len(inputs) >= 2 and len(set(inputs)) == len(inputs)
        for i, column in members:
            assert graph.of_input[i][a] == column


@st.composite
def random_predicates(draw: st.DrawFn) -> tuple[int, list[tuple[int, str, int, str]]]:
    """Any columns of any two inputs: mostly a spanning tree (each input to an earlier one,
    random columns on both sides) plus a few extra pairs, so that many are accepted and
    the rest exercise every refusal (filters, clashes, cycles, disconnection)."""
    n = draw(st.integers(2, MAX_INPUTS))
    column = st.sampled_from(COLUMNS)
    pairs = []
    for i in range(1, n):
        if draw(st.integers(0, 9)):  # now and then leave an input out
            pairs.append((draw(st.integers(0, i - 1)), draw(column), i, draw(column)))
    extra = st.tuples(st.integers(0, n - 1), column, st.integers(0, n - 1), column)
    pairs += draw(st.lists(extra, min_size=0 if pairs else 1, max_size=3))
    return n, draw(st.permutations(pairs))


def trees(n: int) -> list[list[tuple[int, int]]]:
    """Every labelled tree on n nodes (Pruefer sequences)."""
    if n == 2:
        return [[(0, 1)]]
    found = []
    for code in itertools.product(range(n), repeat=n - 2):
        degree = [1] * n
        for v in code:
            degree[v] += 1
        edges = []
        for v in code:
            leaf = min(u for u in range(n) if degree[u] == 1)
            edges.append((leaf, v))
            degree[leaf] -= 1
            degree[v] -= 1
        u, w = (u for u in range(n) if degree[u] == 1)
        edges.append((u, w))
        found.append(edges)
    return found


def has_join_tree(n: int, attributes: list[set[int]]) -> bool:
    """Alpha-acyclic iff some tree over the inputs keeps each attribute's inputs connected."""
    for edges in trees(n):
        if all(len(members) - 1 == sum(1 for u, w in edges if u in members and w in members) for members in attributes):
            return True
    return False


def expected_refusal(n: int, pairs: list[tuple[int, str, int, str]]) -> str | None:
    """An oracle written from the module's docstring, in ``check``'s order of checks."""
    if any(i == j for i, _, j, _ in pairs):
        return "that is a filter"
    classes: list[set[tuple[int, str]]] = []
    for i, x, j, y in pairs:
        merged = {(i, x), (j, y)}
        for members in [members for members in classes if members & merged]:
            merged |= members
            classes.remove(members)
        classes.append(merged)
    if any(len({i for i, _ in members}) < len(members) for members in classes):
        return "end up equated"
    joined = {i for members in classes for i, _ in members}
    if joined != set(range(n)):
        return "join with nothing"
    inputs = [{i for i, _ in members} for members in classes]
    reached = {0}
    while True:
        more = {i for members in inputs if members & reached for i in members} - reached
        if not more:
            break
        reached |= more
    if reached != set(range(n)):
        return "are not joined to r1"
    if not has_join_tree(n, inputs):
        return "form a cycle"
    return None


@settings(derandomize=True, deadline=None, max_examples=examples(60))
@given(random_predicates())
def test_random_predicates_against_oracle(case: tuple[int, list[tuple[int, str, int, str]]]) -> None:
    """Accepted exactly when the oracle accepts; refused with the oracle's reason; and what
    is accepted covers every input, is connected and keeps every predicate's columns in
    one attribute."""
    n, pairs = case
    predicates = [f"r{i + 1}.{x} = r{j + 1}.{y}" for i, x, j, y in pairs]
    refusal = expected_refusal(n, pairs)
    if refusal is not None:
        with pytest.raises(ViewError) as caught:
            view(wide(n), predicates)
        assert refusal in str(caught.value)
        return
    graph = view(wide(n), predicates)
    assert all(graph.of_input[i] for i in range(n))
    assert connected(graph)
    for i, x, j, y in pairs:
        assert any((i, x) in members and (j, y) in members for members in graph.attributes)
    # One column per input per attribute; attributes partition the predicate columns.
    columns = [column for members in graph.attributes for column in members]
    assert len(columns) == len(set(columns))
    assert set(columns) == {(i, x) for i, x, _, _ in pairs} | {(j, y) for _, _, j, y in pairs}


def test_join_tree_oracle_sanity() -> None:
    assert len(trees(4)) == 16 and len(trees(6)) == 6**4
    assert has_join_tree(3, [{0, 1}, {1, 2}])  # chain
    assert has_join_tree(4, [{0, 1, 2, 3}])  # star
    assert not has_join_tree(3, [{0, 1}, {1, 2}, {0, 2}])  # triangle
    assert has_join_tree(3, [{0, 1}, {1, 2}, {0, 1, 2}])  # covered by a star attribute


def test_star_permutations_agree() -> None:
    """The same star written in every order of its predicates gives the same graph."""
    base = ["r1.a = r2.a", "r2.a = r3.a", "r1.a = r4.a"]
    graphs = [view(wide(4), list(order)) for order in itertools.permutations(base)]
    assert all(graph == graphs[0] for graph in graphs)
