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
#: Buckets per expected key of a cache sized without a budget (section 3.3's direct-mapped
#: table). At 2 about a fifth of the keys share a bucket with another and evict it in turn;
#: None sizes no table at all: a cache keeps every key (ours, docs/join-views.md "Tuning").
DEFAULT_BUCKETS_PER_KEY: float | None = 2.0


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


def buckets(keys: float, per_key: float | None) -> int | None:
    """Section 3.3: a cache's buckets follow its expected size (None: unbounded)."""
    return None if per_key is None else max(MIN_BUCKETS, math.ceil(per_key * keys))


def allocate(
    claims: Sequence[MemoryClaim], budget: float | None, per_key: float | None = DEFAULT_BUCKETS_PER_KEY
) -> dict[Hashable, Grant]:
    """Section 5's greedy allocation; groups left out get no memory and are not used.

    Without a budget every cache that pays is sized by ``buckets`` (a budget, not this
    sizing, is the way to trade memory); a forced plan is sized by the same rule
    (``Reoptimizer.force``), so a static plan and A-Caching compare like for like."""
    if budget is None:
        grants = {}
        for claim in claims:
            if claim.net > 0:
                entry = max(claim.entry_bytes, 1.0)
                entries = buckets(claim.need / entry, per_key)
                grants[claim.group] = Grant(entries, claim.need if entries is None else entries * entry)
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
