"""The two submit routes served straight from ASGI, ahead of FastAPI's middleware stack.

Why: a submit request waits for the WAL, and with a request that suspends, FastAPI's and
Starlette's layers (error and exception middleware, the exit-stack middleware, routing,
the Request and JSONResponse objects) cost the event loop about 170 µs per request,
as much as intake's own work (measured in process, BENCHMARKS.md "isolation"). The event
loop's time per request is what caps single-update intake, so these two hot routes skip
them. Nothing else does: every other path, method and scope type goes to FastAPI.

The answers are the same as the declared routes' (api/routes/feeds.py, which keep the
OpenAPI document and serve when the app is built without this path): the same checks in
the same order (one call into loader/intake/submission.py), the same error bodies and
headers (api/errors.py), the same request metrics (api/request_metrics.py). A test sends
the same requests both ways and compares the answers (tests/api/test_fast_intake.py).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import State
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import Authenticator
from api.errors import error_headers
from api.request_metrics import RequestCounts
from loader.core.errors import BadRequest, ServiceError, TooLarge
from loader.intake.submission import SubmitRequest

log = logging.getLogger(__name__)

#: The route templates, as FastAPI labels them in the request metrics.
SUBMIT_ONE = "/v1/tables/{table}/updates"
SUBMIT_MANY = "/v1/updates"
_PREFIX, _SUFFIX = "/v1/tables/", "/updates"
#: A client that went away before its body arrived: nothing was submitted, nothing to answer
#: (nginx's "client closed request").
CLIENT_CLOSED = 499
PLAIN = b"text/plain; charset=utf-8"


def route_path(scope: Scope) -> str:
    """The path Starlette routes on (``starlette._utils.get_route_path``, a private helper:
    copied rather than imported): ``path`` less a ``root_path`` prefix it starts with."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root) and path != root and path[len(root)] == "/":
        return path[len(root) :]
    return "" if root and path == root else path


def submit_route(path: str) -> tuple[str, str | None] | None:
    """The submit route ``path`` is, and its table: what Starlette's ``{table}`` (``[^/]+``) matches."""
    if path == SUBMIT_MANY:
        return SUBMIT_MANY, None
    if path.startswith(_PREFIX) and path.endswith(_SUFFIX):
        table = path[len(_PREFIX) : -len(_SUFFIX)]
        if table and "/" not in table:
            return SUBMIT_ONE, table
    return None


def _json(content: Any) -> bytes:
    # As starlette.responses.JSONResponse renders it.
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


async def answer(send: Send, status: int, content: Any, headers: dict[str, str]) -> None:
    body = _json(content)
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw += [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class FastIntake:
    """ASGI: POSTs to the submit routes are served here; everything else goes to ``app``."""

    def __init__(self, app: ASGIApp, state: State, counts: RequestCounts) -> None:
        self.app = app
        self.state = state
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = submit_route(route_path(scope))
            if route is not None:
                await self._serve(route[0], route[1], scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _serve(self, route: str, table: str | None, scope: Scope, receive: Receive, send: Send) -> None:
        began = time.perf_counter()
        status = 500
        started = False

        async def reply(code: int, content: Any, headers: dict[str, str]) -> None:
            nonlocal status, started
            status, started = code, True
            await answer(send, code, content, headers)

        try:
            try:
                response, replayed = await self._submit(route, table, scope, receive)
            except ServiceError as error:
                await reply(error.status, error.body(), error_headers(error))
                return
            await reply(202, response, {"Idempotent-Replayed": "true"} if replayed else {})
        except ClientDisconnect:
            status = CLIENT_CLOSED
        except Exception:
            if not started:  # as Starlette's ServerErrorMiddleware answers, then re-raises for the server's log
                status = 500
                body = b"Internal Server Error"
                headers = [(b"content-length", str(len(body)).encode()), (b"content-type", PLAIN)]
                await send({"type": "http.response.start", "status": 500, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            raise
        finally:
            self.counts.record(route, status, time.perf_counter() - began)

    async def _submit(self, route: str, table: str | None, scope: Scope, receive: Receive) -> tuple[dict, bool]:
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:  # the first of repeated headers, as Starlette's Headers.get
            headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
        state = self.state
        caller = state.authenticator.authenticate(headers.get("authorization"))
        query = scope.get("query_string", b"").decode()
        limit: int = state.settings.intake.max_body_bytes

        async def read_body() -> bytes:
            return await _read_body(receive, headers.get("content-length"), limit)

        submitted = SubmitRequest(
            path=scope["path"].replace("?", "%3F").replace("#", "%23").replace("\\", "%5C"),  # Starlette's URL.path
            query=query,
            content_type=headers.get("content-type"),
            idempotency_key=headers.get("idempotency-key"),
            read_body=read_body,
            permit=lambda name: Authenticator.require_submit(caller, name),
            data_until=dict(parse_qsl(query, keep_blank_values=True)).get("data_until") if query else None,
        )
        intake = state.service.intake
        if route == SUBMIT_ONE:
            assert table is not None
            return await intake.submit_one(table, submitted)
        return await intake.submit_many(submitted)


async def _read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """As api/deps.py ``read_body``: 413 as soon as the body passes the limit, never buffered whole."""
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise BadRequest("Content-Length is not a number") from None
        if size > limit:
            raise TooLarge(f"body of {size} bytes exceeds the limit of {limit}; split the update or use files")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body exceeds the limit of {limit} bytes; split the update or use files")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
