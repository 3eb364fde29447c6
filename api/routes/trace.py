"""Operators' export of what production saw, in the simulator's formats (``loader export-trace``).

``GET /v1/admin/trace``: the observed arrival trace with measured alpha/overhead;
``GET /v1/admin/schedule``: the recorded batches. Both NDJSON, streamed; the snapshot is
taken on the event loop, the lines are written on a worker thread.
``GET /v1/admin/jobs``: the newest load jobs' timelines, stage by stage (the schedule's
batches as the machinery ran them: loader/core/timeline.py); ``loader compare --jobs``
reads it for the per-stage costs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from api.deps import Operator, Service
from api.schemas import OPERATOR_ONLY, error_responses
from loader.loading.observed import CHUNK_LINES
from loader.ops.exports import export_schedule, export_trace

router = APIRouter(prefix="/v1/admin", tags=["admin"])

NDJSON = "application/x-ndjson"


class NDJSONResponse(StreamingResponse):
    media_type = NDJSON


def _doc(description: str, headers: dict[str, str]) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "description": description,
            "content": {NDJSON: {"schema": {"type": "string", "description": "JSON Lines"}}},
            "headers": {name: {"description": text, "schema": {"type": "string"}} for name, text in headers.items()},
        },
        **error_responses(*OPERATOR_ONLY, 404, 422),
    }


Since = Annotated[
    float | None,
    Query(gt=0, allow_inf_nan=False, description="Only what happened in the last this many seconds."),
]
Tables = Annotated[
    str | None,
    # Bounded well below the HTTP server's 64 KiB request line even when every character
    # is percent-encoded: a longer URL would get uvicorn's plain-text 400, not this API's 422.
    Query(max_length=4096, description="Comma-separated table names (default: every table)."),
]

TRACE_HEADERS = {
    "X-Trace-Origin": "Unix time subtracted from every time in the file (time 0 of the trace).",
    "X-Trace-Updates": "Update lines in the file.",
    "X-Trace-Recorded": "Releases recorded since the service started (all tables).",
    "X-Trace-Dropped": "Releases of the exported tables the ring dropped (oldest first) to stay within its cap.",
    "X-Trace-Capacity": "The ring's cap (observed_trace_max_updates).",
    "X-Loader-Policy": "The scheduling policy in force ('+groups(k)': multi-table jobs of at most k tables).",
    "X-Loader-Workers": "The number of workers.",
    "X-Loader-Job-Overhead": "Measured fixed cost of a Spark job in seconds (loader simulate --job-overhead).",
}
SCHEDULE_HEADERS = {
    "X-Schedule-Origin": "Unix time subtracted from every time in the file.",
    "X-Schedule-Batches": "Batch lines in the file.",
    "X-Schedule-Recorded": "Batches recorded since the service started (all tables).",
    "X-Schedule-Dropped": "Batches of the exported tables the ring dropped to stay within its cap.",
    "X-Schedule-Capacity": "The ring's cap (observed_schedule_max_batches).",
}


@router.get(
    "/trace",
    response_class=NDJSONResponse,
    responses=_doc(
        "Trace (JSON Lines): table lines with the measured alpha/overhead, then update lines in release order; "
        "`loader simulate --trace` reads it.",
        TRACE_HEADERS,
    ),
    summary="Export the observed arrival trace in the simulator's format",
)
async def get_trace(service: Service, operator: Operator, since: Since = None, tables: Tables = None) -> NDJSONResponse:
    snapshot = export_trace(service.dispatcher, tables, since, views=service.views.inputs())
    return NDJSONResponse(snapshot.lines(), headers=snapshot.headers())


@router.get(
    "/schedule",
    response_class=NDJSONResponse,
    responses=_doc(
        "Schedule (JSON Lines): one line per finished batch, in finishing order, times shifted by the origin.",
        SCHEDULE_HEADERS,
    ),
    summary="Export the recorded batches in the simulator's schedule format",
)
async def get_schedule(
    service: Service,
    operator: Operator,
    since: Since = None,
    tables: Tables = None,
    origin: Annotated[
        float | None,
        Query(
            allow_inf_nan=False,
            description="Unix time to subtract (pass the trace's X-Trace-Origin); default: what the trace would use.",
        ),
    ] = None,
) -> NDJSONResponse:
    snapshot = export_schedule(service.dispatcher, tables, since, origin, views=service.views.inputs())
    return NDJSONResponse(snapshot.lines(), headers=snapshot.headers())


JOBS_HEADERS = {
    "X-Jobs-Lines": "Job lines in the file.",
    "X-Jobs-Recorded": "Jobs recorded since the service started.",
    "X-Jobs-Capacity": "The record's cap (observed_jobs_max).",
}


@router.get(
    "/jobs",
    response_class=NDJSONResponse,
    responses=_doc(
        "Jobs (JSON Lines): one line per finished load job, oldest first: its worker, the wall-clock instant "
        "(Unix time) of each stage it passed, each table's publish and commit, the stages' seconds, the "
        "service's CPU seconds for it and its worker's idle time before it.",
        JOBS_HEADERS,
    ),
    summary="Export the newest load jobs' timelines",
)
async def get_jobs(service: Service, operator: Operator, since: Since = None) -> NDJSONResponse:
    observed = service.dispatcher.observed
    jobs = observed.snapshot_jobs(None if since is None else time.time() - since)

    def lines() -> Iterator[str]:  # (in chunks, as the other exports)
        for start in range(0, len(jobs), CHUNK_LINES):
            yield "".join(json.dumps(job.as_dict()) + "\n" for job in jobs[start : start + CHUNK_LINES])

    headers = {"X-Jobs-Lines": str(len(jobs)), "X-Jobs-Recorded": str(observed.jobs_recorded)}
    return NDJSONResponse(lines(), headers=headers | {"X-Jobs-Capacity": str(observed.jobs.maxlen or 0)})
