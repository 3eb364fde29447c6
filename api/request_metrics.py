"""Request counts and durations by route template and status, for Prometheus."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loader.ops.metrics import Metrics


class RequestCounts:
    """The per-(route, status) children of the request metrics, looked up once per pair:
    ``labels()`` costs a lock and a dict build, too much for every request. Shared by the
    middleware and the fast submit path (api/fast_intake.py), which answers ahead of it."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def record(self, route: str, status: int, seconds: float) -> None:
        key = (route, status)
        children = self._children.get(key)
        if children is None:
            labels = (route, str(status))
            children = self.metrics.requests.labels(*labels), self.metrics.request_duration.labels(*labels)
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)


class RequestMetrics:
    """Counts and times every request FastAPI serves (pure ASGI: cheap)."""

    def __init__(self, app: ASGIApp, counts: RequestCounts) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            self.counts.record(getattr(route, "path", "unmatched"), status, time.perf_counter() - began)
