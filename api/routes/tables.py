"""Read side: the state of every table."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.auth import Authenticator
from api.deps import Caller, Service
from api.schemas import (
    AUTHENTICATED,
    StalenessHistoryModel,
    TablesModel,
    TableStatusModel,
    error_responses,
    ok_response,
)
from loader.ops.history import (
    DEFAULT_POINTS,
    DEFAULT_STALEST,
    MAX_POINTS,
    MAX_TABLES,
    split_names,
    staleness_lines,
    stalest,
)
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
    "/tables:history",
    response_model=None,
    responses={
        **ok_response(StalenessHistoryModel, "Each table's staleness over the window, as vertices of its line."),
        **error_responses(*AUTHENTICATED, 403, 404, 422),
    },
    summary="Tables' staleness over the last minutes, exact (from the loads that finished), for charts",
)
async def history(
    service: Service,
    caller: Caller,
    tables: Annotated[
        str | None,
        # Bounded well below the HTTP server's 64 KiB request line, as GET /v1/admin/trace's.
        Query(
            max_length=4096,
            description=f"Comma-separated tables (or views) to draw, at most {MAX_TABLES}; leave out for the "
            "`stalest` ones.",
        ),
    ] = None,
    stalest_: Annotated[
        int,
        Query(
            alias="stalest",
            ge=1,
            le=MAX_TABLES,
            description="Without `tables`: this many of the stalest tables the token may see, stalest first.",
        ),
    ] = DEFAULT_STALEST,
    seconds: Annotated[
        float, Query(ge=1, le=86_400, allow_inf_nan=False, description="The window: the last this many seconds.")
    ] = 600,
    points: Annotated[
        int, Query(ge=10, le=MAX_POINTS, description="Vertices per table at most (about; a busy line is thinned).")
    ] = DEFAULT_POINTS,
) -> dict[str, Any]:
    """Staleness is a sawtooth that drops only at loads, so a line is drawn from the record
    of finished batches (``observed_schedule_max_batches``) without sampling anything."""
    dispatcher = service.dispatcher
    if tables is not None:
        names = split_names(tables)
        for name in names:
            Authenticator.require_read(caller, name)
    else:
        names = stalest(dispatcher, stalest_, caller.may_read)
    now = time.time()
    lines = staleness_lines(dispatcher, names, now - seconds, now, points)
    return {"now": now, "since": now - seconds, "tables": [asdict(line) for line in lines]}


@router.get(
    "/tables/{table}",
    response_model=None,
    responses={**ok_response(TableStatusModel, "The table's status."), **error_responses(*AUTHENTICATED, 403, 404)},
    summary="One table's staleness, pending work and load progress",
)
async def get_table(table: str, service: Service, caller: Caller) -> dict[str, Any]:
    Authenticator.require_read(caller, table)
    return service.status.table(table)
