"""A table changes with its feed: ``on_new_fields`` (loader/intake/inference.py for the types,
``LoaderService.add_columns_from_feed`` for how a change lands, docs/tables.md).

``add``: a row's new fields become nullable columns, in the catalog and the Delta table
before the update's 202; rows acknowledged before read back with them null. ``ignore``:
the fields are dropped and the rest loads. ``reject`` (the default): a 422 naming the field.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from testing.service_harness import OPERATOR, PRODUCER, Harness

COLUMNS = [{"name": "id", "type": "int64", "nullable": False}, {"name": "note", "type": "string"}]


def register(h: Harness, on_new_fields: str | None, table: str = "events") -> Any:
    body: dict[str, Any] = {"name": table, "schema": {"columns": COLUMNS}}
    if on_new_fields is not None:
        body["on_new_fields"] = on_new_fields
    return h.post("/v1/admin/tables", token=OPERATOR, json=body)


def send(h: Harness, rows: list[dict[str, Any]], table: str = "events") -> httpx.Response:
    return h.post(f"/v1/tables/{table}/updates", json={"rows": rows})


def delta_columns(h: Harness, table: str = "events") -> list[tuple[str, str, bool]]:
    fields = DeltaTable(str(h.settings.warehouse_path / table)).schema().fields
    return [(f.name, str(f.type.type), f.nullable) for f in fields]


def test_add_makes_new_fields_columns_before_the_update_is_acknowledged(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert register(h, "add").status_code == 201
        first = send(h, [{"id": 1, "note": "before"}])
        assert first.status_code == 202, first.text
        r = send(h, [{"id": 2, "score": 3, "ratio": 0.5, "ok": True, "later": None}, {"id": 3, "score": 4.5}])
        assert r.status_code == 202, r.text
        # In the Delta table before the 202 (a load may not have run yet): long+double is double.
        assert delta_columns(h) == [
            ("id", "long", False),
            ("note", "string", True),
            ("score", "double", True),
            ("ratio", "double", True),
            ("ok", "boolean", True),
        ]
        h.wait_loaded("events", r.json()["updates"][0]["sequence"])
        assert sorted(h.rows("events"), key=lambda row: row["id"]) == [
            {"id": 1, "note": "before", "score": None, "ratio": None, "ok": None},
            {"id": 2, "note": None, "score": 3.0, "ratio": 0.5, "ok": True},
            {"id": 3, "note": None, "score": 4.5, "ratio": None, "ok": None},
        ]
        # A field seen only as null waited; once a value says what it is, it is added.
        assert send(h, [{"id": 4, "later": "now"}]).status_code == 202
        assert delta_columns(h)[-1] == ("later", "string", True)
    with Harness(tmp_path / "data") as h:  # the catalog kept it: a restart takes the new fields as columns
        r = send(h, [{"id": 5, "score": 1, "later": "again"}])
        assert r.status_code == 202, r.text
        h.wait_loaded("events", r.json()["updates"][0]["sequence"])
        assert len(h.rows("events")) == 5


def test_values_of_a_new_field_that_disagree_are_refused_and_change_nothing(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert register(h, "add").status_code == 201
        r = send(h, [{"id": 1, "v": "a"}, {"id": 2, "v": 7}])
        assert r.status_code == 422 and "new field v: a string and an integer" in r.json()["message"], r.text
        r = send(h, [{"id": 1, "tags": ["a", 1]}])
        assert r.status_code == 422 and "a list of mixed types" in r.json()["message"], r.text
        assert [c[0] for c in delta_columns(h)] == ["id", "note"]
        assert h.status("events")["last_sequence"] == 0


def test_two_requests_adding_one_field_with_two_types_the_first_wins(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert register(h, "add").status_code == 201

        async def both() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=h.client.app)
            headers = {"Authorization": f"Bearer {PRODUCER}"}
            async with httpx.AsyncClient(transport=transport, base_url="http://loader", headers=headers) as client:
                return await asyncio.gather(
                    client.post("/v1/tables/events/updates", json={"rows": [{"id": 1, "v": "text"}]}),
                    client.post("/v1/tables/events/updates", json={"rows": [{"id": 2, "v": 5}]}),
                )

        first, second = h.client.portal.call(both)  # on the service's own event loop
        codes = sorted([first.status_code, second.status_code])
        assert codes == [202, 422], (first.text, second.text)
        refused = first if first.status_code == 422 else second
        assert "'v'" in refused.json()["message"], refused.text
        kind = "string" if first.status_code == 202 else "long"
        assert delta_columns(h)[-1] == ("v", kind, True)


def test_ignore_drops_new_fields_and_reject_names_them(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert register(h, "ignore").status_code == 201
        assert register(h, None, table="strict").status_code == 201
        r = send(h, [{"id": 1, "note": "kept", "extra": {"deep": [1]}}])
        assert r.status_code == 202, r.text
        h.wait_loaded("events", r.json()["updates"][0]["sequence"])
        assert h.rows("events") == [{"id": 1, "note": "kept"}]
        r = send(h, [{"id": 1, "extra": 1}], table="strict")
        assert r.status_code == 422 and 'unknown column "extra"' in r.json()["message"], r.text
        # The policy changes by registering the same schema again.
        assert register(h, "add", table="strict").status_code in (200, 201)
        assert send(h, [{"id": 1, "extra": 1}], table="strict").status_code == 202
        assert delta_columns(h, "strict")[-1] == ("extra", "long", True)


@pytest.mark.parametrize("policy", ["sometimes"])
def test_an_unknown_policy_is_refused(tmp_path: Path, policy: str) -> None:
    with Harness(tmp_path / "data") as h:
        r = register(h, policy)
        assert r.status_code == 422 and "on_new_fields" in r.text, r.text


NESTED = [
    {"name": "id", "type": "int64", "nullable": False},
    {
        "name": "user",
        "type": {"type": "struct", "fields": [{"name": "name", "type": "string", "nullable": True, "metadata": {}}]},
    },
]


def test_add_infers_objects_and_lists_and_grows_a_struct_by_its_new_fields(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        body = {"name": "events", "schema": {"columns": NESTED}, "on_new_fields": "add"}
        assert h.post("/v1/admin/tables", token=OPERATOR, json=body).status_code == 201
        rows = [
            {"id": 1, "user": {"name": "ann", "age": 31}, "tags": ["a", "b"], "geo": {"lat": 1.5, "lon": 2}},
            {"id": 2, "user": {"name": "bo", "address": {"city": "Oslo"}}, "tags": [], "geo": {"lat": -1}},
        ]
        r = send(h, rows)
        assert r.status_code == 202, r.text
        fields = {f.name: f for f in DeltaTable(str(h.settings.warehouse_path / "events")).schema().fields}
        user = [(f.name, f.nullable) for f in fields["user"].type.fields]
        assert user == [("name", True), ("age", True), ("address", True)]
        assert [(f.name, str(f.type.type)) for f in fields["geo"].type.fields] == [("lat", "double"), ("lon", "long")]
        assert str(fields["tags"].type.element_type.type) == "string"
        h.wait_loaded("events", r.json()["updates"][0]["sequence"])
        got = sorted(h.rows("events"), key=lambda row: row["id"])
        assert got[0]["user"] == {"name": "ann", "age": 31, "address": None}
        assert got[1]["user"] == {"name": "bo", "age": None, "address": {"city": "Oslo"}}
        assert got[0]["geo"] == {"lat": 1.5, "lon": 2} and got[1]["tags"] == []
        r = send(h, [{"id": 3, "user": {"age": "old"}}])  # the field has a type now
        assert r.status_code == 422 and "user.age" in r.json()["message"], r.text


def test_ignore_drops_new_fields_inside_structs_too(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        body = {"name": "events", "schema": {"columns": NESTED}, "on_new_fields": "ignore"}
        assert h.post("/v1/admin/tables", token=OPERATOR, json=body).status_code == 201
        r = send(h, [{"id": 1, "user": {"name": "ann", "age": 31}, "extra": 1}])
        assert r.status_code == 202, r.text
        h.wait_loaded("events", r.json()["updates"][0]["sequence"])
        assert h.rows("events") == [{"id": 1, "user": {"name": "ann"}}]


def test_tables_evolving_from_feeds_and_an_operator_while_loads_run_lose_nothing(tmp_path: Path) -> None:
    """Three tables take new fields from concurrent requests (ints, strings, objects, lists,
    one new field per round) while their loads run (as group jobs: the dispatcher offers a
    free worker every due table) and an operator adds a column to one of them mid-way:
    every acknowledged row is in its table once, as sent, the fields it lacked null."""
    tables = ["t0", "t1", "t2"]
    values = [lambda r: r, lambda r: f"s{r}", lambda r: {"x": r}, lambda r: [r, r + 1]]
    with Harness(tmp_path / "data") as h:
        for table in tables:
            assert register(h, "add", table=table).status_code == 201

        async def rounds() -> list[tuple[str, dict[str, Any]]]:
            transport = httpx.ASGITransport(app=h.client.app)
            sent: list[tuple[str, dict[str, Any]]] = []
            async with httpx.AsyncClient(transport=transport, base_url="http://loader") as client:
                producer = {"Authorization": f"Bearer {PRODUCER}"}
                for r in range(8):
                    calls, rows = [], []
                    for table in tables:
                        row = {"id": r, f"f{r % 4}_{table}": values[r % 4](r), f"g{r % 2}": r}
                        rows.append((table, row))
                        path = f"/v1/tables/{table}/updates"
                        calls.append(client.post(path, json={"rows": [row]}, headers=producer))
                    if r == 4:  # (round 4 brings no field t0 lacks: f0_t0 and g0 came in round 0)
                        now = [c.model_dump(mode="json") for c in h.service.catalog.entries["t0"].schema.columns]
                        change = {"columns": [*now, {"name": "op", "type": "string"}]}
                        operator = {"Authorization": f"Bearer {OPERATOR}"}
                        calls.append(client.patch("/v1/admin/tables/t0/schema", json=change, headers=operator))
                    answers = await asyncio.gather(*calls)
                    assert all(a.status_code in (200, 202) for a in answers), [a.text for a in answers]
                    sent += rows
            return sent

        sent = h.client.portal.call(rounds)
        for table in tables:
            h.wait_loaded(table, h.status(table)["last_sequence"])
            got = sorted(h.rows(table), key=lambda row: row["id"])
            want = [row for t, row in sent if t == table]
            assert [r["id"] for r in got] == list(range(8))
            for row, back in zip(want, got):
                assert {k: v for k, v in back.items() if v is not None} == {k: v for k, v in row.items()}, back
        assert "op" in [c[0] for c in delta_columns(h, "t0")]


def test_a_request_refused_for_another_value_adds_none_of_its_fields(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert register(h, "add").status_code == 201
        r = send(h, [{"id": "not a number", "fresh": 1}])
        assert r.status_code == 422 and "'id'" in r.json()["message"], r.text
        r = send(h, [{"id": 1, "ID": 2}])  # a name the table has, in other letters
        assert r.status_code == 422 and "duplicate column names" in r.json()["message"], r.text
        assert [c[0] for c in delta_columns(h)] == ["id", "note"]
        assert [c.name for c in h.service.catalog.entries["events"].schema.columns] == ["id", "note"]
