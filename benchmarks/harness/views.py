"""What the join-view benchmarks share: the MJoin executor as they build it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
    **tuning: Any,
) -> MJoinEngine:
    """The executor over ``workload``'s view, re-optimizing every ``INTERVAL`` tuples, on the
    wall clock. ``tuning``: other ``EngineSettings`` and ``ReoptimizerSettings`` fields by name."""
    ours = {k: tuning.pop(k) for k in list(tuning) if k in ReoptimizerSettings.__dataclass_fields__}
    reoptimizer = ReoptimizerSettings(**({"interval": INTERVAL, "memory_budget": memory_budget} | ours))
    options = {"caches": tuple(caches), "no_index": no_index, "global_caches": global_caches} | tuning
    settings = EngineSettings(mode=mode, reoptimizer=reoptimizer, **options)  # type: ignore[arg-type]
    return MJoinEngine(workload.spec, workload.graph(), workload.shapes, orders, settings, timer=time.perf_counter)


def defaults() -> dict[str, Any]:
    """A-Caching's defaults as the figures print them (W_d, p, buckets per key)."""
    settings = EngineSettings()
    per_key = settings.reoptimizer.buckets_per_key
    return {
        "bloom": settings.bloom_tuples,
        "p": settings.profile_probability,
        "per_key": "unbounded" if per_key is None else f"{per_key:g}",
        "window": settings.window,
    }


def lockstep(
    workload: Workload,
    engines: Mapping[str, MJoinEngine],
    ends: Sequence[int],
    note: Callable[[MJoinEngine], Any] = lambda _engine: None,
) -> dict[str, list[tuple[int, float, Any]]]:
    """Every engine over the same stream a chunk at a time (up to each stream index of
    ``ends``), in an order rotating chunk by chunk, so that the machine's speed, which
    drifts over seconds on this shared host, is the same for all: plans interleaved run by
    run still differed by up to 30% between two runs of one plan; in lockstep by about 3%.
    Per engine, per chunk: (updates processed, seconds, ``note`` of the engine after it)."""
    names = list(engines)
    spent: dict[str, list[tuple[int, float, Any]]] = {name: [] for name in names}
    times = workload.times or (None,) * len(workload.stream)
    items = list(zip(workload.stream, times, strict=True))
    start = 0
    for k, end in enumerate(ends):
        chunk = items[start:end]
        for name in names[k % len(names) :] + names[: k % len(names)]:
            engine = engines[name]
            before, began = engine.updates, time.perf_counter()
            for (i, row), at in chunk:
                engine.apply(i, inserts=[row], data_until=at)
            took = time.perf_counter() - began
            spent[name].append((engine.updates - before, took, note(engine)))
        start = end
    return spent


def chunk_ends(workload: Workload, every: int, of_input: int | None = None) -> list[int]:
    """Stream indices ending a chunk: every ``every`` tuples of ``of_input`` (all inputs: None)."""
    ends, seen = [], 0
    for k, (i, _) in enumerate(workload.stream, start=1):
        seen += of_input is None or i == of_input
        if seen and seen % every == 0 and (of_input is None or i == of_input):
            ends.append(k)
    if not ends or ends[-1] != len(workload.stream):
        ends.append(len(workload.stream))
    return ends
