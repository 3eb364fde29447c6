"""Spilling policies by name, as configuration and the benchmark spell them."""

from __future__ import annotations

from loader.pending.spill.buffered_head import BufferedHead
from loader.pending.spill.greedy_chunk import GreedyChunk, hybrid
from loader.pending.spill.half import Half
from loader.pending.spill.lru import Lru
from loader.pending.spill.model import SpillPolicy

#: What the service accepts (``lru`` is the benchmark's baseline only).
SERVICE_POLICIES = ("buffered-head", "half", "greedy-chunk", "hybrid")
ALL_POLICIES = (*SERVICE_POLICIES, "lru")


def make_spill_policy(name: str, budget: int, c0: float = 0.0, c1: float = 0.0) -> SpillPolicy:
    """A fresh policy; ``c0``/``c1`` (seconds, seconds per byte) matter to the extended-cost ones."""
    if name == "buffered-head":
        return BufferedHead()
    if name == "half":
        return Half()
    if name == "greedy-chunk":
        if c1 <= 0:
            raise ValueError("greedy-chunk needs c1 > 0 (measured or configured)")
        return GreedyChunk(max(1, int(c0 / c1)))
    if name == "hybrid":
        return hybrid(budget, c0, c1)
    if name == "lru":
        return Lru()
    raise ValueError(f"unknown spill policy {name!r}; choose one of {', '.join(ALL_POLICIES)}")
