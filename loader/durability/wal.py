"""The write-ahead log: an update is acknowledged only once its record is in this log.

Layout of the WAL directory::

    wal.lock                               flock()ed by the one process using the WAL
    wal-00000000000000000000.log           segments, named by the index of their first
    wal-00000000000000012345.log           record; records are numbered from 0 for the
                                           life of the directory

The byte format of segments and records is documented in ``loader.durability.wal_format``: a
24-byte header per segment, then frames ``[u32 length][u32 crc32(payload)][payload]``,
payload = u32 header length + JSON header + Arrow IPC stream of the rows.

Why it is built this way:

- **Group commit.** ``append()`` only queues encoded frames; one writer thread takes
  everything queued, writes it with one ``write()`` and makes it durable with one fsync,
  then wakes every waiter. While an fsync runs, new requests queue up, so the batch size
  grows with the load on its own and an fsync is paid per group, not per request.
- **Order.** Frames reach the file in the order ``append()`` calls reach the queue, and
  a table's ``seq`` must increase from call to call (checked), so replay hands the
  pending store each table's updates in order.
- **One call, one unit.** The records of one ``append()`` call are acknowledged
  together and replay either returns all of them or none (see ``more`` in the format).
- **Crash = torn tail, anything else = corruption.** A crash can only damage the bytes
  of the last, unacknowledged group, which is at the end of the last segment. Replay
  cuts such a tail (and reports it in ``last_repair``); damage anywhere else means
  acknowledged data is gone and raises ``WalCorruptError`` naming file and offset.
  To keep that true in every durability mode, a segment is always fsynced before the
  next one is created, and a segment's creation is made durable with a directory fsync.
- **New segment per open.** After replay the writer starts a fresh segment, so the
  replayed segments are immutable and can be deleted once Delta holds their updates.
- **Truncation without I/O.** Each segment's max ``seq`` per table is kept in memory
  (from the scan at open and from every write), so ``truncate()`` decides from memory.
- **Failure is undone, then healed.** After a failed write or fsync the file's state is
  unknown (Linux may drop dirty pages after reporting an fsync error), so the log refuses
  every append with ``WalFailedError`` until ``heal()`` succeeds. ``heal()`` rolls the
  log back to where the failed group began (truncates that segment there, fsyncs it,
  deletes segments the group created), so the failed group is certainly *not* in the log
  and its callers were told the truth; then appends resume. With the disk still full or
  read-only, ``heal()`` fails and can be called again later (the service does, every
  second). What was acknowledged before the failure was fsynced and stays.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType, TracebackType

from loader.core import failpoints
from loader.core.durable_files import fsync_directory
from loader.core.errors import StartError
from loader.core.updates import WalRecord
from loader.durability.wal_format import (
    SEGMENT_HEADER_SIZE,
    SegmentScan,
    WalCorruptError,
    WalError,
    encode_group,
    encode_segment_header,
    parse_segment_name,
    read_records,
    scan_segment,
    segment_name,
)

__all__ = [
    "Durability",
    "FsyncHook",
    "SegmentInfo",
    "TailRepair",
    "WalClosedError",
    "WalCorruptError",
    "WalError",
    "WalFailedError",
    "WalLockedError",
    "WriteAheadLog",
]

log = logging.getLogger(__name__)


class Durability(str, Enum):
    """When an update counts as acknowledged.

    - ``fsync`` (default): the WAL record is fsynced before the 202; survives power loss.
    - ``flush``: written to the OS before the 202 but not fsynced; survives a crash of the
      service process, not of the machine. Several times more requests per second on
      slow disks.
    """

    fsync = "fsync"
    flush = "flush"


LOCK_NAME = "wal.lock"
DEFAULT_SEGMENT_BYTES = 64 << 20

#: (seconds the group's write + fsync took, records in the group, bytes written).
FsyncHook = Callable[[float, int, int], None]


class WalClosedError(WalError):
    """append() on a log that is not open (never opened, or closed)."""


class WalFailedError(WalError):
    """A write or fsync failed; the log accepts nothing more until ``heal()`` succeeds."""


class WalLockedError(WalError, StartError):
    """Another process (or another WriteAheadLog in this one) holds the WAL directory."""


@dataclass(frozen=True, slots=True)
class TailRepair:
    """What open() cut from the end of the last segment (a write torn by a crash)."""

    path: Path
    #: New length of the file (where valid data ends).
    offset: int
    bytes_cut: int
    #: Complete records cut because the rest of their append() call was torn.
    records_dropped: int
    reason: str


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A read-only view of one segment, e.g. for ``truncate(before_delete=...)``."""

    path: Path
    first_index: int
    records: int
    size: int
    max_seq: Mapping[str, int]
    #: Records that carry an Idempotency-Key.
    keys: int


@dataclass(slots=True, eq=False)  # compared by identity
class _Segment:
    path: Path
    first_index: int
    size: int
    records: int = 0
    max_seq: dict[str, int] = field(default_factory=dict)
    keys: int = 0
    synced: bool = True

    def info(self) -> SegmentInfo:
        return SegmentInfo(
            self.path, self.first_index, self.records, self.size, MappingProxyType(dict(self.max_seq)), self.keys
        )


_Waiter = asyncio.Future[None] | concurrent.futures.Future[None]


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """Where a group began: ``heal()`` rolls the log back to it. (A segment's ``max_seq`` is
    not restored: too high only makes truncation keep the segment longer.)"""

    segment: _Segment
    size: int
    records: int
    keys: int


@dataclass(slots=True)
class _Entry:
    """One append() call, encoded and waiting for the writer."""

    data: bytes
    count: int
    max_seq: dict[str, int]
    keys: int
    waiter: _Waiter
    queued_at: float


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _settle(futures: list[asyncio.Future[None]], error: Callable[[], BaseException] | None) -> None:
    for future in futures:
        if not future.done():  # a cancelled waiter no longer cares
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error())


class WriteAheadLog:
    """Segmented append-only log with group commit; see the module docstring.

    Lifecycle: ``open()`` (or ``with``, or the first ``replay()``) locks the directory,
    checks every segment and cuts a torn tail; ``replay()`` yields what was acknowledged
    before; ``append()``
    / ``append_sync()`` add records; ``truncate()`` deletes segments Delta already holds;
    ``close()`` writes what is queued, fsyncs and unlocks.

    ``durability``:

    - ``fsync`` (default): a record is fsynced before append() returns. Survives a crash
      of the machine (power loss, kernel panic). Costs one fsync per group.
    - ``flush``: a record is handed to the OS with write() before append() returns, and
      fsynced only when its segment is closed or rolled. Survives a crash of the service
      process (the OS still writes the page cache), not of the machine: after a power
      loss the tail of the last segment may be lost or torn, and replay cuts it.

    ``max_delay_seconds`` > 0 makes the writer wait that long after the first queued
    record before writing, to collect larger groups; 0 (default) writes as soon as the
    writer is free, and groups form from requests arriving during the previous fsync.
    With ``siblings`` = n it waits only when the previous group held more than n appends
    (appends are arriving together), so a lone writer is not kept waiting (PostgreSQL's
    ``commit_delay`` and ``commit_siblings``).

    ``on_fsync`` is called on the writer thread after each group is durable (in flush
    mode: written); it must be quick and thread-safe (a Prometheus observe is both).
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        durability: Durability | str = Durability.fsync,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_delay_seconds: float = 0.0,
        siblings: int = 0,
        on_fsync: FsyncHook | None = None,
    ) -> None:
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        if not max_delay_seconds >= 0:
            raise ValueError(f"max_delay_seconds must be >= 0, got {max_delay_seconds}")
        self.directory = Path(directory)
        self.durability = Durability(durability)
        self.segment_bytes = segment_bytes
        self.max_delay_seconds = float(max_delay_seconds)
        self.siblings = siblings
        self._last_group_appends = 0
        self._on_fsync = on_fsync
        #: Set by open() when it cut a torn tail; None when the log ended cleanly.
        self.last_repair: TailRepair | None = None

        # Segment list and metadata: read by truncate()/replay()/stats on any thread.
        self._meta_lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._active: _Segment | None = None
        self._truncate_lock = threading.Lock()

        # Queue between append() callers and the writer thread.
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[_Entry] = deque()
        self._last_seq: dict[str, int] = {}
        self._state = "new"  # new -> open -> closing -> closed
        self._error: WalFailedError | None = None
        self._checkpoint: _Checkpoint | None = None  # where the group being written began
        self._heal_lock = threading.Lock()

        self._fd = -1  # active segment, owned by the writer thread once it runs
        self._lock_fd = -1
        self._thread: threading.Thread | None = None
        self._groups = 0
        self._records_written = 0

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> WriteAheadLog:
        """Lock the directory, check all segments, cut a torn tail, start the writer."""
        with self._cond:
            if self._state != "new":
                raise WalError(f"WAL {self.directory} was already opened")
            self._state = "opening"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock()
            self._recover()
        except BaseException:
            self._release_files()
            with self._cond:
                self._state = "closed"
            raise
        self._thread = threading.Thread(target=self._run, name=f"wal-writer:{self.directory}", daemon=True)
        with self._cond:
            self._state = "open"
        self._thread.start()
        return self

    def close(self) -> None:
        """Write everything queued, fsync the active segment, stop the writer, unlock.

        Idempotent. Appends queued before close() are completed, later ones are refused.
        """
        with self._cond:
            if self._state in ("closing", "closed"):
                return
            was_open = self._state == "open"
            self._state = "closing"
            self._cond.notify_all()
        try:
            if was_open and self._thread is not None:
                self._thread.join()
            if self._fd >= 0 and self._error is None and self._active is not None and not self._active.synced:
                os.fsync(self._fd)  # flush mode: make a clean shutdown durable
                self._active.synced = True
        finally:
            self._release_files()
            with self._cond:
                self._state = "closed"

    def __enter__(self) -> WriteAheadLog:
        if self._state == "new":
            return self.open()
        if self._state != "open":
            raise WalClosedError(f"WAL {self.directory} is {self._state}; open a new WriteAheadLog")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _lock(self) -> None:
        path = self.directory / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WalLockedError(
                f"WAL directory {self.directory} is in use by another writer (pid {holder}, lock file {path}); "
                "stop it or point this service at another WAL directory ([wal] dir)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release_files(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        named = sorted(
            (index, self.directory / name)
            for name in os.listdir(self.directory)
            if (index := parse_segment_name(name)) is not None
        )
        segments: list[_Segment] = []
        next_index = 0
        for position, (index, path) in enumerate(named):
            last = position == len(named) - 1
            scan = scan_segment(path)
            if scan.first_index is not None and scan.first_index != index:
                raise WalCorruptError(path, 0, f"header says first record {scan.first_index}, name says {index}")
            if index < next_index:
                raise WalCorruptError(
                    path, 0, f"first record {index} overlaps the previous segment (ends at {next_index})"
                )
            if scan.damage is not None:
                if not last:
                    raise WalCorruptError(path, scan.damage.offset, scan.damage.reason)
                self._repair(path, scan)
                if scan.first_index is None:  # torn header: nothing was ever acknowledged in it
                    next_index = max(next_index, index)
                    continue
            segment = _Segment(path, index, scan.end, scan.records, dict(scan.max_seq), scan.keys)
            for table, seq in segment.max_seq.items():
                if seq <= self._last_seq.get(table, -1):
                    raise WalCorruptError(path, 0, f"seq of {table!r} goes back to {seq} after {self._last_seq[table]}")
                self._last_seq[table] = seq
            segments.append(segment)
            next_index = index + scan.records

        if segments and segments[-1].records == 0:  # reuse an empty last segment
            active = segments[-1]
            self._fd = os.open(active.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        else:
            active = self._create_segment(next_index)
            segments.append(active)
        with self._meta_lock:
            self._segments, self._active = segments, active

    def _repair(self, path: Path, scan: SegmentScan) -> None:
        assert scan.damage is not None
        if scan.first_index is None:
            path.unlink()
            fsync_directory(self.directory)
            cut, end = scan.file_size, 0
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, scan.end)
                os.fsync(fd)
            finally:
                os.close(fd)
            cut, end = scan.file_size - scan.end, scan.end
        self.last_repair = TailRepair(path, end, cut, scan.dropped_records, scan.damage.reason)
        log.warning(
            "WAL: cut a torn tail of %d bytes (%d complete record(s) of an unfinished append) from %s at byte %d: %s",
            cut,
            scan.dropped_records,
            path,
            end,
            scan.damage.reason,
        )

    def _create_segment(self, first_index: int) -> _Segment:
        """Create, header and fsync a segment (and its directory entry); make it the write target."""
        path = self.directory / segment_name(first_index)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, encode_segment_header(first_index))
            os.fsync(fd)
            fsync_directory(self.directory)
        except BaseException:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        return _Segment(path, first_index, SEGMENT_HEADER_SIZE)

    # ------------------------------------------------------------------ reading

    def replay(self) -> Iterator[WalRecord]:
        """Every record in the log, in the order written (checked at open, decoded now).

        Opens the log first if it is new (so ``list(WriteAheadLog(d).replay())`` recovers
        and leaves the log open for appends). Segments deleted by a concurrent truncate()
        are skipped. Call it once at start-up, before serving appends, to rebuild the
        pending store and the idempotency store; it decodes every row body, so run it off
        the event loop (``asyncio.to_thread``).
        """
        if self._state == "new":
            self.open()
        with self._meta_lock:
            if self._active is None or self._state != "open":
                raise WalClosedError(f"WAL {self.directory} is {self._state}; cannot replay")
            snapshot = [(s, s.path, s.size) for s in self._segments]
        for segment, path, end in snapshot:
            try:
                yield from read_records(path, SEGMENT_HEADER_SIZE, end)
            except FileNotFoundError:
                with self._meta_lock:
                    if segment in self._segments:
                        raise

    def last_seqs(self) -> dict[str, int]:
        """Highest seq per table that the log holds or has queued (seed for seq counters).

        Tables whose every segment was truncated are absent: take their last seq from Delta.
        """
        with self._cond:
            return dict(self._last_seq)

    def segment_info(self) -> list[SegmentInfo]:
        with self._meta_lock:
            return [s.info() for s in self._segments]

    @property
    def size_bytes(self) -> int:
        """Bytes of records in the log (segment headers not counted: an empty log is 0).

        Disk usage is this plus 24 bytes per segment.
        """
        with self._meta_lock:
            return sum(s.size - SEGMENT_HEADER_SIZE for s in self._segments)

    @property
    def segments(self) -> int:
        with self._meta_lock:
            return len(self._segments)

    @property
    def groups_written(self) -> int:
        """Group commits so far (fsyncs in fsync mode, not counting segment rolls)."""
        return self._groups

    @property
    def records_written(self) -> int:
        return self._records_written

    # ------------------------------------------------------------------ appending

    async def append(self, records: Sequence[WalRecord]) -> None:
        """Return once ``records`` are durable (per ``durability``), as one unit.

        Safe from many tasks (and threads) at once. Raises ValueError for a seq that is
        negative or does not increase per table, TypeError for a response that is not
        JSON, before anything is written; WalFailedError if the write or fsync failed.
        Cancelling the caller does not withdraw records already queued.
        """
        if records:
            await self.append_future(records)

    def append_future(self, records: Sequence[WalRecord]) -> asyncio.Future[None]:
        """``append`` as the future it waits on, with no coroutine or task around it: intake's
        hot path (a task per request costs the event loop more than the append's own work).
        The errors ``append`` raises before writing are raised here, at once."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if records:
            self._enqueue(records, future)
        else:
            future.set_result(None)
        return future

    def append_sync(self, records: Sequence[WalRecord], timeout: float | None = None) -> None:
        """Blocking append() for tools, tests and non-async callers (not on the event loop)."""
        if not records:
            return
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._enqueue(records, future)
        future.result(timeout)

    def _enqueue(self, records: Sequence[WalRecord], waiter: _Waiter) -> None:
        data = encode_group(records)  # CPU work outside the lock; errors reach the caller
        max_seq: dict[str, int] = {}
        keys = 0
        for record in records:
            keys += record.idempotency_key is not None
            max_seq[record.update.table] = record.update.seq
        with self._cond:
            if self._error is not None:
                raise WalFailedError(str(self._error)) from self._error
            if self._state != "open":
                raise WalClosedError(f"WAL {self.directory} is {self._state}; append refused")
            seen = dict(self._last_seq)
            for record in records:
                table, seq = record.update.table, record.update.seq
                if seq <= seen.get(table, -1):
                    raise ValueError(f"WAL append: seq {seq} of {table!r} is not after {seen[table]}")
                seen[table] = seq
            self._last_seq.update(max_seq)
            self._queue.append(_Entry(data, len(records), max_seq, keys, waiter, time.monotonic()))
            if len(self._queue) == 1:
                self._cond.notify()

    # ------------------------------------------------------------------ writer thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and self._state == "open":
                    self._cond.wait()
                if not self._queue:
                    return  # closing and drained
                if self.max_delay_seconds > 0 and self._last_group_appends > self.siblings:
                    deadline = self._queue[0].queued_at + self.max_delay_seconds
                    while self._state == "open" and (left := deadline - time.monotonic()) > 0:
                        self._cond.wait(left)
                batch = list(self._queue)
                self._queue.clear()
                self._last_group_appends = len(batch)
            if self._error is not None:
                self._resolve(batch, self._error)
                continue
            began = time.perf_counter()
            self._checkpoint = self._mark()
            try:
                nbytes = self._write_group(batch)
            except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
                self._fail(exc, batch)
                continue
            seconds = time.perf_counter() - began
            records = sum(e.count for e in batch)
            self._groups += 1
            self._records_written += records
            roll_error: BaseException | None = None
            if self._active is not None and self._active.size >= self.segment_bytes:
                # Roll now, not at the next append, so the full segment becomes truncatable;
                # before waking the waiters, so a returned append() sees a settled log.
                # Rare (once per segment_bytes) and about three fsyncs long.
                self._checkpoint = self._mark()  # the group is durable: heal() keeps it
                try:
                    self._roll()
                except BaseException as exc:  # noqa: BLE001
                    roll_error = exc
            self._resolve(batch, None)  # durable even if the roll failed
            if roll_error is not None:
                self._fail(roll_error, [])
            if self._on_fsync is not None:
                try:
                    self._on_fsync(seconds, records, nbytes)
                except Exception:
                    log.exception("WAL on_fsync hook failed")

    def _write_group(self, batch: list[_Entry]) -> int:
        """Write the batch (rolling segments as needed), then fsync once; bytes written."""
        chunk: list[_Entry] = []
        chunk_bytes = written = 0
        for entry in batch:
            active = self._active
            assert active is not None
            if chunk and active.size + chunk_bytes >= self.segment_bytes:
                written += self._write_chunk(chunk, chunk_bytes)
                chunk, chunk_bytes = [], 0
                self._roll()
            chunk.append(entry)
            chunk_bytes += len(entry.data)
        written += self._write_chunk(chunk, chunk_bytes)
        failpoints.hit("wal.after-write")
        if self.durability is Durability.fsync:
            assert self._active is not None
            os.fsync(self._fd)
            self._active.synced = True
        return written

    def _write_chunk(self, chunk: list[_Entry], nbytes: int) -> int:
        if not chunk:
            return 0
        active = self._active
        assert active is not None
        failpoints.tear("wal.torn-write", self._fd, chunk[0].data)
        _write_all(self._fd, chunk[0].data if len(chunk) == 1 else b"".join(e.data for e in chunk))
        with self._meta_lock:
            active.size += nbytes
            active.synced = False
            for entry in chunk:
                active.records += entry.count
                active.keys += entry.keys
                active.max_seq.update(entry.max_seq)
        return nbytes

    def _roll(self) -> None:
        """Seal the active segment (always fsynced: only the last segment may be torn)."""
        old = self._active
        assert old is not None
        if not old.synced:
            os.fsync(self._fd)
            old.synced = True
        new = self._create_segment(old.first_index + old.records)
        with self._meta_lock:
            self._segments.append(new)
            self._active = new

    def _mark(self) -> _Checkpoint:
        active = self._active
        assert active is not None
        return _Checkpoint(active, active.size, active.records, active.keys)

    def _fail(self, exc: BaseException, batch: list[_Entry]) -> None:
        error = WalFailedError(
            f"WAL write to {self.directory} failed ({exc}); appends are refused until the log "
            "can be written again (the service retries by itself)"
        )
        error.__cause__ = exc
        log.error("%s", error, exc_info=exc)
        with self._cond:
            self._error = error
            batch = batch + list(self._queue)
            self._queue.clear()
        self._resolve(batch, error)

    def _resolve(self, batch: list[_Entry], error: WalFailedError | None) -> None:
        """Wake every waiter of the batch: one call_soon_threadsafe per event loop."""

        def make_error() -> BaseException:
            assert error is not None
            fresh = WalFailedError(str(error))  # one instance per waiter: tracebacks stay apart
            fresh.__cause__ = error.__cause__
            return fresh

        maker = None if error is None else make_error
        per_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for entry in batch:
            waiter = entry.waiter
            if isinstance(waiter, concurrent.futures.Future):
                if maker is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(maker())
            else:
                per_loop.setdefault(waiter.get_loop(), []).append(waiter)
        for loop, futures in per_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, futures, maker)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    # ------------------------------------------------------------------ healing

    @property
    def failed(self) -> str | None:
        """Why appends are refused (a failed write or fsync), or None."""
        error = self._error
        return None if error is None else str(error.__cause__ or error)

    def heal(self) -> bool:
        """Undo the failed group and reopen the log for appends; False while the disk still
        refuses (call again later). Safe from any thread; a no-op on a healthy log."""
        with self._heal_lock:
            with self._cond:
                if self._error is None:
                    return True
                if self._state != "open":
                    return False
                checkpoint = self._checkpoint
            assert checkpoint is not None
            try:
                self._rollback(checkpoint)
            except OSError as exc:
                log.warning("WAL %s still cannot be written: %s", self.directory, exc)
                return False
            with self._cond:
                self._error = None
            log.warning("WAL %s writable again: appends resume (the failed group was rolled back)", self.directory)
            return True

    def _rollback(self, checkpoint: _Checkpoint) -> None:
        """Truncate the checkpoint's segment to where the group began, delete the segments
        the group created, and make the checkpoint's segment the write target again."""
        segment = checkpoint.segment
        with self._meta_lock:
            later = self._segments[self._segments.index(segment) + 1 :]
            known = {s.path for s in self._segments}
        strays = [  # a segment whose creation failed half-way is in no list
            self.directory / name
            for name in os.listdir(self.directory)
            if (index := parse_segment_name(name)) is not None
            and index > segment.first_index
            and self.directory / name not in known
        ]
        fd = os.open(segment.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, checkpoint.size)
            os.fsync(fd)
            for path in [s.path for s in later] + strays:
                path.unlink(missing_ok=True)
            fsync_directory(self.directory)
        except BaseException:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        with self._meta_lock:
            self._segments = [s for s in self._segments if s not in later]
            segment.size, segment.records, segment.keys = checkpoint.size, checkpoint.records, checkpoint.keys
            segment.synced = True
            self._active = segment

    # ------------------------------------------------------------------ truncation

    def truncate(
        self,
        committed: Mapping[str, int],
        *,
        before_delete: Callable[[list[SegmentInfo]], None] | None = None,
    ) -> int:
        """Delete every sealed segment whose records all have ``seq <= committed[table]``.

        ``committed`` maps a table to its last seq held by Delta; a segment with a record of
        a table not in it stays. The active segment always stays. Decided from in-memory
        metadata, no file is read. ``before_delete(segments)`` runs first (e.g. to save the
        idempotency store when ``any(s.keys for s in segments)``); if it raises, nothing is
        deleted. Safe to call from any thread while appends run. Returns segments deleted.
        """
        with self._truncate_lock:
            with self._meta_lock:
                victims = [
                    s
                    for s in self._segments
                    if s is not self._active
                    and all(t in committed and seq <= committed[t] for t, seq in s.max_seq.items())
                ]
                infos = [s.info() for s in victims]
            if not victims:
                return 0
            if before_delete is not None:
                before_delete(infos)
            with self._meta_lock:
                self._segments = [s for s in self._segments if s not in victims]
            for segment in victims:
                segment.path.unlink(missing_ok=True)
            fsync_directory(self.directory)
            log.info("WAL: deleted %d segment(s) whose updates are all in Delta", len(victims))
            return len(victims)
