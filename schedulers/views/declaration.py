"""A join view as declared, checked against the inputs' schemas, and its join graph.

Babu, Munagala, Widom, Motwani (../shared/seeds/004_*) section 3.1: an n-way stream join
of equi-joins R_i.a = R_k.b. A view here names 2 to 6 *inputs* (an alias over a registered
table, so a table may appear twice under two aliases), equality predicates between their
columns and the columns it outputs. Each input is the whole table or a sliding window
over an append table (the paper's experiments, section 7.1).

Columns equated by the predicates, directly or through others, form one *join
attribute* (an equivalence class): R(A) = S(A) = T(A) is one attribute of a star. The
maintainable shapes are the alpha-acyclic ones (checked by GYO reduction): chains, stars
and trees of them. A cycle through different attributes (R.a = S.a, S.b = T.b,
T.c = R.c) is refused: its pipelines would have to check a predicate that does not lead
to the next input, and nothing in the paper's plan space covers it.

Pure: the caller supplies the schemas (the live service from its catalog); an error
names the declaration's field and what to change.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

#: Bounds of the paper's experiments (section 7: up to 7-way; the issue asks for 2 to 6).
MIN_INPUTS = 2
MAX_INPUTS = 6

InputKind = Literal["append", "latest"]
WindowKind = Literal["rows", "seconds"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENT = r"([A-Za-z_][A-Za-z0-9_]*)"
_PREDICATE = re.compile(rf"^\s*{_IDENT}\.{_IDENT}\s*=\s*{_IDENT}\.{_IDENT}\s*$")
_NOT_EQUI = re.compile(r"!=|<>|<=|>=|<|>|\bor\b|\blike\b|\bbetween\b", re.IGNORECASE)


class ViewError(ValueError):
    """A declaration the loader cannot maintain; the message says what and how to fix it."""


@dataclass(frozen=True, slots=True)
class ColumnRef:
    """``alias.column``."""

    input: str
    column: str

    def __str__(self) -> str:
        return f"{self.input}.{self.column}"


@dataclass(frozen=True, slots=True)
class Window:
    """A sliding window over an append table: its last ``size`` rows, or the rows whose
    update's ``data_until`` is within ``size`` seconds of the newest one's."""

    kind: WindowKind
    size: float


@dataclass(frozen=True, slots=True)
class ViewInput:
    alias: str
    table: str
    #: The table's kind as registered: a latest table's upsert reaches the join as a
    #: delete of the key's previous row and an insert of the new one.
    kind: InputKind = "append"
    window: Window | None = None


@dataclass(frozen=True, slots=True)
class OutputColumn:
    source: ColumnRef
    name: str


@dataclass(frozen=True, slots=True)
class ViewSpec:
    name: str
    inputs: tuple[ViewInput, ...]
    predicates: tuple[tuple[ColumnRef, ColumnRef], ...]
    outputs: tuple[OutputColumn, ...]

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(item.alias for item in self.inputs)

    def input_index(self, alias: str) -> int:
        return self.aliases.index(alias)


def parse_column(text: str, where: str) -> ColumnRef:
    alias, dot, column = text.strip().partition(".")
    if not dot or not _NAME.match(alias) or not _NAME.match(column):
        raise ViewError(f"{where}: {text!r} is not a column reference; write it as input_alias.column")
    return ColumnRef(alias, column)


def parse_predicate(text: str) -> tuple[ColumnRef, ColumnRef]:
    """``"orders.customer_id = customers.id"``; anything but one equality is refused."""
    match = _PREDICATE.match(text)
    if match is None:
        if _NOT_EQUI.search(text):
            raise ViewError(
                f"predicate {text!r} is not an equality: join views maintain equi-joins only "
                "(write alias.column = alias.column; filter in the query that reads the view)"
            )
        raise ViewError(f"predicate {text!r} must read alias.column = alias.column")
    left = ColumnRef(match.group(1), match.group(2))
    right = ColumnRef(match.group(3), match.group(4))
    return left, right


def parse_output(text: str) -> OutputColumn:
    """``"orders.amount"`` or ``"customers.name AS customer_name"``."""
    parts = re.split(r"\s+[Aa][Ss]\s+", text.strip(), maxsplit=1)
    source = parse_column(parts[0], "outputs")
    name = parts[1].strip() if len(parts) == 2 else source.column
    if not _NAME.match(name):
        raise ViewError(f"outputs: {name!r} is not a valid column name")
    return OutputColumn(source, name)


@dataclass(frozen=True, slots=True)
class JoinGraph:
    """The join attributes of a checked view.

    ``attributes[a]`` lists the columns (input index, column) that attribute ``a`` equates;
    ``of_input[i]`` maps an attribute to input i's column for it (an input has at most one
    column per attribute: two would be a filter, refused at declaration).
    """

    n: int
    attributes: tuple[tuple[tuple[int, str], ...], ...]
    of_input: tuple[Mapping[int, str], ...]

    def shared(self, left: frozenset[int] | set[int], right: frozenset[int] | set[int]) -> tuple[int, ...]:
        """The attributes joining a relation of ``left`` with one of ``right`` (a cache key)."""
        return tuple(
            a
            for a in range(len(self.attributes))
            if any(a in self.of_input[i] for i in left) and any(a in self.of_input[i] for i in right)
        )

    def neighbours(self, i: int) -> set[int]:
        return {j for a in self.of_input[i] for j, _ in self.attributes[a] if j != i}


def check(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> JoinGraph:
    """Refuse what cannot be maintained (the message names the field); return the join graph.

    ``schemas`` maps each table to its columns and their types (the catalog's).
    """
    if not _NAME.match(spec.name):
        raise ViewError(f"name: {spec.name!r} must be letters, digits and _ (not starting with a digit)")
    if not MIN_INPUTS <= len(spec.inputs) <= MAX_INPUTS:
        raise ViewError(f"inputs: a join view joins {MIN_INPUTS} to {MAX_INPUTS} inputs, got {len(spec.inputs)}")
    seen: set[str] = set()
    for item in spec.inputs:
        if not _NAME.match(item.alias):
            raise ViewError(f"inputs: alias {item.alias!r} must be letters, digits and _")
        if item.alias in seen:
            raise ViewError(
                f"inputs: alias {item.alias!r} is used twice; a table joined with itself needs "
                "a distinct alias for each occurrence"
            )
        seen.add(item.alias)
        if item.table not in schemas:
            raise ViewError(
                f"inputs.{item.alias}: table {item.table!r} is not registered (a view over a view "
                "is not supported: join the view's own inputs instead)"
            )
        if item.window is not None:
            if item.kind != "append":
                raise ViewError(
                    f"inputs.{item.alias}: a window slides over an append table; {item.table!r} is a "
                    "latest table, whose rows already expire by key (drop the window)"
                )
            if item.window.kind not in ("rows", "seconds"):
                raise ViewError(f"inputs.{item.alias}.window: kind must be rows or seconds")
            if not (0 < item.window.size < math.inf):
                raise ViewError(f"inputs.{item.alias}.window: size must be a finite number > 0")
            if item.window.kind == "rows" and item.window.size != int(item.window.size):
                raise ViewError(f"inputs.{item.alias}.window: a rows window takes a whole number of rows")
    index = {item.alias: i for i, item in enumerate(spec.inputs)}

    def column_type(ref: ColumnRef, where: str) -> str:
        if ref.input not in index:
            raise ViewError(f"{where}: {ref} names no input of the view (inputs: {', '.join(index)})")
        columns = schemas[spec.inputs[index[ref.input]].table]
        if ref.column not in columns:
            raise ViewError(
                f"{where}: {ref}: table {spec.inputs[index[ref.input]].table!r} has no column "
                f"{ref.column!r} (columns: {', '.join(columns)})"
            )
        return columns[ref.column]

    if not spec.predicates:
        raise ViewError("predicates: a join view needs at least one equality between two inputs")
    # Union-find over columns: one class per join attribute.
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(x: tuple[int, str]) -> tuple[int, str]:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for left, right in spec.predicates:
        where = f"predicates: {left} = {right}"
        left_type, right_type = column_type(left, where), column_type(right, where)
        if left.input == right.input:
            raise ViewError(
                f"{where}: both sides are columns of {left.input!r}; that is a filter, not a join "
                "(join the table with itself under a second alias, or filter when reading the view)"
            )
        if left_type != right_type:
            raise ViewError(
                f"{where}: {left} is {left_type} but {right} is {right_type}; join columns must have the same type"
            )
        a, b = find((index[left.input], left.column)), find((index[right.input], right.column))
        if a != b:
            parent[a] = b
    classes: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for member in list(parent):
        classes.setdefault(find(member), []).append(member)
    attributes = tuple(tuple(sorted(members)) for members in sorted(classes.values(), key=sorted))
    of_input: list[dict[int, str]] = [{} for _ in spec.inputs]
    for a, members in enumerate(attributes):
        for i, column in members:
            if a in of_input[i]:
                raise ViewError(
                    f"predicates: {spec.inputs[i].alias}.{of_input[i][a]} and {spec.inputs[i].alias}.{column} "
                    "end up equated to each other through the other predicates; that is a filter "
                    "within one input, which a join view does not maintain"
                )
            of_input[i][a] = column
    unjoined = [spec.inputs[i].alias for i in range(len(spec.inputs)) if not of_input[i]]
    if unjoined:
        raise ViewError(
            f"predicates: input(s) {', '.join(unjoined)} join with nothing; a view without a "
            "predicate for an input would be a cross product"
        )
    graph = JoinGraph(len(spec.inputs), attributes, tuple(of_input))
    _check_connected(spec, graph)
    _check_acyclic(spec, graph)
    names: set[str] = set()
    if not spec.outputs:
        raise ViewError("outputs: name at least one column for the view")
    for output in spec.outputs:
        column_type(output.source, f"outputs: {output.source}")
        if output.name in names:
            raise ViewError(f"outputs: column name {output.name!r} appears twice; rename one with AS")
        names.add(output.name)
    return graph


def _check_connected(spec: ViewSpec, graph: JoinGraph) -> None:
    reached, frontier = {0}, [0]
    while frontier:
        for j in graph.neighbours(frontier.pop()):
            if j not in reached:
                reached.add(j)
                frontier.append(j)
    if len(reached) != graph.n:
        apart = [spec.inputs[i].alias for i in range(graph.n) if i not in reached]
        raise ViewError(
            f"predicates: inputs {', '.join(apart)} are not joined to {spec.inputs[0].alias}; the "
            "view would be a cross product of separate joins (add a predicate or declare two views)"
        )


def _check_acyclic(spec: ViewSpec, graph: JoinGraph) -> None:
    """GYO reduction: alpha-acyclic iff repeatedly removing attributes of one input and
    inputs whose attributes another input covers empties the hypergraph."""
    edges = {i: set(graph.of_input[i]) for i in range(graph.n)}
    changed = True
    while changed and len(edges) > 1:
        changed = False
        for i in list(edges):
            lonely = {a for a in edges[i] if not any(a in edges[j] for j in edges if j != i)}
            if lonely:
                edges[i] -= lonely
                changed = True
        for i in list(edges):
            if any(j != i and edges[i] <= edges[j] for j in edges):
                del edges[i]
                changed = True
                break
    if len(edges) > 1:
        cycle = ", ".join(spec.inputs[i].alias for i in sorted(edges))
        raise ViewError(
            f"predicates: the joins among {cycle} form a cycle through different columns; join "
            "views support chains, stars and trees of them (drop one predicate and filter when "
            "reading the view)"
        )


def declared(
    name: str,
    inputs: Sequence[ViewInput],
    predicates: Sequence[str],
    outputs: Sequence[str],
) -> ViewSpec:
    """A spec from the text forms the configuration and the API use."""
    return ViewSpec(
        name=name,
        inputs=tuple(inputs),
        predicates=tuple(parse_predicate(text) for text in predicates),
        outputs=tuple(parse_output(text) for text in outputs),
    )
