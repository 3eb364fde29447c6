"""What production saw, exported for the simulator (``GET /v1/admin/trace`` and ``/schedule``,
``loader export-trace``): a read model over the dispatcher's tables and its observed record
(loader/loading/observed.py), in the simulator's trace and schedule formats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from loader.core.errors import Invalid, NotFound
from loader.loading.dispatcher import Dispatcher
from loader.loading.observed import ObservedTable, ScheduleSnapshot, TraceSnapshot


def parse_tables(
    dispatcher: Dispatcher, tables: str | None, views: Mapping[str, Sequence[str]] | None = None
) -> list[int]:
    """Table ids of a comma-separated list of names (every table, in registration order, when
    None); a view named brings its input tables (``views``: each view's inputs)."""
    if tables is None:
        return dispatcher.live()  # (a retired table is not named once gone)
    names = [name.strip() for name in tables.split(",")]
    if not all(names):
        raise Invalid("tables: give table names separated by commas, e.g. tables=orders,clicks")
    unknown = [name for name in names if name not in dispatcher.index]
    if unknown:
        raise NotFound(f"table {unknown[0]!r} does not exist; GET /v1/tables lists the tables", table=unknown[0])
    views = views or {}
    names += [table for name in names for table in views.get(name, ())]
    return sorted({dispatcher.index[name] for name in names})


def export_trace(
    dispatcher: Dispatcher,
    tables: str | None = None,
    since_seconds: float | None = None,
    clock: Callable[[], float] = time.time,
    views: Mapping[str, Sequence[str]] | None = None,
) -> TraceSnapshot:
    """The observed arrivals of ``tables`` in the last ``since_seconds`` (all recorded when
    None), with each table's current alpha/overhead estimates, weight and period hint.
    ``views`` (each join view's input tables) marks views, whose updates the simulator
    derives from their inputs' loads; a view asked for brings its inputs."""
    views = views or {}
    tids = parse_tables(dispatcher, tables, views)
    specs = [
        ObservedTable(
            name=state.name,
            alpha=state.alpha,
            overhead=state.overhead,
            weight=state.weight,
            period=state.period_hint,
            view_of=tuple(views[state.name]) if state.name in views else None,
        )
        for state in (dispatcher.states[tid] for tid in tids)
    ]
    since = None if since_seconds is None else clock() - since_seconds
    snapshot = dispatcher.observed.snapshot_trace(specs, tids, since)
    snapshot.policy, snapshot.workers = dispatcher.policy.name, dispatcher.workers
    snapshot.job_overhead = dispatcher.job_overhead.overhead
    return snapshot


def export_schedule(
    dispatcher: Dispatcher,
    tables: str | None = None,
    since_seconds: float | None = None,
    origin: float | None = None,
    clock: Callable[[], float] = time.time,
    views: Mapping[str, Sequence[str]] | None = None,
) -> ScheduleSnapshot:
    """Recorded batches in the schedule format; ``origin`` (epoch seconds) defaults to the
    one the trace export of the same ``tables`` and ``since_seconds`` uses now, so pass the
    trace's ``X-Trace-Origin`` to pair the two exactly."""
    if origin is None:
        origin = export_trace(dispatcher, tables, since_seconds, clock, views).origin
    tids = parse_tables(dispatcher, tables, views)
    since = None if since_seconds is None else clock() - since_seconds
    names = {tid: dispatcher.states[tid].name for tid in tids}
    return dispatcher.observed.snapshot_schedule(names, origin, since)
