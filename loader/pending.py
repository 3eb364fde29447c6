"""Pending updates per table, waiting to be loaded (held in memory).

A FIFO per table: the dispatcher takes the whole queue (or the policy's batch limit)
as one batch and puts it back at the front if the load fails, so order and
exactly-once are preserved. The spill-queue issue replaces how payloads are held, not
this interface.
"""

from __future__ import annotations

from collections import deque

from loader.updates import Update


class PendingStore:
    def __init__(self) -> None:
        self._queues: dict[str, deque[Update]] = {}
        self._bytes: dict[str, int] = {}

    def add_table(self, table: str) -> None:
        self._queues.setdefault(table, deque())
        self._bytes.setdefault(table, 0)

    def append(self, update: Update) -> None:
        queue = self._queues[update.table]
        if queue and update.seq <= queue[-1].seq:
            raise ValueError(f"update {update.seq} of {update.table!r} is not after {queue[-1].seq}")
        queue.append(update)
        self._bytes[update.table] += update.nbytes

    def take(self, table: str, limit: int | None = None) -> tuple[Update, ...]:
        """Remove and return the oldest ``limit`` updates (all when None)."""
        queue = self._queues[table]
        count = len(queue) if limit is None else min(limit, len(queue))
        taken = tuple(queue.popleft() for _ in range(count))
        self._bytes[table] -= sum(u.nbytes for u in taken)
        return taken

    def put_back(self, table: str, updates: tuple[Update, ...]) -> None:
        """Return a failed batch to the front of its queue, in order."""
        queue = self._queues[table]
        queue.extendleft(reversed(updates))
        self._bytes[table] += sum(u.nbytes for u in updates)

    def count(self, table: str) -> int:
        return len(self._queues[table])

    def bytes(self, table: str) -> int:
        return self._bytes[table]

    @property
    def total_bytes(self) -> int:
        return sum(self._bytes.values())
