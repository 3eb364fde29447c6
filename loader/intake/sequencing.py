"""Sequence numbers and release times: the order in which a table's updates are loaded.

Assigned on the event loop with no await in between, so that per table both strictly
increase in the order records reach the WAL; the dispatcher receives a table's durable
updates strictly in sequence order (the service's reorder buffer, ``TableSequence.reorder``).
A release is the end of the update's data interval (r_ij in the scheduling model): the
producer's ``data_until`` or the receive time, never in the future, always after the
table's previous release.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from loader.core.errors import Invalid
from loader.core.updates import Update
from loader.intake.requests import ValidUpdate


def iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class TableSequence:
    """A table's intake counters, kept by the service beside the scheduler's TableState."""

    next_seq: int
    last_release: float
    committed_seq: int
    #: Durable updates waiting for earlier sequence numbers before entering the queue.
    reorder: dict[int, Update | None] = field(default_factory=dict)
    next_to_release: int = 0


def plan_updates(
    valid: list[ValidUpdate], tables: dict[str, TableSequence], now: float, skew: float
) -> tuple[list[Update], set[str]]:
    """Sequence numbers and release times, assigned with no await in between so that per
    table both strictly increase in the order records reach the WAL; all-or-nothing
    (Invalid leaves ``tables`` untouched). ``skew``: how far in the future a producer's
    ``data_until`` may lie (clock differences)."""
    planned: dict[str, tuple[int, float]] = {}
    updates: list[Update] = []
    for item in valid:
        runtime = tables[item.table]
        seq, last = planned.get(item.table, (runtime.next_seq, runtime.last_release))
        if item.data_until is not None:
            if item.data_until <= last:
                raise Invalid(
                    f"data_until {iso(item.data_until)} of table {item.table!r} is not after {iso(last)}, where "
                    "the table's data already ends (its previous update's release, or its registration time "
                    "for a first update); releases of a table must increase: send a later data_until, or omit "
                    "it to use the receive time",
                    table=item.table,
                )
            if item.data_until > now + skew:
                raise Invalid(
                    f"data_until {iso(item.data_until)} of table {item.table!r} is more than {skew}s in the "
                    "future; check the producer's clock",
                    table=item.table,
                )
            # Within the allowed clock skew a future data_until counts as now: a table is
            # never current up to a time that has not come (staleness stays >= 0).
            release = max(min(item.data_until, now), math.nextafter(last, math.inf))
        else:
            release = max(now, math.nextafter(last, math.inf))
        updates.append(Update(item.table, seq, release, rows=item.rows, files=tuple(item.files)))
        planned[item.table] = (seq + 1, release)
    for table, (next_seq, last) in planned.items():
        tables[table].next_seq = next_seq
        tables[table].last_release = last
    return updates, set(planned)
