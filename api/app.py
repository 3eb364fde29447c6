"""The FastAPI application: routes, error mapping, request metrics, service lifespan."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from api.auth import Authenticator
from api.deps import get_operator, get_principal
from api.errors import error_response
from api.fast_intake import FastIntake
from api.request_metrics import RequestCounts, RequestMetrics
from api.routes import admin, feeds, health, quarantine, tables, trace, ui
from api.schemas import ErrorModel, error_responses
from loader.config import Settings
from loader.core.errors import ServiceError
from loader.ops.metrics import Metrics
from loader.service import LoaderService, SinkFactory


def _dependency_calls(dependant: Any) -> Iterator[Any]:
    for sub in getattr(dependant, "dependencies", ()):
        yield sub.call
        yield from _dependency_calls(sub)


def _refusal(request: Request) -> ServiceError | None:
    """The 401/403 the route's token dependencies give this caller, if any.

    FastAPI parses a JSON body before it runs a route's dependencies, so a malformed body
    was answered 400/422 even without a token, telling strangers what an operator route
    expects. The error handlers below ask this first: authentication comes before
    validation on every route.
    """
    route = request.scope.get("route")
    calls = set(_dependency_calls(getattr(route, "dependant", None)))
    if get_principal not in calls:
        return None
    try:
        principal = request.app.state.authenticator.authenticate(request.headers.get("authorization"))
        if get_operator in calls:
            Authenticator.require_operator(principal)
    except ServiceError as refused:
        return refused
    return None


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    """FastAPI's parameter and body validation, in the service's error shape (``ErrorModel``).

    ``detail`` keeps FastAPI's list of problems without the ``input`` it echoes: a
    rejected body can be large, and error bodies should not repeat what the caller sent.
    """
    problems = [{key: value for key, value in error.items() if key not in ("input", "url")} for error in exc.errors()]
    named = "; ".join(
        f"{'.'.join(str(part) for part in problem.get('loc', ()))}: {problem.get('msg', 'invalid')}"
        for problem in problems[:3]
    )
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    body = {"error": "invalid", "message": f"invalid request: {named}{more}", "detail": jsonable_encoder(problems)}
    return JSONResponse(body, status_code=422)


def _http_error_response(exc: HTTPException, request: Request) -> JSONResponse:
    """Starlette's own errors (no such path: 404, wrong method: 405) in the service's error shape."""
    if exc.status_code == 404:
        message = f"no endpoint {request.url.path}; the API is described at /docs"
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"{request.method} is not allowed on {request.url.path}; allowed: {allowed}"
    elif exc.status_code == 400:  # FastAPI: a JSON body that is not even text
        message = f"{exc.detail}: send a UTF-8 JSON body"
    else:
        message = str(exc.detail)
    code = HTTPStatus(exc.status_code).phrase.lower().replace(" ", "_").replace("-", "_")
    return JSONResponse({"error": code, "message": message}, status_code=exc.status_code, headers=exc.headers)


def _document_bearer_auth(schema: dict[str, Any]) -> None:
    """Every operation needs a bearer token unless it says ``security: []`` (``/healthz``).

    The token is documented as a security scheme rather than a header parameter, so
    that clients and schemathesis treat it as credentials and not as data to generate.
    """
    schema.setdefault("components", {})["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "An operator or producer token (configured `auth_tokens`, or `<data_dir>/tokens.json`).",
        }
    }
    schema["security"] = [{"bearer": []}]


def _document_validation_errors(schema: dict[str, Any]) -> None:
    """FastAPI documents its 422 as ``HTTPValidationError``; the handler above sends ``ErrorModel``.

    Point every such 422 at ``ErrorModel``, and drop it from operations that have no
    documented parameter or body (their only parameter is the hidden Authorization
    header, which cannot fail validation).
    """
    fastapi_ref = "#/components/schemas/HTTPValidationError"
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            response = operation.get("responses", {}).get("422")
            documented = (response or {}).get("content", {}).get("application/json", {}).get("schema", {})
            if documented.get("$ref") != fastapi_ref:
                continue
            if operation.get("parameters") or operation.get("requestBody"):
                operation["responses"]["422"] = error_responses(422)[422]
            else:
                del operation["responses"]["422"]
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    if fastapi_ref not in json.dumps(schema.get("paths", {})):
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
    components.setdefault("ErrorModel", ErrorModel.model_json_schema(ref_template="#/components/schemas/{model}"))


class LoaderApp(FastAPI):
    """FastAPI with the two submit routes served ahead of its middleware stack
    (api/fast_intake.py); ``fast_intake=False`` leaves them to the declared routes."""

    def __init__(
        self,
        *,
        counts: RequestCounts,
        start: Callable[[AsyncExitStack], Awaitable[LoaderService]],
        fast_intake: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.request_counts = counts
        self.fast_intake = fast_intake
        self._start = start

    async def start_service(self, exit_stack: AsyncExitStack) -> LoaderService:
        """Start the service this app serves, its undoing on ``exit_stack``.

        The lifespan calls it; ``loader serve`` calls it itself (and runs uvicorn with the
        lifespan off), so that an error it anticipates at start reaches the command as an
        exception to print in one line, not as a lifespan failure uvicorn logs with its
        stack, and a signal during start-up is the command's to handle.
        """
        self.state.service = await self._start(exit_stack)
        return self.state.service

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        return FastIntake(stack, self.state, self.request_counts) if self.fast_intake else stack


def create_app(
    settings: Settings,
    *,
    load: bool = True,
    metrics: Metrics | None = None,
    sink_factory: SinkFactory | None = None,
    fast_intake: bool = True,
) -> LoaderApp:
    """The HTTP face of one service: it is started with the app and stopped with it
    (``LoaderService.start`` on the lifespan's exit stack); ``app.state.service`` once started.

    ``load=False`` keeps Spark and loading off (intake only); ``sink_factory`` replaces the
    Spark-backed Delta writer (tests); ``fast_intake=False`` serves the submit routes through
    FastAPI like every other (the reference the fast path is compared with).
    """
    metrics = metrics or Metrics()

    @asynccontextmanager
    async def lifespan(app: LoaderApp) -> AsyncIterator[None]:
        async with AsyncExitStack() as exit_stack:
            await app.start_service(exit_stack)
            yield

    def start(exit_stack: AsyncExitStack) -> Awaitable[LoaderService]:
        return LoaderService.start(settings, exit_stack, load=load, metrics=metrics, sink_factory=sink_factory)

    app = LoaderApp(
        counts=RequestCounts(metrics),
        start=start,
        fast_intake=fast_intake,
        title="warehouse-loader",
        version="0.1.0",
        description="Real-time warehouse loader: durable feed intake, freshness-optimal scheduling, Delta Lake loads.",
        lifespan=lifespan,
        # The service exports Prometheus metrics itself (loader/ops/metrics.py); FastAPI's own
        # OpenTelemetry instrumentation asked the global providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.authenticator = Authenticator.from_settings(settings)
    app.state.settings = settings
    for module in (feeds, tables, admin, quarantine, trace, health, ui):
        app.include_router(module.router)
    app.add_middleware(RequestMetrics, counts=app.request_counts)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        refused = _refusal(request)
        return error_response(refused) if refused is not None else _validation_response(exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        refused = _refusal(request) if exc.status_code == 400 else None  # 400: a body FastAPI could not parse
        return error_response(refused) if refused is not None else _http_error_response(exc, request)

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
        _document_bearer_auth(schema)
        _document_validation_errors(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
