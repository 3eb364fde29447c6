"""Updates that keep failing, set aside so that their table's other updates load.

An update whose load fails ``loading.max_attempts`` times alone (a corrupt data file,
rows Spark cannot write; the dispatcher bisects a failing batch down to the update that
fails, loader/loading/dispatcher.py) would otherwise hold its table forever: the
pending queue is FIFO and every later update waits behind it. Quarantine takes it out of
the queue, *keeping every acknowledged update*: rows are written to Parquet files here,
landing files stay where the service owns them, and the error is kept beside them, with
the update's Idempotency-Key and the row the error names, if any. An operator retries
the entry (its updates are submitted again, with new sequence numbers, under an
Idempotency-Key derived from the entry, so a retry interrupted by a crash is not loaded
twice) or discards it explicitly.

A latest table without ``order_by`` also keeps here the later values of the keys the
entry holds (loader/pending/keyed.py): loaded before the entry's values were retried,
they would be overwritten by them, so they wait, and are written here (``keep_held``)
before a commit passes the update they came in. A retry or discard submits one update
that releases them (``release_seq``).

Layout, one directory per entry (``entry.json`` is written last: it is the commit)::

    <state>/quarantine/<table>/<first_seq>/entry.json
    <state>/quarantine/<table>/<first_seq>/<seq>.parquet       rows of update <seq>
    <state>/quarantine/<table>/<first_seq>/held-<n>.parquet    held values, with their arrival and update

A resolved entry (retried or discarded) stays as a *tombstone* (``entry.json`` with
``resolved`` set, payload gone) until Delta holds a later sequence number of its table:
until then the WAL may still hold the original records, and a restart must not load
them again. ``RecoveryPlan`` skips every sequence number named by an entry. A tombstone
whose released values ride in a later update keeps its rows and held values until that
update is in Delta too (a restart holds its keys again until then).

Failures of the environment (disk full, read-only file system, quota) are not the
batch's fault and never quarantine it: ``loader.core.durable_files.environmental`` tells
them apart.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loader.abc import HeldValue
from loader.core.durable_files import fsync_directory, write_atomic
from loader.core.errors import causes
from loader.core.updates import Batch, FileFormat, FileRef, arrival

log = logging.getLogger(__name__)

#: Columns of a held-values file beside the table's own (names reserved in a latest table).
HELD_ARRIVAL = "__loader_arrival"
HELD_SEQ = "__loader_seq"
#: How an error's text names a row: "row 3 of table ...", "row 3: ...".
_ROW_NAMED = re.compile(r"\brow (\d+)\b")


def error_row(error: BaseException) -> int | None:
    """The row the error names, if it names one: a ``row`` in its details (the service's
    own errors), else "row N" in its text (a load failure crosses from a worker as text)."""
    for cause in causes(error):
        details = getattr(cause, "details", None)
        if isinstance(details, dict) and isinstance(details.get("row"), int):
            return int(details["row"])
    match = _ROW_NAMED.search(str(error))
    return int(match.group(1)) if match else None


@dataclass
class QuarantinedUpdate:
    seq: int
    release: float
    #: Parquet file (in the entry's directory) holding the update's rows, or None.
    rows_file: str | None = None
    rows: int | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    #: The Idempotency-Key the producer sent with the update, if any.
    idempotency_key: str | None = None
    #: Each row's arrival (a latest table's rows may have moved between updates): a retry
    #: submits them in this order, so the newest value of a key stays the newest.
    arrivals: list[int] | None = None

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
    #: The row (0-based, of the update's rows or file) the error names, if it names one.
    row: int | None = None
    #: Files of values held for the entry's keys (a latest table without order_by):
    #: ``{"file", "rows", "arrivals"}``, written by ``keep_held``.
    held: list[dict[str, Any]] = field(default_factory=list)
    #: The sequence number of the update a retry or discard submitted, which carries the
    #: held values: until Delta holds it, a restart holds the entry's keys again.
    release_seq: int | None = None
    #: Its keys' later values wait for it (a latest table without order_by): set aside so.
    holds_keys: bool = False

    @property
    def seqs(self) -> list[int]:
        return [u.seq for u in self.updates]

    @property
    def requeue_key(self) -> str:
        """The Idempotency-Key of this entry's retry: a second retry gets the first answer."""
        return f"quarantine:{self.table}:{self.first_seq}-{self.last_seq}"

    @property
    def release_key(self) -> str:
        """The Idempotency-Key of the update a discard submits to release held values."""
        return f"quarantine-release:{self.table}:{self.first_seq}-{self.last_seq}"

    @property
    def through(self) -> int:
        """The last sequence number a restart must know of: its own, or its releasing update's."""
        return max(self.last_seq, self.release_seq or 0)

    def held_arrivals(self) -> set[int]:
        return {at for record in self.held for at in record["arrivals"]}

    def summary(self) -> dict[str, Any]:
        known = [u.rows for u in self.updates if u.rows is not None]
        return {
            "table": self.table,
            "first_sequence": self.first_seq,
            "last_sequence": self.last_seq,
            "updates": len(self.updates),
            "rows": sum(known) if len(known) == len(self.updates) else None,
            "files": sum(len(u.files) for u in self.updates),
            # The update by the name its producer gave it (entries of one update; older
            # entries of several list theirs under idempotency_keys).
            "idempotency_key": self.updates[0].idempotency_key if len(self.updates) == 1 else None,
            "idempotency_keys": [u.idempotency_key for u in self.updates],
            "row": self.row,
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
        #: One writer of an entry's ``entry.json`` at a time (held values on worker threads,
        #: an operator's resolve on another).
        self._writing = threading.Lock()

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

    def entry_rows(self, entry: QuarantineEntry) -> pa.Table | None:
        """The entry's rows in arrival order (a latest table's retry, its held keys), or None
        when it holds files only."""
        parts: list[pa.Table] = []
        arrivals: list[int] = []
        for update in entry.updates:
            rows = self.read_rows(entry, update)
            if rows is None:
                continue
            parts.append(rows)
            arrivals += update.arrivals or [arrival(update.seq, i) for i in range(rows.num_rows)]
        if not parts:
            return None
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
        return rows.take(pa.array(order, pa.int64()))

    def held_rows(self, entry: QuarantineEntry) -> pa.Table | None:
        """Values held for the entry's keys, with ``HELD_ARRIVAL`` and ``HELD_SEQ``, or None."""
        where = self._dir(entry.table, entry.first_seq)
        parts = [pq.read_table(where / record["file"]) for record in entry.held]
        if not parts:
            return None
        return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]

    # -- changes ----------------------------------------------------------------------------
    def add(
        self,
        batch: Batch,
        error: BaseException,
        attempts: int,
        idempotency_keys: dict[int, str] | None = None,
        holds_keys: bool = False,
    ) -> QuarantineEntry:
        """Write the batch's payload and error durably; only then may it leave the pending store.
        ``idempotency_keys``: the keys its updates were sent with; ``holds_keys``: its keys'
        later values will wait for it (loader/pending/keyed.py)."""
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
                item = QuarantinedUpdate(
                    update.seq,
                    update.release,
                    files=[asdict(f) for f in update.files],
                    idempotency_key=(idempotency_keys or {}).get(update.seq),
                    arrivals=list(update.arrived) or None,
                )
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
                row=error_row(error),
                holds_keys=holds_keys,
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

    def keep_held(self, table: str, values: Sequence[HeldValue]) -> None:
        """Make values held for entries' keys durable beside them (a batch they were held back
        from commits next). A value kept before (a retried batch) is not written again."""
        by_entry: dict[int, list[HeldValue]] = {}
        for value in values:
            by_entry.setdefault(value.entry, []).append(value)
        with self._writing:
            for first_seq, held in by_entry.items():
                entry = self.entries.get((table, first_seq))
                if entry is None:  # (a tombstone is pruned only once Delta holds what it released)
                    raise RuntimeError(f"values held for quarantined {table} update {first_seq} have no entry left")
                known = entry.held_arrivals()
                new = [v for v in held if v.arrival not in known]
                if not new:
                    continue
                rows = pa.concat_tables([v.row for v in new], promote_options="permissive")
                rows = rows.append_column(HELD_ARRIVAL, pa.array([v.arrival for v in new], pa.int64()))
                rows = rows.append_column(HELD_SEQ, pa.array([v.seq for v in new], pa.int64()))
                name = f"held-{len(entry.held) + 1}-{new[0].arrival}.parquet"
                with open(self._dir(table, first_seq) / name, "wb") as handle:
                    pq.write_table(rows, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                record = {"file": name, "rows": len(new), "arrivals": [v.arrival for v in new]}
                self._save(replace(entry, held=[*entry.held, record]))  # in memory only once durable
                entry.held.append(record)

    def resolve(self, entry: QuarantineEntry, how: str, release_seq: int | None = None) -> None:
        """Keep a tombstone (see the module docstring) and delete the payload: rows files and
        the entry's landing files (a retry's new updates hold their own links to the data).
        ``release_seq``: the update that carries the values held for its keys; until Delta
        holds it, its rows stay too (a restart holds their keys again)."""
        with self._writing:
            self._save(replace(entry, resolved=how, resolved_at=time.time(), release_seq=release_seq))
            entry.resolved, entry.resolved_at, entry.release_seq = how, time.time(), release_seq
        for update in entry.updates:
            if update.rows_file is not None and release_seq is None:
                (self._dir(entry.table, entry.first_seq) / update.rows_file).unlink(missing_ok=True)
            for ref in update.files:
                Path(ref["path"]).unlink(missing_ok=True)

    def prune(self, committed: dict[str, int]) -> int:
        """Forget tombstones whose table's Delta log has moved past them (the WAL no longer
        can replay their updates, nor the update that released their keys' held values)."""
        with self._lock:
            gone = [
                key
                for key, entry in self.entries.items()
                if entry.resolved is not None and committed.get(entry.table, -1) >= entry.through
            ]
            for key in gone:
                del self.entries[key]
        for table, first_seq in gone:
            shutil.rmtree(self._dir(table, first_seq), ignore_errors=True)
        return len(gone)
