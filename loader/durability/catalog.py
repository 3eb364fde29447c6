"""The table catalog: what tables exist, their schema and operator settings, persisted.

Kept in one JSON file written atomically (temp file, fsync, rename), because it changes
only on operator actions and after loads. It is not the durability mechanism for data
(the WAL and the Delta log are): if it lags behind the last loads after a crash, a
table's freshness accounts restart from slightly older values (its staleness is over-,
never under-stated until its next load).

The file is rebuilt on the event loop every second while loads finish, so each entry's
JSON is kept and only the entries that changed are encoded again: at 10,000 tables
encoding every entry took about 2 s, a pause of intake every second (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from loader.core.durable_files import write_atomic
from loader.core.errors import unknown_table
from loader.core.schema import TableSchema
from loader.core.tables import TableConfig
from loader.core.views import ViewConfig
from schedulers.freshness import TableAccount


@dataclass
class CatalogEntry:
    name: str
    schema: TableSchema
    weight: float
    period_hint: float | None
    alpha: float
    overhead: float
    created_at: float
    paused: bool = False
    #: Release time of the newest loaded update (what the table is current up to).
    last_release: float | None = None
    last_seq: int = 0
    delta_version: int | None = None
    #: Freshness accounts as of the last load (``schedulers.freshness.TableAccount``), so
    #: the exported staleness counters continue across restarts instead of resetting.
    freshness: dict[str, float] | None = None
    #: Latest tables: rows dropped by design since registration (a newer value of their key won).
    superseded_rows: int = 0
    #: Latest tables: the key policy and the batch bound (loader/core/tables.py).
    key_policy: str = "in-place"
    max_keys_per_batch: int | None = None
    #: Latest tables: the seconds-per-key estimate as of the last load (as alpha for appends).
    seconds_per_key: float = 0.0001
    #: ``DELETE /v1/admin/tables/{t}`` was answered: intake refuses the table (410), what it
    #: acknowledged still loads, then the entry leaves for ``Catalog.retired``. Saved before
    #: the answer, so a restart resumes the retirement rather than forgetting it.
    retiring: bool = False
    #: With ``retiring``: its Delta table and files go once it is drained (``?purge=true``).
    purge: bool = False
    #: ``TableConfig.on_new_fields``: what a row's fields the table lacks do.
    on_new_fields: str = "reject"

    def account(self) -> TableAccount | None:
        return TableAccount(**self.freshness) if self.freshness else None

    @classmethod
    def from_config(cls, table: TableConfig, now: float) -> CatalogEntry:
        return cls(
            name=table.name,
            schema=table.schema_,
            weight=table.weight,
            period_hint=table.period_hint,
            alpha=table.alpha,
            overhead=table.overhead,
            created_at=now,
            key_policy=table.key_policy,
            max_keys_per_batch=table.max_keys_per_batch,
            seconds_per_key=table.seconds_per_key,
            on_new_fields=table.on_new_fields,
        )

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["schema"] = self.schema.model_dump(mode="json")
        if self.freshness is not None:
            data["freshness"] = dict(self.freshness)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CatalogEntry:
        data = dict(data)
        data["schema"] = TableSchema.model_validate(data["schema"])
        return cls(**data)


@dataclass
class RetiredTable:
    """What is left of a retired table (or view): enough to never take it for a live one.

    ``last_seq`` is the highest sequence number the table ever handed out. It is kept even
    after the name is registered again: the new table's numbering continues above it, and
    recovery counts every WAL record of the name at or below it as done, so an update of
    the old table still in the WAL is never loaded into the new one (not even when the
    old Delta table, whose transaction version said so, was purged).
    """

    name: str
    last_seq: int
    retired_at: float
    #: ``table`` or ``view``.
    kind: str = "table"
    #: The Delta table and files are to go (``?purge=true``), and whether they went: a
    #: crash between the catalog's save and the removal is finished at the next start.
    purge: bool = False
    purged: bool = False

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetiredTable:
        return cls(**data)


@dataclass
class ViewEntry:
    """A join view as registered (docs/join-views.md) and its scheduling state."""

    config: ViewConfig
    created_at: float
    #: A view load's cost model, as a table's (seconds per second of input data, and fixed).
    alpha: float = 0.001
    overhead: float = 0.05
    last_release: float | None = None
    delta_version: int | None = None
    freshness: dict[str, float] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def account(self) -> TableAccount | None:
        return TableAccount(**self.freshness) if self.freshness else None

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["config"] = self.config.model_dump(mode="json", exclude_defaults=True)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ViewEntry:
        data = dict(data)
        data["config"] = ViewConfig.model_validate(data["config"])
        return cls(**data)


@dataclass
class Catalog:
    """Every registered table's entry and the policy an operator chose, in one JSON file.

    The entries are changed on the event loop (operator actions, finished loads), which
    marks the catalog ``changed``; ``save_changes`` writes it (every second, and after each
    operator action), one write at a time.
    """

    path: Path
    entries: dict[str, CatalogEntry] = field(default_factory=dict)
    policy: str | None = None
    policy_params: dict[str, Any] = field(default_factory=dict)
    #: Join views, by name (few: encoded whole at every write).
    views: dict[str, ViewEntry] = field(default_factory=dict)
    #: Retired tables and views, by name (``RetiredTable``); a name registered again keeps
    #: its record (the sequence floor) and is live while it is in ``entries``.
    retired: dict[str, RetiredTable] = field(default_factory=dict)
    #: Something changed since the last write.
    dirty: bool = field(default=False, compare=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)
    #: Each entry's JSON as last encoded, and the entries changed since (None: all of them).
    _encoded: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    _stale: set[str] | None = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def open(cls, path: Path) -> Catalog:
        catalog = cls(path)
        if path.exists():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                catalog.entries = {e["name"]: CatalogEntry.from_json(e) for e in raw["tables"]}
                catalog.policy = raw.get("policy")
                catalog.policy_params = raw.get("policy_params") or {}
                catalog.views = {v["config"]["name"]: ViewEntry.from_json(v) for v in raw.get("views", [])}
                catalog.retired = {r["name"]: RetiredTable.from_json(r) for r in raw.get("retired", [])}
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"catalog {path} is unreadable ({exc}); restore it from a backup or remove it "
                    "to re-register tables from the configuration"
                ) from None
        return catalog

    def encode(self) -> bytes:
        """The file's bytes, one entry a line; built on the thread that owns the entries (no
        torn snapshot), encoding again only the entries changed since the last call."""
        encoded = self._encoded
        stale = self.entries.keys() if self._stale is None else self._stale
        for name in stale:
            entry = self.entries.get(name)
            if entry is not None:
                encoded[name] = json.dumps(entry.to_json(), separators=(",", ":"))
        for name, entry in self.entries.items():
            if name not in encoded:
                encoded[name] = json.dumps(entry.to_json(), separators=(",", ":"))
        self._stale = set()
        views = [view.to_json() for view in self.views.values()]
        retired = [gone.to_json() for gone in self.retired.values()]
        rest = json.dumps(
            {
                "policy": self.policy,
                "policy_params": self.policy_params,
                "views": views,
                "retired": retired,
                "saved_at": time.time(),
            }
        )
        tables = ",\n".join(encoded[name] for name in self.entries)
        return f'{{"tables": [\n{tables}\n], {rest[1:]}\n'.encode()

    def save(self, data: bytes | None = None) -> None:
        write_atomic(self.path, self.encode() if data is None else data)

    def changed(self, *tables: str) -> None:
        """Something to save: the entries of ``tables``, or (none named) every entry."""
        self.dirty = True
        if not tables:
            self._stale = None
        elif self._stale is not None:
            self._stale.update(tables)

    def stale_entries(self) -> Collection[str]:
        """Names of the entries changed since the last encoding."""
        return self.entries.keys() if self._stale is None else self._stale

    async def save_changes(self, refresh: Callable[[Collection[str]], None] = lambda _: None) -> None:
        """Persist the catalog if something changed; one write at a time, snapshot taken here.

        ``refresh`` brings the changed entries (their names are given) up to date first
        (the freshness accounts). The bytes are built on the event loop (which owns the
        entries), written on a thread; a failed write leaves the catalog changed, so the
        next call tries again.
        """
        async with self._lock:
            if not self.dirty:
                return
            self.dirty = False
            refresh(self.stale_entries())
            data = self.encode()
            try:
                await asyncio.to_thread(self.save, data)
            except BaseException:
                self.dirty = True
                raise

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> CatalogEntry:
        return self.entries[name]

    def entry(self, name: str) -> CatalogEntry:
        """The table's entry; the API's 404 when no such table is registered."""
        entry = self.entries.get(name)
        if entry is None:
            raise unknown_table(name)
        return entry

    def add(self, entry: CatalogEntry) -> None:
        self.entries[entry.name] = entry
        if self._stale is not None:
            self._stale.add(entry.name)

    def gone(self, name: str) -> RetiredTable | None:
        """The record of ``name`` when it is retired and not registered again (else None)."""
        if name in self.entries or name in self.views:
            return None
        return self.retired.get(name)

    def remove(self, name: str, record: RetiredTable) -> None:
        """The table leaves, its record stays: one change, saved by the next write."""
        self.entries.pop(name, None)
        self._encoded.pop(name, None)
        if self._stale is not None:
            self._stale.discard(name)
        self.retired[name] = record
        self.dirty = True
