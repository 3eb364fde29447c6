"""Loads in worker processes, the service's side: P processes, and the Sink that hands them batches.

The dispatcher calls the service's sink from P worker threads, at most one batch (or one
multi-table job) per thread at a time. With ``[spark] mode = "connect"`` that sink is a
:class:`ProcessSink`: each call takes an idle worker process, writes the batch's in-memory
rows to a handoff file (``handoff.py``), sends a small request over the process's socket and
waits for the reply, the GIL released all the while. The service process keeps intake, the
WAL, the pending store and the dispatcher; Arrow work, Spark calls and Delta commits run in
the workers (``process.py``).

A worker that dies mid-batch (killed, out of memory) fails that call with
:class:`WorkerDied`; the dispatcher retries the batch with back-off as after any failed
load, and the application transaction in the Delta log makes the retry load exactly what
the dead worker had not committed (``unloaded_part``). The dead process is replaced when
its slot is next taken, before anything is sent to it. A worker that does not answer
within ``[loading] job_timeout_seconds`` (a hung Spark job, a wedged process) is killed
here and the call fails the same way (:class:`WorkerTimedOut`), so a hang becomes a failed
load that is retried, counted and, if it keeps happening, quarantined, rather than a
worker slot lost for good. Killing the process is the one stop that always works: the
worker's Spark calls block in gRPC. Its Spark job may still run to its end on the server,
as after any death mid-job. With the embedded writer nothing commits what it wrote (the
worker commits with ``deltalake``; Spark only writes a staging directory). With the native
writer, Delta's check on the application transaction (``txnAppId``) fences a late commit
against the retry's.

Table checks (creating a table, its schema, its committed sequence) need no Spark and run
here, with ``deltalake`` (``DeltaTables``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import pyarrow as pa

from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.core.timeline import stamped
from loader.core.updates import Batch, LoadResult
from loader.loading.sinks.delta_table import DeltaTables, remove_staging
from loader.loading.sinks.view_join import ViewJob, read_answer
from loader.loading.workers.handoff import hand_off
from loader.loading.workers.messages import (
    LoadFailure,
    LoadReply,
    LoadRequest,
    ViewJobReply,
    ViewJobRequest,
    WorkerReady,
    WorkerSetup,
)

log = logging.getLogger(__name__)

#: Seconds a worker process may take beyond its Spark connection to say it is ready.
START_GRACE_SECONDS = 60.0
#: Seconds an orderly stop waits for a worker before killing it.
STOP_SECONDS = 10.0


class WorkerDied(RuntimeError):
    """A load worker process ended before it answered: the batch is retried (exactly once in
    effect, by its application transaction) on the process that replaces it."""


class WorkerTimedOut(WorkerDied):
    """A load worker did not answer a job within ``[loading] job_timeout_seconds`` and was
    killed: to the dispatcher a death like any other (a strike toward quarantine)."""


@dataclass(frozen=True)
class WorkerOptions:
    """How the service's worker processes are set up (from ``[spark]`` and ``writer``)."""

    warehouse: Path
    writer: str
    lean: frozenset[str]
    #: Seconds to wait for Spark Connect when a worker starts, and when it reconnects.
    connect_timeout: float
    reconnect_timeout: float
    nice: int
    #: Where batches' in-memory rows are handed over; emptied when the workers start.
    handoff_dir: Path
    #: SCHED_IDLE, as the loader's own Spark server (``[spark] driver_idle``).
    idle: bool = False
    #: ``LOADER_FAILPOINTS`` of the first process of slot 0 only (the crash trials' worker
    #: kills: one death per life, and its replacement must not die the same way).
    failpoints: str = ""
    log_level: int = logging.INFO
    #: Seconds a worker may take to answer one job (a load, a multi-table load, a view's
    #: job) before it is killed (``[loading] job_timeout_seconds``); None: no limit.
    job_timeout: float | None = None


@dataclass
class WorkerProcess:
    """One load worker process and the socket to it; started again after it died."""

    index: int
    options: WorkerOptions
    starts: int = 0
    pid: int | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _conn: Connection | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None and self._conn is not None

    def start(self, url: str) -> WorkerReady:
        """Start the process and wait until it has a Spark Connect session; the error of a
        worker that could not connect is raised as the worker classed it (SparkUnreachable)."""
        self.kill()
        ours, theirs = socket.socketpair()
        armed = self.options.failpoints if self.index == 0 and self.starts == 0 else ""
        root = str(Path(__file__).resolve().parents[3])  # where the loader package is: the worker imports it
        env = {**os.environ, failpoints.ENV: armed}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.pop(failpoints.WORKER_ENV, None)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "loader.loading.workers.process", "--fd", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=env,
                # A process group of its own (a terminal's Ctrl-C reaches the service, which
                # stops the workers in order) but the service's session: with the kernel's
                # autogroups a new session would be a scheduling group of its own, as heavy
                # as the whole service whatever its nice value.
                process_group=0,
            )
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self.starts += 1
        self.pid = self._process.pid
        o = self.options
        self._conn.send(
            WorkerSetup(
                index=self.index,
                warehouse=str(o.warehouse),
                writer=o.writer,
                lean=tuple(sorted(o.lean)),
                url=url,
                connect_timeout=o.connect_timeout,
                parent_pid=os.getpid(),
                log_level=o.log_level,
                nice=o.nice,
                idle=o.idle,
            )
        )
        answer = self._receive(o.connect_timeout + START_GRACE_SECONDS)
        if isinstance(answer, LoadFailure):
            self.kill()
            raise answer.error()
        if not isinstance(answer, WorkerReady):
            self.kill()
            raise WorkerDied(f"load worker {self.index} answered its set-up with {type(answer).__name__}")
        log.info("load worker %d started (pid %d, %s writer)", self.index, answer.pid, answer.writer)
        return answer

    def call(self, request: LoadRequest | ViewJobRequest) -> LoadReply | ViewJobReply:
        conn = self._conn
        if conn is None:
            raise WorkerDied(f"load worker {self.index} is not running")
        try:
            conn.send(request)
        except OSError as exc:
            raise self._died(f"could not be sent the batch ({exc})") from exc
        reply = self._receive(self.options.job_timeout, job=True)
        expected = ViewJobReply if isinstance(request, ViewJobRequest) else LoadReply
        if not isinstance(reply, expected):
            self.kill()
            raise WorkerDied(f"load worker {self.index} answered a {expected.__name__} with {type(reply).__name__}")
        return reply

    def _receive(self, timeout: float | None, job: bool = False) -> object:
        """The worker's next message; WorkerDied if it ends (or, with ``timeout``, is silent) first."""
        conn, process = self._conn, self._process
        assert conn is not None and process is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if conn.poll(0.2):  # (readable at end of file too: a dead worker is seen here)
                try:
                    return conn.recv()
                except (EOFError, OSError) as exc:
                    raise self._died("ended mid-answer") from exc
            if process.poll() is not None:
                # A reply sent just before it ended is still read (the poll above may have timed
                # out a moment before it came); else the worker died mid-job, said as above.
                try:
                    if conn.poll(0):
                        return conn.recv()
                except (EOFError, OSError) as exc:
                    raise self._died("ended mid-answer") from exc
                raise self._died("ended mid-answer")
            if deadline is not None and time.monotonic() > deadline:
                self.kill()
                if job:
                    raise WorkerTimedOut(
                        f"load worker {self.index} (pid {process.pid}) did not finish its job in {timeout:g} s "
                        "([loading] job_timeout_seconds) and was killed; raise the limit if jobs this long are expected"
                    )
                raise WorkerDied(f"load worker {self.index} (pid {process.pid}) did not answer in {timeout:.0f} s")

    def _died(self, what: str) -> WorkerDied:
        process = self._process
        code = None
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(5)
        self.kill()
        return WorkerDied(f"load worker {self.index} (pid {self.pid}) {what}, exit code {code}")

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Ask the worker to stop its Spark session and end; kill it after ``timeout``."""
        conn, process = self._conn, self._process
        if conn is not None and process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                conn.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)
        self.kill()

    def kill(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()


class ProcessSink(DeltaTables):
    """The service's Sink when loads run in worker processes (see the module docstring).

    ``url`` gives the Spark Connect server's address at each call (the loader's own server
    may come back on another port). ``on_death`` is told of each worker that died.
    """

    def __init__(
        self,
        workers: int,
        options: WorkerOptions,
        url: Callable[[], str],
        on_death: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(options.warehouse)
        self.options = options
        self.name = "delta-rs"
        self._url = url
        self._on_death = on_death
        self.processes = [WorkerProcess(i, options) for i in range(workers)]
        self._idle: queue.SimpleQueue[WorkerProcess] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.deaths = 0

    def start(self) -> None:
        """Start every worker at once (each connects to Spark: seconds); all or none."""
        directory = self.options.handoff_dir
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        url = self._url()
        with ThreadPoolExecutor(len(self.processes), thread_name_prefix="worker-start") as pool:
            started = [pool.submit(p.start, url) for p in self.processes]
        errors = [f.exception() for f in started if f.exception() is not None]
        if errors:
            self.stop()
            raise errors[0]  # type: ignore[misc]
        self.name = started[0].result().writer
        for process in self.processes:
            self._idle.put(process)

    def live(self) -> int:
        """Worker processes running now."""
        return sum(p.alive() for p in self.processes)

    def stop(self) -> None:
        """Stop every worker (after the dispatcher finished its batches)."""
        with ThreadPoolExecutor(max(1, len(self.processes)), thread_name_prefix="worker-stop") as pool:
            list(pool.map(lambda p: p.stop(), self.processes))

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        super().ensure_table(table, schema)
        remove_staging(self.table_path(table))

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        (outcome,) = self._run([batch], [schema], group=False)
        if isinstance(outcome, LoadFailure):
            raise outcome.error()
        assert isinstance(outcome, LoadResult)  # (a hand-off failure of a single batch is raised)
        return outcome

    def load_group(self, batches: list[Batch], schemas: list[TableSchema]) -> list[LoadResult | BaseException]:
        outcomes = self._run(batches, schemas, group=True)
        return [o.error() if isinstance(o, LoadFailure) else o for o in outcomes]

    def join_view(self, job: ViewJob) -> pa.Table:
        """A join view's job in an idle worker; its answer crosses as an Arrow file."""
        answer = self.options.handoff_dir / f"view-{job.view}-{os.getpid()}-{threading.get_ident()}.arrow"
        try:
            with self._worker() as worker:
                request = ViewJobRequest(job, str(answer), self._url(), self.options.reconnect_timeout)
                reply = self._call(worker, request, "the view's load")
            assert isinstance(reply, ViewJobReply)
            if reply.failure is not None:
                raise reply.failure.error()
            return read_answer(answer)
        finally:
            answer.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _worker(self) -> Iterator[WorkerProcess]:
        """An idle worker (started again first if its process ended), back to idle after."""
        worker = self._idle.get()  # never waits: the dispatcher runs at most P calls at once
        try:
            if not worker.alive():
                log.warning("starting load worker %d again (its process ended)", worker.index)
                worker.start(self._url())
            yield worker
        finally:
            self._idle.put(worker)

    def _call(
        self, worker: WorkerProcess, request: LoadRequest | ViewJobRequest, what: str
    ) -> LoadReply | ViewJobReply:
        try:
            return worker.call(request)
        except WorkerDied as died:
            with self._lock:
                self.deaths += 1
            log.warning("%s; %s is retried and the worker started again", died, what)
            self._on_death()
            raise

    def _run(
        self, batches: list[Batch], schemas: list[TableSchema], group: bool
    ) -> list[LoadResult | LoadFailure | Exception]:
        """Hand the batches to an idle worker; one outcome per batch, in order. A batch whose
        rows cannot be handed over (they do not fit the schema) fails alone, as its
        preparation would in a multi-table job in process."""
        outcomes: list[LoadResult | LoadFailure | Exception | None] = [None] * len(batches)
        files: list[Path] = []
        with self._worker() as worker:
            try:
                sent: list[int] = []
                handed: list[Batch] = []
                paths: list[str | None] = []
                for i, (batch, schema) in enumerate(zip(batches, schemas)):
                    try:
                        moved, file = hand_off(batch, schema, self.options.handoff_dir)
                    except Exception as exc:
                        if not group:
                            raise
                        outcomes[i] = exc
                        continue
                    sent.append(i)
                    handed.append(moved)
                    paths.append(None if file is None else str(file))
                    if file is not None:
                        files.append(file)
                if sent:
                    handed_off = time.time()
                    request = LoadRequest(
                        tuple(handed),
                        tuple(schemas[i] for i in sent),
                        tuple(paths),
                        group,
                        self._url(),
                        self.options.reconnect_timeout,
                    )
                    reply = self._call(worker, request, "its batch")
                    assert isinstance(reply, LoadReply)
                    marks = {"handed_off": handed_off, "reply_read": time.time()}
                    committed = [isinstance(o, LoadResult) and not o.skipped for o in reply.outcomes]
                    if any(committed):
                        failpoints.hit("load.after-commit")  # committed by the worker, not yet noted here
                    if any(done and schemas[i].latest for i, done in zip(sent, committed)):
                        failpoints.hit("load.upsert.after-merge")  # a latest table's MERGE, not yet noted
                    for i, outcome in zip(sent, stamped(list(reply.outcomes), **marks)):
                        outcomes[i] = outcome
                return [o for o in outcomes if o is not None]
            finally:
                for file in files:
                    file.unlink(missing_ok=True)
