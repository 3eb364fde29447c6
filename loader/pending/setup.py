"""The pending store as configured: spilling policy, budgets, disk costs, segment files.

Takes the ``[spill]`` settings as values (the wiring in loader/service.py reads them), so
this stage knows nothing of the configuration file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from loader.pending.spill.disk_cost import DiskCost, measure
from loader.pending.spill.model import DiskOp
from loader.pending.spill.registry import make_spill_policy
from loader.pending.spill.segments import SegmentFiles
from loader.pending.store import PendingStore

log = logging.getLogger(__name__)

#: Policies of the extended cost model (c0 + c1 * bytes per disk operation).
COSTED_POLICIES = ("greedy-chunk", "hybrid")


def disk_cost(policy: str, directory: Path, configured: DiskCost | None) -> DiskCost | None:
    """Configured c0/c1, else measured on ``directory`` when the policy needs them."""
    if configured is not None:
        return configured
    if policy not in COSTED_POLICIES:
        return None
    cost = measure(directory)
    log.info(
        "spill disk measured: c0 = %.2f ms per operation, %.0f MB/s, so T = c0/c1 = %.0f KiB",
        cost.c0 * 1e3,
        cost.bandwidth / 1e6,
        cost.block_bytes / 1024,
    )
    return cost


def build_pending_store(
    directory: Path,
    schema_of: Callable[[str], pa.Schema],
    *,
    policy: str,
    memory_budget: int,
    disk_budget: int,
    cost: DiskCost | None = None,
    on_op: Callable[[DiskOp], None] | None = None,
) -> PendingStore:
    """Empty the spill directory (segments are rebuilt from the WAL) and make the store.

    Call it only with the WAL's lock held: a second instance must not empty the directory
    of a running one.
    """
    segments = SegmentFiles(directory, schema_of)
    removed = segments.reset()
    if removed:
        log.info("removed %d spill files of an earlier run; the WAL replay rebuilds what is pending", removed)
    cost = disk_cost(policy, directory, cost)
    spill_policy = make_spill_policy(policy, memory_budget, *((cost.c0, cost.c1) if cost else ()))
    store = PendingStore(spill_policy, memory_budget, segments, disk_budget=disk_budget, on_op=on_op)
    store.disk_cost = cost
    return store
