"""Tables' staleness over the last minutes, exact, for GET /v1/tables:history (the page at /ui).

Staleness is a sawtooth: it grows with slope 1 and drops at each load to the load's finish
minus the newest release it brought. So a table's line over a window needs no sampling
and no store of its own: only the loads that finished in it, which the dispatcher's
batch ring already keeps for GET /v1/admin/schedule (loader/loading/observed.py), and
what the table was current up to when the window began. The line is a list of vertices
(time, staleness): a client draws straight segments between them.

A line goes back only as far as the service knows: to the window's start, or to when
the table was added (registration, or this process's start), or to the oldest load the
ring still holds of it. With the ring off (``observed_schedule_max_batches = 0``) that is
the table's last load.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from loader.core.errors import Invalid, NotFound
from loader.loading.dispatcher import Dispatcher

#: Tables a history call answers at most, and the default when it names none (the stalest).
MAX_TABLES = 50
DEFAULT_STALEST = 10
#: Vertices per table by default, and the most a caller may ask for.
DEFAULT_POINTS = 1000
MAX_POINTS = 10_000


@dataclass(frozen=True)
class StalenessLine:
    name: str
    staleness_seconds: float
    #: Epoch seconds the line starts at (the window's start or later, see the module docstring).
    start: float
    #: Loads that finished in the window (all of them, also when ``points`` were thinned).
    loads: int
    #: (epoch seconds, staleness in seconds), in time order; the last is (now, staleness now).
    points: list[tuple[float, float]]


def split_names(tables: str) -> list[str]:
    """The names of a comma-separated list, each once, in order; Invalid (422) for an empty
    name or more than ``MAX_TABLES``."""
    names = list(dict.fromkeys(name.strip() for name in tables.split(",")))
    if not all(names):
        raise Invalid("tables: give table names separated by commas, e.g. tables=orders,clicks")
    if len(names) > MAX_TABLES:
        raise Invalid(f"tables: at most {MAX_TABLES} tables a call, not {len(names)}")
    return names


def stalest(dispatcher: Dispatcher, n: int, visible: Callable[[str], bool]) -> list[str]:
    """The ``n`` stalest tables (and views) the caller may see, stalest first (ties by name)."""
    ledger = dispatcher.ledger
    ranked = ((ledger.current_upto(tid), dispatcher.states[tid].name) for tid in dispatcher.live())
    ranked = (item for item in ranked if visible(item[1]))
    return [name for _, name in heapq.nsmallest(n, ranked)]


def staleness_lines(
    dispatcher: Dispatcher, names: list[str], since: float, now: float, max_points: int = DEFAULT_POINTS
) -> list[StalenessLine]:
    """Each named table's staleness from ``since`` to ``now``; NotFound for an unknown name."""
    unknown = [name for name in names if name not in dispatcher.index]
    if unknown:
        raise NotFound(f"table {unknown[0]!r} does not exist; GET /v1/tables lists the tables", table=unknown[0])
    ledger = dispatcher.ledger
    tids = [dispatcher.index[name] for name in names]
    recorded = dispatcher.observed.loads_since(tids, since)
    lines = []
    for name, tid in zip(names, tids):
        loads = recorded[tid]
        upto_now = ledger.current_upto(tid)
        start, upto, finishes, lasts = loads.start, loads.upto, loads.finishes, loads.lasts
        if (lasts[-1] if lasts else upto) != upto_now:
            # The ring missed loads the ledger counted (it is off): known since the last one.
            start, upto, finishes, lasts = max(since, ledger.account(tid).last_finish), upto_now, [], []
        start = min(start, now)
        points = [(start, start - upto)]
        drawn = 0
        for finish, last in zip(finishes, lasts):
            if finish > now:  # the wall clock stepped back since: the next call shows it
                break
            points.append((finish, finish - upto))
            points.append((finish, finish - last))
            upto, drawn = last, drawn + 1
        points.append((now, now - upto))
        lines.append(
            StalenessLine(
                name=name,
                staleness_seconds=now - upto_now,
                start=start,
                loads=drawn,
                points=thin(points, max_points),
            )
        )
    return lines


def thin(points: list[tuple[float, float]], limit: int) -> list[tuple[float, float]]:
    """At most about ``limit`` vertices with the line's shape kept: per slice of time its
    highest and lowest vertex (a peak before a load and the drop after it), in their
    order, and the first and last. A chart a few hundred pixels wide draws the same picture."""
    if len(points) <= limit:
        return points
    t0, t1 = points[0][0], points[-1][0]
    slices = max(1, (limit - 2) // 2)
    scale = slices / (t1 - t0) if t1 > t0 else 0.0
    kept = [0]
    current = lowest = highest = -1
    for i in range(1, len(points) - 1):
        k = min(slices - 1, int((points[i][0] - t0) * scale))
        if k != current:
            if current >= 0:
                kept.extend(sorted({lowest, highest}))
            current, lowest, highest = k, i, i
        elif points[i][1] < points[lowest][1]:
            lowest = i
        elif points[i][1] > points[highest][1]:
            highest = i
    if current >= 0:
        kept.extend(sorted({lowest, highest}))
    kept.append(len(points) - 1)
    return [points[i] for i in kept]
