"""HTTP load generator of the service benchmark, run as its own process.

    python -m benchmarks._service_loadgen SPEC.json     # prints one JSON object on stdout

Raw HTTP/1.1 over keep-alive connections on asyncio (uvloop when installed): each request
is prebuilt bytes, each answer is read as status line + headers + Content-Length body,
so the client costs a few tens of microseconds per request (httpx costs ~10x that, too
much to reach thousands of requests per second on a 2-core machine shared with the
server). Two modes:

- ``closed``: ``connections`` clients each send their next request as soon as the
  previous answer arrived (saturation throughput);
- ``open``: requests are *scheduled* at a constant ``rate`` regardless of earlier answers
  and handed to the first free connection of a pool; latency is measured from the
  scheduled send time, so a stall of the server (or of this process) is charged to every
  request it delayed (no coordinated omission, as in wrk2).

Only requests scheduled (open) or completed (closed) inside the measurement window
[start + warmup, start + warmup + duration] are counted. ``start_at`` (Unix time) lets
several generator processes begin together.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)  # seconds, measured window only
    service: list[float] = field(default_factory=list)  # send -> answer (open mode), seconds
    ok: int = 0
    updates: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    completed: int = 0
    reconnects: int = 0
    done_in_window: int = 0  # answers received inside the window (open mode)
    unanswered: int = 0  # window requests still without an answer at the drain deadline
    first_error: str | None = None

    def error(self, key: str, detail: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1
        if self.first_error is None:
            self.first_error = detail[:500]


def build_requests(spec: dict[str, Any]) -> list[tuple[bytes, int]]:
    """(raw request bytes, updates it carries) for every body of the spec, cycled through."""
    out = []
    for item in spec["requests"]:
        body = item["body"].encode()
        head = (
            f"POST {item['path']} HTTP/1.1\r\n"
            f"Host: {spec['host']}:{spec['port']}\r\n"
            f"Authorization: Bearer {spec['token']}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append((head + body, int(item["updates"])))
    return out


class Connection:
    def __init__(self, host: str, port: int, stats: Stats) -> None:
        self.host, self.port, self.stats = host, port, stats
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.writer = None

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        """Send one request and read its answer: (status, body). Reconnects once if closed."""
        for attempt in (0, 1):
            try:
                if self.writer is None:
                    await self.connect()
                assert self.reader is not None and self.writer is not None
                self.writer.write(raw)
                head = await self.reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                lower = head.lower()
                at = lower.find(b"content-length:")
                if at >= 0:
                    length = int(lower[at + 15 : lower.find(b"\r\n", at)])
                body = await self.reader.readexactly(length) if length else b""
                if b"connection: close" in lower:
                    await self.close()
                return status, body
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                await self.close()
                self.stats.reconnects += 1
                if attempt:
                    raise
        raise AssertionError("unreachable")


def _record(stats: Stats, status: int, body: bytes, updates: int) -> None:
    if status == 202:
        stats.ok += 1
        stats.updates += updates
    else:
        stats.error(str(status), f"HTTP {status}: {body[:300]!r}")


async def run_closed(spec: dict[str, Any], requests: list[tuple[bytes, int]], stats: Stats) -> float:
    start = spec["start_at"]
    begin, end = start + spec["warmup"], start + spec["warmup"] + spec["duration"]
    conns = [Connection(spec["host"], spec["port"], stats) for _ in range(spec["connections"])]
    for c in conns:
        await c.connect()
    await asyncio.sleep(max(0.0, start - time.time()))
    clock = time.time

    async def client(k: int, conn: Connection) -> None:
        i = k
        while True:
            raw, updates = requests[i % len(requests)]
            i += len(conns)
            sent = clock()
            if sent >= end:
                return
            stats.sent += 1
            try:
                status, body = await conn.request(raw)
            except Exception as exc:  # noqa: BLE001 - count and go on
                stats.error(type(exc).__name__, repr(exc))
                await asyncio.sleep(0.01)
                continue
            done = clock()
            stats.completed += 1
            if begin <= done < end:
                stats.latencies.append(done - sent)
                _record(stats, status, body, updates)

    await asyncio.gather(*(client(k, c) for k, c in enumerate(conns)))
    for c in conns:
        await c.close()
    return end - begin


async def run_open(spec: dict[str, Any], requests: list[tuple[bytes, int]], stats: Stats) -> float:
    start = spec["start_at"]
    rate = float(spec["rate"])
    begin, end = start + spec["warmup"], start + spec["warmup"] + spec["duration"]
    total = int(round((end - start) * rate))
    queue: asyncio.Queue[tuple[float, int] | None] = asyncio.Queue()
    conns = [Connection(spec["host"], spec["port"], stats) for _ in range(spec["connections"])]
    for c in conns:
        await c.connect()
    clock = time.time

    async def worker(conn: Connection) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            scheduled, k = item
            raw, updates = requests[k % len(requests)]
            sent = clock()
            try:
                status, body = await conn.request(raw)
            except Exception as exc:  # noqa: BLE001
                if begin <= scheduled < end:
                    stats.error(type(exc).__name__, repr(exc))
                continue
            done = clock()
            stats.completed += 1
            stats.done_in_window += begin <= done < end
            if begin <= scheduled < end:
                stats.latencies.append(done - scheduled)
                stats.service.append(done - sent)
                _record(stats, status, body, updates)

    workers = [asyncio.create_task(worker(c)) for c in conns]
    await asyncio.sleep(max(0.0, start - clock()))
    interval = 1.0 / rate
    k = 0
    while k < total:
        now = clock()
        while k < total and start + k * interval <= now:
            queue.put_nowait((start + k * interval, k))
            stats.sent += 1
            k += 1
        if k < total:
            await asyncio.sleep(max(0.0, start + k * interval - clock()))
    for _ in workers:
        queue.put_nowait(None)
    # An overloaded server may hold a long queue: give it drain_seconds, then count the rest.
    _, late = await asyncio.wait(workers, timeout=float(spec.get("drain_seconds", 60.0)))
    for task in late:
        task.cancel()
    while not queue.empty():
        item = queue.get_nowait()
        if item is not None and begin <= item[0] < end:
            stats.unanswered += 1
    stats.unanswered += len(late)  # each cancelled worker held one request in flight
    for c in conns:
        await c.close()
    return end - begin


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    try:
        import uvloop

        uvloop.install()
        loop_kind = "uvloop"
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        loop_kind = "asyncio"
    requests = build_requests(spec)
    stats = Stats()
    runner = run_open if spec["mode"] == "open" else run_closed
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    window = asyncio.run(runner(spec, requests, stats))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    out = {
        "mode": spec["mode"],
        "loop": loop_kind,
        "window_seconds": window,
        "latencies": [round(x, 7) for x in stats.latencies],
        "service": [round(x, 7) for x in stats.service],
        "ok": stats.ok,
        "updates": stats.updates,
        "errors": stats.errors,
        "first_error": stats.first_error,
        "sent": stats.sent,
        "completed": stats.completed,
        "reconnects": stats.reconnects,
        "done_in_window": stats.done_in_window,
        "unanswered": stats.unanswered,
        "cpu_seconds": cpu,
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
