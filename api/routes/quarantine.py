"""Updates that kept failing, set aside with their error (loader/durability/quarantine.py): list, retry, discard.

Each entry names its update (table, sequence, the producer's Idempotency-Key), the row the
error names if it names one, the error, and for a latest table without order_by the keys it
holds and the later values waiting for them (released by a retry or a discard)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import Operator, Service
from api.schemas import OPERATOR_ONLY, error_responses

router = APIRouter(prefix="/v1/admin/quarantine", tags=["admin"])


@router.get(
    "",
    responses=error_responses(*OPERATOR_ONLY),
    summary="Quarantined updates: their tables, sequences, Idempotency-Keys, rows, the error that kept failing",
)
async def list_quarantine(service: Service, operator: Operator) -> dict[str, Any]:
    return {"batches": service.quarantine.summaries()}


@router.post(
    "/{table}/{first_sequence}/retry",
    status_code=202,
    responses=error_responses(*OPERATOR_ONLY, 404, 422, 503),
    summary="Load a quarantined update again: it is submitted anew (a new sequence number), with the values its "
    "keys held (latest tables without order_by)",
)
async def retry(table: str, first_sequence: int, service: Service, operator: Operator) -> dict[str, Any]:
    return await service.quarantine.retry(table, first_sequence)


@router.delete(
    "/{table}/{first_sequence}",
    responses=error_responses(*OPERATOR_ONLY, 404, 422, 503),
    summary="Discard a quarantined update: it is never loaded (the later values its keys held load)",
)
async def discard(table: str, first_sequence: int, service: Service, operator: Operator) -> dict[str, Any]:
    return await service.quarantine.discard(table, first_sequence)
