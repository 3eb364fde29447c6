"""Producers' endpoints: submit updates (acknowledged once durable in the WAL)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse

from api.deps import Body, Caller, Service
from api.schemas import AcksModel, MultiUpdateBody, UpdateBody, body_doc
from loader.auth import Authenticator
from loader.idempotency import request_hash
from loader.intake import parse_multi, parse_single

router = APIRouter(prefix="/v1", tags=["feeds"])

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


def _answer(response: dict, replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else {}
    return JSONResponse(response, status_code=202, headers=headers)


@router.post(
    "/tables/{table}/updates",
    status_code=202,
    response_model=AcksModel,
    openapi_extra=body_doc(UpdateBody, ndjson=True),
    summary="Submit one update of one table",
)
async def submit_update(
    table: str,
    request: Request,
    service: Service,
    caller: Caller,
    body: Body,
    idempotency_key: IdempotencyKey = None,
    data_until: Annotated[str | None, Query(description="For NDJSON bodies: end of the data interval.")] = None,
) -> JSONResponse:
    Authenticator.require_submit(caller, table)
    service.entry(table)  # 404 before parsing the body
    parsed = parse_single(body, request.headers.get("content-type"), table, data_until)
    digest = request_hash("POST", request.url.path, str(request.url.query), body)
    response, replayed = await service.submit_once(idempotency_key, digest, lambda: service.validate([parsed]))
    return _answer(response, replayed)


@router.post(
    "/updates",
    status_code=202,
    response_model=AcksModel,
    openapi_extra=body_doc(MultiUpdateBody),
    summary="Submit several updates of several tables in one request",
)
async def submit_updates(
    request: Request, service: Service, caller: Caller, body: Body, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    parsed = parse_multi(body, request.headers.get("content-type"))
    for item in parsed:
        Authenticator.require_submit(caller, item.table)
        service.entry(item.table)
    digest = request_hash("POST", request.url.path, body)
    response, replayed = await service.submit_once(idempotency_key, digest, lambda: service.validate(parsed))
    return _answer(response, replayed)
