"""What the join-view benchmarks share: the MJoin executor as they build it."""

from __future__ import annotations

import time
from collections.abc import Sequence

from schedulers.views.engine import DEFAULT_GLOBAL_LIMIT, EngineSettings, MJoinEngine
from schedulers.views.pipelines import Orders
from schedulers.views.reoptimizer import ReoptimizerSettings
from schedulers.views.workloads import Workload

#: The re-optimization interval, in tuples (the paper's, Fig. 12).
INTERVAL = 10_000


def engine(
    workload: Workload,
    orders: Orders,
    mode: str,
    caches: Sequence[str] = (),
    no_index: tuple[str, ...] = (),
    global_caches: int = DEFAULT_GLOBAL_LIMIT,
    memory_budget: float | None = None,
) -> MJoinEngine:
    """The executor over ``workload``'s view, re-optimizing every ``INTERVAL`` tuples, on the wall clock."""
    reoptimizer = ReoptimizerSettings(interval=INTERVAL, memory_budget=memory_budget)
    options = {"caches": tuple(caches), "no_index": no_index, "global_caches": global_caches}
    settings = EngineSettings(mode=mode, reoptimizer=reoptimizer, **options)  # type: ignore[arg-type]
    return MJoinEngine(workload.spec, workload.graph(), workload.shapes, orders, settings, timer=time.perf_counter)
