"""Batching and keys, without I/O: what the producer buffers, when an update closes, which
updates go out together and under which Idempotency-Key.

- An **update** (``Batch``) is one table's rows between two closings: rows of several
  ``send`` calls are coalesced until ``max_batch_rows`` or ``max_batch_bytes`` is reached
  or ``linger`` seconds have passed since its first row (Kafka's batch.size and linger.ms).
  A ``send`` larger than that fills several updates, in order. A landing file is an update
  of its own.
- Every update has a per-table **sequence** and the key ``<prefix>/<table>/<sequence>``
  (the prefix: ``<producer_id>.<token>``, aio.py),
  derived, never random: the same update keeps its key on every retry and, for a durable
  producer, across restarts (``journal.py``).
- An update remembers which ``send`` each run of its rows came from (``Segment``): a
  coalesced update the service refuses for its rows (422) or its size (413) is **split**
  into its sends (``Batch.split``), each sent alone under the key ``<update key>.<i>``
  (deterministic, and never the coalesced key: the service remembers a key with its body),
  so only the send that holds a bad row fails, and its error counts rows as that send did.
- A **request** carries one update (``POST /v1/tables/{table}/updates``, the update's key)
  or several ready at once, of one table or several, in table order (``POST /v1/updates``,
  a key derived from its updates' keys). Its body is built once, from rows serialised
  once, so a retry sends the same bytes (the service compares a retried key's body).
- A table has at most one request in flight, so its updates reach the service, and take
  their sequence numbers there, in the order they were sent, across retries.

Rows are kept as their JSON text (``row_json``): serialised once at ``send``, joined into
bodies without parsing again. A send of columns (producer/columns.py) is kept as Arrow IPC
streams, one per update it fills, built once at ``send`` too; each goes alone, to the table's
route (the batch route takes JSON only), and is never split: it holds one send's rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import math
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

#: What an update adds to a multi-table request besides its rows (its table, keys, braces).
WRAPPER_BYTES = 64
#: The media type of an update of columns (producer/columns.py).
ARROW_STREAM = "application/vnd.apache.arrow.stream"


def _encode(value: Any) -> Any:
    """JSON for what rows commonly hold besides JSON's own types."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"a row value of type {type(value).__name__} has no JSON form; convert it first")


def row_json(row: dict[str, Any]) -> str:
    """One row's JSON text, compact (the form bodies are built from)."""
    if not isinstance(row, dict):
        raise TypeError(f"a row is a dict of column values, got {type(row).__name__}")
    for value in row.values():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"a row value is {value}, which JSON cannot carry; send null instead")
    return json.dumps(row, separators=(",", ":"), default=_encode)


@dataclass(eq=False)
class Send:
    """One ``send`` call: resolved when every update holding its rows is acknowledged, failed
    at the first that fails. ``handle`` is the I/O layer's future."""

    handle: Any
    updates: int = 0
    acks: list[Any] = field(default_factory=list)
    done: bool = False


@dataclass(eq=False)
class Segment:
    """One send's rows in one update (a send adds at most one run of rows to an update): the
    unit a refused update is split into, and the offset that turns the service's row number
    into the send's own."""

    #: None for an update taken over from an earlier run: nobody waits on it any more.
    send: Send | None
    #: Rows of the send in this update (0 for landing files).
    count: int
    #: The send's row index of the first of them (a send larger than an update fills several).
    first: int = 0
    #: The send's own data interval end, which its part keeps when the update is split.
    data_until: float | None = None
    #: The send's checkpoint (the caller's input position, e.g. a file name): names the send
    #: in a refusal even after a restart, when no future is left to fail.
    checkpoint: str | None = None


@dataclass(eq=False)
class Batch:
    """One update of one table (module docstring)."""

    table: str
    seq: int
    opened: float
    rows: list[str] = field(default_factory=list)
    files: tuple[str, ...] = ()
    #: A send of columns: its rows as an Arrow IPC stream (producer/columns.py), built once.
    arrow: bytes | None = None
    data_until: float | None = None
    nbytes: int = 0
    #: The sends whose rows it holds, in row order.
    segments: list[Segment] = field(default_factory=list)
    #: Refused inside a multi-table request, a part of a split update, or sent under a key of
    #: the caller's: goes out alone, so its refusal is its own.
    solo: bool = False
    #: The caller's own Idempotency-Key (``send(key=...)``), instead of the derived one.
    explicit_key: str | None = None
    #: Which part of a split update this is (``split``); None: the update as it was formed.
    part: int | None = None

    @property
    def ident(self) -> tuple[str, int, int | None]:
        """What names the update in the journal: table, sequence and part."""
        return (self.table, self.seq, self.part)

    @property
    def sends(self) -> list[Send]:
        return [s.send for s in self.segments if s.send is not None]

    def key(self, prefix: str) -> str:
        if self.explicit_key is not None:
            return self.explicit_key
        suffix = "" if self.part is None else f".{self.part}"
        return f"{prefix}/{self.table}/{self.seq}{suffix}"

    def split(self) -> list[Batch]:
        """The update as one part per send, in row order, each to go out alone under its own
        key (``<key>.<i>``): the same parts, rows and keys every time, also after a restart
        (the journal keeps the segments). Only an update formed by coalescing sends splits."""
        if self.part is not None or self.files or self.arrow is not None or len(self.segments) < 2:
            raise ValueError("only an update of several sends' rows splits into its sends")
        parts: list[Batch] = []
        start = 0
        for index, segment in enumerate(self.segments):
            rows = self.rows[start : start + segment.count]
            start += segment.count
            part = Batch(self.table, self.seq, self.opened, rows=rows, solo=True, part=index)
            part.nbytes = sum(len(r) + 1 for r in rows)
            part.data_until = segment.data_until
            part.segments.append(segment)
            parts.append(part)
        if start != len(self.rows):
            raise ValueError(f"update {self.table}/{self.seq}: its sends hold {start} rows, it {len(self.rows)}")
        return parts

    def later(self, data_until: float | None) -> None:
        """The update's data interval ends with its latest part's."""
        if data_until is not None:
            self.data_until = data_until if self.data_until is None else max(self.data_until, data_until)

    def update_json(self, with_table: bool) -> str:
        parts = [f'"table":{json.dumps(self.table)}'] if with_table else []
        if self.files:
            parts.append(f'"files":{json.dumps(list(self.files))}')
        else:
            parts.append('"rows":[' + ",".join(self.rows) + "]")
        if self.data_until is not None:
            parts.append(f'"data_until":{json.dumps(self.data_until)}')
        return "{" + ",".join(parts) + "}"


@dataclass(frozen=True, eq=False)
class Request:
    """An HTTP request carrying ``batches`` (module docstring)."""

    batches: tuple[Batch, ...]
    key: str
    path: str
    body: bytes
    content_type: str = "application/json"

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.table for b in self.batches))

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.batches)


def request_for(batches: Sequence[Batch], prefix: str) -> Request:
    """The request carrying ``batches``: a single update to its table's route, several to
    ``POST /v1/updates`` under a key derived from theirs."""
    if len(batches) == 1:
        batch = batches[0]
        path = f"/v1/tables/{quote(batch.table, safe='')}/updates"
        if batch.arrow is not None:  # (its data interval end in the query, as for NDJSON)
            until = "" if batch.data_until is None else f"?data_until={json.dumps(batch.data_until)}"
            return Request((batch,), batch.key(prefix), path + until, batch.arrow, ARROW_STREAM)
        return Request((batch,), batch.key(prefix), path, batch.update_json(False).encode())
    digest = hashlib.sha256("|".join(b.key(prefix) for b in batches).encode()).hexdigest()[:40]
    body = '{"updates":[' + ",".join(b.update_json(True) for b in batches) + "]}"
    return Request(tuple(batches), f"{prefix}/m/{digest}", "/v1/updates", body.encode())


class Accumulator:
    """The open update of each table and the closed ones waiting for a request."""

    def __init__(self, max_rows: int, max_bytes: int, linger: float) -> None:
        self.max_rows, self.max_bytes, self.linger = max_rows, max_bytes, linger
        self.open: dict[str, Batch] = {}
        #: Closed updates per table, oldest first (a request takes them from the front).
        self.ready: dict[str, deque[Batch]] = {}
        #: The next sequence of each table's updates (a durable producer's restart takes over its journal's).
        self.next_seq: dict[str, int] = {}

    def _new(self, table: str, now: float) -> Batch:
        seq = self.next_seq.get(table, 0)
        self.next_seq[table] = seq + 1
        return Batch(table, seq, now)

    def _close(self, table: str) -> None:
        batch = self.open.pop(table, None)
        if batch is not None:
            self.ready.setdefault(table, deque()).append(batch)

    def add_rows(
        self,
        table: str,
        rows: Sequence[str],
        data_until: float | None,
        now: float,
        send: Send,
        checkpoint: str | None = None,
    ) -> list[tuple[Batch, int, int]]:
        """Coalesce ``rows`` into the table's open update(s); each part as (update, first row,
        end row) of ``rows``, for the journal."""
        parts: list[tuple[Batch, int, int]] = []
        start = 0
        while start < len(rows):
            batch = self.open.get(table)
            if batch is None:
                batch = self.open[table] = self._new(table, now)
            end, size = start, 0
            while end < len(rows):
                extra = len(rows[end]) + 1
                full = len(batch.rows) + (end - start) >= self.max_rows
                too_big = batch.nbytes + size + extra > self.max_bytes and (batch.rows or end > start)
                if full or too_big:
                    break
                size += extra
                end += 1
            if end > start:
                batch.rows.extend(rows[start:end])
                batch.nbytes += size
                batch.later(data_until)
                batch.segments.append(Segment(send, end - start, start, data_until, checkpoint))
                send.updates += 1
                parts.append((batch, start, end))
            if end < len(rows) or len(batch.rows) >= self.max_rows or batch.nbytes >= self.max_bytes:
                self._close(table)
            start = end
        if self.linger == 0:
            self._close(table)
        return parts

    def add_alone(
        self,
        table: str,
        data_until: float | None,
        now: float,
        send: Send,
        *,
        rows: Sequence[str] = (),
        files: Sequence[str] = (),
        key: str | None = None,
        checkpoint: str | None = None,
        arrow: tuple[bytes, int, int] | None = None,
    ) -> Batch:
        """An update of its own, after the table's open one: landing files, rows under the
        caller's own key (which must name exactly these rows), or a part of a send of columns
        (``arrow``: its IPC stream, its first row in the send and its rows), which goes alone:
        only the single-update route takes an Arrow body."""
        self._close(table)
        batch = self._new(table, now)
        batch.files = tuple(files)
        batch.rows = list(rows)
        batch.nbytes = sum(len(f) for f in files) + sum(len(r) + 1 for r in rows)
        count, first = len(rows), 0
        if arrow is not None:
            batch.arrow, first, count = arrow
            batch.nbytes = len(batch.arrow)
        batch.later(data_until)
        batch.segments.append(Segment(send, count, first, data_until, checkpoint))
        batch.explicit_key = key
        batch.solo = key is not None or arrow is not None
        send.updates += 1
        self.ready.setdefault(table, deque()).append(batch)
        return batch

    def close_due(self, now: float) -> None:
        for table in [t for t, b in self.open.items() if b.opened + self.linger <= now]:
            self._close(table)

    def close_all(self) -> None:
        for table in list(self.open):
            self._close(table)

    def next_due(self) -> float | None:
        return min((b.opened + self.linger for b in self.open.values()), default=None)

    def requeue(self, batches: Iterable[Batch]) -> None:
        """Updates of a refused multi-table request, or the parts of a split update, back at
        the front of their tables in their order, alone."""
        for batch in reversed(list(batches)):
            batch.solo = True
            self.ready.setdefault(batch.table, deque()).appendleft(batch)

    def waiting(self) -> bool:
        return bool(self.open) or any(self.ready.values())


def plan(
    ready: dict[str, deque[Batch]],
    busy: set[str],
    slots: int,
    prefix: str,
    multi: bool,
    max_request_bytes: int,
) -> list[Request]:
    """Requests for closed updates of tables with none in flight (``busy``, which grows with
    the tables taken), at most ``slots`` of them, oldest update first: with ``multi``, the
    ready updates of as many tables as fit ``max_request_bytes`` in one request; else (and for
    an update refused inside one) one update a request."""
    order = sorted((t for t, q in ready.items() if q and t not in busy), key=lambda t: ready[t][0].opened)
    requests: list[Request] = []
    for k, table in enumerate(order):
        if len(requests) >= slots:
            break
        queue = ready[table]
        if table in busy or not queue:
            continue
        if not multi or queue[0].solo:
            requests.append(request_for([queue.popleft()], prefix))
            busy.add(table)
            continue
        taken: list[Batch] = []
        size = 0
        for other in order[k:]:
            other_queue = ready[other]
            if other in busy or not other_queue or other_queue[0].solo:
                continue
            while other_queue and not other_queue[0].solo:
                cost = other_queue[0].nbytes + len(other) + WRAPPER_BYTES
                if taken and size + cost > max_request_bytes:
                    break
                taken.append(other_queue.popleft())
                size += cost
            busy.add(other)
            if other_queue and not other_queue[0].solo:
                break  # the request is full
        requests.append(request_for(taken, prefix))
    return requests
