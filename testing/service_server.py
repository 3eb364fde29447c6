"""``loader serve`` under test for the service benchmark: start, observe, stop, clean up.

Reuses ``testing.server_process`` (the subprocess harness of the crash tests): a config
file from plain data, a free loopback port, its own process group so that stopping it
takes Spark's JVM along. Here also: the Prometheus text parsed into numbers, CPU time of
the server's process group (Python and JVM apart), and "wait until every acknowledged
update is in Delta".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from testing.report import REPO_ROOT
from testing.server_process import ServerProcess, free_port, write_config

OPERATOR_TOKEN = "bench-operator-token-000000000001"
PRODUCER_TOKEN = "bench-producer-token-000000000001"

#: A small schema: "a few small rows" per update.
SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "v", "type": "float64"},
        {"name": "s", "type": "string"},
    ]
}

SPARK_MASTER = "local[2]"
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def base_settings(port: int, data_dir: Path, *, policy: str, workers: int) -> dict[str, Any]:
    return {
        "port": port,
        "data_dir": str(data_dir),
        "workers": workers,
        "policy": policy,
        "writer": "delta-rs",
        "wal": {"durability": "fsync"},
        "spark": {"master": SPARK_MASTER},
        # No compaction or vacuum during a measurement; WAL truncation as deployed.
        "maintenance": {"wal_truncate_seconds": 10, "compact_seconds": 0, "vacuum_seconds": 0},
        "auth_tokens": [
            {"name": "bench-ops", "token": OPERATOR_TOKEN, "role": "operator"},
            {"name": "bench-producer", "token": PRODUCER_TOKEN, "role": "producer"},
        ],
    }


@dataclass
class Service:
    proc: ServerProcess
    port: int
    workdir: Path
    ready_seconds: float

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None
        return self.proc.proc.pid

    def client(self, timeout: float = 30.0) -> httpx.Client:
        """An operator client that never reuses a connection idle for 1 s: uvicorn closes idle
        keep-alive connections after 5 s, and a request racing that close gets a reset."""
        return httpx.Client(
            base_url=self.proc.base,
            headers={"Authorization": f"Bearer {self.proc.token}"},
            timeout=timeout,
            limits=httpx.Limits(keepalive_expiry=1.0),
        )


@contextlib.contextmanager
def running_service(
    *,
    tables: list[str],
    policy: str = "myopic",
    workers: int = 2,
    keep_dir: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> Iterator[Service]:
    """A ready ``loader serve`` subprocess with ``tables`` configured; always stopped on exit.

    ``extra`` replaces top-level settings of ``base_settings`` (e.g. ``spill``, ``spark``).
    """
    with tempfile.TemporaryDirectory(prefix="bench-service-", dir=keep_dir) as tmp:
        workdir = Path(tmp)
        port = free_port()
        settings = base_settings(port, workdir / "data", policy=policy, workers=workers)
        if tables:
            settings["tables"] = [{"name": t, "schema": SCHEMA} for t in tables]
        settings.update(extra or {})
        config = write_config(workdir / "loader.toml", settings)
        proc = ServerProcess(workdir, config, port, OPERATOR_TOKEN)
        began = time.monotonic()
        proc.start()
        try:
            if not proc.wait_ready(timeout=240):
                raise RuntimeError(f"loader serve exited during start-up:\n{proc.log_tail()}")
            yield Service(proc, port, workdir, time.monotonic() - began)
        finally:
            stop(proc)


def stop(proc: ServerProcess, timeout: float = 60.0) -> None:
    """SIGTERM (graceful: running batches finish), SIGKILL of the group if that takes too long."""
    if proc.proc is None:
        return
    if proc.alive:
        try:
            proc.terminate(timeout)
        except (TimeoutError, subprocess.TimeoutExpired):
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.proc.wait(30)


# -- observation ------------------------------------------------------------------------
def get(http: httpx.Client, path: str) -> httpx.Response:
    """GET with one retry: uvicorn closes idle keep-alive connections after 5 s, and a request
    racing that close on a pooled connection fails with a reset (GETs are safe to repeat)."""
    try:
        response = http.get(path)
    except httpx.TransportError:
        response = http.get(path)
    response.raise_for_status()
    return response


def scrape(http: httpx.Client) -> dict[str, float]:
    """/metrics as {'name{a="x",b="y"}': value} (labels sorted by name), plus 'sum:name' totals."""
    text = get(http, "/metrics").text
    out: dict[str, float] = {}
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, value = match.group(1), float(match.group(3))
        pairs = sorted(_LABEL.findall(match.group(2) or ""))
        labels = "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}" if pairs else ""
        out[name + labels] = value
        sums[name] = sums.get(name, 0.0) + value
    out.update({f"sum:{k}": v for k, v in sums.items()})
    return out


def wal_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Group commit between two scrapes: fsyncs/s, records per fsync, mean fsync time."""

    def d(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    fsyncs = d("loader_wal_fsync_duration_seconds_count")
    records = d("loader_wal_records_per_fsync_sum")
    groups = d("loader_wal_records_per_fsync_count")
    return {
        "fsyncs": fsyncs,
        "fsyncs_per_second": fsyncs / seconds if seconds > 0 else float("nan"),
        "records": records,
        "records_per_fsync": records / groups if groups else float("nan"),
        "mean_fsync_ms": 1e3 * d("loader_wal_fsync_duration_seconds_sum") / fsyncs if fsyncs else float("nan"),
        "batches_loaded": d("sum:loader_batches_total"),
        "updates_loaded": d("sum:loader_updates_loaded_total"),
    }


def _processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/<pid>/stat after the command name) of every process now:
    index 1 is the parent, 2 the process group, 11 and 12 user and system ticks."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:  # ended meanwhile
            continue
        yield int(entry), stat[stat.rfind(")") + 2 :].split()


def group_cpu(pgid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the server's process group: Python service vs JVM."""
    python = other = 0.0
    for pid, fields in _processes():
        if int(fields[2]) != pgid:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / _CLK_TCK
        if pid == pgid:
            python += seconds
        else:
            other += seconds
    return {"python": python, "jvm": other}


#: How a load worker process of the service shows in its command line.
WORKER_MODULE = "loader.loading.workers.process"
ACCEPTOR_MODULE = "api.acceptors.process"


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of a server and every live process it started, by kind:
    ``service`` (the server process itself), ``workers`` (its load worker processes),
    ``acceptors`` (its HTTP acceptor processes, api/acceptors/) and ``spark`` (the Spark
    Connect server's or the driver's JVM and their Python helpers).

    By parentage, not process group: in connect mode the workers and the Spark server run in
    process groups of their own."""
    parent: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for pid, fields in _processes():
        parent[pid] = int(fields[1])
        seconds[pid] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    out = {"service": seconds.get(root, 0.0), "workers": 0.0, "acceptors": 0.0, "spark": 0.0}
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    stack = [(child, None) for child in children.get(root, [])]
    while stack:
        pid, kind = stack.pop()
        if kind is None:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                command = b""
            kind = (
                "workers"
                if WORKER_MODULE.encode() in command
                else "acceptors"
                if ACCEPTOR_MODULE.encode() in command
                else "spark"
            )
        out[kind] += seconds.get(pid, 0.0)
        stack.extend((child, kind) for child in children.get(pid, []))
    return out


def group_rss(pgid: int) -> dict[str, int]:
    """Resident bytes (VmRSS) of the server's process group: the Python service (the group
    leader, where pending payloads live) and the rest (Spark's JVM and its helpers)."""
    python = other = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
            if int(stat[stat.rfind(")") + 2 :].split()[2]) != pgid:
                continue
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as handle:
                rss = next((int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:")), 0)
        except (OSError, ValueError):  # the process ended meanwhile
            continue
        if int(entry) == pgid:
            python += rss
        else:
            other += rss
    return {"python": python, "jvm": other}


def cpu_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores used by the service's Python process and by the JVM (and its helpers)."""
    return {k + "_cores": (after[k] - before[k]) / seconds for k in before}


def table_status(http: httpx.Client) -> list[dict[str, Any]]:
    return get(http, "/v1/tables").json()["tables"]


def wait_loaded(http: httpx.Client, timeout: float, poll: float = 0.1) -> tuple[bool, float]:
    """Wait until every table's last acknowledged update is loaded: (done, seconds waited)."""
    began = time.monotonic()
    while True:
        tables = table_status(http)
        if all(t["last_loaded_sequence"] >= t["last_sequence"] for t in tables):
            return True, time.monotonic() - began
        if time.monotonic() - began > timeout:
            return False, time.monotonic() - began
        time.sleep(poll)


# -- child processes (load generator, commit probe) ---------------------------------------
@contextlib.contextmanager
def _spec_file(spec: dict[str, Any]) -> Iterator[Path]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="bench-spec-", delete=False) as handle:
        json.dump(spec, handle)
    path = Path(handle.name)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def run_child(module: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``python -m module SPEC`` in its own process group; its result as JSON: the file named
    by the spec's ``result_path`` (set here; children that know it write there), else its
    last stdout line.

    Killed with its whole group on timeout or error, so no JVM or generator outlives it.
    """
    result = Path(tempfile.mkdtemp(prefix="bench-result-")) / "result.json"
    spec = dict(spec, result_path=str(result))
    with _spec_file(spec) as path:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(path)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
    try:
        if proc.returncode == 0 and result.exists():
            return json.loads(result.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    finally:
        result.unlink(missing_ok=True)
        result.parent.rmdir()
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"{module} failed (exit {proc.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]
