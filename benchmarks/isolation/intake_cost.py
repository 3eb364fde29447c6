"""Where single-update intake's CPU goes: the event loop's CPU time per request, in process
(``python -m benchmarks.isolation.intake_cost SPEC.json``).

The event loop's thread is what caps intake, so this is the number the hot path's changes
were made against: each app (bare FastAPI; the service's submit routes through FastAPI; as
it runs, ahead of FastAPI; the same without group delay) is driven as ASGI by concurrent
coroutines, no HTTP server or generator, loading off, the ways interleaved ``rounds`` times.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp

from api.app import create_app
from benchmarks.harness import child
from benchmarks.harness.service import INTAKE_TABLES, requests_for
from benchmarks.isolation.bare_app import app as bare_app
from loader.config import load_settings
from testing.service_server import PRODUCER_TOKEN, SCHEMA

CONCURRENCY = 16
#: The service's apps: submit routes ahead of FastAPI's (``fast_intake``), the WAL's group delay.
SERVICES = {"routes": (False, 0.001), "fast": (True, 0.001), "fast, no group delay": (True, 0.0)}
#: An HTTP request's ASGI scope, but for its path and headers.
SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http"}
SCOPE |= {"query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
HEADERS = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
HEADERS.append((b"authorization", f"Bearer {PRODUCER_TOKEN}".encode()))


async def drive(app: ASGIApp, requests: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """``n`` requests through ``app`` from CONCURRENCY coroutines: the main thread's CPU µs per
    request, requests per second, and the statuses answered."""
    statuses: dict[int, int] = {}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] = statuses.get(message["status"], 0) + 1

    async def client(k: int) -> None:
        for i in range(n // CONCURRENCY):
            request = requests[(k + i) % len(requests)]
            body = request["body"].encode()
            headers = [*HEADERS, (b"content-length", str(len(body)).encode())]
            scope = SCOPE | {"path": request["path"], "raw_path": request["path"].encode(), "headers": headers}
            messages = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive(messages: list[dict[str, Any]] = messages) -> dict[str, Any]:
                if messages:
                    return messages.pop()
                await asyncio.Event().wait()  # (never: the body came whole)
                raise AssertionError

            await app(scope, receive, send)

    began, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(client(k) for k in range(CONCURRENCY)))
    wall, cpu = time.perf_counter() - began, time.thread_time() - cpu
    done = CONCURRENCY * (n // CONCURRENCY)
    return {"cpu_us": 1e6 * cpu / done, "requests_per_second": done / wall, "statuses": statuses}


@contextlib.asynccontextmanager
async def service(fast: bool, group_delay: float) -> AsyncIterator[ASGIApp]:
    with tempfile.TemporaryDirectory(prefix="intake-cost-") as data:
        tables = [{"name": t, "schema": SCHEMA} for t in INTAKE_TABLES]
        tokens = [{"token": PRODUCER_TOKEN, "role": "producer", "name": "bench"}]
        wal = {"group_delay_seconds": group_delay}
        settings = load_settings(None, data_dir=Path(data), workers=2, tables=tables, auth_tokens=tokens, wal=wal)
        app = create_app(settings, load=False, fast_intake=fast)
        async with app.router.lifespan_context(app):
            yield app


async def measure(spec: dict[str, Any]) -> dict[str, Any]:
    requests, n, rounds = requests_for(1), int(spec.get("requests", 8000)), int(spec.get("rounds", 5))
    out: dict[str, list[dict[str, Any]]] = {}
    async with contextlib.AsyncExitStack() as stack:
        ways: dict[str, ASGIApp] = {"bare": bare_app}
        for name, (fast, group_delay) in SERVICES.items():
            ways[name] = await stack.enter_async_context(service(fast, group_delay))
        for app in ways.values():
            await drive(app, requests, n // 2)  # warm-up
        for _ in range(rounds):
            for name, app in ways.items():
                out.setdefault(name, []).append(await drive(app, requests, n))
    if bad := {name: r["statuses"] for name, runs in out.items() for r in runs if set(r["statuses"]) != {202}}:
        raise RuntimeError(f"requests were refused: {bad}")
    median_cpu_us = {name: statistics.median(r["cpu_us"] for r in runs) for name, runs in out.items()}
    runs = {name: [round(r["cpu_us"], 1) for r in runs] for name, runs in out.items()}
    return {"requests": n, "rounds": rounds, "concurrency": CONCURRENCY, "median_cpu_us": median_cpu_us, "runs": runs}


if __name__ == "__main__":
    raise SystemExit(child.main(lambda spec: asyncio.run(measure(spec))))
