"""Memory for caches: section 5 of Babu et al. (../shared/seeds/004_*).

Caches are chosen as if memory were unlimited (section 4), then memory is handed out
greedily by *priority*: net benefit (benefit - cost) per byte the cache is expected to
need when every probed key is cached. A cache granted less than it needs keeps fewer
entries (its direct-mapped table is smaller, section 3.3), so it misses more but stays
correct; one granted less than a single entry is not used. Re-run at every
re-optimization, so a smaller budget or a cache grown more useful moves memory.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

#: Buckets of a cache sized without a budget, at least.
MIN_BUCKETS = 64


@dataclass(frozen=True, slots=True)
class MemoryClaim:
    group: Hashable
    net: float
    #: Bytes the cache needs to hold every key it will see.
    need: float
    #: Bytes of one entry (key, bucket and its average tuples).
    entry_bytes: float


@dataclass(frozen=True, slots=True)
class Grant:
    #: Entries (buckets) the cache may hold (None: as many as it likes: a forced plan's).
    entries: int | None
    bytes: float


def allocate(claims: Sequence[MemoryClaim], budget: float | None) -> dict[Hashable, Grant]:
    """Section 5's greedy allocation; groups left out get no memory and are not used."""
    if budget is None:
        # Section 3.3: the number of buckets follows the expected cache size. At twice the
        # expected keys about a fifth of them still share a bucket with another and evict
        # it in turn (direct-mapped); a budget, not this sizing, is the way to trade memory.
        grants = {}
        for claim in claims:
            if claim.net > 0:
                entry = max(claim.entry_bytes, 1.0)
                entries = max(MIN_BUCKETS, math.ceil(2 * claim.need / entry))
                grants[claim.group] = Grant(entries, entries * entry)
        return grants
    remaining = float(budget)
    grants: dict[Hashable, Grant] = {}

    def priority(claim: MemoryClaim) -> float:
        return claim.net / claim.need if claim.need > 0 else float("inf")

    for claim in sorted(claims, key=priority, reverse=True):
        if claim.net <= 0 or remaining <= 0:
            continue
        entry = max(claim.entry_bytes, 1.0)
        granted = min(max(claim.need, entry), remaining)
        entries = int(granted // entry)
        if entries < 1:
            continue
        grants[claim.group] = Grant(entries, entries * entry)
        remaining -= entries * entry
    return grants
