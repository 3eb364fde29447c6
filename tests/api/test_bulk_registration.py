"""POST /v1/admin/tables:bulk: many tables in one call, all or nothing, one catalog save.

At 1,000 tables with the Spark-free sink (each one's Delta table is really created).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from fastapi.testclient import TestClient

from api.app import create_app
from testing.fakes import ArrowSink
from testing.service_harness import OPERATOR, PRODUCER, Harness, make_settings

BULK = "/v1/admin/tables:bulk"
COLUMNS = [{"name": "k", "type": "int64"}, {"name": "v", "type": "string"}]


def declarations(count: int, prefix: str = "t") -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{i:04d}", "schema": {"columns": COLUMNS}, "weight": 1 + i % 3} for i in range(count)]


def registered(harness: Harness) -> set[str]:
    return set(harness.service.catalog.entries)


@pytest.fixture
def counted_saves(harness: Harness) -> list[int]:
    """How many times the catalog file is written."""
    saves: list[int] = []
    save = harness.service.catalog.save

    def counting(data: bytes | None = None) -> None:
        saves.append(1)
        save(data)

    harness.service.catalog.save = counting  # type: ignore[method-assign]
    return saves


def test_a_thousand_tables_register_in_one_call_with_one_catalog_save(
    harness: Harness, counted_saves: list[int]
) -> None:
    tables = declarations(1000)
    answer = harness.post(BULK, token=OPERATOR, json={"tables": tables})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"created": [t["name"] for t in tables], "unchanged": [], "changed": []}
    assert counted_saves == [1]
    assert {t["name"] for t in tables} <= registered(harness)
    assert DeltaTable(str(harness.settings.warehouse_path / "t0999")).schema().to_arrow().names == ["k", "v"]
    catalog = json.loads(harness.settings.state_path.joinpath("catalog.json").read_text(encoding="utf-8"))
    assert {e["name"]: e["weight"] for e in catalog["tables"]}["t0005"] == 3
    # Registered tables take updates and load them.
    ack = harness.post("/v1/tables/t0999/updates", json={"rows": [{"k": 1, "v": "a"}]})
    assert ack.status_code == 202, ack.text
    harness.wait_loaded("t0999", 1)
    assert harness.rows("t0999") == [{"k": 1, "v": "a"}]


def test_registering_the_same_tables_again_changes_nothing(harness: Harness) -> None:
    tables = declarations(50)
    assert harness.post(BULK, token=OPERATOR, json={"tables": tables}).status_code == 200
    before = harness.settings.state_path.joinpath("catalog.json").read_bytes()
    more = declarations(3, prefix="u")
    again = harness.post(BULK, token=OPERATOR, json={"tables": tables + more})
    assert again.status_code == 200, again.text
    assert again.json() == {
        "created": ["u0000", "u0001", "u0002"],
        "unchanged": [t["name"] for t in tables],
        "changed": [],
    }
    repeat = harness.post(BULK, token=OPERATOR, json={"tables": tables})
    assert repeat.json() == {"created": [], "unchanged": [t["name"] for t in tables], "changed": []}
    assert len(registered(harness)) == 2 + 50 + 3
    assert before != harness.settings.state_path.joinpath("catalog.json").read_bytes()  # the u tables were saved


@pytest.mark.parametrize(
    "bad,index,fragments",
    [
        ({"name": "bad name", "schema": {"columns": COLUMNS}}, 700, ["#700 'bad name'", "name"]),
        ({"name": "t0001", "schema": {"columns": COLUMNS}}, 1000, ["#1000 't0001'", "declared before, at #1"]),
        ({"name": "x", "schema": {"columns": [{"name": "k", "type": "int128"}]}}, 3, ["#3 'x'", "schema.columns"]),
        ({"name": "w", "schema": {"columns": COLUMNS}, "weight": -1}, 999, ["#999 'w'", "weight"]),
        ("not an object", 0, ["#0:", "valid dictionary"]),
    ],
)
def test_one_bad_entry_registers_nothing_and_is_named(
    harness: Harness, counted_saves: list[int], bad: Any, index: int, fragments: list[str]
) -> None:
    tables: list[Any] = declarations(1000)
    tables.insert(index, bad)
    answer = harness.post(BULK, token=OPERATOR, json={"tables": tables})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["message"].startswith("1 of 1001 table declarations are invalid, so none was registered")
    for fragment in fragments:
        assert fragment in body["message"], body["message"]
    [entry] = body["detail"]
    assert entry["index"] == index and entry["problems"]
    assert registered(harness) == {"orders", "clicks"} and counted_saves == []
    assert not (harness.settings.warehouse_path / "t0000").exists()


def test_every_bad_entry_is_in_the_detail_and_the_first_ones_in_the_message(harness: Harness) -> None:
    tables: list[Any] = declarations(20)
    for k in (2, 5, 8, 11, 14, 17):
        tables[k] = {"name": f"bad-{k}", "schema": {"columns": COLUMNS}}
    body = harness.post(BULK, token=OPERATOR, json={"tables": tables}).json()
    assert [e["index"] for e in body["detail"]] == [2, 5, 8, 11, 14, 17]
    assert [e["name"] for e in body["detail"]] == [f"bad-{k}" for k in (2, 5, 8, 11, 14, 17)]
    assert "'bad-14'" in body["message"] and "'bad-17'" not in body["message"]
    assert "(and 1 more, all in detail)" in body["message"]


def test_a_table_registered_with_another_schema_refuses_the_whole_call(
    harness: Harness, counted_saves: list[int]
) -> None:
    tables = declarations(300)
    tables[150] = {"name": "orders", "schema": {"columns": COLUMNS}}  # the harness's orders has other columns
    tables[160] = {"name": "clicks", "schema": {"columns": COLUMNS}}
    answer = harness.post(BULK, token=OPERATOR, json={"tables": tables})
    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert body["tables"] == ["orders", "clicks"]
    assert "'orders', 'clicks'" in body["message"] and "none was registered" in body["message"]
    assert registered(harness) == {"orders", "clicks"} and counted_saves == []


def test_a_delta_table_of_another_schema_refuses_the_whole_call(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as harness:
        ArrowSink(harness.settings.warehouse_path).ensure_table(
            "t0042", harness.service.catalog.entries["orders"].schema
        )
        answer = harness.post(BULK, token=OPERATOR, json={"tables": declarations(100)})
        assert answer.status_code == 409, answer.text
        assert "'t0042'" in answer.json()["message"] and "Delta table" in answer.json()["message"]
        assert registered(harness) == {"orders", "clicks"}
        # Created before the conflict was found: empty, unregistered, adopted by a later call.
        fixed = [t for t in declarations(100) if t["name"] != "t0042"]
        assert harness.post(BULK, token=OPERATOR, json={"tables": fixed}).status_code == 200
        assert len(registered(harness)) == 2 + 99


@pytest.mark.parametrize(
    "kwargs,status,fragment",
    [
        ({"content": b"{", "headers": {"Content-Type": "application/json"}}, 400, "not valid JSON"),
        ({"content": b"a,b", "headers": {"Content-Type": "text/csv"}}, 415, "application/json"),
        ({"json": [{"name": "t"}]}, 422, '{"tables": [<table declaration>'),
        ({"json": {"tables": {"name": "t"}}}, 422, '{"tables": [<table declaration>'),
        ({"json": {"tables": [], "extra": 1}}, 422, '{"tables": [<table declaration>'),
    ],
)
def test_a_body_of_another_shape_is_refused(
    harness: Harness, kwargs: dict[str, Any], status: int, fragment: str
) -> None:
    answer = harness.post(BULK, token=OPERATOR, **kwargs)
    assert answer.status_code == status, answer.text
    assert fragment in answer.json()["message"]


def test_only_operators_register_and_a_token_is_checked_before_the_body(harness: Harness) -> None:
    assert harness.post(BULK, token=PRODUCER, json={"tables": declarations(3)}).status_code == 403
    assert harness.post(BULK, token=None, content=b"{").status_code == 401
    assert registered(harness) == {"orders", "clicks"}


def test_the_body_limit_applies(tmp_path: Path) -> None:
    with Harness(tmp_path / "data", intake={"max_body_bytes": 4096}) as harness:
        answer = harness.post(BULK, token=OPERATOR, json={"tables": declarations(100)})
        assert answer.status_code == 413 and "limit" in answer.json()["message"]


def test_tables_registered_while_spark_starts_load_once_it_is_up(tmp_path: Path) -> None:
    """No Delta table can be made before the writer exists: the start of loading checks
    them with the rest, and the first update of each loads."""
    spark_up = threading.Event()

    def slow_sink(settings):  # type: ignore[no-untyped-def]
        assert spark_up.wait(30), "test did not release the sink"
        return ArrowSink(settings.warehouse_path)

    auth = {"Authorization": f"Bearer {OPERATOR}"}
    with TestClient(create_app(make_settings(tmp_path / "data"), sink_factory=slow_sink)) as client:
        answer = client.post(BULK, json={"tables": declarations(300)}, headers=auth)
        assert answer.status_code == 200 and len(answer.json()["created"]) == 300
        assert not (tmp_path / "data" / "warehouse" / "t0299").exists()
        assert client.post("/v1/tables/t0299/updates", json={"rows": [{"k": 1}]}, headers=auth).status_code == 202
        spark_up.set()
        Harness.wait(lambda: client.get("/readyz", headers=auth).status_code == 200)
        Harness.wait(lambda: client.get("/v1/tables/t0299", headers=auth).json()["last_loaded_sequence"] == 1)
