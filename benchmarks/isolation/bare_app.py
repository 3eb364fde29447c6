"""The ceiling of this machine for the single-update request: a FastAPI endpoint that only
parses the request's small JSON body and answers 202, served as ``loader serve`` serves
(uvicorn, the same event loop and HTTP parser, log level warning). No WAL, no checks."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()


@app.post("/v1/tables/{table}/updates")
async def post_update(table: str, request: Request) -> JSONResponse:
    body: dict[str, Any] = await request.json()
    return JSONResponse({"updates": [{"table": table, "sequence": len(body["rows"])}]}, status_code=202)
