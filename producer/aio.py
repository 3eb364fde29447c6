"""``AsyncLoaderProducer``: the producer on asyncio (``LoaderProducer`` runs it on a thread).

One background task closes updates when they are full or their linger time is up, forms
requests (``batching.plan``) and starts a delivery task per request, at most
``max_in_flight`` at once and one per table. A delivery retries until the service
acknowledges (202), refuses (a 4xx other than 429: ``RequestRefused``) or
``delivery_timeout`` runs out (``DeliveryTimeout``), always with the same key and body
(``retry.py``). A refusal names its own send: a refused multi-table request is split and
its updates go out alone; a refused update that coalesced several sends (422: its rows, 413:
its size) is split into its sends (``Batch.split``), each alone under its own key, so only
the send with the bad row fails, with the row counted as that send counts it.
``send`` waits for room in the buffer up to ``max_block``.

A durable producer (``state_dir``) journals every accepted row before ``send`` returns and
every request (and every split of a refused update) before its first attempt
(``journal.py``); at start it sends the requests an earlier run left unanswered, as they
were, before anything new of their tables. Leaving its ``with`` block waits
``close_timeout`` at most: what is left stays journaled (``ClosedWithPending``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from producer.batching import Accumulator, Batch, Request, Send, plan, request_for, row_json
from producer.columns import arrow_available, arrow_schema, as_table_types, columns_of, ipc_bodies, json_rows
from producer.errors import (
    BufferFull,
    ClosedWithPending,
    DeliveryTimeout,
    ProducerClosed,
    ProducerError,
    RequestRefused,
)
from producer.journal import COMPACT_BYTES, Journal, Recovered
from producer.retry import backoff, retried, retry_after
from producer.settings import ProducerSettings

log = logging.getLogger("producer")

#: The service's limit on an Idempotency-Key (printable ASCII).
MAX_KEY_LENGTH = 200
#: Landing files the service reads itself; other suffixes are rows (JSON lines, or a JSON array).
LANDING_SUFFIXES = (".parquet", ".csv")
ROW_SUFFIXES = (".ndjson", ".jsonl", ".json")
#: Refusals about an update's rows (422) or size (413): an update that coalesced several
#: sends is split into them, each sent alone. Other refusals (unknown table, no right to
#: it) would refuse every part alike.
SPLIT_STATUSES = frozenset({413, 422})
#: How the service ends a row error: the update is the unit it speaks of, the send is ours.
SERVICE_RESEND = "nothing of the update was accepted: fix it and send the whole update again"


@dataclass(frozen=True, slots=True)
class Ack:
    """The service's acknowledgement of the update that holds (the last of) a send's rows."""

    table: str
    #: The update's sequence number at the service (``GET /v1/tables/{table}``'s last_sequence).
    sequence: int
    release_time: float
    #: The update's own key (``<producer_id>.<token>/<table>/<producer sequence>``).
    key: str
    #: The service answered from its idempotency store: an earlier attempt had landed.
    replayed: bool
    #: The Idempotency-Key the request carrying it was sent under (the update's own key, or,
    #: for several updates sent together, the request's): the one the service remembers.
    request_key: str = ""


@dataclass(frozen=True, slots=True)
class ProducerMetrics:
    """What the producer did so far (``metrics()``): counts since it started."""

    sends: int
    rows: int
    #: Updates (batches) and requests sent, attempts including retries.
    updates: int
    requests: int
    attempts: int
    retried: int
    acknowledged: int
    replayed: int
    refused: int
    timed_out: int
    #: Bytes of rows buffered now (accepted, not yet acknowledged), requests in flight now.
    buffered_bytes: int
    in_flight: int
    #: Updates an earlier run of a durable producer left, taken over at start.
    recovered: int


def _rows_of_file(path: Path) -> list[str]:
    """A file's rows as JSON text: one object a line (``.ndjson``, ``.jsonl``) or a JSON array."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        return [row_json(row) for row in json.loads(text)]
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):  # (not splitlines: U+2028 may be in a value)
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}: line {number} is not JSON ({exc}); nothing was sent") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}: line {number} is not a JSON object (a row); nothing was sent")
        rows.append(line if line.isascii() else row_json(value))  # ASCII: its length is its bytes
    return rows


@dataclass(frozen=True, slots=True)
class Prepared:
    """A send checked and serialised (``prepare``: no producer state, any thread)."""

    table: str
    texts: list[str]
    files: list[str] | None
    size: int
    data_until: float | None
    key: str | None
    checkpoint: str | None
    #: A send of columns as Arrow IPC: one (stream, first row, rows) per update it fills.
    arrow: list[tuple[bytes, int, int]] | None = None

    @property
    def count(self) -> int:
        return sum(n for _, _, n in self.arrow) if self.arrow is not None else len(self.texts)


@dataclass(frozen=True, slots=True)
class ColumnsAs:
    """How a send of columns is to be serialised: JSON rows (``schema`` None), or Arrow IPC of
    the table's ``schema`` in updates of at most ``max_rows`` rows and about ``max_bytes``."""

    schema: Any = None  # a pyarrow Schema
    max_rows: int = 0
    max_bytes: int = 0


def prepare(
    table: str,
    rows: Iterable[dict[str, Any]] | Any | None,
    file: str | Path | None,
    data_until: float | None,
    key: str | None,
    checkpoint: str | None,
    columns: ColumnsAs | None = None,
) -> Prepared:
    """Check a send and serialise its rows; ValueError/TypeError say what is wrong (and
    nothing is buffered: every check a send can fail happens here, before it is taken).
    ``rows`` may be columns (a pyarrow Table or RecordBatch, a pandas DataFrame): as
    ``columns`` says, Arrow IPC or JSON rows (producer/columns.py)."""
    if isinstance(data_until, dt.datetime):
        data_until = data_until.timestamp()
    if data_until is not None and (
        isinstance(data_until, bool) or not isinstance(data_until, int | float) or not math.isfinite(data_until)
    ):
        raise ValueError(f"data_until: Unix seconds (a finite number) or a datetime, got {data_until!r}")
    if data_until is not None:
        data_until = float(data_until)
    if key is not None and not (0 < len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable()):
        raise ValueError(f"key: 1 to {MAX_KEY_LENGTH} printable ASCII characters, got {key!r}")
    files: list[str] | None = None
    texts: list[str] = []
    if file is not None:
        if rows is not None:
            raise ValueError("send takes rows or a file, not both")
        path = Path(file)
        if path.suffix.lower() in LANDING_SUFFIXES:
            files = [str(path.resolve())]
        elif path.suffix.lower() in ROW_SUFFIXES:
            texts = _rows_of_file(path)
        else:
            raise ValueError(f"{path}: rows are .ndjson, .jsonl or .json; landing files .parquet or .csv")
    elif rows is not None:
        data = columns_of(rows)
        if data is not None and columns is not None and columns.schema is not None:
            if data.num_rows == 0:
                raise ValueError("send with no rows: nothing to load")
            data = as_table_types(data, columns.schema, table)
            # Under the caller's own key the send is one update: the key names exactly its rows.
            limits = (data.num_rows, 1 << 62) if key is not None else (columns.max_rows, columns.max_bytes)
            bodies = ipc_bodies(data, *limits)
            size = sum(len(body) for body, _, _ in bodies)
            return Prepared(table, [], None, size, data_until, key, checkpoint, bodies)
        texts = [row_json(row) for row in (json_rows(data) if data is not None else rows)]
    else:
        raise ValueError("send needs rows or a file")
    if files is None and not texts:
        raise ValueError("send with no rows: nothing to load")
    size = sum(len(t) + 1 for t in texts) if files is None else sum(len(f) for f in files)
    return Prepared(table, texts, files, size, data_until, key, checkpoint)


class AsyncLoaderProducer:
    """Sends rows to the loader service exactly once (docs/producers.md).

    ``async with AsyncLoaderProducer(url=..., token=...) as producer:``, then
    ``ack = await (await producer.send("orders", rows))``: the first await returns once the
    rows are buffered (journaled, for a durable producer), the second once the service
    acknowledged them.
    """

    def __init__(
        self,
        settings: ProducerSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **overrides: Any,
    ) -> None:
        base = settings or ProducerSettings()
        self.settings = s = base.model_copy(update=overrides) if overrides else base
        if overrides:
            ProducerSettings.model_validate(s.model_dump())  # the overrides checked like the settings
        self._transport = transport
        self._clock, self._sleep = clock, sleep
        self._rng = random.Random(s.seed)
        # Keys: the id and this run's token; a durable producer's is its journal's epoch (``start``).
        self.prefix = f"{s.producer_id or 'producer'}.{uuid.uuid4().hex[:12]}"
        self._journal = Journal(s.state_dir) if s.state_dir is not None else None
        self._acc = Accumulator(s.max_batch_rows, s.max_batch_bytes, s.linger)
        self._resend: deque[tuple[str, list[Batch]]] = deque()
        self._busy: set[str] = set()
        #: Delivery tasks in flight and the request each carries.
        self._tasks: dict[asyncio.Task[None], Request] = {}
        self._buffered = 0
        self._http: httpx.AsyncClient | None = None
        self._runner: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._room: asyncio.Condition | None = None
        self._idle: asyncio.Condition | None = None
        self._closed = False
        #: Why the producer stopped for good (its journal's disk, its own bug), if it did.
        self._failed: ProducerError | None = None
        #: The last ``send``'s checkpoint (a durable producer's, after a restart: its journal's).
        self.checkpoint: str | None = None
        #: pyarrow is installed: sends of columns may go as Arrow IPC (``body_format``).
        self._arrow = arrow_available()
        #: Each table's Arrow schema, read once for sends of columns (``columns_as``).
        self._schemas: dict[str, Any] = {}
        self._counts = dict.fromkeys(
            ("sends", "rows", "updates", "requests", "attempts", "retried", "acknowledged", "replayed"), 0
        ) | dict.fromkeys(("refused", "timed_out", "recovered"), 0)

    # -- life ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (lazily: the first request does) and take over a durable producer's journal."""
        if self._runner is not None:
            return
        if self._closed:
            raise ProducerClosed("this producer was closed; make a new one")
        s = self.settings
        headers = {"Content-Type": "application/json"}
        if s.token:
            headers["Authorization"] = f"Bearer {s.token}"
        self._http = httpx.AsyncClient(
            base_url=s.url, headers=headers, timeout=s.request_timeout, transport=self._transport
        )
        self._wake, self._room, self._idle = asyncio.Event(), asyncio.Condition(), asyncio.Condition()
        if self._journal is not None:
            self._take_over(self._journal.recover())
        self._runner = asyncio.get_running_loop().create_task(self._run(), name="loader-producer")

    def _take_over(self, recovered: Recovered) -> None:
        self.prefix = f"{self.settings.producer_id or 'producer'}.{recovered.epoch}"
        self._acc.next_seq.update(recovered.sequences)
        self.checkpoint = recovered.checkpoint
        for key, batches in recovered.requests:
            self._resend.append((key, batches))
        for batch in recovered.waiting:
            self._acc.ready.setdefault(batch.table, deque()).append(batch)
        for batch in [b for _, r in recovered.requests for b in r] + recovered.waiting:
            self._buffered += batch.nbytes
        self._counts["recovered"] = recovered.batches
        if recovered.batches:
            log.info("producer %s: delivering %d update(s) an earlier run left", self.prefix, recovered.batches)

    async def __aenter__(self) -> AsyncLoaderProducer:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        """Close; a durable producer waits ``close_timeout`` at most (its journal keeps the
        rest: ``ClosedWithPending`` says how much), a producer without one until every update
        is acknowledged or failed. An exception already leaving the block stays the one
        raised, with the pending updates noted on it."""
        try:
            await self.close(self.settings.close_timeout if self._journal is not None else None)
        except ClosedWithPending as pending:
            if error is None:
                raise
            error.add_note(str(pending))

    async def flush(self, timeout: float | None = None) -> None:
        """Close every open update now and wait until all are acknowledged or failed
        (TimeoutError after ``timeout`` seconds; nothing is lost by it)."""
        await self.start()
        assert self._idle is not None and self._wake is not None
        self._acc.close_all()
        self._wake.set()

        async def drained() -> None:
            assert self._idle is not None
            async with self._idle:
                await self._idle.wait_for(
                    lambda: self._failed is not None or (self._buffered == 0 and not self._tasks and not self._resend)
                )

        await asyncio.wait_for(drained(), timeout)
        if self._failed is not None:
            raise self._failed

    async def close(self, timeout: float | None = None) -> None:
        """``flush``, then stop. After ``timeout`` seconds with updates still unacknowledged
        it stops anyway and raises ``ClosedWithPending`` (a TimeoutError): a durable producer
        keeps them in its journal for its next run; otherwise their sends fail."""
        if self._closed and self._runner is None:
            return
        try:
            if self._runner is not None:
                try:
                    await self.flush(timeout)
                except TimeoutError:
                    pending = len(self._everything())
                    journal = self._journal.directory if self._journal is not None else None
                    raise ClosedWithPending(pending, timeout or 0.0, journal, self.settings.producer_id) from None
        finally:
            self._closed = True
            runner, self._runner = self._runner, None
            tasks = dict(self._tasks)
            if runner is not None:
                runner.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*([runner] if runner else []), *tasks, return_exceptions=True)
            # What is still unacknowledged (a timeout) fails its sends; a durable producer's
            # journal keeps it for the next run.
            kept = "; it stays in the journal and goes out when the producer starts again" if self._journal else ""
            sent = {id(b): r for r in tasks.values() for b in r.batches}
            for batch in [*(b for r in tasks.values() for b in r.batches), *self._everything()]:
                request = sent.get(id(batch))
                if request is None:
                    closed = ProducerClosed(f"closed before it was sent{kept}")
                else:
                    closed = ProducerClosed(
                        f"closed before the service answered request {request.key}: it may have been loaded{kept}",
                        request.key,
                    )
                for send in batch.sends:
                    if not send.handle.done():
                        send.handle.set_exception(closed)
            if self._http is not None:
                await self._http.aclose()
            if self._journal is not None:
                self._journal.close()

    # -- sending --------------------------------------------------------------------------------
    async def send(
        self,
        table: str,
        rows: Iterable[dict[str, Any]] | Any | None = None,
        *,
        file: str | Path | None = None,
        data_until: float | None = None,
        key: str | None = None,
        checkpoint: str | None = None,
    ) -> asyncio.Future[Ack]:
        """Buffer an update's rows (or a file's) for ``table``; the returned future resolves to
        the acknowledgement once the service has them all. ``data_until``: the end of the
        data interval the rows cover (Unix seconds), if not their arrival. ``key``: the
        caller's own Idempotency-Key for exactly these rows (they go out as one update,
        alone); by default the producer derives one. ``checkpoint``: for a durable producer,
        the caller's input position after these rows, journaled with them in one write:
        after a restart ``checkpoint`` is where to resume (docs/producers.md). ``rows`` may be
        columns, a pyarrow Table or RecordBatch or a pandas DataFrame: sent as Arrow IPC of the
        table's types by default (``body_format``; producer/columns.py), in updates of their own."""
        data = columns_of(rows) if rows is not None and file is None else None
        columns = None
        if data is not None:
            if self._closed:
                raise ProducerClosed("send after close: nothing was buffered")
            await self.start()
            columns = await self.columns_as(table, data.column_names)
        prepared = prepare(table, data if data is not None else rows, file, data_until, key, checkpoint, columns)
        if self._closed:
            raise ProducerClosed("send after close: nothing was buffered")
        await self.start()
        return await self.accept_with_room(prepared)

    @property
    def sends_arrow(self) -> bool:
        """Whether sends of columns go as Arrow IPC (``body_format``, and pyarrow installed)."""
        return self.settings.body_format != "json" and self._arrow

    async def columns_as(self, table: str, names: Iterable[str]) -> ColumnsAs:
        """How a send of columns named ``names`` to ``table`` is serialised: with the table's
        Arrow schema, read from the service once (again when a send names a column it lacks)."""
        s = self.settings
        if not self.sends_arrow:
            return ColumnsAs()
        schema = self._schemas.get(table)
        if schema is None or not set(names) <= set(schema.names):
            schema = self._schemas[table] = await self._table_schema(table)
        return ColumnsAs(schema, s.max_batch_rows, s.max_batch_bytes)

    async def _table_schema(self, table: str) -> Any:
        """The table's Arrow schema from ``GET /v1/tables/{table}``, retried as a delivery is
        (transport errors, 429, 5xx) for ``max_block`` seconds at most; ProducerError after
        that or on a refusal (no such table, no right to it): nothing is buffered."""
        s = self.settings
        assert self._http is not None
        started, attempts = self._clock(), 0
        while True:
            attempts += 1
            floor: float | None = None
            try:
                response = await self._http.get(f"/v1/tables/{quote(table, safe='')}")
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return arrow_schema(response.json()["schema"])
                body = _body(response)
                message = body.get("message") if isinstance(body, dict) else body
                last = f"HTTP {response.status_code}: {message}"
                if not retried(response.status_code):
                    raise ProducerError(
                        f"the columns of table {table!r} could not be read to send it columns ({last}); nothing "
                        "was buffered"
                    )
                floor = retry_after(response.headers.get("retry-after"))
            wait = backoff(attempts, s.retry_backoff, s.retry_backoff_max, self._rng, floor)
            if self._clock() + wait - started > s.max_block:
                raise ProducerError(
                    f"the columns of table {table!r} could not be read to send it columns within {s.max_block:g} s "
                    f"({last}): the service is unreachable or failing; nothing was buffered"
                )
            await self._sleep(wait)

    def accept(self, prepared: Prepared) -> asyncio.Future[Ack]:
        """Take a prepared send into the buffer (on the producer's loop; room already made)."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise ProducerClosed("send after close: nothing was buffered")
        p, now, journal = prepared, self._clock(), self._journal
        # The longest key: a sequence of 19 digits, and a part number when a refused update splits.
        tail = 19 + 1 + len(str(self.settings.max_batch_rows - 1))
        if p.key is None and len(f"{self.prefix}/{p.table}/") + tail > MAX_KEY_LENGTH:
            raise ValueError(
                f"table {p.table!r}: its name makes Idempotency-Keys longer than {MAX_KEY_LENGTH} characters "
                "with this producer_id; use a shorter producer_id"
            )
        handle: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        request = Send(handle)
        parts: list[tuple[Batch, list[str] | None]]
        if p.arrow is not None:  # columns: an update of its own per IPC stream, in order
            parts = []
            for body in p.arrow:
                batch = self._acc.add_alone(
                    p.table, p.data_until, now, request, key=p.key, checkpoint=p.checkpoint, arrow=body
                )
                parts.append((batch, None))
        elif p.files is not None or p.key is not None:
            batch = self._acc.add_alone(
                p.table,
                p.data_until,
                now,
                request,
                rows=p.texts,
                files=p.files or (),
                key=p.key,
                checkpoint=p.checkpoint,
            )
            parts = [(batch, None if p.files is not None else p.texts)]
        else:
            added = self._acc.add_rows(p.table, p.texts, p.data_until, now, request, p.checkpoint)
            parts = [(batch, p.texts[start:end]) for batch, start, end in added]
        self._buffered += p.size  # counted at once: whatever happens next, its updates release it
        if journal is not None:
            try:
                journal.add(parts, p.data_until, p.checkpoint)
            except OSError as exc:  # in the buffer but not journaled: the producer stops, loudly
                failure = ProducerError(f"the journal in {journal.directory} could not be written ({exc})")
                self._fail(failure)
                raise failure from exc
        if p.checkpoint is not None:
            self.checkpoint = p.checkpoint
        self._counts["sends"] += 1
        self._counts["rows"] += p.count
        assert self._wake is not None
        self._wake.set()
        return handle

    async def accept_with_room(self, prepared: Prepared) -> asyncio.Future[Ack]:
        """``accept`` once the buffer has room, waiting up to ``max_block`` (BufferFull). The
        room is taken in the same step as it is seen, so two waiting sends cannot both take it."""
        assert self._room is not None
        limit, size = self.settings.max_buffer_bytes, prepared.size

        def fits() -> bool:
            return self._buffered == 0 or self._buffered + size <= limit

        if fits():
            return self.accept(prepared)  # room now: no waiting machinery

        async def room() -> asyncio.Future[Ack]:
            assert self._room is not None
            async with self._room:
                await self._room.wait_for(lambda: fits() or self._failed is not None)
                return self.accept(prepared)

        try:
            return await asyncio.wait_for(room(), self.settings.max_block)
        except TimeoutError:
            raise BufferFull(
                f"no room for {size:,} bytes in the producer's buffer ({self._buffered:,} of {limit:,} bytes "
                f"waiting for acknowledgement) after {self.settings.max_block:g} s: the service is slow or "
                "unreachable; nothing was buffered"
            ) from None

    def metrics(self) -> ProducerMetrics:
        c = self._counts
        return ProducerMetrics(
            **c,  # type: ignore[arg-type]
            buffered_bytes=self._buffered,
            in_flight=len(self._tasks),
        )

    # -- the background task -----------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop_forever()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or the disk: every waiting send learns it, nothing hangs
            log.exception("producer %s: its background task failed", self.prefix)
            self._fail(ProducerError(f"the producer's background task failed: {type(exc).__name__}: {exc}"))

    def _fail(self, failure: ProducerError) -> None:
        """Stop for good: every send not yet done fails with ``failure``, as will every call."""
        if self._failed is not None:
            return
        self._failed = failure
        for batch in self._everything():
            for send in batch.sends:
                if not send.handle.done():
                    send.handle.set_exception(failure)
        self._buffered = 0
        self._acc.open.clear()
        self._acc.ready.clear()
        self._resend.clear()
        for task in list(self._tasks):
            task.cancel()
        asyncio.get_running_loop().create_task(self._settled())

    def _everything(self) -> list[Batch]:
        """Every update not yet done: in flight, to send again, closed, open."""
        batches = [b for r in self._tasks.values() for b in r.batches] + [b for _, r in self._resend for b in r]
        return batches + [b for q in self._acc.ready.values() for b in q] + list(self._acc.open.values())

    async def _loop_forever(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            self._acc.close_due(self._clock())
            if self._journal is not None and self._journal.size > COMPACT_BYTES:
                self._compact()
            self._dispatch()
            due = self._acc.next_due()
            timeout = None if due is None else max(0.0, due - self._clock())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    def _dispatch(self) -> None:
        s = self.settings
        slots = s.max_in_flight - len(self._tasks)
        while slots > 0 and self._resend:
            key, batches = self._resend[0]
            tables = {b.table for b in batches}
            if tables & self._busy:
                break
            self._resend.popleft()
            self._busy |= tables
            fresh = request_for(batches, self.prefix)
            self._launch(Request(fresh.batches, key, fresh.path, fresh.body, fresh.content_type), journal=False)
            slots -= 1
        blocked = self._busy | {b.table for _, batches in self._resend for b in batches}
        for request in plan(self._acc.ready, blocked, slots, self.prefix, s.multi_table, s.max_request_bytes):
            self._busy |= set(request.tables)
            self._launch(request, journal=True)

    def _launch(self, request: Request, journal: bool) -> None:
        if journal and self._journal is not None:
            self._journal.request(request.key, request.batches)
        self._counts["requests"] += 1
        self._counts["updates"] += len(request.batches)
        task = asyncio.get_running_loop().create_task(self._deliver(request))
        self._tasks[task] = request

    async def _deliver(self, request: Request) -> None:
        task = asyncio.current_task()
        try:
            await self._attempts(request, self._clock())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an answer the producer cannot read: the request's sends fail with it
            log.exception("producer %s: request %s failed", self.prefix, request.key)
            self._finish(request, lambda b, exc=exc: exc)
        finally:
            self._busy.difference_update(request.tables)
            self._tasks.pop(task, None)  # type: ignore[arg-type]
            assert self._wake is not None
            self._wake.set()
            await self._settled()

    async def _attempts(self, request: Request, started: float) -> None:
        s = self.settings
        assert self._http is not None
        attempts = 0
        told = False
        while True:
            attempts += 1
            self._counts["attempts"] += 1
            floor: float | None = None
            try:
                response = await self._http.post(
                    request.path,
                    content=request.body,
                    headers={"Idempotency-Key": request.key, "Content-Type": request.content_type},
                )
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 202:
                    self._acknowledged(request, response)
                    return
                body = _body(response)
                if not retried(response.status_code):
                    self._refused(request, response.status_code, body)
                    return
                floor = retry_after(response.headers.get("retry-after"))
                message = body.get("message") if isinstance(body, dict) else body
                last = f"HTTP {response.status_code}: {message}"
            wait = backoff(attempts, s.retry_backoff, s.retry_backoff_max, self._rng, floor)
            late = s.delivery_timeout is not None and self._clock() + wait - started > s.delivery_timeout
            if late and not told:
                told = True
                self._counts["timed_out"] += len(request.batches)
                durable = self._journal is not None
                log.warning(
                    "producer %s: %s not acknowledged after %d attempts (%s)%s",
                    self.prefix,
                    request.key,
                    attempts,
                    last,
                    "; still trying (durable)" if durable else "; given up",
                )

                def timeout(b: Batch, n: int = attempts, why: str = last, durable: bool = durable) -> Exception:
                    return DeliveryTimeout(b.table, request.key, n, why, request.path, request.body, durable)

                if not durable:
                    self._finish(request, timeout)
                    return
                # A durable producer owns the rows until delivered: its sends learn it is late,
                # the request goes on (its table stays in order, its bytes in the buffer).
                self._tell(request, timeout)
            self._counts["retried"] += 1
            await self._sleep(wait)

    def _acknowledged(self, request: Request, response: httpx.Response) -> None:
        replayed = response.headers.get("idempotent-replayed") == "true"
        answers = response.json()["updates"]
        if len(answers) != len(request.batches):
            raise RuntimeError(f"the service acknowledged {len(answers)} updates of {len(request.batches)}")
        self._counts["acknowledged"] += len(answers)
        self._counts["replayed"] += len(answers) if replayed else 0
        acks = {
            id(b): Ack(b.table, int(a["sequence"]), float(a["release_time"]), b.key(self.prefix), replayed, request.key)
            for b, a in zip(request.batches, answers, strict=True)
        }
        self._finish(request, lambda b: acks[id(b)])

    def _refused(self, request: Request, status: int, body: Any) -> None:
        if len(request.batches) > 1:  # all or none: each update again alone, to learn which one
            if self._journal is not None:
                self._journal.split(request.key)
            self._acc.requeue(request.batches)
            return
        batch = request.batches[0]
        if status in SPLIT_STATUSES and batch.part is None and not batch.files and len(batch.segments) > 1:
            # Coalesced sends refused together: each alone, in order, at the front of its table
            # (journaled first: after a restart the parts go out, never the whole again).
            parts = batch.split()
            if self._journal is not None:
                self._journal.divide(request.key, batch, parts)
            self._acc.requeue(parts)
            log.info(
                "producer %s: update %s of %d sends refused (HTTP %d); each send goes alone",
                self.prefix,
                request.key,
                len(parts),
                status,
            )
            return
        self._counts["refused"] += 1
        if batch.arrow is not None and status == 422:
            # The table's types may have changed since they were read (a column widened): read
            # them again for the next send of columns.
            self._schemas.pop(batch.table, None)
        refusal = refusal_of(status, body, batch, batch.key(self.prefix))
        # Said in the log too: a send an earlier run journaled has no future to fail.
        log.warning("producer %s: %s", self.prefix, refusal)
        self._finish(request, lambda b: refusal)

    def _tell(self, request: Request, outcome: Callable[[Batch], Ack | Exception]) -> None:
        """The sends of the request's updates learn ``outcome`` (the first outcome a send
        learns is its last: a failure ends it, an acknowledgement counts towards its updates)."""
        for batch in request.batches:
            result = outcome(batch)
            for send in batch.sends:
                if send.done:
                    continue
                if isinstance(result, Exception):
                    send.done = True
                    if not send.handle.done():
                        send.handle.set_exception(result)
                    continue
                send.acks.append(result)
                if len(send.acks) == send.updates:
                    send.done = True
                    if not send.handle.done():
                        send.handle.set_result(result)

    def _finish(self, request: Request, outcome: Callable[[Batch], Ack | Exception]) -> None:
        """The request's updates are done: their sends are told, their bytes leave the buffer."""
        if self._journal is not None:
            self._journal.done(request.key)
        self._tell(request, outcome)
        for batch in request.batches:
            self._buffered -= batch.nbytes

    def _compact(self) -> None:
        """The journal rewritten with what is live now: requests in flight (as they were formed:
        their records stay), requests to send again, closed and open updates."""
        assert self._journal is not None
        waiting = [b for q in self._acc.ready.values() for b in q] + list(self._acc.open.values())
        resend = [(r.key, list(r.batches)) for r in self._tasks.values()] + [(k, b) for k, b in self._resend]
        epoch = self.prefix.rpartition(".")[2]
        self._journal.compact(Recovered(dict(self._acc.next_seq), resend, waiting, self.checkpoint, epoch))

    async def _settled(self) -> None:
        assert self._room is not None and self._idle is not None
        async with self._room:
            self._room.notify_all()
        async with self._idle:
            self._idle.notify_all()


def refusal_of(status: int, body: Any, batch: Batch, key: str) -> RequestRefused:
    """The refusal of an update as its send should read it. An update of one send's rows
    (422, 413) speaks of that send: the service's row number becomes the send's own (the
    update holds the send's rows from ``first`` on), "send the whole update again" says what
    to send again, and a 413 says how much the service can ever hold. Other refusals (and
    an update of several sends) keep the service's message as it is."""
    service = str((body.get("message") or body.get("detail")) if isinstance(body, dict) else body)
    if status not in SPLIT_STATUSES or batch.files or len(batch.segments) != 1:
        return RequestRefused(status, body, batch.table, key)
    segment = batch.segments[0]
    first, end = segment.first, segment.first + segment.count
    named = f" (checkpoint {segment.checkpoint!r})" if segment.checkpoint is not None else ""
    if segment.send is not None and segment.send.updates == 1:
        whole = True
        these = f"this send{named} ({segment.count} row{'' if segment.count == 1 else 's'})"
        resend = "nothing of this send was accepted: fix it and send it again"
    else:
        # A send larger than an update (or one an earlier run journaled, whose shape is gone):
        # other updates carry its other rows, on their own.
        whole = False
        these = f"rows {first} to {end - 1} of this send{named}"
        resend = f"{these} were not accepted: fix them and send those rows again (other updates carry its other rows)"
    details: dict[str, Any] = body if isinstance(body, dict) else {}
    if status == 413:
        remedy = (
            "send fewer rows at a time"
            if whole
            else "lower max_batch_rows or max_batch_bytes (the producer cuts a large send into updates of that "
            "size), or send fewer rows at a time"
        )
        budget = [details.get(k) for k in ("capacity_bytes", "memory_budget_bytes", "disk_budget_bytes")]
        if all(isinstance(v, int) for v in budget):
            capacity, memory, disk = budget
            size = details.get("request_bytes")
            take = f" and these rows take {size:,} bytes there" if isinstance(size, int) else ""
            message = (
                f"{these} alone is more than the service can ever hold at once: its pending store holds "
                f"{capacity:,} bytes ({memory:,} in memory, {disk:,} on its spill disk){take}; nothing of them "
                f"was accepted: {remedy}"
            )
        else:
            message = f"{service}; {these} alone is too large for the service; nothing of it was accepted: {remedy}"
        return RequestRefused(
            status, body, batch.table, key, message=message, rows=(first, end), checkpoint=segment.checkpoint
        )
    row = details.get("row")
    send_row = None
    message = service
    if isinstance(row, int) and not isinstance(row, bool) and 0 <= row < segment.count:
        send_row = first + row
        service_words = re.compile(rf"\brow {row} of table {re.escape(repr(batch.table))}")
        ours = f"row {send_row} of this send{named} to table {batch.table!r}"
        message, found = service_words.subn(ours, message, count=1)
        if not found:
            message = f"{ours}: {message}"
    message = message.replace(SERVICE_RESEND, resend) if SERVICE_RESEND in message else f"{message}; {resend}"
    return RequestRefused(
        status, body, batch.table, key, message=message, row=send_row, rows=(first, end), checkpoint=segment.checkpoint
    )


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
