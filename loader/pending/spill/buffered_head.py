"""Algorithm BufferedHead (Motwani and Thomas, section 4.1): n queues, one shared buffer.

Each queue keeps a protected head of up to M/2n (its oldest tuples) that never leaves
memory. On overflow the newest M/2n tuples of the largest queue in memory are written
out as one operation; a queue whose head is on disk reads it back M/2n at a time (one
spilled run, written as one chunk). Read-ins may cause write-outs to make room.

Acyclic (Theorem 4.1): read-in tuples are the oldest of their queue, inside the
protected head, so they are never written again (the model also refuses it).
2n-competitive under round-robin consumption (Theorem 4.2), and under adversarial
consumption against an offline algorithm with M/2 less memory (Theorem 4.5).

Memory is never partitioned statically between queues (section 4 shows why that fails):
a queue may hold all of M if it is the only busy one.
"""

from __future__ import annotations

from collections.abc import Iterator

from loader.pending.spill.model import Item, Queue, QueueCache, SpillPolicy


class BufferedHead(SpillPolicy):
    name = "buffered-head"

    @property
    def chunk(self) -> int:
        return max(1, self.cache.budget // (2 * self.cache.n))

    def arrived(self, queue: Queue, item: Item | None) -> None:
        cache = self.cache
        chunk = self.chunk
        while cache.over_budget:
            # The largest queue in memory; one with nothing writable beyond its protected
            # head (or its read-in tuples) is passed over for the next largest.
            if not any(self.write_newest(q, chunk, chunk) for q in _by_memory(cache)):
                break
        self.fallback(chunk)


def _by_memory(cache: QueueCache) -> Iterator[Queue]:
    """Queues by bytes in memory, largest first: the largest found in one pass (the usual
    answer), the full order only if it has nothing writable."""
    largest = max(cache, key=lambda q: q.mem_bytes, default=None)
    if largest is None or not largest.mem_bytes:
        return
    yield largest
    yield from sorted((q for q in cache if q.mem_bytes and q is not largest), key=lambda q: q.mem_bytes, reverse=True)
