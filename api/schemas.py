"""Request and response models: documentation (OpenAPI) and validation of small bodies.

Feed bodies are parsed by ``loader.intake.requests`` (for 400-vs-422 and row-level messages);
their models here only describe them in the OpenAPI document. Most read models are
documentation only too (routes return plain dicts, ``response_model=None``): FastAPI
would otherwise re-validate every response on the hot path, and silently drop fields a
model forgot. ``tests/api/test_api_fuzz.py`` checks every response against these models.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from loader.core.schema import Column, TableSchema
from loader.core.tables import TableConfig
from schedulers.registry import POLICIES


class FileSpec(BaseModel):
    path: str = Field(description="Path relative to (or inside) the landing directory.")
    format: str | None = Field(default=None, description="parquet, csv or json; default from the extension.")


class UpdateBody(BaseModel):
    """Exactly one of rows or files."""

    rows: list[dict[str, Any]] | None = None
    files: list[str | FileSpec] | None = None
    data_until: float | str | None = Field(
        default=None, description="End of the data interval (Unix seconds or ISO-8601); default: receive time."
    )


class TableUpdateBody(UpdateBody):
    table: str


class MultiUpdateBody(BaseModel):
    updates: list[TableUpdateBody]


class AckModel(BaseModel):
    table: str
    sequence: int
    release_time: float
    release_time_iso: str


class AcksModel(BaseModel):
    updates: list[AckModel]


class WeightBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: float = Field(gt=0, allow_inf_nan=False)


class PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Documented as an enum, checked by the service (a 422 that lists the choices).
    policy: str = Field(json_schema_extra={"enum": sorted(POLICIES)})
    params: dict[str, Any] = Field(default_factory=dict, description="The policy's parameters, if any.")


class ErrorModel(BaseModel):
    """The body of every error the service sends (``loader.core.errors`` and the handlers in ``api.app``).

    ``error`` is a stable code for programs; ``message`` says what was wrong and what to
    do. Some errors add context: ``table``, ``idempotency_key``, or ``detail`` (the list
    of field problems of a request that failed validation).
    """

    model_config = ConfigDict(extra="allow")
    error: str = Field(
        description="bad_request, unauthorized, forbidden, not_found, method_not_allowed, conflict, "
        "idempotency_conflict, payload_too_large, unsupported_media_type, invalid, unavailable, ...",
        examples=["not_found"],
    )
    message: str = Field(description="What was wrong and what to do about it.")


#: What each error status means here (the response descriptions in the OpenAPI document).
ERROR_MEANINGS: dict[int, str] = {
    400: "Malformed request: the body is not valid JSON / NDJSON, or a header is not well formed.",
    401: "No bearer token, or not a configured one (send `Authorization: Bearer <token>`).",
    403: "The token is valid but its role or table list does not allow this.",
    404: "No such table (register it with POST /v1/admin/tables).",
    409: "Conflicts with the current state: a table of that name with another schema, or an "
    "Idempotency-Key reused for a different request.",
    410: "The table was retired (DELETE /v1/admin/tables/{table}): register the name again to send updates.",
    413: "The body exceeds max_body_bytes, or its rows more than memory and the spill disk hold at once: "
    "split the update or submit landing files.",
    415: "The Content-Type is neither application/json nor application/x-ndjson.",
    422: "The request is well formed but invalid: the `detail` or `message` names the field.",
    503: "Intake is closed for now (starting, stopping, spill disk full, WAL failed): retry after Retry-After.",
}

_ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "Always `Bearer`.", "schema": {"type": "string"}}},
    503: {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}},
}


#: Where ``api.app`` puts ``ErrorModel`` in the document's components.
ERROR_SCHEMA_REF = "#/components/schemas/ErrorModel"


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting ``statuses`` with the shared error body.

    The content type is spelled out (not ``model=``): FastAPI would otherwise document
    errors with the route's own media type, e.g. NDJSON for the trace export.
    """
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        doc: dict[str, Any] = {
            "description": ERROR_MEANINGS.get(status, HTTPStatus(status).phrase),
            "content": {"application/json": {"schema": {"$ref": ERROR_SCHEMA_REF}}},
        }
        if status in _ERROR_HEADERS:
            doc["headers"] = _ERROR_HEADERS[status]
        responses[status] = doc
    return responses


def ok_response(model: type[BaseModel], description: str, status: int = 200) -> dict[int | str, dict[str, Any]]:
    """A success response documented by ``model`` (for routes declared with ``response_model=None``)."""
    return {status: {"model": model, "description": description}}


#: Statuses of every route behind a token, and of the operator-only ones.
AUTHENTICATED = (401,)
OPERATOR_ONLY = (401, 403)


class TableStatusModel(BaseModel):
    """One table as GET /v1/tables/{table} reports it (``loader.ops.status.TableStatuses.table``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str
    schema_: TableSchema = Field(alias="schema")
    mode: str = Field(
        description="append (every row kept), latest (one row per schema.key, loaded by upsert) or view (a join "
        "view, GET /v1/admin/views/{view}; its updates are its inputs' commits)."
    )
    superseded_rows: int = Field(
        description="Latest tables: rows dropped by design since registration, a newer value of their key won."
    )
    keys: dict[str, Any] | None = Field(
        description="Latest tables: the key queue (policy, max_keys_per_batch, waiting and loading keys, queue and "
        "application staleness over keys: mean, p99, max; cost_per_key_seconds, cuts); null for append tables."
    )
    weight: float
    period_hint: float | None
    period_estimate: float | None
    paused: bool
    retiring: bool = Field(
        description="DELETE /v1/admin/tables/{table} was answered: updates get 410, what was acknowledged still "
        "loads, then the table leaves."
    )
    running: bool
    current_upto: float = Field(description="Unix time up to which the table's data is loaded.")
    current_upto_iso: str
    staleness_seconds: float
    staleness_integral: float
    staleness_integral_at_last_load: float
    low_bound: float
    max_stretch: float
    pending_updates: int
    pending_bytes: int
    pending_resident_bytes: int
    pending_spilled_bytes: int
    last_sequence: int
    last_loaded_sequence: int
    delta_version: int | None
    alpha: float = Field(
        description="Seconds of loading per second of data (per key: a latest table), the paper's alpha."
    )
    overhead_seconds: float
    ms_per_1k_rows: float | None = Field(
        description="alpha in the unit people read: milliseconds of loading per 1,000 rows written, beside the "
        "fixed overhead; null before the first load."
    )
    group: int | None = Field(description="Index of the table's group under group-and-run policies.")
    failures: int


class ViewModel(BaseModel):
    """A join view as GET /v1/admin/views/{view} reports it (docs/join-views.md, "The admin view")."""

    model_config = ConfigDict(extra="allow")
    name: str
    declaration: dict[str, Any]
    delta_version: int | None
    pending_input_commits: int
    staleness_seconds: float
    low_bound: float
    max_stretch: float
    inputs: list[dict[str, Any]] = Field(description="Each input: alias, table, kind, window, version_held.")
    rebuilds: int = Field(description="Times the executor was rebuilt from Delta (start, and after a failed load).")
    executor: dict[str, Any] | None = Field(
        description="mode, updates, cache_probes, cache_hits, pipelines (join orders), candidates (name, "
        "pipeline, scope prefix/global (section 6), state profiled/used/unused, benefit, cost, memory_bytes, "
        "granted_entries, granted_bytes), caches (entries, tuples, capacity, probes, hits, evictions, bytes); "
        "null while being rebuilt."
    )


class ViewListModel(BaseModel):
    views: list[str] = Field(description="The views maintained.")
    broken: dict[str, str] = Field(
        description="Views in the catalog that cannot be maintained over today's tables (found at start-up), "
        "each with the reason."
    )


class RetirementModel(BaseModel):
    """A retirement's state (``DELETE /v1/admin/tables/{table}``, ``/views/{view}``; docs/tables.md)."""

    name: str
    kind: Literal["table", "view"]
    state: Literal["retiring", "retired"] = Field(
        description="retiring: updates get 410, what was acknowledged still loads; retired: gone from the catalog, "
        "the metrics and the listings."
    )
    purge: bool = Field(description="Its Delta table and files go once it is retired.")
    purged: bool = Field(description="They are gone.")
    pending_updates: int = Field(description="Acknowledged updates still to load before it leaves.")
    quarantined_updates: int = Field(description="Quarantined updates it waits for: retry or discard them.")
    message: str


class TablesModel(BaseModel):
    """A page of GET /v1/tables, in the order asked for (``sort``)."""

    tables: list[TableStatusModel]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")
    total: int = Field(description="Tables the caller may see, on all pages together.")


class StalenessLineModel(BaseModel):
    """One table's staleness over the window (``loader.ops.history``)."""

    name: str
    staleness_seconds: float = Field(description="Staleness now (the line's last vertex).")
    start: float = Field(
        description="Epoch seconds the line starts at: the window's start, or later when the service knows "
        "no further back (the table was added or the service started since, or its older loads left the "
        "record of batches)."
    )
    loads: int = Field(description="Loads that finished in the window.")
    points: list[tuple[float, float]] = Field(
        description="Vertices (epoch seconds, staleness in seconds) in time order: staleness grows with slope "
        "1 between them and drops at each load (two vertices at its finish). Thinned to about `points` per "
        "table, keeping each slice of time's peak and trough."
    )


class StalenessHistoryModel(BaseModel):
    """GET /v1/tables:history: each table's staleness over the last ``seconds``."""

    now: float = Field(description="Epoch seconds the lines end at.")
    since: float = Field(description="Epoch seconds the window starts at (now - seconds).")
    tables: list[StalenessLineModel] = Field(description="In the order asked for, or stalest first.")


class BulkTablesBody(BaseModel):
    """POST /v1/admin/tables:bulk: the shape of the configuration's ``tables`` list."""

    tables: list[TableConfig] = Field(description="Table declarations, as for POST /v1/admin/tables.")


class SchemaBody(BaseModel):
    """A table's columns after the change, every one of them: the existing ones first, in their
    order, then any new ones (docs/tables.md, "Changing a table's schema"). Partition columns,
    key and order_by stay as registered."""

    model_config = ConfigDict(extra="forbid")
    columns: tuple[Column, ...] = Field(min_length=1)


class SchemaChangeModel(BaseModel):
    added: list[str] = Field(description="Columns added by this call (nullable, read as null in earlier rows).")
    made_nullable: list[str] = Field(description="Columns that were NOT NULL and are now nullable.")
    fields_added: list[str] = Field(
        default_factory=list,
        description="Fields added inside nested columns, by path (`items[].note`; nullable, null in earlier rows).",
    )
    schema_: dict[str, Any] = Field(alias="schema", description="The table's schema now.")


class BulkRegistrationModel(BaseModel):
    created: list[str] = Field(description="Tables registered by this call.")
    unchanged: list[str] = Field(description="Tables that were registered already with the same schema.")
    changed: list[str] = Field(
        default_factory=list,
        description="Tables registered before that had never received an update, now with the mode, key or "
        "order_by of this call.",
    )


class PolicyStateModel(BaseModel):
    policy: str
    available: list[str]
    state: dict[str, Any] = Field(description="The policy's own description of its state.")


class PendingModel(BaseModel):
    """The pending store (``PendingStore.describe``); the spill policy adds its own fields."""

    model_config = ConfigDict(extra="allow")
    memory_budget_bytes: int
    disk_budget_bytes: int | None
    resident_bytes: int
    spilled_bytes: int
    in_flight_bytes: int
    in_flight_disk_bytes: int
    peak_resident_bytes: int
    writes: int
    reads: int
    loader_reads: int
    bytes_written: int
    bytes_read: int
    spill_error: str | None
    disk_cost: dict[str, float] | None
    segment_files: int


class HealthModel(BaseModel):
    status: str = Field(description="`ok`, or `failing` (with 503) once the service cannot go on.")
    detail: str | None


class ReadinessModel(BaseModel):
    ready: bool
    accepting: bool
    recovered_updates: int
    writer: str | None = Field(description="The Delta writer in use (delta-rs or delta-spark).")
    detail: str | None
    faults: dict[str, str] = Field(
        default_factory=dict,
        description="Disk faults the service is riding out: 'wal' (intake closed until the write-ahead "
        "log's disk takes writes again), 'spill' (a spill failed; intake refuses once memory is full).",
    )


RegisterTableBody = TableConfig


def body_doc(
    model: type[BaseModel],
    *,
    ndjson: bool = False,
    columnar: bool = False,
    parameters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """OpenAPI of a route that parses its body (and ``parameters``) itself; ``columnar``: it also
    takes Arrow IPC and Parquet bodies (loader/intake/columnar_bodies.py)."""
    content: dict[str, Any] = {
        "application/json": {"schema": model.model_json_schema(ref_template="#/components/schemas/{model}")}
    }
    if ndjson:
        content["application/x-ndjson"] = {"schema": {"type": "string", "description": "One JSON row per line."}}
    if columnar:
        content["application/vnd.apache.arrow.stream"] = {
            "schema": {
                "type": "string",
                "format": "binary",
                "description": "An Arrow IPC stream of the table's columns: its schema the table's Arrow schema "
                "(field names and types; a NOT NULL column takes a nullable field holding no null).",
            }
        }
        content["application/vnd.apache.parquet"] = {
            "schema": {
                "type": "string",
                "format": "binary",
                "description": "A Parquet file of the table's columns, taken by the rules of a Parquet landing file "
                "(also as application/x-parquet).",
            }
        }
    doc: dict[str, Any] = {"requestBody": {"required": True, "content": content}}
    if parameters:
        doc["parameters"] = parameters
    return doc
