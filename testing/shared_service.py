"""One running ``loader serve`` shared by the system tests of a test process.

Why: a ``loader serve`` start costs its Python imports, its load worker processes and their
Spark sessions, several seconds each on 2 cores, and most system tests only need *a*
running service to send updates to and read tables from. Those tests share this one (a
fixture of tests/system/conftest.py, one per pytest-xdist process), each with tables of
its own: ``Tables`` gives every name a test uses a prefix of the test's own, registers
the tables over the API, and before the test ends waits until none of them is loading or
pending, so that nothing a test started is still logging when the next one runs (the log
guard reads the shared log per test, testing/log_guard.py). Tests that kill, restart or
reconfigure a service start their own (testing/server_process.py).
"""

from __future__ import annotations

import copy
import itertools
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from testing.server_process import ServerProcess, free_port, write_config

OPERATOR = "shared-service-operator-token-01"
PRODUCER = "shared-service-producer-token-01"

_serial = itertools.count(1)


def start_shared_service(workdir: Path, spark_remote: str, **settings: Any) -> ServerProcess:
    """``loader serve`` with two load worker processes over the Spark Connect server at
    ``spark_remote`` (the test process's own, tests/spark_fixtures.py), no compaction or
    vacuum, and no table: the tests register theirs."""
    config = {
        "port": (port := free_port()),
        "data_dir": str(workdir / "data"),
        "workers": 2,
        "spark": {"master": "local[2]", "mode": "connect", "remote": spark_remote},
        "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
        "auth_tokens": [
            {"name": "ops", "token": OPERATOR, "role": "operator"},
            {"name": "feeds", "token": PRODUCER, "role": "producer"},
        ],
        **settings,
    }
    server = ServerProcess(workdir, write_config(workdir / "loader.toml", config), port, OPERATOR)
    server.start()
    if not server.wait_ready():
        raise RuntimeError(f"the shared service did not start:\n{server.log_tail()}")
    return server


class Tables:
    """One test's tables on the shared service: ``name("orders")`` is the name it has there."""

    def __init__(self, server: ServerProcess, test_name: str) -> None:
        self.server = server
        stem = re.sub(r"[^a-z0-9]+", "_", test_name.lower()).strip("_")[:24].strip("_")
        self.prefix = f"t{next(_serial)}_{stem}_"
        self.names: dict[str, str] = {}

    @property
    def base(self) -> str:
        return self.server.base

    @property
    def data(self) -> Path:
        return self.server.workdir / "data"

    @property
    def landing(self) -> Path:
        """The service's landing directory; a test names its files with ``name()`` too."""
        path = self.data / "landing"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def name(self, short: str) -> str:
        return self.names.get(short) or self.prefix + short

    def path(self, short: str) -> Path:
        """The table's Delta directory."""
        return self.data / "warehouse" / self.name(short)

    def client(self, timeout: float = 30.0, token: str = OPERATOR) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def register(self, tables: Iterable[dict[str, Any]]) -> None:
        """Register each table (a ``[[tables]]`` entry as plain data) under this test's name
        for it; a ``views`` list would name them the same way."""
        with self.client(timeout=120) as http:
            for table in tables:
                declared = copy.deepcopy(table)
                declared["name"] = self.name(table["name"])
                self.names[table["name"]] = declared["name"]
                answer = http.post("/v1/admin/tables", json=declared)
                if answer.status_code not in (200, 201):
                    raise AssertionError(f"registering {declared['name']}: {answer.status_code} {answer.text}")

    def quarantined(self, http: httpx.Client) -> list[dict[str, Any]]:
        """The quarantine entries of this test's tables only."""
        mine = set(self.names.values())
        return [b for b in http.get("/v1/admin/quarantine").json()["batches"] if b["table"] in mine]

    def settle(self, timeout: float = 180.0) -> None:
        """Wait until none of this test's tables has an update pending or a load running."""
        deadline = time.monotonic() + timeout
        with self.client() as http:
            for name in self.names.values():
                while True:
                    status = http.get(f"/v1/tables/{name}").json()
                    if status["pending_updates"] == 0 and not status["running"]:
                        break
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{name} still loading after {timeout:.0f} s: {status}")
                    time.sleep(0.05)
