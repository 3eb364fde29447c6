"""GET /v1/tables in pages: limit, cursor, sort by name or staleness, at 1,000 tables.

Clients written before paging keep working: without a limit a page holds up to 1,000
tables, so a service of that size answers with all of them at once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from testing.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, Harness

TABLES = 1000
COLUMNS = [{"name": "k", "type": "int64"}]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service with 1,002 tables, some loaded (fresher) than others."""
    with Harness(Path(tmp_path_factory.mktemp("paging")) / "data") as harness:
        tables = [{"name": f"t{i:04d}", "schema": {"columns": COLUMNS}} for i in range(TABLES)]
        assert harness.post("/v1/admin/tables:bulk", token=OPERATOR, json={"tables": tables}).status_code == 200
        for name in ("t0500", "t0007", "t0999"):  # these become the freshest tables
            assert harness.post(f"/v1/tables/{name}/updates", json={"rows": [{"k": 1}]}).status_code == 202
            harness.wait_loaded(name, 1)
        yield harness


def pages(harness: Harness, token: str = OPERATOR, **params: Any) -> list[dict[str, Any]]:
    """Every page, following next_cursor."""
    out, cursor = [], None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        answer = harness.client.get("/v1/tables", params=query, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        out.append(answer.json())
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return out
        assert len(out) < 100, "the pages never ended"


def test_without_a_limit_a_service_of_a_thousand_tables_answers_in_one_page(many: Harness) -> None:
    [page] = pages(many, limit=TABLES + 2)
    assert page["total"] == TABLES + 2 and len(page["tables"]) == TABLES + 2
    first = many.get("/v1/tables").json()
    assert len(first["tables"]) == 1000 and first["total"] == TABLES + 2 and first["next_cursor"]
    assert first["tables"][0]["name"] == "clicks" and "staleness_seconds" in first["tables"][0]


def test_pages_by_name_hold_every_table_once_in_name_order(many: Harness) -> None:
    found = pages(many, limit=77)
    assert [len(p["tables"]) for p in found] == [77] * 13 + [1]
    names = [t["name"] for p in found for t in p["tables"]]
    assert names == sorted(many.service.catalog.entries) and len(names) == TABLES + 2
    assert all(p["total"] == TABLES + 2 for p in found)


def test_a_table_registered_between_pages_does_not_shift_the_pages(many: Harness) -> None:
    first = many.get("/v1/tables?limit=10").json()
    new = {"name": "a_new_table", "schema": {"columns": COLUMNS}}  # sorts before every page but the first
    assert many.post("/v1/admin/tables", token=OPERATOR, json=new).status_code == 201
    second = many.get(f"/v1/tables?limit=10&cursor={first['next_cursor']}").json()
    assert [t["name"] for t in second["tables"]] == [f"t{i:04d}" for i in range(8, 18)]
    assert first["tables"][-1]["name"] == "t0007"


def test_stalest_first_pages_rank_every_table_once(many: Harness) -> None:
    found = pages(many, sort="staleness", limit=100)
    ranked = [t for p in found for t in p["tables"]]
    assert len(ranked) == len(many.service.catalog.entries)
    assert len({t["name"] for t in ranked}) == len(ranked)
    uptos = [(t["current_upto"], t["name"]) for t in ranked]
    assert uptos == sorted(uptos)  # oldest current_upto first = stalest first, ties by name
    bulk = [t["name"] for t in ranked if t["name"].startswith("t")]
    assert bulk[-3:] == ["t0500", "t0007", "t0999"]  # loaded last: the freshest of them
    staleness = [t["staleness_seconds"] for t in found[0]["tables"]]
    assert staleness == sorted(staleness, reverse=True)  # one instant for the whole page


def test_the_staleness_order_holds_across_pages_asked_for_later(many: Harness) -> None:
    """Staleness grows for every table alike, so a later page continues the same ranking."""
    first = many.get("/v1/tables?sort=staleness&limit=5").json()
    time.sleep(0.05)
    second = many.get(f"/v1/tables?sort=staleness&limit=5&cursor={first['next_cursor']}").json()
    both = [t["current_upto"] for t in first["tables"] + second["tables"]]
    assert both == sorted(both) and len(second["tables"]) == 5


def test_a_token_limited_to_some_tables_pages_through_those_only(many: Harness) -> None:
    found = pages(many, token=ORDERS_ONLY, limit=1)
    assert [t["name"] for p in found for t in p["tables"]] == ["orders"]
    assert found[0]["total"] == 1
    assert pages(many, token=PRODUCER, limit=1000)[0]["total"] == len(many.service.catalog.entries)


@pytest.mark.parametrize(
    "query,fragment",
    [
        ("limit=0", "limit"),
        ("limit=10001", "limit"),
        ("sort=size", "sort"),
        ("cursor=not-a-cursor", "cursor is not one this service gave out"),
        ("cursor=eyJzb3J0IjoibmFtZSJ9", "cursor is not one this service gave out"),  # {"sort":"name"}
        ("cursor=eyJzb3J0IjoibmFtZSIsImFmdGVyIjoiYiJ9&sort=staleness", "made for sort=name"),
    ],
)
def test_bad_paging_parameters_are_refused_with_the_reason(many: Harness, query: str, fragment: str) -> None:
    answer = many.get(f"/v1/tables?{query}")
    assert answer.status_code == 422, answer.text
    assert fragment in answer.json()["message"]


def test_the_paging_parameters_are_in_the_openapi_document(many: Harness) -> None:
    operation = many.client.get("/openapi.json").json()["paths"]["/v1/tables"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert parameters["limit"]["schema"]["default"] == 1000 and parameters["limit"]["schema"]["maximum"] == 10000
    assert parameters["sort"]["schema"]["enum"] == ["name", "staleness"]
    assert "next_cursor" in parameters["cursor"]["description"]
    schema = many.client.get("/openapi.json").json()["components"]["schemas"]["TablesModel"]
    assert {"tables", "next_cursor", "total"} <= set(schema["properties"])
