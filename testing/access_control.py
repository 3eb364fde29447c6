"""The access-control table and its drivers, shared by tests/api/test_access_control.py and the
trial that writes RELIABILITY.md (``python -m trials.access_matrix``).

``RULES`` is the table: every route the app serves × every kind of caller → the exact
status. Its requests are valid apart from authorization (existing tables, well-formed
bodies), so the status shows the authorization decision: 401 without a valid token, 403
for a token whose role or table list does not allow the call, the route's success status
(or 404 where nothing exists to act on) otherwise.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from fastapi.routing import iter_route_contexts

from api.app import create_app
from testing.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, make_settings, serve_in_thread

#: Well-formed, 16+ characters, configured nowhere.
BAD = "not-a-configured-token-0123456789"

#: The callers, in the table's column order. The table-limited producer may submit to
#: ``orders`` only; the requests below act on ``clicks``.
PRINCIPALS: dict[str, str | None] = {
    "no token": None,
    "bad token": BAD,
    "producer": PRODUCER,
    "producer of another table": ORDERS_ONLY,
    "operator": OPERATOR,
}

ROWS = [{"url": "/a", "n": 1}]
NEW_TABLE = {"name": "visits", "schema": {"columns": [{"name": "page", "type": "string"}]}}
#: A join view over the harness's tables: orders with itself, by country.
NEW_VIEW = {
    "name": "same_country",
    "inputs": [{"table": "orders", "alias": "a"}, {"table": "orders", "alias": "b"}],
    "on": ["a.country = b.country"],
    "select": ["a.order_id", "b.order_id AS other_id"],
}


@dataclass(frozen=True)
class Rule:
    path: str  # the concrete path requested
    expect: tuple[int, ...]  # status per principal, in PRINCIPALS order
    json: Any = None


def _statuses(everyone: int | None = None, *, producer: int, other: int, operator: int) -> tuple[int, ...]:
    anonymous = 401 if everyone is None else everyone
    return (anonymous, anonymous, producer, other, operator)


def _open(status: int = 200) -> tuple[int, ...]:
    return (status,) * 5


def _any_token(ok: int = 200) -> tuple[int, ...]:
    return _statuses(producer=ok, other=ok, operator=ok)


def _submit(ok: int = 202) -> tuple[int, ...]:
    return _statuses(producer=ok, other=403, operator=ok)


def _operator(ok: int = 200) -> tuple[int, ...]:
    return _statuses(producer=403, other=403, operator=ok)


#: (method, route path) -> the request and who gets what.
RULES: dict[tuple[str, str], Rule] = {
    # producers
    ("POST", "/v1/tables/{table}/updates"): Rule("/v1/tables/clicks/updates", _submit(), {"rows": ROWS}),
    ("POST", "/v1/updates"): Rule("/v1/updates", _submit(), {"updates": [{"table": "clicks", "rows": ROWS}]}),
    # any token
    ("GET", "/v1/tables"): Rule("/v1/tables", _any_token()),
    ("GET", "/v1/tables/{table}"): Rule("/v1/tables/clicks", _submit(200)),  # a limited token sees its tables
    ("GET", "/v1/tables:history"): Rule("/v1/tables:history?tables=clicks", _submit(200)),
    ("GET", "/readyz"): Rule("/readyz", _any_token()),
    ("GET", "/metrics"): Rule("/metrics", _any_token()),
    # operators
    ("POST", "/v1/admin/tables"): Rule("/v1/admin/tables", _operator(201), NEW_TABLE),
    ("POST", "/v1/admin/tables:bulk"): Rule("/v1/admin/tables:bulk", _operator(), {"tables": [NEW_TABLE]}),
    ("PUT", "/v1/admin/tables/{table}/weight"): Rule("/v1/admin/tables/clicks/weight", _operator(), {"weight": 3}),
    # The schema it has: allowed, and no change (a change is tests/api/test_schema_changes.py's).
    ("PATCH", "/v1/admin/tables/{table}/schema"): Rule(
        "/v1/admin/tables/clicks/schema",
        _operator(),
        {"columns": [{"name": "url", "type": "string"}, {"name": "n", "type": "int32"}]},
    ),
    ("POST", "/v1/admin/tables/{table}/pause"): Rule("/v1/admin/tables/clicks/pause", _operator()),
    ("POST", "/v1/admin/tables/{table}/resume"): Rule("/v1/admin/tables/clicks/resume", _operator()),
    # Retiring an unknown name: 404 is the operator's "allowed, but no such table" (a real
    # retirement would take the table from the other rows).
    ("DELETE", "/v1/admin/tables/{table}"): Rule("/v1/admin/tables/nope", _operator(404)),
    ("GET", "/v1/admin/pending"): Rule("/v1/admin/pending", _operator()),
    ("POST", "/v1/admin/views"): Rule("/v1/admin/views", _operator(201), NEW_VIEW),
    ("GET", "/v1/admin/views"): Rule("/v1/admin/views", _operator()),
    ("GET", "/v1/admin/views/{view}"): Rule("/v1/admin/views/nope", _operator(404)),
    ("DELETE", "/v1/admin/views/{view}"): Rule("/v1/admin/views/nope", _operator(404)),
    ("GET", "/v1/admin/policy"): Rule("/v1/admin/policy", _operator()),
    ("PUT", "/v1/admin/policy"): Rule("/v1/admin/policy", _operator(), {"policy": "myopic"}),
    ("GET", "/v1/admin/trace"): Rule("/v1/admin/trace", _operator()),
    ("GET", "/v1/admin/schedule"): Rule("/v1/admin/schedule", _operator()),
    ("GET", "/v1/admin/jobs"): Rule("/v1/admin/jobs", _operator()),
    ("GET", "/v1/admin/quarantine"): Rule("/v1/admin/quarantine", _operator()),
    # Nothing is quarantined: 404 is the operator's "allowed, but no such batch".
    ("POST", "/v1/admin/quarantine/{table}/{first_sequence}/retry"): Rule(
        "/v1/admin/quarantine/clicks/1/retry", _operator(404)
    ),
    ("DELETE", "/v1/admin/quarantine/{table}/{first_sequence}"): Rule("/v1/admin/quarantine/clicks/1", _operator(404)),
    # open: liveness, the API's description, and the page (static; its calls need a token)
    ("GET", "/healthz"): Rule("/healthz", _open()),
    ("GET", "/"): Rule("/", _open()),  # a redirect to /ui, followed
    ("GET", "/ui"): Rule("/ui", _open()),
    ("GET", "/ui/{asset}"): Rule("/ui/app.js", _open()),
    ("GET", "/openapi.json"): Rule("/openapi.json", _open()),
    ("GET", "/docs"): Rule("/docs", _open()),
    ("GET", "/docs/oauth2-redirect"): Rule("/docs/oauth2-redirect", _open()),
    ("GET", "/redoc"): Rule("/redoc", _open()),
}


def app_routes() -> set[tuple[str, str]]:
    """(method, path) of every route the app serves (HEAD, which Starlette adds to GET, aside)."""
    app = create_app(make_settings(Path("unused")))
    served = set()
    for route in iter_route_contexts(app.routes):  # FastAPI's included routers, flattened
        assert route.path and route.methods, f"{route!r}: a mount or websocket route needs access rules of its own"
        for method in route.methods:
            if method != "HEAD":
                served.add((method, route.path))
    return served


def headers_for(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


@dataclass
class Outcome:
    method: str
    route: str
    principal: str
    expected: int
    status: int
    body: str


def run_matrix(call: Any) -> list[Outcome]:
    """Every rule as every principal, in table order; ``call(method, path, headers, json)`` -> response."""
    outcomes = []
    for (method, route), rule in RULES.items():
        for (principal, token), expected in zip(PRINCIPALS.items(), rule.expect, strict=True):
            response = call(method, rule.path, headers_for(token), rule.json)
            outcomes.append(Outcome(method, route, principal, expected, response.status_code, response.text))
    return outcomes


def mismatches(outcomes: list[Outcome]) -> list[str]:
    return [
        f"{o.method} {o.route} as {o.principal}: {o.status}, expected {o.expected} ({o.body[:200]})"
        for o in outcomes
        if o.status != o.expected
    ]


# -- tokens are never logged -------------------------------------------------------------------
class LogCollector(logging.Handler):
    """Keeps every record and its fully formatted text (message, arguments, extra fields)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.texts.append(logging.Formatter().format(record) + repr(record.args) + repr(record.__dict__))


#: Every logger that could see a request: the root, uvicorn's (which do not propagate) and ours.
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "loader", "api", "fastapi", "starlette")
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
TOKENS = (OPERATOR, PRODUCER, ORDERS_ONLY, BAD)


@contextlib.contextmanager
def capture_all_logs() -> Iterator[LogCollector]:
    """Every logger at DEBUG into one collector; levels and handlers restored afterwards."""
    handler = LogCollector()
    saved = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for name, level in saved.items():
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).setLevel(level)


def served_with_all_logs(data_dir: Path, handler: LogCollector) -> contextlib.AbstractContextManager[Any]:
    """``serve_in_thread``, then uvicorn's loggers back at DEBUG into ``handler`` alone
    (uvicorn's dictConfig at startup replaced their handlers and set its log level)."""

    @contextlib.contextmanager
    def serving() -> Iterator[tuple[str, Any]]:
        with serve_in_thread(data_dir) as served:
            for name in UVICORN_LOGGERS:
                logging.getLogger(name).setLevel(logging.DEBUG)
                logging.getLogger(name).handlers = [handler]
            yield served

    return serving()


def exercise_tokens(url: str, session: requests.Session) -> tuple[list[Outcome], list[str]]:
    """The whole matrix over HTTP, and near-miss credentials on a few routes; the outcomes
    and every response body."""

    def call(method: str, path: str, headers: dict[str, str], json: Any) -> Any:
        return session.request(method, url + path, headers=headers, json=json, timeout=30)

    outcomes = run_matrix(call)
    bodies = [o.body for o in outcomes]
    near_misses = [f"Basic {OPERATOR}", f"Bearer {OPERATOR}x", f"bearer {PRODUCER}", f"Token {BAD}", BAD]
    routes = [("GET", "/v1/admin/pending"), ("GET", "/v1/tables/nope"), ("GET", "/v1/no-such-route")]
    for authorization in near_misses:
        for method, path in [*routes, ("POST", "/v1/tables/clicks/updates")]:
            response = session.request(
                method, url + path, headers={"Authorization": authorization}, json={}, timeout=30
            )
            bodies.append(response.text)
    return outcomes, bodies


def leaks(texts: list[str]) -> list[str]:
    """The tokens (first characters) that appear in any of ``texts``."""
    return [token[:6] + "..." for token in TOKENS if any(token in text for text in texts)]
