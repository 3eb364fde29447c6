"""A Spark standalone cluster on this machine (one master, one worker) from the pyspark package,
for the cluster test (tests/system/test_cluster.py) and the load-cost benchmark.

Both daemons are started with ``$SPARK_HOME/bin/spark-class`` (SPARK_HOME = the installed
pyspark package), on loopback, in their own process groups, with their work and log
directories in a temporary directory; ``stop`` ends both groups (SIGTERM, then SIGKILL).
A cluster that does not come up raises ``ClusterError`` with the daemons' last log lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from loader.loading.connect_server import free_port, spark_home

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterError(RuntimeError):
    """The standalone cluster could not be started; the message says what and shows the logs."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class StandaloneCluster:
    """``with StandaloneCluster(cores=2) as cluster: ... cluster.master_url ...``"""

    def __init__(self, cores: int = 2, memory: str = "1g", start_timeout: float = 90.0) -> None:
        self.cores, self.memory, self.start_timeout = cores, memory, start_timeout
        self.home = spark_home()
        self.directory = Path(tempfile.mkdtemp(prefix="spark-cluster-"))
        self.port, self.master_ui, self.worker_ui = free_port(), free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        script = self.home / "bin" / "spark-class"
        if not script.exists():
            raise ClusterError(f"{script} is missing: the installed pyspark package has no spark-class")
        env = dict(os.environ)
        env |= {
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.directory / "logs"),
            "SPARK_WORKER_DIR": str(self.directory / "work"),
            "SPARK_NO_DAEMONIZE": "1",
        }
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 (the child keeps writing it)
        proc = subprocess.Popen(
            ["bash", str(script), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        self._procs.append(proc)
        return proc

    def state(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui}/json/", timeout=2) as answer:
                return json.loads(answer.read())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return None

    def _wait(self, what: str, ready: Callable[[dict[str, Any]], bool]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for proc, name in zip(self._procs, ("master", "worker"), strict=False):
                if proc.poll() is not None:
                    raise ClusterError(
                        f"the standalone {name} exited with status {proc.returncode} while starting; "
                        f"its log:\n{_tail(self.directory / f'{name}.log')}"
                    )
            state = self.state()
            if state is not None and ready(state):
                return
            time.sleep(0.25)
        logs = "\n".join(f"--- {n}:\n{_tail(self.directory / f'{n}.log')}" for n in ("master", "worker"))
        raise ClusterError(f"the standalone cluster did not {what} within {self.start_timeout:.0f} s\n{logs}")

    def start(self) -> StandaloneCluster:
        self._spawn(
            "master",
            MASTER_CLASS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.master_ui),
        )
        self._wait("start its master", lambda s: s.get("status") == "ALIVE")
        self._spawn(
            "worker",
            WORKER_CLASS,
            self.master_url,
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--webui-port",
            str(self.worker_ui),
            "--work-dir",
            str(self.directory / "work"),
        )
        self._wait("register its worker", lambda s: int(s.get("aliveworkers", 0)) >= 1)
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 15
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self._procs.clear()

    def close(self) -> None:
        """Stop the daemons and remove their directory."""
        import shutil

        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
