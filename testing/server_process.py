"""``loader serve`` as a real subprocess on loopback, for crash and black-box tests.

Each start gets its own log file (shown when something goes wrong) and its own process
group, so a kill takes Spark's JVM with it, as a crash of the machine's service would.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from testing.log_guard import watch_log

ROOT = Path(__file__).resolve().parent.parent

#: What a start logs of the processes it starts (loader/loading/connect_server.py, the
#: service's own Spark Connect server; loader/loading/workers/pool.py, a load worker: its slot).
SPARK_SERVER_LINE = re.compile(r"starting a local Spark Connect server at (sc://\S+) \(pid (\d+)\)")
WORKER_LINE = re.compile(r"load worker (\d+) started \(pid (\d+)")


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    """Whether the process ends within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def until_gone(pid: int, seconds: float, what: str = "the Spark Connect server") -> None:
    """Wait, with a deadline, until a process the service started has ended."""
    assert gone_within(pid, seconds), f"{what} (pid {pid}) is still running"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A local port that refuses connections for as long as it is held.

    ``free_port()`` is only free when asked: on a busy suite another process (a Spark
    driver, a server of the other xdist worker) may listen on it next, and a Spark Connect
    client then waits 20 s for a gRPC handshake that never comes, where a refusal is at once.
    A bound socket that never listens refuses, and nobody else can take its port.
    """
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def toml_key(key: str) -> str:
    """A bare key when it is one, else quoted (``"spark.executor.memory"`` is one key, not three)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_value(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return repr(value)


def write_config(path: Path, settings: dict[str, Any]) -> Path:
    """A TOML config from plain data: scalars first, then tables and arrays of tables."""
    lines = [f"{k} = {toml_value(v)}" for k, v in settings.items() if not isinstance(v, (dict, list))]
    lines += [
        f"{k} = {toml_value(v)}"
        for k, v in settings.items()
        if isinstance(v, list) and not (v and isinstance(v[0], dict))
    ]
    for key, value in settings.items():
        if isinstance(value, dict):
            lines.append(f"[{key}]")
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                lines.append(f"[[{key}]]")
                lines += [f"{k} = {toml_value(v)}" for k, v in item.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def remote_service(tmp_path: Path, spark_remote: str, token: str) -> ServerProcess:
    """A ``loader serve`` (not started) whose loads run in a worker process over an existing
    Spark Connect server (a test process's), with one operator token and no compaction or
    vacuum: for tests that kill and restart a service where neither the Spark server nor
    loads running side by side are the subject (one worker: each start ~1.2 CPU-s less)."""
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": 1,
            "spark": {"master": "local[2]", "mode": "connect", "remote": spark_remote},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": token, "role": "operator"}],
        },
    )
    return ServerProcess(tmp_path, config, port, token)


class ServerProcess:
    """``args``: the ``loader`` command line instead of ``serve --config <config>`` (the
    demo, say); ``env``: variables to add or, with None, to remove."""

    def __init__(
        self,
        workdir: Path,
        config: Path | None,
        port: int,
        token: str,
        *,
        args: list[str] | None = None,
        env: dict[str, str | None] | None = None,
    ) -> None:
        self.workdir = workdir
        self.config = config
        self.args = args if args is not None else ["serve", "--config", str(config)]
        self.extra_env = env or {}
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_path = workdir / "server-0.log"

    def start(self, failpoints: str = "", worker_failpoints: str = "") -> None:
        """``failpoints``: the service's ``LOADER_FAILPOINTS``; ``worker_failpoints``: its
        first load worker process's (``LOADER_WORKER_FAILPOINTS``, loader/core/failpoints.py)."""
        self.starts += 1
        self.log_path = self.workdir / f"server-{self.starts}.log"
        watch_log(self.log_path)  # an ERROR in it fails the test (testing/log_guard.py)
        env = dict(
            os.environ, LOADER_FAILPOINTS=failpoints, LOADER_WORKER_FAILPOINTS=worker_failpoints, PYTHONUNBUFFERED="1"
        )
        for name, value in self.extra_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", *self.args],
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """None while running; -9 after a SIGKILL (a failpoint or ``kill``)."""
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        """The whole log of the current (or last) start."""
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.token}"}, timeout=timeout)

    def until(self, predicate: Callable[[], Any], what: str, seconds: float = 180.0) -> None:
        """Poll ``predicate`` with a deadline; the failure says what was awaited, with the log's tail."""
        deadline = time.monotonic() + seconds
        while not predicate():
            assert time.monotonic() < deadline, f"{what} not reached within {seconds:.0f} s:\n{self.log_tail()}"
            time.sleep(0.2)

    def wait_ready(self, timeout: float = 180.0) -> bool:
        """True once /readyz answers 200; False if the process ended first (a failpoint fired)."""
        deadline = time.monotonic() + timeout
        with self.client(timeout=5.0) as http:
            while self.alive:
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/readyz").status_code == 200:
                        return True
                if time.monotonic() > deadline:
                    raise TimeoutError(f"server not ready after {timeout}s:\n{self.log_tail()}")
                time.sleep(0.1)
        return False

    def wait_exit(self, timeout: float = 120.0) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"server still running after {timeout}s:\n{self.log_tail()}") from None
        self._reap_group()
        return code

    def kill(self) -> None:
        """SIGKILL the service and its JVM at once (a crash, not a shutdown)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)

    def terminate(self, timeout: float = 120.0) -> int:
        """SIGTERM: the graceful shutdown an orchestrator asks for."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def _reap_group(self) -> None:
        # The JVM exits when its parent's pipe closes; make sure of it before a restart.
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
