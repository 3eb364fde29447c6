"""An in-process service behind FastAPI's TestClient, with whatever sink a test needs.

``ArrowSink`` (testing/fakes.py) makes API tests run in milliseconds; the end-to-end tests
pass a real Spark-backed sink. Waiting is polling with a deadline, never a sleep of a
guessed length.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi.testclient import TestClient

from api.app import create_app
from loader.config import Settings, load_settings
from loader.loading.sinks.base import Sink
from loader.service import LoaderService
from testing.fakes import ArrowSink
from testing.tables import read_delta

OPERATOR = "operator-token-0123456789"
PRODUCER = "producer-token-0123456789"
ORDERS_ONLY = "orders-only-token-0123456789"

ORDERS = {
    "name": "orders",
    "schema": {
        "columns": [
            {"name": "order_id", "type": "int64", "nullable": False},
            {"name": "amount", "type": "float64"},
            {"name": "country", "type": "string"},
        ],
        "partition_by": ["country"],
    },
    "weight": 2.0,
}
CLICKS = {"name": "clicks", "schema": {"columns": [{"name": "url", "type": "string"}, {"name": "n", "type": "int32"}]}}


def make_settings(data_dir: Path, **extra: Any) -> Settings:
    """``tables``: the configured tables (orders and clicks unless given)."""
    return load_settings(
        None,
        data_dir=data_dir,
        workers=2,
        tables=extra.pop("tables", [ORDERS, CLICKS]),
        auth_tokens=[
            {"token": OPERATOR, "role": "operator", "name": "ops"},
            {"token": PRODUCER, "role": "producer", "name": "feed"},
            {"token": ORDERS_ONLY, "role": "producer", "name": "orders-feed", "tables": ["orders"]},
        ],
        maintenance={"wal_truncate_seconds": 3600, "compact_seconds": 0, "vacuum_seconds": 0},
        **extra,
    )


class Harness:
    def __init__(
        self,
        data_dir: Path,
        fail: threading.Event | None = None,
        sink: Callable[[Settings], Sink] | None = None,
        fast_intake: bool = True,
        **settings: Any,
    ) -> None:
        self.settings = make_settings(data_dir, **settings)
        self.sink = sink(self.settings) if sink else ArrowSink(self.settings.warehouse_path, fail)
        app = create_app(self.settings, sink_factory=lambda _: self.sink, fast_intake=fast_intake)
        self.client = TestClient(app)

    def __enter__(self) -> Harness:
        self.client.__enter__()
        #: The running service (``LoaderService.start`` ran in the app's lifespan).
        self.service: LoaderService = self.client.app.state.service
        self.wait(lambda: self.service.ready)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)

    def post(self, path: str, token: str | None = PRODUCER, **kwargs: Any):  # type: ignore[no-untyped-def]
        headers = kwargs.pop("headers", {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.post(path, headers=headers, **kwargs)

    def delete(self, path: str, token: str | None = OPERATOR):  # type: ignore[no-untyped-def]
        return self.client.delete(path, headers={"Authorization": f"Bearer {token}"} if token else {})

    def get(self, path: str, token: str | None = OPERATOR):  # type: ignore[no-untyped-def]
        return self.client.get(path, headers={"Authorization": f"Bearer {token}"} if token else {})

    def status(self, table: str) -> dict[str, Any]:
        return self.get(f"/v1/tables/{table}").json()

    @staticmethod
    def wait(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached before the deadline"
            time.sleep(0.01)

    def wait_loaded(self, table: str, seq: int, timeout: float = 20.0) -> None:
        self.wait(lambda: self.status(table)["last_loaded_sequence"] >= seq, timeout)

    def rows(self, table: str) -> list[dict[str, Any]]:
        data = read_delta(self.settings.warehouse_path / table)
        return sorted(data.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


@contextlib.contextmanager
def serve_in_thread(data_dir: Path, **settings: Any) -> Iterator[tuple[str, LoaderService]]:
    """The app under a real uvicorn on a loopback port (one event loop, as in production),
    with the Spark-free sink: for clients that need a URL (CLI, schemathesis)."""
    from testing.server_process import free_port

    config = make_settings(data_dir, **settings)
    app = create_app(config, sink_factory=lambda s: ArrowSink(s.warehouse_path))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def started() -> bool:
        service = getattr(app.state, "service", None)
        return server.started and service is not None and service.ready

    try:
        Harness.wait(lambda: started() or not thread.is_alive(), 30)
        assert thread.is_alive(), "the server thread died while starting"
        yield f"http://127.0.0.1:{port}", app.state.service
    finally:
        server.should_exit = True
        thread.join(30)
