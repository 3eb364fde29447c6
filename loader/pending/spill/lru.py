"""LRU paging over queues: the baseline Motwani and Thomas argue against (section 1.1).

A buffer manager that pages by recency evicts the least recently used memory, and in a
FIFO queue the least recently touched tuples are the oldest: exactly the ones consumed
next. On overflow it writes out, as one operation, the least recently used in-memory
tuple and its newer neighbours in the same run up to a chunk (like a page); a head on
disk is read back in one segment when it is consumed. Nothing stops it from writing a
tuple it read back, so it may thrash: ``acyclic`` is False.

For the benchmark only; the service does not offer it.
"""

from __future__ import annotations

from loader.pending.spill.model import Item, Queue, SpillPolicy


class Lru(SpillPolicy):
    name = "lru"
    acyclic = False

    def __init__(self, chunk_bytes: int | None = None) -> None:
        self._chunk = chunk_bytes
        self._pinned: Item | None = None

    @property
    def chunk(self) -> int:
        if self._chunk is not None:
            return self._chunk
        return max(1, self.cache.budget // (2 * self.cache.n))

    def arrived(self, queue: Queue, item: Item | None) -> None:
        cache = self.cache
        while cache.over_budget:
            victim: tuple[int, Queue, int, int] | None = None
            for q in cache:
                for index, run in enumerate(q.runs):
                    if run.on_disk:
                        continue
                    for position, it in enumerate(run.items):
                        if it is self._pinned:
                            continue
                        if victim is None or it.used < victim[0]:
                            victim = (it.used, q, index, position)
            if victim is None:
                return
            _, q, index, position = victim
            total = count = 0
            for it in list(q.runs[index].items)[position:]:
                if count and total + it.size > self.chunk:
                    break
                total += it.size
                count += 1
            cache.write(q, index, position, count)

    def after_read(self, queue: Queue) -> None:
        # The head just read is consumed next, so it is pinned (as a page being accessed is):
        # when it alone exceeds the budget it would otherwise be the only victim, written
        # straight back, and consume() would find the head on disk again.
        self._pinned = queue.runs[0].items[0]
        try:
            self.arrived(queue, None)
        finally:
            self._pinned = None
