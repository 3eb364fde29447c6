"""``intake.acceptors``: HTTP served by acceptor processes (api/acceptors/) answers as the
service's own process does, every acknowledged row reaches Delta once, a schema changed
while they run is taken up, a dead acceptor is replaced, and none outlives a crashed service.

The reference answers come from the service's app in this process without acceptors (no
Spark: ``load=False``), given the same requests in the same order.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from api.acceptors.wire import FRAME, frame
from api.app import create_app
from loader.config import load_settings
from testing.server_process import ServerProcess, free_port, until_gone, write_config
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

OPERATOR = "operator-token-0123456789"
PRODUCER = "producer-token-0123456789"
TOKENS = [
    {"token": OPERATOR, "role": "operator", "name": "ops"},
    {"token": PRODUCER, "role": "producer", "name": "feed"},
]
TABLES = [
    {
        "name": "orders",
        "schema": {
            "columns": [
                {"name": "order_id", "type": "int64", "nullable": False},
                {"name": "amount", "type": "float64"},
                {"name": "note", "type": "string"},
            ]
        },
    },
    {
        "name": "ledger",
        "schema": {
            "columns": [
                {"name": "entry", "type": "int64", "nullable": False},
                {"name": "amount", "type": "decimal(12,2)"},
            ]
        },
    },
]
MAX_BODY = 256 << 10
STARTED = re.compile(r"acceptor (\d+) started \(pid (\d+)\)")
AUTH = {"Authorization": f"Bearer {PRODUCER}"}
JSON = {**AUTH, "Content-Type": "application/json"}


def _order_rows(first: int, n: int) -> list[dict[str, Any]]:
    return [{"order_id": first + k, "amount": k / 4, "note": f"order {first + k}"} for k in range(n)]


def _arrow_body(rows: list[dict[str, Any]]) -> bytes:
    table = pa.table(
        {
            "order_id": pa.array([r["order_id"] for r in rows], pa.int64()),
            "amount": pa.array([r["amount"] for r in rows], pa.float64()),
            "note": pa.array([r["note"] for r in rows], pa.string()),
        }
    )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _requests() -> list[tuple[str, str, dict[str, str], bytes, int]]:
    """(method, path, headers, body, order rows it adds when accepted), in the order sent."""
    ndjson = "\n".join(json.dumps(r) for r in _order_rows(1000, 600)).encode()
    assert len(ndjson) >= 32 << 10  # read as columns (loader/intake/columnar.py)
    multi = {
        "updates": [
            {"table": "orders", "rows": _order_rows(3000, 2)},
            {"table": "ledger", "rows": [{"entry": 1, "amount": "12.34"}]},
        ]
    }
    return [
        ("POST", "/v1/tables/orders/updates", JSON, json.dumps({"rows": _order_rows(0, 3)}).encode(), 3),
        ("POST", "/v1/tables/orders/updates", {**AUTH, "Content-Type": "application/x-ndjson"}, ndjson, 600),
        (
            "POST",
            "/v1/tables/orders/updates",
            {**AUTH, "Content-Type": "application/vnd.apache.arrow.stream"},
            _arrow_body(_order_rows(2000, 50)),
            50,
        ),
        ("POST", "/v1/updates", JSON, json.dumps(multi).encode(), 2),
        ("POST", "/v1/tables/ledger/updates", JSON, b'{"rows": [{"entry": 2, "amount": 0.10}]}', 0),
        ("POST", "/v1/tables/orders/updates", {**JSON, "Idempotency-Key": "k-1"}, b'{"rows": [{"order_id": 9}]}', 1),
        ("POST", "/v1/tables/orders/updates", {**JSON, "Idempotency-Key": "k-1"}, b'{"rows": [{"order_id": 9}]}', 0),
        ("POST", "/v1/tables/orders/updates", JSON, b'{"rows": [{"order_id": "nine"}]}', 0),
        ("POST", "/v1/tables/orders/updates", JSON, b'{"rows": [{"amount": 1.5}]}', 0),
        ("POST", "/v1/tables/ledger/updates", JSON, b'{"rows": [{"entry": 3, "amount": 1.005}]}', 0),
        ("POST", "/v1/tables/nowhere/updates", JSON, b'{"rows": [{"a": 1}]}', 0),
        ("POST", "/v1/tables/orders/updates", {"Content-Type": "application/json"}, b'{"rows": []}', 0),
        ("POST", "/v1/tables/orders/updates", {**JSON, "Idempotency-Key": "k" * 300}, b'{"rows": []}', 0),
        ("POST", "/v1/tables/orders/updates", JSON, b"x" * (MAX_BODY + 1), 0),
        ("POST", "/v1/updates", JSON, b'{"updates": [{"table": "orders", "rows": [{"order_id": "x"}]}]}', 0),
        ("GET", "/v1/tables/orders", {"Authorization": f"Bearer {OPERATOR}"}, b"", 0),
        ("GET", "/healthz", {}, b"", 0),
    ]


def _comparable(response: httpx.Response) -> tuple[int, Any, str | None]:
    """What must be the same both ways: the status, the body but for times and counts that
    differ between two services, the replay header."""
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if response.status_code == 202:
        body = [(u["table"], u["sequence"]) for u in body["updates"]]
    elif response.request.method == "GET":
        body = None
    return response.status_code, body, response.headers.get("idempotent-replayed")


async def _reference(data: Path) -> list[tuple[int, Any, str | None]]:
    settings = load_settings(
        None, data_dir=data, workers=1, tables=TABLES, auth_tokens=TOKENS, intake={"max_body_bytes": MAX_BODY}
    )
    app = create_app(settings, load=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reference") as client:
            return [
                _comparable(await client.request(method, path, headers=headers, content=body))
                for method, path, headers, body, _ in _requests()
            ]


def _link_name(server: ServerProcess) -> str:
    """The service's link to its acceptors, from the kernel's list of Unix sockets."""
    assert server.proc is not None
    for line in Path("/proc/net/unix").read_text().splitlines():
        name = line.split()[-1]
        if name.startswith(f"@loader-acceptors-{server.proc.pid}-"):
            return "\0" + name[1:]
    raise AssertionError("the acceptors' link is not listening")


def _bindable(port: int) -> bool:
    """Whether a server could listen on ``port`` now (the kernel closes a dead process's
    sockets as it tears the process down: polled, with a deadline)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
    return True


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_acceptor_processes_answer_as_the_service_does_load_every_row_once_and_die_with_it(
    tmp_path: Path, connect_server: ConnectEndpoint
) -> None:
    expected = asyncio.run(_reference(tmp_path / "reference"))
    port = free_port()
    settings = {
        "port": port,
        "data_dir": "data",
        "workers": 1,
        "spark": {"master": "local[1]", "remote": connect_server.url},
        "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
        "auth_tokens": TOKENS,
        "tables": TABLES,
        "intake": {"acceptors": 2, "max_body_bytes": MAX_BODY},
    }
    server = ServerProcess(tmp_path, write_config(tmp_path / "loader.toml", settings), port, OPERATOR)
    server.start()
    try:
        assert server.wait_ready(), server.log_tail()
        with httpx.Client(base_url=server.base, timeout=30) as http:
            got = [_comparable(http.request(m, p, headers=h, content=b)) for m, p, h, b, _ in _requests()]
            for sent, want, have in zip(_requests(), expected, got, strict=True):
                assert have == want, f"{sent[0]} {sent[1]} {sent[3][:80]!r}"
            accepted = sum(rows for *_, rows in _requests())

            # A body past the limit sent in chunks (no Content-Length) is refused whole, never
            # cut at the limit and checked (a cut on a line boundary would parse).
            lines = [json.dumps(r).encode() + b"\n" for r in _order_rows(7000, 8000)]
            chunked = http.post(
                "/v1/tables/orders/updates",
                content=iter(lines),
                headers={**AUTH, "Content-Type": "application/x-ndjson"},
            )
            assert chunked.status_code == 413, chunked.text

            # The link answers no stranger: a wrong secret, or a frame too long to be one, closes it.
            name = _link_name(server)
            for hello in (frame(b"K", b"x" * 32), FRAME.pack(1 << 32, ord("K"))):
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stranger:
                    stranger.settimeout(10)
                    stranger.connect(name)
                    stranger.sendall(hello)
                    assert stranger.recv(16) == b"", "the link answered a connection without the secret"
            metrics = http.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"}).text
            assert _metric(metrics, 'loader_acceptor_requests_total{way="checked"}') >= 6, metrics
            assert _metric(metrics, 'loader_acceptor_requests_total{way="passed_on"}') >= 8, metrics

            # A column added while the acceptors run: their next request sees the new schema.
            change = {"columns": [*TABLES[0]["schema"]["columns"], {"name": "channel", "type": "string"}]}
            ops = {"Authorization": f"Bearer {OPERATOR}"}
            assert http.patch("/v1/admin/tables/orders/schema", json=change, headers=ops).status_code == 200
            row = {"order_id": 5000, "amount": 1.0, "note": "n", "channel": "web"}
            assert http.post("/v1/tables/orders/updates", json={"rows": [row]}, headers=AUTH).status_code == 202
            accepted += 1

            # An acceptor killed is replaced; requests go on being answered meanwhile.
            first = {int(i): int(pid) for i, pid in STARTED.findall(server.log_text())}
            os.kill(first[0], signal.SIGKILL)
            server.until(lambda: len(STARTED.findall(server.log_text())) == 3, "the killed acceptor replaced", 30)
            for k in range(20):
                response = http.post("/v1/tables/orders/updates", json={"rows": _order_rows(6000 + k, 1)}, headers=AUTH)
                assert response.status_code == 202, response.text
            accepted += 20
            assert "acceptor 0 (pid" in server.log_text() and "exited with status -9" in server.log_text()

            def loaded() -> bool:
                table = http.get("/v1/tables/orders", headers=ops).json()
                return table["last_loaded_sequence"] == table["last_sequence"]

            server.until(loaded, "every acknowledged update of orders loaded", 120)
        orders = read_delta(tmp_path / "data" / "warehouse" / "orders")
        ids = orders.column("order_id").to_pylist()
        assert len(ids) == accepted and len(set(ids)) == accepted

        # A crash of the service takes its acceptors along: nothing holds its port after it.
        acceptors = [int(pid) for _, pid in STARTED.findall(server.log_text())][1:]
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
        for pid in acceptors:
            until_gone(pid, 10, "an acceptor of the killed service")
        server.until(lambda: _bindable(port), "the killed service's port free again", 10)

        # Started again on the same port; a stop signal to the whole group (a terminal's Ctrl-C,
        # a supervisor's stop) is the service's: it stops its acceptors, none is started again,
        # and it exits 0.
        server.start()
        assert server.wait_ready(), server.log_tail()
        assert server.proc is not None
        os.killpg(server.proc.pid, signal.SIGINT)
        assert server.wait_exit(60) == 0, server.log_tail()
        log = server.log_text()
        again = [int(pid) for _, pid in STARTED.findall(log)]
        assert len(again) == 2, log[-3000:]
        for pid in again:
            until_gone(pid, 10, "an acceptor of the stopped service")
        assert "exited with status" not in log, log[-3000:]
    finally:
        if server.alive:
            with contextlib.suppress(Exception):
                server.kill()
