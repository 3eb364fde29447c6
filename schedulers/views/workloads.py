"""Seeded join-view workloads shaped like the paper's experiments (section 7.1).

Babu et al. (../shared/seeds/004_*): every relation is a sliding window (here: a rows
window) over an append-only stream; the join attributes of all streams "draw values from
the same domain in the same order", each value repeated ``multiplicity`` times in a
stream whose rate is proportional to it, so the streams advance through the domain
together and a window of ``multiplicity * window`` rows holds the same recent values in
every stream. The update stream of each relation is its insertions and, once its window
is full, the deletions the window causes (the executor generates those).

A workload is the declared view, its input shapes, the pipeline orders and the stream of
(input, row) insertions in arrival order.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from schedulers.views.declaration import JoinGraph, ViewInput, ViewSpec, Window, check, declared
from schedulers.views.engine import InputShape
from schedulers.views.pipelines import Orders, check_orders

R, S, T = 0, 1, 2
#: Section 7.1's three-way join with the R-S cache in T's pipeline a candidate
#: (S joins R first), or the S-T cache in R's pipeline (S joins T first).
ORDERS_RS_CACHE: Orders = ((S, T), (R, T), (S, R))
ORDERS_ST_CACHE: Orders = ((S, T), (T, R), (S, R))


#: Section 7.1's R(A) join_A S(A, B) join_B T(B): predicates and outputs, the tables, the rows.
THREE_WAY_JOIN = (["r.a = s.a", "s.b = t.b"], ["r.a", "r.id AS r_id", "s.id AS s_id", "t.id AS t_id"])
THREE_WAY_SCHEMAS = {
    "R": {"a": "long", "id": "long"},
    "S": {"a": "long", "b": "long", "id": "long"},
    "T": {"b": "long", "id": "long"},
}
THREE_WAY_SHAPES = (InputShape(("a", "id")), InputShape(("a", "b", "id")), InputShape(("b", "id")))


@dataclass(frozen=True)
class Workload:
    spec: ViewSpec
    schemas: dict[str, dict[str, str]]
    shapes: tuple[InputShape, ...]
    stream: tuple[tuple[int, tuple], ...]
    #: Each insertion's arrival time (the ``data_until`` of seconds windows); empty for rows windows.
    times: tuple[float, ...] = ()

    def graph(self) -> JoinGraph:
        return check(self.spec, self.schemas)


def _interleave(streams: Sequence[Sequence[tuple]], rates: Sequence[float], seed: int) -> list[tuple[int, tuple]]:
    """Merge per-input streams by arrival: input i's k-th tuple arrives at (k + jitter) / rate_i."""
    rng = random.Random(seed)
    arrivals = []
    for i, (rows, rate) in enumerate(zip(streams, rates, strict=True)):
        for k, row in enumerate(rows):
            arrivals.append(((k + rng.random() * 0.5) / rate, i, row))
    arrivals.sort(key=lambda item: (item[0], item[1]))
    return [(i, row) for _, i, row in arrivals]


def three_way(
    *,
    values: int,
    window: int = 50,
    t_multiplicity: int = 5,
    t_every: int = 1,
    seed: int = 0,
) -> Workload:
    """R(A) join_A S(A, B) join_B T(B) (section 7.2). R and S carry each value once; T
    carries every ``t_every``-th value ``t_multiplicity`` times (the default r = 5, and
    T's rate r times R's). Windows hold ``window`` values' worth of rows in each stream.
    """
    spec = declared(
        "rst",
        [
            ViewInput("r", "R", window=Window("rows", window)),
            ViewInput("s", "S", window=Window("rows", window)),
            ViewInput("t", "T", window=Window("rows", max(1, window * t_multiplicity // t_every))),
        ],
        *THREE_WAY_JOIN,
    )
    ids = itertools.count()
    r_rows = [(v, next(ids)) for v in range(values)]
    s_rows = [(v, v, next(ids)) for v in range(values)]
    t_rows = [(v, next(ids)) for v in range(0, values, t_every) for _ in range(t_multiplicity)]
    stream = _interleave([r_rows, s_rows, t_rows], [1.0, 1.0, t_multiplicity / t_every], seed)
    return Workload(spec, THREE_WAY_SCHEMAS, THREE_WAY_SHAPES, tuple(stream))


def three_way_burst(
    *,
    values: int,
    burst_at: int,
    burst: int = 20,
    window: float = 50.0,
    t_multiplicity: int = 5,
    seed: int = 0,
) -> Workload:
    """Section 7.4's adaptivity run (Fig. 12): section 7.2's three-way join (R and S carry
    each value once, T ``t_multiplicity`` times at that multiple of their rate) until S has
    sent ``burst_at`` tuples, then a burst of R at ``burst`` times its rate for the rest of
    the run. The streams still advance through the domain together (one value per time
    unit), so during the burst R carries each value ``burst`` times; windows are time-based
    (``window`` time units, as STREAM's range windows), so R's window grows with its rate.
    """
    spec = declared(
        "rst",
        [ViewInput(a, a.upper(), window=Window("seconds", window)) for a in ("r", "s", "t")],
        *THREE_WAY_JOIN,
    )
    rng = random.Random(seed)
    ids = itertools.count()
    arrivals = []
    for v in range(values):
        copies = (1 if v < burst_at else burst, 1, t_multiplicity)
        for i, times in enumerate(copies):
            for k in range(times):
                row = (v, next(ids)) if i != S else (v, v, next(ids))
                arrivals.append((v + (k + rng.random() * 0.5) / times, i, row))
    arrivals.sort(key=lambda item: (item[0], item[1]))
    return Workload(
        spec,
        THREE_WAY_SCHEMAS,
        THREE_WAY_SHAPES,
        tuple((i, row) for _, i, row in arrivals),
        tuple(at for at, _, _ in arrivals),
    )


def star(
    *, n: int, values: int, window: int = 20, multiplicities: Sequence[int] | None = None, seed: int = 0
) -> Workload:
    """R_1(A) join ... join R_n(A) (Fig. 9): multiplicity 1 for floor(n / 2) of the streams
    and 5 for the others, rates proportional."""
    multiplicities = list(multiplicities or [1 if k < n // 2 else 5 for k in range(n)])
    names = [f"r{k + 1}" for k in range(n)]
    spec = declared(
        f"star{n}",
        [
            ViewInput(a, a.upper(), window=Window("rows", window * m))
            for a, m in zip(names, multiplicities, strict=True)
        ],
        [f"{a}.a = {b}.a" for a, b in itertools.pairwise(names)],
        [f"{a}.id AS {a}_id" for a in names],
    )
    schemas = {a.upper(): {"a": "long", "id": "long"} for a in names}
    ids = itertools.count()
    streams = [[(v, next(ids)) for v in range(values) for _ in range(m)] for m in multiplicities]
    stream = _interleave(streams, multiplicities, seed)
    return Workload(spec, schemas, tuple(InputShape(("a", "id")) for _ in names), tuple(stream))


def global_orders(n: int, order: Sequence[int]) -> Orders:
    """Every pipeline joins the others in one global order (Fig. 5(a)): the shape under
    which the prefix invariant allows the most candidates, and a left-deep XJoin's."""
    return tuple(tuple(j for j in order if j != i) for i in range(n))


def checked_orders(workload: Workload, orders: Orders) -> Orders:
    return check_orders(workload.graph(), orders)
