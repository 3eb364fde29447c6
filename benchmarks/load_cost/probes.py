"""What the load-cost benchmark measures a load with, besides a stopwatch: the steps of
``DeltaRsSink.load`` (wrappers around the sink's own steps: the live path, not a copy of it) and
their py4j round trips (``PhaseRecorder``), the driver JVM's CPU by thread kind from ``/proc``
(``JvmThreads``), the Spark job cut by its own event log (``spark_phases``).
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The steps of ``DeltaRsSink.load``, in order, as the report names them.
PHASES = ("open table, read app transaction", "rows to Parquet (pyarrow)", "build DataFrame (py4j)")
PHASES += ("Spark write job", "publish (rename, footer stats)", "Delta commit (deltalake)", "handle refresh")
PHASES += ("staging cleanup", "other Python")
BACKGROUND = "py4j object release (other threads)"


class PhaseRecorder:
    """Times the phases of loads run on one thread.

    A phase wrapped ``nested=True`` (pyarrow's write inside the frame build) is carved out
    of the phase it runs in; any other phase called inside one counts for the outer one
    (``update_incremental`` inside "open table" is not a "handle refresh").
    """

    def __init__(self) -> None:
        self.record: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None
        self._stack: list[list[Any]] = []  # [name, perf_counter start, seconds of carved-out children]

    def wrap(self, name: str, fn: Callable[..., Any], nested: bool = False) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            record = self.record
            if record is None or threading.current_thread() is not self.thread or (self._stack and not nested):
                return fn(*args, **kwargs)
            wall = time.time()
            frame = [name, time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                elapsed = time.perf_counter() - frame[1]
                record["phases"][name] += elapsed - frame[2]
                record["marks"].setdefault(name, (wall, time.time()))
                if self._stack:
                    self._stack[-1][2] += elapsed

        return timed

    def py4j(self, seconds: float) -> None:
        record = self.record
        if record is None:
            return
        if threading.current_thread() is not self.thread:
            where = BACKGROUND
        else:
            where = self._stack[-1][0] if self._stack else "other Python"
        record["py4j_calls"][where] += 1
        record["py4j_seconds"][where] += seconds

    def run(self, load: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
        """Run one load under the recorder: its seconds, seconds per phase (the time outside every phase
        is "other Python"), py4j round trips and their seconds per phase, and the epoch seconds (start,
        end) of each phase's first run, to line up with Spark's event log."""
        phases, calls, seconds = (collections.defaultdict(type_) for type_ in (float, int, float))
        record = {"total": 0.0, "phases": phases, "py4j_calls": calls, "py4j_seconds": seconds, "marks": {}}
        self.record = record
        self.thread, self._stack = threading.current_thread(), []
        started = time.perf_counter()
        try:
            result = load()
        finally:
            self.record = None
            record["total"] = time.perf_counter() - started
        record["phases"]["other Python"] = max(0.0, record["total"] - sum(record["phases"].values()))
        return result, record


def count_py4j(recorder: PhaseRecorder) -> Callable[[], None]:
    """Route every py4j round trip of this process through ``recorder``; returns the undo."""
    from py4j.clientserver import ClientServerConnection

    original = ClientServerConnection.send_command

    def send_command(self: Any, command: str) -> Any:
        started = time.perf_counter()
        try:
            return original(self, command)
        finally:
            recorder.py4j(time.perf_counter() - started)

    ClientServerConnection.send_command = send_command  # type: ignore[method-assign]
    return lambda: setattr(ClientServerConnection, "send_command", original)


# -- JVM threads ------------------------------------------------------------------------
#: Thread kinds of a Spark driver JVM, by thread name (first match). ``/proc`` keeps the
#: first 15 characters of a name, so the patterns look no further.
THREAD_KINDS: tuple[tuple[str, str], ...] = (
    ("py4j command threads (DataFrame calls, analysis, planning, write command)", r"^Thread-\d+$"),
    ("executor task threads (read, Parquet write, task commit)", r"^Executor task"),
    ("DAG scheduler (stages, task serialization)", r"^dag-scheduler"),
    ("JIT compiler", r"^C\d CompilerThre"),
    ("garbage collector", r"^(GC Thread|G1 |VM Thread)"),
    ("listener bus (status store, event log)", r"^spark-listener"),
    ("RPC and task results", r"^(dispatcher-|task-result|netty-rpc|rpc-)"),
    ("process reaper (forked `chmod`s)", r"^process reaper"),
)
OTHER_THREADS = "other threads"
CHILD_PROCESSES = "forked processes (`chmod`, their own CPU)"
THREAD_KIND_NAMES = [*(k for k, _ in THREAD_KINDS), OTHER_THREADS, CHILD_PROCESSES]


def _thread_kind(name: str) -> str:
    return next((kind for kind, rx in THREAD_KINDS if re.search(rx, name)), OTHER_THREADS)


class JvmThreads:
    """CPU seconds of one JVM's threads, grouped by ``THREAD_KINDS`` (Linux ``/proc``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def available(pid: int | None) -> bool:
        return pid is not None and Path(f"/proc/{pid}/task").is_dir()

    def _ticks(self, stat: str, fields: slice) -> float:
        """User and system CPU (``fields`` 11:13: of the process, 13:15: of its waited-for children)."""
        return sum(int(v) for v in stat.rsplit(")", 1)[1].split()[fields]) / self.tick

    def total(self) -> float:
        """The whole process (threads and waited-for children), one file read."""
        return self._ticks(Path(f"/proc/{self.pid}/stat").read_text(), slice(11, 15))

    def snapshot(self) -> dict[str, float]:
        out: dict[str, float] = collections.defaultdict(float)
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                text = Path(f"/proc/{self.pid}/task/{tid}/stat").read_text()
            except OSError:  # the thread ended meanwhile
                continue
            out[_thread_kind(text[text.index("(") + 1 : text.rindex(")")])] += self._ticks(text, slice(11, 13))
        out[CHILD_PROCESSES] = self._ticks(Path(f"/proc/{self.pid}/stat").read_text(), slice(13, 15))
        return dict(out)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)}


# -- Spark's event log ------------------------------------------------------------------
#: Phases of a load's Spark write, from the write call's start to its return (milliseconds).
SPARK_PHASES = (
    "driver: analyze, optimize, plan, describe the plan",
    "driver: write command until job submitted (committer setup, scan set-up)",
    "scheduler: job submitted to task launched (task serialization)",
    "task: deserialize",
    "task: run, less task commit (read rows, Parquet writer set-up and write)",
    "task: commit (committer)",
    "task: finish to job end (result, scheduler)",
    "driver: job commit (committer)",
    "driver: after job commit until the command ends",
    "py4j return",
)


def read_event_log(directory: Path) -> list[dict[str, Any]]:
    """Every event of the (uncompressed, unrolled) event log(s) written into ``directory``."""
    events: list[dict[str, Any]] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path, encoding="utf-8") as handle:
            events.extend(json.loads(line) for line in handle if line.strip())
    return events


def _metric_names(plan: dict[str, Any], out: dict[int, str]) -> None:
    for metric in plan.get("metrics", []):
        out[metric["accumulatorId"]] = metric["name"]
    for child in plan.get("children", []):
        _metric_names(child, out)


@dataclass
class _Execution:
    start_ms: int
    plan: str = ""
    end_ms: int | None = None
    job_ids: list[int] = field(default_factory=list)
    job_submit_ms: int | None = None
    job_end_ms: int | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    job_commit_ms: float = 0.0


def spark_phases(events: Iterable[dict[str, Any]], windows: list[tuple[float, float]]) -> list[dict[str, float] | None]:
    """Per window (epoch seconds of one write call), its SQL execution cut into ``SPARK_PHASES``.

    None where no execution with exactly one job and one task started inside the window.
    """
    names: dict[int, str] = {}
    executions: dict[int, _Execution] = {}
    job_execution: dict[int, int] = {}
    stage_job: dict[int, int] = {}
    for event in events:
        kind = event["Event"]
        if kind.endswith("SQLExecutionStart"):
            _metric_names(event.get("sparkPlanInfo", {}), names)
            executions[event["executionId"]] = _Execution(event["time"], event.get("physicalPlanDescription", ""))
        elif kind.endswith("SQLAdaptiveExecutionUpdate"):
            _metric_names(event.get("sparkPlanInfo", {}), names)
        elif kind.endswith("SQLExecutionEnd") and event["executionId"] in executions:
            executions[event["executionId"]].end_ms = event["time"]
        elif kind.endswith("DriverAccumUpdates") and (execution := executions.get(event["executionId"])):
            for accumulator, value in event["accumUpdates"]:
                if names.get(accumulator) == "job commit time":
                    execution.job_commit_ms += value
        elif kind == "SparkListenerJobStart":
            execution_id = (event.get("Properties") or {}).get("spark.sql.execution.id")
            if execution_id is not None and int(execution_id) in executions:
                execution = executions[int(execution_id)]
                execution.job_ids.append(event["Job ID"])
                execution.job_submit_ms = event["Submission Time"]
                job_execution[event["Job ID"]] = int(execution_id)
                for stage in event.get("Stage IDs", []):
                    stage_job[stage] = event["Job ID"]
        elif kind == "SparkListenerJobEnd" and (execution_id := job_execution.get(event["Job ID"])) is not None:
            executions[execution_id].job_end_ms = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd" and (job := stage_job.get(event["Stage ID"])) is not None:
            executions[job_execution[job]].tasks.append(event)
    out: list[dict[str, float] | None] = []
    for begin, end in windows:
        window = (begin * 1000 - 2, end * 1000 + 2)
        inside = [e for e in executions.values() if window[0] <= e.start_ms <= window[1] and e.job_ids and e.end_ms]
        if len(inside) != 1 or len(inside[0].job_ids) != 1 or len(inside[0].tasks) != 1:
            out.append(None)
            continue
        e = inside[0]
        task = e.tasks[0]
        info, metrics = task["Task Info"], task["Task Metrics"]
        accumulables = {names.get(a["ID"], a.get("Name")): a.get("Update") for a in info.get("Accumulables", [])}
        task_commit = float(accumulables.get("task commit time") or 0)
        deserialize, run = metrics["Executor Deserialize Time"], metrics["Executor Run Time"]
        assert e.job_submit_ms is not None and e.job_end_ms is not None and e.end_ms is not None
        launch, job_end = info["Launch Time"], e.job_end_ms
        cut = [e.start_ms - begin * 1000, e.job_submit_ms - e.start_ms, launch - e.job_submit_ms, deserialize]
        cut += [run - task_commit, task_commit, job_end - launch - deserialize - run, e.job_commit_ms]
        cut += [e.end_ms - job_end - e.job_commit_ms, end * 1000 - e.end_ms]
        # What the plan holds: an Exchange would mean a shuffle, AdaptiveSparkPlan that AQE took part.
        plan = {"_exchange": float("Exchange" in e.plan), "_adaptive": float("AdaptiveSparkPlan" in e.plan)}
        out.append(dict(zip(SPARK_PHASES, cut, strict=True)) | plan)
    return out
