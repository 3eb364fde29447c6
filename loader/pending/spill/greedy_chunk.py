"""GreedyChunk and the hybrid rule (Motwani and Thomas, section 3): the extended cost model.

A disk operation moving t bytes costs c0 + c1 * t. With T = c0 / c1 < M/2,
GreedyChunk is the greedy algorithm (Theorem 3.1: write the least needed to correct an
overflow, read only what is consumed next) working in blocks of T: on overflow it
writes the newest T of the queue, and it reads spilled tuples back one block of T at a
time, just before they are consumed. The oldest T of a queue are never written, so it
is acyclic; 4-competitive (Theorem 3.2).

Corollary 3.1's hybrid: Half when T > M/2 (Half is 4-competitive there, Theorem 3.3),
GreedyChunk otherwise. c0 and c1 are measured on the spill disk at start-up
(``loader.pending.spill.disk_cost``) or taken from configuration.

Several queues (section 4.4, details deferred by the paper): on overflow the block is
taken from the queue with the most bytes in memory.
"""

from __future__ import annotations

from loader.pending.spill.buffered_head import _by_memory
from loader.pending.spill.half import Half
from loader.pending.spill.model import Item, Queue, SpillPolicy


class GreedyChunk(SpillPolicy):
    name = "greedy-chunk"

    def __init__(self, block_bytes: int) -> None:
        if block_bytes < 1:
            raise ValueError("GreedyChunk's block T = c0/c1 must be at least 1 byte")
        self.block = block_bytes

    @property
    def chunk(self) -> int:
        return self.block

    def arrived(self, queue: Queue, item: Item | None) -> None:
        cache = self.cache
        while cache.over_budget:
            if not any(self.write_newest(q, self.block, self.block) for q in _by_memory(cache)):
                break
        self.fallback(self.block)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "block_bytes": self.block}


def hybrid(budget: int, c0: float, c1: float) -> SpillPolicy:
    """Corollary 3.1: Half when T = c0/c1 > M/2, else GreedyChunk with blocks of T."""
    block = c0 / c1 if c1 > 0 else float("inf")
    if block > budget / 2:
        return Half()
    return GreedyChunk(max(1, int(block)))
