"""What operators do with quarantined batches: see them, retry them, discard them.

The entries themselves (files, tombstones, what a restart must skip) are
``loader/durability/quarantine.py``. A retry submits the entry's updates again through
intake, as new updates under an Idempotency-Key derived from the entry, so a retry
interrupted by a crash is loaded once; its landing files get new hard links, because the
originals go with the entry's tombstone. A discard is the one way acknowledged data
leaves the service unloaded, and it is logged as such.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from loader.abc import QuarantineMetrics
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

    def __init__(self, store: QuarantineStore, intake: Intake, metrics: QuarantineMetrics) -> None:
        self.store = store
        self.intake = intake
        self.metrics = metrics
        self._lock = asyncio.Lock()  # one operator action on the quarantine at a time

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        """On the failed batch's worker thread: its payload durable aside, or an exception."""
        self.store.add(batch, error, attempts)

    def count(self, table: str) -> None:
        self.metrics.on_quarantined_now(table, sum(len(e.updates) for e in self.store.active(table)))

    def live_files(self) -> set[str]:
        """Owned landing files that quarantined updates still need."""
        return {f.path for entry in self.store.active() for update in entry.updates for f in update.file_refs()}

    async def settle(self, idempotency: IdempotencyStore, tables: list[str]) -> None:
        """After WAL replay: an entry whose retry reached the WAL before a crash is resolved."""
        for entry in self.store.active():
            if idempotency.get(entry.requeue_key) is not None:
                await asyncio.to_thread(self.store.resolve, entry, "retried")
                log.info(
                    "quarantined %s updates %d..%d were retried before a restart",
                    entry.table,
                    entry.first_seq,
                    entry.last_seq,
                )
        for table in tables:
            self.count(table)

    def entries(self) -> list[QuarantineEntry]:
        return sorted(self.store.active(), key=lambda e: (e.table, e.first_seq))

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
            if declared.latest and declared.order_by is None:
                # A retry is a new submission: its values would arrive last and win over
                # every newer value of their keys (docs/latest-tables.md).
                raise Conflict(
                    f"table {table!r} is a latest table without order_by: retrying its quarantined batch from update "
                    f"{first_seq} would load those values as the newest of their keys, over newer ones; discard it "
                    "and send the keys' current values again",
                    table=table,
                )
            schema = declared.arrow()
            try:
                valid, links = await asyncio.to_thread(self._requeue_payload, entry, schema)
            except (OSError, pa.ArrowException) as exc:
                raise Conflict(
                    f"the quarantined batch of {table!r} from update {first_seq} cannot be read back ({exc}); "
                    "restore its files under the quarantine directory or discard it",
                    table=table,
                ) from None
            try:
                response, replayed = await self.intake.submit_once(
                    entry.requeue_key, entry.requeue_key, lambda: valid, owned_files=True
                )
            except WalWriteFailed:
                # A crash before the heal may still replay the records: their links stay until
                # the failed group is rolled back for certain (then Intake.heal removes them).
                self.intake.keep_until_healed(links)
                raise
            except Exception:  # (cancelled only at shutdown: the restart's sweep takes the links)
                await asyncio.to_thread(remove_files, links)
                raise
            if replayed:
                await asyncio.to_thread(remove_files, links)
            try:
                await asyncio.to_thread(self.store.resolve, entry, "retried")
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

    async def discard(self, table: str, first_seq: int) -> dict[str, Any]:
        """Drop the entry's updates for good: the one way acknowledged data leaves unloaded."""
        async with self._lock:
            entry = self.entry(table, first_seq)
            await asyncio.to_thread(self.store.resolve, entry, "discarded")
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
