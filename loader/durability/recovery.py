"""What a restart must do, decided from the WAL and the Delta logs alone (no Spark).

Every acknowledged update is in the WAL until Delta holds it; Delta's application
transaction version of a table is the last sequence number it holds. So after any crash:

- an update with ``seq <= committed[table]`` is already loaded: drop it (its owned
  landing files can go);
- any other update is pending again, in sequence order;
- an update of a table the catalog does not know (the catalog was lost or restored from
  an old backup) is kept aside, not dropped: registering the table again adopts it.
- an update of a retired table (``catalog.RetiredTable``) is done: its record's last
  sequence number counts as committed, also for a new table of the name, whose numbering
  starts above it (a purged table has no Delta log to say so).

The sequence counter of a table restarts above everything logged or committed, so a
sequence number is never handed out twice.

A table's committed sequence number is read when recovery first needs it
(``CommittedSeqs``): the WAL's tables, the quarantine's and the retiring ones before intake
opens; every other table's after, in the background, while intake holds that table's
updates until its own is read (loader/service.py, ``_read_table_states``). A restart of
10,000 tables opens intake without reading 10,000 Delta logs first.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from loader.core.updates import Update, WalRecord
from loader.durability.transactions import committed_seq, committed_seqs


class CommittedSeqs(Mapping[str, int]):
    """Each known table's ``committed_seq``, read from its Delta log on first use and kept.

    Why lazy: recovery needs it before intake opens only for the tables the WAL, the
    quarantine or a retirement names; the rest can be read after intake opens. ``known``: the
    catalog's version of each table's last load (None: none yet), tried first with
    :func:`committed_at` (a commit file or a few), deltalake's full read otherwise.
    ``floors``: retired tables' last sequence numbers (done whatever Delta says: a purged
    table has no log). Safe from several threads (the WAL replays on one, the background
    reader reads on a pool).
    """

    def __init__(
        self, warehouse: Path, known: Mapping[str, int | None], floors: Mapping[str, int] | None = None
    ) -> None:
        self.warehouse = warehouse
        self.known = dict(known)
        self.floors = dict(floors or {})
        self._read: dict[str, int] = {}
        self._lock = threading.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self.known or name in self.floors

    def __iter__(self) -> Iterator[str]:
        return iter(self.known.keys() | self.floors.keys())

    def __len__(self) -> int:
        return len(self.known.keys() | self.floors.keys())

    def __getitem__(self, name: str) -> int:
        found = self._read.get(name)
        if found is not None:
            return found
        if name not in self:
            raise KeyError(name)
        seq = self._from_delta(name) if name in self.known else 0
        seq = max(seq, self.floors.get(name, 0))
        with self._lock:  # (two threads reading one table agree: Delta's answer only grows)
            return self._read.setdefault(name, seq)

    def is_read(self, name: str) -> bool:
        return name in self._read

    def read_all(self, names: Collection[str], threads: int = 8) -> dict[str, int]:
        """``names`` read (deltalake's Rust core releases the GIL: a few threads overlap)."""
        if len(names) < 2 * threads:
            return {name: self[name] for name in names}
        with ThreadPoolExecutor(threads, thread_name_prefix="delta-log") as pool:
            return dict(zip(names, pool.map(self.__getitem__, names), strict=True))

    def _from_delta(self, name: str) -> int:
        return committed_seqs(self.warehouse, [name], {name: self.known[name]})[name]


@dataclass
class RecoveryPlan:
    """Built one WAL record at a time (``add``), so a restart never holds the whole backlog:
    each pending update goes straight to the pending store, which spills as it must."""

    committed: Mapping[str, int]
    #: Sequence numbers of quarantined batches (loader/durability/quarantine.py): neither pending nor
    #: stale (their landing files belong to the quarantine entry).
    quarantined: dict[str, set[int]] = field(default_factory=dict)
    #: Updates of tables missing from the catalog, kept until the table is registered again.
    orphans: dict[str, list[Update]] = field(default_factory=lambda: defaultdict(list))
    #: Highest sequence number and release logged per table (committed updates included).
    last_seq: dict[str, int] = field(default_factory=dict)
    last_release: dict[str, float] = field(default_factory=dict)
    #: Owned landing files of updates Delta already holds.
    stale_files: list[str] = field(default_factory=list)
    #: Owned landing files of updates still to load (pending or orphaned).
    live_files: set[str] = field(default_factory=set)
    pending_count: int = 0

    def add(self, record: WalRecord) -> Update | None:
        """Note one record (in log order); returns its update when it is pending again."""
        update = record.update
        name = update.table
        self.last_seq[name] = max(self.last_seq.get(name, 0), update.seq)
        self.last_release[name] = max(self.last_release.get(name, update.release), update.release)
        if update.seq in self.quarantined.get(name, ()):
            return None
        if name not in self.committed:
            self.orphans[name].append(update)
            self.live_files.update(f.path for f in update.files)
        elif update.seq <= self.committed[name]:
            self.stale_files.extend(f.path for f in update.files)
        else:
            self.pending_count += 1
            self.live_files.update(f.path for f in update.files)
            return update
        return None


def plan_recovery(
    records: Iterable[WalRecord], tables: Iterable[str], warehouse: Path
) -> tuple[RecoveryPlan, dict[str, list[Update]]]:
    """The whole plan at once, pending updates per table in sequence order (tests, tools)."""
    plan = RecoveryPlan(committed={name: committed_seq(warehouse / name, name) for name in tables})
    pending: dict[str, list[Update]] = defaultdict(list)
    for record in records:
        update = plan.add(record)
        if update is not None:
            pending[update.table].append(update)
    return plan, pending
