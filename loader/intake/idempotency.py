"""Idempotency-Key handling: a retried request gets the first answer, not a second update.

A producer that times out cannot know whether its update was acknowledged; it retries
with the same ``Idempotency-Key`` header. The store remembers, per key, a hash of the
request and the response that was sent, for ``ttl_seconds`` (24 h by default):

- same key, same request hash, answered: the stored response is returned, nothing is
  appended again;
- same key, different request hash: ``IdempotencyConflict`` (409), since the client reused
  a key for another request and silently answering either would be wrong;
- same key while the first request is still in flight: the retry waits for it
  (``reserve``), then gets its answer, or takes over if the first one failed.

Durability: the key, hash and response travel in the WAL record of the update, so the
store is rebuilt by ``add_record`` during WAL replay. WAL segments are deleted once Delta
holds their updates, which would forget keys still inside their TTL; so before deleting
segments that carry keys, the service saves the store (``save``, atomic), and at start-up
it ``load``s that snapshot and then replays the WAL on top of it with ``add_record``
(the order does not matter: ``merge`` and ``add_record`` both keep the first answer).

Thread-safety: the entries are guarded by a lock, so ``save`` may run on a worker thread
(e.g. from ``WriteAheadLog.truncate(before_delete=...)``). ``reserve`` belongs to one
event loop, the one serving requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loader.core.durable_files import write_atomic
from loader.core.errors import BadRequest, Conflict
from loader.core.updates import WalRecord

DEFAULT_TTL_SECONDS = 24 * 3600.0
_SNAPSHOT_VERSION = 1
MAX_KEY_LENGTH = 200
_PRINTABLE_ASCII = frozenset(range(0x20, 0x7F))


def check_key(key: str | None) -> str | None:
    """The Idempotency-Key header as sent, or BadRequest (400) when it is not 1 to
    MAX_KEY_LENGTH printable ASCII characters.

    Keys are stored in the WAL and the snapshot and compared byte for byte; a header with
    other bytes reaches the service decoded as Latin-1, so a producer's UTF-8 key would be
    stored as something else than it sent. Refusing it is clearer than matching mojibake.
    """
    if key is None:
        return None
    if 0 < len(key) <= MAX_KEY_LENGTH and _PRINTABLE_ASCII.issuperset(key.encode("latin-1", "replace")):
        return key
    problem = (
        "is empty"
        if not key
        else f"is {len(key)} characters long"
        if len(key) > MAX_KEY_LENGTH
        else "holds characters other than printable ASCII"
    )
    raise BadRequest(
        f"Idempotency-Key {problem}; send 1 to {MAX_KEY_LENGTH} printable ASCII characters, e.g. a UUID",
        idempotency_key=key[:40].encode("ascii", "backslashreplace").decode(),
    )


class IdempotencyConflict(Conflict):
    """The Idempotency-Key was already used for a different request (HTTP 409)."""

    code = "idempotency_conflict"

    def __init__(self, key: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used with a different request; use a new key for a new request",
            idempotency_key=key,
        )
        self.key = key


@dataclass(frozen=True, slots=True)
class IdempotencyEntry:
    request_hash: str
    response: dict[str, Any]
    created_at: float


def request_hash(*parts: bytes | str) -> str:
    """SHA-256 over length-prefixed parts (e.g. method, path, tenant, body): a stable request id.

    Length prefixes keep ("ab", "c") and ("a", "bc") apart.
    """
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


class Slot:
    """What ``reserve`` hands the request handler.

    ``response`` is the stored answer when the key was already answered (send it back,
    do nothing else); otherwise None, and the handler does the work and calls
    ``complete(response)`` once the update is acknowledged.
    """

    __slots__ = ("_store", "key", "request_hash", "response", "replayed")

    def __init__(self, store: IdempotencyStore, key: str, request_hash: str, response: dict[str, Any] | None) -> None:
        self._store = store
        self.key = key
        self.request_hash = request_hash
        self.response = response
        #: True when ``response`` comes from an earlier request.
        self.replayed = response is not None

    def complete(self, response: dict[str, Any], created_at: float | None = None) -> None:
        """Record the answer (after the WAL append that carries the same key/response)."""
        if self.replayed:
            raise RuntimeError(f"key {self.key!r} was already answered; send slot.response")
        self._store.add(self.key, self.request_hash, response, created_at)
        self.response = response


@dataclass(slots=True)
class _InFlight:
    request_hash: str
    done: asyncio.Future[None]


class IdempotencyStore:
    """Key -> (request hash, response, created_at), with a TTL; see the module docstring."""

    def __init__(self, ttl_seconds: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.time) -> None:
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
        self.ttl_seconds = float(ttl_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, IdempotencyEntry] = {}
        self._in_flight: dict[str, _InFlight] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def _live(self, entry: IdempotencyEntry, now: float) -> bool:
        return entry.created_at + self.ttl_seconds > now

    def get(self, key: str, now: float | None = None) -> IdempotencyEntry | None:
        """The live entry of ``key`` (expired entries count as absent)."""
        now = self._clock() if now is None else now
        with self._lock:
            entry = self._entries.get(key)
        return entry if entry is not None and self._live(entry, now) else None

    def keys_of(self, table: str, seqs: set[int]) -> dict[int, str]:
        """The keys whose requests acknowledged these updates of ``table`` (a quarantine entry
        names its update by them). A scan of every entry: for the rare quarantine, on a worker
        thread; the lock is held only to copy the entries."""
        with self._lock:
            entries = list(self._entries.items())
        found: dict[int, str] = {}
        for key, entry in entries:
            for ack in entry.response.get("updates", ()):
                if ack.get("table") == table and ack.get("sequence") in seqs:
                    found[ack["sequence"]] = key
        return found

    def lookup(self, key: str, request_hash: str, now: float | None = None) -> dict[str, Any] | None:
        """The stored response for a retry, None for an unknown (or expired) key.

        Raises IdempotencyConflict when the key was answered for another request.
        """
        entry = self.get(key, now)
        if entry is None:
            return None
        if entry.request_hash != request_hash:
            raise IdempotencyConflict(key)
        return entry.response

    def add(self, key: str, request_hash: str, response: dict[str, Any], created_at: float | None = None) -> bool:
        """Remember an answer; True if stored, False if the same answer was already known.

        Adding a key again with the same hash keeps the first entry (WAL replay and a loaded
        snapshot may both hold it). A different hash replaces an entry only if the old one
        had expired by ``created_at`` (the key was legitimately reused after its TTL);
        otherwise IdempotencyConflict.
        """
        created_at = self._clock() if created_at is None else float(created_at)
        with self._lock:
            old = self._entries.get(key)
            if old is not None and self._live(old, created_at):
                if old.request_hash != request_hash:
                    raise IdempotencyConflict(key)
                return False
            self._entries[key] = IdempotencyEntry(request_hash, response, created_at)
            return True

    def add_record(self, record: WalRecord) -> bool:
        """Rebuild from a replayed WAL record; records without a key are ignored."""
        if record.idempotency_key is None:
            return False
        if record.request_hash is None or record.response is None:
            raise ValueError(f"WAL record with Idempotency-Key {record.idempotency_key!r} lacks hash or response")
        return self.add(record.idempotency_key, record.request_hash, record.response, record.created_at)

    def expire(self, now: float | None = None) -> int:
        """Forget entries older than the TTL; returns how many were removed."""
        now = self._clock() if now is None else now
        with self._lock:
            dead = [k for k, e in self._entries.items() if not self._live(e, now)]
            for key in dead:
                del self._entries[key]
        return len(dead)

    @asynccontextmanager
    async def reserve(self, key: str, request_hash: str) -> AsyncIterator[Slot]:
        """Serialize requests with the same key; see ``Slot``.

        ::

            async with store.reserve(key, h) as slot:
                if slot.replayed:
                    return slot.response
                response = ...               # build the answer, append to the WAL
                slot.complete(response)
                return response

        A concurrent request with the same key and hash waits for the one in flight, then
        gets its answer; if that one leaves the block without ``complete`` (an error), the
        waiter goes ahead itself. A different hash conflicts at once, in flight or not.
        """
        while True:
            stored = self.lookup(key, request_hash)
            if stored is not None:
                yield Slot(self, key, request_hash, stored)
                return
            holder = self._in_flight.get(key)
            if holder is None:
                break
            if holder.request_hash != request_hash:
                raise IdempotencyConflict(key)
            await asyncio.shield(holder.done)  # our cancellation must not cancel the holder's future
        mine = _InFlight(request_hash, asyncio.get_running_loop().create_future())
        self._in_flight[key] = mine
        try:
            yield Slot(self, key, request_hash, None)
        finally:
            del self._in_flight[key]
            mine.done.set_result(None)

    # ------------------------------------------------------------------ persistence

    def save(self, path: Path | str, now: float | None = None) -> int:
        """Write the live entries to ``path`` atomically (tmp + fsync + rename + dir fsync).

        Returns the number of entries written. Safe from any thread.
        """
        path = Path(path)
        now = self._clock() if now is None else now
        with self._lock:
            entries = [(k, e) for k, e in self._entries.items() if self._live(e, now)]
        document = {
            "version": _SNAPSHOT_VERSION,
            "saved_at": now,
            "entries": [
                {"key": k, "hash": e.request_hash, "response": e.response, "created_at": e.created_at}
                for k, e in entries
            ],
        }
        write_atomic(path, json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
        return len(entries)

    @classmethod
    def load(
        cls,
        path: Path | str,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> IdempotencyStore:
        """A store holding the live entries of a snapshot written by ``save`` (empty if none)."""
        store = cls(ttl_seconds, clock)
        store.merge(path)
        return store

    def merge(self, path: Path | str, now: float | None = None) -> int:
        """Add the live entries of a snapshot to this store; returns entries added (0 if no file).

        A damaged file raises ValueError naming it: it was written atomically, so damage
        is not a crash artefact.
        """
        path = Path(path)
        now = self._clock() if now is None else now
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            document = json.loads(raw)
            if document.get("version") != _SNAPSHOT_VERSION:
                raise ValueError(f"unsupported version {document.get('version')!r}")
            rows = [(e["key"], e["hash"], e["response"], float(e["created_at"])) for e in document["entries"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"idempotency snapshot {path} is damaged: {exc}") from None
        added = 0
        for key, hash_, response, created_at in rows:
            if created_at + self.ttl_seconds > now:
                added += self.add(key, hash_, response, created_at)
        return added
