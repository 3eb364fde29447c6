"""The load worker process: a Spark Connect client that runs batches' loads for the service.

Started by the service (``pool.py``) as ``python -m loader.loading.workers.process --fd N``
with one end of a Unix socket pair; everything else arrives over it: the set-up, then
load requests (and join views' Spark jobs), one at a time, each answered before the next
is read. A worker holds one
Spark Connect session and one sink (the same sink classes the classic mode runs in the
service), so a batch is loaded, committed and checked for exactly-once by the same code
whichever process runs it.

Why a process: a load's driver-side Python (Arrow work, the Delta commit, gRPC) holds a
GIL; in the service process that is the request handler's GIL (BENCHMARKS.md, issue 15).

A worker never outlives the service: it ends itself within ``PARENT_CHECK_SECONDS`` of
its parent's death, even mid-load, so a batch the next start of the service dispatches
again cannot meet an orphan committing it at the same moment. (``PR_SET_PDEATHSIG`` is not
used: it fires when the *thread* that started the child ends, and the service starts
replacements from its worker threads.)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from loader.core.timeline import stamped
from loader.loading.sinks.frame import INLINE_ROWS_MAX_BYTES
from loader.loading.sinks.view_join import write_answer
from loader.loading.spark import connect_session
from loader.loading.workers.handoff import take_over
from loader.loading.workers.messages import (
    LoadFailure,
    LoadReply,
    LoadRequest,
    ViewJobReply,
    ViewJobRequest,
    WorkerReady,
    WorkerSetup,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loader.loading.sinks.base import Sink

log = logging.getLogger("loader.worker")

PARENT_CHECK_SECONDS = 0.1


class Worker:
    """One worker's Spark session and sink; reconnects after Spark was unreachable."""

    def __init__(self, setup: WorkerSetup) -> None:
        self.setup = setup
        self.url = setup.url
        self.spark: SparkSession | None = None
        self.sink: Sink | None = None

    def connect(self, url: str, timeout: float) -> None:
        from loader.loading.sinks import make_sink

        self.close()
        self.spark = connect_session(url, timeout=timeout)
        self.url = url
        self.sink = make_sink(self.setup.writer, Path(self.setup.warehouse), self.spark, lean=self.setup.lean)  # type: ignore[arg-type]

    def join_view(self, request: ViewJobRequest) -> ViewJobReply:
        try:
            if self.sink is None or request.url != self.url:
                self.connect(request.url, request.connect_timeout)
            assert self.sink is not None
            write_answer(self.sink.join_view(request.job), Path(request.answer))
        except Exception as exc:
            failure = LoadFailure.of(exc)
            if failure.unreachable:
                self.close()  # a new session, once Spark is back
            return ViewJobReply(failure)
        return ViewJobReply(None)

    def run(self, request: LoadRequest) -> LoadReply:
        received = time.time()
        try:
            if self.sink is None or request.url != self.url:
                self.connect(request.url, request.connect_timeout)
            assert self.sink is not None
            inline = 0 if request.group else INLINE_ROWS_MAX_BYTES
            batches = [take_over(b, h, inline) for b, h in zip(request.batches, request.handoffs)]
            schemas = list(request.schemas)
            if request.group:
                outcomes = self.sink.load_group(batches, schemas)
            else:
                outcomes = [self.sink.load(batches[0], schemas[0])]
        except Exception as exc:  # the whole call: every batch of it failed alike
            outcomes = [exc] * len(request.batches)
        outcomes = stamped(outcomes, worker_received=received, worker_replied=time.time())
        reply = LoadReply(tuple(LoadFailure.of(o) if isinstance(o, BaseException) else o for o in outcomes))
        if any(isinstance(o, LoadFailure) and o.unreachable for o in reply.outcomes):
            self.close()  # a new session, once Spark is back
        return reply

    def close(self) -> None:
        """Stop the session (quietly: its server may be gone; the retry policy bounds the wait)."""
        spark, self.spark, self.sink = self.spark, None, None
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(3)  # the service is gone: stop at once, mid-commit or not (module docstring)
        time.sleep(PARENT_CHECK_SECONDS)


def serve(conn: Connection) -> int:
    setup: WorkerSetup = conn.recv()
    logging.basicConfig(
        level=setup.log_level,
        format=f"%(asctime)s %(levelname)s [worker-{setup.index} pid {os.getpid()}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if setup.nice > 0:
        os.nice(setup.nice)
    if setup.idle and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    threading.Thread(target=_watch_parent, args=(setup.parent_pid,), name="parent-watch", daemon=True).start()
    worker = Worker(setup)
    try:
        worker.connect(setup.url, setup.connect_timeout)
    except Exception as exc:
        conn.send(LoadFailure.of(exc))
        return 1
    assert worker.sink is not None
    try:
        conn.send(WorkerReady(pid=os.getpid(), writer=worker.sink.name))
        while True:
            request = conn.recv()
            if request is None:  # an orderly stop
                return 0
            answer = worker.join_view(request) if isinstance(request, ViewJobRequest) else worker.run(request)
            conn.send(answer)
    finally:
        worker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a load worker process of the loader (started by the service)")
    parser.add_argument("--fd", type=int, required=True, help="this end of the socket to the service")
    args = parser.parse_args(argv)
    with Connection(args.fd) as conn:
        try:
            return serve(conn)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            # The service closed its end or died (kill -9) at any step, its set-up, a
            # start that failed, mid-job or between jobs: nobody is left to answer or tell.
            return 0


if __name__ == "__main__":
    sys.exit(main())
