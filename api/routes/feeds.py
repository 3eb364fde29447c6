"""Producers' endpoints: submit updates (acknowledged once durable in the WAL).

HTTP only: each route authenticates the caller, hands intake what it read (one call,
``loader/intake/submission.py``, which owns every domain step and their order) and maps
the answer to a 202. These two routes are the service's hot path, so they read the token,
headers, query and body from the request themselves instead of through FastAPI's
dependency and parameter machinery, which profiles showed to be about a third of a small
request's cost. Their parameters are still documented in the OpenAPI document
(``openapi_extra``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.auth import Authenticator
from api.deps import read_body
from api.schemas import AcksModel, MultiUpdateBody, UpdateBody, body_doc, error_responses
from loader.intake.idempotency import MAX_KEY_LENGTH
from loader.intake.submission import Intake, SubmitRequest

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
    "description": "For NDJSON, Arrow IPC and Parquet bodies: end of the data interval (Unix seconds or ISO-8601).",
    "schema": {"type": "string"},
}
#: What a submission can be refused with (the token is the document's bearer security scheme).
SUBMIT_ERRORS = error_responses(400, 401, 403, 404, 409, 410, 413, 415, 422, 503)
REPLAYED = {
    "Idempotent-Replayed": {
        "description": "`true` when this is the stored answer to an earlier request with the same Idempotency-Key.",
        "schema": {"type": "string"},
    }
}


def _read(request: Request, **extra: str | None) -> tuple[Intake, SubmitRequest]:
    """Authenticate the caller (401) and gather what intake needs of the request."""
    state = request.app.state
    caller = state.authenticator.authenticate(request.headers.get("authorization"))
    headers = request.headers
    submitted = SubmitRequest(
        path=request.url.path,
        query=str(request.url.query),
        content_type=headers.get("content-type"),
        idempotency_key=headers.get("idempotency-key"),
        read_body=lambda: read_body(request),
        permit=lambda table: Authenticator.require_submit(caller, table),
        **extra,
    )
    return state.service.intake, submitted


def _answer(response: dict, replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(response, status_code=202, headers=headers)


@router.post(
    "/tables/{table}/updates",
    status_code=202,
    response_model=AcksModel,
    responses={202: {"description": "Durable in the WAL: one acknowledgement.", "headers": REPLAYED}, **SUBMIT_ERRORS},
    openapi_extra=body_doc(UpdateBody, ndjson=True, columnar=True, parameters=[IDEMPOTENCY_KEY, DATA_UNTIL]),
    summary="Submit one update of one table",
)
async def submit_update(table: str, request: Request) -> JSONResponse:
    intake, submitted = _read(request, data_until=request.query_params.get("data_until"))
    return _answer(*await intake.submit_one(table, submitted))


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
    intake, submitted = _read(request)
    return _answer(*await intake.submit_many(submitted))
