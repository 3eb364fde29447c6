"""Request dependencies as ``Annotated`` aliases: the service, the caller, the raw body."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from api.auth import Authenticator, Principal
from loader.core.errors import BadRequest, TooLarge
from loader.service import LoaderService


# All async: they block on nothing, and a plain `def` dependency costs two thread-pool
# hand-offs per request (about 15% of the request path in profiles).
async def get_service(request: Request) -> LoaderService:
    return request.app.state.service


async def get_principal(
    request: Request, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Principal:
    # The token is documented once, as the OpenAPI bearer security scheme (api.app).
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator.authenticate(authorization)


async def get_operator(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    Authenticator.require_operator(principal)
    return principal


async def read_body(request: Request) -> bytes:
    """The body, refused with 413 as soon as it passes the configured limit (never buffered whole)."""
    limit = request.app.state.settings.intake.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise TooLarge(
                    f"body of {int(declared)} bytes exceeds the limit of {limit}; split the update or use files"
                )
        except ValueError:
            raise BadRequest("Content-Length is not a number") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body exceeds the limit of {limit} bytes; split the update or use files")
        chunks.append(chunk)
    return b"".join(chunks)


Service = Annotated[LoaderService, Depends(get_service)]
Caller = Annotated[Principal, Depends(get_principal)]
Operator = Annotated[Principal, Depends(get_operator)]
