"""What GET /v1/tables reports about a table: one read model over every stage's state of it.

Freshness comes from the same ledger the metrics use, so the API and Prometheus agree.
The list comes in pages (docs/scaling.md): at 10,000 tables all statuses are about 10 MB
of JSON, so a page holds ``DEFAULT_PAGE`` tables unless the caller asks for another size,
and a cursor continues where the previous page ended.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal

from loader.core.errors import Invalid
from loader.durability.catalog import Catalog, CatalogEntry
from loader.durability.quarantine import QuarantineStore
from loader.intake.sequencing import iso
from loader.intake.submission import Intake
from loader.loading.dispatcher import Dispatcher
from loader.loading.views.registry import JoinViews
from schedulers.model import TableState

#: Tables in a page of GET /v1/tables when the caller gives no limit: every table of a
#: service with up to this many (clients written before paging see them all), a bounded
#: response above it.
DEFAULT_PAGE = 1000
#: The largest page a caller may ask for.
MAX_PAGE = 10_000
Sort = Literal["name", "staleness"]


@dataclass(frozen=True)
class Page:
    tables: list[dict[str, Any]]
    #: Where the next page starts (None: this was the last one).
    next_cursor: str | None
    #: Tables the caller may see, on every page together.
    total: int


class TableStatuses:
    """Each table's status: its declaration (catalog), intake's counters, the dispatcher's
    scheduling and freshness state, the pending store's bytes, the quarantine's count."""

    def __init__(
        self,
        catalog: Catalog,
        intake: Intake,
        dispatcher: Dispatcher,
        quarantine: QuarantineStore,
        views: JoinViews | None = None,
    ) -> None:
        self.catalog = catalog
        self.views = views
        self.intake = intake
        self.dispatcher = dispatcher
        self.quarantine = quarantine
        self._by_name: list[str] = []  # every table's name, sorted (rebuilt when the count or the set changed)

    def policy_groups(self) -> dict[str, int]:
        """Table -> index of its GroupAndRun group (empty for policies without groups)."""
        groups = self.dispatcher.policy.describe().get("groups") or []
        return {name: k for k, group in enumerate(groups) for name in group.get("tables", [])}

    def all(self) -> list[dict[str, Any]]:
        """Every table's status; the policy is described once, not once per table."""
        groups = self.policy_groups()
        return [self.table(name, groups) for name in self._names()]

    def forget(self) -> None:
        """A table or view left (retired): the sorted names are rebuilt at the next page (a
        retirement and a registration between two pages leave the count as it was)."""
        self._by_name = []

    def _names(self) -> list[str]:
        """Tables, then join views (scheduled and reported like tables)."""
        views = self.views.names() if self.views is not None else []
        return [*self.intake.schemas, *views]  # (schemas: also tables whose Delta log is still being read)

    def page(
        self,
        *,
        limit: int = DEFAULT_PAGE,
        cursor: str | None = None,
        sort: Sort = "name",
        visible: Callable[[str], bool] = lambda _: True,
    ) -> Page:
        """Up to ``limit`` statuses after ``cursor``, by name or stalest first (ties by name).

        The order is keyset, not offset: a page continues after the last table of the one
        before, whatever was registered since. Staleness is now minus what a table is
        current up to, so stalest first is the order of ``current_upto``, which only a load
        changes: no table is left out between pages, and one loaded meanwhile (now fresher)
        may show again on a later page.
        """
        after = _decode(cursor, sort) if cursor else None
        everything = self._names()
        if len(self._by_name) != len(everything):
            self._by_name = sorted(everything)
        names = self._by_name
        if sort == "name":
            total = sum(1 for n in names if visible(n))
            chosen: list[str] = []
            more = False
            for name in islice(names, bisect_right(names, after) if after is not None else 0, None):
                if visible(name):
                    if len(chosen) == limit:
                        more = True
                        break
                    chosen.append(name)
            keys: list[Any] = list(chosen)
        else:  # staleness is now - current_upto: stalest first is oldest current_upto first, at any time
            d = self.dispatcher
            ranked = [(d.ledger.current_upto(d.index[n]), n) for n in names if visible(n)]
            total = len(ranked)
            if after is not None:
                key = (float(after[0]), str(after[1]))
                ranked = [item for item in ranked if item > key]
            top = heapq.nsmallest(limit + 1, ranked)
            more = len(top) > limit
            top = top[:limit]
            chosen = [n for _, n in top]
            keys = [[upto, n] for upto, n in top]
        groups, now = self.policy_groups(), time.time()
        return Page(
            tables=[self.table(name, groups, now) for name in chosen],
            next_cursor=_encode(sort, keys[-1]) if more and keys else None,
            total=total,
        )

    def _keys(self, entry: CatalogEntry, state: TableState, now: float) -> dict[str, Any] | None:
        """A latest table's key queue (docs/latest-tables.md); None for an append table."""
        figures = self.dispatcher.pending.key_figures(entry.name, now)
        if figures is None:
            return None
        return {
            # What the table-level policies rank it by (schedulers/model.py, TableState).
            "next_batch": {
                "keys": state.batch_keys,
                "updates": state.batch_count,
                "predicted_seconds": state.batch_duration,
            },
            "catch_up_seconds": state.backlog_seconds,
            "seconds_per_key": state.per_key,
            "policy": entry.key_policy,
            "max_keys_per_batch": entry.max_keys_per_batch,
            "waiting": figures.waiting_keys,
            "loading": figures.loading_keys,
            "queue_staleness_seconds": dict(zip(("mean", "p99", "max"), figures.queue, strict=True)),
            "application_staleness_seconds": dict(zip(("mean", "p99", "max"), figures.application, strict=True)),
            "cost_per_key_seconds": figures.cost_per_key,
            "cuts": figures.cuts,
        }

    def _view(self, name: str, groups: dict[str, int] | None, now: float | None) -> dict[str, Any]:
        """A join view's status: the fields a table's has that mean something for a view."""
        entry = self.catalog.views[name]
        d = self.dispatcher
        tid = d.index[name]
        state = d.states[tid]
        now = time.time() if now is None else now
        assert self.views is not None
        return {
            "name": name,
            "schema": self.views.maintainers[name].view.schema.model_dump(mode="json"),
            "mode": "view",
            "inputs": [i.table for i in entry.config.inputs],
            "superseded_rows": 0,
            "keys": None,
            "weight": state.weight,
            "period_hint": None,
            "period_estimate": state.period_estimate,
            "paused": state.paused,
            "retiring": False,
            "running": state.running,
            **_freshness(d, tid, now),
            # A view's updates are its inputs' commits; they hold no bytes of their own.
            "pending_updates": state.pending_count,
            "pending_bytes": 0,
            "pending_resident_bytes": 0,
            "pending_spilled_bytes": 0,
            "last_sequence": 0,
            "last_loaded_sequence": 0,
            "delta_version": entry.delta_version,
            "alpha": state.alpha,
            "overhead_seconds": state.overhead,
            "ms_per_1k_rows": _ms_per_1k_rows(d, tid),
            "group": (self.policy_groups() if groups is None else groups).get(name),
            "failures": d.failures(name),
        }

    def table(self, table: str, groups: dict[str, int] | None = None, now: float | None = None) -> dict[str, Any]:
        """NotFound for an unknown table; otherwise staleness, pending work and load progress
        (at ``now``: one instant for every table of a page)."""
        if self.views is not None and table in self.views:
            return self._view(table, groups, now)
        entry = self.catalog.entry(table)
        d = self.dispatcher
        tid = d.index[table]
        state = d.states[tid]
        sequence = self.intake.tables.get(table)
        # (None: a restart is still reading its Delta log; the catalog's last load is what it finds)
        last, loaded = (
            (entry.last_seq, entry.last_seq) if sequence is None else (sequence.next_seq - 1, sequence.committed_seq)
        )
        now = time.time() if now is None else now
        group = (self.policy_groups() if groups is None else groups).get(table)
        return {
            "name": table,
            "schema": entry.schema.model_dump(mode="json"),
            "mode": "latest" if entry.schema.latest else "append",
            "superseded_rows": entry.superseded_rows,
            "keys": self._keys(entry, state, now),
            "weight": state.weight,
            "period_hint": entry.period_hint,
            "period_estimate": state.period_estimate,
            "paused": entry.paused,
            "retiring": entry.retiring,
            "running": state.running,
            **_freshness(d, tid, now),
            "pending_updates": state.pending_count,
            "pending_bytes": d.pending.bytes(table),
            "pending_resident_bytes": d.pending.resident_bytes(table),
            "pending_spilled_bytes": d.pending.spilled_bytes(table),
            "last_sequence": last,
            "last_loaded_sequence": loaded,
            "delta_version": entry.delta_version,
            "alpha": state.alpha,
            "overhead_seconds": state.overhead,
            "ms_per_1k_rows": _ms_per_1k_rows(d, tid),
            "group": group,
            "failures": d.failures(table),
            "quarantined_updates": sum(len(e.updates) for e in self.quarantine.active(table)),
        }


def _ms_per_1k_rows(d: Dispatcher, tid: int) -> float | None:
    per_row = d.estimates[tid].seconds_per_row
    return None if per_row is None else per_row * 1e6


def _freshness(d: Dispatcher, tid: int, now: float) -> dict[str, Any]:
    return {
        "current_upto": d.ledger.current_upto(tid),
        "current_upto_iso": iso(d.ledger.current_upto(tid)),
        "staleness_seconds": d.ledger.staleness_at(tid, now),
        "staleness_integral": d.ledger.staleness_integral_at(tid, now),
        # Up to the finish of the last load, as the simulator counts it (comparisons).
        "staleness_integral_at_last_load": d.ledger.table(tid).staleness,
        "low_bound": d.ledger.low_bound(tid),
        "max_stretch": d.ledger.max_stretch(tid),
    }


def _encode(sort: str, key: Any) -> str:
    raw = json.dumps({"sort": sort, "after": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, sort: str) -> Any:
    """The key a cursor continues after; Invalid (422) for one this service did not give out."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        document = json.loads(raw)
        made_for, after = document["sort"], document["after"]
        if made_for == "name" and not isinstance(after, str):
            raise ValueError
        if made_for == "staleness" and not (
            isinstance(after, list)
            and len(after) == 2
            and isinstance(after[0], int | float)
            and not isinstance(after[0], bool)
            and isinstance(after[1], str)
        ):
            raise ValueError
    except (binascii.Error, ValueError, UnicodeDecodeError, KeyError, TypeError):
        raise Invalid(
            "cursor is not one this service gave out; pass the next_cursor of the previous page as is, "
            "or leave it out for the first page"
        ) from None
    if made_for != sort:
        raise Invalid(f"cursor was made for sort={made_for}; ask with sort={made_for}, or start again without it")
    return after
