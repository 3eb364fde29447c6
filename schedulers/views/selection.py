"""Offline cache selection: which nonoverlapping candidate caches a view's pipelines use.

Babu, Munagala, Widom, Motwani (../shared/seeds/004_*) section 4.4 and Appendix B. Given
stable estimates of each candidate's benefit and cost per unit time (section 4.1, from the
profiler), pick the nonoverlapping subset X of candidates maximising the *net benefit*
``sum_{C in X} benefit(C) - cost(C)``, where shared caches (Definition 4.1: one ``group``)
add their benefits but pay their maintenance cost once. Two caches overlap when they share
an operator of one pipeline; by the prefix invariant overlapping caches are nested, so each
pipeline's candidates form a forest under containment.

The problem is NP-hard once caches are shared (Theorem 4.2), hence several methods:

* ``tree``: Theorem 4.1's bottom-up recursion over each pipeline's forest; optimal without
  shared caches, linear (after a sort) in the number of candidates.
* ``exhaustive``: exact. The paper searches all 2^m combinations (section 4.4, last
  paragraph); here only the *shared* groups are enumerated (open or not) and the tree
  recursion decides everything else, which is the same optimum in 2^(shared groups) steps.
* ``greedy``: Appendix B's set-cover-like greedy on the equivalent minimum *total cost*
  form; an O(log n) approximation when processing costs are nonnegative.
* ``subsets``: section 6's search over all 2^m combinations of candidates, the only method
  once globally-consistent caches are among them: those break the forest (a pipeline's
  caches may overlap without nesting, and one cache's lookup may skip where another is
  maintained, ``pipelines.conflicts``), and the problem becomes as hard as independent set.
  Pruning: a candidate whose benefit is not positive is never taken.
* ``auto``: ``subsets`` when a globally-consistent candidate is present, else ``tree`` when
  nothing is shared, else ``exhaustive`` while its enumeration is small, else ``greedy``
  (the paper's own choice, section 4.4, plus its observation that exhaustive search is
  cheap for n <= 6).

Pure: the caller (the re-optimizer) supplies the estimates; nothing here reads a clock.
Ties are broken deterministically (fewer caches first, then the order of
``(pipeline, start, end)``) so that a re-plan with unchanged estimates keeps its caches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Literal, get_args

from schedulers.views.pipelines import Candidate, conflicts

SelectionMethod = Literal["auto", "tree", "greedy", "exhaustive", "subsets"]
SELECTION_METHODS: tuple[str, ...] = get_args(SelectionMethod)

#: A shared-cache group (Definition 4.1): ``Candidate.group``, the cached inputs and the key.
Group = tuple[frozenset[int], tuple[int, ...]]
#: An operator: (pipeline, 0-based position in that pipeline's order).
Operator = tuple[int, int]

#: ``auto`` runs ``exhaustive`` while at most this many groups are shared (2^limit steps).
EXHAUSTIVE_LIMIT = 16
#: ``subsets`` refuses more candidates than this (2^limit combinations; section 6 fixes m).
SUBSETS_LIMIT = 20


@dataclass(frozen=True)
class Instance:
    """One offline selection problem: the candidates and their per-unit-time estimates.

    ``benefit`` is per candidate (section 4.1; it may be negative: a cache that misses
    often costs more to probe than it saves). ``cost`` is the maintenance cost per group,
    since shared caches are one store and are maintained once. ``op_cost`` is
    ``d_ij * c_ij`` of every operator: the greedy's total-cost form needs it (a cache's
    processing cost is what its operators would cost minus its benefit), and its keys are
    the operators the greedy must cover.
    """

    candidates: tuple[Candidate, ...]
    benefit: Mapping[Candidate, float]
    cost: Mapping[Group, float]
    op_cost: Mapping[Operator, float]

    def __post_init__(self) -> None:
        # Copies, so that a caller mutating its dicts cannot change a frozen instance.
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "benefit", dict(self.benefit))
        object.__setattr__(self, "cost", dict(self.cost))
        object.__setattr__(self, "op_cost", dict(self.op_cost))
        if len(set(self.candidates)) != len(self.candidates):
            raise ValueError("candidates: a candidate is listed twice")
        for operator, value in self.op_cost.items():
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"op_cost[{operator}]: must be finite and >= 0, got {value}")
        for candidate in self.candidates:
            if candidate not in self.benefit:
                raise ValueError(f"benefit: no estimate for {candidate}")
            if not math.isfinite(self.benefit[candidate]):
                raise ValueError(f"benefit[{candidate}]: must be finite, got {self.benefit[candidate]}")
            if candidate.group not in self.cost:
                raise ValueError(f"cost: no estimate for the group of {candidate}")
            value = self.cost[candidate.group]
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"cost[{candidate.group}]: must be finite and >= 0, got {value}")
            missing = [op for op in operators(candidate) if op not in self.op_cost]
            if missing:
                raise ValueError(f"op_cost: no estimate for operator(s) {missing} of {candidate}")
        # Every algorithm but ``subsets`` relies on the forest structure the prefix invariant
        # gives; section 6's caches may break it, and only ``subsets`` takes them.
        for left, right in combinations(self.candidates, 2):
            if left.scope == "global" or right.scope == "global":
                continue
            if left.overlaps(right) and not (left.covers(right) or right.covers(left)):
                raise ValueError(
                    f"candidates: {left} and {right} overlap without one containing the other; "
                    "candidates must satisfy the prefix invariant (use pipelines.candidates)"
                )

    @property
    def global_(self) -> bool:
        """Section 6's caches are among the candidates."""
        return any(c.scope == "global" for c in self.candidates)

    def proc(self, candidate: Candidate) -> float:
        """proc(C) of section 4.4: the cost of running C's pipeline segment through the cache,
        i.e. what its operators cost without it minus the benefit."""
        return sum(self.op_cost[op] for op in operators(candidate)) - self.benefit[candidate]


def operators(candidate: Candidate) -> tuple[Operator, ...]:
    """The operators a cache replaces."""
    return tuple((candidate.pipeline, j) for j in range(candidate.start, candidate.end + 1))


def _order(candidate: Candidate) -> tuple[int, int, int]:
    return candidate.pipeline, candidate.start, candidate.end


def _check_chosen(instance: Instance, chosen: Iterable[Candidate]) -> list[Candidate]:
    ordered = sorted(chosen, key=_order)
    known = set(instance.candidates)
    for candidate in ordered:
        if candidate not in known:
            raise ValueError(f"{candidate} is not a candidate of the instance")
    for left, right in combinations(ordered, 2):
        if conflicts(left, right):
            raise ValueError(
                f"{left} and {right} overlap, or one's lookup skips where the other is maintained; "
                "a plan uses nonconflicting caches"
            )
    return ordered


def _net(instance: Instance, ordered: list[Candidate]) -> float:
    """Net benefit of caches already sorted by ``_order`` (a fixed summation order, so that
    equal sets compare equal to the last bit)."""
    total, paid = 0.0, set()
    for candidate in ordered:
        total += instance.benefit[candidate]
        if candidate.group not in paid:
            paid.add(candidate.group)
            total -= instance.cost[candidate.group]
    return total


def net_benefit(instance: Instance, chosen: Iterable[Candidate]) -> float:
    """``sum benefit(C) - cost(C)`` over ``chosen``, each shared group's cost counted once
    (section 4.4). Refuses overlapping caches, which no pipeline can use together."""
    return _net(instance, _check_chosen(instance, chosen))


def total_cost(instance: Instance, chosen: Iterable[Candidate]) -> float:
    """Appendix B's objective: proc of the chosen caches, plus ``op_cost`` of every operator
    no chosen cache replaces, plus each used group's maintenance once. It equals the sum of
    all operator costs minus :func:`net_benefit`: the two forms have the same optimum."""
    ordered = _check_chosen(instance, chosen)
    covered = {op for candidate in ordered for op in operators(candidate)}
    total = sum(cost for op, cost in sorted(instance.op_cost.items()) if op not in covered)
    paid = set()
    for candidate in ordered:
        total += instance.proc(candidate)
        if candidate.group not in paid:
            paid.add(candidate.group)
            total += instance.cost[candidate.group]
    return total


def shared_groups(instance: Instance) -> tuple[Group, ...]:
    """The groups with caches in more than one pipeline, in candidate order."""
    counts: dict[Group, int] = {}
    for candidate in instance.candidates:
        counts[candidate.group] = counts.get(candidate.group, 0) + 1
    return tuple(group for group, count in counts.items() if count > 1)


def select(
    instance: Instance,
    method: SelectionMethod = "auto",
    exhaustive_limit: int = EXHAUSTIVE_LIMIT,
) -> frozenset[Candidate]:
    """The caches to use. ``auto`` is exact unless more than ``exhaustive_limit`` groups are
    shared, when it falls back to the greedy approximation (section 4.4)."""
    if method == "auto":
        shared = shared_groups(instance)
        if instance.global_:
            method = "subsets"
        elif not shared:
            method = "tree"
        elif len(shared) <= exhaustive_limit:
            method = "exhaustive"
        else:
            method = "greedy"
    if method == "subsets":
        return frozenset(_subsets(instance))
    if instance.global_:
        raise ValueError(
            f"method {method!r} needs candidates satisfying the prefix invariant; with section 6's "
            "globally-consistent caches among them use 'subsets' (or 'auto')"
        )
    if method == "tree":
        return frozenset(_tree(instance))
    if method == "exhaustive":
        return frozenset(_exhaustive(instance))
    if method == "greedy":
        return frozenset(_greedy(instance))
    raise ValueError(f"method: {method!r} is not one of {', '.join(SELECTION_METHODS)}")


# -- tree: Theorem 4.1 / Proof 4.1 -----------------------------------------------------------


def _forest_best(candidates: Iterable[Candidate], value: Callable[[Candidate], float | None]) -> list[Candidate]:
    """Section 4.4, Proof 4.1: in each pipeline's containment forest (parent = smallest
    strict superset), the best set under a cache C is either C alone or the union of the
    best sets under its children; the empty set (value 0) is always allowed. ``value(C)``
    None forbids C (its subtree may still be used). Ties keep fewer caches."""
    ordered = sorted(candidates, key=lambda c: (c.pipeline, c.start, -c.end))
    children: dict[Candidate, list[Candidate]] = {c: [] for c in ordered}
    roots: list[Candidate] = []
    stack: list[Candidate] = []
    for candidate in ordered:  # a parent sorts before everything it contains
        while stack and not stack[-1].covers(candidate):
            stack.pop()
        (children[stack[-1]] if stack else roots).append(candidate)
        stack.append(candidate)
    best: dict[Candidate, tuple[float, list[Candidate]]] = {}
    for candidate in reversed(ordered):  # children before parents
        kids_value, kids = 0.0, []
        for child in children[candidate]:
            kids_value += best[child][0]
            kids += best[child][1]
        own = value(candidate)
        if own is not None and (own > kids_value or (own == kids_value and len(kids) > 1)):
            best[candidate] = own, [candidate]
        else:
            best[candidate] = kids_value, kids
    return [c for root in roots for c in best[root][1]]


def _tree(instance: Instance) -> list[Candidate]:
    # Theorem 4.1. With shared caches each cache is valued alone, benefit minus its group's
    # whole cost: a lower bound on what it adds, so the result is feasible and never worse
    # than it claims, but it misses groups worth using only together (Theorem 4.2).
    return _forest_best(instance.candidates, lambda c: instance.benefit[c] - instance.cost[c.group])


# -- exhaustive: section 4.4 (last paragraph) / section 7.3 ---------------------------------


def _exhaustive(instance: Instance) -> list[Candidate]:
    """Exact optimum. For every subset O of the shared groups taken as *open* (cost paid,
    each member then worth its benefit alone) and the others forbidden, the tree recursion
    is optimal for the rest (unshared caches worth benefit - cost). Some O is exactly the
    set of shared groups an optimum uses, so the best over all O is optimal.

    Pruning: a shared group whose positive benefits together do not exceed its cost never
    helps (dropping its caches from any solution loses nothing), so it is never opened.
    """
    counts: dict[Group, int] = {}
    positive: dict[Group, float] = {}
    for candidate in instance.candidates:
        counts[candidate.group] = counts.get(candidate.group, 0) + 1
        positive[candidate.group] = positive.get(candidate.group, 0.0) + max(0.0, instance.benefit[candidate])
    shared = [g for g, count in counts.items() if count > 1]
    openable = [g for g in shared if positive[g] > instance.cost[g]]
    best: tuple[float, int, list[tuple[int, int, int]]] | None = None
    chosen: list[Candidate] = []
    for mask in range(1 << len(openable)):
        opened = {g for bit, g in enumerate(openable) if mask >> bit & 1}

        def value(candidate: Candidate, opened: set[Group] = opened) -> float | None:
            if counts[candidate.group] == 1:
                return instance.benefit[candidate] - instance.cost[candidate.group]
            return instance.benefit[candidate] if candidate.group in opened else None

        found = sorted(_forest_best(instance.candidates, value), key=_order)
        key = (-_net(instance, found), len(found), [_order(c) for c in found])
        if best is None or key < best:
            best, chosen = key, found
    return chosen


# -- greedy: Appendix B, "Greedy Algorithm" -------------------------------------------------


def _greedy(instance: Instance) -> list[Candidate]:
    """Appendix B's greedy on the total-cost form: every operator is also a zero-length
    cache (proc = its op_cost, cost 0, its own group). Repeatedly take the group with the
    smallest cost-rate D_r = (L_r + sum B_c) / (sum n_c) over a prefix of its caches
    sorted by B_c / n_c (n_c: its operators not yet covered), until every operator is
    covered; then where chosen caches overlap keep the outermost.

    One refinement: a group already taken has L_r = 0 afterwards (its store exists; the
    paper charges it again, though the store is maintained once). Rates only fall, so the
    charging argument behind the O(log n) bound still holds. The bound assumes
    proc(C) >= 0, i.e. benefit(C) no more than the cost of the operators it replaces, as
    when both are measured; otherwise the result is still a valid, nonoverlapping set.
    """
    uncovered = set(instance.op_cost)
    groups: dict[Group, list[Candidate]] = {}
    for candidate in sorted(instance.candidates, key=_order):
        groups.setdefault(candidate.group, []).append(candidate)
    proc = {c: instance.proc(c) for c in instance.candidates}
    opened: set[Group] = set()
    taken: list[Candidate] = []
    while uncovered:
        # An option: (rate, kind, -operators covered, order) -> caches; operators (kind 0)
        # win ties with caches, so an indifferent cache is not used.
        best_key: tuple[float, int, int, tuple[int, int, int]] | None = None
        best_caches: list[Candidate] = []
        best_ops: list[Operator] = []
        for op in sorted(uncovered):
            key = (instance.op_cost[op], 0, -1, (op[0], op[1], op[1]))
            if best_key is None or key < best_key:
                best_key, best_caches, best_ops = key, [], [op]
        for group, members in groups.items():
            usable = []
            for c in members:
                n_c = sum(1 for op in operators(c) if op in uncovered)
                if n_c:
                    usable.append((proc[c] / n_c, _order(c), n_c, c))
            if not usable:
                continue
            usable.sort(key=lambda item: (item[0], item[1]))
            spent = 0.0 if group in opened else instance.cost[group]
            count = 0
            rate, size = math.inf, 0
            for length, (_, _, n_c, c) in enumerate(usable, start=1):
                spent += proc[c]
                count += n_c
                if spent / count < rate:
                    rate, size = spent / count, length
            prefix = [item[3] for item in usable[:size]]
            covered = sum(item[2] for item in usable[:size])
            key = (rate, 1, -covered, _order(prefix[0]))
            if best_key is None or key < best_key:
                best_key, best_caches, best_ops = key, prefix, []
        for c in best_caches:
            taken.append(c)
            opened.add(c.group)
            uncovered.difference_update(operators(c))
        uncovered.difference_update(best_ops)
    # Appendix B: of overlapping (hence nested) chosen caches keep the one covering most.
    return [c for c in taken if not any(o is not c and o.covers(c) for o in taken)]


# -- subsets: section 6 ------------------------------------------------------------------------


def _subsets(instance: Instance) -> list[Candidate]:
    """Section 6: "fix a maximum number m of candidate caches and use exhaustive search over
    the 2^m possible combinations". Depth-first over the candidates in ``_order``, each taken
    or not, skipping conflicting ones and those whose benefit is not positive (taking one
    never raises the net benefit: a shared group's cost is paid by whichever member opens
    it). Ties keep fewer caches, then the first in order, as the other methods do."""
    ordered = sorted((c for c in instance.candidates if instance.benefit[c] > 0), key=_order)
    if len(ordered) > SUBSETS_LIMIT:
        raise ValueError(f"subsets: {len(ordered)} candidates with a benefit; the search takes at most {SUBSETS_LIMIT}")
    clash = {c: {o for o in ordered if o is not c and conflicts(c, o)} for c in ordered}
    best: tuple[float, int, list[tuple[int, int, int]]] | None = None
    chosen: list[Candidate] = []

    def visit(k: int, taken: list[Candidate], blocked: frozenset[Candidate]) -> None:
        nonlocal best, chosen
        if k == len(ordered):
            key = (-_net(instance, taken), len(taken), [_order(c) for c in taken])
            if best is None or key < best:
                best, chosen = key, list(taken)
            return
        c = ordered[k]
        if c not in blocked:
            visit(k + 1, [*taken, c], blocked | clash[c])
        visit(k + 1, taken, blocked)

    visit(0, [], frozenset())
    return chosen
