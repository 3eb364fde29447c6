"""One dispatch decision in the live dispatcher (loader/loading/dispatcher.py) at N tables.

The driver around the pure policy (whose cost is in ``benchmarks/scheduling``), as the
service runs it: every table has a pending update; one decision is a finished batch's
table getting its next update (``Dispatcher.released``), the free worker offered to the
policy (``choose``), the chosen queue taken and started, the finish accounted (ledger,
cost estimate, stretches, the handler's ``loaded``). ``inline``: the pool is replaced by
an executor that runs the (empty) load at once on the event loop's thread, the
dispatcher's own cost; ``threads``: the real pool, with its hand-offs between threads
(``call_soon_threadsafe``): the most decisions per second one service can drive.
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
WORKERS = 2


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
    """The dispatcher's handler: an empty load, and the table's next update once it finished.
    ``marks``: the clock at the end of the warm-up and at the last decision."""

    def __init__(self, warmup: int, decisions: int) -> None:
        self.dispatcher: Dispatcher
        self.warmup, self.target = warmup, warmup + decisions
        self.decisions = 0
        self.marks: list[float] = []
        self.done = asyncio.Event()
        self.next_seq: dict[str, int] = {}
        self.last_release: dict[str, float] = {}

    def load(self, worker: int, batch: Batch) -> LoadResult:
        return LoadResult(batch.table, batch.last_seq, rows=0, delta_version=None)

    def loaded(self, done: FinishedBatch) -> None:
        self.decisions += 1
        if self.decisions in (self.warmup, self.target):
            self.marks.append(time.perf_counter())
        if self.decisions >= self.target:
            self.done.set()
        else:
            self.release(done.table)

    def release(self, table: str) -> None:
        seq = self.next_seq[table] = self.next_seq.get(table, 0) + 1
        release = self.last_release[table] = max(time.time(), self.last_release[table] + 1e-6)
        self.dispatcher.released(Update(table, seq, release))

    def failed(self, failed: object) -> None:
        raise AssertionError(f"an empty load failed: {failed}")


async def _measure(tables: int, policy: str, decisions: int, inline: bool) -> float:
    rng = random.Random(SEED)
    cycle = Cycle(decisions // 5, decisions)
    dispatcher = cycle.dispatcher = Dispatcher(make_policy(policy), WORKERS, PendingStore(), cycle)
    if inline:
        dispatcher._executor.shutdown()
        dispatcher._executor = InlineExecutor()  # type: ignore[assignment]  # (benchmark only)
    now = time.time()
    names = [f"t{i:05d}" for i in range(tables)]
    for name in names:
        weight = round(20.0 ** rng.random(), 3)
        spec = TableSpec(name=name, alpha=0.001, overhead=0.2, weight=weight, period=rng.choice((1, 10, 100)))
        cycle.last_release[name] = origin = now - 300 + rng.random() * 200
        dispatcher.add_table(spec, origin=origin)
    for name in names:
        cycle.release(name)
    dispatcher.start()
    await cycle.done.wait()
    await dispatcher.wait_idle()
    dispatcher.shutdown()
    return (cycle.marks[1] - cycle.marks[0]) / decisions * 1e6


def measure(tables: int, policy: str, decisions: int, inline: bool) -> float:
    """Microseconds per decision, over ``decisions`` after a warm-up of a fifth as many, on a
    fresh event loop, dispatcher and policy."""
    return asyncio.run(_measure(tables, policy, decisions, inline))
