"""One dispatch decision in the live dispatcher (loader/loading/dispatcher.py) at N tables.

The pure policy's cost is in the scheduling section (``benchmarks/scheduling``, "One
dispatch decision at 10,000 tables"); this is the driver around it, as the service runs
it: every table has a pending update; when a batch finishes, its table gets its next
update (``Dispatcher.released``: pending store, scheduler state, freshness ledger, the
observed trace) and the free worker is offered to the policy (``choose``), the chosen
table's queue taken from the pending store and started, the finish accounted (ledger,
cost estimate, stretches, the handler's ``loaded``). One decision is that whole cycle.

Two ways to run a batch:

- ``inline``: the worker pool is replaced by an executor that runs the (empty) load at
  once on the event loop's thread; the finish still comes back through the loop, as it
  does from a worker thread. This is the dispatcher's own cost per decision.
- ``threads``: the real pool of worker threads; the load returns at once and the finish
  is handed back with ``call_soon_threadsafe``. This adds the hand-offs between threads:
  the most decisions per second one service can drive whatever Spark does.
"""

from __future__ import annotations

import asyncio
import random
import time
from concurrent.futures import Executor, Future
from typing import Any

from loader.abc import FinishedBatch
from loader.core.updates import Batch, LoadResult, Update
from loader.loading.dispatcher import Dispatcher
from loader.pending.store import PendingStore
from schedulers.model import TableSpec
from schedulers.registry import make_policy

SEED = 5


class InlineExecutor(Executor):
    """Runs each call at once on the submitting thread (the event loop's)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the dispatcher as a failed load
            future.set_exception(exc)
        return future


class Cycle:
    """The dispatcher's handler: an empty load, and the table's next update once it finished."""

    def __init__(self, target: int) -> None:
        self.dispatcher: Dispatcher | None = None
        self.decisions = 0
        self.target = target
        self.marks: dict[int, float] = {}
        self.done = asyncio.Event()
        self.next_seq: dict[str, int] = {}
        self.last_release: dict[str, float] = {}

    def load(self, worker: int, batch: Batch) -> LoadResult:
        return LoadResult(batch.table, batch.last_seq, rows=0, delta_version=None)

    def loaded(self, done: FinishedBatch) -> None:
        self.decisions += 1
        if self.decisions in self.marks:
            self.marks[self.decisions] = time.perf_counter()
        if self.decisions >= self.target:
            self.done.set()
            return
        self.release(done.table)

    def release(self, table: str) -> None:
        assert self.dispatcher is not None
        seq = self.next_seq.get(table, 1)
        self.next_seq[table] = seq + 1
        release = max(time.time(), self.last_release.get(table, 0.0) + 1e-6)
        self.last_release[table] = release
        self.dispatcher.released(Update(table, seq, release))

    def failed(self, failed: object) -> None:
        raise AssertionError(f"an empty load failed: {failed}")

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        raise AssertionError("nothing is quarantined here")

    def quarantined(self, batch: object) -> None:
        raise AssertionError("nothing is quarantined here")


async def _measure(tables: int, policy: str, workers: int, warmup: int, decisions: int, inline: bool) -> dict[str, Any]:
    rng = random.Random(SEED)
    cycle = Cycle(warmup + decisions)
    cycle.marks = {warmup: 0.0, warmup + decisions: 0.0}
    dispatcher = Dispatcher(make_policy(policy), workers, PendingStore(), cycle)
    cycle.dispatcher = dispatcher
    if inline:
        dispatcher._executor.shutdown()
        dispatcher._executor = InlineExecutor()  # type: ignore[assignment]  # (benchmark only)
    now = time.time()
    began = time.perf_counter()
    for i in range(tables):
        weight = round(20.0 ** rng.random(), 3)
        spec = TableSpec(name=f"t{i:05d}", alpha=0.001, overhead=0.2, weight=weight, period=rng.choice((1, 10, 100)))
        origin = now - 300 + rng.random() * 200
        dispatcher.add_table(spec, origin=origin)
        cycle.last_release[spec.name] = origin
    for i in range(tables):
        cycle.release(f"t{i:05d}")
    setup = time.perf_counter() - began
    cpu0 = time.process_time()
    dispatcher.start()
    await cycle.done.wait()
    cpu = time.process_time() - cpu0
    await dispatcher.wait_idle()
    dispatcher.shutdown()
    wall = cycle.marks[warmup + decisions] - cycle.marks[warmup]
    return {
        "tables": tables,
        "policy": policy,
        "workers": workers,
        "mode": "inline" if inline else "threads",
        "decisions": decisions,
        "us_per_decision": wall / decisions * 1e6,
        "decisions_per_s": decisions / wall,
        "setup_s": setup,
        "cpu_s_all": cpu,
    }


def measure(tables: int, policy: str, *, workers: int, warmup: int, decisions: int, inline: bool) -> dict[str, Any]:
    """One run on a fresh event loop, dispatcher and policy."""
    return asyncio.run(_measure(tables, policy, workers, warmup, decisions, inline))
