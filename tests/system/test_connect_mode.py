"""A real ``loader serve`` with ``[spark] mode = "connect"`` and no ``remote``: the loader
starts a local Spark Connect server from the pyspark package and P load worker processes,
loads through them, stops them on shutdown, and a loader killed outright leaves neither
running. A server that dies while the loader runs is started again and the loads resume; a
worker process that dies mid-batch is replaced and its batch loaded exactly once (issue 15).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.prom import sample_value
from testing.server_process import (
    SPARK_SERVER_LINE,
    WORKER_LINE,
    ServerProcess,
    free_port,
    running,
    until_gone,
    write_config,
)
from testing.tables import read_delta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "connect-test-operator-token-01"
#: The three tables every test here loads (``_load``).
TABLES = [
    {
        "name": name,
        "schema": {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "note", "type": "string"}]},
    }
    for name in ("a", "b", "c")
]
#: A latest table (one row per id, the last value sent wins), loaded by the worker processes too.
LATEST = {
    "name": "latest",
    "schema": {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "note", "type": "string"}]},
    "mode": "latest",
    "key": ["id"],
}
#: A join view whose engine is Spark: each of its loads one job in a load worker process.
VIEW = {
    "name": "a_latest",
    "engine": "spark",
    "inputs": [{"table": "a"}, {"table": "latest", "alias": "l"}],
    "on": ["a.id = l.id"],
    "select": ["a.id", "a.note", "l.note AS latest_note"],
}


def _server_pid(proc: ServerProcess) -> int:
    match = SPARK_SERVER_LINE.search(proc.log_text())
    assert match, f"the loader did not say it started a Spark Connect server:\n{proc.log_tail()}"
    return int(match.group(2))


def _worker_pids(proc: ServerProcess, slot: int | None = None) -> list[int]:
    """The pids of the load workers started, in order (of one slot)."""
    found = WORKER_LINE.finditer(proc.log_text())
    return [int(m.group(2)) for m in found if slot is None or int(m.group(1)) == slot]


def _scheduling(pid: int) -> tuple[int, int]:
    """The process's scheduling policy and nice value (/proc/<pid>/stat fields 41 and 19)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[38]), int(fields[16])


@pytest.fixture
def workers() -> int:
    return 2


@pytest.fixture
def own_spark_server() -> bool:
    """Whether the service starts its own Spark Connect server (what most tests here are
    about), or uses the test process's (tests/spark_fixtures.py), a JVM start less."""
    return True


@pytest.fixture
def server(
    tmp_path: Path, workers: int, own_spark_server: bool, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    remote = {} if own_spark_server else {"remote": request.getfixturevalue("connect_server").url}
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": workers,
            "spark": {"master": "local[2]", "mode": "connect", **remote},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": [*TABLES, LATEST],
            "views": [VIEW],
        },
    )
    proc = ServerProcess(tmp_path, config, port, TOKEN)
    yield proc  # not started: each test starts it as it needs
    if proc.alive:
        proc.kill()


def _load(proc: ServerProcess, first: int, count: int) -> None:
    with proc.client(timeout=60) as http:
        for k in range(first, first + count):
            for table in ("a", "b", "c"):
                body = json.dumps({"rows": [{"id": k * 10 + i, "note": f"{table}{k}"} for i in range(10)]})
                r = http.post(f"/v1/tables/{table}/updates", content=body, headers={"Content-Type": "application/json"})
                assert r.status_code == 202, r.text
        deadline = time.monotonic() + 120
        for table in ("a", "b", "c"):
            last = http.get(f"/v1/tables/{table}").json()["last_sequence"]
            while http.get(f"/v1/tables/{table}").json()["last_loaded_sequence"] < last:
                assert time.monotonic() < deadline, proc.log_tail()
                time.sleep(0.1)


def _view(path: Path) -> list[tuple]:
    if not (path / "_delta_log").is_dir():
        return []
    rows = read_delta(path).to_pylist()
    return sorted((r["id"], r["note"], r["latest_note"], r["__loader_count"]) for r in rows)


@pytest.mark.allow_errors(
    r"failed \(attempt \d\): (SparkConnectGrpcException|SparkConnectException: \[NO_ACTIVE_SESSION\])"
)
def test_the_loader_runs_its_own_spark_connect_server_restarts_it_and_takes_it_along(server: ServerProcess) -> None:
    """One test for the server's whole life (each start of it is a JVM's): loads of every
    kind over it; its death mid-run (intake stays open, /readyz names the outage, loads back
    off and resume on a new server; nothing quarantined, lost or loaded twice); stopped on
    shutdown; taken along by a crash of the loader."""
    server.start()
    assert server.wait_ready()
    first = _server_pid(server)
    workers = _worker_pids(server)
    assert running(first) and len(workers) == 2 and all(map(running, workers)), server.log_tail()
    # Spark runs on the CPU time acknowledgements leave: SCHED_IDLE (policy 5), nicer too
    # ([spark] driver_idle, driver_nice 10 by default).
    assert _scheduling(first) == (5, 10)
    _load(server, 0, 20)  # several tables due at once: multi-table jobs over Connect too
    with server.client(timeout=60) as http:  # a latest table: upserts from the worker processes
        for k in range(12):
            rows = [{"id": i, "note": f"v{k}"} for i in range(5)]
            assert http.post("/v1/tables/latest/updates", json={"rows": rows}).status_code == 202
        deadline = time.monotonic() + 120
        while http.get("/v1/tables/latest").json()["last_loaded_sequence"] < 12:
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.1)
    latest = read_delta(server.workdir / "data" / "warehouse" / "latest").to_pylist()
    assert sorted((r["id"], r["note"]) for r in latest) == [(i, "v11") for i in range(5)]
    # The Spark view caught up with both inputs: its loads ran as jobs in the workers.
    view = server.workdir / "data" / "warehouse" / VIEW["name"]
    want = [(i, "a0", "v11", 1) for i in range(5)]
    with server.client(timeout=60) as http:
        deadline = time.monotonic() + 120
        while http.get(f"/v1/tables/{VIEW['name']}").json()["pending_updates"] or _view(view) != want:
            assert time.monotonic() < deadline, (_view(view), server.log_tail())
            time.sleep(0.2)
        assert http.get(f"/v1/admin/views/{VIEW['name']}").json()["executor"]["jobs"] >= 1

    # The server dies mid-run: intake does not need it, /readyz names the outage, and loads
    # resume on a new server.
    os.kill(first, 9)  # the server alone
    until_gone(first, 30)
    with server.client(timeout=60) as http:
        for k in range(20, 25):
            for table in ("a", "b", "c"):
                body = json.dumps({"rows": [{"id": k * 10 + i, "note": f"{table}{k}"} for i in range(10)]})
                r = http.post(f"/v1/tables/{table}/updates", content=body, headers={"Content-Type": "application/json"})
                assert r.status_code == 202, r.text
        deadline = time.monotonic() + 90
        while "spark" not in http.get("/readyz").json()["faults"]:
            assert time.monotonic() < deadline, f"/readyz never named the outage:\n{server.log_tail()}"
            time.sleep(0.05)
    _load(server, 25, 5)  # waits until everything acknowledged is loaded
    pids = [int(m.group(2)) for m in SPARK_SERVER_LINE.finditer(server.log_text())]
    assert len(pids) == 2 and pids[0] == first and running(pids[1]), server.log_tail()
    restarted = pids[1]
    assert _scheduling(restarted) == (5, 10)  # (a restart keeps the policy)
    with server.client() as http:
        assert http.get("/readyz").json()["faults"] == {}
        text = http.get("/metrics").text
        assert sample_value(text, "loader_spark_reachable") == 1
        assert sample_value(text, "loader_spark_server_restarts_total") == 1
        assert sample_value(text, "loader_load_processes") == 2
        assert sample_value(text, "loader_tables_quarantined_updates") == 0
    workers = list({int(m.group(1)): int(m.group(2)) for m in WORKER_LINE.finditer(server.log_text())}.values())
    assert server.terminate() == 0
    assert "stopped cleanly" in server.log_text()
    until_gone(restarted, 30)  # stopped on shutdown
    for pid in workers:
        until_gone(pid, 1, "a load worker")
    for table in ("a", "b", "c"):
        ids = read_delta(server.workdir / "data" / "warehouse" / table).column("id").to_pylist()
        assert sorted(ids) == list(range(300))

    # A crash of the loader takes its server along (PR_SET_PDEATHSIG), killed as soon as it
    # has started one, whatever the JVM's start has got to. (That a restart after a crash
    # loads on exactly once is the crash trials', whose every kill also checks that the load
    # workers went with the service; this start is only for the kill: the one above ends
    # cleanly, so that its coverage is recorded.)
    server.start()
    deadline = time.monotonic() + 180
    while not SPARK_SERVER_LINE.search(server.log_text()):
        assert server.alive and time.monotonic() < deadline, server.log_tail()
        time.sleep(0.05)
    third = _server_pid(server)
    assert third not in (first, restarted)
    assert server.proc is not None
    os.kill(server.proc.pid, 9)  # the loader alone: its server has a process group of its own
    server.proc.wait(30)
    until_gone(third, 60)


@pytest.mark.parametrize("own_spark_server", [False])  # a worker's death, not the server's
@pytest.mark.parametrize("workers", [1])  # one worker: the tables due meanwhile make the next job a group
@pytest.mark.parametrize("point", ["load.after-publish=2"])  # (the crash trial kills workers at every step)
@pytest.mark.allow_errors(r"failed \(attempt \d\): load worker \d \(pid \d+\) ended")
def test_a_load_worker_that_dies_mid_batch_is_replaced(server: ServerProcess, point: str) -> None:
    """The worker SIGKILLs itself at ``point`` (files in the table, not committed; or
    between two tables' commits of one job); the service starts another in its place and
    retries the batch: every row once, nothing quarantined."""
    server.start(worker_failpoints=point)
    assert server.wait_ready()
    _load(server, 0, 15)
    assert "its batch is retried and the worker started again" in server.log_text(), server.log_tail()
    dead, replacement = _worker_pids(server, slot=0)
    assert not running(dead) and running(replacement), server.log_tail()
    with server.client() as http:
        metrics = http.get("/metrics").text
        assert sample_value(metrics, "loader_load_process_deaths_total") == 1
        assert sample_value(metrics, "loader_load_processes") == 1
        assert sample_value(metrics, "loader_tables_quarantined_updates") == 0
    for table in ("a", "b", "c"):
        ids = read_delta(server.workdir / "data" / "warehouse" / table).column("id").to_pylist()
        assert sorted(ids) == list(range(150))


#: The flat types of issue 35 in a load worker's Spark Connect session.
NEW_TYPES = [
    {"name": "id", "type": "long", "nullable": False},
    {"name": "i8", "type": "byte", "nullable": False},
    {"name": "amount", "type": "decimal(38,2)"},
    {"name": "blob", "type": "binary"},
    {"name": "local", "type": "timestamp_ntz"},
    {"name": "n", "type": "short"},
]


@pytest.mark.parametrize("own_spark_server", [False])
@pytest.mark.parametrize("workers", [1])
def test_load_workers_carry_the_new_flat_types(server: ServerProcess) -> None:
    """Appends (unpartitioned, in a group job; partitioned by int8, a job of its own) and a
    latest table keyed by a decimal, loaded by worker processes over Spark Connect: exact."""
    import decimal

    server.start()
    assert server.wait_ready()
    declarations = [
        {"name": "flat", "schema": {"columns": NEW_TYPES}},
        {"name": "parted", "schema": {"columns": NEW_TYPES, "partition_by": ["i8"]}},
        {
            "name": "newest",
            "schema": {"columns": [{**c, "nullable": False} if c["name"] == "amount" else c for c in NEW_TYPES]},
            "mode": "latest",
            "key": ["amount"],
        },
    ]
    body = (
        b'{"rows": [{"id": 1, "i8": -128, "amount": 12345678901234567.89, "blob": "AP8=", '
        b'"local": "2024-03-10T02:30:00", "n": -32768}, {"id": 2, "i8": 127, "amount": -0.01}]}'
    )
    with server.client(timeout=60) as http:
        for declaration in declarations:
            r = http.post("/v1/admin/tables", json=declaration)
            assert r.status_code == 201, r.text
        for table in ("flat", "parted", "newest"):
            r = http.post(f"/v1/tables/{table}/updates", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 202, r.text
        deadline = time.monotonic() + 120
        for table in ("flat", "parted", "newest"):
            while http.get(f"/v1/tables/{table}").json()["last_loaded_sequence"] < 1:
                assert time.monotonic() < deadline, server.log_tail()
                time.sleep(0.1)
    D = decimal.Decimal
    for table in ("flat", "parted", "newest"):
        rows = sorted(read_delta(server.workdir / "data" / "warehouse" / table).to_pylist(), key=lambda r: r["id"])
        assert [(r["id"], r["i8"], r["amount"], r["blob"], r["n"]) for r in rows] == [
            (1, -128, D("12345678901234567.89"), b"\x00\xff", -32768),
            (2, 127, D("-0.01"), None, None),
        ], table
        assert rows[0]["local"].isoformat() == "2024-03-10T02:30:00" and rows[1]["local"] is None
