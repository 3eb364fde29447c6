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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.freshness_at_scale.variants import Variant
from benchmarks.freshness_at_scale.workload import SCHEMA
from testing.report import REPO_ROOT
from testing.server_process import free_port, write_config
from testing.service_server import OPERATOR_TOKEN, PRODUCER_TOKEN, scrape

SPARK_MASTER = "local[2]"


# -- processes ----------------------------------------------------------------------------
def spawn(
    args: list[str], log_path: Path, *, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def harness_env() -> dict[str, str]:
    """The benchmark's own children import this checkout (the venv's editable install may
    point elsewhere)."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}


def spawn_module(module: str, spec: dict[str, Any], workdir: Path, tag: str) -> subprocess.Popen[bytes]:
    """``python -m module SPEC`` with the spec written to ``workdir/<tag>.json``."""
    spec_path = workdir / f"{tag}.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    return spawn([sys.executable, "-m", module, str(spec_path)], workdir / f"{tag}.log", env=harness_env())


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


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# -- systems --------------------------------------------------------------------------------
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
    base_url: str | None = None
    status_path: Path | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def scrape(self) -> dict[str, float] | None:
        """The loader's /metrics (None for the peer)."""
        if self.base_url is None:
            return None
        with httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}, timeout=60.0
        ) as http:
            return scrape(http)

    def peer_status(self) -> dict[str, Any] | None:
        if self.status_path is None or not self.status_path.exists():
            return None
        return json.loads(self.status_path.read_text(encoding="utf-8"))


def loader_settings(port: int, workdir: Path, tables: list[str], variant: Variant) -> dict[str, Any]:
    """Defaults except what a measurement needs: loopback port, Spark ``local[2]``, no
    compaction or vacuum (they would rewrite the files the reader counts), bench tokens."""
    settings: dict[str, Any] = {
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
    settings.update(variant.settings)
    return settings


def loader_env(variant: Variant) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LOADER_")}
    env.update(PYTHONPATH=str(variant.code_dir), PYTHONUNBUFFERED="1", LOADER_FAILPOINTS="")
    env.update(variant.env)
    return env


def imported_code(variant: Variant, workdir: Path) -> str:
    """Where ``loader`` is imported from under the variant's environment (must be its code)."""
    out = subprocess.run(
        [sys.executable, "-c", "import loader, cli; print(loader.__file__)"],
        cwd=workdir,
        env=loader_env(variant),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"variant {variant.name!r}: cannot import the loader: {out.stderr[-2000:]}")
    path = out.stdout.strip()
    if not Path(path).resolve().is_relative_to(variant.code_dir):
        raise RuntimeError(f"variant {variant.name!r} imports {path}, not code from {variant.code_dir}")
    return path


@contextlib.contextmanager
def running_loader(variant: Variant, tables: list[str], workdir: Path, ready_timeout: float) -> Iterator[RunningSystem]:
    port = free_port()
    config = write_config(workdir / "loader.toml", loader_settings(port, workdir, tables, variant))
    imported = imported_code(variant, workdir)
    log_path = workdir / "loader.log"
    began = time.monotonic()
    proc = spawn(
        [sys.executable, "-m", "cli", "serve", "--config", str(config)], log_path, env=loader_env(variant), cwd=workdir
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}, timeout=5.0) as http:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"loader serve ({variant.name}) exited during start-up:\n{log_tail(log_path)}")
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/readyz").status_code == 200:
                        break
                if time.monotonic() - began > ready_timeout:
                    raise RuntimeError(f"loader serve ({variant.name}) not ready after {ready_timeout:.0f} s")
                time.sleep(0.2)
        warehouse = workdir / "data" / "warehouse"
        yield RunningSystem(
            variant=variant,
            proc=proc,
            log_path=log_path,
            roots={t: warehouse / t for t in tables},
            ready_seconds=time.monotonic() - began,
            feed={
                "mode": "http",
                "http": {"host": "127.0.0.1", "port": port, "token": PRODUCER_TOKEN, "connections": 16},
            },
            base_url=base,
            details={"imported": imported, "config": str(config)},
        )
    finally:
        stop_group(proc, grace=60.0)


@contextlib.contextmanager
def running_peer(variant: Variant, tables: list[str], workdir: Path, ready_timeout: float) -> Iterator[RunningSystem]:
    base = workdir / "peer"
    landing = {t: base / "landing" / t for t in tables}
    for directory in landing.values():
        directory.mkdir(parents=True)
    out = {t: base / "out" / t for t in tables}
    status_path = workdir / "peer-status.json"
    spec = {
        "master": SPARK_MASTER,
        "trigger": "1 second",
        "conf": variant.conf,
        "status": str(status_path),
        "tables": [[t, str(landing[t]), str(base / "checkpoint" / t), str(out[t])] for t in tables],
    }
    began = time.monotonic()
    proc = spawn_module("benchmarks.freshness_at_scale.peer", spec, workdir, "peer")
    log_path = workdir / "peer.log"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the peer exited during start-up:\n{log_tail(log_path)}")
            status = json.loads(status_path.read_text(encoding="utf-8")) if status_path.exists() else {}
            if status.get("phase") == "running":
                break
            if time.monotonic() - began > ready_timeout:
                raise RuntimeError(
                    f"the peer started {status.get('started', 0)} of {len(tables)} queries in "
                    f"{ready_timeout:.0f} s; giving up"
                )
            time.sleep(0.2)
        yield RunningSystem(
            variant=variant,
            proc=proc,
            log_path=log_path,
            roots=out,
            ready_seconds=time.monotonic() - began,
            feed={
                "mode": "files",
                "files": {"landing": [str(landing[t]) for t in tables], "staging": str(base / "staging")},
            },
            status_path=status_path,
            details={"startup": status},
        )
    finally:
        stop_group(proc, grace=60.0)


def running_system(
    variant: Variant, tables: list[str], workdir: Path, ready_timeout: float
) -> contextlib.AbstractContextManager[RunningSystem]:
    """The variant's system, ready to take updates; stopped on exit."""
    if variant.kind == "peer":
        return running_peer(variant, tables, workdir, ready_timeout)
    return running_loader(variant, tables, workdir, ready_timeout)
