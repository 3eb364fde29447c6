"""Every way an update can arrive gives the same rows: a JSON body, the batch endpoint, NDJSON,
an Arrow IPC stream, a Parquet body and a Parquet landing file, of the same rows, into tables
of the same schema (flat, nested, decimal, binary, a partition column), read back from Delta.
Also: a columnar body under an Idempotency-Key, and the OpenAPI document's media types."""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.schema import TableSchema
from loader.intake.columnar_bodies import ARROW_STREAM, PARQUET
from testing.service_harness import OPERATOR, Harness

COLUMNS: list[dict[str, Any]] = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "n", "type": "int32"},
    {"name": "price", "type": "decimal(10,2)"},
    {"name": "blob", "type": "binary"},
    {"name": "at", "type": "timestamp"},
    {"name": "day", "type": "date"},
    {"name": "country", "type": "string"},
    {
        "name": "items",
        "type": {
            "type": "array",
            "elementType": {
                "type": "struct",
                "fields": [
                    {"name": "sku", "type": "string", "nullable": False, "metadata": {}},
                    {"name": "qty", "type": "int32", "nullable": True, "metadata": {}},
                ],
            },
            "containsNull": True,
        },
    },
    {"name": "attrs", "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}},
]
SCHEMA = {"columns": COLUMNS, "partition_by": ["country"]}
ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "n": 7,
        "price": "12.34",
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "at": "2026-01-31T12:00:00.5Z",
        "day": "2026-01-31",
        "country": "DE",
        "items": [{"sku": "a", "qty": 2}, {"sku": "b"}],
        "attrs": {"x": 1},
    },
    {"id": 2, "country": "FR", "items": [], "attrs": {}},
    {"id": 3},
]
PATHS = ("single", "multi", "ndjson", "arrow", "parquet", "landing")
AUTH = {"Authorization": f"Bearer {OPERATOR}"}


def _columns() -> pa.Table:
    """The rows as columns of the table's Arrow types, as a producer holding columns has them."""
    from loader.intake.rows import rows_to_arrow

    return rows_to_arrow(ROWS, TableSchema.model_validate(SCHEMA), "t")


def _ipc(data: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return sink.getvalue().to_pybytes()


def _parquet(data: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(data, out)
    return out.getvalue()


def _submit(h: Harness, path: str) -> None:
    table = f"via_{path}"
    url = f"/v1/tables/{table}/updates"
    if path == "single":
        r = h.post(url, json={"rows": ROWS})
    elif path == "multi":
        r = h.post("/v1/updates", json={"updates": [{"table": table, "rows": ROWS}]})
    elif path == "ndjson":
        body = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
        r = h.post(url, content=body, headers={"Content-Type": "application/x-ndjson"})
    elif path == "arrow":
        until = f"?data_until={time.time():.6f}"
        r = h.post(url + until, content=_ipc(_columns()), headers={"Content-Type": ARROW_STREAM})
    elif path == "parquet":
        r = h.post(url, content=_parquet(_columns()), headers={"Content-Type": PARQUET})
    else:
        pq.write_table(_columns(), h.settings.landing_path / "rows.parquet")
        r = h.post(url, json={"files": ["rows.parquet"]})
    assert r.status_code == 202, f"{path}: {r.text}"


def test_every_intake_path_gives_the_same_rows(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        for path in PATHS:
            r = h.post("/v1/admin/tables", token=OPERATOR, json={"name": f"via_{path}", "schema": SCHEMA})
            assert r.status_code == 201, r.text
            _submit(h, path)
        loaded = {}
        for path in PATHS:
            h.wait_loaded(f"via_{path}", 1)
            loaded[path] = h.rows(f"via_{path}")
        assert h.status("via_arrow")["last_sequence"] == 1
    assert len(loaded["single"]) == 3
    for path in PATHS[1:]:
        assert loaded[path] == loaded["single"], f"{path} differs from a JSON body"


def test_a_columnar_body_under_an_idempotency_key_and_its_refusals(harness: Harness) -> None:
    clicks = pa.table({"url": ["/a", "/b"], "n": pa.array([1, 2], pa.int32())})
    headers = {"Content-Type": ARROW_STREAM, "Idempotency-Key": "arrow-1"}
    first = harness.post("/v1/tables/clicks/updates", content=_ipc(clicks), headers=dict(headers))
    again = harness.post("/v1/tables/clicks/updates", content=_ipc(clicks), headers=dict(headers))
    assert first.status_code == again.status_code == 202, first.text
    assert again.headers.get("Idempotent-Replayed") == "true" and again.json() == first.json()
    other = harness.post("/v1/tables/clicks/updates", content=_ipc(clicks.slice(0, 1)), headers=dict(headers))
    assert other.status_code == 409, other.text
    wrong = pa.table({"url": ["/c"], "n": pa.array([3], pa.int64())})
    r = harness.post("/v1/tables/clicks/updates", content=_ipc(wrong), headers={"Content-Type": ARROW_STREAM})
    assert r.status_code == 422 and r.json()["column"] == "n", r.text
    assert "column 'n' is int64 in the Arrow stream but int32 in table 'clicks'" in r.json()["message"]
    r = harness.post("/v1/updates", content=_ipc(clicks), headers={"Content-Type": ARROW_STREAM})
    assert r.status_code == 415 and "takes application/json" in r.json()["message"], r.text
    harness.wait_loaded("clicks", 1)
    assert sorted(row["url"] for row in harness.rows("clicks")) == ["/a", "/b"]


def test_the_openapi_document_shows_the_columnar_media_types(harness: Harness) -> None:
    operation = harness.client.get("/openapi.json").json()["paths"]["/v1/tables/{table}/updates"]["post"]
    content = operation["requestBody"]["content"]
    assert {"application/json", "application/x-ndjson", ARROW_STREAM, PARQUET} <= set(content)
    assert content[ARROW_STREAM]["schema"]["format"] == "binary"
    data_until = next(p for p in operation["parameters"] if p["name"] == "data_until")
    assert "Arrow IPC" in data_until["description"]


def test_the_producer_sends_a_dataframe_as_arrow_through_a_running_service(tmp_path: Path) -> None:
    """The producer reads the table's schema (GET /v1/tables/orders, a producer token), casts a
    DataFrame's int64 and nanoseconds to it and posts an Arrow stream; Delta holds the rows."""
    import pandas as pd

    from producer import LoaderProducer
    from testing.service_harness import PRODUCER, serve_in_thread
    from testing.tables import read_delta

    frame = pd.DataFrame({"order_id": [1, 2, 3], "amount": [1.5, None, 2.0], "country": ["DE", "FR", None]})
    with serve_in_thread(tmp_path / "data") as (url, service):
        with LoaderProducer(url=url, token=PRODUCER) as producer:
            ack = producer.send("orders", frame).result(timeout=30)
        assert ack.sequence == 1
        Harness.wait(lambda: service.status.table("orders")["last_loaded_sequence"] >= 1)
        rows = read_delta(service.settings.warehouse_path / "orders").to_pylist()
    assert sorted(rows, key=lambda r: r["order_id"]) == [
        {"order_id": 1, "amount": 1.5, "country": "DE"},
        {"order_id": 2, "amount": None, "country": "FR"},
        {"order_id": 3, "amount": 2.0, "country": None},
    ]


def test_a_latest_table_takes_an_arrow_body_as_it_takes_rows(tmp_path: Path) -> None:
    """One row per key, the newest by order_by, whichever way the rows came."""
    quotes = {
        "name": "quotes",
        "schema": {
            "columns": [
                {"name": "sym", "type": "string", "nullable": False},
                {"name": "px", "type": "float64"},
                {"name": "ts", "type": "int64", "nullable": False},
            ]
        },
        "mode": "latest",
        "key": ["sym"],
        "order_by": "ts",
    }
    data = pa.table({"sym": ["ibm", "ibm", "msft"], "px": [1.0, 2.0, 3.0], "ts": pa.array([5, 6, 1], pa.int64())})
    with Harness(tmp_path / "data") as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=quotes).status_code == 201
        r = h.post("/v1/tables/quotes/updates", content=_ipc(data), headers={"Content-Type": ARROW_STREAM})
        assert r.status_code == 202, r.text
        keyless = pa.table({"sym": ["aapl", None], "px": [1.0, 2.0], "ts": pa.array([1, 2], pa.int64())})
        r = h.post("/v1/tables/quotes/updates", content=_ipc(keyless), headers={"Content-Type": ARROW_STREAM})
        assert r.status_code == 422 and r.json()["row"] == 1 and r.json()["column"] == "sym", r.text
        h.wait_loaded("quotes", 1)
        assert {row["sym"]: row["px"] for row in h.rows("quotes")} == {"ibm": 2.0, "msft": 3.0}
