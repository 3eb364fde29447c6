"""A real Prometheus for tests: Debian's ``prometheus`` package, run as a plain process on loopback.

``binaries()`` finds ``prometheus`` and ``promtool`` on PATH and, when they are missing and the
test runs as root on a machine with apt-get, installs the package first (no systemd here: the
package's service is never used, the tests start the binary themselves with their own config,
port and data directory). Anywhere else it skips with the reason.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.server_process import free_port

PACKAGE = "prometheus"
INSTALL_TIMEOUT = 900.0


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=300", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)


def binaries() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``, installing the Debian package when needed and allowed."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if found[0] and found[1]:
        return found[0], found[1]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("prometheus/promtool are not on PATH and this is not root with apt-get to install them")
    # One installer at a time (pytest-xdist workers share the machine).
    with open(Path(tempfile.gettempdir()) / "warehouse-loader-prometheus-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shutil.which("prometheus") and shutil.which("promtool")):
            install = ("install", "-y", "--no-install-recommends", PACKAGE)
            result = _apt(*install)
            if result.returncode != 0:  # a stale package list: refresh it once
                _apt("update")
                result = _apt(*install)
            if result.returncode != 0:
                pytest.fail(f"apt-get install {PACKAGE} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    found = shutil.which("prometheus"), shutil.which("promtool")
    if not (found[0] and found[1]):
        pytest.fail(f"apt-get installed {PACKAGE} but prometheus/promtool are still not on PATH")
    return found[0], found[1]


class PrometheusServer:
    """``prometheus`` on a free loopback port with a temporary TSDB; its log is shown when it fails."""

    def __init__(self, binary: str, config: Path, workdir: Path) -> None:
        self.binary = binary
        self.config = config
        self.workdir = workdir
        self.log_path = workdir / "prometheus.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.url, timeout=10.0)

    def __enter__(self) -> PrometheusServer:
        storage = self.workdir / "tsdb"
        storage.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={storage}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self.wait(self._ready, 30.0, "Prometheus did not become ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, f"Prometheus exited:\n{self.log()}"
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def wait(self, predicate: Any, timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{message} within {timeout:.0f} s; Prometheus log:\n{self.log()}")
            time.sleep(0.2)

    def api(self, path: str, **params: Any) -> Any:
        """``data`` of a Prometheus HTTP API answer; an error answer raises with Prometheus's message."""
        response = self.http.get(f"/api/v1/{path}", params=params)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) of ``expr`` now."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        assert data["resultType"] == "vector", f"{expr}: a {data['resultType']}, not an instant vector"
        return data["result"]
