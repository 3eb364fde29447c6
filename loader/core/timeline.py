"""A load job's life, stage by stage: where the time goes between a policy's decision and
the tables' commits (issue 37).

The policy's model of a job is one number (its duration); the live machinery runs it in
steps across three processes: the service chooses the tables and takes their batches (event
loop), a worker thread writes the hand-off file and sends the request (service process),
the load worker process opens the tables and runs the Spark job, then publishes and commits
each table in turn, and the reply travels back to the event loop, which records the loads
and offers the worker its next job. Each step stamps the wall clock (``time.time``: one
clock for every process of one machine) into the job's :class:`JobTimeline`, so the idle
gaps and the serial parts are measured rather than guessed.

A sink or a worker process stamps what it knows into ``LoadResult.marks`` (:data:`JOB_MARKS`
once per job, :data:`TABLE_MARKS` per table); the dispatcher adds its own and builds the
timeline when the job has reported back. A mark a path does not pass (a classic in-process
load has no hand-off) is absent, and so are the stages that need it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from loader.core.updates import LoadResult
from schedulers.stage_costs import MeasuredJob

Outcome = TypeVar("Outcome")

#: Marks a job passes once (epoch seconds), in order.
JOB_MARKS = (
    "chosen",  # the dispatcher took the batches (event loop)
    "thread_start",  # a service worker thread began the job
    "handed_off",  # the hand-off files are written; the request is sent (connect mode)
    "worker_received",  # the load worker process read the request
    "spark_start",  # the tables are opened and described: the Spark job is submitted
    "spark_end",  # the Spark job's result is back in the worker
    "worker_replied",  # the worker sends its reply
    "reply_read",  # the service worker thread has the reply
    "reported",  # the event loop recorded the outcome and frees the worker
)
#: Marks each table of a job passes.
TABLE_MARKS = ("publish_start", "commit_start", "commit_end")

#: The stages between the marks: name -> (from, to, what it is). The last table's commit ends
#: the ``commits`` stage; ``reply`` runs from there to the report.
STAGES: dict[str, tuple[str, str, str]] = {
    "dispatch": ("chosen", "thread_start", "the event loop's take of the batches and the thread pool's start"),
    "handoff": ("thread_start", "handed_off", "hand-off files written in the service process"),
    "transport": ("handed_off", "worker_received", "the request to the load worker process"),
    "prepare": ("worker_received", "spark_start", "tables opened, batches described, before the Spark job"),
    "spark": ("spark_start", "spark_end", "the Spark job"),
    "commits": ("spark_end", "commits_end", "every table's publish and Delta commit (a few at once: parallel_tables)"),
    "reply": ("commits_end", "reported", "the reply back to the event loop and its bookkeeping"),
}


@dataclass(frozen=True, slots=True)
class TableTimes:
    """One table's part of a job: when its publish began and its commit began and ended."""

    table: str
    publish_start: float | None = None
    commit_start: float | None = None
    commit_end: float | None = None
    loaded: bool = True


@dataclass(frozen=True, slots=True)
class JobTimeline:
    """One finished job (a single table's load or a group's), stage by stage."""

    worker: int
    marks: Mapping[str, float]
    tables: tuple[TableTimes, ...]
    #: CPU seconds of the service process for this job: the event loop's (choosing, taking,
    #: recording) and the worker thread's (hand-off files, the reply).
    service_cpu: float
    #: Seconds the worker was free before this job was chosen (None: its first job).
    idle_before: float | None = None

    @property
    def commits_end(self) -> float | None:
        ends = [t.commit_end for t in self.tables if t.commit_end is not None]
        return max(ends) if ends else None

    def at(self, mark: str) -> float | None:
        return self.commits_end if mark == "commits_end" else self.marks.get(mark)

    def stages(self) -> dict[str, float]:
        """Seconds of each stage whose two marks the job passed."""
        out: dict[str, float] = {}
        for name, (start, end, _) in STAGES.items():
            a, b = self.at(start), self.at(end)
            if a is not None and b is not None:
                out[name] = max(0.0, b - a)
        return out

    @property
    def duration(self) -> float:
        return self.marks["reported"] - self.marks["chosen"]

    def measured(self) -> MeasuredJob | None:
        """The job as the simulator's stage model sees it (``schedulers.stage_costs``); None
        for a job that did not pass the Spark job's marks or committed nothing."""
        m = self.marks
        start, end, ends = (
            m.get("spark_start"),
            m.get("spark_end"),
            sorted(t.commit_end for t in self.tables if t.commit_end is not None),
        )
        if start is None or end is None or not ends:
            return None
        commits = [b - a for a, b in zip([end, *ends], ends)]
        return MeasuredJob(len(self.tables), start - m["chosen"], end - start, commits, m["reported"] - ends[-1])

    def as_dict(self) -> dict[str, Any]:
        """One line of the jobs export (epoch seconds)."""
        return {
            "worker": self.worker,
            "marks": dict(self.marks),
            "tables": [
                {"table": t.table, **{m: getattr(t, m) for m in TABLE_MARKS}, "loaded": t.loaded} for t in self.tables
            ],
            "stages": self.stages(),
            "service_cpu": self.service_cpu,
            "idle_before": self.idle_before,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> JobTimeline:
        tables = tuple(
            TableTimes(t["table"], *(t.get(m) for m in TABLE_MARKS), loaded=t.get("loaded", True))
            for t in raw["tables"]
        )
        return cls(raw["worker"], dict(raw["marks"]), tables, raw["service_cpu"], raw.get("idle_before"))


def job_marks(results: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The job-level marks of a job's results (the first that carries each). A group's member
    that ran in a Spark job of its own (partitioned, latest, with row rules) carries that
    job's Spark marks; the group's shared job comes first unless all members ran alone."""
    out: dict[str, float] = {}
    for marks in results:
        for name in JOB_MARKS:
            if name not in out and name in marks:
                out[name] = marks[name]
    return out


def stamped(outcomes: list[Outcome], **marks: float) -> list[Outcome]:
    """The outcomes with ``marks`` added to each load result's (failures pass unchanged)."""
    return [
        replace(o, marks={**o.marks, **marks}) if isinstance(o, LoadResult) else o  # type: ignore[misc]
        for o in outcomes
    ]
