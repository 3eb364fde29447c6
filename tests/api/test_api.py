"""The HTTP contract of the service, with a Spark-free sink (testing/fakes.py) so it runs fast.

Asserts what producers and operators rely on: statuses, that bad input changes nothing,
idempotency, auth, and rows in the Delta tables exactly once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from testing.fakes import ArrowSink
from testing.service_harness import CLICKS, OPERATOR, ORDERS_ONLY, PRODUCER, Harness, make_settings


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_rows_are_acknowledged_and_loaded_exactly_once(harness: Harness) -> None:
    rows = [{"order_id": k, "amount": k * 1.5, "country": "DE" if k % 2 else "FR"} for k in range(10)]
    response = harness.post("/v1/tables/orders/updates", json={"rows": rows[:6]})
    assert response.status_code == 202, response.text
    first = response.json()["updates"][0]
    assert first["table"] == "orders" and first["sequence"] == 1 and first["release_time"] > 0
    second = harness.post("/v1/tables/orders/updates", json={"rows": rows[6:]}).json()["updates"][0]
    assert second["sequence"] == 2 and second["release_time"] > first["release_time"]
    harness.wait_loaded("orders", 2)
    assert harness.rows("orders") == _sorted(rows)
    status = harness.status("orders")
    assert status["pending_updates"] == 0 and status["delta_version"] >= 1 and status["weight"] == 2.0


def test_ndjson_and_multi_update_endpoint(harness: Harness) -> None:
    body = b'{"url": "/a", "n": 1}\n{"url": "/b", "n": 2}\n'
    r = harness.post("/v1/tables/clicks/updates", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    multi = {
        "updates": [
            {"table": "clicks", "rows": [{"url": "/c", "n": 3}]},
            {"table": "orders", "rows": [{"order_id": 1, "country": "US"}]},
            {"table": "clicks", "rows": [{"url": "/d"}]},
        ]
    }
    r = harness.post("/v1/updates", json=multi)
    assert r.status_code == 202, r.text
    assert [(u["table"], u["sequence"]) for u in r.json()["updates"]] == [("clicks", 2), ("orders", 1), ("clicks", 3)]
    harness.wait_loaded("clicks", 3)
    harness.wait_loaded("orders", 1)
    assert [r["url"] for r in harness.rows("clicks")] == ["/a", "/b", "/c", "/d"]
    assert harness.rows("orders") == [{"order_id": 1, "amount": None, "country": "US"}]


@pytest.mark.parametrize(
    "path,kwargs,status,fragment",
    [
        ("/v1/tables/nope/updates", {"json": {"rows": [{"x": 1}]}}, 404, "does not exist"),
        ("/v1/tables/orders/updates", {"json": {"rows": [{"order_id": 1}, {"order_id": "x"}]}}, 422, "row 1"),
        (
            "/v1/tables/orders/updates",
            {"content": b'{"rows": [', "headers": {"Content-Type": "application/json"}},
            400,
            "not valid JSON",
        ),
        ("/v1/tables/orders/updates", {"json": {"files": ["../../etc/passwd"]}}, 400, "outside the landing directory"),
        ("/v1/tables/orders/updates", {"json": {"files": ["missing.parquet"]}}, 400, "does not exist"),
        (
            "/v1/updates",
            {
                "json": {
                    "updates": [
                        {"table": "orders", "rows": [{"order_id": 1}]},
                        {"table": "clicks", "rows": [{"n": "x"}]},
                    ]
                }
            },
            422,
            "column 'n'",
        ),
        (
            "/v1/updates",
            {"json": {"updates": [{"table": "orders", "rows": [{"order_id": 1}]}, {"table": "nope", "rows": [{}]}]}},
            404,
            "nope",
        ),
        (
            "/v1/tables/orders/updates",
            {"content": b"a,b", "headers": {"Content-Type": "text/csv"}},
            415,
            "not supported",
        ),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    harness: Harness, path: str, kwargs: dict, status: int, fragment: str
) -> None:
    before = {t: harness.status(t)["last_sequence"] for t in ("orders", "clicks")}
    r = harness.post(path, **kwargs)
    assert r.status_code == status, r.text
    assert fragment in r.json()["message"]
    assert {t: harness.status(t)["last_sequence"] for t in ("orders", "clicks")} == before
    assert harness.service.wal.size_bytes == 0 or before != {"orders": 0, "clicks": 0}


def test_body_too_large_is_413(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "d", intake={"max_body_bytes": 2048})
    with TestClient(create_app(settings, sink_factory=lambda s: ArrowSink(s.warehouse_path))) as client:
        rows = [{"url": "x" * 100, "n": 1}] * 50
        r = client.post(
            "/v1/tables/clicks/updates", json={"rows": rows}, headers={"Authorization": f"Bearer {PRODUCER}"}
        )
        assert r.status_code == 413 and "limit" in r.json()["message"]


def test_idempotency_key_returns_the_first_answer(harness: Harness) -> None:
    body = {"rows": [{"order_id": 7, "country": "DE"}]}
    headers = {"Idempotency-Key": "batch-0007"}
    first = harness.post("/v1/tables/orders/updates", json=body, headers=dict(headers))
    again = harness.post("/v1/tables/orders/updates", json=body, headers=dict(headers))
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert again.headers.get("Idempotent-Replayed") == "true"
    other = harness.post("/v1/tables/orders/updates", json={"rows": [{"order_id": 8}]}, headers=dict(headers))
    assert other.status_code == 409
    harness.wait_loaded("orders", 1)
    assert harness.status("orders")["last_sequence"] == 1
    assert [r["order_id"] for r in harness.rows("orders")] == [7]


def test_auth_roles(harness: Harness) -> None:
    rows = {"rows": [{"url": "/x"}]}
    assert harness.post("/v1/tables/clicks/updates", token=None, json=rows).status_code == 401
    assert harness.post("/v1/tables/clicks/updates", token="wrong-token-wrong-token", json=rows).status_code == 401
    assert harness.post("/v1/tables/clicks/updates", token=ORDERS_ONLY, json=rows).status_code == 403
    multi = {"updates": [{"table": "orders", "rows": [{"order_id": 1}]}, {"table": "clicks", "rows": [{}]}]}
    assert harness.post("/v1/updates", token=ORDERS_ONLY, json=multi).status_code == 403
    assert harness.post("/v1/admin/tables", token=PRODUCER, json=CLICKS).status_code == 403
    assert harness.get("/healthz", token=None).status_code == 200
    assert harness.get("/metrics", token=None).status_code == 401
    assert harness.get("/readyz", token=None).status_code == 401
    assert harness.get("/v1/tables", token=None).status_code == 401
    assert harness.get("/readyz", token=PRODUCER).status_code == 200
    assert harness.status("clicks")["last_sequence"] == 0


def test_operator_actions(harness: Harness) -> None:
    events = {"name": "events", "schema": {"columns": [{"name": "k", "type": "string"}]}, "period_hint": 2.0}
    r = harness.post("/v1/admin/tables", token=OPERATOR, json=events)
    assert r.status_code == 201, r.text
    assert harness.post("/v1/admin/tables", token=OPERATOR, json=events).status_code == 201  # same schema: no-op
    changed = dict(events, schema={"columns": [{"name": "k", "type": "int64"}]})
    assert harness.post("/v1/admin/tables", token=OPERATOR, json=changed).status_code == 409
    bad = {"name": "bad name", "schema": {"columns": [{"name": "k", "type": "string"}]}}
    assert harness.post("/v1/admin/tables", token=OPERATOR, json=bad).status_code == 422
    r = harness.client.put(
        "/v1/admin/tables/events/weight", json={"weight": 4}, headers={"Authorization": f"Bearer {OPERATOR}"}
    )
    assert r.status_code == 200 and r.json()["weight"] == 4
    assert harness.post("/v1/admin/tables/events/pause", token=OPERATOR).json()["paused"] is True
    assert harness.post("/v1/tables/events/updates", json={"rows": [{"k": "a"}]}).status_code == 202
    assert harness.status("events")["pending_updates"] == 1  # paused: intake continues, loading waits
    assert harness.post("/v1/admin/tables/events/resume", token=OPERATOR).json()["paused"] is False
    harness.wait_loaded("events", 1)
    r = harness.client.put(
        "/v1/admin/policy", json={"policy": "group-and-run"}, headers={"Authorization": f"Bearer {OPERATOR}"}
    )
    assert r.status_code == 200 and r.json()["policy"] == "group-and-run"
    r = harness.client.put("/v1/admin/policy", json={"policy": "nope"}, headers={"Authorization": f"Bearer {OPERATOR}"})
    assert r.status_code == 422
    assert harness.post("/v1/tables/events/updates", json={"rows": [{"k": "b"}]}).status_code == 202
    harness.wait_loaded("events", 2)
    assert sorted(r["k"] for r in harness.rows("events")) == ["a", "b"]


def test_data_until_must_increase(harness: Harness) -> None:
    registered = harness.status("clicks")["current_upto"]  # the table's data starts at registration
    r = harness.post("/v1/tables/clicks/updates", json={"rows": [{"n": 0}], "data_until": registered - 5})
    assert r.status_code == 422 and "registration time" in r.json()["message"]
    now = time.time()
    assert harness.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}], "data_until": now}).status_code == 202
    r = harness.post("/v1/tables/clicks/updates", json={"rows": [{"n": 2}], "data_until": now - 20})
    assert r.status_code == 422 and "not after" in r.json()["message"]
    assert harness.status("clicks")["last_sequence"] == 1  # the refused updates took no sequence number
    r = harness.post("/v1/tables/clicks/updates", json={"rows": [{"n": 2}], "data_until": now + 3600})
    assert r.status_code == 422 and "future" in r.json()["message"]


def test_landing_files_are_loaded(harness: Harness) -> None:
    landing = harness.settings.landing_path
    pq.write_table(pa.table({"order_id": pa.array([1, 2], pa.int64()), "country": ["DE", "FR"]}), landing / "a.parquet")
    (landing / "b.csv").write_text("order_id,amount,country\n3,1.5,DE\n", encoding="utf-8")
    (landing / "c.json").write_text('{"order_id": 4, "country": "US"}\n', encoding="utf-8")
    r = harness.post(
        "/v1/tables/orders/updates", json={"files": ["a.parquet", "b.csv", {"path": "c.json", "format": "json"}]}
    )
    assert r.status_code == 202, r.text
    (landing / "a.parquet").unlink()  # the producer may delete its file once acknowledged
    bad = landing / "bad.csv"
    bad.write_text("order_id,amount,country\nnot-a-number,1,DE\n", encoding="utf-8")
    r = harness.post("/v1/tables/orders/updates", json={"files": ["bad.csv"]})
    assert r.status_code == 422
    harness.wait_loaded("orders", 1)
    assert sorted(r["order_id"] for r in harness.rows("orders")) == [1, 2, 3, 4]
    assert not any(harness.service.intake.owned_dir.rglob("*.*"))  # owned copies removed after the load


def test_metrics_after_a_load(harness: Harness) -> None:
    harness.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}]})
    harness.wait_loaded("clicks", 1)
    text = harness.get("/metrics").text
    for name in (
        'loader_table_staleness_seconds{table="clicks"}',
        'loader_table_current_upto_timestamp_seconds{table="clicks"}',
        'loader_table_staleness_seconds_squared_total{table="clicks"}',
        'loader_table_low_bound_seconds_squared_total{table="clicks"}',
        'loader_update_stretch_bucket{le="+Inf",table="clicks"} 1.0',
        'loader_batches_total{outcome="loaded",table="clicks"} 1.0',
        'loader_rows_loaded_total{table="clicks"} 1.0',
        "loader_wal_fsync_duration_seconds_count",
        'loader_policy_info{policy="myopic"} 1.0',
        "loader_workers_busy",
        'loader_http_requests_total{route="/v1/tables/{table}/updates",status="202"}',
    ):
        assert name in text, name


@pytest.mark.allow_errors(r"failed \(attempt 1\): injected failure")
def test_recovery_loads_logged_updates_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    fail = threading.Event()
    fail.set()  # loading fails: updates stay in the WAL only
    with Harness(data, fail) as h:
        for k in range(3):
            assert h.post("/v1/tables/clicks/updates", json={"rows": [{"n": k}]}).status_code == 202
        key = {"Idempotency-Key": "k-1"}
        first = h.post("/v1/tables/orders/updates", json={"rows": [{"order_id": 1}]}, headers=dict(key)).json()
    with Harness(data) as h:
        assert h.service.recovered_updates == 4
        h.wait_loaded("clicks", 3)
        h.wait_loaded("orders", 1)
        assert sorted(r["n"] for r in h.rows("clicks")) == [0, 1, 2]
        again = h.post("/v1/tables/orders/updates", json={"rows": [{"order_id": 1}]}, headers=dict(key))
        assert again.json() == first  # the key survived the restart
        nxt = h.post("/v1/tables/clicks/updates", json={"rows": [{"n": 3}]}).json()["updates"][0]
        assert nxt["sequence"] == 4
        h.wait_loaded("clicks", 4)
    with Harness(data) as h:  # everything already committed: nothing is loaded twice
        assert h.service.recovered_updates == 0
        assert sorted(r["n"] for r in h.rows("clicks")) == [0, 1, 2, 3]
        assert h.sink.loads == 0


def test_intake_opens_before_spark_and_readyz_waits_for_it(tmp_path: Path) -> None:
    """Producers are not turned away while Spark starts; /readyz says when loading runs."""
    spark_up = threading.Event()

    def slow_sink(settings):  # type: ignore[no-untyped-def]
        assert spark_up.wait(30), "test did not release the sink"
        return ArrowSink(settings.warehouse_path)

    settings = make_settings(tmp_path / "d")
    with TestClient(create_app(settings, sink_factory=slow_sink)) as client:
        auth = {"Authorization": f"Bearer {OPERATOR}"}
        r = client.get("/readyz", headers=auth)
        assert r.status_code == 503 and r.json()["accepting"] is True and r.json()["writer"] is None
        assert client.get("/healthz").status_code == 200
        r = client.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}]}, headers=auth)
        assert r.status_code == 202
        assert client.get("/v1/tables/clicks", headers=auth).json()["pending_updates"] == 1
        spark_up.set()
        Harness.wait(lambda: client.get("/readyz", headers=auth).status_code == 200)
        assert client.get("/readyz", headers=auth).json()["writer"] == "arrow-test"
        Harness.wait(lambda: client.get("/v1/tables/clicks", headers=auth).json()["last_loaded_sequence"] == 1)
