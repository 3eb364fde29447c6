"""Batches that kept failing, set aside with their error (loader/durability/quarantine.py): list, retry, discard."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import Operator, Service
from api.schemas import OPERATOR_ONLY, error_responses

router = APIRouter(prefix="/v1/admin/quarantine", tags=["admin"])


@router.get(
    "",
    responses=error_responses(*OPERATOR_ONLY),
    summary="Quarantined batches: their tables, updates, rows and the error that kept failing",
)
async def list_quarantine(service: Service, operator: Operator) -> dict[str, Any]:
    return {"batches": [e.summary() for e in service.quarantine.entries()]}


@router.post(
    "/{table}/{first_sequence}/retry",
    status_code=202,
    responses=error_responses(*OPERATOR_ONLY, 404, 422, 503),
    summary="Load a quarantined batch again: its updates are submitted anew (new sequence numbers)",
)
async def retry(table: str, first_sequence: int, service: Service, operator: Operator) -> dict[str, Any]:
    return await service.quarantine.retry(table, first_sequence)


@router.delete(
    "/{table}/{first_sequence}",
    responses=error_responses(*OPERATOR_ONLY, 404, 422),
    summary="Discard a quarantined batch: its updates are never loaded",
)
async def discard(table: str, first_sequence: int, service: Service, operator: Operator) -> dict[str, Any]:
    return await service.quarantine.discard(table, first_sequence)
