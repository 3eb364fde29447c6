"""Read side: the state of every table."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.auth import Authenticator
from api.deps import Caller, Service
from api.schemas import AUTHENTICATED, TablesModel, TableStatusModel, error_responses, ok_response

router = APIRouter(prefix="/v1", tags=["tables"])


@router.get(
    "/tables",
    response_model=None,
    responses={**ok_response(TablesModel, "Every table's status."), **error_responses(*AUTHENTICATED)},
    summary="All tables with staleness, pending work and load progress",
)
async def list_tables(service: Service, caller: Caller) -> dict[str, Any]:
    """A producer token limited to some tables sees only those."""
    return {"tables": [t for t in service.status.all() if caller.may_read(t["name"])]}


@router.get(
    "/tables/{table}",
    response_model=None,
    responses={**ok_response(TableStatusModel, "The table's status."), **error_responses(*AUTHENTICATED, 403, 404)},
    summary="One table's staleness, pending work and load progress",
)
async def get_table(table: str, service: Service, caller: Caller) -> dict[str, Any]:
    Authenticator.require_read(caller, table)
    return service.status.table(table)
