"""Nested struct, array and map columns through the service: registration in Delta's schema JSON
(the status shows it back), both submit routes, a 422 naming the path to a bad value, the
hostile declarations (too deep, too many fields) and values (a null map key, NaN in a nested
decimal) refused changing nothing, the WAL's replay across a restart, and the load read back
exactly (the Spark-free sink of the harness writes with deltalake)."""

from __future__ import annotations

import decimal
import threading
from pathlib import Path

import pytest

from testing.service_harness import OPERATOR, Harness

D = decimal.Decimal
AUTH = {"Authorization": f"Bearer {OPERATOR}"}
LINE = {
    "type": "struct",
    "fields": [
        {"name": "sku", "type": "string", "nullable": False, "metadata": {}},
        {"name": "price", "type": "decimal(9,2)", "nullable": True, "metadata": {}},
    ],
}
TABLE = {
    "name": "baskets",
    "schema": {
        "columns": [
            {"name": "id", "type": "long", "nullable": False},
            {"name": "items", "type": {"type": "array", "elementType": LINE, "containsNull": False}},
            {
                "name": "attrs",
                "type": {"type": "map", "keyType": "short", "valueType": "string", "valueContainsNull": True},
            },
        ]
    },
}


def deep(levels: int) -> dict:
    declared: object = "long"
    for _ in range(levels):
        declared = {"type": "array", "elementType": declared, "containsNull": True}
    return {"name": "deep", "schema": {"columns": [{"name": "v", "type": declared}]}}


@pytest.mark.allow_errors(r"injected failure")
def test_nested_columns_are_declared_checked_survive_the_wal_and_load_exactly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    fail = threading.Event()
    fail.set()  # nothing loads before the restart: the updates live in the WAL only
    with Harness(data, fail=fail, intake={"max_schema_fields": 40}) as first:
        r = first.post("/v1/admin/tables", token=OPERATOR, json=TABLE)
        assert r.status_code == 201, r.text
        shown = first.get("/v1/tables/baskets", token=OPERATOR).json()
        assert TABLE["schema"]["columns"][1]["type"] in [c["type"] for c in shown["schema"]["columns"]], shown
        # Hostile declarations: 422, nothing registered.
        r = first.post("/v1/admin/tables", token=OPERATOR, json=deep(33))
        assert r.status_code == 422 and "deeper than 32 levels (intake.max_nesting_depth)" in r.text, r.text
        wide = {"name": "wide", "schema": {"columns": [{"name": f"c{i}", "type": "long"} for i in range(41)]}}
        r = first.post("/v1/admin/tables", token=OPERATOR, json=wide)
        assert r.status_code == 422 and "more than 40 (intake.max_schema_fields)" in r.text, r.text
        assert r.status_code == 422
        names = [t["name"] for t in first.get("/v1/tables", token=OPERATOR).json()["tables"]]
        assert "deep" not in names and "wide" not in names
        assert first.post("/v1/admin/tables", token=OPERATOR, json=deep(32)).status_code == 201

        body = (
            b'{"updates": [{"table": "baskets", "rows": [{"id": 1, "items": [{"sku": "a", "price": 12345.67}, '
            b'{"sku": "b"}], "attrs": [{"key": -1, "value": null}, {"key": 7, "value": "x"}]}]}]}'
        )
        r = first.post("/v1/updates", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 202, r.text
        ndjson = b'{"id": 2, "items": [], "attrs": []}\n{"id": 3}\n'
        r = first.post("/v1/tables/baskets/updates", content=ndjson, headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 202, r.text
        for bad, path, fragment in [
            (
                b'{"id": 4, "items": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}, {"sku": 7}]}',
                "items[3].sku",
                "expected a string, got 7",
            ),
            (b'{"id": 4, "items": [{"sku": "a", "price": "NaN"}]}', "items[0].price", "expected a decimal number"),
            (b'{"id": 4, "attrs": [{"key": null, "value": "x"}]}', "attrs[0]", "a map key is null"),
        ]:
            r = first.post(
                "/v1/tables/baskets/updates",
                content=b'{"rows": [' + bad + b"]}",
                headers={"Content-Type": "application/json"},
            )
            assert r.status_code == 422, r.text
            assert f"{path}: {fragment}" in r.json()["message"] and r.json()["path"] == path, r.text
        last = 2
    with Harness(data) as second:  # replayed from the WAL
        second.wait_loaded("baskets", last)
        rows = sorted(second.rows("baskets"), key=lambda row: row["id"])
    assert rows == [
        {
            "id": 1,
            "items": [{"sku": "a", "price": D("12345.67")}, {"sku": "b", "price": None}],
            "attrs": [(-1, None), (7, "x")],
        },
        {"id": 2, "items": [], "attrs": []},
        {"id": 3, "items": None, "attrs": None},
    ]


def test_a_nested_column_takes_a_new_nullable_field_while_the_table_runs(tmp_path: Path) -> None:
    """PATCH of the schema adds a field inside a struct inside an array: the Delta table takes
    it, rows before it read it as null; a NOT NULL new field is a 409 naming its path."""
    line = {"type": "struct", "fields": [{"name": "sku", "type": "string", "nullable": False, "metadata": {}}]}
    columns = [
        {"name": "id", "type": "long", "nullable": False},
        {"name": "items", "type": {"type": "array", "elementType": line, "containsNull": False}},
    ]
    with Harness(tmp_path / "data") as h:
        assert (
            h.post(
                "/v1/admin/tables", token=OPERATOR, json={"name": "carts", "schema": {"columns": columns}}
            ).status_code
            == 201
        )
        r = h.post("/v1/tables/carts/updates", json={"rows": [{"id": 1, "items": [{"sku": "a"}]}]})
        assert r.status_code == 202, r.text
        h.wait_loaded("carts", 1)
        grown = {
            **line,
            "fields": [*line["fields"], {"name": "note", "type": "string", "nullable": True, "metadata": {}}],
        }
        wider = [columns[0], {**columns[1], "type": {**columns[1]["type"], "elementType": grown}}]
        strict = {**grown, "fields": [line["fields"][0], {"name": "note", "type": "string", "nullable": False}]}
        refused = h.client.patch(
            "/v1/admin/tables/carts/schema",
            headers=AUTH,
            json={"columns": [columns[0], {**columns[1], "type": {**columns[1]["type"], "elementType": strict}}]},
        )
        assert refused.status_code == 409 and "items[].note: a new field must be nullable" in refused.text, refused.text
        r = h.client.patch("/v1/admin/tables/carts/schema", headers=AUTH, json={"columns": wider})
        assert r.status_code == 200 and r.json()["fields_added"] == ["items[].note"], r.text
        r = h.post("/v1/tables/carts/updates", json={"rows": [{"id": 2, "items": [{"sku": "b", "note": "x"}]}]})
        assert r.status_code == 202, r.text
        h.wait_loaded("carts", 2)
        rows = sorted(h.rows("carts"), key=lambda row: row["id"])
    assert rows == [
        {"id": 1, "items": [{"sku": "a", "note": None}]},
        {"id": 2, "items": [{"sku": "b", "note": "x"}]},
    ]
