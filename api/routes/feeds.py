"""Producers' endpoints: submit updates (acknowledged once durable in the WAL).

These two routes are the service's hot path, so they read the token, headers, query and
body from the request themselves instead of through FastAPI's dependency and parameter
machinery, which profiles showed to be about a third of a small request's cost. Their
parameters are still documented in the OpenAPI document (``openapi_extra``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.auth import Authenticator, Principal
from api.deps import read_body
from api.schemas import AcksModel, MultiUpdateBody, UpdateBody, body_doc, error_responses
from loader.intake.idempotency import MAX_KEY_LENGTH, check_key, request_hash
from loader.intake.requests import check_expansion, check_table_name, parse_multi, parse_single
from loader.service import LoaderService

router = APIRouter(prefix="/v1", tags=["feeds"])

IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes a retried submission return the first answer instead of loading twice.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": "^[ -~]+$"},
}
DATA_UNTIL = {
    "name": "data_until",
    "in": "query",
    "required": False,
    "description": "For NDJSON bodies: end of the data interval (Unix seconds or ISO-8601).",
    "schema": {"type": "string"},
}
#: What a submission can be refused with (the token is the document's bearer security scheme).
SUBMIT_ERRORS = error_responses(400, 401, 403, 404, 409, 413, 415, 422, 503)
REPLAYED = {
    "Idempotent-Replayed": {
        "description": "`true` when this is the stored answer to an earlier request with the same Idempotency-Key.",
        "schema": {"type": "string"},
    }
}


def _caller(request: Request) -> tuple[LoaderService, Principal, str | None]:
    state = request.app.state
    principal = state.authenticator.authenticate(request.headers.get("authorization"))
    key = check_key(request.headers.get("idempotency-key"))
    return state.service, principal, key


def _answer(response: dict, replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(response, status_code=202, headers=headers)


@router.post(
    "/tables/{table}/updates",
    status_code=202,
    response_model=AcksModel,
    responses={202: {"description": "Durable in the WAL: one acknowledgement.", "headers": REPLAYED}, **SUBMIT_ERRORS},
    openapi_extra=body_doc(UpdateBody, ndjson=True, parameters=[IDEMPOTENCY_KEY, DATA_UNTIL]),
    summary="Submit one update of one table",
)
async def submit_update(table: str, request: Request) -> JSONResponse:
    service, caller, key = _caller(request)
    check_table_name(table)  # 404 quoting no more than a few characters of a hostile name
    Authenticator.require_submit(caller, table)
    entry = service.entry(table)  # 404 before reading the body
    body = await read_body(request)
    data_until = request.query_params.get("data_until")
    parsed = parse_single(body, request.headers.get("content-type"), table, data_until)
    check_expansion([parsed], {table: entry.schema}, service.settings.max_body_bytes)
    digest = request_hash("POST", request.url.path, str(request.url.query), body)
    response, replayed = await service.submit_once(key, digest, lambda: service.validate([parsed]))
    return _answer(response, replayed)


@router.post(
    "/updates",
    status_code=202,
    response_model=AcksModel,
    responses={
        202: {"description": "Durable in the WAL: one acknowledgement per update.", "headers": REPLAYED},
        **SUBMIT_ERRORS,
    },
    openapi_extra=body_doc(MultiUpdateBody, parameters=[IDEMPOTENCY_KEY]),
    summary="Submit several updates of several tables in one request",
)
async def submit_updates(request: Request) -> JSONResponse:
    service, caller, key = _caller(request)
    body = await read_body(request)
    parsed = parse_multi(body, request.headers.get("content-type"))
    schemas = {}
    for item in parsed:
        Authenticator.require_submit(caller, item.table)
        schemas[item.table] = service.entry(item.table).schema
    check_expansion(parsed, schemas, service.settings.max_body_bytes)
    digest = request_hash("POST", request.url.path, body)
    response, replayed = await service.submit_once(key, digest, lambda: service.validate(parsed))
    return _answer(response, replayed)
