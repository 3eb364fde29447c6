"""Algorithm Half (Motwani and Thomas, section 2): 2-competitive for one queue, unit cost.

The queue is head (oldest, in memory), spilled (on disk) and tail (newest, in memory).
- first write: when memory overflows and nothing is spilled, the newest tuples of the
  head beyond its oldest M/2 are written out;
- [Write-Out]: when the tail reaches M/2 while something is spilled, the whole tail is
  written out (one operation of M/2);
- [Read-In]: as soon as the head empties while something is spilled, the oldest spilled
  run (M/2) is read back (here: before the queue's next arrival or consumption, the same
  operations);
- [Transfer]: when spilled empties, tail and head are one memory run again (the model
  merges adjacent memory runs, so this needs no move).
Acyclic (Lemma 2.2): the oldest M/2, which holds every read-in tuple, is never written.

Several queues: Half is a single-queue algorithm. The rules above run on each queue
against the shared budget, and the model's shared fallback writes the newest tuples of
the fullest queue if that is not enough (``SpillPolicy.fallback``); that case has no
guarantee from the paper, which is why ``buffered-head`` is the default.
"""

from __future__ import annotations

from loader.pending.spill.model import Item, Queue, SpillPolicy


class Half(SpillPolicy):
    name = "half"

    @property
    def chunk(self) -> int:
        return max(1, self.cache.budget // 2)

    def arrived(self, queue: Queue, item: Item | None) -> None:
        cache = self.cache
        half = self.chunk
        runs = queue.runs
        if item is not None and queue.head_on_disk:
            # [Read-In] is due as soon as the head empties, before new tuples join the tail:
            # reading it only when the next tuple is consumed lets arrivals fill the tail to
            # M/2 meanwhile and [Write-Out] write them although the queue fits in memory, a
            # write and a read per M/2 arrivals for ever while the offline optimum pays nothing.
            # Doing it here rather than right after the consumption costs the same operations
            # and never fails a consume() whose tuples were already taken.
            cache.read(queue, 0)
        spilled = any(r.on_disk for r in runs)
        if spilled and not runs[-1].on_disk and runs[-1].nbytes >= half and len(runs) > 1:
            # [Write-Out] the whole tail (everything after the last spilled run).
            cache.write(queue, len(runs) - 1, 0, len(runs[-1].items))
        elif not spilled and cache.over_budget:
            # First write: keep the oldest M/2 of the head, write the rest (the newest).
            self.write_newest(queue, queue.mem_bytes, half)
        self.fallback(half)
