"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import Caller, Service
from api.schemas import AUTHENTICATED, HealthModel, ReadinessModel, error_responses

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
        **error_responses(*AUTHENTICATED),
    },
    summary="Prometheus metrics",
)
async def metrics(service: Service, caller: Caller) -> Response:
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)
