"""An acceptor process: HTTP on the service's listening socket, submit requests checked here.

Started by the service (api/acceptors/gateway.py), which writes this process's
configuration (the link's address and secret, the tokens, the body limit) on its stdin.
For a submit request it does what ``Intake.submit_one`` and ``submit_many`` do before
anything is numbered (the key, the table's name, the caller's permission, the body, its
rows against the schema, the memory they would take), with the same functions
(loader/intake/reading.py), and sends the service the checked rows as Arrow IPC. Whatever
it cannot take that far goes to the service as it came, to be answered there: every other
route, a refusal (so that the answer's words and metrics are the service's), landing
files, fields a table adds from its feed, a table it has not heard of yet.

It stops when the service closes its stdin (SIGINT and SIGTERM are ignored: they are the
service's, which stops its acceptors first), and dies with the service: a service killed
mid-run leaves no process holding its port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Generator
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import uvicorn
from starlette.types import Receive, Scope, Send

from api.acceptors.wire import (
    BODY,
    CATALOG,
    CHECKED,
    END,
    HELLO,
    RAW,
    RESULT,
    START,
    TABLES,
    WELCOME,
    LinkClosed,
    frame,
    read_frame,
    with_head,
)
from api.auth import Authenticator, Principal
from api.fast_intake import SUBMIT_ONE, answer, route_path, submit_route
from loader.config import TokenConfig
from loader.core.errors import ServiceError
from loader.core.schema import TableSchema
from loader.intake.idempotency import check_key, request_hash
from loader.intake.reading import batch_message, changed_by_feed, checked, read_single
from loader.intake.requests import ValidUpdate, check_expansion, check_table_name, parse_multi

log = logging.getLogger("loader.acceptor")

#: Idle connections to the service kept for the next requests.
IDLE_LINKS = 64
#: The catalog is asked for again at most this often (a table it has not heard of, a stale schema).
CATALOG_SECONDS = 0.5
PR_SET_PDEATHSIG = 1


class Link:
    """Connections to the service, one request at a time on each (api/acceptors/wire.py)."""

    def __init__(self, address: str, secret: bytes) -> None:
        self.address = address
        self.secret = secret
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # Connected here, not by the loop (uvloop takes no address in the abstract namespace),
        # on a thread: a connect waits while the service's backlog of new connections is full.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await asyncio.to_thread(sock.connect, self.address)
            sock.setblocking(False)
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        try:
            writer.write(frame(HELLO, self.secret))
            kind, _ = await read_frame(reader)
            if kind != WELCOME:
                raise LinkClosed("the service refused the link")
        except BaseException:
            writer.close()
            raise
        return reader, writer

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        conn = self._idle.pop() if self._idle else await self._connect()
        reusable = False
        try:
            yield conn
            reusable = True
        finally:
            if reusable and len(self._idle) < IDLE_LINKS:
                self._idle.append(conn)
            else:
                conn[1].close()

    async def call(self, kind: bytes, payload: bytes, expect: bytes) -> bytes:
        async with self.connection() as (reader, writer):
            writer.write(frame(kind, payload))
            got, body = await read_frame(reader)
            if got != expect:
                raise LinkClosed(f"expected a {expect!r} frame from the service, got {got!r}")
            return body


class _Admitted(NamedTuple):
    """A request past the checks before its body: its caller (None: a request with no body
    on another route) and its Idempotency-Key."""

    caller: Principal | None
    key: str | None


class Acceptor:
    """The acceptor's ASGI app."""

    def __init__(self, link: Link, authenticator: Authenticator, max_body_bytes: int) -> None:
        self.link = link
        self.authenticator = authenticator
        self.max_body_bytes = max_body_bytes
        #: table -> (schema, on_new_fields, the service's fingerprint of both)
        self.catalog: dict[str, tuple[TableSchema, str, str]] = {}
        self._catalog_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        self._catalog_at = time.monotonic()
        tables = json.loads(await self.link.call(CATALOG, b"", TABLES))["tables"]
        catalog = {}
        for name, entry in tables.items():
            known = self.catalog.get(name)
            if known is not None and known[2] == entry["fingerprint"]:
                catalog[name] = known
            else:
                schema = TableSchema.model_validate(entry["schema"])
                catalog[name] = (schema, entry["new_fields"], entry["fingerprint"])
        self.catalog = catalog

    def _refresh_soon(self) -> None:
        if (self._refreshing is None or self._refreshing.done()) and time.monotonic() - self._catalog_at > (
            CATALOG_SECONDS
        ):
            self._refreshing = asyncio.create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except (LinkClosed, ConnectionError, OSError) as exc:
            log.warning("could not read the service's tables: %s", exc)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # (lifespan is off; the service has no websocket route)
            return
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:  # the first of repeated headers, as Starlette's Headers.get
            headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
        began = time.time()
        route = submit_route(route_path(scope)) if scope["method"] == "POST" else None
        started: list[bool] = []
        try:
            admitted = self._before_body(route, headers)
            if admitted is None:
                # Refused before its body, as the service refuses it: the service is asked
                # without the body (it answers before reading one), and nothing is buffered.
                await self._forward(scope, b"", send, started)
                return
            body = await self._body(receive, headers.get("content-length"))
            if body is None:
                return  # the client went away: nothing was submitted, nothing to answer
            if route is not None and len(body) <= self.max_body_bytes:
                reply = await self._checked(route[0], route[1], scope, headers, body, began, admitted)
                if reply is not None:
                    await answer(send, *reply)
                    return
            await self._forward(scope, body, send, started)
        except (LinkClosed, ConnectionError) as exc:
            if started:
                raise  # an answer cut short: the client's connection is dropped, as the service's would be
            log.warning("the service did not answer a request (%s)", exc)
            message = (
                "the service could not be reached to answer this request; an update it held may or may not have "
                "been accepted: retry it with the same Idempotency-Key"
            )
            await answer(send, 503, {"error": "unavailable", "message": message}, {"Retry-After": "1"})

    def _before_body(self, route: tuple[str, str | None] | None, headers: dict[str, str]) -> _Admitted | None:
        """The checks the service makes before it reads a body; None when one refuses. A token
        (any route with a body: without one the service answers 401 first), and for a submit
        route its Idempotency-Key, and for ``POST /v1/tables/{t}/updates`` the table's name and
        the caller's permission for it."""
        if route is None and headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers:
            return _Admitted(None, None)  # (no body to hold)
        try:
            caller = self.authenticator.authenticate(headers.get("authorization"))
            key = check_key(headers.get("idempotency-key")) if route is not None else None
            if route is not None and route[1] is not None:
                check_table_name(route[1])
                Authenticator.require_submit(caller, route[1])
        except ServiceError:
            return None
        return _Admitted(caller, key)

    async def _body(self, receive: Receive, declared: str | None) -> bytes | None:
        """The body, but never more than one byte past the limit, which the service refuses
        (413) whether it sees the Content-Length or the byte past the limit; never checked here."""
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return b""  # (the service refuses it by its Content-Length before reading anything)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body_bytes or not message.get("more_body", False):
                return b"".join(chunks)[: self.max_body_bytes + 1]

    async def _checked(
        self,
        route: str,
        table: str | None,
        scope: Scope,
        headers: dict[str, str],
        body: bytes,
        began: float,
        admitted: _Admitted,
    ) -> tuple[int, Any, dict[str, str]] | None:
        """The service's answer to the updates checked here; None when the service should see
        the request as it came."""
        try:
            checked_updates = await self._check(route, table, scope, headers, body, admitted)
        except ServiceError:
            return None  # refused: the service refuses it again, in its words and in its metrics
        if checked_updates is None:
            return None
        updates, digest = checked_updates
        head = {
            "route": route,
            "key": admitted.key,
            "hash": digest,
            "began": began,
            "updates": [
                {"table": u.table, "data_until": u.data_until, "fingerprint": f, "size": len(message)}
                for u, message, f in updates
            ],
        }
        payload = with_head(head, *(message for _, message, _ in updates))
        result = json.loads(await self.link.call(CHECKED, payload, RESULT))
        if result.get("stale"):
            self._refresh_soon()
            return None
        return result["status"], result["content"], result["headers"]

    async def _check(
        self, route: str, table: str | None, scope: Scope, headers: dict[str, str], body: bytes, admitted: _Admitted
    ) -> tuple[list[tuple[ValidUpdate, bytes, str]], str] | None:
        """As ``Intake.submit_one`` / ``submit_many`` up to their ``submit_once``, after the
        checks before the body (``_before_body``): each update with its record batch message
        and the fingerprint of what it was checked against, and the request's hash; None when
        the service must decide (a refusal raises)."""
        catalog = self.catalog  # one snapshot for the whole request: a refresh may replace it
        caller, key = admitted
        assert caller is not None
        query = scope.get("query_string", b"").decode()
        path = scope["path"].replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")  # Starlette's URL.path
        content_type = headers.get("content-type")
        if route == SUBMIT_ONE:
            assert table is not None
            if table not in catalog:
                self._refresh_soon()  # (a table registered since: the service answers this one)
                return None
            schema, policy, _ = catalog[table]
            data_until = dict(parse_qsl(query, keep_blank_values=True)).get("data_until") if query else None
            parsed = [await read_single(body, content_type, table, data_until, schema, policy, self.max_body_bytes)]
            digest = request_hash("POST", path, query, body) if key is not None else ""
        else:
            parsed = parse_multi(body, content_type)
            for item in parsed:
                Authenticator.require_submit(caller, item.table)
            if any(item.table not in catalog for item in parsed):
                self._refresh_soon()
                return None
            if any(catalog[item.table][0].exact_numbers for item in parsed):
                parsed = parse_multi(body, content_type, exact=True)
            digest = request_hash("POST", path, body) if key is not None else ""
        schemas = {item.table: catalog[item.table][0] for item in parsed}
        for item in parsed:
            schema, policy, _ = catalog[item.table]
            if item.files or changed_by_feed(item, schema, policy):
                return None  # landing files, fields to add or drop: the service's to do
        check_expansion(parsed, schemas, self.max_body_bytes, len(body))
        out = []
        for item in parsed:
            valid = checked(item, schemas[item.table])
            message = batch_message(valid.rows) if valid.rows is not None else None
            if message is None:
                return None
            out.append((valid, message, catalog[item.table][2]))
        return out, digest

    async def _forward(self, scope: Scope, body: bytes, send: Send, started: list[bool]) -> None:
        """The request as it came, to the service; its answer streamed back. ``started`` gets
        an item once the answer's start was sent (a link lost after that cuts the answer)."""
        head = {
            "http_version": scope.get("http_version", "1.1"),
            "method": scope["method"],
            "scheme": scope.get("scheme", "http"),
            "path": scope["path"],
            "raw_path": (scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
            "query_string": scope.get("query_string", b"").decode("latin-1"),
            "root_path": scope.get("root_path", ""),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "client": list(scope["client"]) if scope.get("client") else None,
            "server": list(scope["server"]) if scope.get("server") else None,
        }
        async with self.link.connection() as (reader, writer):
            writer.write(frame(RAW, with_head(head)) + frame(BODY, body))
            while True:
                kind, payload = await read_frame(reader)
                if kind == START:
                    start = json.loads(payload)
                    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in start["headers"]]
                    await send({"type": "http.response.start", "status": start["status"], "headers": raw})
                    started.append(True)
                elif kind == END:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                else:
                    await send({"type": "http.response.body", "body": payload, "more_body": True})


def _die_with(parent: int) -> None:
    """SIGKILL when the service's process ends, however it ends (Linux), and a watch besides."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(3)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the acceptor stops when the service closes its stdin."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _serve(config: dict[str, Any]) -> None:
    link = Link(config["link"], bytes.fromhex(config["secret"]))
    tokens = [TokenConfig.model_validate(t) for t in config["tokens"]]
    acceptor = Acceptor(link, Authenticator(tokens), config["max_body_bytes"])
    await acceptor.refresh()
    server = _Server(
        uvicorn.Config(
            acceptor,
            lifespan="off",
            log_level="warning",
            timeout_graceful_shutdown=config["graceful_seconds"],
        )
    )
    loop = asyncio.get_running_loop()

    def stop_at_eof() -> None:  # the service closed our stdin: stop (open requests are answered)
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(setattr, server, "should_exit", True)

    threading.Thread(target=stop_at_eof, name="stdin-watch", daemon=True).start()
    await server.serve(sockets=[socket.socket(fileno=config["fd"])])


def main() -> int:
    # A terminal's Ctrl-C or a supervisor's SIGTERM to the whole group is for the service, which
    # stops its acceptors in order (their open requests need it running).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    config = json.loads(sys.stdin.buffer.readline())
    _die_with(config["parent"])
    logging.basicConfig(
        level=config["log_level"],
        format=f"%(asctime)s %(levelname)s [acceptor-{config['index']} pid {os.getpid()}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop
    except ImportError:  # (uvicorn[standard] brings it; plain asyncio serves too)
        asyncio.run(_serve(config))
    else:
        uvloop.run(_serve(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
