"""Operators' endpoints: register tables, change weights, pause, switch the policy, see the pending store."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import Operator, Service
from api.schemas import PolicyBody, WeightBody
from loader.config import TableConfig
from schedulers.registry import POLICIES

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post("/tables", status_code=201, summary="Register a table (idempotent for the same schema)")
async def register_table(table: TableConfig, service: Service, operator: Operator) -> dict[str, Any]:
    await service.register_table(table)
    return service.table_status(table.name)


@router.put("/tables/{table}/weight", summary="Change a table's priority weight")
async def set_weight(table: str, body: WeightBody, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_weight(table, body.weight)
    return service.table_status(table)


@router.post("/tables/{table}/pause", summary="Stop starting new batches of a table (intake continues)")
async def pause(table: str, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_paused(table, True)
    return service.table_status(table)


@router.post("/tables/{table}/resume", summary="Resume loading a paused table")
async def resume(table: str, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_paused(table, False)
    return service.table_status(table)


@router.get("/pending", summary="The pending store: memory budget, spilled bytes, disk operations")
async def get_pending(service: Service, operator: Operator) -> dict[str, Any]:
    return service.dispatcher.pending.describe()


@router.get("/policy", summary="The scheduling policy in force and its state")
async def get_policy(service: Service, operator: Operator) -> dict[str, Any]:
    policy = service.dispatcher.policy
    return {"policy": policy.name, "available": sorted(POLICIES), "state": policy.describe()}


@router.put("/policy", summary="Switch the scheduling policy at runtime")
async def set_policy(body: PolicyBody, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_policy(body.policy, body.params)
    return await get_policy(service, operator)
