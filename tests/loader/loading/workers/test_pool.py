"""Loads in worker processes (loader/loading/workers/): against a local Spark Connect
server, the service-side sink hands batches to worker processes, which load them exactly
as the in-process sink does; a worker killed mid-batch is replaced and the retry loads
exactly what was not committed; failures cross the process boundary with their class.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from loader.core.updates import Batch, FileFormat, FileRef, LoadResult
from loader.durability.transactions import app_id
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.sinks.view_join import run_view_job
from loader.loading.spark import DEFAULT_LEAN, spark_unreachable
from loader.loading.views.maintainer import InputChange, ViewMaintainer
from loader.loading.workers.messages import LoadFailedInWorker
from loader.loading.workers.pool import ProcessSink, WorkerDied, WorkerOptions, WorkerProcess, WorkerTimedOut
from testing.server_process import refusing_port
from testing.tables import read_delta
from tests.loader.loading.test_group_job import _batches
from tests.loader.loading.test_sinks import ORDERS, by_id, order_rows, rows_update
from tests.loader.loading.views.test_maintainer import SCHEMAS, Inputs, view_rows
from tests.loader.loading.views.test_spark_engine import declare as declare_spark_view
from tests.spark_fixtures import ConnectEndpoint

pytestmark = pytest.mark.slow


def _options(tmp_path: Path, failpoints: str = "", connect_timeout: float = 60.0) -> WorkerOptions:
    return WorkerOptions(
        warehouse=tmp_path / "warehouse",
        writer="delta-rs",
        lean=DEFAULT_LEAN,
        connect_timeout=connect_timeout,
        reconnect_timeout=15.0,
        nice=0,
        handoff_dir=tmp_path / "handoff",
        failpoints=failpoints,
    )


@pytest.fixture
def processes(connect_server: ConnectEndpoint, tmp_path: Path) -> Iterator[ProcessSink]:
    sink = ProcessSink(2, _options(tmp_path), lambda: connect_server.url)
    sink.start()
    yield sink
    sink.stop()
    assert sink.live() == 0


def test_worker_processes_load_as_the_in_process_sink(processes: ProcessSink, spark, tmp_path: Path) -> None:
    local = DeltaRsSink(tmp_path / "local", spark)
    batches, schemas = _batches(tmp_path)
    rng = random.Random(11)
    big = order_rows(rng, range(1000, 41_000))  # > 1 MiB: Spark reads the handoff file itself
    batches.append(Batch("big", (rows_update("big", 1, big),)))
    schemas.append(ORDERS)
    for sink in (processes, local):
        for batch, schema in zip(batches, schemas):
            sink.ensure_table(batch.table, schema)

    grouped = processes.load_group(batches[:3], schemas[:3])
    alone = [processes.load(b, s) for b, s in zip(batches[3:], schemas[3:])]
    assert all(isinstance(o, LoadResult) and not o.skipped for o in [*grouped, *alone]), grouped
    # Every stage the job passed is stamped, in order (loader/core/timeline.py): once per job,
    # and each table's publish and commit after the Spark job (on the table threads: at once).
    order = ("handed_off", "worker_received", "spark_start", "spark_end")
    for outcome in [*grouped, *alone]:
        assert isinstance(outcome, LoadResult)
        marks = outcome.marks
        steps = [marks[k] for k in (*order, "publish_start", "commit_start", "commit_end", "worker_replied")]
        assert steps == sorted(steps) and marks["reply_read"] >= marks["worker_replied"], marks
    assert len({o.marks["spark_start"] for o in grouped if isinstance(o, LoadResult)}) == 1  # one Spark job
    for batch, schema in zip(batches, schemas):
        local.load(batch, schema)

    for batch in batches:
        got, want = read_delta(processes.table_path(batch.table)), read_delta(local.table_path(batch.table))
        assert got.schema == want.schema
        assert by_id(got) == by_id(want)
    assert read_delta(processes.table_path("big")).num_rows == 40_000
    assert not list((tmp_path / "handoff").iterdir()), "handoff files are removed once the worker answered"
    again = processes.load_group(batches[:3], schemas[:3])
    assert all(isinstance(o, LoadResult) and o.skipped for o in again)


@pytest.mark.parametrize(("point", "retry_skipped"), [("load.after-publish", False), ("load.after-commit", True)])
def test_a_worker_killed_mid_batch_is_replaced_and_the_retry_loads_once(
    connect_server: ConnectEndpoint, tmp_path: Path, point: str, retry_skipped: bool
) -> None:
    sink = ProcessSink(1, _options(tmp_path, failpoints=f"{point}=1"), lambda: connect_server.url)
    sink.start()
    try:
        sink.ensure_table("orders", ORDERS)
        first_pid = sink.processes[0].pid
        batch = Batch("orders", (rows_update("orders", 1, order_rows(random.Random(5), range(50))),))
        with pytest.raises(WorkerDied, match="load worker 0 .* exit code -9"):
            sink.load(batch, ORDERS)
        assert sink.deaths == 1 and sink.live() == 0

        retry = sink.load(batch, ORDERS)  # the slot's worker is started again (not armed) first
        assert sink.processes[0].pid != first_pid and sink.live() == 1
        assert retry.skipped is retry_skipped
        table = read_delta(sink.table_path("orders"))
        assert sorted(table.column("id").to_pylist()) == list(range(50))
        assert DeltaTable(str(sink.table_path("orders"))).transaction_version(app_id("orders")) == 1

        later = sink.load(
            Batch("orders", (rows_update("orders", 2, order_rows(random.Random(6), range(50, 60))),)), ORDERS
        )
        assert not later.skipped and later.rows == 10
    finally:
        sink.stop()


def test_a_worker_killed_between_the_commits_of_a_group_job_is_replaced_and_the_retry_loads_once(
    connect_server: ConnectEndpoint, tmp_path: Path
) -> None:
    """The group job committed its first table, not the others: the retry skips the first
    (its transaction id is in its log) and commits the rest, every row once."""
    sink = ProcessSink(1, _options(tmp_path, failpoints="load.group.between-commits=1"), lambda: connect_server.url)
    sink.start()
    try:
        batches, schemas = _batches(tmp_path)
        batches, schemas = batches[:3], schemas[:3]
        for batch, schema in zip(batches, schemas):
            sink.ensure_table(batch.table, schema)
        with pytest.raises(WorkerDied, match="load worker 0 .* exit code -9"):
            sink.load_group(batches, schemas)
        committed = [
            (sink.table_path(b.table) / "_delta_log").is_dir() and len(read_delta(sink.table_path(b.table)))
            for b in batches
        ]
        assert committed[0] and not any(committed[1:]), committed

        retry = sink.load_group(batches, schemas)
        assert [isinstance(o, LoadResult) and o.skipped for o in retry] == [True, False, False], retry
        for batch in batches:  # every row once
            ids = read_delta(sink.table_path(batch.table)).column("id").to_pylist()
            assert ids and len(ids) == len(set(ids)), (batch.table, ids)
            version = DeltaTable(str(sink.table_path(batch.table))).transaction_version(app_id(batch.table))
            assert version == batch.updates[-1].seq
        assert all(isinstance(o, LoadResult) and o.skipped for o in sink.load_group(batches, schemas))
    finally:
        sink.stop()


def test_a_worker_that_does_not_answer_in_time_is_killed_and_its_job_retried(
    connect_server: ConnectEndpoint, tmp_path: Path
) -> None:
    """A wedged worker (stopped: alive, silent) holds its slot only until the job timeout."""
    options = dataclasses.replace(_options(tmp_path), job_timeout=3.0)
    sink = ProcessSink(1, options, lambda: connect_server.url)
    sink.start()
    try:
        sink.ensure_table("orders", ORDERS)
        wedged = sink.processes[0].pid
        assert wedged is not None
        os.kill(wedged, signal.SIGSTOP)
        batch = Batch("orders", (rows_update("orders", 1, order_rows(random.Random(8), range(20))),))
        with pytest.raises(WorkerTimedOut, match=r"load worker 0 .* did not finish its job in 3 s .*job_timeout"):
            sink.load(batch, ORDERS)
        assert sink.deaths == 1 and sink.live() == 0
        with pytest.raises(ProcessLookupError):
            os.kill(wedged, 0)  # killed and reaped, not left stopped

        retry = sink.load(batch, ORDERS)  # on a new process, within the limit
        assert not retry.skipped and retry.rows == 20 and sink.processes[0].pid != wedged
        assert DeltaTable(str(sink.table_path("orders"))).transaction_version(app_id("orders")) == 1
    finally:
        sink.stop()


def test_failures_cross_the_process_boundary_with_their_class(processes: ProcessSink, tmp_path: Path) -> None:
    processes.ensure_table("orders", ORDERS)
    rows = order_rows(random.Random(1), range(3))
    gone = FileRef(str(tmp_path / "orders-gone.csv"), FileFormat.csv, 10)
    nulls = rows.set_column(0, pa.field("id", pa.int64()), pa.array([1, None, 3], pa.int64()))
    with pytest.raises(ValueError, match="null values to non-nullable") as caught:  # as in process
        processes.load(Batch("orders", (rows_update("orders", 1, nulls),)), ORDERS)
    assert not spark_unreachable(caught.value)
    missing = Batch("orders", (dataclasses.replace(rows_update("orders", 1, rows), rows=None, files=(gone,)),))
    with pytest.raises(LoadFailedInWorker, match="orders-gone.csv") as failed:  # failed in the worker
        processes.load(missing, ORDERS)
    assert not spark_unreachable(failed.value)
    assert processes.live() == 2, "a batch's failure does not end its worker"
    processes.ensure_table("orders2", ORDERS)
    bad, good = (
        Batch("orders", (rows_update("orders", 1, nulls),)),
        Batch("orders2", (rows_update("orders2", 1, rows),)),
    )
    outcomes = processes.load_group([bad, good], [ORDERS, ORDERS])
    assert isinstance(outcomes[0], ValueError) and "null" in str(outcomes[0]), outcomes
    assert isinstance(outcomes[1], LoadResult) and outcomes[1].rows == 3, "one table's failure is its own"


def test_a_join_views_job_runs_in_a_worker_as_in_process(processes: ProcessSink, spark, tmp_path: Path) -> None:
    """A view whose engine is ``spark``: its job crosses to a worker process (Spark Connect)
    and its answer comes back as the in-process session's; a failing job crosses with its text."""
    warehouse = processes.options.warehouse
    inputs = Inputs(warehouse, None)
    inputs.write("sales", [(1, 1, 1.0), (2, 2, 2.0), (2, 2, 2.0)], 1.0)
    inputs.write("customers", [(1, 0), (2, 1)], 1.0)
    inputs.write("regions", [(0, "x"), (1, "y")], 1.0)
    jobs: list[Any] = []
    answers: list[pa.Table] = []

    def joiner(job: Any) -> pa.Table:
        jobs.append(job)
        answers.append(processes.join_view(job))
        return answers[-1]

    maintainer = ViewMaintainer(declare_spark_view(None), warehouse)
    maintainer.open()
    maintainer.load([InputChange(t, None) for t in SCHEMAS], joiner)
    assert view_rows(warehouse) == inputs.join() == {(1, 1.0, "x"): 1, (2, 2.0, "y"): 2}
    local = run_view_job(spark, jobs[0])
    assert sorted(local.to_pylist(), key=str) == sorted(answers[0].to_pylist(), key=str)
    broken = dataclasses.replace(jobs[0].inputs[0], new=(str(tmp_path / "gone.parquet"),))
    with pytest.raises(LoadFailedInWorker, match="gone.parquet"):
        processes.join_view(dataclasses.replace(jobs[0], inputs=(broken, *jobs[0].inputs[1:])))
    assert processes.live() == 2 and not list(processes.options.handoff_dir.iterdir())


def test_a_worker_without_spark_says_spark_is_unreachable(tmp_path: Path) -> None:
    with refusing_port() as port, pytest.raises(Exception) as caught:
        sink = ProcessSink(1, _options(tmp_path, connect_timeout=0.5), lambda: f"sc://127.0.0.1:{port}")
        sink.start()
    assert spark_unreachable(caught.value), caught.value
    assert sink.live() == 0


@pytest.mark.parametrize("replies", [True, False])
def test_a_worker_that_ends_is_read_to_its_end_first(tmp_path: Path, replies: bool) -> None:
    """Its last reply counts even when its process is seen ended before the reply is polled;
    one that ended without a reply is said to have died mid-answer whichever came first (the
    crash trials allow exactly that message for their kills)."""
    ours, theirs = socket.socketpair()
    script = (
        "import socket, sys\n"
        "from multiprocessing.connection import Connection\n"
        "conn = Connection(socket.socket(fileno=int(sys.argv[1])).detach())\n"
        + ("conn.send('done')\n" if replies else "")
        + "sys.exit(3)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(theirs.fileno())], pass_fds=[theirs.fileno()])
    theirs.close()
    child.wait()

    class LatePoll:
        """The race: the first timed poll sees nothing; the process is then seen ended."""

        def __init__(self, conn: Connection) -> None:
            self.conn, self.polls = conn, 0

        def poll(self, timeout: float = 0.0) -> bool:
            self.polls += 1
            return False if self.polls == 1 else self.conn.poll(timeout)

        def recv(self) -> object:
            return self.conn.recv()

        def close(self) -> None:
            self.conn.close()

    late = LatePoll(Connection(ours.detach()))
    worker = WorkerProcess(0, _options(tmp_path), _process=child, _conn=late)  # type: ignore[arg-type]
    if replies:
        assert worker._receive(5.0) == "done"
    else:
        with pytest.raises(WorkerDied, match=r"load worker 0 \(pid None\) ended mid-answer, exit code 3"):
            worker._receive(5.0)
    assert late.polls == 2  # the answer (or its absence) came from the check after the process ended
