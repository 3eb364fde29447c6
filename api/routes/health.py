"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import Caller, Service
from api.schemas import AUTHENTICATED, HealthModel, ReadinessModel, error_responses
from loader.core.errors import Invalid

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    responses={
        200: {"model": HealthModel, "description": "Alive."},
        503: {"model": HealthModel, "description": "The service failed and cannot go on (restart it)."},
    },
    openapi_extra={"security": []},
    summary="Liveness (no token needed)",
)
async def healthz(service: Service) -> JSONResponse:
    ok = service.failure is None
    return JSONResponse(
        {"status": "ok" if ok else "failing", "detail": service.failure}, status_code=200 if ok else 503
    )


@router.get(
    "/readyz",
    responses={
        200: {"model": ReadinessModel, "description": "Ready."},
        503: {"model": ReadinessModel, "description": "Not ready yet (recovering, starting Spark) or failed."},
        **error_responses(*AUTHENTICATED),
    },
    summary="Ready once recovery finished and Spark is up",
)
async def readyz(service: Service, caller: Caller) -> JSONResponse:
    # Not ready while intake is closed by the WAL's disk: a balancer should send producers elsewhere.
    ready = service.ready and service.intake.wal_fault is None
    body: dict[str, Any] = {
        "ready": ready,
        "accepting": service.intake.accepting and service.intake.wal_fault is None,
        "recovered_updates": service.recovered_updates,
        "writer": service.sink.name if service.sink is not None else None,
        "detail": service.failure,
        "faults": service.faults(),
    }
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": "Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **error_responses(*AUTHENTICATED, 422),
    },
    summary="Prometheus metrics",
)
async def metrics(
    service: Service,
    caller: Caller,
    names: Annotated[
        str | None,
        Query(
            max_length=8192,
            description="Comma-separated metric families (`loader_workers`) or samples "
            "(`loader_tables_batches_total`) to answer with, the rest left out: a page polling a few "
            "aggregates every few seconds gets them without every table's series being built.",
        ),
    ] = None,
) -> Response:
    if names is None:
        source: Any = service.metrics.registry
    else:
        wanted = {name.strip() for name in names.split(",")}
        if not all(wanted):
            raise Invalid("names: give metric names separated by commas, e.g. names=loader_workers,loader_tables")
        source = service.metrics.selected(wanted)
    return Response(generate_latest(source), media_type=CONTENT_TYPE_LATEST)
