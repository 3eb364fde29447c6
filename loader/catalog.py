"""The table catalog: what tables exist, their schema and operator settings, persisted.

Kept in one small JSON file written atomically (temp file, fsync, rename), because it
changes only on operator actions and after loads. It is not the durability mechanism
for data (the WAL and the Delta log are): if ``last_release`` lags after a crash, only
the staleness origin of a table is slightly off until its next load.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loader.config import TableConfig
from loader.schema import TableSchema


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
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = self.schema.model_dump(mode="json")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CatalogEntry:
        data = dict(data)
        data["schema"] = TableSchema.model_validate(data["schema"])
        return cls(**data)


@dataclass
class Catalog:
    path: Path
    entries: dict[str, CatalogEntry] = field(default_factory=dict)
    policy: str | None = None

    @classmethod
    def open(cls, path: Path) -> Catalog:
        catalog = cls(path)
        if path.exists():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                catalog.entries = {e["name"]: CatalogEntry.from_json(e) for e in raw["tables"]}
                catalog.policy = raw.get("policy")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"catalog {path} is unreadable ({exc}); restore it from a backup or remove it "
                    "to re-register tables from the configuration"
                ) from None
        return catalog

    def save(self) -> None:
        payload = json.dumps(
            {"tables": [e.to_json() for e in self.entries.values()], "policy": self.policy, "saved_at": time.time()},
            indent=1,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> CatalogEntry:
        return self.entries[name]

    def add(self, entry: CatalogEntry) -> None:
        self.entries[entry.name] = entry
