"""Read side: the state of every table."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.auth import Authenticator
from api.deps import Caller, Service
from api.schemas import AUTHENTICATED, TablesModel, TableStatusModel, error_responses, ok_response
from loader.ops.status import DEFAULT_PAGE, MAX_PAGE, Sort

router = APIRouter(prefix="/v1", tags=["tables"])


@router.get(
    "/tables",
    response_model=None,
    responses={
        **ok_response(TablesModel, "A page of tables' statuses; `next_cursor` asks for the next page."),
        **error_responses(*AUTHENTICATED, 422),
    },
    summary="Tables with staleness, pending work and load progress, a page at a time",
)
async def list_tables(
    service: Service,
    caller: Caller,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_PAGE,
            description=f"Tables per page (default {DEFAULT_PAGE}: a service with at most that many tables "
            "answers with all of them at once).",
        ),
    ] = DEFAULT_PAGE,
    cursor: Annotated[
        str | None,
        Query(
            max_length=2048,
            description="The `next_cursor` of the previous page, as is; leave out for the first page.",
        ),
    ] = None,
    sort: Annotated[
        Sort,
        Query(
            description="`name` (default; stable) or `staleness` (stalest first, ties by name; each page ranks "
            "the tables as they are when it is asked for)."
        ),
    ] = "name",
) -> dict[str, Any]:
    """A producer token limited to some tables sees only those."""
    page = service.status.page(limit=limit, cursor=cursor, sort=sort, visible=caller.may_read)
    return {"tables": page.tables, "next_cursor": page.next_cursor, "total": page.total}


@router.get(
    "/tables/{table}",
    response_model=None,
    responses={**ok_response(TableStatusModel, "The table's status."), **error_responses(*AUTHENTICATED, 403, 404)},
    summary="One table's staleness, pending work and load progress",
)
async def get_table(table: str, service: Service, caller: Caller) -> dict[str, Any]:
    Authenticator.require_read(caller, table)
    return service.status.table(table)
