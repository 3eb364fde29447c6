"""Who may call what: every route of the app × every kind of caller → the exact status.

``RULES`` is the access-control table. Its requests are valid apart from authorization
(existing tables, well-formed bodies), so the status shows the authorization decision:
401 without a valid token, 403 for a token whose role or table list does not allow the
call, the route's success status (or 404 where nothing exists to act on) otherwise.
The table must name every route the app serves: a new endpoint fails
``test_every_route_has_access_rules`` until its row is written.

Also here: tokens are compared in constant time (as digests, against every configured
token), never appear in a log record or a response, and the generated tokens file is
private to its owner.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from fastapi.routing import iter_route_contexts

from api.app import create_app
from loader.auth import Authenticator, generated_tokens, tokens_file
from loader.config import Role, TokenConfig, load_settings
from loader.errors import Unauthorized
from tests.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, Harness, make_settings, serve_in_thread

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
    ("GET", "/readyz"): Rule("/readyz", _any_token()),
    ("GET", "/metrics"): Rule("/metrics", _any_token()),
    # operators
    ("POST", "/v1/admin/tables"): Rule("/v1/admin/tables", _operator(201), NEW_TABLE),
    ("PUT", "/v1/admin/tables/{table}/weight"): Rule("/v1/admin/tables/clicks/weight", _operator(), {"weight": 3}),
    ("POST", "/v1/admin/tables/{table}/pause"): Rule("/v1/admin/tables/clicks/pause", _operator()),
    ("POST", "/v1/admin/tables/{table}/resume"): Rule("/v1/admin/tables/clicks/resume", _operator()),
    ("GET", "/v1/admin/pending"): Rule("/v1/admin/pending", _operator()),
    ("GET", "/v1/admin/policy"): Rule("/v1/admin/policy", _operator()),
    ("PUT", "/v1/admin/policy"): Rule("/v1/admin/policy", _operator(), {"policy": "myopic"}),
    ("GET", "/v1/admin/trace"): Rule("/v1/admin/trace", _operator()),
    ("GET", "/v1/admin/schedule"): Rule("/v1/admin/schedule", _operator()),
    ("GET", "/v1/admin/quarantine"): Rule("/v1/admin/quarantine", _operator()),
    # Nothing is quarantined: 404 is the operator's "allowed, but no such batch".
    ("POST", "/v1/admin/quarantine/{table}/{first_sequence}/retry"): Rule(
        "/v1/admin/quarantine/clicks/1/retry", _operator(404)
    ),
    ("DELETE", "/v1/admin/quarantine/{table}/{first_sequence}"): Rule("/v1/admin/quarantine/clicks/1", _operator(404)),
    # open: liveness and the API's description
    ("GET", "/healthz"): Rule("/healthz", _open()),
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


def _mismatches(outcomes: list[Outcome]) -> list[str]:
    return [
        f"{o.method} {o.route} as {o.principal}: {o.status}, expected {o.expected} ({o.body[:200]})"
        for o in outcomes
        if o.status != o.expected
    ]


# -- the matrix ----------------------------------------------------------------------------------
def test_every_route_has_access_rules() -> None:
    served = app_routes()
    missing = sorted(served - set(RULES))
    assert not missing, f"routes without a row in RULES (add who may call them): {missing}"
    stale = sorted(set(RULES) - served)
    assert not stale, f"rows in RULES for routes the app does not serve: {stale}"


def test_access_matrix(harness: Harness) -> None:
    def call(method: str, path: str, headers: dict[str, str], json: Any) -> Any:
        return harness.client.request(method, path, headers=headers, json=json)

    outcomes = run_matrix(call)
    assert not _mismatches(outcomes), "\n".join(_mismatches(outcomes))
    refused = [o for o in outcomes if o.status == 401]
    assert all('"error":"unauthorized"' in o.body for o in refused)


def test_a_table_limited_producer_submits_to_its_tables_only(harness: Harness) -> None:
    """Its own table: accepted. A request that also names another table: refused whole."""
    order = {"order_id": 1, "amount": 2.5, "country": "DE"}
    assert harness.post("/v1/tables/orders/updates", token=ORDERS_ONLY, json={"rows": [order]}).status_code == 202
    mixed = {"updates": [{"table": "orders", "rows": [order]}, {"table": "clicks", "rows": ROWS}]}
    assert harness.post("/v1/updates", token=ORDERS_ONLY, json=mixed).status_code == 403
    assert harness.status("orders")["last_sequence"] == 1 and harness.status("clicks")["last_sequence"] == 0


@pytest.mark.parametrize(
    "authorization",
    [
        f"Basic {OPERATOR}",
        f"Token {OPERATOR}",
        f"Bearer{OPERATOR}",
        "Bearer",
        "Bearer ",
        f"Bearer {OPERATOR}x",
        f"Bearer {OPERATOR[:-1]}",
        f"Bearer {OPERATOR.upper()}",
        f"Bearer {OPERATOR} {OPERATOR}",
        "Bearer é" + OPERATOR,
    ],
)
def test_malformed_or_near_miss_credentials_get_401(harness: Harness, authorization: str) -> None:
    response = harness.client.get("/v1/admin/pending", headers={"Authorization": authorization.encode()})
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert OPERATOR not in response.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/admin/tables", b"{not json"),
        ("POST", "/v1/admin/tables", b"\xff\xfe not text"),
        ("PUT", "/v1/admin/tables/clicks/weight", b"[1,"),
        ("PUT", "/v1/admin/policy", b"\x00"),
    ],
)
def test_authentication_comes_before_body_parsing(harness: Harness, method: str, path: str, body: bytes) -> None:
    """FastAPI parses a JSON body before a route's dependencies run: a malformed body got
    400/422 from callers without a token, or with a producer's, on operator routes."""
    json_type = {"Content-Type": "application/json"}
    for token, status in ((None, 401), (BAD, 401), (PRODUCER, 403), (OPERATOR, None)):
        response = harness.client.request(method, path, content=body, headers={**json_type, **headers_for(token)})
        if status is None:  # the operator is told what is wrong with the body
            assert response.status_code in (400, 422), response.text
        else:
            assert response.status_code == status, response.text


def test_bearer_scheme_is_case_insensitive(harness: Harness) -> None:
    """RFC 7235: the scheme name is case-insensitive; the token is not (above)."""
    for scheme in ("bearer", "BEARER", "BeArEr"):
        assert harness.client.get("/v1/admin/pending", headers={"Authorization": f"{scheme} {OPERATOR}"}).is_success


# -- how tokens are compared -------------------------------------------------------------------
def _authenticator() -> Authenticator:
    """Tokens of very different lengths: a comparison of raw tokens would show them."""
    return Authenticator(
        [
            TokenConfig(token="s" * 16, role=Role.operator, name="short"),
            TokenConfig(token="m" * 40, role=Role.producer, name="medium"),
            TokenConfig(token="l" * 300, role=Role.producer, name="long", tables=["orders"]),
        ]
    )


@pytest.mark.parametrize(
    "presented",
    ["s" * 16, "m" * 40, "l" * 300, "x" * 16, "m" * 39, "l" * 301, "", "z" * 5000, "ü" * 40],
    ids=lambda token: f"{token[:1] or 'empty'}x{len(token)}",
)
def test_authentication_compares_equal_length_digests_with_every_token(
    monkeypatch: pytest.MonkeyPatch, presented: str
) -> None:
    authenticator = _authenticator()
    compared: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    try:
        principal = authenticator.authenticate(f"Bearer {presented}")
    except Unauthorized as exc:
        assert presented not in exc.message or not presented
        principal = None
    # No short cut: a match on the first token still compares the other two.
    assert compared == [(32, 32)] * 3
    expected = {"s" * 16: "short", "m" * 40: "medium", "l" * 300: "long"}.get(presented)
    assert (principal.name if principal else None) == expected


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


def test_tokens_never_appear_in_logs_or_responses(tmp_path: Path) -> None:
    with capture_all_logs() as logs:
        with served_with_all_logs(tmp_path / "data", logs) as (url, _), requests.Session() as session:
            outcomes, bodies = exercise_tokens(url, session)
    assert not _mismatches(outcomes), "\n".join(_mismatches(outcomes))
    assert sum(r.name == "uvicorn.access" for r in logs.records) >= len(outcomes), "access log not captured"
    assert not leaks(logs.texts), f"tokens in log records: {leaks(logs.texts)}"
    assert not leaks(bodies), f"tokens in responses: {leaks(bodies)}"


# -- the generated tokens file -----------------------------------------------------------------
def test_generated_tokens_file_is_private_and_stable(tmp_path: Path) -> None:
    settings = load_settings(None, data_dir=tmp_path / "data")
    assert not settings.auth_tokens
    old_umask = os.umask(0)  # even a permissive umask must not widen it
    try:
        tokens = generated_tokens(settings)
    finally:
        os.umask(old_umask)
    path = tokens_file(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert {t.role for t in tokens} == {Role.operator, Role.producer}
    assert all(len(t.token) >= 32 for t in tokens)
    assert [t.token for t in generated_tokens(settings)] == [t.token for t in tokens]  # read back, not regenerated
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokens.json"]  # no temporary file left


def test_a_table_limited_producer_sees_only_its_tables(harness: Harness) -> None:
    listed = harness.get("/v1/tables", token=ORDERS_ONLY).json()["tables"]
    assert [t["name"] for t in listed] == ["orders"]
    assert {t["name"] for t in harness.get("/v1/tables", token=PRODUCER).json()["tables"]} == {"orders", "clicks"}
    refused = harness.get("/v1/tables/nosuch", token=ORDERS_ONLY)
    assert refused.status_code == 403, "a limited token must not learn which other tables exist"
