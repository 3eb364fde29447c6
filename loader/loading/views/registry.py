"""The service's join views: each a schedulable unit beside the tables.

A view enters the dispatcher as a table does (its own weight, cost estimates and
freshness ledger), so the policy decides when to bring it up to date and one view load
absorbs every input commit that waited (docs/join-views.md, "Scheduling"). Its pending
updates are the input commits: when an input's load commits, each view over the input
gets an update released then (when the commit became loadable for the view, the model's
release time; strictly increasing per view), naming the input's version. A view's
staleness is so its lag behind its inputs' commits, the part its loads decide; the
simulator derives a view's updates the same way (``schedulers.simulator``). The update
carries no rows; the view load reads them from the input's Delta log.

On the event loop: registration, the notes of input commits, the outcome of view loads.
On a worker thread: a view's load (its executor), one at a time per view.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path

from loader.core.errors import Conflict, NotFound
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult, Update
from loader.core.views import ResolvedView, ViewConfig, resolve
from loader.durability.catalog import Catalog, ViewEntry
from loader.loading.dispatcher import Dispatcher
from loader.loading.views.commits import current_version
from loader.loading.views.maintainer import InputChange, Joiner, ViewMaintainer
from schedulers.model import TableSpec

log = logging.getLogger(__name__)


class JoinViews:
    """Every registered view's executor and pending input commits."""

    def __init__(
        self, catalog: Catalog, dispatcher: Dispatcher, warehouse: Path, properties: Mapping[str, str] | None = None
    ) -> None:
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.warehouse = warehouse
        #: Table properties of new view tables (``ViewTable.properties``).
        self.properties = dict(properties or {})
        self.maintainers: dict[str, ViewMaintainer] = {}
        #: view -> its pending updates' input commits, by the update's sequence number.
        self._changes: dict[str, dict[int, InputChange]] = {}
        self._next_seq: dict[str, int] = {}
        self._release: dict[str, float] = {}
        #: input table -> the views over it.
        self._over: dict[str, list[str]] = {}
        #: A view being opened -> the input commits noted meanwhile (noted once it is open).
        self._opening: dict[str, list[tuple[InputChange, float]]] = {}
        #: A configured view that cannot be maintained over today's catalog -> why.
        self.broken: dict[str, str] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.maintainers

    def schemas(self) -> dict[str, TableSchema]:
        return {name: entry.schema for name, entry in self.catalog.entries.items()}

    # -- registration (event loop) ------------------------------------------------------------
    def resolve(self, config: ViewConfig) -> ResolvedView:
        """``Invalid`` (422) when the declaration cannot be maintained over the catalog's tables."""
        return resolve(config, self.schemas())

    async def open_all(self) -> None:
        """At start-up: every view in the catalog, its executor rebuilt from its Delta table;
        input commits it lacks are pending again."""
        for entry in list(self.catalog.views.values()):
            try:
                resolved = self.resolve(entry.config)
            except Exception as exc:  # a table it reads changed: the others still start
                self.broken[entry.name] = str(exc)
                log.error("view %r is not maintained: %s; declare a new view over today's tables", entry.name, exc)
                continue
            await self._open(entry, resolved, starting=True)

    async def register(self, config: ViewConfig) -> tuple[ViewEntry, bool]:
        """A new view (True), or the same declaration again (False); ``Conflict`` for another
        declaration under a registered name."""
        existing = self.catalog.views.get(config.name)
        if existing is not None:
            if existing.config != config:
                raise Conflict(
                    f"view {config.name!r} already exists with another declaration; choose a new name",
                    view=config.name,
                )
            return existing, False
        resolved = self.resolve(config)
        entry = ViewEntry(config=config, created_at=time.time())
        await self._open(entry, resolved)
        self.catalog.views[config.name] = entry
        self.catalog.changed()
        return entry, True

    def remove(self, name: str) -> None:
        """A retired view's executor and notes go (its input tables may then be retired);
        the caller retires its dispatcher unit once no load of it runs."""
        maintainer = self.maintainers.pop(name, None)
        for table in maintainer.view.tables if maintainer is not None else ():
            readers = self._over.get(table, [])
            if name in readers:
                readers.remove(name)
            if not readers:
                self._over.pop(table, None)
        self._changes.pop(name, None)
        self._next_seq.pop(name, None)
        self._release.pop(name, None)
        self.broken.pop(name, None)

    def inputs(self) -> dict[str, tuple[str, ...]]:
        """Each maintained view's input tables (a trace export marks views with them)."""
        return {name: tuple(m.view.tables) for name, m in self.maintainers.items()}

    def over(self, table: str) -> list[str]:
        """The views reading ``table``."""
        return list(self._over.get(table, ()))

    async def _open(self, entry: ViewEntry, resolved: ResolvedView, starting: bool = False) -> None:
        """The view's executor and dispatcher unit. Input commits noted while its Delta state
        is read (the awaits below) wait in ``_opening`` and are noted once it is open.

        At start-up (``starting``) a view whose executor cannot be rebuilt (its inputs'
        history vacuumed, the disk) does not stop the service: it is scheduled with every
        input pending, and each load tries the rebuild again, failing with the reason and
        retrying with back-off until what blocks it is fixed.
        """
        name = entry.name
        maintainer = ViewMaintainer(resolved, self.warehouse, seed=_seed(name), properties=self.properties)
        self._opening[name] = []
        for table in resolved.tables:
            self._over.setdefault(table, []).append(name)
        try:
            try:
                held = await asyncio.to_thread(maintainer.open)
                latest: dict[str, int | None] = await asyncio.to_thread(
                    lambda: {t: current_version(self.warehouse / t) for t in resolved.tables}
                )
            except Exception as exc:
                if not starting:
                    raise
                log.error("view %r could not be rebuilt at start-up: %s; its loads retry the rebuild", name, exc)
                held, latest = {}, {t: None for t in resolved.tables}  # every input: its newest at load time
        except BaseException:
            for table in resolved.tables:
                self._over[table].remove(name)
            del self._opening[name]
            raise
        noted = self._opening.pop(name)
        account = entry.account()
        origin = account.current_upto if account is not None else entry.last_release or entry.created_at
        spec = TableSpec(name=name, alpha=entry.alpha, overhead=entry.overhead, weight=entry.config.weight)
        self.dispatcher.add_table(spec, origin=origin, account=account)
        self.maintainers[name] = maintainer
        self._changes[name] = {}
        self._next_seq[name] = 1
        self._release[name] = origin
        for table in resolved.tables:
            version = latest[table]
            if version is None or version > held.get(table, -1):
                # What the input reached while the view was away: loadable now.
                self._note(name, InputChange(table, version), time.time())
        for change, committed in noted:
            self._note(name, change, committed)

    # -- input commits (event loop) ----------------------------------------------------------
    def input_committed(self, table: str, version: int | None, committed: float) -> None:
        """A load of ``table`` committed at ``committed`` (``version``: its Delta version,
        None when the sink did not say): every view over it has an update pending."""
        for view in self._over.get(table, ()):
            opening = self._opening.get(view)
            if opening is not None:
                opening.append((InputChange(table, version), committed))
            else:
                self._note(view, InputChange(table, version), committed)

    def _note(self, view: str, change: InputChange, committed: float) -> None:
        seq = self._next_seq[view]
        self._next_seq[view] = seq + 1
        previous = self._release[view]
        release = committed if committed > previous else math.nextafter(previous, math.inf)
        self._release[view] = release
        self._changes[view][seq] = change
        self.dispatcher.released(Update(table=view, seq=seq, release=release))

    # -- a view load (worker thread) -------------------------------------------------------------
    def load(self, batch: Batch, joiner: Joiner | None = None) -> LoadResult:
        """One view load; ``joiner`` runs the job of a view whose engine is ``spark``."""
        changes = self._changes[batch.table]
        done = self.maintainers[batch.table].load([changes[u.seq] for u in batch.updates], joiner)
        return LoadResult(
            batch.table,
            batch.last_seq,
            rows=done.changed_rows,
            delta_version=done.delta_version,
            skipped=done.skipped,
            details={
                "rows_inserted": float(done.inserted),
                "rows_deleted": float(done.deleted),
                "join_seconds": done.join_seconds,
                "commit_seconds": done.commit_seconds,
            },
        )

    # -- the outcome (event loop) -----------------------------------------------------------------
    def loaded(self, batch: Batch, result: LoadResult, alpha: float, overhead: float) -> None:
        changes = self._changes[batch.table]
        for update in batch.updates:
            changes.pop(update.seq, None)
        entry = self.catalog.views[batch.table]
        entry.alpha, entry.overhead = alpha, overhead
        entry.last_release = batch.updates[-1].release
        if result.delta_version is not None:
            entry.delta_version = result.delta_version
        self.catalog.changed(batch.table)  # (a view's name: no table entry is encoded again)

    # -- reading --------------------------------------------------------------------------------
    def describe(self, name: str) -> dict[str, object]:
        """``GET /v1/admin/views/{name}``: the declaration, freshness and the executor."""
        maintainer = self.maintainers.get(name)
        if maintainer is None and name in self.broken:
            raise Conflict(
                f"view {name!r} is not maintained: {self.broken[name]}; declare a new view over today's tables",
                view=name,
            )
        if maintainer is None:
            raise NotFound(f"no view {name!r}; GET /v1/admin/views lists the views", view=name)
        entry = self.catalog.views[name]
        d = self.dispatcher
        tid = d.index[name]
        now = time.time()
        return {
            "declaration": entry.config.model_dump(mode="json"),
            "delta_version": entry.delta_version,
            "pending_input_commits": d.states[tid].pending_count,
            "staleness_seconds": d.ledger.staleness_at(tid, now),
            "low_bound": d.ledger.low_bound(tid),
            "max_stretch": d.ledger.max_stretch(tid),
            **maintainer.describe(),
        }

    def names(self) -> list[str]:
        """The views maintained (not those ``broken``)."""
        return sorted(self.maintainers)


def _seed(name: str) -> int:
    """A view's executor seed (profiling samples): fixed per name, so runs repeat."""
    return sum(ord(c) * (k + 1) for k, c in enumerate(name)) % (1 << 31)
