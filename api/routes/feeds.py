"""Producers' endpoints: submit updates (acknowledged once durable in the WAL).

These two routes are the service's hot path, so they read the token, headers, query and
body from the request themselves instead of through FastAPI's dependency and parameter
machinery, which profiles showed to be about a third of a small request's cost. Their
parameters are still documented in the OpenAPI document (``openapi_extra``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.deps import read_body
from api.schemas import AcksModel, MultiUpdateBody, UpdateBody, body_doc
from loader.auth import Authenticator, Principal
from loader.errors import Invalid
from loader.idempotency import request_hash
from loader.intake import parse_multi, parse_single
from loader.service import LoaderService

router = APIRouter(prefix="/v1", tags=["feeds"])

MAX_KEY_LENGTH = 200
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes a retried submission return the first answer instead of loading twice.",
    "schema": {"type": "string", "maxLength": MAX_KEY_LENGTH},
}
DATA_UNTIL = {
    "name": "data_until",
    "in": "query",
    "required": False,
    "description": "For NDJSON bodies: end of the data interval (Unix seconds or ISO-8601).",
    "schema": {"type": "string"},
}
AUTHORIZATION = {
    "name": "Authorization",
    "in": "header",
    "required": True,
    "description": "Bearer <producer or operator token>",
    "schema": {"type": "string"},
}


def _caller(request: Request) -> tuple[LoaderService, Principal, str | None]:
    state = request.app.state
    principal = state.authenticator.authenticate(request.headers.get("authorization"))
    key = request.headers.get("idempotency-key")
    if key is not None and len(key) > MAX_KEY_LENGTH:
        raise Invalid(f"Idempotency-Key is longer than {MAX_KEY_LENGTH} characters")
    return state.service, principal, key


def _answer(response: dict, replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(response, status_code=202, headers=headers)


@router.post(
    "/tables/{table}/updates",
    status_code=202,
    response_model=AcksModel,
    openapi_extra=body_doc(UpdateBody, ndjson=True, parameters=[AUTHORIZATION, IDEMPOTENCY_KEY, DATA_UNTIL]),
    summary="Submit one update of one table",
)
async def submit_update(table: str, request: Request) -> JSONResponse:
    service, caller, key = _caller(request)
    Authenticator.require_submit(caller, table)
    service.entry(table)  # 404 before reading the body
    body = await read_body(request)
    data_until = request.query_params.get("data_until")
    parsed = parse_single(body, request.headers.get("content-type"), table, data_until)
    digest = request_hash("POST", request.url.path, str(request.url.query), body)
    response, replayed = await service.submit_once(key, digest, lambda: service.validate([parsed]))
    return _answer(response, replayed)


@router.post(
    "/updates",
    status_code=202,
    response_model=AcksModel,
    openapi_extra=body_doc(MultiUpdateBody, parameters=[AUTHORIZATION, IDEMPOTENCY_KEY]),
    summary="Submit several updates of several tables in one request",
)
async def submit_updates(request: Request) -> JSONResponse:
    service, caller, key = _caller(request)
    body = await read_body(request)
    parsed = parse_multi(body, request.headers.get("content-type"))
    for item in parsed:
        Authenticator.require_submit(caller, item.table)
        service.entry(item.table)
    digest = request_hash("POST", request.url.path, body)
    response, replayed = await service.submit_once(key, digest, lambda: service.validate(parsed))
    return _answer(response, replayed)
