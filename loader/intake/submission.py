"""The intake's front door: one call behind each submit route turns a request into acknowledged updates.

The HTTP layer authenticates the caller and hands over what it read (path, query,
headers, a way to read the body); intake runs the domain steps in this order, and a
refusal at any step changes nothing:

1. the Idempotency-Key header (400); for ``POST /v1/tables/{table}/updates`` the table
   name (404 for a name no table can have), the caller's permission for the table (403)
   and the table itself (404), all before the body is read;
2. the body (413 past ``max_body_bytes``) and its parsing (400, 415, 422; an Arrow IPC or
   Parquet body: loader/intake/columnar_bodies.py, its columns checked here, 413 for a bomb); for
   ``POST /v1/updates`` the tables named inside it are checked now (403, 404); then the
   memory its rows would take as columns (413);
3. under the Idempotency-Key (a retry gets the first answer): room in the pending store
   (503 + Retry-After), the rows against the schema (422), landing files copied into
   owned storage, sequence numbers and release times, the WAL append (503 if the log
   fails; intake then stays closed until the log is healed), and the 202 answer, which
   is stored with the key in the same WAL record.

Durable updates go on to the dispatcher strictly in sequence order per table: an append
that finishes early waits in ``TableSequence.reorder`` for the ones numbered before it.
The later stages are reached through the ports of ``loader.abc`` only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from loader.abc import Admission, BeyondCapacity, IntakeMetrics, ReleaseQueue, SpillFull, UpdateLog
from loader.core import failpoints
from loader.core.durable_files import remove_files
from loader.core.errors import Invalid, TooLarge, Unavailable, WalWriteFailed, retired_table, unknown_table
from loader.core.schema import Column, TableSchema
from loader.core.tasks import shielded
from loader.core.updates import Update, WalRecord
from loader.intake.idempotency import IdempotencyStore, check_key, request_hash
from loader.intake.inference import (
    MAX_INFERRED_DEPTH,
    grown_columns,
    infer_columns,
    known_fields,
    nested_columns,
)
from loader.intake.landing import accept_files
from loader.intake.reading import CheckedUpdate, StaleSchema, changed_by_feed, checked, checked_against, read_single
from loader.intake.requests import (
    UpdateRequest,
    ValidUpdate,
    check_expansion,
    check_table_name,
    parse_multi,
)
from loader.intake.rows import RESEND, rows_to_arrow
from loader.intake.sequencing import TableSequence, iso, plan_updates

log = logging.getLogger(__name__)

#: How often a failed WAL is tried again (loader/ops/maintenance.py), and the Retry-After of
#: requests refused meanwhile.
WAL_HEAL_SECONDS = 1.0


@dataclass(frozen=True)
class SubmitRequest:
    """A submit request as the HTTP layer read it. The body is read when intake asks for it,
    after the checks that must not wait for a large body (unknown table, no permission)."""

    path: str
    query: str
    content_type: str | None
    #: The Idempotency-Key header as sent (checked here: 400 when malformed).
    idempotency_key: str | None
    read_body: Callable[[], Awaitable[bytes]]
    #: Raises ``Forbidden`` when the caller may not submit to the table.
    permit: Callable[[str], None]
    #: The ``data_until`` query parameter (single-update route only).
    data_until: str | None = None


@dataclass
class Ack:
    table: str
    sequence: int
    release: float

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "sequence": self.sequence,
            "release_time": self.release,
            "release_time_iso": iso(self.release),
        }


def acks_body(acks: list[Ack]) -> dict[str, Any]:
    """The 202 body; also stored with the Idempotency-Key and sent again to a retry."""
    return {"updates": [a.as_json() for a in acks]}


class Intake:
    """Acknowledges updates once the WAL holds them, and hands them on in sequence order.

    Holds each registered table's schema and sequence counters (``TableSequence``), the
    Idempotency-Key store, and whether intake is open: closed until recovery is done,
    while the WAL's disk is failing (until ``heal`` rolls the log back and it takes
    writes again), and from the start of a shutdown.
    """

    def __init__(
        self,
        *,
        log: UpdateLog,
        admission: Admission,
        queue: ReleaseQueue,
        metrics: IntakeMetrics,
        idempotency: IdempotencyStore,
        landing_dir: Path,
        owned_dir: Path,
        max_body_bytes: int,
        max_file_bytes: int,
        max_clock_skew: float,
        spill_retry_after: float,
    ) -> None:
        self.log = log
        self.admission = admission
        self.queue = queue
        self.metrics = metrics
        self.idempotency = idempotency
        self.landing_dir = landing_dir
        #: Where landing files are copied to (``<owned_dir>/<table>/``) before the 202.
        self.owned_dir = owned_dir
        self.max_body_bytes = max_body_bytes
        self.max_file_bytes = max_file_bytes
        self.max_clock_skew = max_clock_skew
        self.spill_retry_after = spill_retry_after
        self.tables: dict[str, TableSequence] = {}
        #: Registered tables whose counters wait for their Delta log to be read (a restart
        #: opens intake first: loader/durability/recovery.py); their updates wait here.
        self.unread: dict[str, asyncio.Future[None]] = {}
        #: Unread tables a request waits for, read next (the service's background reader).
        self.wanted: list[str] = []
        #: Tables whose Delta log could not be read: why (their updates get a 503 saying it).
        self.unreadable: dict[str, str] = {}
        self.schemas: dict[str, TableSchema] = {}
        #: Each table's ``on_new_fields``: reject (absent), ignore or add (loader/core/tables.py).
        self.new_fields: dict[str, str] = {}
        #: Adds nullable columns to a table (the service's schema change: the catalog, then the
        #: Delta table, then ``schemas``), for a table whose rows bring new fields ("add").
        self.add_columns: Callable[[str, list[Column]], Awaitable[object]] | None = None
        #: How deep an inferred field's value may nest.
        self.max_depth = MAX_INFERRED_DEPTH
        #: Tables an operator retired, by name: ``retiring`` (registered, what they acknowledged
        #: still loads) or ``retired`` (gone). Producers get 410 for them, not 404: the name
        #: was real, and the answer says how to use it again.
        self.retired: dict[str, str] = {}
        #: Retired tables gone from intake -> the last sequence number they handed out: WAL
        #: records at or below it are done (WAL truncation counts them as committed).
        self.retired_floor: dict[str, int] = {}
        self.accepting = False
        #: Why intake is closed by the WAL's disk (full, read-only); ``heal`` reopens it.
        self.wal_fault: str | None = None
        #: Landing-file copies of requests the WAL refused, removed once it is healed.
        self._refused_copies: list[str] = []

    # -- tables and the gate ---------------------------------------------------------------
    def add_table(self, name: str, schema: TableSchema, sequence: TableSequence, new_fields: str = "reject") -> None:
        self.schemas[name] = schema
        self.tables[name] = sequence
        self.new_fields[name] = new_fields
        self.retired.pop(name, None)  # (a retired name registered again: a new table)
        self.retired_floor.pop(name, None)
        waiting = self.unread.pop(name, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def defer_table(self, name: str, schema: TableSchema, new_fields: str = "reject") -> None:
        """A registered table known by name and schema whose counters come with ``add_table``
        once its Delta log is read: its updates are checked meanwhile, numbered after."""
        self.schemas[name] = schema
        self.new_fields[name] = new_fields
        self.retired.pop(name, None)
        self.retired_floor.pop(name, None)
        self.unread[name] = asyncio.get_running_loop().create_future()

    async def tables_read(self, tables: set[str]) -> None:
        """Wait until every one of ``tables`` has its counters (at once when all have: the
        usual case, no await)."""
        waiting = [(name, self.unread[name]) for name in tables if name in self.unread]
        if not waiting:
            return
        self.wanted.extend(name for name, _ in waiting if name not in self.unreadable)
        for name, future in waiting:
            await asyncio.shield(future)
            why = self.unreadable.get(name)
            if why is not None:
                raise Unavailable(
                    f"table {name!r} takes no updates: its Delta log could not be read at start-up ({why}); "
                    "repair the table's _delta_log (GET /readyz names it) and restart the loader",
                    retry_after=self.spill_retry_after,
                )

    def unreadable_table(self, name: str, why: str) -> None:
        """The table's Delta log could not be read: its updates are refused, not held forever."""
        self.unreadable[name] = why
        waiting = self.unread.get(name)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def schema(self, table: str) -> TableSchema:
        schema = self.schemas.get(table)
        if schema is None:
            state = self.retired.get(table)
            raise unknown_table(table) if state is None else retired_table(table, state)
        return schema

    def check_open(self, table: str) -> None:
        """410 for a retired or retiring table. Producers' routes only: a quarantined
        update of a retiring table may still be retried (so the table can drain)."""
        state = self.retired.get(table)
        if state is not None:
            raise retired_table(table, state)

    def remove_table(self, table: str, last_seq: int) -> None:
        """The table is retired and drained: it leaves; its name answers 410 from now on."""
        self.schemas.pop(table, None)
        self.tables.pop(table, None)
        self.new_fields.pop(table, None)
        self.retired[table] = "retired"
        self.retired_floor[table] = last_seq

    def loaded(self, table: str, last_seq: int) -> int:
        """Delta holds the table's updates up to ``last_seq``; returns the new committed sequence."""
        runtime = self.tables[table]
        runtime.committed_seq = max(runtime.committed_seq, last_seq)
        return runtime.committed_seq

    def open(self) -> None:
        self.accepting = True

    def close(self) -> None:
        self.accepting = False

    # -- the two submit routes ----------------------------------------------------------------
    async def submit_one(self, table: str, request: SubmitRequest) -> tuple[dict[str, Any], bool]:
        """``POST /v1/tables/{table}/updates``: the 202 body, and whether it is a stored answer."""
        key = check_key(request.idempotency_key)
        check_table_name(table)  # 404 quoting no more than a few characters of a hostile name
        request.permit(table)
        self.check_open(table)  # 410 before reading the body
        schema = self.schema(table)  # 404 before reading the body
        body = await request.read_body()
        parsed = await read_single(
            body,
            request.content_type,
            table,
            request.data_until,
            schema,
            self.new_fields.get(table, "reject"),
            self.max_body_bytes,
        )
        (parsed,) = await self.fields_from_feed([parsed])
        check_expansion([parsed], {table: self.schema(table)}, self.max_body_bytes, len(body))
        # Only a request with a key is ever looked up by it (a SHA-256 of a 200 KB body: 0.1 ms).
        digest = request_hash("POST", request.path, request.query, body) if key is not None else ""
        return await self.submit_once(key, digest, lambda: self.validate([parsed]))

    async def submit_many(self, request: SubmitRequest) -> tuple[dict[str, Any], bool]:
        """``POST /v1/updates``: several updates of several tables, accepted all or none."""
        key = check_key(request.idempotency_key)
        body = await request.read_body()
        parsed = parse_multi(body, request.content_type)
        schemas = {}
        for item in parsed:
            request.permit(item.table)
            self.check_open(item.table)
            schemas[item.table] = self.schema(item.table)
        if any(schema.exact_numbers for schema in schemas.values()):
            parsed = parse_multi(body, request.content_type, exact=True)
        parsed = await self.fields_from_feed(parsed)
        check_expansion(parsed, {t: self.schema(t) for t in schemas}, self.max_body_bytes, len(body))
        digest = request_hash("POST", request.path, body) if key is not None else ""
        return await self.submit_once(key, digest, lambda: self.validate(parsed))

    async def submit_checked(
        self, items: list[CheckedUpdate], key: str | None, digest: str
    ) -> tuple[dict[str, Any], bool]:
        """Updates an acceptor process (api/acceptors/) read and checked against the schemas
        their fingerprints name: from here on as ``submit_one`` and ``submit_many``. The
        acceptor did the steps before (key, table name, permission, body, rows); what only
        this process knows is checked again: the table open, its schema the one checked
        against (``StaleSchema`` otherwise: the acceptor sends the request as it came)."""
        valid = []
        for item in items:
            self.check_open(item.table)
            schema = self.schema(item.table)
            fingerprint, arrow = checked_against(schema, self.new_fields.get(item.table, "reject"))
            if item.fingerprint != fingerprint:
                raise StaleSchema(item.table)
            # A copy of its own: the rows then hold neither the rest of the acceptor's frame (the
            # other updates, the head) nor its offsets, which Arrow's 8-byte alignment wants.
            message = bytes(item.message)
            try:
                batch = pa.ipc.read_record_batch(pa.py_buffer(message), arrow)
                batch.validate()
            except (pa.ArrowException, ValueError) as exc:  # (not what it was checked as: read it again)
                raise StaleSchema(item.table) from exc
            rows = pa.Table.from_batches([batch])
            valid.append(ValidUpdate(item.table, item.data_until, rows=rows, message=message))
        return await self.submit_once(key, digest, lambda: valid)

    async def fields_from_feed(self, requests: list[UpdateRequest]) -> list[UpdateRequest]:
        """Rows' fields their table lacks, by the table's ``on_new_fields``: ``reject`` leaves
        them to validation (a 422 naming the field), ``ignore`` drops them, ``add`` adds them
        as nullable columns (durably: the change is in the catalog and the Delta table
        before this returns, so before the update can be acknowledged). A field another
        request added meanwhile with another type: validation refuses this one, naming it."""
        out = []
        for request in requests:
            policy = self.new_fields.get(request.table, "reject")
            schema = self.schema(request.table)
            if not changed_by_feed(request, schema, policy):
                out.append(request)
                continue
            nested = nested_columns(schema)
            if policy == "add":
                columns = infer_columns(request.rows, schema, request.table, self.max_depth)
                if columns:
                    if self.add_columns is None:
                        raise Unavailable(f"table {request.table!r} cannot add columns now; retry later")
                    # The rows must be valid under the schema they ask for before it is the
                    # table's: a refused request changes nothing, its new fields included.
                    wanted = _with_columns(schema, columns, request.table)
                    kept = frozenset(wanted.names), nested_columns(wanted)
                    rows_to_arrow([known_fields(row, *kept) for row in request.rows], wanted, request.table)
                    await self.add_columns(request.table, columns)
                    schema = self.schema(request.table)
                    nested = nested_columns(schema)
            # Dropped: with "ignore", every new field; with "add", those only ever null (or an
            # empty list or object) so far, which say nothing of a type and read back as null.
            names = frozenset(schema.names)
            rows = [known_fields(row, names, nested) for row in request.rows]
            out.append(dataclasses.replace(request, rows=rows))
        return out

    # -- submitting ---------------------------------------------------------------------------
    def validate(self, requests: list[UpdateRequest]) -> list[ValidUpdate]:
        """Check every update of a request against its table (no side effects)."""
        valid: list[ValidUpdate] = []
        for request in requests:
            schema = self.schema(request.table)
            if request.columns is not None or request.rows is not None:
                valid.append(checked(request, schema))
            else:
                if request.files and schema.latest:
                    raise Invalid(
                        f"table {request.table!r} is a latest table (one row per key, loaded by upsert) and takes its "
                        "rows in the request body; landing files are for append tables"
                    )
                valid.append(ValidUpdate(request.table, request.data_until, files=tuple(request.files or ())))
        return valid

    async def submit_once(
        self,
        key: str | None,
        request_hash: str,
        valid_thunk: Callable[[], list[ValidUpdate]],
        *,
        owned_files: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Submit under an Idempotency-Key: a retry gets the first answer (and True), not a second load.

        A retry that arrives while the first attempt is still in flight waits for it
        (``IdempotencyStore.reserve``); validation runs only when the work is really done.
        The work runs to its end even when the request is cancelled (``loader.core.tasks``).
        """
        return await shielded(self._submit_once(key, request_hash, valid_thunk, owned_files))

    async def _submit_once(
        self,
        key: str | None,
        request_hash: str,
        valid_thunk: Callable[[], list[ValidUpdate]],
        owned_files: bool,
    ) -> tuple[dict[str, Any], bool]:
        if key is None:
            return (await self._submit(valid_thunk(), owned_files=owned_files))[1], False
        async with self.idempotency.reserve(key, request_hash) as slot:
            if slot.response is not None:
                return slot.response, True
            _, response = await self._submit(
                valid_thunk(), idempotency_key=key, request_hash=request_hash, owned_files=owned_files
            )
            slot.complete(response)
            return response, False

    async def submit(
        self,
        valid: list[ValidUpdate],
        *,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        owned_files: bool = False,
    ) -> list[Ack]:
        """Number, log and acknowledge validated updates. ``owned_files``: the updates'
        files are already the service's (a quarantine retry), not landing files to take."""
        acks, _ = await self._submit(
            valid, idempotency_key=idempotency_key, request_hash=request_hash, owned_files=owned_files
        )
        return acks

    async def _submit(
        self,
        valid: list[ValidUpdate],
        *,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        owned_files: bool = False,
    ) -> tuple[list[Ack], dict[str, Any]]:
        """``submit``, and the 202 body (built once: it is also the WAL's stored answer)."""
        if self.wal_fault is not None:
            self.metrics.on_refused("wal_fault")
            raise Unavailable(
                f"intake is closed: {self.wal_fault}; it reopens by itself once the write-ahead log's disk is "
                "writable again (GET /readyz shows the fault); retry later",
                retry_after=WAL_HEAL_SECONDS,
            )
        if not self.accepting:
            raise Unavailable("the service is not accepting updates (starting up or shutting down); retry shortly")
        admitted = sum(item.resident_bytes for item in valid)
        try:
            self.admission.admit(admitted)  # counted as coming until _appended has queued it
        except BeyondCapacity as exc:
            raise TooLarge(f"{exc}: send these updates in smaller requests", **exc.details) from None
        except SpillFull as exc:
            self.metrics.on_refused("spill_full")
            raise Unavailable(
                f"pending updates fill memory and the spill disk: {exc}; retry after the loader catches up",
                retry_after=self.spill_retry_after,
            ) from None
        try:
            if self.unread:  # (a restart's first seconds: loader/durability/recovery.py)
                await self.tables_read({item.table for item in valid})
            has_files = not owned_files and any(item.files for item in valid)
            taken = await self._take_files_shielded(valid) if has_files else []
            try:
                if not owned_files:
                    # Again with no await before the numbering: a table retired while the
                    # request was read gets no sequence number after the DELETE's answer.
                    for item in valid:
                        self.check_open(item.table)
                updates, planned = plan_updates(valid, self.tables, time.time(), self.max_clock_skew)
            except BaseException:
                await asyncio.to_thread(remove_files, taken)  # refused: nothing of it is kept
                raise
        except BaseException:
            self.admission.release(admitted)
            raise
        acks = [Ack(u.table, u.seq, u.release) for u in updates]
        response = acks_body(acks)
        records = [
            WalRecord(
                update=u,
                idempotency_key=idempotency_key if k == 0 else None,
                request_hash=request_hash,
                response=response if k == 0 else None,
                rows_message=item.message,
            )
            for k, (u, item) in enumerate(zip(updates, valid, strict=True))
        ]
        try:
            append = self.log.append_future(records)
        except Exception as refused:  # (a closed or failed log): one path for every failure, below
            append = asyncio.get_running_loop().create_future()
            append.set_exception(refused)
        append.add_done_callback(lambda done: self._appended(updates, planned, done, admitted))
        try:
            # Shielded: a request cancelled mid-append (client gone) still has its updates
            # written, and ``_appended`` still queues them for loading.
            await asyncio.shield(append)
        except Exception:  # (a cancellation is a BaseException and passes through)
            # A crash before the log is healed may still replay these records: their copies
            # stay until heal() has rolled the group back for certain.
            self._refused_copies.extend(taken)
            raise WalWriteFailed(
                "the write-ahead log could not be written; the update was not accepted (should the service crash "
                "before the log is repaired, it may still be loaded): retry it with the same Idempotency-Key once "
                "GET /readyz answers 200",
                retry_after=WAL_HEAL_SECONDS,
            ) from None
        failpoints.hit("intake.after-wal")
        return acks, response

    async def _take_files_shielded(self, valid: list[ValidUpdate]) -> list[str]:
        """``_take_files`` on a thread; when the request is cancelled meanwhile (client gone),
        the copies it still makes are removed once it is done, not left behind."""
        work = asyncio.ensure_future(asyncio.to_thread(self._take_files, valid))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(lambda w: w.cancelled() or w.exception() or remove_files(w.result()))
            raise

    def _take_files(self, valid: list[ValidUpdate]) -> list[str]:
        """Validate landing files and copy them into service storage (worker thread); returns
        the copies. A refused file of a later update removes the earlier updates' copies."""
        taken: list[str] = []
        seen: set[tuple[int, int, str]] = set()  # a file named twice for a table is refused
        try:
            for item in valid:
                if item.files:
                    item.files = accept_files(
                        list(item.files),
                        self.landing_dir,
                        self.owned_dir / item.table,
                        self.schema(item.table),
                        item.table,
                        seen,
                        self.max_file_bytes,
                    )
                    taken.extend(f.path for f in item.files)
        except BaseException:
            remove_files(taken)
            raise
        return taken

    def _appended(self, updates: list[Update], tables: set[str], done: asyncio.Future[None], admitted: int = 0) -> None:
        """After the WAL append: queue the updates for loading, or leave gaps if it failed."""
        failed = done.cancelled() or done.exception() is not None
        try:
            for u in updates:
                self.tables[u.table].reorder[u.seq] = None if failed else u
            if not failed:
                for table, count in Counter(u.table for u in updates).items():
                    self.metrics.on_received(table, count)
            durable: list[Update] = []
            for table in tables:
                self._drain(table, durable)
            if durable:
                self.queue.released_many(durable)
        finally:
            self.admission.release(admitted)  # in the store now (or refused): never leaked
        if failed and not done.cancelled() and self.wal_fault is None:
            self.wal_fault = f"the write-ahead log cannot be written ({done.exception()})"
            self.metrics.on_intake_fault(True)
            log.error("WAL append failed (%s); intake closed until the log can be written again", done.exception())

    def _drain(self, table: str, durable: list[Update]) -> None:
        """Collect the table's durable updates for the dispatcher, strictly in sequence order."""
        runtime = self.tables[table]
        while runtime.next_to_release in runtime.reorder:
            update = runtime.reorder.pop(runtime.next_to_release)
            runtime.next_to_release += 1
            if update is not None:
                durable.append(update)

    # -- the WAL's disk ---------------------------------------------------------------------
    def keep_until_healed(self, copies: list[str]) -> None:
        """Copies named by records of a failed WAL group: a crash before the heal may still
        replay them, so they go only once ``heal`` has rolled the group back."""
        self._refused_copies.extend(copies)

    async def heal(self) -> None:
        """Reopen intake once the WAL's disk takes writes again (called every second by
        loader/ops/maintenance.py); the failed group is rolled back first (``UpdateLog.heal``)."""
        if self.wal_fault is None:
            return
        # Copies refused before the heal belong to groups it rolls back; a request still
        # in flight may yet add a group that fails after it, whose copies wait for the next.
        copies, self._refused_copies = self._refused_copies, []
        if not await asyncio.to_thread(self.log.heal):
            self._refused_copies[:0] = copies
            return
        await asyncio.to_thread(remove_files, copies)
        if self.log.failed is None:  # (not failed again meanwhile: then the next call heals)
            self.wal_fault = None
            self.metrics.on_intake_fault(False)
            log.warning("intake reopened: the write-ahead log can be written again")


def _with_columns(schema: TableSchema, columns: list[Column], table: str) -> TableSchema:
    """``schema`` grown by ``columns`` (``grown_columns``), or Invalid naming why it is no schema."""
    try:
        return TableSchema.model_validate({**schema.model_dump(), "columns": grown_columns(schema.columns, columns)})
    except ValidationError as exc:
        problems = "; ".join(e["msg"] for e in exc.errors())
        raise Invalid(f"table {table!r}: its new fields do not make a valid schema: {problems}; {RESEND}") from None
