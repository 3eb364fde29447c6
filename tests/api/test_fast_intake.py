"""The submit routes' fast path (api/fast_intake.py) answers as the declared FastAPI routes do:
the same requests, sent to a service with it and to one without, get the same statuses,
bodies and headers, change the same state, and are counted under the same metric labels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from api.fast_intake import submit_route
from testing.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, Harness

GOOD_CLICK = {"rows": [{"url": "/a", "n": 1}]}
AN_ORDER = {"table": "orders", "rows": [{"order_id": 1, "amount": 2.5, "country": "FR"}]}
NDJSON = {"Content-Type": "application/x-ndjson"}
ARROW = {"Content-Type": "application/vnd.apache.arrow.stream"}


def _ipc(**columns: pa.Array) -> bytes:
    data = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return sink.getvalue().to_pybytes()


#: (method, path, token, headers, body): what producers send, well and badly.
REQUESTS: list[tuple[str, str, str | None, dict[str, str], Any]] = [
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {"Idempotency-Key": "k-1"}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {"Idempotency-Key": "k-1"}, GOOD_CLICK),  # replayed
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {"Idempotency-Key": "k-1"}, {"rows": [{"url": "/b"}]}),  # 409
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {"Idempotency-Key": "k" * 1000}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", None, {}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", "not-a-token", {}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", ORDERS_ONLY, {}, GOOD_CLICK),  # 403
    ("POST", "/v1/tables/nope/updates", PRODUCER, {}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {}, b"{not json"),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {}, {"rows": []}),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {}, {"rows": [{"url": 5, "n": 1}]}),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {"Content-Type": "text/plain"}, b"hello"),
    ("POST", "/v1/tables/clicks/updates?data_until=1", PRODUCER, NDJSON, b'{"url": "/c", "n": 3}\n'),  # too early
    ("POST", "/v1/tables/clicks/updates?data_until=2000000000000", PRODUCER, NDJSON, b'{"url": "/c"}\n'),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, ARROW, _ipc(url=pa.array(["/d"]), n=pa.array([4], pa.int32()))),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, ARROW, _ipc(url=pa.array(["/e"]), n=pa.array([5]))),  # int64: 422
    ("POST", "/v1/tables/clicks/updates", PRODUCER, ARROW, b"not arrow"),  # 400
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {"Content-Length": "999999999"}, GOOD_CLICK),
    ("POST", "/v1/tables/clicks/updates", PRODUCER, {}, {"rows": [{"url": "x" * 100}] * 2000}),  # past 64 KiB
    ("POST", "/v1/updates", PRODUCER, {}, {"updates": [{"table": "clicks", **GOOD_CLICK}, AN_ORDER]}),
    ("POST", "/v1/updates", ORDERS_ONLY, {}, {"updates": [{"table": "clicks", **GOOD_CLICK}]}),
    ("POST", "/v1/updates", PRODUCER, {}, {"updates": []}),
    ("POST", "/v1/updates", OPERATOR, {"Idempotency-Key": "k-2"}, {"updates": [{"table": "clicks", **GOOD_CLICK}]}),
    ("GET", "/v1/tables/clicks/updates", PRODUCER, {}, None),  # 405, from FastAPI in both
    ("POST", "/v1/updates/", PRODUCER, {}, {"updates": []}),  # not the route: FastAPI's redirect
    ("POST", "/v1/tables/a/b/updates", PRODUCER, {}, GOOD_CLICK),  # no such route: 404
]
#: Values that differ between two services by when they ran, not by what they answered.
TIMES = ("release_time", "release_time_iso", "date")


def _timeless(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", value)
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _exchange(harness: Harness) -> list[tuple[int, dict[str, str], Any]]:
    answers = []
    for method, path, token, headers, body in REQUESTS:
        headers = dict(headers)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        if content is not None:
            headers.setdefault("Content-Type", "application/json")
        r = harness.client.request(method, path, content=content, headers=headers, follow_redirects=False)
        kept = {k: v for k, v in r.headers.items() if k not in TIMES and k != "content-length"}  # (a time's digits)
        answers.append((r.status_code, kept, _timeless(r.json()) if r.content else None))
    return answers


def _submit_metrics(harness: Harness) -> dict[str, float]:
    text = harness.client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"}).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("loader_http_requests_total{") and "updates" in line
    }


def test_the_fast_path_answers_as_the_declared_routes(tmp_path: Path) -> None:
    outcomes = {}
    for fast in (True, False):
        with Harness(tmp_path / f"fast-{fast}", fast_intake=fast, intake={"max_body_bytes": 64 << 10}) as h:
            answers = _exchange(h)
            for table in ("clicks", "orders"):  # what was accepted loads (a load may still be running)
                h.wait_loaded(table, h.status(table)["last_sequence"])
            state = {t: (h.status(t)["last_sequence"], h.status(t)["pending_updates"]) for t in ("clicks", "orders")}
            outcomes[fast] = answers, state, _submit_metrics(h)
    fast, slow = outcomes[True], outcomes[False]
    for request, a, b in zip(REQUESTS, fast[0], slow[0]):
        assert a == b, f"{request[:2]}: fast path {a} != FastAPI {b}"
    statuses = [a[0] for a in fast[0]]
    assert statuses[:4] == [202, 202, 202, 409] and 401 in statuses and 413 in statuses, statuses
    assert fast[0][2][1].get("idempotent-replayed") == "true"
    assert fast[1] == slow[1] and fast[1]["clicks"][0] > 0
    assert fast[2] == slow[2] and fast[2], "the submit requests are counted alike"


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/updates", ("/v1/updates", None)),
        ("/v1/tables/clicks/updates", ("/v1/tables/{table}/updates", "clicks")),
        ("/v1/tables/a b%2F/updates", ("/v1/tables/{table}/updates", "a b%2F")),
        ("/v1/tables//updates", None),
        ("/v1/tables/a/b/updates", None),
        ("/v1/updates/", None),
        ("/v1/tables/clicks/updates/", None),
        ("/v1/tables/clicks", None),
    ],
)
def test_only_the_two_submit_routes_take_the_fast_path(path: str, route: tuple[str, str | None] | None) -> None:
    assert submit_route(path) == route


def test_a_client_gone_before_its_body_arrived_submits_nothing() -> None:
    import asyncio

    from starlette.requests import ClientDisconnect

    from api.fast_intake import _read_body

    messages = iter([{"type": "http.request", "body": b'{"rows"', "more_body": True}, {"type": "http.disconnect"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    with pytest.raises(ClientDisconnect):
        asyncio.run(_read_body(receive, None, 1 << 20))


@pytest.mark.parametrize(
    ("path", "root"),
    [("/v1/updates", ""), ("/api/v1/updates", "/api"), ("/api", "/api"), ("/apix/v1", "/api"), ("/v1/x", "/api")],
)
def test_the_fast_path_routes_on_the_path_starlette_routes_on(path: str, root: str) -> None:
    from starlette._utils import get_route_path

    from api.fast_intake import route_path

    scope = {"path": path, "root_path": root}
    assert route_path(scope) == get_route_path(scope)
