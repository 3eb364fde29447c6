"""End to end with the real writer: HTTP intake -> WAL -> scheduler -> Spark job -> Delta commit.

The service runs in-process behind TestClient with the embedded default writer (Spark
writes Parquet, deltalake commits), on the test session's one Spark session. Tables are
read back with deltalake, DuckDB and Spark and must hold exactly the submitted rows, once.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from loader.config import Settings
from loader.core.schema import TableSchema
from loader.durability.transactions import app_id
from loader.loading.sinks import make_sink
from testing.service_harness import OPERATOR, Harness
from testing.tables import canonical, read_delta, read_duckdb, read_spark

pytestmark = pytest.mark.slow

EVENTS = {
    "name": "events",
    "schema": {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "kind", "type": "string"},
            {"name": "value", "type": "float64"},
            {"name": "at", "type": "timestamp"},
            {"name": "day", "type": "date"},
        ],
        "partition_by": ["day"],
    },
    "weight": 3.0,
}


@pytest.fixture
def live(spark, tmp_path: Path) -> Iterator[Harness]:
    def spark_sink(settings: Settings):  # type: ignore[no-untyped-def]
        return make_sink("delta-rs", settings.warehouse_path, spark)

    with Harness(tmp_path / "data", sink=spark_sink) as harness:
        assert harness.post("/v1/admin/tables", token=OPERATOR, json=EVENTS).status_code == 201
        yield harness


def event_rows(rng: random.Random, ids: range) -> list[dict[str, Any]]:
    base = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    return [
        {
            "id": i,
            "kind": rng.choice(["view", "click", None, "süß"]),
            "value": None if rng.random() < 0.2 else round(rng.uniform(-1e3, 1e3), 3),
            "at": (base + dt.timedelta(microseconds=rng.randrange(10**11))).isoformat(),
            "day": rng.choice(["2026-11-01", "2026-11-02", None]),
        }
        for i in ids
    ]


def test_every_intake_form_lands_exactly_once_and_reads_back_the_same_everywhere(spark, live: Harness) -> None:
    rng = random.Random(11)
    schema = TableSchema.model_validate(EVENTS["schema"])
    sent: list[dict[str, Any]] = []
    # JSON rows, several updates so that batches form while Spark is busy
    for k in range(6):
        rows = event_rows(rng, range(k * 50, k * 50 + 50))
        assert live.post("/v1/tables/events/updates", json={"rows": rows}).status_code == 202
        sent += rows
    # NDJSON
    rows = event_rows(rng, range(300, 340))
    ndjson = "\n".join(json.dumps(r) for r in rows).encode()
    r = live.post("/v1/tables/events/updates", content=ndjson, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    sent += rows
    # several tables in one request
    multi = [
        {"table": "events", "rows": event_rows(rng, range(400, 410))},
        {"table": "clicks", "rows": [{"url": "/a", "n": 1}, {"url": "/b", "n": None}]},
    ]
    r = live.post("/v1/updates", json={"updates": multi})
    assert r.status_code == 202, r.text
    sent += multi[0]["rows"]
    # a Parquet file from the landing directory (large feeds do not travel through the API)
    file_rows = event_rows(rng, range(500, 900))
    table = pa.Table.from_pylist(
        [dict(r, at=dt.datetime.fromisoformat(r["at"]), day=_date(r["day"])) for r in file_rows],
        schema=schema.arrow(),
    )
    pq.write_table(table, live.settings.landing_path / "feed-0001.parquet")
    r = live.post("/v1/tables/events/updates", json={"files": ["feed-0001.parquet"]})
    assert r.status_code == 202, r.text
    last = r.json()["updates"][0]["sequence"]
    sent += file_rows

    live.wait_loaded("events", last, timeout=120)
    live.wait_loaded("clicks", 1, timeout=120)

    path = live.settings.warehouse_path / "events"
    expected = canonical([_typed(r) for r in sent])
    assert canonical(read_delta(path)) == expected
    assert canonical(read_duckdb(path)) == expected
    assert canonical(read_spark(spark, path, schema)) == expected
    delta = DeltaTable(str(path))
    assert delta.transaction_version(app_id("events")) == last
    status = live.status("events")
    assert status["last_loaded_sequence"] == last and status["pending_updates"] == 0
    assert status["delta_version"] == delta.version() >= 1
    assert status["staleness_seconds"] >= 0 and status["low_bound"] > 0
    clicks = read_delta(live.settings.warehouse_path / "clicks").to_pylist()
    assert sorted(clicks, key=lambda c: c["url"]) == [{"url": "/a", "n": 1}, {"url": "/b", "n": None}]
    metrics = live.get("/metrics").text
    assert f'loader_rows_loaded_total{{table="events"}} {float(len(sent))}' in metrics
    assert 'loader_batches_total{outcome="loaded",table="events"}' in metrics


@pytest.mark.allow_errors('injected: disk full')
def test_a_failed_load_is_retried_and_lands_once(live: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    real_load = live.sink.load
    calls: list[int] = []

    def flaky(batch, schema):  # type: ignore[no-untyped-def]
        calls.append(batch.last_seq)
        if len(calls) == 1:
            raise OSError("injected: disk full")
        return real_load(batch, schema)

    monkeypatch.setattr(live.sink, "load", flaky)
    rows = [{"id": i, "kind": "retry"} for i in range(5)]
    assert live.post("/v1/tables/events/updates", json={"rows": rows}).status_code == 202
    live.wait_loaded("events", 1, timeout=120)
    assert len(calls) == 2  # failed once, then loaded
    assert sorted(r["id"] for r in read_delta(live.settings.warehouse_path / "events").to_pylist()) == list(range(5))
    assert live.status("events")["failures"] == 0
    assert 'loader_batches_total{outcome="failed",table="events"} 1.0' in live.get("/metrics").text


def _date(value: str | None) -> dt.date | None:
    return None if value is None else dt.date.fromisoformat(value)


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    """A submitted JSON row as the table holds it (timestamps and dates typed)."""
    return dict(row, at=dt.datetime.fromisoformat(row["at"]), day=_date(row["day"]))
