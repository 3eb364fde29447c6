"""Batches that keep failing, set aside so that their table's later updates load.

A batch whose load fails ``loading.max_attempts`` times in a row (a corrupt data file,
rows Spark cannot write) would otherwise hold its table forever: the pending queue is
FIFO and every later update waits behind it. Quarantine takes the batch out of the
queue, *keeping every acknowledged update*: rows are written to Parquet files here,
landing files stay where the service owns them, and the error is kept beside them. An
operator retries the entry (its updates are submitted again, with new sequence numbers,
under an Idempotency-Key derived from the entry, so a retry interrupted by a crash is
not loaded twice) or discards it explicitly.

Layout, one directory per entry (``entry.json`` is written last: it is the commit)::

    <state>/quarantine/<table>/<first_seq>/entry.json
    <state>/quarantine/<table>/<first_seq>/<seq>.parquet       rows of update <seq>

A resolved entry (retried or discarded) stays as a *tombstone* (``entry.json`` with
``resolved`` set, payload gone) until Delta holds a later sequence number of its table:
until then the WAL may still hold the original records, and a restart must not load
them again. ``RecoveryPlan`` skips every sequence number named by an entry.

Failures of the environment (disk full, read-only file system, quota) are not the
batch's fault and never quarantine it: ``loader.core.durable_files.environmental`` tells
them apart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.durable_files import fsync_directory, write_atomic
from loader.core.updates import Batch, FileFormat, FileRef

log = logging.getLogger(__name__)


@dataclass
class QuarantinedUpdate:
    seq: int
    release: float
    #: Parquet file (in the entry's directory) holding the update's rows, or None.
    rows_file: str | None = None
    rows: int | None = None
    files: list[dict[str, Any]] = field(default_factory=list)

    def file_refs(self) -> tuple[FileRef, ...]:
        return tuple(FileRef(f["path"], FileFormat(f["format"]), f["size"]) for f in self.files)


@dataclass
class QuarantineEntry:
    table: str
    first_seq: int
    last_seq: int
    error: str
    attempts: int
    quarantined_at: float
    updates: list[QuarantinedUpdate]
    #: None while quarantined; "retried" or "discarded" for a tombstone.
    resolved: str | None = None
    resolved_at: float | None = None

    @property
    def seqs(self) -> list[int]:
        return [u.seq for u in self.updates]

    @property
    def requeue_key(self) -> str:
        """The Idempotency-Key of this entry's retry: a second retry gets the first answer."""
        return f"quarantine:{self.table}:{self.first_seq}-{self.last_seq}"

    def summary(self) -> dict[str, Any]:
        known = [u.rows for u in self.updates if u.rows is not None]
        return {
            "table": self.table,
            "first_sequence": self.first_seq,
            "last_sequence": self.last_seq,
            "updates": len(self.updates),
            "rows": sum(known) if len(known) == len(self.updates) else None,
            "files": sum(len(u.files) for u in self.updates),
            "error": self.error,
            "attempts": self.attempts,
            "quarantined_at": self.quarantined_at,
            "resolved": self.resolved,
        }


def _entry_from_json(data: dict[str, Any]) -> QuarantineEntry:
    updates = [QuarantinedUpdate(**u) for u in data.pop("updates")]
    return QuarantineEntry(updates=updates, **data)


class QuarantineStore:
    """The entries on disk; every method does I/O, so the service calls them off the event loop
    (``add`` on the failed batch's worker thread)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries: dict[tuple[str, int], QuarantineEntry] = {}
        self._lock = threading.Lock()  # ``add`` runs on a worker thread, readers on the event loop

    @classmethod
    def open(cls, directory: Path) -> QuarantineStore:
        """Read every committed entry; a directory without ``entry.json`` is a crashed ``add``."""
        store = cls(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for table_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
            for entry_dir in sorted(p for p in table_dir.iterdir() if p.is_dir()):
                meta = entry_dir / "entry.json"
                if not meta.exists():
                    shutil.rmtree(entry_dir, ignore_errors=True)
                    continue
                entry = _entry_from_json(json.loads(meta.read_text(encoding="utf-8")))
                store.entries[(entry.table, entry.first_seq)] = entry
        return store

    def _dir(self, table: str, first_seq: int) -> Path:
        return self.directory / table / str(first_seq)

    # -- reading --------------------------------------------------------------------------
    def active(self, table: str | None = None) -> list[QuarantineEntry]:
        with self._lock:
            entries = list(self.entries.values())
        return [e for e in entries if e.resolved is None and (table is None or e.table == table)]

    def seqs(self) -> dict[str, set[int]]:
        """Sequence numbers a restart must not load from the WAL (entries and tombstones)."""
        out: dict[str, set[int]] = {}
        with self._lock:
            entries = list(self.entries.values())
        for entry in entries:
            out.setdefault(entry.table, set()).update(entry.seqs)
        return out

    def get(self, table: str, first_seq: int) -> QuarantineEntry | None:
        return self.entries.get((table, first_seq))

    def read_rows(self, entry: QuarantineEntry, update: QuarantinedUpdate) -> pa.Table | None:
        if update.rows_file is None:
            return None
        return pq.read_table(self._dir(entry.table, entry.first_seq) / update.rows_file)

    # -- changes ----------------------------------------------------------------------------
    def add(self, batch: Batch, error: BaseException, attempts: int) -> QuarantineEntry:
        """Write the batch's payload and error durably; only then may it leave the pending store."""
        where = self._dir(batch.table, batch.first_seq)
        if where.exists():  # a crashed earlier add of the same batch
            shutil.rmtree(where)
        where.mkdir(parents=True)
        try:
            updates = []
            for update in batch.updates:
                parts = [update.rows] if update.rows is not None else []
                if update.spilled is not None:
                    parts.append(update.spilled.read())
                item = QuarantinedUpdate(update.seq, update.release, files=[asdict(f) for f in update.files])
                if parts:
                    rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
                    item.rows_file, item.rows = f"{update.seq}.parquet", rows.num_rows
                    with open(where / item.rows_file, "wb") as handle:
                        pq.write_table(rows, handle)
                        handle.flush()
                        os.fsync(handle.fileno())
                updates.append(item)
            entry = QuarantineEntry(
                table=batch.table,
                first_seq=batch.first_seq,
                last_seq=batch.last_seq,
                error=f"{type(error).__name__}: {error}"[:4000],
                attempts=attempts,
                quarantined_at=time.time(),
                updates=updates,
            )
            self._save(entry)
            fsync_directory(where.parent)
        except BaseException:
            # Not quarantined: the batch goes back to its queue. A half-committed entry left
            # here would come back as quarantined after a restart although it loads later.
            shutil.rmtree(where, ignore_errors=True)
            raise
        with self._lock:
            self.entries[(entry.table, entry.first_seq)] = entry
        return entry

    def _save(self, entry: QuarantineEntry) -> None:
        data = json.dumps(asdict(entry), indent=1).encode()
        write_atomic(self._dir(entry.table, entry.first_seq) / "entry.json", data)

    def resolve(self, entry: QuarantineEntry, how: str) -> None:
        """Keep a tombstone (see the module docstring) and delete the payload: rows files and
        the entry's landing files (a retry's new updates hold their own links to the data)."""
        self._save(replace(entry, resolved=how, resolved_at=time.time()))  # in memory only once durable
        entry.resolved, entry.resolved_at = how, time.time()
        for update in entry.updates:
            if update.rows_file is not None:
                (self._dir(entry.table, entry.first_seq) / update.rows_file).unlink(missing_ok=True)
            for ref in update.files:
                Path(ref["path"]).unlink(missing_ok=True)

    def prune(self, committed: dict[str, int]) -> int:
        """Forget tombstones whose table's Delta log has moved past them (the WAL no longer
        can replay their updates)."""
        with self._lock:
            gone = [
                key
                for key, entry in self.entries.items()
                if entry.resolved is not None and committed.get(entry.table, -1) >= entry.last_seq
            ]
            for key in gone:
                del self.entries[key]
        for table, first_seq in gone:
            shutil.rmtree(self._dir(table, first_seq), ignore_errors=True)
        return len(gone)
