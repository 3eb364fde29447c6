"""The workloads, the systems compared (the Structured Streaming peer and loader variants), how
each runs, and one measurement of a system under a workload (``run_cell``).

A loader variant is a code directory (a checkout, absolute or relative to this repository,
put on ``PYTHONPATH``: any git revision can be measured from a worktree) and environment
overrides (``LOADER_*``). CPU seconds are read per process group (``group_cpu``): the loader's
Python process and its JVM, the peer's Python driver and its JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks.harness import child
from benchmarks.harness.service import read_json, serve, spawn, stop_group, wait_exit, wait_until
from benchmarks.harness.spark import declared
from testing.commit_logs import follower
from testing.report import REPO_ROOT, log
from testing.server_process import ServerProcess
from testing.service_server import OPERATOR_TOKEN, PRODUCER_TOKEN, group_cpu, scrape
from testing.tables import read_delta

#: The tables' schema in the loader's declaration format (loader/core/tables.py).
SCHEMA = declared("u int64 not null", "r int32 not null", "v float64", "s string")
UPDATE_ID = "u"


@dataclass(frozen=True)
class Workload:
    """N tables, Poisson arrivals per table, seeded (every system replays the same schedule).
    Each row carries the id of its update (``u``): the outside reader tells which updates a
    commit made visible and counts the rows of every update (nothing lost, nothing twice). Ids
    0..N-1 are the priming updates (one per table), the scheduled ones follow in arrival order."""

    tables: int
    #: Poisson arrivals per second of each table.
    rate: float
    #: Seconds of arrivals before the measurement window opens (the backlog of a cold
    #: start settles), and the window itself.
    warmup: float
    duration: float
    rows_per_update: int = 100
    seed: int = 14

    @property
    def name(self) -> str:
        return f"{self.tables} tables"

    @property
    def horizon(self) -> float:
        return self.warmup + self.duration

    def table_names(self) -> list[str]:
        width = max(4, len(str(self.tables - 1)))
        return [f"t{i:0{width}d}" for i in range(self.tables)]


def schedule(workload: Workload) -> list[list[Any]]:
    """``[offset s, table, update id]`` of every table's Poisson arrivals over the horizon, in
    time order. Seeded per workload (seed, table count), so every system replays the same schedule."""
    rng = np.random.default_rng([workload.seed, workload.tables])
    events: list[tuple[float, int]] = []
    for table in range(workload.tables):
        t = float(rng.exponential(1.0 / workload.rate))
        while t < workload.horizon:
            events.append((t, table))
            t += float(rng.exponential(1.0 / workload.rate))
    events.sort()
    return [[offset, table, workload.tables + k] for k, (offset, table) in enumerate(events)]


def priming(workload: Workload) -> list[list[Any]]:
    """One update per table at the start, visible before the window opens."""
    return [[0.0, table, table] for table in range(workload.tables)]


SPARK_MASTER = "local[2]"
BEFORE_REV, BEFORE_CODE = "7d9de65", "/work/wt-before"


@dataclass(frozen=True)
class Variant:
    name: str
    kind: Literal["loader", "peer"]
    label: str = ""
    #: loader: the checkout whose code runs (absolute, or relative to this repository).
    code: str = "."
    #: loader: environment overrides (``LOADER_*``).
    env: dict[str, str] = field(default_factory=dict)
    #: peer: Spark configuration over the peer's defaults.
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def code_dir(self) -> Path:
        return (REPO_ROOT / self.code).resolve()  # (an absolute ``code`` replaces the root)

    @property
    def log_kind(self) -> str:
        """Which commit log the outside reader follows."""
        return "spark-sink" if self.kind == "peer" else "delta"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.kind == "loader":
            out["code_dir"] = str(self.code_dir)
            out["code_git"] = code_revision(self.code_dir)
        return out


DEFAULT_VARIANTS: tuple[Variant, ...] = (
    # 4 GB of driver heap: with Spark's default 1 GB, 1,000 streaming queries filled the old
    # generation during start-up and the driver then spent its time in full GCs (260 of them,
    # 477 s, and not one micro-batch committed 5 minutes into priming). The loaders keep 1 GB.
    Variant(
        "peer",
        "peer",
        label="Spark Structured Streaming, one query per table, trigger 1 s, Parquet sink, driver heap 4 GB",
        conf={"spark.driver.memory": "4g"},
    ),
    Variant("before", "loader", label=f"loader before issue 14 (git {BEFORE_REV}), default settings", code=BEFORE_CODE),
    Variant(
        "single",
        "loader",
        label="loader after part 2 (cheaper job), one table per job",
        env={"LOADER_LOADING__MAX_TABLES_PER_JOB": "1"},
    ),
    Variant("grouped", "loader", label="loader after parts 3+4 (group jobs), default settings"),
)


def check_code_dir(variant: Variant) -> None:
    """A loader variant's code directory must hold the loader; say how to make it if not."""
    code = variant.code_dir
    if variant.kind == "loader" and not all((code / p / "__init__.py").is_file() for p in ("loader", "cli")):
        how = f"; create it with: git worktree add --detach {BEFORE_CODE} {BEFORE_REV}"
        hint = how if variant.code == BEFORE_CODE else ""
        raise ValueError(f"variant {variant.name!r}: {code} holds no loader checkout (loader/, cli/){hint}")


def code_revision(code: Path) -> dict[str, Any]:
    """git revision of a code directory and whether its code differs from that revision."""

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", "-C", str(code), *args], capture_output=True, text=True, timeout=10, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    dirty = git("status", "--porcelain", "--", "loader", "api", "cli", "schedulers")
    return {"commit": git("rev-parse", "--short", "HEAD"), "modified": bool(dirty) if dirty is not None else None}


@dataclass
class RunningSystem:
    variant: Variant
    proc: subprocess.Popen[bytes]
    log_path: Path
    #: Per table: the directory whose commit log the outside reader follows.
    roots: dict[str, Path]
    ready_seconds: float
    #: What the generator needs: {"mode": "http", "http": {...}} or {"mode": "files", ...}.
    feed: dict[str, Any]
    server: ServerProcess | None = None  #: the loader's
    status_path: Path | None = None  #: the peer's

    def scrape(self) -> dict[str, float] | None:
        """The loader's /metrics (None for the peer, or if it failed: reported, not fatal)."""
        if self.server is None:
            return None
        try:
            with self.server.client(timeout=60.0) as http:
                return scrape(http)
        except Exception as exc:  # noqa: BLE001
            log(f"scrape of {self.variant.name} failed: {exc!r}")
            return None

    def exports(self) -> dict[str, str]:
        """The loader's trace, schedule (the trace's origin) and jobs exports, as JSON Lines."""
        assert self.server is not None
        with self.server.client(timeout=300.0) as http:
            trace = http.get("/v1/admin/trace")
            trace.raise_for_status()
            origin = trace.headers["X-Trace-Origin"]
            schedule = http.get("/v1/admin/schedule", params={"origin": origin})
            jobs = http.get("/v1/admin/jobs")
            schedule.raise_for_status()
            jobs.raise_for_status()
        headers = {k: trace.headers[k] for k in ("X-Loader-Job-Overhead", "X-Loader-Workers", "X-Loader-Policy")}
        return {"trace": trace.text, "schedule": schedule.text, "jobs": jobs.text, "origin": origin, "headers": headers}

    def peer_status(self) -> dict[str, Any] | None:
        return read_json(self.status_path) if self.status_path and self.status_path.exists() else None


@contextlib.contextmanager
def running_loader(variant: Variant, tables: list[str], workdir: Path, ready_timeout: float) -> Iterator[RunningSystem]:
    """``loader serve`` of the variant's code and environment: defaults except what a measurement
    needs (Spark ``local[2]``, no compaction or vacuum: they would rewrite the files the reader
    counts, bench tokens)."""
    tokens = [{"name": "bench-ops", "token": OPERATOR_TOKEN, "role": "operator"}]
    tokens.append({"name": "bench-producer", "token": PRODUCER_TOKEN, "role": "producer"})
    settings = {"spark": {"master": SPARK_MASTER}, "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0}}
    settings |= {"auth_tokens": tokens, "tables": [{"name": t, "schema": SCHEMA} for t in tables]}
    # PYTHONPATH first on the path: the variant's checkout (check_code_dir) is the code that runs.
    env = {k: None for k in os.environ if k.upper().startswith("LOADER_")} | {"PYTHONPATH": str(variant.code_dir)}
    with serve(workdir, settings, OPERATOR_TOKEN, env | variant.env, ready_timeout) as served:
        server, port, ready = served
        assert server.proc is not None
        feed = {"mode": "http", "http": {"host": "127.0.0.1", "port": port, "token": PRODUCER_TOKEN, "connections": 16}}
        roots = {t: workdir / "data" / "warehouse" / t for t in tables}
        yield RunningSystem(variant, server.proc, server.log_path, roots, ready, feed, server)


@contextlib.contextmanager
def running_peer(variant: Variant, tables: list[str], workdir: Path, ready_timeout: float) -> Iterator[RunningSystem]:
    peer, status_path = workdir / "peer", workdir / "peer-status.json"
    landing = [peer / "landing" / t for t in tables]
    for directory in landing:
        directory.mkdir(parents=True)
    out = {t: peer / "out" / t for t in tables}
    spec = {
        "master": SPARK_MASTER,
        "trigger": "1 second",
        "conf": variant.conf,
        "status": str(status_path),
        "tables": [[t, str(landing[k]), str(peer / "checkpoint" / t), str(out[t])] for k, t in enumerate(tables)],
    }
    began = time.monotonic()
    proc = spawn(["benchmarks.freshness_at_scale.processes", "peer"], workdir, "peer", spec)
    try:

        def running() -> bool:
            return status_path.exists() and read_json(status_path)["phase"] == "running"

        wait_until(running, proc, ready_timeout, "the peer did not start its queries", workdir / "peer.log")
        feed = {"mode": "files", "files": {"landing": [str(p) for p in landing], "staging": str(peer / "staging")}}
        ready = time.monotonic() - began
        yield RunningSystem(variant, proc, workdir / "peer.log", out, ready, feed, status_path=status_path)
    finally:
        stop_group(proc, grace=60.0)


#: Seconds for a system to start, and for every table's first update to be visible.
TIMEOUT = 1800.0


def _sleep_until(t: float) -> None:
    while (wait := t - time.time()) > 0:
        time.sleep(min(wait, 1.0))


def produce(
    system: RunningSystem, workload: Workload, events: list[list[Any]], workdir: Path, tag: str, lead: float
) -> tuple[subprocess.Popen[bytes], Path, float]:
    """Start the producer process for ``events``: the process, its output file and the
    schedule's start (Unix time), fixed by the producer once it is set up."""
    out, ready = workdir / f"{tag}-out.json", workdir / f"{tag}-ready.json"
    spec = system.feed | {"tables": workload.table_names(), "rows": workload.rows_per_update, "lead": lead}
    spec |= {"ready": str(ready), "events": events, "out": str(out)}
    proc = spawn(["benchmarks.freshness_at_scale.processes", "producer"], workdir, tag, spec)
    wait_until(ready.exists, proc, 120, "the producer did not start", workdir / f"{tag}.log")
    return proc, out, float(read_json(ready)["start_at"])


def wait_primed(system: RunningSystem, timeout: float) -> float:
    """Seconds until every table's log holds a commit that added data."""
    began = time.monotonic()
    logs = {name: follower(system.variant.log_kind, root, time.time) for name, root in system.roots.items()}

    def primed() -> bool:
        for name in list(logs):
            if any(commit.added for commit in logs[name].poll()):
                del logs[name]
        return not logs

    what = f"{system.variant.name}: not every table's first update visible"
    wait_until(primed, system.proc, timeout, what, system.log_path)
    return time.monotonic() - began


def run_cell(variant: Variant, workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, one system under one workload, from start to read-back: raw records
    and timings (``analyze`` computes the figures).

    Start the system (ready time); prime one update per table and wait until every table's
    commit log shows it (systems warm, data visible); start the outside reader, then the
    producer with the seeded schedule; take CPU (and the loader's /metrics) at the window's
    ends; hand the reader every acknowledged update id to drain; stop the system and, for
    Delta, count rows and update ids once more through ``deltalake``.
    """
    names = workload.table_names()
    tag = f"[{workload.name}] {variant.name}"
    record: dict[str, Any] = {"variant": variant.to_json(), "workload": asdict(workload)}
    with tempfile.TemporaryDirectory(prefix=f"{workload.tables}-{variant.name}-", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp)
        with (running_peer if variant.kind == "peer" else running_loader)(variant, names, workdir, TIMEOUT) as system:
            record["ready_seconds"] = system.ready_seconds
            log(f"{tag}: ready in {system.ready_seconds:.1f} s; priming")
            proc, out, _ = produce(system, workload, priming(workload), workdir, "prime", lead=0.0)
            wait_exit(proc, TIMEOUT, "the priming producer", workdir / "prime.log")
            record["priming"] = read_json(out)
            record["prime_seconds"] = wait_primed(system, TIMEOUT)
            log(f"{tag}: primed in {record['prime_seconds']:.1f} s")

            ready_file, control = workdir / "reader-ready.json", workdir / "reader-control.json"
            reader_spec = {"kind": variant.log_kind, "tables": {t: str(root) for t, root in system.roots.items()}}
            reader_spec |= {"column": UPDATE_ID, "interval": args.poll, "control": str(control)}
            reader_spec |= {"ready": str(ready_file), "out": str(workdir / "reader-out.json")}
            reader = spawn(["benchmarks.freshness_at_scale.processes", "reader"], workdir, "reader", reader_spec)
            producer = None
            try:
                wait_until(ready_file.exists, reader, 120, "the reader did not start", workdir / "reader.log")
                events = schedule(workload)
                producer, produced, start_at = produce(system, workload, events, workdir, "produce", lead=0.5)
                w0, w1 = start_at + workload.warmup, start_at + workload.horizon
                record.update(start_at=start_at, window=[w0, w1])
                log(
                    f"{tag}: {len(events)} updates over {workload.horizon:.0f} s "
                    f"(window {workload.duration:.0f} s after {workload.warmup:.0f} s)"
                )
                _sleep_until(w0)
                record["cpu_w0"], record["metrics_w0"] = group_cpu(system.proc.pid), system.scrape()
                _sleep_until(w1)
                record["cpu_w1"], record["metrics_w1"] = group_cpu(system.proc.pid), system.scrape()
                wait_exit(producer, workload.horizon + 600, "the producer", workdir / "produce.log")
                record["produced"] = read_json(produced)
                expected: dict[str, list[int]] = {name: [] for name in names}
                for source in (record["priming"], record["produced"]):
                    for uid, table, _, arrival, *_ in source["records"]:
                        if arrival is not None:
                            expected[names[table]].append(uid)
                child.write(control, {"expected": expected, "deadline": time.time() + args.drain_timeout})
                log(f"{tag}: last arrival sent; draining")
                wait_exit(reader, args.drain_timeout + 900, "the reader", workdir / "reader.log")
                record["reader"] = read_json(workdir / "reader-out.json")
                record["alive_at_end"] = system.proc.poll() is None
                if getattr(args, "exports", False) and system.server is not None:
                    record["exports"] = system.exports()
            finally:
                for helper in (producer, reader):
                    if helper is not None:
                        stop_group(helper, grace=5.0)
        record["peer_status"] = system.peer_status()
        if variant.log_kind == "delta":  # rows and update ids again, independent of the reader's counting
            columns = {name: read_delta(root).column(UPDATE_ID).to_pylist() for name, root in system.roots.items()}
            record["deltalake_readback"] = {name: {"rows": len(c), "uids": len(set(c))} for name, c in columns.items()}
    return record
