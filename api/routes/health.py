"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import Caller, Service

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness (no token needed)")
async def healthz(service: Service) -> JSONResponse:
    ok = service.failure is None
    return JSONResponse(
        {"status": "ok" if ok else "failing", "detail": service.failure}, status_code=200 if ok else 503
    )


@router.get("/readyz", summary="Ready once recovery finished and Spark is up")
async def readyz(service: Service, caller: Caller) -> JSONResponse:
    body: dict[str, Any] = {
        "ready": service.ready,
        "accepting": service.accepting,
        "recovered_updates": service.recovered_updates,
        "writer": service.sink.name if service.sink is not None else None,
        "detail": service.failure,
    }
    return JSONResponse(body, status_code=200 if service.ready else 503)


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(service: Service, caller: Caller) -> Response:
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)
