"""The queue-caching model of Motwani and Thomas ("Caching Queues in Memory Buffers", section 1.1).

``n`` FIFO queues share a memory buffer of ``budget`` bytes. Items enter at the tails
(always into memory first, as the paper assumes) and are consumed at the heads; when
memory overflows a spilling policy writes contiguous runs of one queue to disk and
reads them back before they are consumed. A disk operation moves one contiguous run of
one queue (a *segment*): its cost is one operation in the unit-cost model, c0 + c1 * bytes
in the extended one.

This module holds the state and the bookkeeping only: which items are where, what every
operation moved, and the acyclicity record (each item written and read at most once for
the acyclic policies). It does no I/O: the live store (``loader.pending.store``) passes a
:class:`SegmentIO` that writes and reads real files, the tests and the benchmark pass
:class:`NullIO`. The rule deciding *what* to write and read lives in one policy module
each (``loader/pending/spill/{half,buffered_head,greedy_chunk,lru}.py``).

Sizes are bytes and items may differ in size (the paper's tuples are uniform); with all
sizes 1 the model is exactly the paper's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(slots=True, eq=False)
class Item:
    """One queued update: its key (sequence number), resident size and payload."""

    key: int
    size: int
    value: Any = None
    #: Tick of the last arrival or read (LRU's clock); policies other than LRU ignore it.
    used: int = 0
    written: bool = False
    read: bool = False


@dataclass(slots=True, eq=False)
class Run:
    """A maximal stretch of a queue in one place: in memory, or one segment on disk."""

    items: deque[Item]
    nbytes: int
    segment: int | None = None  # None: in memory

    @property
    def on_disk(self) -> bool:
        return self.segment is not None


@dataclass(frozen=True, slots=True)
class DiskOp:
    """One disk operation: a contiguous run of one queue, written or read back."""

    kind: Literal["write", "read"]
    queue: Hashable
    segment: int
    first_key: int
    last_key: int
    items: int
    nbytes: int
    #: "driver": read back into memory; "loader": read in place by the load job (Spark).
    reader: Literal["driver", "loader", ""] = ""


class SegmentIO(Protocol):
    """Where segments really go. ``write`` may replace item values (e.g. by file references)."""

    def write(self, queue: Hashable, segment: int, items: list[Item]) -> None: ...
    def read(self, queue: Hashable, segment: int, items: list[Item]) -> None: ...
    def discard(self, queue: Hashable, segment: int) -> None: ...


class NullIO:
    """No files: the pure model, for tests, the offline comparison and the benchmark."""

    def write(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        pass

    def read(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        pass

    def discard(self, queue: Hashable, segment: int) -> None:
        pass


class SpillError(RuntimeError):
    """A policy broke the model's rules (a bug), or a segment could not be written."""


@dataclass
class OpCounts:
    writes: int = 0
    reads: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    #: Segments the load job read in place instead of the driver (counted in ``reads`` too).
    loader_reads: int = 0

    @property
    def ops(self) -> int:
        return self.writes + self.reads

    def cost(self, c0: float, c1: float) -> float:
        """Extended cost model (section 3): each operation costs c0 + c1 * bytes."""
        return c0 * self.ops + c1 * (self.bytes_written + self.bytes_read)


class Queue:
    """One table's queue as a list of runs, oldest first; adjacent memory runs are merged."""

    __slots__ = ("name", "runs", "mem_bytes", "disk_bytes", "count")

    def __init__(self, name: Hashable) -> None:
        self.name = name
        self.runs: list[Run] = []
        self.mem_bytes = 0
        self.disk_bytes = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    @property
    def head_on_disk(self) -> bool:
        return bool(self.runs) and self.runs[0].on_disk

    def items(self) -> Iterator[Item]:
        for run in self.runs:
            yield from run.items


class QueueCache:
    """The shared memory buffer, its queues, and every disk operation made so far."""

    def __init__(
        self,
        budget: int,
        policy: SpillPolicy,
        io: SegmentIO | None = None,
        *,
        record_ops: bool = False,
        on_op: Callable[[DiskOp], None] | None = None,
    ) -> None:
        if budget < 1:
            raise ValueError("the memory budget must be at least 1 byte")
        self.budget = budget
        self.policy = policy
        self.io: SegmentIO = io or NullIO()
        self.queues: dict[Hashable, Queue] = {}
        self.resident = 0
        self.on_disk = 0
        self.peak_resident = 0
        self.counts = OpCounts()
        self.ops: list[DiskOp] | None = [] if record_ops else None
        self._on_op = on_op
        self._next_segment = 1
        self.tick = 0
        policy.attach(self)

    # -- queues -------------------------------------------------------------------
    def add_queue(self, name: Hashable) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = Queue(name)
        return queue

    @property
    def n(self) -> int:
        return max(1, len(self.queues))

    def __iter__(self) -> Iterator[Queue]:
        return iter(self.queues.values())

    # -- the driver's events ---------------------------------------------------------
    def arrive(self, name: Hashable, key: int, size: int, value: Any = None) -> Item:
        """An item enters its queue's tail, in memory; the policy then restores the budget."""
        if size < 0:
            raise ValueError("an item's size cannot be negative")
        queue = self.queues[name]
        self.tick += 1
        item = Item(key, size, value, used=self.tick)
        if queue.runs and not queue.runs[-1].on_disk:
            last = queue.runs[-1]
            last.items.append(item)
            last.nbytes += size
        else:
            queue.runs.append(Run(deque([item]), size))
        queue.mem_bytes += size
        queue.count += 1
        self._resident(size)
        self.policy.arrived(queue, item)
        return item

    def consume(self, name: Hashable, count: int = 1) -> list[Item]:
        """Consume ``count`` items from the head, in memory (the paper's model).

        When the head is on disk the policy reads it back first (its read-in rule).
        """
        queue = self.queues[name]
        out: list[Item] = []
        for _ in range(min(count, queue.count)):
            self.tick += 1
            if queue.runs[0].on_disk:
                self.policy.read_in(queue)
                if queue.runs[0].on_disk:
                    raise SpillError(f"policy {self.policy.name} did not read in the head of {queue.name!r}")
            run = queue.runs[0]
            item = run.items.popleft()
            run.nbytes -= item.size
            if not run.items:
                queue.runs.pop(0)
            queue.mem_bytes -= item.size
            queue.count -= 1
            self._resident(-item.size)
            out.append(item)
        self.policy.consumed(queue)
        return out

    def take_all(self, name: Hashable) -> list[Run]:
        """Hand the whole queue to a load job: memory runs as they are, segments unread.

        The job reads each segment in place (one read operation each, ``reader="loader"``),
        which is what reading it back would cost, without the trip through memory.
        """
        queue = self.queues[name]
        runs, queue.runs = queue.runs, []
        for run in runs:
            if run.on_disk:
                self._count_read(queue, run, "loader")
                for item in run.items:
                    item.read = True
        self._resident(-queue.mem_bytes)
        self.on_disk -= queue.disk_bytes
        queue.mem_bytes = queue.disk_bytes = queue.count = 0
        self.policy.consumed(queue)
        return runs

    def put_back(self, name: Hashable, runs: list[Run]) -> None:
        """Return runs taken by ``take_all`` to the front of the queue (a failed load).

        Segments go back as segments (their files were not deleted), so nothing is
        written again; the read counted for them stands, as it did happen.
        """
        queue = self.queues[name]
        for run in runs:
            if run.on_disk:
                queue.disk_bytes += run.nbytes
                self.on_disk += run.nbytes
                for item in run.items:  # read in place by the failed load, never brought back:
                    item.read = False  # reading it back later is its first read-in, not a second
            else:
                queue.mem_bytes += run.nbytes
                self._resident(run.nbytes)
            queue.count += len(run.items)
        queue.runs[:0] = runs
        _merge_memory_runs(queue.runs)
        self.policy.arrived(queue, None)

    def resize(self, name: Hashable, item: Item, size: int, *, rebalance: bool = True) -> None:
        """An item in memory changed size in place (a latest table's pending store moves a
        key's new value into the place of its waiting one, loader/pending/keyed.py).

        The item's run is found by its key range (runs hold consecutive keys), so the cost
        is the number of runs, not of items. Growth may overflow the budget: the policy
        then restores it as after an arrival.
        """
        if size < 0:
            raise ValueError("an item's size cannot be negative")
        queue = self.queues[name]
        for run in queue.runs:
            if run.items[0].key <= item.key <= run.items[-1].key:
                if run.on_disk:
                    raise SpillError(f"item {item.key} of queue {name!r} is on disk; it cannot change size")
                delta = size - item.size
                item.size = size
                run.nbytes += delta
                queue.mem_bytes += delta
                self._resident(delta)
                if delta > 0 and rebalance:
                    self.policy.arrived(queue, None)
                return
        raise KeyError(f"item {item.key} is not in queue {name!r}")

    # -- what policies call ------------------------------------------------------------
    def write(self, queue: Queue, run_index: int, start: int, count: int) -> Run:
        """Write items ``start .. start+count`` of memory run ``run_index`` as one segment."""
        run = queue.runs[run_index]
        if run.on_disk or count < 1 or start < 0 or start + count > len(run.items):
            raise SpillError(f"cannot write items {start}..{start + count} of run {run_index} of {queue.name!r}")
        suffix = start + count == len(run.items)
        # The usual write is the newest suffix: pop it rather than copy the whole run.
        listed = list(run.items) if not suffix else []
        moved = listed[start : start + count] if not suffix else [run.items[-count + i] for i in range(count)]
        if self.policy.acyclic:
            for item in moved:
                if item.written:
                    raise SpillError(f"item {item.key} of {queue.name!r} written twice by {self.policy.name}")
        nbytes = sum(i.size for i in moved)
        segment = Run(deque(moved), nbytes, self._next_segment)
        self.io.write(queue.name, self._next_segment, moved)  # nothing changes if this raises
        self._next_segment += 1
        for item in moved:
            item.written = True
        if suffix:
            for _ in range(count):
                run.items.pop()
            run.nbytes -= nbytes
            queue.runs[run_index : run_index + 1] = [run, segment] if run.items else [segment]
        else:
            pieces = []
            if start:
                before = listed[:start]
                pieces.append(Run(deque(before), sum(i.size for i in before)))
            pieces.append(segment)
            if start + count < len(listed):
                after = listed[start + count :]
                pieces.append(Run(deque(after), run.nbytes - nbytes - (pieces[0].nbytes if start else 0)))
            queue.runs[run_index : run_index + 1] = pieces
        queue.mem_bytes -= nbytes
        queue.disk_bytes += nbytes
        self._resident(-nbytes)
        self.on_disk += nbytes
        self.counts.writes += 1
        self.counts.bytes_written += nbytes
        self._record(DiskOp("write", queue.name, segment.segment or 0, moved[0].key, moved[-1].key, count, nbytes))
        return segment

    def write_newest(self, queue: Queue, run_index: int, count: int) -> Run:
        """Write the newest ``count`` items of a memory run."""
        return self.write(queue, run_index, len(queue.runs[run_index].items) - count, count)

    def read(self, queue: Queue, run_index: int) -> None:
        """Read one segment back into memory (one read operation)."""
        run = queue.runs[run_index]
        if not run.on_disk:
            raise SpillError(f"run {run_index} of {queue.name!r} is not on disk")
        items = list(run.items)
        self.io.read(queue.name, run.segment, items)  # type: ignore[arg-type]
        for item in items:
            if item.read and self.policy.acyclic:
                raise SpillError(f"item {item.key} of {queue.name!r} read twice by {self.policy.name}")
            item.read = True
            item.used = self.tick
        self._count_read(queue, run, "driver")
        self.io.discard(queue.name, run.segment)  # type: ignore[arg-type]
        run.segment = None
        queue.disk_bytes -= run.nbytes
        queue.mem_bytes += run.nbytes
        self.on_disk -= run.nbytes
        self._resident(run.nbytes)
        _merge_memory_runs(queue.runs)

    def _count_read(self, queue: Queue, run: Run, reader: Literal["driver", "loader"]) -> None:
        self.counts.reads += 1
        self.counts.bytes_read += run.nbytes
        if reader == "loader":
            self.counts.loader_reads += 1
        first, last = run.items[0].key, run.items[-1].key
        self._record(DiskOp("read", queue.name, run.segment or 0, first, last, len(run.items), run.nbytes, reader))

    def _record(self, op: DiskOp) -> None:
        if self.ops is not None:
            self.ops.append(op)
        if self._on_op is not None:
            self._on_op(op)

    def _resident(self, delta: int) -> None:
        self.resident += delta
        if self.resident > self.peak_resident:
            self.peak_resident = self.resident

    # -- questions policies ask ----------------------------------------------------------
    def largest_in_memory(self, writable: Callable[[Queue], int]) -> Queue | None:
        """The queue with the most writable bytes in memory (ties: the first registered)."""
        best, best_bytes = None, 0
        for queue in self.queues.values():
            size = writable(queue)
            if size > best_bytes:
                best, best_bytes = queue, size
        return best

    @property
    def over_budget(self) -> bool:
        return self.resident > self.budget


def _merge_memory_runs(runs: list[Run]) -> None:
    """Join adjacent memory runs (after a read-in or a put-back) so the layout stays minimal."""
    i = 0
    while i + 1 < len(runs):
        a, b = runs[i], runs[i + 1]
        if not a.on_disk and not b.on_disk:
            a.items.extend(b.items)
            a.nbytes += b.nbytes
            del runs[i + 1]
        else:
            i += 1


def newest_writable(
    queue: Queue, protect: int, skip_read: bool, enough: int | None = None, prefer: int = 0
) -> tuple[int, int]:
    """(run index, item count) of a memory run's writable newest items, or (-1, 0).

    When the queue's head is in memory, its oldest items that fit in ``protect`` bytes
    are protected: BufferedHead's protected head, GreedyChunk's oldest T, Half's head (an
    update bigger than that is not: the load job reads segments in place, and a
    consumption reads it back). With ``skip_read`` an item read back once is never written
    again (acyclicity). ``enough``: the caller needs no more than the newest items making
    this many bytes, so the walk stops there (a long run is not walked whole on every
    write). ``prefer``: the newest run offering at least this many bytes is chosen over a
    newer, shorter one (BufferedHead's writes of M/2n, not of whatever the tail holds).
    """
    fallback = (-1, 0)
    for index in range(len(queue.runs) - 1, -1, -1):
        run = queue.runs[index]
        if run.on_disk:
            continue
        items = run.items
        limit = len(items)
        if index == 0:
            kept = protected = 0
            for item in items:
                if kept + item.size > protect:
                    break
                kept += item.size
                protected += 1
            limit -= protected
        count = total = 0
        for item in reversed(items):
            if count >= limit or (skip_read and item.read) or (enough is not None and total >= enough):
                break
            count += 1
            total += item.size
        if count and total >= prefer:
            return index, count
        if count and fallback[0] < 0:
            fallback = (index, count)
    return fallback


def suffix_count(items: Iterable[Item], target: int, available: int) -> int:
    """How many of the newest items (at most ``available``) make at least ``target`` bytes."""
    count = total = 0
    for item in items:
        if count >= available:
            break
        count += 1
        total += item.size
        if total >= target:
            break
    return count


class SpillPolicy(ABC):
    """Decides what to write on overflow and what to read before a consumption."""

    name: str = ""
    #: Never writes an item twice nor reads it twice (section 1.1's acyclicity).
    acyclic: bool = True

    def attach(self, cache: QueueCache) -> None:
        self.cache = cache

    @abstractmethod
    def arrived(self, queue: Queue, item: Item | None) -> None:
        """Restore the budget after an arrival (or a put-back, ``item`` None)."""

    def read_in(self, queue: Queue) -> None:
        """The head of ``queue`` is on disk and is to be consumed: bring it in."""
        self.cache.read(queue, 0)
        self.after_read(queue)

    def after_read(self, queue: Queue) -> None:
        """A read-in may overflow memory; the default makes room like an arrival does."""
        self.arrived(queue, None)

    def consumed(self, queue: Queue) -> None:
        """Items left ``queue``; nothing to do for most policies."""

    # -- shared moves ---------------------------------------------------------------
    def write_newest(self, queue: Queue, target: int, protect: int) -> int:
        """Write the newest writable items of ``queue``, at least ``target`` bytes when it
        has them, as one segment; returns the bytes written (0: nothing writable)."""
        index, available = newest_writable(queue, protect, skip_read=self.acyclic, enough=target, prefer=target)
        if index < 0:
            return 0
        run = queue.runs[index]
        count = suffix_count(reversed(run.items), target, available)
        return self.cache.write_newest(queue, index, count).nbytes

    def writable(self, protect: int) -> Callable[[Queue], int]:
        """Bytes of a queue's newest memory run that ``write_newest`` could move."""

        def size(queue: Queue) -> int:
            index, count = newest_writable(queue, protect, skip_read=self.acyclic, enough=self.chunk)
            if index < 0:
                return 0
            items = queue.runs[index].items
            return sum(items[len(items) - 1 - i].size for i in range(count))

        return size

    def fallback(self, target: int) -> None:
        """Beyond the paper's rule (several queues under a single-queue algorithm): write
        the newest ``target`` bytes of the queue with the most writable bytes until within budget
        (a chunk, not just the overflow: one-item segments would make every write a seek)."""
        cache = self.cache
        while cache.over_budget:
            queue = cache.largest_in_memory(self.writable(0))
            if queue is None or not self.write_newest(queue, target, 0):
                return

    @property
    def chunk(self) -> int:
        """Bytes a write normally moves (reported by the service)."""
        return 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "chunk_bytes": self.chunk, "acyclic": self.acyclic}


@dataclass
class Step:
    """One tick of a workload for the pure model: arrivals then consumptions."""

    arrivals: list[tuple[Hashable, int]] = field(default_factory=list)  # (queue, size)
    consume: list[Hashable] = field(default_factory=list)
