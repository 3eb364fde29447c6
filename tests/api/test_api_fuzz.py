"""Fuzz the HTTP API from its own OpenAPI document (schemathesis), as every kind of caller.

Each operation is fuzzed as the operator, a producer, a producer limited to ``orders``
and a caller without a token, with data that fits the document and data that does not.
No response may be a 5xx, every response must match the document (status code, content
type, headers, body schema), and invalid data must be refused (testing/api_fuzzing.py).
Afterwards every update the fuzzer got acknowledged must have loaded.

The service runs under uvicorn in a thread (one event loop, as in production) with the
Spark-free sink. A few examples per operation and role keep this under a minute; the
long run is ``.venv/bin/python -m trials.api_fuzz``.

The other tests pin what fuzzing found, each where it was fixed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from loader.service import LoaderService
from testing.api_fuzzing import CI_EXAMPLES, ROLES, Tally, fuzz_operation, load_schema, modes_for, operations, settle
from testing.service_harness import OPERATOR, Harness, serve_in_thread

SCHEMA = load_schema()
OPERATIONS = operations(SCHEMA)
DOCUMENT: dict[str, Any] = SCHEMA.raw_schema


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LoaderService]]:
    with serve_in_thread(Path(tmp_path_factory.mktemp("fuzz")) / "data") as served:
        yield served


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_response_matches_the_document(
    operation: Any, role: str, server: tuple[str, LoaderService], session: requests.Session
) -> None:
    url, _ = server
    tally = Tally()
    for mode in modes_for(operation):
        fuzz_operation(operation, role, url, session, tally, max_examples=CI_EXAMPLES[role], mode=mode)
    assert tally.total > 0
    assert not tally.findings, f"{len(tally.findings)} kinds of finding:\n{tally.report()}"


def test_every_acknowledged_update_loads(server: tuple[str, LoaderService], session: requests.Session) -> None:
    """After the fuzzing above: what was acknowledged is in the tables, and no load failed."""
    url, service = server
    settled = settle(url, service, session)
    assert settled.ok, settled


# -- what fuzzing found ------------------------------------------------------------------------
def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in DOCUMENT["paths"].items():
        for method, operation in methods.items():
            yield method.upper(), path, operation


def test_the_token_is_a_security_scheme_not_a_parameter() -> None:
    """It was a required header parameter of the feed routes and an optional one elsewhere,
    so generated requests dropped or invented it. Only /healthz is open."""
    scheme = DOCUMENT["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert DOCUMENT["security"] == [{"bearer": []}]
    open_operations = [(m, p) for m, p, op in _operations() if op.get("security") == []]
    assert open_operations == [("GET", "/healthz")]
    for method, path, operation in _operations():
        names = [p["name"].lower() for p in operation.get("parameters", [])]
        assert "authorization" not in names, (method, path)


def test_every_error_status_is_documented_with_the_error_body() -> None:
    """Errors were undocumented (401, 403, 404, ...) or documented as FastAPI's
    ``HTTPValidationError``, as NDJSON (trace export) or as text (/metrics)."""
    error_ref = {"$ref": "#/components/schemas/ErrorModel"}
    assert "HTTPValidationError" not in DOCUMENT["components"]["schemas"]
    for method, path, operation in _operations():
        responses = operation["responses"]
        if path != "/healthz":
            assert "401" in responses, (method, path)
        if path.startswith("/v1/admin"):
            assert "403" in responses, (method, path)
        for status, response in responses.items():
            if status.startswith(("4", "5")) and path not in ("/healthz", "/readyz"):
                assert response["content"] == {"application/json": {"schema": error_ref}}, (method, path, status)
    metrics = DOCUMENT["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]


def test_framework_errors_have_the_error_body(harness: Harness) -> None:
    """FastAPI's and Starlette's own errors used to send ``{"detail": ...}``."""
    invalid = harness.client.put("/v1/admin/tables/orders/weight", json={"weight": -1}, headers=_bearer(OPERATOR))
    body = invalid.json()
    assert invalid.status_code == 422 and body["error"] == "invalid" and "weight" in body["message"], body
    assert body["detail"] and all("input" not in problem for problem in body["detail"])

    unknown = harness.get("/v1/no-such-thing")
    assert unknown.status_code == 404 and unknown.json()["error"] == "not_found"

    method = harness.client.delete("/v1/tables", headers=_bearer(OPERATOR))
    assert method.status_code == 405 and method.json()["error"] == "method_not_allowed"
    assert method.headers["allow"] == "GET" and "GET" in method.json()["message"]

    not_text = harness.client.post(
        "/v1/admin/tables", content=b"\xff\xfe{", headers={**_bearer(OPERATOR), "Content-Type": "application/json"}
    )
    assert not_text.status_code == 400 and not_text.json()["error"] == "bad_request"


def test_an_update_naming_no_files_is_refused(harness: Harness) -> None:
    """``{"files": []}`` was acknowledged, then failed every load attempt until quarantined."""
    before = harness.status("orders")["last_sequence"]
    for path, body in (
        ("/v1/tables/orders/updates", {"files": []}),
        ("/v1/updates", {"updates": [{"table": "orders", "files": []}]}),
    ):
        response = harness.post(path, json=body)
        assert response.status_code == 422 and "files" in response.json()["message"], response.text
    assert harness.status("orders")["last_sequence"] == before


def test_the_longest_documented_table_list_reaches_the_service(server: tuple[str, LoaderService]) -> None:
    """``tables`` allowed 65536 characters, far past uvicorn's 64 KiB request line once
    percent-encoded: the HTTP server answered a plain-text 400 the document did not know."""
    url, _ = server
    for path in ("/v1/admin/trace", "/v1/admin/schedule"):
        (parameter,) = [p for p in DOCUMENT["paths"][path]["get"]["parameters"] if p["name"] == "tables"]
        limit = next(s["maxLength"] for s in parameter["schema"]["anyOf"] if "maxLength" in s)
        # The widest characters: 4 bytes of UTF-8, 12 once percent-encoded.
        for tables, status in (("\U0001f600" * limit, 404), ("\U0001f600" * (limit + 1), 422)):
            response = requests.get(url + path, params={"tables": tables}, headers=_bearer(OPERATOR), timeout=30)
            assert response.status_code == status, response.text[:200]
            assert response.headers["content-type"] == "application/json"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
