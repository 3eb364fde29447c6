"""Hypothesis strategies shared by the view tests."""

from __future__ import annotations

from hypothesis import strategies as st

from schedulers.views.declaration import JoinGraph
from schedulers.views.pipelines import Orders, check_orders, default_orders


@st.composite
def valid_orders(draw: st.DrawFn, graph: JoinGraph) -> Orders:
    """Default, ranked (one global preference, rich in shared caches) or random orders."""
    how = draw(st.sampled_from(["default", "ranked", "random"]))
    if how == "default":
        return default_orders(graph)
    if how == "ranked":
        rank = draw(st.permutations(range(graph.n)))
        return default_orders(graph, lambda i, j: rank[j])
    orders = []
    for i in range(graph.n):
        joined, order = {i}, []
        while len(joined) < graph.n:
            nexts = sorted({j for k in joined for j in graph.neighbours(k)} - joined)
            order.append(draw(st.sampled_from(nexts)))
            joined.add(order[-1])
        orders.append(tuple(order))
    return check_orders(graph, orders)
