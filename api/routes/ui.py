"""The service's page: ``GET /`` and ``/ui``, the Grafana dashboard's figures for one instance
in a browser, for an operator with a laptop and no Prometheus.

The page is static files shipped in the package (``api/ui``, package data): no build step,
nothing fetched from outside the machine. It reads the JSON API with the token the operator
types into it, so loading the page itself needs no token and the page adds no way in: it
can show only what that token may already read. Its routes stay out of the OpenAPI
document (they are not API: no schema, nothing for clients or the fuzzer to call).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from loader.core.errors import NotFound

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
PAGE = "index.html"
#: The files the page is made of, and their types: only these are served (no directory
#: listing, no path from the request ever reaches the filesystem).
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "chart.js": "text/javascript; charset=utf-8",
    "format.js": "text/javascript; charset=utf-8",
    "metrics.js": "text/javascript; charset=utf-8",
    "render.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
#: The token lives in the page's localStorage: scripts and styles from this origin only,
#: no inline script, calls to this origin only, never framed by another site.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (ETag, Last-Modified): an upgraded service serves its own page.
    "Cache-Control": "no-cache",
}

router = APIRouter(tags=["ui"], include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    # Relative, so the page is found behind a proxy that serves the service under a prefix.
    return RedirectResponse("ui", status_code=307)


@router.get("/ui")
async def page() -> FileResponse:
    return FileResponse(UI_DIR / PAGE, media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/ui/{asset}")
async def asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"no file {asset!r} in the page; it is at /ui")
    return FileResponse(UI_DIR / asset, media_type=media_type, headers=HEADERS)
