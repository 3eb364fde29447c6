"""Read side: the state of every table."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import Caller, Service
from loader.status import all_table_statuses

router = APIRouter(prefix="/v1", tags=["tables"])


@router.get("/tables", summary="All tables with staleness, pending work and load progress")
async def list_tables(service: Service, caller: Caller) -> dict[str, Any]:
    return {"tables": all_table_statuses(service)}


@router.get("/tables/{table}", summary="One table's staleness, pending work and load progress")
async def get_table(table: str, service: Service, caller: Caller) -> dict[str, Any]:
    return service.table_status(table)
