"""A service error as an HTTP answer: one shape for FastAPI's handlers and the fast submit path."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from loader.core.errors import ServiceError, Unavailable


def error_headers(error: ServiceError) -> dict[str, str]:
    """Retry-After on a 503 (when to come back), WWW-Authenticate on a 401 (RFC 6750)."""
    headers = {}
    if isinstance(error, Unavailable):
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    if error.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return headers


def error_response(error: ServiceError) -> JSONResponse:
    body: dict[str, Any] = error.body()
    return JSONResponse(body, status_code=error.status, headers=error_headers(error))
