"""Starting and stopping the systems under test and the benchmark's own processes.

Every process starts in a session of its own, so that stopping it takes its children
(Spark's JVM) along, and is stopped on the way out whatever happened. CPU seconds are
read per process group from /proc (``testing.service_server.group_cpu``): for the loader
its Python process and its JVM, for the peer the Python driver and its JVM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.freshness_at_scale.variants import Variant
from benchmarks.freshness_at_scale.workload import SCHEMA
from testing.report import REPO_ROOT, log
from testing.server_process import ServerProcess, free_port, write_config
from testing.service_server import OPERATOR_TOKEN, PRODUCER_TOKEN, scrape, stop

SPARK_MASTER = "local[2]"


def spawn_module(module: str, spec: dict[str, Any], workdir: Path, tag: str) -> subprocess.Popen[bytes]:
    """``python -m module SPEC``, the spec in ``workdir/<tag>.json``, its output in ``<tag>.log``.
    It imports this checkout (the venv's editable install may point elsewhere)."""
    spec_path = workdir / f"{tag}.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    with open(workdir / f"{tag}.log", "ab") as out:
        command = [sys.executable, "-m", module, str(spec_path)]
        return subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL of the whole process group after ``grace`` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)


def wait_exit(proc: subprocess.Popen[bytes], timeout: float, what: str, log_path: Path) -> None:
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace=5.0)
        raise RuntimeError(f"{what} still running after {timeout:.0f} s:\n{log_tail(log_path)}") from None
    if code != 0:
        raise RuntimeError(f"{what} failed (exit {code}):\n{log_tail(log_path)}")


def wait_until(
    done: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float, what: str, log_path: Path
) -> None:
    """Poll ``done`` until it holds; if ``proc`` exits or ``timeout`` passes first, stop it and say why."""
    deadline = time.monotonic() + timeout
    while not done():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc, grace=1.0)
            raise RuntimeError(f"{what} (after {timeout:.0f} s at most):\n{log_tail(log_path)}")
        time.sleep(0.05)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


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

    def alive(self) -> bool:
        return self.proc.poll() is None

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

    def peer_status(self) -> dict[str, Any] | None:
        return read_json(self.status_path) if self.status_path and self.status_path.exists() else None


@contextlib.contextmanager
def running_loader(variant: Variant, tables: list[str], workdir: Path, ready_timeout: float) -> Iterator[RunningSystem]:
    """``loader serve`` of the variant's code: defaults except what a measurement needs (loopback
    port, Spark ``local[2]``, no compaction or vacuum: they would rewrite the files the reader
    counts, bench tokens), then the variant's settings and environment."""
    port = free_port()
    settings = {
        "port": port,
        "data_dir": str(workdir / "data"),
        "spark": {"master": SPARK_MASTER},
        "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
        "auth_tokens": [
            {"name": "bench-ops", "token": OPERATOR_TOKEN, "role": "operator"},
            {"name": "bench-producer", "token": PRODUCER_TOKEN, "role": "producer"},
        ],
        "tables": [{"name": t, "schema": SCHEMA} for t in tables],
    }
    config = write_config(workdir / "loader.toml", settings | variant.settings)
    # PYTHONPATH first on the path: the variant's checkout (check_code_dir) is the code that runs.
    env = {k: None for k in os.environ if k.upper().startswith("LOADER_")} | {"PYTHONPATH": str(variant.code_dir)}
    server = ServerProcess(workdir, config, port, OPERATOR_TOKEN, env=env | variant.env)
    began = time.monotonic()
    server.start()
    try:
        if not server.wait_ready(timeout=ready_timeout):
            raise RuntimeError(f"loader serve ({variant.name}) exited during start-up:\n{server.log_tail()}")
        assert server.proc is not None
        http = {"host": "127.0.0.1", "port": port, "token": PRODUCER_TOKEN, "connections": 16}
        roots = {t: workdir / "data" / "warehouse" / t for t in tables}
        ready = time.monotonic() - began
        yield RunningSystem(variant, server.proc, server.log_path, roots, ready, {"mode": "http", "http": http}, server)
    finally:
        stop(server)


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
    proc = spawn_module("benchmarks.freshness_at_scale.peer", spec, workdir, "peer")
    try:

        def running() -> bool:
            return status_path.exists() and read_json(status_path)["phase"] == "running"

        wait_until(running, proc, ready_timeout, "the peer did not start its queries", workdir / "peer.log")
        feed = {"mode": "files", "files": {"landing": [str(p) for p in landing], "staging": str(peer / "staging")}}
        ready = time.monotonic() - began
        yield RunningSystem(variant, proc, workdir / "peer.log", out, ready, feed, status_path=status_path)
    finally:
        stop_group(proc, grace=60.0)


def running_system(
    variant: Variant, tables: list[str], workdir: Path, ready_timeout: float
) -> contextlib.AbstractContextManager[RunningSystem]:
    """The variant's system, ready to take updates; stopped on exit."""
    return (running_peer if variant.kind == "peer" else running_loader)(variant, tables, workdir, ready_timeout)
