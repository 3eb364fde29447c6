"""What crosses the boundary between the service process and a load worker process.

Small frozen dataclasses, pickled over a Unix socket of the two processes' own
(``multiprocessing.connection.Connection``): a worker's set-up, a load request (batches
whose rows are files, see ``handoff.py``), the reply. Row data never crosses here.

A failure in a worker crosses as a :class:`LoadFailure` rather than as the exception
itself: a py4j or gRPC exception may not unpickle in the service, and what the service
needs of it is its text and how the dispatcher classes it (Spark unreachable, the disk,
the table, or the batch), which the worker decides where the real exception is.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field

from loader.core.durable_files import ENVIRONMENTAL_ERRNOS, environmental
from loader.core.errors import StartError, caused_by, causes
from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.loading.failures import TableChanged, TableRefusesWrites, table_refusal, updates_at_fault
from loader.loading.sinks.view_join import ViewJob
from loader.loading.spark import SparkUnreachable, spark_unreachable


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a new worker process needs, sent first."""

    index: int
    warehouse: str
    #: ``[writer]``: auto, delta-rs or delta-spark.
    writer: str
    lean: tuple[str, ...]
    #: The Spark Connect server, ``sc://host:port``.
    url: str
    connect_timeout: float
    #: The service's pid: the worker ends itself when its parent is gone (a worker left
    #: running after the service was killed could commit a batch the next start loads).
    parent_pid: int
    log_level: int
    #: Nice increment (``[spark] driver_nice``): loads yield the CPU to acknowledgements.
    nice: int = 0
    #: SCHED_IDLE (``[spark] driver_idle``): the CPU acknowledgements leave, and only that.
    idle: bool = False


@dataclass(frozen=True)
class WorkerReady:
    """A worker's answer to its set-up: connected, its sink made."""

    pid: int
    #: The writer the sink chose (delta-rs or delta-spark).
    writer: str


@dataclass(frozen=True)
class LoadRequest:
    """One table's batch (``group`` False) or several tables' in one Spark job."""

    batches: tuple[Batch, ...]
    schemas: tuple[TableSchema, ...]
    #: Per batch: the handoff file holding its in-memory rows (``handoff.py``), or None.
    handoffs: tuple[str | None, ...]
    group: bool
    #: Where Spark is now (the service's own server may have restarted on another port).
    url: str
    #: Seconds to wait for Spark when the worker must (re)connect first.
    connect_timeout: float


@dataclass(frozen=True)
class ViewJobRequest:
    """A join view's Spark job (engine ``spark``); the worker writes its answer, the view
    load's changes, to ``answer`` (Arrow IPC) rather than into the reply."""

    job: ViewJob
    answer: str
    url: str
    connect_timeout: float


@dataclass(frozen=True)
class ViewJobReply:
    """The job's outcome: done (its answer in the request's file), or how it failed."""

    failure: LoadFailure | None


@dataclass(frozen=True)
class LoadFailure:
    """A failed load (or set-up) as the worker saw it."""

    type_name: str
    message: str
    #: The dispatcher's classes: Spark could not be reached; the disk failed (with its errno).
    unreachable: bool
    environmental: bool
    errno: int | None
    trace: str
    #: An error the loader anticipates at start (``StartError``: Delta's jars missing, ...).
    start_error: bool = False
    #: The table refuses this write (``TableRefusesWrites``): its reason, and its own text
    #: (the service's metric is per reason; the message says what to do).
    refused: str | None = None
    refusal: str = ""
    #: The table's protocol or metadata changed between the rules' check and the commit.
    table_changed: bool = False
    #: The updates the failure names as the ones to blame, each with why (``updates_at_fault``).
    updates_at_fault: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, error: BaseException) -> LoadFailure:
        refusal = table_refusal(error)
        return cls(
            type_name=type(error).__name__,
            message=str(error),
            unreachable=spark_unreachable(error),
            environmental=environmental(error),
            errno=_disk_errno(error),
            trace="".join(traceback.format_exception(error)),
            start_error=caused_by(error, lambda e: isinstance(e, StartError)),
            refused=None if refusal is None else refusal.reason,
            refusal="" if refusal is None else str(refusal),
            table_changed=caused_by(error, lambda e: isinstance(e, TableChanged)),
            updates_at_fault=updates_at_fault(error),
        )

    def error(self) -> LoadFailedInWorker:
        """The exception the service raises for it, classed as the worker classed the original."""
        failed = LoadFailedInWorker(f"{self.type_name}: {self.message}", self)
        failed.updates_at_fault = dict(self.updates_at_fault)
        if self.unreachable:
            failed.__cause__ = SparkUnreachable(self.message)
        elif self.errno is not None:  # (a disk failure told only in words is in the text already)
            failed.__cause__ = OSError(self.errno, os.strerror(self.errno))
        elif self.start_error:
            failed.__cause__ = StartError(self.message)
        elif self.refused is not None:
            failed.__cause__ = TableRefusesWrites(self.refusal or self.message, self.refused)  # type: ignore[arg-type]
        elif self.table_changed:
            failed.__cause__ = TableChanged(self.message)
        return failed


def _disk_errno(error: BaseException) -> int | None:
    """The errno of a disk failure among ``error``'s causes, if one is."""
    disk = (e for e in causes(error) if isinstance(e, OSError) and e.errno in ENVIRONMENTAL_ERRNOS)
    return next((e.errno for e in disk), None)


class LoadFailedInWorker(RuntimeError):
    """A load failed in a worker process; its text is the original error's."""

    def __init__(self, message: str, failure: LoadFailure) -> None:
        super().__init__(message)
        self.failure = failure
        self.updates_at_fault: dict[int, str] = {}


@dataclass(frozen=True)
class LoadReply:
    """One outcome per batch of the request, in order."""

    outcomes: tuple[LoadResult | LoadFailure, ...]
