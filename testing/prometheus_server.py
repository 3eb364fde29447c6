"""A real Prometheus for tests: Debian's ``prometheus`` package, run as a plain process on loopback.

``binaries()`` finds ``prometheus`` and ``promtool`` on PATH and, when they are missing and the
test runs as root on a machine with apt-get, installs the package first (no systemd here: the
package's service is never used, the tests start the binary themselves with their own config,
port and data directory). Anywhere else it skips with the reason.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from testing.debian_packages import commands
from testing.server_process import free_port

PACKAGE = "prometheus"


def binaries() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``, installing the Debian package when needed and allowed."""
    prometheus, promtool = commands(("prometheus", "promtool"), (PACKAGE,))
    return prometheus, promtool


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
