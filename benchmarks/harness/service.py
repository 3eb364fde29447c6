"""What the live-service benchmarks share: processes of their own (each in a session of its own,
so that stopping it takes its children along), ``loader serve`` on a free loopback port, and the
intake workload driven by ``testing.loadgen``, observed around each run."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from testing import service_server as srv
from testing.observed_staleness import percentile
from testing.report import REPO_ROOT, log
from testing.server_process import ServerProcess, free_port, write_config

#: The intake workload: tables of ``srv.SCHEMA``, rows per update, closed-loop connections by
#: updates per request, the open loop's pool.
INTAKE_TABLES = [f"t{i:02d}" for i in range(8)]
ROWS_PER_UPDATE = 3
CONNECTIONS = {1: 16, 10: 8, 100: 4}
OPEN_CONNECTIONS = 32
WORKERS = 2


def spawn(args: list[str], workdir: Path, tag: str, spec: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
    """``python -m *args`` (and ``workdir/<tag>.json`` holding ``spec``), its output in ``<tag>.log``.
    It imports this checkout (the venv's editable install may point elsewhere)."""
    if spec is not None:
        (workdir / f"{tag}.json").write_text(json.dumps(spec), encoding="utf-8")
        args = [*args, str(workdir / f"{tag}.json")]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    with open(workdir / f"{tag}.log", "ab") as out:
        command, options = [sys.executable, "-m", *args], {"cwd": REPO_ROOT, "env": env, "start_new_session": True}
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **options)


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
    wait_until(lambda: proc.poll() is not None, proc, timeout, f"{what} still running", log_path)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{log_tail(log_path)}")


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


@contextlib.contextmanager
def serve(
    workdir: Path, settings: dict[str, Any], token: str, env: dict[str, str | None] | None = None, timeout: float = 240
) -> Iterator[tuple[ServerProcess, int, float]]:
    """``loader serve`` with ``settings`` (port and ``workdir/data`` added), ready: it, its port and the
    seconds it took to start; stopped on exit (SIGTERM, then SIGKILL of its group)."""
    port = free_port()
    config = write_config(workdir / "loader.toml", {"port": port, "data_dir": str(workdir / "data"), **settings})
    server = ServerProcess(workdir, config, port, token, env=env)
    began = time.monotonic()
    server.start()
    try:
        if not server.wait_ready(timeout=timeout):
            raise RuntimeError(f"loader serve exited during start-up:\n{server.log_tail()}")
        yield server, port, time.monotonic() - began
    finally:
        srv.stop(server)


def rows(first: int, n: int) -> list[dict[str, Any]]:
    return [{"id": k, "v": k * 0.5, "s": f"payload-{k % 1000:04d}"} for k in range(first, first + n)]


def requests_for(size: int, stride: int = ROWS_PER_UPDATE) -> list[dict[str, Any]]:
    """The generator's requests: one update per POST /v1/tables/{t}/updates (``size`` 1, each table
    in turn, the i-th's rows from ``i * stride``), or ``size`` per POST /v1/updates."""
    n = ROWS_PER_UPDATE
    if size == 1:
        bodies = [(f"/v1/tables/{t}/updates", {"rows": rows(i * stride, n)}) for i, t in enumerate(INTAKE_TABLES)]
    else:
        items = [{"table": INTAKE_TABLES[k % len(INTAKE_TABLES)], "rows": rows(k * n, n)} for k in range(size)]
        bodies = [("/v1/updates", {"updates": items})]
    return [{"path": p, "updates": size, "body": json.dumps(b, separators=(",", ":"))} for p, b in bodies]


def generate(port: int, spec: dict[str, Any], timeout: float, observe: Callable[[], Any]) -> tuple[Any, ...]:
    """One ``testing.loadgen`` run at ``port`` with ``observe()`` just before and after it: its output,
    the figures every caller keeps, the two observations, the seconds between them, the latencies (ms)."""
    spec = dict(spec, host="127.0.0.1", port=port, token=srv.PRODUCER_TOKEN, start_at=time.time() + 1.0)
    before, t0 = observe(), time.time()
    out = srv.run_child("testing.loadgen", spec, timeout)
    after, seconds = observe(), time.time() - t0
    latencies = [x * 1e3 for x in out["latencies"]] + [math.inf] * out.get("unanswered", 0)
    window, cpu = out["window_seconds"], out["cpu_seconds"]
    record = {"connections": spec["connections"], "errors": out["errors"], "generator_cores": cpu / seconds}
    record |= {"requests_per_second": out["ok"] / window, "updates_per_second": out["updates"] / window}
    record |= {f"p{p}_ms": percentile(latencies, q) for p, q in (("50", 0.5), ("99", 0.99), ("999", 0.999))}
    if spec["mode"] == "open":
        answered = out["done_in_window"] / window
        record.update(rate=spec["rate"], unanswered=out["unanswered"], answered_in_window_per_second=answered)
    log(
        f"[{spec['mode']} loop, {spec['requests'][0]['updates']}/request {spec.get('rate', '')}] "
        f"{record['requests_per_second']:,.0f} requests/s, p50 {record['p50_ms']:.1f} ms, p99 {record['p99_ms']:.1f} ms"
    )
    return out, record, before, after, seconds, latencies


def pause(service: srv.Service, paused: bool) -> None:
    """Pause (or resume) loading of every intake table."""
    with service.client() as http:
        for table in INTAKE_TABLES:
            http.post(f"/v1/admin/tables/{table}/{'pause' if paused else 'resume'}").raise_for_status()
