"""The live driver: every durable update is loaded exactly once, in order, one batch per table at a time."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import threading
import time

import pyarrow as pa
import pytest

from loader.abc import FailedBatch, FinishedBatch
from loader.core.timeline import JobTimeline
from loader.core.updates import Batch, LoadResult, Update
from loader.loading.connect_server import ConnectServerError
from loader.loading.dispatcher import Dispatcher
from loader.loading.estimates import CostEstimate
from loader.loading.observed import ObservedRecord
from loader.pending.keyed import KeySpec
from loader.pending.store import PendingStore
from schedulers.model import KeyedSpec, TableSpec
from schedulers.registry import GROUPABLE, POLICIES, make_policy


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.002)


class Recorder:
    """The dispatcher's ``BatchHandler``: records what it loads and how each batch ended."""

    def __init__(self, fail_first: set[str] = frozenset()) -> None:
        self.batches: list[Batch] = []
        self.running: set[str] = set()
        self.overlap = False
        self.lock = threading.Lock()
        self.fail_first = set(fail_first)
        self.finished: list[FinishedBatch] = []
        self.failed_batches: list[FailedBatch] = []
        self.groups: list[list[str]] = []
        self.timelines: list[JobTimeline] = []

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        raise AssertionError("nothing is quarantined here")

    def loaded(self, done: FinishedBatch) -> None:
        self.finished.append(done)

    def failed(self, failed: FailedBatch) -> None:
        self.failed_batches.append(failed)

    def quarantined(self, batch: object) -> None:
        raise AssertionError("nothing is quarantined here")

    def job_timed(self, timeline: JobTimeline) -> None:
        self.timelines.append(timeline)

    def load(self, worker: int, batch: Batch) -> LoadResult:
        with self.lock:
            if batch.table in self.running:
                self.overlap = True
            self.running.add(batch.table)
        time.sleep(0.001)  # a stand-in for the Spark job, on the worker thread
        with self.lock:
            self.running.discard(batch.table)
            if batch.table in self.fail_first:
                self.fail_first.discard(batch.table)
                raise RuntimeError("disk full")
            self.batches.append(batch)
        return LoadResult(batch.table, batch.last_seq, rows=len(batch.updates), delta_version=len(self.batches))

    def load_group(self, worker: int, batches: list[Batch]) -> list[LoadResult | BaseException]:
        self.groups.append([b.table for b in batches])
        outcomes: list[LoadResult | BaseException] = []
        for batch in batches:
            try:
                outcomes.append(self.load(worker, batch))
            except RuntimeError as exc:
                outcomes.append(exc)
        return outcomes


@pytest.mark.parametrize(
    ("policy", "groups"),
    [(name, 1) for name in sorted(set(POLICIES) - {"interval"})] + [(name, 4) for name in GROUPABLE],
)
def test_every_update_loaded_once_in_order(policy: str, groups: int) -> None:
    async def scenario() -> None:
        rng = random.Random(3)
        recorder = Recorder()
        d = Dispatcher(make_policy(policy, max_tables_per_job=groups), 3, PendingStore(), recorder, job_overhead=0.1)
        finished: list[FinishedBatch] = recorder.finished
        names = [f"t{k}" for k in range(5)]
        for name in names:
            d.add_table(TableSpec(name=name, alpha=0.01, overhead=0.001), origin=time.time() - 1)
        d.start()
        seqs = {name: 0 for name in names}
        last = {name: 0.0 for name in names}
        for _ in range(300):
            name = rng.choice(names)
            seqs[name] += 1
            release = max(time.time(), last[name] + 1e-6)
            last[name] = release
            d.released(Update(name, seqs[name], release))
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        await _until(lambda: sum(len(b.updates) for b in recorder.batches) == 300)
        await d.wait_idle()
        assert not recorder.overlap
        for name in names:
            loaded = [u.seq for b in recorder.batches if b.table == name for u in b.updates]
            assert loaded == list(range(1, seqs[name] + 1))
        assert len(finished) == len(recorder.batches)
        assert all(s >= 1.0 for f in finished for s in f.stretches)
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"failed \(attempt 1\): disk full")
def test_failed_batch_is_put_back_and_retried() -> None:
    async def scenario() -> None:
        recorder = Recorder(fail_first={"t"})
        d = Dispatcher(make_policy("myopic"), 1, PendingStore(), recorder, max_retry_delay=0.01)
        failed: list[FailedBatch] = recorder.failed_batches
        d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0)
        d.start()
        for seq in (1, 2, 3):
            d.released(Update("t", seq, float(seq)))
        await _until(lambda: sum(len(b.updates) for b in recorder.batches) == 3)
        assert len(failed) == 1 and failed[0].batch.first_seq == 1
        assert [u.seq for b in recorder.batches for u in b.updates] == [1, 2, 3]
        d.shutdown()

    asyncio.run(scenario())


class Unreachable(Recorder):
    """Spark Connect is down for the first ``outages`` loads."""

    def __init__(self, outages: int) -> None:
        super().__init__()
        self.outages = outages

    def load(self, worker: int, batch: Batch) -> LoadResult:
        if self.outages > 0:
            self.outages -= 1
            if self.outages % 2:  # as the gRPC client words it, and as the loader's reconnect does
                raise RuntimeError("<_MultiThreadedRendezvous: status = StatusCode.UNAVAILABLE, failed to connect>")
            raise ConnectServerError("the Spark Connect server exited (code 1) before it answered")
        return super().load(worker, batch)


@pytest.mark.allow_errors(r"the Spark Connect server exited \(code 1\)", 'StatusCode.UNAVAILABLE')
def test_an_unreachable_spark_is_retried_and_never_quarantines() -> None:
    async def scenario() -> None:
        recorder = Unreachable(outages=3)  # Recorder.set_aside fails the test if called
        d = Dispatcher(make_policy("myopic"), 1, PendingStore(), recorder, max_retry_delay=0.01, max_attempts=1)
        d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0)
        d.start()
        d.released(Update("t", 1, 1.0))
        await _until(lambda: len(recorder.batches) == 1)
        assert len(recorder.failed_batches) == 3
        assert [u.seq for b in recorder.batches for u in b.updates] == [1]
        d.shutdown()

    asyncio.run(scenario())


def test_paused_table_is_not_loaded_until_resumed() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        d = Dispatcher(make_policy("myopic"), 2, PendingStore(), recorder)
        d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0, paused=True)
        d.start()
        d.released(Update("t", 1, 1.0))
        # dispatch is synchronous on release: a batch would have started by now
        assert d.busy_workers == 0 and d.state("t").pending_count == 1
        d.set_paused("t", False)
        await _until(lambda: len(recorder.batches) == 1)
        d.shutdown()

    asyncio.run(scenario())


def test_cost_estimate_recovers_linear_model() -> None:
    estimate = CostEstimate(alpha=1.0, overhead=0.0)
    rng = random.Random(1)
    for _ in range(200):
        length = rng.uniform(1, 50)
        estimate.observe(length, 0.3 + 0.02 * length + rng.gauss(0, 0.005))
    assert estimate.alpha == pytest.approx(0.02, rel=0.1)
    assert estimate.overhead == pytest.approx(0.3, abs=0.03)


def test_alpha_reads_as_seconds_per_row_at_the_rate_rows_came() -> None:
    """alpha is per second of data (the paper's); people read a cost per row: alpha over the
    rows a second of data brought (here 500 rows/s, 0.02 s a second: 40 us a row)."""
    estimate = CostEstimate(alpha=1.0, overhead=0.0)
    assert estimate.seconds_per_row is None  # before any batch with rows
    rng = random.Random(2)
    for _ in range(200):
        length = rng.uniform(1, 50)
        estimate.observe(length, 0.3 + 0.02 * length, rows=round(500 * length))
    assert estimate.seconds_per_row == pytest.approx(0.02 / 500, rel=0.05)


def _busy_start(d: Dispatcher, names: list[str], updates: int) -> None:
    """Every table gets ``updates`` releases before loading starts: all are due at once."""
    for name in names:
        d.add_table(TableSpec(name=name, alpha=0.0, overhead=0.2), origin=time.time() - 10)
    for seq in range(1, updates + 1):
        for name in names:
            d.released(Update(name, seq, time.time() - 5 + seq * 1e-3))


def test_a_free_worker_loads_the_due_tables_in_one_job() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        d = Dispatcher(make_policy("myopic", max_tables_per_job=8), 1, PendingStore(), recorder, job_overhead=0.15)
        names = [f"t{k}" for k in range(5)]
        _busy_start(d, names, 2)
        d.start()
        await _until(lambda: len(recorder.finished) == 5)
        assert len(recorder.groups) == 1 and sorted(recorder.groups[0]) == names  # one job for all
        assert recorder.groups[0][0] == "t0"  # headed by MYOPIC's own choice, the oldest pending
        assert {f.job_tables for f in recorder.finished} == {5}
        assert {f.started for f in recorder.finished} == {recorder.finished[0].started}
        for name in names:
            assert d.ledger.current_upto(d.index[name]) == d.states[d.index[name]].current_upto
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors("loading b .* failed")
def test_each_job_reports_its_timeline_with_its_tables_and_the_services_cpu() -> None:
    """The dispatcher's marks around the sink's (loader/core/timeline.py): chosen, the worker
    thread's start and the report, in order, with the sink's stamps between; a member that
    failed is in the job's timeline as not loaded; the worker's idle time before its next job."""

    class Stamping(Recorder):
        def load_group(self, worker: int, batches: list[Batch]) -> list[LoadResult | BaseException]:
            began = time.time()
            outcomes = super().load_group(worker, batches)
            marks = {"spark_start": began, "spark_end": time.time()}
            return [dataclasses.replace(o, marks=marks) if isinstance(o, LoadResult) else o for o in outcomes]

    async def scenario() -> None:
        recorder = Stamping(fail_first={"b"})
        d = Dispatcher(
            make_policy("myopic", max_tables_per_job=8),
            1,
            PendingStore(),
            recorder,
            job_overhead=0.15,
            max_retry_delay=0.01,
            observed=ObservedRecord(0, 0, max_jobs=10),
        )
        _busy_start(d, ["a", "b", "c"], 1)
        d.start()
        await _until(lambda: len(recorder.finished) == 3 and len(recorder.timelines) == 2)
        first, retry = recorder.timelines
        assert sorted((t.table, t.loaded) for t in first.tables) == [("a", True), ("b", False), ("c", True)]
        m = first.marks
        assert m["chosen"] <= m["thread_start"] <= m["spark_start"] <= m["spark_end"] <= m["reported"]
        assert set(first.stages()) == {"dispatch", "spark"} and first.service_cpu > 0
        assert first.idle_before is None and retry.idle_before is not None and retry.idle_before >= 0
        assert [t.table for t in retry.tables] == ["b"] and list(d.observed.jobs) == [first, retry]
        assert JobTimeline.from_dict(json.loads(json.dumps(first.as_dict()))) == first
        d.shutdown()

    asyncio.run(scenario())


class MeasuringRecorder(Recorder):
    """A sink that reports each table's own seconds in a shared job, as DeltaRsSink does."""

    def __init__(self, own: dict[str, float], job_seconds: float) -> None:
        super().__init__()
        self.own, self.job_seconds = own, job_seconds

    def load_group(self, worker: int, batches: list[Batch]) -> list[LoadResult | BaseException]:
        outcomes = super().load_group(worker, batches)
        time.sleep(self.job_seconds)
        return [dataclasses.replace(o, own_seconds=self.own[o.table]) for o in outcomes if isinstance(o, LoadResult)]


def test_a_group_job_is_split_by_each_tables_measured_work_not_by_the_prediction() -> None:
    """The estimates must learn from what each table cost; split by their own predictions,
    a table once predicted dear stays dear and is left out of groups."""

    async def scenario() -> None:
        recorder = MeasuringRecorder({"dear": 0.001, "cheap": 0.05}, job_seconds=0.3)
        d = Dispatcher(make_policy("fifo", max_tables_per_job=8), 1, PendingStore(), recorder, job_overhead=0.15)
        d.add_table(TableSpec(name="dear", alpha=0.0, overhead=0.9), origin=time.time() - 10)  # predicted dear
        d.add_table(TableSpec(name="cheap", alpha=0.0, overhead=0.16), origin=time.time() - 10)
        d.released(Update("dear", 1, time.time() - 5))  # the oldest: FIFO's head
        d.released(Update("cheap", 1, time.time() - 4))
        d.start()
        await _until(lambda: len(recorder.finished) == 2)
        assert recorder.groups == [["dear", "cheap"]]
        learned = {f.table: f.overhead for f in recorder.finished}
        # The job lasted about 0.3 s: O = 0.15 each, the rest split 1 : 50 by measured work.
        assert learned["cheap"] > learned["dear"]
        assert learned["dear"] == pytest.approx(0.15, abs=0.01)
        d.shutdown()

    asyncio.run(scenario())


def test_single_table_policies_never_group() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        d = Dispatcher(make_policy("myopic"), 1, PendingStore(), recorder, job_overhead=0.15)
        _busy_start(d, ["a", "b", "c"], 1)
        d.start()
        await _until(lambda: len(recorder.finished) == 3)
        assert recorder.groups == [] and {f.job_tables for f in recorder.finished} == {1}
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading b \(updates 1..1\) failed \(attempt 1\): disk full")
def test_a_table_that_failed_in_a_group_is_retried_alone_and_the_others_stand() -> None:
    async def scenario() -> None:
        recorder = Recorder(fail_first={"b"})
        d = Dispatcher(
            make_policy("myopic", max_tables_per_job=8),
            1,
            PendingStore(),
            recorder,
            job_overhead=0.15,
            max_retry_delay=0.01,
            max_attempts=1,  # a group failure does not count toward quarantine (Recorder refuses it)
        )
        _busy_start(d, ["a", "b", "c"], 1)
        d.start()
        await _until(lambda: len(recorder.finished) == 3)
        assert sorted(recorder.groups[0]) == ["a", "b", "c"]
        assert [f.table for f in recorder.failed_batches] == ["b"]
        retried = [f for f in recorder.finished if f.table == "b"]
        assert retried[0].job_tables == 1  # alone, after its back-off
        assert sorted(u.seq for b in recorder.batches for u in b.updates) == [1, 1, 1]
        d.shutdown()

    asyncio.run(scenario())


def test_the_shared_job_overhead_is_measured_from_jobs_of_different_sizes() -> None:
    from loader.loading.estimates import JobOverheadEstimate

    estimate = JobOverheadEstimate(overhead=0.5)
    rng = random.Random(1)
    for _ in range(200):
        k = rng.randint(1, 12)
        estimate.observe(k, 0.15 + 0.01 * k + rng.uniform(-0.005, 0.005), 0.0)
    assert estimate.overhead == pytest.approx(0.15, abs=0.01)
    assert estimate.per_table == pytest.approx(0.01, abs=0.002)
    shares = estimate.attribute(0.25, [0.01, 0.03])
    assert shares[0] < shares[1] and all(s >= estimate.overhead for s in shares)
    # Jobs of one size only cannot tell O from a table's own overhead: the prior stays.
    fixed = JobOverheadEstimate(overhead=0.1)
    for _ in range(50):
        fixed.observe(1, 0.3, 0.0)
    assert fixed.overhead == 0.1


# -- a poison update holds back only itself: bisection -------------------------------------------------


class Poisoned(Recorder):
    """Fails every batch that holds one of the ``poison`` updates (as the batch's own fault, as
    a row Spark cannot write does), and the first ``flaky`` loads of each table whatever they
    hold; records what it sets aside."""

    def __init__(self, poison: dict[str, set[int]], flaky: int = 0) -> None:
        super().__init__()
        self.poison = poison
        self.flaky = {name: flaky for name in poison}
        self.attempts: list[tuple[str, int, int]] = []
        self.aside: list[tuple[Batch, int]] = []
        self.quarantined_batches: list[Batch] = []

    def load(self, worker: int, batch: Batch) -> LoadResult:
        with self.lock:
            self.attempts.append((batch.table, batch.first_seq, batch.last_seq))
            if self.flaky.get(batch.table, 0) > 0:
                self.flaky[batch.table] -= 1
                raise RuntimeError(f"a passing fault loading {batch.table}")
        bad = sorted(self.poison.get(batch.table, set()) & {u.seq for u in batch.updates})
        if bad:
            raise RuntimeError(f"cannot write update {bad[0]} of {batch.table}")
        return super().load(worker, batch)

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        self.aside.append((batch, attempts))

    def quarantined(self, batch: object) -> None:
        self.quarantined_batches.append(batch.batch)  # type: ignore[attr-defined]

    def job_timed(self, timeline: JobTimeline) -> None:
        pass


def _bisecting(recorder: Recorder, *, workers: int = 1, groups: int = 1, max_attempts: int = 3) -> Dispatcher:
    return Dispatcher(
        make_policy("myopic", max_tables_per_job=groups),
        workers,
        PendingStore(),
        recorder,
        retry_base=0.001,
        max_retry_delay=0.005,
        max_attempts=max_attempts,
        job_overhead=0.15 if groups > 1 else 0.0,
    )


def _loaded(recorder: Recorder, table: str) -> list[int]:
    return [u.seq for b in recorder.batches if b.table == table for u in b.updates]


async def _poisoned_run(count: int, poison: set[int], flaky: int = 0) -> tuple[Poisoned, Dispatcher]:
    """``count`` updates of one table pending at once (one batch), the ``poison`` among them."""
    recorder = Poisoned({"t": poison}, flaky)
    d = _bisecting(recorder)
    d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0)
    for seq in range(1, count + 1):
        d.released(Update("t", seq, float(seq)))
    d.start()
    await _until(lambda: len(_loaded(recorder, "t")) + len(recorder.quarantined_batches) == count)
    await d.wait_idle()
    return recorder, d


@pytest.mark.allow_errors(r"loading t \(updates \d+\.\.\d+\) failed", "cannot write update")
@pytest.mark.parametrize(
    ("count", "poison"),
    [(11, {6}), (12, {3, 9}), (11, {1}), (11, {11}), (11, {1, 11}), (2, {1, 2}), (1, {1})],
    ids=["one-in-the-middle", "two", "at-the-start", "at-the-end", "start-and-end", "all-of-two", "alone"],
)
def test_only_the_poison_updates_are_quarantined_the_others_load_once_in_order(count: int, poison: set[int]) -> None:
    async def scenario() -> None:
        recorder, d = await _poisoned_run(count, poison)
        assert _loaded(recorder, "t") == [s for s in range(1, count + 1) if s not in poison]  # once each, in order
        assert [(b.first_seq, b.last_seq) for b, _ in recorder.aside] == [(s, s) for s in sorted(poison)]
        assert all(attempts == 3 for _, attempts in recorder.aside)  # each alone, max_attempts times
        assert [b.first_seq for b in recorder.quarantined_batches] == sorted(poison)
        # Every batch tried is a prefix of what was pending then, so each commit's transaction
        # version (its last sequence number) covers exactly what it and the earlier ones hold.
        assert recorder.attempts[0] == ("t", 1, count)
        assert d.suspect("t") == [] and d.failures("t") == 0
        splits = [f for f in recorder.failed_batches if f.split]
        assert all(len(f.batch.updates) > 1 for f in splits)
        assert (len(splits) > 0) == (count > 1)
        d.shutdown()

    asyncio.run(scenario())


class NamesItsUpdates(Poisoned):
    """A poison whose error names the updates to blame, as rows breaking a table's CHECK
    constraint do (``loader.loading.failures.updates_at_fault``): all of the batch's, or
    (``first_only``) only its first, as a search capped at a number of rows may."""

    def __init__(self, poison: dict[str, set[int]], first_only: bool = False) -> None:
        super().__init__(poison)
        self.first_only = first_only

    def load(self, worker: int, batch: Batch) -> LoadResult:
        try:
            return super().load(worker, batch)
        except RuntimeError as exc:
            bad = sorted(self.poison.get(batch.table, set()) & {u.seq for u in batch.updates})
            named = bad[:1] if self.first_only else bad
            exc.updates_at_fault = {seq: f"update {seq} breaks the rule" for seq in named}  # type: ignore[attr-defined]
            raise


async def _named_run(recorder: NamesItsUpdates, count: int, keyed: bool = False) -> Dispatcher:
    d = _bisecting(recorder)
    d.add_table(TableSpec(name="t", alpha=0.0, keyed=KeyedSpec() if keyed else None), origin=0.0)
    for seq in range(1, count + 1):
        d.released(Update("t", seq, float(seq)))
    d.start()
    await _until(lambda: len(_loaded(recorder, "t")) + len(recorder.quarantined_batches) == count)
    await d.wait_idle()
    return d


@pytest.mark.allow_errors(r"loading t \(updates \d+\.\.\d+\) (failed|was named)", "cannot write update")
@pytest.mark.parametrize("keyed", [False, True], ids=["append", "latest"])
def test_a_failure_that_names_its_updates_sets_them_aside_unloaded_and_loads_the_others(keyed: bool) -> None:
    """Without the names, each poison costs a bisection and max_attempts attempts with back-off;
    with them, no poison update is loaded at all: each is set aside with the words the failure
    gave for it. An append table's batch then loads the others at once (its failed load and
    one more, whatever the number of poison updates); a latest table's is cut around them
    (k + 1 loads)."""

    async def scenario() -> None:
        recorder = NamesItsUpdates({"t": {4, 9}})
        d = await _named_run(recorder, 12, keyed)
        assert _loaded(recorder, "t") == [s for s in range(1, 13) if s not in (4, 9)]  # once each, in order
        assert [(b.first_seq, b.last_seq, n) for b, n in recorder.aside] == [(4, 4, 1), (9, 9, 1)]
        assert [b.first_seq for b in recorder.quarantined_batches] == [4, 9]
        tried = [(first, last) for _, first, last in recorder.attempts]
        assert tried == ([(1, 12), (1, 3), (5, 8), (10, 12)] if keyed else [(1, 12), (1, 12)])
        assert d.suspect("t") == [] and d.failures("t") == 0 and d._condemned == {} and d._aside == {}
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading t \(updates \d+\.\.\d+\) (failed|was named)", "cannot write update")
@pytest.mark.parametrize(
    ("poison", "tried"),
    [
        ({1, 2}, [(1, 6), (3, 6)]),
        ({6}, [(1, 6), (1, 5)]),
        ({1, 6}, [(1, 6), (2, 5)]),
        ({1, 2, 3, 4, 5, 6}, [(1, 6)]),
    ],
    ids=["first-two", "last", "first-and-last", "all"],
)
@pytest.mark.parametrize("keyed", [False, True], ids=["append", "latest"])
def test_named_updates_at_either_end_or_every_update(
    poison: set[int], tried: list[tuple[int, int]], keyed: bool
) -> None:
    async def scenario() -> None:
        recorder = NamesItsUpdates({"t": poison})
        d = await _named_run(recorder, 6, keyed)
        assert _loaded(recorder, "t") == [s for s in range(1, 7) if s not in poison]
        assert [(b.first_seq, n) for b, n in recorder.aside] == [(s, 1) for s in sorted(poison)]
        assert [b.first_seq for b in recorder.quarantined_batches] == sorted(poison)
        assert [(first, last) for _, first, last in recorder.attempts] == tried
        assert d._condemned == {} and d._aside == {}
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading t \(updates \d+\.\.\d+\) (failed|was named)", "cannot write update")
@pytest.mark.parametrize("keyed", [False, True], ids=["append", "latest"])
def test_a_failure_that_names_only_its_first_update_and_the_next_attempt_names_the_next(keyed: bool) -> None:
    """A search capped at some rows names only the first updates: the next attempt fails once
    more and names the next; an update set aside is not set aside twice."""

    async def scenario() -> None:
        recorder = NamesItsUpdates({"t": {4, 9}}, first_only=True)
        d = await _named_run(recorder, 12, keyed)
        assert _loaded(recorder, "t") == [s for s in range(1, 13) if s not in (4, 9)]
        assert [(b.first_seq, n) for b, n in recorder.aside] == [(4, 1), (9, 1)]
        tried = [(first, last) for _, first, last in recorder.attempts]
        assert tried == ([(1, 12), (1, 3), (5, 12), (5, 8), (10, 12)] if keyed else [(1, 12), (1, 12), (1, 12)])
        d.shutdown()

    asyncio.run(scenario())


class BusyFeed(NamesItsUpdates):
    """Each failed load is followed, before its retry, by three more updates, one of them
    poison: a feed that keeps bringing poison."""

    def __init__(self, poison: dict[str, set[int]], more: int) -> None:
        super().__init__(poison)
        self.more = more
        self.dispatcher: Dispatcher | None = None
        self.next_seq = 13

    def load(self, worker: int, batch: Batch) -> LoadResult:
        try:
            return super().load(worker, batch)
        except RuntimeError:
            if self.more > 0 and self.dispatcher is not None:
                self.more -= 1
                seqs = range(self.next_seq, self.next_seq + 3)
                self.next_seq += 3
                self.poison["t"].add(seqs[1])
                for seq in seqs:
                    self.dispatcher._loop.call_soon_threadsafe(self.dispatcher.released, Update("t", seq, float(seq)))
            raise


@pytest.mark.allow_errors(r"loading t \(updates \d+\.\.\d+\) (failed|was named)", "cannot write update")
def test_a_feed_that_keeps_bringing_poison_does_not_keep_its_table_from_loading() -> None:
    """The retry without the named updates is capped at the failed batch: a longer one would
    hold the poison that arrived meanwhile, and fail again for as long as the feed runs."""

    async def scenario() -> None:
        recorder = BusyFeed({"t": {4}}, more=2)
        d = _bisecting(recorder)
        recorder.dispatcher = d
        d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0)
        for seq in range(1, 13):
            d.released(Update("t", seq, float(seq)))
        d.start()
        await _until(lambda: len(_loaded(recorder, "t")) + len(recorder.quarantined_batches) == 18)
        await d.wait_idle()
        assert _loaded(recorder, "t") == [s for s in range(1, 19) if s not in (4, 14, 17)]
        assert [b.first_seq for b in recorder.quarantined_batches] == [4, 14, 17]
        tried = [(first, last) for _, first, last in recorder.attempts]
        assert tried == [(1, 12), (1, 12), (13, 15), (13, 15), (16, 18), (16, 18)]  # each batch twice, no longer
        assert d.suspect("t") == [] and d._condemned == {} and d._aside == {}
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading t \(updates 1\.\.11\) failed \(attempt [12]\)", "a passing fault")
def test_a_fault_that_passes_on_a_retry_splits_nothing() -> None:
    async def scenario() -> None:
        recorder, d = await _poisoned_run(11, set(), flaky=2)  # max_attempts is 3
        assert [(b.first_seq, b.last_seq) for b in recorder.batches] == [(1, 11)]
        assert len(recorder.failed_batches) == 2 and not any(f.split for f in recorder.failed_batches)
        assert recorder.aside == []
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading t \(updates \d+\.\.\d+\) failed", "cannot write update")
def test_updates_arriving_during_a_bisection_load_after_the_suspect_range() -> None:
    async def scenario() -> None:
        recorder = Poisoned({"t": {4}})
        d = _bisecting(recorder)
        d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0)
        for seq in range(1, 9):
            d.released(Update("t", seq, float(seq)))
        d.start()
        await _until(lambda: any(f.split for f in recorder.failed_batches))
        for seq in range(9, 13):  # arrive while the halves are being tried
            d.released(Update("t", seq, float(seq)))
        await _until(lambda: len(_loaded(recorder, "t")) == 11)
        assert _loaded(recorder, "t") == [1, 2, 3, *range(5, 13)]
        assert [b.first_seq for b, _ in recorder.aside] == [4]
        # No batch reached past the suspect range while it was still being tried.
        assert all(last <= 8 for _, first, last in recorder.attempts if first <= 8)
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading b \(updates \d+\.\.\d+\) failed", "cannot write update")
def test_a_poison_in_a_group_job_fails_its_table_alone_which_is_bisected_while_the_others_load() -> None:
    async def scenario() -> None:
        recorder = Poisoned({"a": set(), "b": {3}, "c": set()})
        d = _bisecting(recorder, groups=8)
        _busy_start(d, ["a", "b", "c"], 6)
        d.start()
        await _until(lambda: len(recorder.quarantined_batches) == 1 and len(_loaded(recorder, "b")) == 5)
        await _until(lambda: len(_loaded(recorder, "a")) == 6 and len(_loaded(recorder, "c")) == 6)
        assert sorted(recorder.groups[0]) == ["a", "b", "c"]  # one job first, b's failure its own outcome
        assert _loaded(recorder, "b") == [1, 2, 4, 5, 6]
        assert [b.first_seq for b, _ in recorder.aside] == [3]
        assert [g for g in recorder.groups[1:] if "b" in g] == []  # from its first failure on, b ran alone
        d.shutdown()

    asyncio.run(scenario())


@pytest.mark.allow_errors(r"loading t \(updates 1\.\.1\) failed", "cannot write update")
def test_without_max_attempts_nothing_is_split_or_quarantined() -> None:
    async def scenario() -> None:
        recorder = Poisoned({"t": {1}})
        d = _bisecting(recorder, max_attempts=0)
        d.add_table(TableSpec(name="t", alpha=0.0), origin=0.0)
        d.released(Update("t", 1, 1.0))
        d.released(Update("t", 2, 2.0))
        d.start()
        await _until(lambda: len(recorder.failed_batches) >= 6)
        assert recorder.aside == [] and not any(f.split for f in recorder.failed_batches)
        assert {(first, last) for _, first, last in recorder.attempts} == {(1, 2)}
        d.shutdown()

    asyncio.run(scenario())


def test_a_retired_table_is_a_tombstone_and_its_name_takes_a_new_id() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        d = Dispatcher(make_policy("myopic"), 2, PendingStore(), recorder)
        for name in ("a", "b"):
            d.add_table(TableSpec(name=name, alpha=0.0), origin=0.0)
        d.start()
        d.released(Update("a", 1, 1.0))
        await _until(lambda: len(recorder.batches) == 1)
        await d.wait_idle()
        assert d.unloaded("a") == 0
        d.retire("a")
        assert d.live() == [1] and "a" not in d.index and d.states[0].paused
        d.release_hold("a")  # a back-off's timer meeting the retired name: nothing happens
        tid = d.add_table(TableSpec(name="a", alpha=0.0), origin=2.0)  # the name again: a new table
        assert tid == 2 and d.live() == [1, 2]
        d.released(Update("a", 5, 3.0))
        await _until(lambda: len(recorder.batches) == 2)
        assert [u.seq for u in recorder.batches[-1].updates] == [5]
        d.shutdown()

    asyncio.run(scenario())


class Rewriting(Recorder):
    """A latest table's loads that report what their MERGE rewrote (loader/loading/sinks/upsert.py)."""

    def load(self, worker: int, batch: Batch) -> LoadResult:
        result = super().load(worker, batch)
        details = {"stored_rows": 4_000_000.0, "file_rows": 1_000_000.0, "rows_copied": 2_000_000.0}
        return dataclasses.replace(result, details=details | {"rewrite_seconds": 0.5})


def test_a_latest_tables_model_learns_what_its_merge_rewrites_and_predicts_with_it() -> None:
    async def scenario() -> None:
        recorder = Rewriting()
        d = _bisecting(recorder)
        d.add_table(TableSpec(name="t", alpha=0.0, keyed=KeyedSpec(per_key=0.001)), origin=0.0)
        d.pending.set_keys("t", KeySpec(("id",)))
        update = Update("t", 1, 1.0, rows=pa.table({"id": [1, 2, 3]}))
        d.released(update)
        d.start()
        await _until(lambda: len(recorder.finished) == 1)
        await d.wait_idle()
        state = d.states[d.index["t"]]
        assert (state.rewrite.stored_keys, state.rewrite.file_keys) == (4_000_000, 1_000_000)
        assert state.rewrite.per_row == pytest.approx(0.5 / 2_000_000)
        # the next batch's prediction holds the files its keys will rewrite: 10 random keys
        # touch about 3.77 of the 4 files
        state.set_keys(waiting=10, batch_keys=10, batch_updates=1)
        assert state.batch_work == pytest.approx(state.per_key * 10 + 0.5 / 2e6 * 4e6 * (1 - 0.75**10))
        d.shutdown()

    asyncio.run(scenario())
