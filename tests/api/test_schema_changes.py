"""PATCH /v1/admin/tables/{t}/schema: a table's schema evolves while it runs (loader/core/evolution.py
for the rules, loader/service.py ``change_schema`` for how it lands).

Updates acknowledged under the old schema load into the new one, new columns null; the
change survives a restart, and a change whose Delta commit did not land (a crash, a failing
disk) is completed by the next start or the next call, with the table's loads held until then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from loader.config import ConfigError
from loader.loading.sinks.delta_table import DeltaTables
from testing.service_harness import OPERATOR, ORDERS, Harness
from tests.api.test_join_views import CUSTOMERS, SALES, VIEW, caught_up

COLUMNS = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "amount", "type": "float32", "nullable": False},
    {"name": "note", "type": "string"},
]
WIDER = [*COLUMNS[:1], {"name": "amount", "type": "float32"}, COLUMNS[2], {"name": "currency", "type": "string"}]


def register(h: Harness, columns: list[dict[str, Any]] = COLUMNS) -> None:
    r = h.post("/v1/admin/tables", token=OPERATOR, json={"name": "payments", "schema": {"columns": columns}})
    assert r.status_code == 201, r.text


def patch(h: Harness, columns: list[dict[str, Any]], table: str = "payments") -> Any:
    return h.client.patch(
        f"/v1/admin/tables/{table}/schema", json={"columns": columns}, headers={"Authorization": f"Bearer {OPERATOR}"}
    )


def send(h: Harness, rows: list[dict[str, Any]]) -> int:
    r = h.post("/v1/tables/payments/updates", json={"rows": rows})
    assert r.status_code == 202, r.text
    return int(r.json()["updates"][0]["sequence"])


def delta_columns(h: Harness) -> list[tuple[str, str, bool]]:
    fields = DeltaTable(str(h.settings.warehouse_path / "payments")).schema().fields
    return [(f.name, str(f.type.type), f.nullable) for f in fields]


def test_columns_added_and_made_nullable_while_updates_of_the_old_schema_wait(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        register(h)
        assert h.post("/v1/admin/tables/payments/pause", token=OPERATOR).status_code == 200
        send(h, [{"id": 1, "amount": 1.5, "note": "before"}])
        r = patch(h, WIDER)
        assert r.status_code == 200, r.text
        assert r.json()["added"] == ["currency"] and r.json()["made_nullable"] == ["amount"]
        assert delta_columns(h) == [
            ("id", "long", False),
            ("amount", "float", True),
            ("note", "string", True),
            ("currency", "string", True),
        ]
        assert h.status("payments")["paused"], "the operator's pause outlives the change"
        last = send(h, [{"id": 2, "amount": None, "note": "after", "currency": "EUR"}])
        assert h.post("/v1/admin/tables/payments/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("payments", last)
        assert h.rows("payments") == [
            {"id": 1, "amount": 1.5, "note": "before", "currency": None},
            {"id": 2, "amount": None, "note": "after", "currency": "EUR"},
        ]
        assert patch(h, WIDER).json()["added"] == []  # the same change again: nothing to do
    with Harness(tmp_path / "data") as h:  # a restart keeps it
        last = send(h, [{"id": 3, "amount": 2.0, "note": None, "currency": "USD"}])
        h.wait_loaded("payments", last)
        assert sorted((r["id"], r["currency"]) for r in h.rows("payments")) == [(1, None), (2, "EUR"), (3, "USD")]


@pytest.mark.parametrize(
    ("columns", "words"),
    [
        (COLUMNS[:2], "columns ['note'] are missing from the new schema"),
        ([*COLUMNS, {"name": "c", "type": "string", "nullable": False}], "new columns ['c'] must be nullable"),
        ([COLUMNS[0], {"name": "amount", "type": "float64", "nullable": False}, COLUMNS[2]], "typeWidening"),
        ([COLUMNS[0], {"name": "amount", "type": "string", "nullable": False}, COLUMNS[2]], "only widening"),
        ([COLUMNS[1], COLUMNS[0], COLUMNS[2]], "keep their order"),
    ],
)
def test_a_change_the_table_cannot_take_is_a_409_that_changes_nothing(
    tmp_path: Path, columns: list[dict[str, Any]], words: str
) -> None:
    with Harness(tmp_path / "data") as h:
        register(h)
        before = delta_columns(h)
        r = patch(h, columns)
        assert r.status_code == 409 and words in r.json()["message"], r.text
        assert delta_columns(h) == before
        assert send(h, [{"id": 1, "amount": 1.0}]) == 1  # intake still takes the old schema
        assert (
            h.post("/v1/tables/payments/updates", json={"rows": [{"id": 2, "amount": 1.0, "c": "x"}]}).status_code
            == 422
        )


def test_unknown_tables_and_schemas_that_are_no_schema_are_refused(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        register(h)
        assert patch(h, COLUMNS, table="nope").status_code == 404
        twice = [*COLUMNS, {"name": "NOTE", "type": "string"}]
        r = patch(h, twice)
        assert r.status_code == 422 and "duplicate column names" in r.json()["message"], r.text
        assert patch(h, []).status_code == 422
        r = h.client.patch("/v1/admin/tables/payments/schema", json={"columns": WIDER})
        assert r.status_code == 401


@pytest.mark.allow_errors("could not change")
def test_a_change_whose_delta_commit_failed_is_completed_by_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog holds the new schema once saved; the Delta commit after it fails (as if
    the process died there: the ``schema.after-catalog`` failpoint). The table's loads stay
    held, and the next start brings the Delta table up to the catalog's schema."""
    with Harness(tmp_path / "data") as h:
        register(h)
        first = send(h, [{"id": 1, "amount": 1.5}])
        h.wait_loaded("payments", first)

        def failing(self: DeltaTables, table: str, schema: object) -> bool:
            raise OSError("disk full")

        with monkeypatch.context() as m:
            m.setattr(DeltaTables, "evolve_table", failing)
            r = patch(h, WIDER)
        assert r.status_code == 503 and "the new schema is saved" in r.json()["message"], r.text
        held = send(h, [{"id": 2, "amount": None, "currency": "EUR"}])  # intake has the new schema
        assert h.status("payments")["last_loaded_sequence"] == first  # held until Delta has it
        assert delta_columns(h)[-1][0] == "note"
    with Harness(tmp_path / "data") as h:
        h.wait_loaded("payments", held)
        assert delta_columns(h)[-1] == ("currency", "string", True)
        assert sorted((r["id"], r["currency"]) for r in h.rows("payments")) == [(1, None), (2, "EUR")]


def test_the_configuration_file_evolves_a_configured_table_by_the_same_rules(tmp_path: Path) -> None:
    """The harness configures ``clicks`` (url string, n int32). A start with a column added in
    the configuration brings the catalog and the Delta table to it; a configuration still on
    the schema before a change through the API (or without columns it gained) starts with a
    warning; one that changes a column's type does not start, and says which."""
    clicks = {
        "name": "clicks",
        "schema": {"columns": [{"name": "url", "type": "string"}, {"name": "n", "type": "int32"}]},
    }
    with Harness(tmp_path / "data") as h:
        first = h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "a", "n": 1}]}).json()["updates"][0]
        h.wait_loaded("clicks", first["sequence"])
    more = {**clicks, "schema": {"columns": [*clicks["schema"]["columns"], {"name": "ref", "type": "string"}]}}
    with Harness(tmp_path / "data", tables=[ORDERS, more]) as h:
        r = h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "b", "n": 2, "ref": "x"}]})
        assert r.status_code == 202, r.text
        h.wait_loaded("clicks", r.json()["updates"][0]["sequence"])
        assert sorted((r["url"], r["ref"]) for r in h.rows("clicks")) == [("a", None), ("b", "x")]
        assert patch(h, [*more["schema"]["columns"], {"name": "extra", "type": "int64"}], "clicks").status_code == 200
    with Harness(tmp_path / "data", tables=[ORDERS, more]) as h:  # the configuration is one change behind
        assert [c["name"] for c in h.service.catalog.entry("clicks").schema.model_dump()["columns"]][-1] == "extra"
    wider = {**more, "schema": {"columns": [{"name": "url", "type": "string"}, {"name": "n", "type": "int64"}]}}
    with pytest.raises(
        ConfigError,
        match=r"configuration changes the schema of table 'clicks': .*column 'n' cannot widen from int32 to int64",
    ):
        Harness(tmp_path / "data", tables=[ORDERS, wider]).__enter__()


def test_spilled_updates_of_both_schemas_load_into_the_new_one(tmp_path: Path) -> None:
    """A memory budget of a few updates: those before the change and after it share spill
    segments, and a restart replays both from the WAL."""
    spill = {"memory_budget_bytes": 4096}
    with Harness(tmp_path / "data", spill=spill) as h:
        register(h)
        assert h.post("/v1/admin/tables/payments/pause", token=OPERATOR).status_code == 200
        for k in range(20):
            send(h, [{"id": k, "amount": float(k), "note": "x" * 200}])
        assert patch(h, WIDER).status_code == 200
        for k in range(20, 40):
            send(h, [{"id": k, "amount": None, "note": "y" * 200, "currency": f"c{k}"}])
        assert h.get("/v1/admin/pending").json()["spilled_bytes"] > 0
    with Harness(tmp_path / "data", spill=spill) as h:
        assert h.post("/v1/admin/tables/payments/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("payments", 40)
        rows = sorted((r["id"], r["amount"], r["currency"]) for r in h.rows("payments"))
        assert rows == [(k, float(k), None) for k in range(20)] + [(k, None, f"c{k}") for k in range(20, 40)]


def test_a_join_view_follows_an_evolving_input_and_its_join_columns_keep_their_type(tmp_path: Path) -> None:
    """The view keeps its declared columns while an input gains one; the input's join column
    cannot become nullable while the view reads it (409 naming the view)."""
    sales = [
        {"name": "sid", "type": "int64"},
        {"name": "cid", "type": "int64", "nullable": False},
        SALES["schema"]["columns"][2],
    ]
    with Harness(tmp_path / "data") as h:
        for table in (CUSTOMERS, {**SALES, "schema": {"columns": sales}}):
            assert h.post("/v1/admin/tables", token=OPERATOR, json=table).status_code == 201
        assert h.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 201
        assert h.post("/v1/tables/customers/updates", json={"rows": [{"cid": 1, "cname": "ann"}]}).status_code == 202
        assert h.post("/v1/tables/sales/updates", json={"rows": [{"sid": 1, "cid": 1, "amt": 2.0}]}).status_code == 202
        h.wait(lambda: caught_up(h))
        assert patch(h, [*sales, {"name": "channel", "type": "string"}], "sales").status_code == 200
        rows = [{"sid": 2, "cid": 1, "amt": 3.0, "channel": "web"}]
        assert h.post("/v1/tables/sales/updates", json={"rows": rows}).status_code == 202
        h.wait(lambda: caught_up(h) and len(h.rows("enriched")) == 2)
        assert sorted((r["sid"], r["customer"]) for r in h.rows("enriched")) == [(1, "ann"), (2, "ann")]
        relaxed = [sales[0], {"name": "cid", "type": "int64"}, sales[2], {"name": "channel", "type": "string"}]
        r = patch(h, relaxed, "sales")
        assert r.status_code == 409 and "join view 'enriched' joins on ['cid']" in r.json()["message"], r.text


def test_a_latest_table_gains_a_value_column_and_keeps_its_key(tmp_path: Path) -> None:
    columns = [{"name": "sym", "type": "string", "nullable": False}, {"name": "px", "type": "float64"}]
    quotes = {"name": "quotes", "schema": {"columns": columns}, "mode": "latest", "key": ["sym"]}
    with Harness(tmp_path / "data") as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=quotes).status_code == 201
        assert h.post("/v1/admin/tables/quotes/pause", token=OPERATOR).status_code == 200
        for px in (1.0, 2.0):  # both wait, in the keyed store, under the old schema
            assert (
                h.post(
                    "/v1/tables/quotes/updates", json={"rows": [{"sym": "a", "px": px}, {"sym": "b", "px": px}]}
                ).status_code
                == 202
            )
        assert patch(h, [*columns, {"name": "venue", "type": "string"}], "quotes").status_code == 200
        r = h.post("/v1/tables/quotes/updates", json={"rows": [{"sym": "b", "px": 3.0, "venue": "x"}]})
        assert r.status_code == 202, r.text
        assert h.post("/v1/admin/tables/quotes/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("quotes", r.json()["updates"][0]["sequence"])
        assert sorted((r["sym"], r["px"], r["venue"]) for r in h.rows("quotes")) == [("a", 2.0, None), ("b", 3.0, "x")]
        keyless = [{"name": "sym", "type": "string"}, *columns[1:], {"name": "venue", "type": "string"}]
        r = patch(h, keyless, "quotes")
        assert r.status_code == 422 and "key columns ['sym'] must be declared" in r.json()["message"], r.text
