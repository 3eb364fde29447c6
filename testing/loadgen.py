"""HTTP load generator of the service benchmark, run as its own process.

    python -m testing.loadgen SPEC.json     # prints one JSON object on stdout

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

Optional keys of the open mode, for trials that must account for every request (the
overload trial, ``trials/overload/``):

- ``schedule``: ``[[rate, seconds], ...]`` replaces ``rate``/``duration``: the rate steps
  from one phase to the next at a precise instant (the window is the whole schedule,
  after ``warmup``);
- ``unique``: ``{"placeholder": "@K@", "base": 1}``: every occurrence of the placeholder
  in a body becomes ``base + k`` for the k-th request, so each request's rows can be
  told apart in the warehouse (one ``str.replace`` per request: cheap);
- ``record``: every request of the window is reported as
  ``[k, scheduled, sent, done, status, retry_after, acks]`` (times in seconds from
  ``start_at``; status 0 and acks None when it got no answer; retry_after the
  Retry-After header or None; acks ``[[table, sequence], ...]`` of a 202).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
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
    #: Per-request records (``record`` in the spec): see the module docstring.
    records: list[list[Any]] = field(default_factory=list)

    def error(self, key: str, detail: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1
        if self.first_error is None:
            self.first_error = detail[:500]


def _head(spec: dict[str, Any], path: str, length: int, content_type: str = "application/json") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {spec['host']}:{spec['port']}\r\n"
        f"Authorization: Bearer {spec['token']}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _body(item: dict[str, Any]) -> bytes:
    """A request item's body: ``body`` (text) or ``body_base64`` (bytes: an Arrow or Parquet body)."""
    return base64.b64decode(item["body_base64"]) if "body_base64" in item else item["body"].encode()


def build_requests(spec: dict[str, Any]) -> list[tuple[bytes, int]]:
    """(raw request bytes, updates it carries) for every body of the spec, cycled through; an
    item's ``content_type`` is its Content-Type (application/json unless given)."""
    out = []
    for item in spec["requests"]:
        body = _body(item)
        head = _head(spec, item["path"], len(body), item.get("content_type", "application/json"))
        out.append((head + body, int(item["updates"])))
    return out


class RequestSource:
    """The k-th request's bytes: the spec's bodies cycled through, each made unique when
    the spec asks (``unique``), so that acknowledged rows can be found in the warehouse."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.fixed = build_requests(spec)
        unique = spec.get("unique")
        self.placeholder: str | None = unique["placeholder"] if unique else None
        self.base = int(unique.get("base", 0)) if unique else 0
        self.items = [(item["path"], item.get("body", ""), int(item["updates"])) for item in spec["requests"]]
        self.spec = spec

    def __call__(self, k: int) -> tuple[bytes, int]:
        if self.placeholder is None:
            return self.fixed[k % len(self.fixed)]
        path, template, updates = self.items[k % len(self.items)]
        body = template.replace(self.placeholder, str(self.base + k)).encode()
        return _head(self.spec, path, len(body)) + body, updates


def _retry_after(head: bytes) -> str | None:
    """The Retry-After header of a response head (already lower-cased), or None."""
    at = head.find(b"\r\nretry-after:")
    if at < 0:
        return None
    at += len(b"\r\nretry-after:")
    return head[at : head.find(b"\r\n", at)].strip().decode("latin-1")


def _acks(body: bytes) -> list[list[Any]] | None:
    """[[table, sequence], ...] of a 202's body (the acknowledgements), None if unreadable."""
    try:
        return [[u["table"], u["sequence"]] for u in json.loads(body)["updates"]]
    except (ValueError, KeyError, TypeError):
        return None


class Connection:
    """One keep-alive connection.

    ``resend`` (the default) sends a request again on a fresh connection when the first
    try fails: right for throughput runs, where a duplicate costs nothing. A trial that
    counts every row (``unique``) must not resend a request the server may have
    accepted, so it turns that off and instead replaces a connection that sat idle near
    uvicorn's 5-s keep-alive timeout *before* writing to it (the race that the resend
    covers); a failure is then reported to the caller as "no answer".
    """

    IDLE_SECONDS = 3.0

    def __init__(self, host: str, port: int, stats: Stats, *, resend: bool = True) -> None:
        self.host, self.port, self.stats = host, port, stats
        self.resend = resend
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_used = time.monotonic()

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.last_used = time.monotonic()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.writer = None

    async def request(self, raw: bytes) -> tuple[int, bytes, bytes]:
        """Send one request and read its answer: (status, body, lower-cased head). Reconnects
        once if closed (``resend``)."""
        if not self.resend and self.writer is not None and time.monotonic() - self.last_used > self.IDLE_SECONDS:
            await self.close()
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
                self.last_used = time.monotonic()
                if b"connection: close" in lower:
                    await self.close()
                return status, body, lower
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                await self.close()
                self.stats.reconnects += 1
                if attempt or not self.resend:
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
                status, body, _ = await conn.request(raw)
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


def send_times(spec: dict[str, Any]) -> list[float]:
    """Scheduled send instants (Unix time) of the open mode: constant ``rate`` over warmup +
    duration, or the phases of ``schedule`` one after the other."""
    start = float(spec["start_at"])
    schedule = spec.get("schedule")
    if not schedule:
        rate = float(spec["rate"])
        total = int(round((spec["warmup"] + spec["duration"]) * rate))
        return [start + k / rate for k in range(total)]
    times: list[float] = []
    phase_start = start
    for rate, seconds in schedule:
        count = int(round(float(rate) * float(seconds)))
        times.extend(phase_start + k / float(rate) for k in range(count))
        phase_start += float(seconds)
    return times


def window(spec: dict[str, Any]) -> tuple[float, float]:
    start = float(spec["start_at"])
    schedule = spec.get("schedule")
    length = sum(float(seconds) for _, seconds in schedule) if schedule else spec["warmup"] + spec["duration"]
    return start + spec["warmup"], start + length


async def run_open(spec: dict[str, Any], source: RequestSource, stats: Stats) -> float:
    start = float(spec["start_at"])
    begin, end = window(spec)
    times = send_times(spec)
    record = bool(spec.get("record"))
    queue: asyncio.Queue[tuple[float, int] | None] = asyncio.Queue()
    resend = source.placeholder is None  # unique requests are never sent twice
    conns = [Connection(spec["host"], spec["port"], stats, resend=resend) for _ in range(spec["connections"])]
    for c in conns:
        await c.connect()
    clock = time.time

    async def worker(conn: Connection) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            scheduled, k = item
            raw, updates = source(k)
            sent = clock()
            try:
                status, body, head = await conn.request(raw)
            except Exception as exc:  # noqa: BLE001
                if begin <= scheduled < end:
                    stats.error(type(exc).__name__, repr(exc))
                    if record:
                        stats.records.append([k, scheduled - start, sent - start, None, 0, None, None])
                continue
            done = clock()
            stats.completed += 1
            stats.done_in_window += begin <= done < end
            if begin <= scheduled < end:
                stats.latencies.append(done - scheduled)
                stats.service.append(done - sent)
                _record(stats, status, body, updates)
                if record:
                    acks = _acks(body) if status == 202 else None
                    stats.records.append(
                        [k, scheduled - start, sent - start, done - start, status, _retry_after(head), acks]
                    )

    workers = [asyncio.create_task(worker(c)) for c in conns]
    await asyncio.sleep(max(0.0, start - clock()))
    k, total = 0, len(times)
    while k < total:
        now = clock()
        while k < total and times[k] <= now:
            queue.put_nowait((times[k], k))
            stats.sent += 1
            k += 1
        if k < total:
            await asyncio.sleep(max(0.0, times[k] - clock()))
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
            if record:
                stats.records.append([item[1], item[0] - start, None, None, 0, None, None])
    # Each cancelled worker held one request in flight; with ``record`` the trial finds
    # those as the numbers missing from the records (k in range(sent) without a record).
    stats.unanswered += len(late)
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
    stats = Stats()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    if spec["mode"] == "open":
        seconds = asyncio.run(run_open(spec, RequestSource(spec), stats))
    else:
        seconds = asyncio.run(run_closed(spec, build_requests(spec), stats))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    out = {
        "mode": spec["mode"],
        "loop": loop_kind,
        "window_seconds": seconds,
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
    if spec.get("record"):
        out["records"] = stats.records
    text = json.dumps(out) + "\n"
    if spec.get("result_path"):
        # Large results (hundreds of KB of latencies) go to a file: through the stdout pipe
        # they arrived cut at a multiple of 64 KiB now and then, cause not found.
        with open(spec["result_path"], "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        os.set_blocking(sys.stdout.fileno(), True)
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
