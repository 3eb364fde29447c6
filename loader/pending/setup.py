"""The service's pending store, built from configuration (policy, budgets, disk costs, files)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa

from loader.config import Settings
from loader.pending.spill.disk_cost import DiskCost, measure
from loader.pending.spill.model import DiskOp
from loader.pending.spill.registry import make_spill_policy
from loader.pending.spill.segments import SegmentFiles
from loader.pending.store import PendingStore

log = logging.getLogger(__name__)


def disk_cost(settings: Settings) -> DiskCost | None:
    """Configured c0/c1, else measured when the policy needs them (greedy-chunk, hybrid)."""
    spill = settings.spill
    if spill.c0_seconds is not None and spill.c1_seconds_per_byte is not None:
        return DiskCost(spill.c0_seconds, spill.c1_seconds_per_byte)
    if spill.policy not in ("greedy-chunk", "hybrid"):
        return None
    cost = measure(settings.spill_path)
    log.info(
        "spill disk measured: c0 = %.2f ms per operation, %.0f MB/s, so T = c0/c1 = %.0f KiB",
        cost.c0 * 1e3,
        cost.bandwidth / 1e6,
        cost.block_bytes / 1024,
    )
    return cost


def build_pending_store(
    settings: Settings, schema_of: Callable[[str], pa.Schema], on_op: Callable[[DiskOp], None] | None = None
) -> PendingStore:
    """Empty the spill directory (segments are rebuilt from the WAL) and make the store."""
    spill = settings.spill
    segments = SegmentFiles(settings.spill_path, schema_of)
    removed = segments.reset()
    if removed:
        log.info("removed %d spill files of an earlier run; the WAL replay rebuilds what is pending", removed)
    cost = disk_cost(settings)
    policy = make_spill_policy(spill.policy, spill.memory_budget_bytes, *((cost.c0, cost.c1) if cost else ()))
    store = PendingStore(policy, spill.memory_budget_bytes, segments, disk_budget=spill.disk_budget_bytes, on_op=on_op)
    store.disk_cost = cost
    return store
