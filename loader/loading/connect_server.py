"""A local Spark Connect server as a child process of the loader (issue 15, embedded default).

Why a server at all: with Spark Connect (``spark.remote = "sc://host:port"``) a Spark driver
is a server that thin gRPC clients share, so the loader's workers can be processes of their
own that all reach one Spark (local here, or a cluster's), instead of one driver JVM tied
to one Python process through py4j. The server's jar ships in the pyspark package, so the
embedded default needs nothing beyond ``./scripts/setup``.

What this module owns: the server's command line (``spark-submit --class
...SparkConnectServer spark-internal`` from the pyspark package, with the loader's Spark
settings, which for a server are fixed at start), waiting until it answers, stopping it,
and telling whether it is still alive so that its supervisor can start it again. The
child gets ``PR_SET_PDEATHSIG`` on Linux: a loader killed outright does not leave a JVM
holding the port and the cores.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loader.loading.spark import SparkUnreachable

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PORT_SETTING = "spark.connect.grpc.binding.port"
ADDRESS_SETTING = "spark.connect.grpc.binding.address"
#: Lines of the server's log quoted in an error when it does not come up.
LOG_TAIL_LINES = 30


class ConnectServerError(SparkUnreachable):
    """The local Spark Connect server did not start, or stopped answering."""


def spark_home() -> Path:
    """The pyspark package's directory: its ``bin/spark-submit`` and ``jars/`` are a Spark."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _child_setup(nice: int, idle: bool) -> None:  # pragma: no cover - runs in the child before exec
    """Its own process group (stop() signals the JVM and nothing else), a lower CPU priority
    (loads can wait a moment, acknowledgements should not), and on Linux SIGTERM when the
    loader process dies, however it dies."""
    os.setpgrp()
    if nice > 0:
        os.nice(nice)
    if idle and hasattr(os, "SCHED_IDLE"):
        # Every thread of the JVM inherits it: Spark runs on the CPU time that the service
        # (acknowledgements) and the producers leave. Nice alone does not do it: nice 10
        # weighs a tenth of the service's main thread per *thread*, and a busy JVM runs
        # many (measured: the service's main thread waited 2.9 s of 13 s for a core).
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


@dataclass
class ConnectServer:
    """One local Spark Connect server process (see the module docstring).

    ``conf`` is the whole Spark configuration of the server (master included as
    ``--master``); the gRPC address and port are added here.
    """

    master: str
    conf: Mapping[str, str]
    log_path: Path
    host: str = "127.0.0.1"
    port: int = 0
    app_name: str = "warehouse-loader"
    env: Mapping[str, str] = field(default_factory=dict)
    #: Nice increment of the server JVM (``[spark] driver_nice``).
    nice: int = 0
    #: Run it under SCHED_IDLE (``[spark] driver_idle``, Linux).
    idle: bool = False
    starts: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: start/stop/restart one at a time (the supervisor and a load's reconnect may meet).
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def command(self) -> list[str]:
        home = spark_home()
        cmd = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master]
        cmd += ["--name", self.app_name]
        settings = dict(self.conf)
        settings[PORT_SETTING] = str(self.port)
        settings[ADDRESS_SETTING] = self.host
        for key, value in sorted(settings.items()):
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, "spark-internal"]

    def environment(self) -> dict[str, str]:
        """The server's environment: this one, SPARK_HOME of the pyspark package, and the
        loader's interpreter as the executors' Python (multi-table jobs)."""
        env = {**os.environ, "SPARK_HOME": str(spark_home()), **self.env}
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        if self.master.startswith("local"):
            env.setdefault("SPARK_LOCAL_IP", self.host)
        return env

    def start(self, timeout: float = 180.0) -> str:
        """Start the server and wait until its port answers; returns its ``sc://`` URL.

        Raises ConnectServerError with the tail of the server's log when it exits first or
        does not answer in time (the log names the cause: Java, memory, a port in use).
        """
        with self._lock:
            return self._start(timeout)

    def _start(self, timeout: float) -> str:
        if self.alive():
            return self.url
        self._stopped.clear()
        if self.port == 0:
            self.port = free_port(self.host)
        env = self.environment()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=functools.partial(_child_setup, self.nice, self.idle),  # noqa: PLW1509
            )
        self.starts += 1
        log.info("starting a local Spark Connect server at %s (pid %d)", self.url, self._process.pid)
        self.wait_ready(timeout)
        return self.url

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise ConnectServerError(
                    f"the Spark Connect server exited (code {code}) before it answered on {self.url}; fix what its "
                    f"log {self.log_path} says (often a [spark] conf setting) and start again; the log ends:\n"
                    f"{self.log_tail()}"
                )
            if port_open(self.host, self.port):
                return
            if time.monotonic() > deadline:
                self._stop()
                raise ConnectServerError(
                    f"the Spark Connect server did not answer on {self.url} within {timeout:.0f} s; on a busy "
                    "machine raise [spark] connect_start_timeout_seconds, else fix what its log "
                    f"{self.log_path} says; the log ends:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def ensure_running(self, timeout: float = 180.0) -> bool:
        """Start the server again if it is not answering; True when it had to be."""
        with self._lock:
            if self.answering():
                return False
            log.warning("the local Spark Connect server is gone; starting it again")
            self._stop()
            self._start(timeout)
            return True

    def supervise(self, interval: float, timeout: float, on_restart: Callable[[], None] = lambda: None) -> None:
        """Watch the server from a daemon thread until ``stop``: one that exited is started
        again at once, not only when the next load finds it gone (an idle loader's Spark
        would otherwise stay down until data arrives, and ``/readyz`` would not say)."""

        def watch() -> None:
            while not self._stopped.wait(interval):
                if self.alive():
                    continue
                try:
                    if self.ensure_running(timeout):
                        on_restart()
                except Exception:  # tried again at the next interval
                    log.exception("could not start the local Spark Connect server again")

        threading.Thread(target=watch, name="spark-connect-supervisor", daemon=True).start()

    def answering(self) -> bool:
        """Alive and its port accepts connections (what a supervisor checks)."""
        return self.alive() and port_open(self.host, self.port)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the server stops its SparkContext), then SIGKILL after ``timeout``; the
        supervisor, if any, ends."""
        self._stopped.set()
        with self._lock:
            self._stop(timeout)

    def _stop(self, timeout: float = 20.0) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("the Spark Connect server did not stop in %.0f s; killing it", timeout)
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        self._process = None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
