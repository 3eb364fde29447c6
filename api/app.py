"""The FastAPI application: routes, error mapping, request metrics, service lifespan."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.routes import admin, feeds, health, quarantine, tables, trace
from loader.auth import Authenticator
from loader.config import Settings
from loader.errors import ServiceError, Unavailable
from loader.metrics import Metrics
from loader.service import LoaderService


class RequestMetrics:
    """Counts and times every request by route template and status (pure ASGI: cheap)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

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
            key = (getattr(route, "path", "unmatched"), status)
            children = self._children.get(key)
            if children is None:  # labels() costs a lock and a dict build: once per pair
                labels = (key[0], str(status))
                children = self.metrics.requests.labels(*labels), self.metrics.request_duration.labels(*labels)
                self._children[key] = children
            children[0].inc()
            children[1].observe(time.perf_counter() - began)


def _error_response(error: ServiceError) -> JSONResponse:
    headers = {}
    if isinstance(error, Unavailable):
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    if error.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def create_app(settings: Settings, service: LoaderService | None = None, *, load: bool = True) -> FastAPI:
    service = service or LoaderService(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start(load=load)
        from loader.maintenance import Maintenance

        maintenance = Maintenance(service)
        maintenance.start()
        try:
            yield
        finally:
            await maintenance.stop()
            await service.stop()

    app = FastAPI(
        title="warehouse-loader",
        version="0.1.0",
        description="Real-time warehouse loader: durable feed intake, freshness-optimal scheduling, Delta Lake loads.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.authenticator = Authenticator.from_settings(settings)
    for module in (feeds, tables, admin, quarantine, trace, health):
        app.include_router(module.router)
    app.add_middleware(RequestMetrics, metrics=service.metrics)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return _error_response(exc)

    def openapi() -> dict[str, Any]:
        # Feed bodies are documented through openapi_extra; lift their $defs into components.
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                for media in operation.get("requestBody", {}).get("content", {}).values():
                    components.update(media.get("schema", {}).pop("$defs", {}))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
