"""The service's side of its acceptor processes: starts and watches them, and serves what they send.

With ``intake.acceptors = N`` (N > 0) the service's process accepts no HTTP connection
itself. N acceptor processes (api/acceptors/process.py) share its listening socket: each
connection goes to whichever acceptor calls ``accept`` first, so a busy acceptor takes fewer
and one that died leaves its share queued for the others, not refused (SO_REUSEPORT would
spread connections by hash, whatever each process's load, and drop those queued at one that
dies). An acceptor parses HTTP, authenticates, reads a submit request's body and checks its
rows against the table's schema; the service is sent the checked columns (``S`` frames,
api/acceptors/wire.py) and does what only it can do, in ``Intake.submit_checked``:
sequence numbers, the WAL, the Idempotency-Key store, the pending store. Every other request,
and a submit request the acceptor refused or could not check (a schema changed meanwhile,
landing files, new fields to add), comes as it was sent (``A``) and is served here by the
service's own ASGI app, so its answer is the service's in every word.

Why processes: the service's one event loop caps single-update intake (BENCHMARKS.md,
"isolation"): HTTP parsing, authentication and the rows' checks are most of a request's
cost and need nothing but the body and the schema.

The link is a Unix socket in the abstract namespace (no file to clean up after a crash);
a connection must first present the secret the service gave the acceptor on its stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from api.acceptors.wire import (
    BODY,
    CATALOG,
    CHECKED,
    END,
    HELLO,
    RAW,
    RESULT,
    SECRET_BYTES,
    START,
    TABLES,
    WELCOME,
    LinkClosed,
    frame,
    read_frame,
    split_head,
)
from api.auth import generated_tokens
from api.errors import error_headers
from loader.config import Settings
from loader.core.errors import ServiceError
from loader.intake.reading import CheckedUpdate, StaleSchema, checked_against

log = logging.getLogger("loader.acceptors")

#: What Starlette's ServerErrorMiddleware answers when nothing else could.
INTERNAL_ERROR = {"status": 500, "headers": [["content-length", "21"], ["content-type", "text/plain; charset=utf-8"]]}

#: The project's root, for the acceptors' ``python -m``.
ROOT = Path(__file__).resolve().parents[2]
#: Connections the kernel queues for the acceptors while each is busy.
BACKLOG = 2048
#: An acceptor that exits sooner than this after its start is started again only after a pause
#: that doubles with each such exit (up to MAX_PAUSE_SECONDS).
QUICK_EXIT_SECONDS = 5.0
MAX_PAUSE_SECONDS = 30.0
#: Quick exits in a row after which the log says so as an error: HTTP is not being served.
QUICK_EXITS_ERROR = 5
#: Seconds a new connection to the link has to present the secret.
HELLO_SECONDS = 5.0
#: Connections to the link the kernel queues while the service's loop is busy.
LINK_BACKLOG = 1024
_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Gateway:
    """Runs like ``uvicorn.Server`` for cli/foreground.py: ``serve(sockets=[sock])`` until
    ``should_exit``; then the acceptors stop first (their open requests are answered, by this
    process), then the link."""

    def __init__(self, app: Any, settings: Settings, graceful_seconds: float) -> None:
        self.app = app
        self.settings = settings
        self.count = settings.intake.acceptors
        self.graceful_seconds = graceful_seconds
        self.should_exit = False
        self.address = f"\0loader-acceptors-{os.getpid()}-{secrets.token_hex(8)}"
        self._secret = secrets.token_bytes(32)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._started: dict[int, float] = {}
        self._quick_exits: dict[int, int] = {}
        self._tokens = settings.auth_tokens or generated_tokens(settings)
        self._ways: dict[str, Any] = {}
        #: The largest frame an acceptor may send: a body, or the columns it checked (bounded by
        #: intake's expansion limit, 4 x the body limit), and their head.
        self._frame_limit = 8 * settings.intake.max_body_bytes + (1 << 20)

    # -- the processes ------------------------------------------------------------------------
    async def serve(self, sockets: list[socket.socket]) -> None:
        (sock,) = sockets
        counter = self.app.state.service.metrics.acceptor_requests
        self._ways = {way: counter.labels(way) for way in ("checked", "passed_on")}
        sock.listen(BACKLOG)
        server = await asyncio.start_unix_server(self._link, path=self.address, backlog=LINK_BACKLOG)
        try:
            respawn: dict[int, float] = {}  # index -> when an acceptor not running starts (again)
            for index in range(self.count):
                if not await self._spawn(index, sock):
                    respawn[index] = time.monotonic() + 1.0
            while not self.should_exit:
                await asyncio.sleep(0.1)
                for index in range(self.count):
                    if self.should_exit:
                        break
                    if index in respawn:
                        if time.monotonic() >= respawn[index]:
                            del respawn[index]
                            if not await self._spawn(index, sock):
                                respawn[index] = time.monotonic() + 1.0
                    elif (child := self._children[index]).poll() is not None:
                        respawn[index] = time.monotonic() + self._exited(index, child)
        finally:
            await self._stop_children()
            server.close()
            await server.wait_closed()

    def _exited(self, index: int, child: subprocess.Popen[bytes]) -> float:
        """An acceptor exited while serving: logged and counted; the pause before its restart,
        doubling with each exit in a row that came soon after its start."""
        lived = time.monotonic() - self._started[index]
        quick = self._quick_exits.get(index, 0) + 1 if lived < QUICK_EXIT_SECONDS else 0
        self._quick_exits[index] = quick
        pause = min(MAX_PAUSE_SECONDS, 2.0 ** (quick - 1)) if quick else 0.0
        failing = quick >= QUICK_EXITS_ERROR
        log.log(
            logging.ERROR if failing else logging.WARNING,
            "acceptor %d (pid %d) exited with status %s after %.1f s; starting it again in %.0f s%s",
            index,
            child.pid,
            child.returncode,
            lived,
            pause,
            f" ({quick} quick exits in a row: its log lines above say why)" if failing else "",
        )
        self.app.state.service.metrics.acceptor_restarts.inc()
        self._close_stdin(child)
        return pause

    async def _spawn(self, index: int, sock: socket.socket) -> bool:
        """Start acceptor ``index``; False when no process could be started (tried again in 1 s).
        Its configuration (with the secret and the tokens: never in argv or a file) goes on its
        stdin, which stays open: closing it tells the acceptor to stop (it ignores SIGINT and
        SIGTERM, which a terminal or a supervisor may send the whole group while this process
        runs its own orderly stop)."""
        config = {
            "index": index,
            "parent": os.getpid(),
            "fd": sock.fileno(),
            "link": self.address,
            "secret": self._secret.hex(),
            "tokens": [t.model_dump(mode="json") for t in self._tokens],
            "max_body_bytes": self.settings.intake.max_body_bytes,
            "graceful_seconds": self.graceful_seconds,
            "log_level": logging.getLogger().getEffectiveLevel(),
        }
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        try:
            child = subprocess.Popen(  # noqa: S603 (our own interpreter and module)
                # -P: the working directory is not on the path (a package named api/ or loader/
                # there must not be imported in place of ours, and handed the tokens).
                [sys.executable, "-P", "-m", "api.acceptors.process"],
                stdin=subprocess.PIPE,
                pass_fds=(sock.fileno(),),
                env=env,
                # A process group of its own (a terminal's Ctrl-C is this process's to handle)
                # in this process's session (as the load workers: loader/loading/workers/pool.py).
                process_group=0,
            )
        except OSError as exc:
            log.warning("acceptor %d could not be started (%s); trying again in 1 s", index, exc)
            return False
        stdin = child.stdin
        assert stdin is not None
        line = json.dumps(config).encode() + b"\n"

        def write() -> None:
            with contextlib.suppress(OSError):  # (it died at once: seen as an exit)
                stdin.write(line)
                stdin.flush()

        await asyncio.to_thread(write)  # (a pipe holds 64 KiB; the child reads after its imports)
        self._children[index] = child
        self._started[index] = time.monotonic()
        log.info("acceptor %d started (pid %d)", index, child.pid)
        return True

    @staticmethod
    def _close_stdin(child: subprocess.Popen[bytes]) -> None:
        if child.stdin is not None:
            with contextlib.suppress(OSError):
                child.stdin.close()

    async def _stop_children(self) -> None:
        children = list(self._children.values())
        for child in children:
            self._close_stdin(child)  # the acceptor stops: its open requests are answered first
        deadline = time.monotonic() + self.graceful_seconds + 5.0
        for child in children:
            while child.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if child.poll() is None:
                log.warning("acceptor pid %d did not stop in time; killing it", child.pid)
                child.kill()
                await asyncio.to_thread(child.wait)
        self._children.clear()

    # -- the link -----------------------------------------------------------------------------
    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            peer = writer.get_extra_info("socket")
            _, uid, _ = _PEER.unpack(peer.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
            kind, payload = await asyncio.wait_for(read_frame(reader, SECRET_BYTES), HELLO_SECONDS)
            if uid != os.getuid() or kind != HELLO or not hmac.compare_digest(payload, self._secret):
                log.warning("a connection to the acceptors' link did not present the secret; closed")
                return
            writer.write(frame(WELCOME))
            while True:
                kind, payload = await read_frame(reader, self._frame_limit)
                if kind == CHECKED:
                    self._ways["checked"].inc()
                    await self._checked(payload, writer)
                elif kind == RAW:
                    self._ways["passed_on"].inc()
                    kind, body = await read_frame(reader, self._frame_limit)
                    if kind != BODY or not await self._raw(payload, body, writer):
                        return
                elif kind == CATALOG:
                    writer.write(frame(TABLES, json.dumps(self._catalog()).encode()))
                else:
                    log.warning("unknown frame %r on the acceptors' link; connection closed", kind)
                    return
        except (TimeoutError, LinkClosed, ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def _catalog(self) -> dict[str, Any]:
        intake = self.app.state.service.intake
        tables = {}
        for name, schema in intake.schemas.items():
            policy = intake.new_fields.get(name, "reject")
            tables[name] = {
                "schema": schema.model_dump(mode="json"),
                "new_fields": policy,
                "fingerprint": checked_against(schema, policy)[0],
            }
        return {"tables": tables}

    async def _checked(self, payload: bytes, writer: asyncio.StreamWriter) -> None:
        head, rest = split_head(payload)
        items, offset = [], 0
        for item in head["updates"]:
            message = rest[offset : offset + item["size"]]
            offset += item["size"]
            items.append(CheckedUpdate(item["table"], item["data_until"], item["fingerprint"], message))
        headers: dict[str, str] = {}
        try:
            content, replayed = await self.app.state.service.intake.submit_checked(items, head["key"], head["hash"])
            status = 202
            if replayed:
                headers["Idempotent-Replayed"] = "true"
        except StaleSchema:
            writer.write(frame(RESULT, b'{"stale":true}'))
            return
        except ServiceError as error:
            status, content, headers = error.status, error.body(), error_headers(error)
        except Exception:
            log.exception("checked updates from an acceptor failed")
            status, content = 500, "Internal Server Error"
        self.app.request_counts.record(head["route"], status, max(0.0, time.time() - head["began"]))
        answer = {"status": status, "content": content, "headers": headers}
        writer.write(frame(RESULT, json.dumps(answer, ensure_ascii=False, allow_nan=False).encode()))

    async def _raw(self, payload: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """A request as it came, through the service's own ASGI app; the answer streamed back.
        False when the answer was cut short (the link is then closed without its end)."""
        head, _ = split_head(payload)
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": head["http_version"],
            "method": head["method"],
            "scheme": head["scheme"],
            "path": head["path"],
            "raw_path": head["raw_path"].encode("latin-1"),
            "query_string": head["query_string"].encode("latin-1"),
            "root_path": head["root_path"],
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in head["headers"]],
            "client": tuple(head["client"]) if head["client"] else None,
            "server": tuple(head["server"]) if head["server"] else None,
        }
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        started = ended = False

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await asyncio.Future()  # the body came whole; the client's going is not told
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                start = {
                    "status": message["status"],
                    "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in message.get("headers", ())],
                }
                writer.write(frame(START, json.dumps(start).encode()))
                started = True
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    writer.write(frame(BODY, message["body"]))
                if not message.get("more_body", False):
                    writer.write(frame(END))
                    ended = True
                await writer.drain()

        try:
            await self.app(scope, receive, send)
        except (LinkClosed, ConnectionError):
            raise
        except Exception:  # as uvicorn logs it; Starlette answered 500 if it could
            log.exception("Exception in ASGI application (a request an acceptor passed on)")
        if ended:
            return True
        if started:
            return False  # cut short: the acceptor drops its client's connection
        writer.write(frame(START, json.dumps(INTERNAL_ERROR).encode()) + frame(BODY, b"Internal Server Error"))
        writer.write(frame(END))
        return True
