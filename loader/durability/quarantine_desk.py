"""What operators do with quarantined updates: see them, retry them, discard them.

The entries themselves (files, tombstones, what a restart must skip) are
``loader/durability/quarantine.py``. A retry submits the entry's updates again through
intake, as new updates under an Idempotency-Key derived from the entry, so a retry
interrupted by a crash is loaded once; its landing files get new hard links, because the
originals go with the entry's tombstone. A discard is the one way acknowledged data
leaves the service unloaded, and it is logged as such.

A latest table without ``order_by`` holds the entry's keys meanwhile (``KeyHolds``,
loader/pending/keyed.py): their later values wait instead of loading, so the retried
values cannot overwrite newer ones. The retry submits the entry's values as one update,
and a discard submits one empty update under a key of its own; that update releases the
held values, which join it after its own rows. Which update releases them is known before
it is numbered (intake numbers a submission with no await after building it), so every
value of the keys numbered before it is held and rides with it, and every later one
loads after it. A restart holds the keys again from the entries (and a tombstone whose
releasing update is not in Delta yet), and a releasing update the WAL replays releases
them again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from loader.abc import HeldValue, KeyHolds, QuarantineMetrics
from loader.core.durable_files import remove_files
from loader.core.errors import Conflict, NotFound, WalWriteFailed
from loader.core.tasks import shielded
from loader.core.updates import Batch
from loader.durability.quarantine import QuarantineEntry, QuarantineStore
from loader.intake.idempotency import IdempotencyStore
from loader.intake.requests import ValidUpdate
from loader.intake.submission import Intake

log = logging.getLogger(__name__)


class QuarantineDesk:
    """The operator's side of the quarantine, over its store and the intake that retries go through."""

    def __init__(
        self, store: QuarantineStore, intake: Intake, metrics: QuarantineMetrics, holds: KeyHolds | None = None
    ) -> None:
        self.store = store
        self.intake = intake
        self.metrics = metrics
        #: Latest tables' held keys (the pending store); None: no key is ever held.
        self.holds = holds
        self._lock = asyncio.Lock()  # one operator action on the quarantine at a time

    def holding(self, table: str) -> bool:
        """Whether a quarantined update of ``table`` holds its keys: a latest table whose
        values are ordered by arrival alone (with ``order_by``, the newest wins whatever the
        order of the loads, so nothing needs to wait)."""
        if self.holds is None or table not in self.intake.schemas:
            return False
        schema = self.intake.schema(table)
        return schema.latest and schema.order_by is None

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        """On the failed batch's worker thread: its payload durable aside, or an exception."""
        keys = self.intake.idempotency.keys_of(batch.table, {u.seq for u in batch.updates})
        self.store.add(batch, error, attempts, keys, holds_keys=self.holding(batch.table))

    def quarantined(self, batch: Batch) -> None:
        """On the event loop, once the batch left its queue: a latest table's keys it holds
        wait from now on (their queued values too)."""
        entry = self.store.get(batch.table, batch.first_seq)
        if self.holds is None or entry is None or not entry.holds_keys:
            return
        if all(u.rows is not None for u in batch.updates):
            parts = [u.rows for u in batch.updates if u.rows is not None]
            rows: pa.Table | None = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        else:  # (a spilled update's segment went with the batch: the entry's copy, a small read)
            rows = self.store.entry_rows(entry)
        if rows is not None:
            self.holds.hold_keys(batch.table, batch.first_seq, rows)

    def keep_held(self, table: str, values: Sequence[HeldValue]) -> None:
        """On a worker thread, before the batch they were held back from commits."""
        self.store.keep_held(table, values)

    async def restore_holds(self, committed: Mapping[str, int]) -> dict[str, tuple[str, int]]:
        """At start-up, before the WAL is replayed: hold the keys of each entry that holds them
        again, and of each tombstone whose releasing update Delta does not hold yet. Returns
        the Idempotency-Keys of releasing updates not known yet (the WAL may replay one: it
        releases its entry's keys there), with their table and entry."""
        holds = self.holds
        unknown: dict[str, tuple[str, int]] = {}
        if holds is None:
            return unknown
        quarantined = self.store.seqs()
        for entry in list(self.store.entries.values()):
            if not entry.holds_keys:
                continue
            release = entry.release_seq if entry.resolved is not None else self._released_by(entry)
            if entry.resolved is not None and release is None:
                continue
            if release is None:
                unknown[entry.requeue_key] = unknown[entry.release_key] = (entry.table, entry.first_seq)
            elif release <= committed.get(entry.table, 0) or release in quarantined.get(entry.table, ()):
                continue  # (in Delta, or set aside itself: its entry holds what it carried)
            rows = await asyncio.to_thread(self.store.entry_rows, entry)
            saved = await asyncio.to_thread(self.store.held_rows, entry)
            if rows is not None:
                holds.hold_keys(entry.table, entry.first_seq, rows, saved=saved, release=release)
        return unknown

    def _released_by(self, entry: QuarantineEntry) -> int | None:
        """The sequence number of the update a retry or discard of ``entry`` submitted, if
        intake knows its Idempotency-Key (the operator's action reached the WAL)."""
        for key in (entry.requeue_key, entry.release_key):
            known = self.intake.idempotency.get(key)
            if known is not None:
                return int(known.response["updates"][0]["sequence"])
        return None

    def count(self, table: str) -> None:
        self.metrics.on_quarantined_now(table, sum(len(e.updates) for e in self.store.active(table)))

    def live_files(self) -> set[str]:
        """Owned landing files that quarantined updates still need."""
        return {f.path for entry in self.store.active() for update in entry.updates for f in update.file_refs()}

    async def settle(self, idempotency: IdempotencyStore, tables: list[str]) -> None:
        """After WAL replay: an entry whose retry (or discard, when it released held values)
        reached the WAL before a crash is resolved."""
        for entry in self.store.active():
            for key, how in ((entry.requeue_key, "retried"), (entry.release_key, "discarded")):
                known = idempotency.get(key)
                if known is None:
                    continue
                release = int(known.response["updates"][0]["sequence"]) if entry.holds_keys else None
                await asyncio.to_thread(self.store.resolve, entry, how, release)
                log.info(
                    "quarantined %s updates %d..%d were %s before a restart",
                    entry.table,
                    entry.first_seq,
                    entry.last_seq,
                    how,
                )
                break
        for table in tables:
            self.count(table)

    def entries(self) -> list[QuarantineEntry]:
        return sorted(self.store.active(), key=lambda e: (e.table, e.first_seq))

    def summaries(self) -> list[dict[str, Any]]:
        """``GET /v1/admin/quarantine``: each entry, with the keys it holds and the values waiting for them."""
        out = []
        for entry in self.entries():
            summary = entry.summary()
            counts = self.holds.held_counts(entry.table, entry.first_seq) if self.holds is not None else None
            summary["held_keys"], summary["held_values"] = counts if counts is not None else (0, 0)
            out.append(summary)
        return out

    def entry(self, table: str, first_seq: int) -> QuarantineEntry:
        entry = self.store.get(table, first_seq)
        if entry is None or entry.resolved is not None:
            raise NotFound(
                f"no quarantined batch of table {table!r} starts at update {first_seq}; "
                "GET /v1/admin/quarantine lists them"
            )
        return entry

    async def retry(self, table: str, first_seq: int) -> dict[str, Any]:
        """Submit the entry's updates again (new sequence numbers, one Idempotency-Key); runs
        to its end even when the request is cancelled (the links it makes, the submission
        and the tombstone belong together)."""
        return await shielded(self._retry(table, first_seq))

    async def _retry(self, table: str, first_seq: int) -> dict[str, Any]:
        async with self._lock:
            entry = self.entry(table, first_seq)
            declared = self.intake.schema(table)
            holds = entry.holds_keys and self.holds is not None
            if declared.latest and declared.order_by is None and not holds:
                # An entry set aside before its keys were held (an older version): their
                # later values loaded meanwhile, and a retry, a new submission, would win
                # over every newer value of its keys (docs/latest-tables.md).
                raise Conflict(
                    f"table {table!r} is a latest table without order_by and its quarantined batch from update "
                    f"{first_seq} did not hold its keys: retrying it would load those values as the newest of their "
                    "keys, over newer ones; discard it and send the keys' current values again",
                    table=table,
                )
            schema = declared.arrow()
            try:
                if holds:  # one update, its values in arrival order: it releases the held ones
                    rows = await asyncio.to_thread(self.store.entry_rows, entry)
                    rows = rows if rows is not None else schema.empty_table()
                    valid = [ValidUpdate(table, None, rows=rows.cast(schema))]
                    links: list[str] = []
                else:
                    valid, links = await asyncio.to_thread(self._requeue_payload, entry, schema)
            except (OSError, pa.ArrowException) as exc:
                raise Conflict(
                    f"the quarantined batch of {table!r} from update {first_seq} cannot be read back ({exc}); "
                    "restore its files under the quarantine directory or discard it",
                    table=table,
                ) from None
            release: list[int] = []
            build = self._releasing(entry, valid, release) if holds else lambda: valid
            try:
                response, replayed = await self.intake.submit_once(
                    entry.requeue_key, entry.requeue_key, build, owned_files=True
                )
            except WalWriteFailed:
                # A crash before the heal may still replay the records: their links stay until
                # the failed group is rolled back for certain (then Intake.heal removes them).
                # (A replay would also release the held keys: the restart looks for it.)
                self.intake.keep_until_healed(links)
                self._not_released(entry, release)
                raise
            except Exception:  # (cancelled only at shutdown: the restart's sweep takes the links)
                self._not_released(entry, release)
                await asyncio.to_thread(remove_files, links)
                raise
            if replayed:
                await asyncio.to_thread(remove_files, links)
            release_seq = self._release_seq(entry, response, release) if holds else None
            try:
                await asyncio.to_thread(self.store.resolve, entry, "retried", release_seq)
            except OSError as exc:  # the updates are in the WAL: a second retry is answered from the key
                log.error(
                    "quarantined %s updates %d..%d were submitted again but stay listed: %s",
                    table,
                    first_seq,
                    entry.last_seq,
                    exc,
                )
            self.metrics.on_quarantine_resolved(table, "retried", len(entry.updates))
            self.count(table)
            log.warning(
                "quarantined %s updates %d..%d submitted again by an operator", table, entry.first_seq, entry.last_seq
            )
            return response

    def _requeue_payload(self, entry: QuarantineEntry, schema: Any) -> tuple[list[ValidUpdate], list[str]]:
        """The entry's updates as new ones; landing files get new hard links (the originals
        go with the tombstone, and a restart may still delete them as the old updates')."""
        valid: list[ValidUpdate] = []
        links: list[str] = []
        try:
            for update in entry.updates:
                rows = self.store.read_rows(entry, update)
                files = []
                for ref in update.file_refs():
                    old = Path(ref.path)
                    new = old.with_name(f"requeued-{os.urandom(6).hex()}-{old.name}")
                    os.link(old, new)
                    links.append(str(new))
                    files.append(type(ref)(str(new), ref.format, ref.size))
                valid.append(
                    ValidUpdate(
                        entry.table, None, rows=rows.cast(schema) if rows is not None else None, files=tuple(files)
                    )
                )
        except BaseException:
            remove_files(links)
            raise
        return valid, links

    def _releasing(
        self, entry: QuarantineEntry, valid: list[ValidUpdate], release: list[int]
    ) -> Callable[[], list[ValidUpdate]]:
        """The submission's payload, built as intake numbers it: the update numbered next
        releases the entry's held keys (intake plans the numbers with no await after this
        call, loader/intake/submission.py), so every value of them numbered before it waits
        and rides with it."""
        holds = self.holds
        assert holds is not None

        def build() -> list[ValidUpdate]:
            seq = self.intake.tables[entry.table].next_seq
            holds.release_keys_at(entry.table, entry.first_seq, seq)
            release.append(seq)
            return valid

        return build

    def _not_released(self, entry: QuarantineEntry, release: list[int]) -> None:
        """The releasing submission failed: the keys stay held."""
        if release and self.holds is not None:
            self.holds.release_keys_at(entry.table, entry.first_seq, None)

    def _release_seq(self, entry: QuarantineEntry, response: dict[str, Any], release: list[int]) -> int:
        seq = int(response["updates"][0]["sequence"])
        if release and release[0] != seq:  # (intake awaited between building and numbering: a defect)
            log.error(
                "the update releasing the keys of quarantined %s update %d was numbered %d, not %d as planned",
                entry.table,
                entry.first_seq,
                seq,
                release[0],
            )
            if self.holds is not None:
                self.holds.release_keys_at(entry.table, entry.first_seq, seq)
        return seq

    async def discard(self, table: str, first_seq: int) -> dict[str, Any]:
        """Drop the entry's updates for good: the one way acknowledged data leaves unloaded.
        The later values its keys held load (an empty update releases them). Runs to its end
        even when the request is cancelled (the releasing submission and the tombstone
        belong together)."""
        return await shielded(self._discard(table, first_seq))

    async def _discard(self, table: str, first_seq: int) -> dict[str, Any]:
        async with self._lock:
            entry = self.entry(table, first_seq)
            release_seq = None
            if entry.holds_keys and self.holds is not None:
                empty = [ValidUpdate(table, None, rows=self.intake.schema(table).arrow().empty_table())]
                release: list[int] = []
                try:
                    response, _ = await self.intake.submit_once(
                        entry.release_key, entry.release_key, self._releasing(entry, empty, release), owned_files=True
                    )
                except BaseException:
                    self._not_released(entry, release)
                    raise
                release_seq = self._release_seq(entry, response, release)
            await asyncio.to_thread(self.store.resolve, entry, "discarded", release_seq)
            self.metrics.on_quarantine_resolved(table, "discarded", len(entry.updates))
            self.count(table)
            log.warning(
                "quarantined %s updates %d..%d discarded by an operator (%s)",
                table,
                entry.first_seq,
                entry.last_seq,
                entry.error,
            )
            return {**entry.summary(), "resolved": "discarded"}
