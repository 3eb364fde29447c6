"""What a restart must do, decided from the WAL and the Delta logs alone (no Spark).

Every acknowledged update is in the WAL until Delta holds it; Delta's application
transaction version of a table is the last sequence number it holds. So after any crash:

- an update with ``seq <= committed[table]`` is already loaded: drop it (its owned
  landing files can go);
- any other update is pending again, in sequence order;
- an update of a table the catalog does not know (the catalog was lost or restored from
  an old backup) is kept aside, not dropped: registering the table again adopts it.

The sequence counter of a table restarts above everything logged or committed, so a
sequence number is never handed out twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from loader.sinks.base import app_id
from loader.updates import Update
from loader.wal import WalRecord


def committed_seq(path: Path, table: str) -> int:
    """The table's Delta application-transaction version: every update <= it is loaded."""
    try:
        version = DeltaTable(str(path)).transaction_version(app_id(table))
    except TableNotFoundError:
        return 0
    return version or 0


@dataclass
class RecoveryPlan:
    committed: dict[str, int]
    #: Acknowledged and not in Delta, per table in sequence order.
    pending: dict[str, list[Update]] = field(default_factory=lambda: defaultdict(list))
    #: Updates of tables missing from the catalog, kept until the table is registered again.
    orphans: dict[str, list[Update]] = field(default_factory=lambda: defaultdict(list))
    #: Highest sequence number and release logged per table (committed updates included).
    last_seq: dict[str, int] = field(default_factory=dict)
    last_release: dict[str, float] = field(default_factory=dict)
    #: Owned landing files of updates Delta already holds.
    stale_files: list[str] = field(default_factory=list)

    @property
    def pending_count(self) -> int:
        return sum(len(u) for u in self.pending.values())


def plan_recovery(records: Iterable[WalRecord], tables: Iterable[str], warehouse: Path) -> RecoveryPlan:
    plan = RecoveryPlan(committed={name: committed_seq(warehouse / name, name) for name in tables})
    for record in records:
        update = record.update
        name = update.table
        plan.last_seq[name] = max(plan.last_seq.get(name, 0), update.seq)
        plan.last_release[name] = max(plan.last_release.get(name, update.release), update.release)
        if name not in plan.committed:
            plan.orphans[name].append(update)
        elif update.seq <= plan.committed[name]:
            plan.stale_files.extend(f.path for f in update.files)
        else:
            plan.pending[name].append(update)
    return plan
