"""Operators' endpoints: register tables, change weights, pause, switch the policy, see the pending store."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from api.deps import Operator, Service, read_body
from api.schemas import (
    OPERATOR_ONLY,
    BulkRegistrationModel,
    BulkTablesBody,
    PendingModel,
    PolicyBody,
    PolicyStateModel,
    RetirementModel,
    SchemaBody,
    SchemaChangeModel,
    TableStatusModel,
    ViewListModel,
    ViewModel,
    WeightBody,
    body_doc,
    error_responses,
    ok_response,
)
from loader.core.errors import BadRequest, Unsupported
from loader.core.tables import TableConfig, table_declarations
from loader.core.views import ViewConfig
from loader.intake.requests import check_table_name
from schedulers.registry import POLICIES

router = APIRouter(prefix="/v1/admin", tags=["admin"])

STATUS = "The table's status after the change."


@router.post(
    "/tables",
    status_code=201,
    response_model=None,
    responses={
        **ok_response(TableStatusModel, "The table's status.", 201),
        **error_responses(400, *OPERATOR_ONLY, 409, 422),
    },
    summary="Register a table (idempotent for the same schema)",
)
async def register_table(table: TableConfig, service: Service, operator: Operator) -> dict[str, Any]:
    await service.register_table(table)
    return service.status.table(table.name)


@router.post(
    "/tables:bulk",
    response_model=None,
    responses={
        **ok_response(BulkRegistrationModel, "Every table is registered: which by this call, which before."),
        **error_responses(400, *OPERATOR_ONLY, 409, 413, 415, 422),
    },
    openapi_extra=body_doc(BulkTablesBody),
    summary="Register many tables in one call: all or nothing, idempotent for the same schemas",
)
async def register_tables(request: Request, service: Service, operator: Operator) -> dict[str, Any]:
    """One catalog save for the whole list; a 422 names every invalid entry (index and
    name), a 409 every conflicting table, and either registers nothing."""
    media = (request.headers.get("content-type") or "application/json").split(";")[0].strip().lower()
    if media != "application/json":
        raise Unsupported(f"content type {media!r} is not supported; POST /v1/admin/tables:bulk takes application/json")
    body = await read_body(request)
    # Parsed and validated off the event loop: 10,000 declarations take about a second.
    done = await service.register_tables(await asyncio.to_thread(_declarations, body))
    return {"created": done.created, "unchanged": done.unchanged, "changed": done.changed}


def _declarations(body: bytes) -> list[TableConfig]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON ({exc}); send UTF-8 JSON") from None
    return table_declarations(document)


RETIRING = "Retiring: updates get 410; it leaves once its acknowledged updates are loaded."
RETIRED = "Retired: gone from the catalog, the metrics and the listings (also the answer to a repeat)."
PURGE = Query(False, description="Also delete the Delta table and the files, once it is retired.")


@router.delete(
    "/tables/{table}",
    status_code=202,
    response_model=None,
    responses={
        **ok_response(RetirementModel, RETIRING, 202),
        **ok_response(RetirementModel, RETIRED),
        **error_responses(*OPERATOR_ONLY, 404, 409),
    },
    summary="Retire a table: no more updates, what was acknowledged loads, then it leaves (idempotent)",
)
async def retire_table(
    table: str, service: Service, operator: Operator, response: Response, purge: bool = PURGE
) -> dict[str, Any]:
    """A 409 names the views that read the table (retire them first) or its quarantined
    updates (retry or discard them first); a 404 an unknown name. The answer is the
    retirement's state: 202 while it drains, 200 once it is gone."""
    check_table_name(table)
    done = await service.retire_table(table, purge)
    if done["state"] == "retired":
        response.status_code = 200
    return done


@router.put(
    "/tables/{table}/weight",
    response_model=None,
    responses={**ok_response(TableStatusModel, STATUS), **error_responses(400, *OPERATOR_ONLY, 404, 422)},
    summary="Change a table's priority weight",
)
async def set_weight(table: str, body: WeightBody, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_weight(table, body.weight)
    return service.status.table(table)


@router.patch(
    "/tables/{table}/schema",
    response_model=None,
    responses={
        **ok_response(SchemaChangeModel, "The change is applied: the table's schema now."),
        **error_responses(400, *OPERATOR_ONLY, 404, 409, 422, 503),
    },
    summary="Change a table's schema while it runs: add nullable columns, make NOT NULL columns nullable",
)
async def change_schema(table: str, body: SchemaBody, service: Service, operator: Operator) -> dict[str, Any]:
    """A 409 names every column the change cannot make and what to do instead (loader/core/evolution.py)."""
    change = await service.change_columns(table, body.columns)
    return {
        "added": [c.name for c in change.added],
        "made_nullable": list(change.relaxed),
        "fields_added": list(change.fields_added),
        "schema": change.new.model_dump(mode="json"),
    }


@router.post(
    "/tables/{table}/pause",
    response_model=None,
    responses={**ok_response(TableStatusModel, STATUS), **error_responses(*OPERATOR_ONLY, 404)},
    summary="Stop starting new batches of a table (intake continues)",
)
async def pause(table: str, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_paused(table, True)
    return service.status.table(table)


@router.post(
    "/tables/{table}/resume",
    response_model=None,
    responses={**ok_response(TableStatusModel, STATUS), **error_responses(*OPERATOR_ONLY, 404)},
    summary="Resume loading a paused table",
)
async def resume(table: str, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_paused(table, False)
    return service.status.table(table)


@router.get(
    "/pending",
    response_model=None,
    responses={**ok_response(PendingModel, "The pending store."), **error_responses(*OPERATOR_ONLY)},
    summary="The pending store: memory budget, spilled bytes, disk operations",
)
async def get_pending(service: Service, operator: Operator) -> dict[str, Any]:
    return service.pending.describe()


@router.get(
    "/policy",
    response_model=None,
    responses={**ok_response(PolicyStateModel, "The policy in force."), **error_responses(*OPERATOR_ONLY)},
    summary="The scheduling policy in force and its state",
)
async def get_policy(service: Service, operator: Operator) -> dict[str, Any]:
    policy = service.dispatcher.policy
    return {"policy": policy.name, "available": sorted(POLICIES), "state": policy.describe()}


@router.put(
    "/policy",
    response_model=None,
    responses={
        **ok_response(PolicyStateModel, "The policy now in force."),
        **error_responses(400, *OPERATOR_ONLY, 422),
    },
    summary="Switch the scheduling policy at runtime",
)
async def set_policy(body: PolicyBody, service: Service, operator: Operator) -> dict[str, Any]:
    await service.set_policy(body.policy, body.params)
    return await get_policy(service, operator)


@router.post(
    "/views",
    status_code=201,
    response_model=None,
    responses={
        **ok_response(ViewModel, "The view: declaration, freshness, pipelines and caches.", 201),
        **error_responses(400, *OPERATOR_ONLY, 409, 422),
    },
    summary="Declare a join view over registered tables (idempotent for the same declaration)",
)
async def register_view(view: ViewConfig, service: Service, operator: Operator, response: Response) -> dict[str, Any]:
    """A 422 says why a declaration cannot be maintained (non-equi predicates, unknown
    columns, cycles, type mismatches, a view over a view); a 409 that the name is taken
    by another declaration. The same declaration again answers 200."""
    _, created = await service.register_view(view)
    if not created:
        response.status_code = 200
    return service.views.describe(view.name)


@router.get(
    "/views",
    response_model=None,
    responses={**ok_response(ViewListModel, "The views' names."), **error_responses(*OPERATOR_ONLY)},
    summary="The join views",
)
async def list_views(service: Service, operator: Operator) -> dict[str, Any]:
    return {"views": service.views.names(), "broken": dict(service.views.broken)}


@router.delete(
    "/views/{view}",
    response_model=None,
    responses={**ok_response(RetirementModel, RETIRED), **error_responses(*OPERATOR_ONLY, 404)},
    summary="Retire a join view (idempotent); its input tables may then be retired",
)
async def retire_view(view: str, service: Service, operator: Operator, purge: bool = PURGE) -> dict[str, Any]:
    check_table_name(view)  # (the same rules: 404 without quoting a hostile name whole)
    return await service.retire_view(view, purge)


@router.get(
    "/views/{view}",
    response_model=None,
    responses={**ok_response(ViewModel, "The view."), **error_responses(*OPERATOR_ONLY, 404, 409)},
    summary="A join view: pipelines, candidate caches (benefit, cost, state), memory per cache",
)
async def get_view(view: str, service: Service, operator: Operator) -> dict[str, Any]:
    return service.views.describe(view)
