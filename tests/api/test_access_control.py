"""Who may call what: every route of the app × every kind of caller → the exact status.

``RULES`` (testing/access_control.py) is the access-control table. Its requests are valid apart from authorization
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

import hmac
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import requests

from api.auth import Authenticator, generated_tokens, tokens_file
from loader.config import Role, TokenConfig, load_settings
from loader.core.errors import Unauthorized
from testing.access_control import (
    BAD,
    ROWS,
    RULES,
    app_routes,
    capture_all_logs,
    exercise_tokens,
    headers_for,
    leaks,
    mismatches,
    run_matrix,
    served_with_all_logs,
)
from testing.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, Harness


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
    assert not mismatches(outcomes), "\n".join(mismatches(outcomes))
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


def test_tokens_never_appear_in_logs_or_responses(tmp_path: Path) -> None:
    with capture_all_logs() as logs:
        with served_with_all_logs(tmp_path / "data", logs) as (url, _), requests.Session() as session:
            outcomes, bodies = exercise_tokens(url, session)
    assert not mismatches(outcomes), "\n".join(mismatches(outcomes))
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
