"""Join views through the service (Spark-free sink, the real executor and view MERGE): a
view declared over an append and a latest table equals the join recomputed from the
inputs' Delta tables after every load, across a restart and a view load that failed
after its commit; it is scheduled and reported like a table; what cannot be maintained
is refused with a 422 that says why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from loader.loading.sinks import view_delta
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.traces import parse_trace
from testing.service_harness import OPERATOR, Harness

CUSTOMERS: dict[str, Any] = {
    "name": "customers",
    "schema": {"columns": [{"name": "cid", "type": "int64", "nullable": False}, {"name": "cname", "type": "string"}]},
    "mode": "latest",
    "key": ["cid"],
}
SALES: dict[str, Any] = {
    "name": "sales",
    "schema": {
        "columns": [
            {"name": "sid", "type": "int64"},
            {"name": "cid", "type": "int64"},
            {"name": "amt", "type": "float64"},
        ]
    },
}
VIEW: dict[str, Any] = {
    "name": "enriched",
    "inputs": [{"table": "sales", "alias": "s"}, {"table": "customers", "alias": "c"}],
    "on": ["s.cid = c.cid"],
    "select": ["s.sid", "s.amt", "c.cname AS customer"],
}


def expected(h: Harness) -> Counter:
    """The join recomputed from scratch over the inputs' committed Delta tables."""
    names = {r["cid"]: r["cname"] for r in h.rows("customers")}
    return Counter((r["sid"], r["amt"], names[r["cid"]]) for r in h.rows("sales") if r["cid"] in names)


def held(h: Harness) -> Counter:
    return Counter({(r["sid"], r["amt"], r["customer"]): r["__loader_count"] for r in h.rows("enriched")})


def caught_up(h: Harness) -> bool:
    status = h.status("enriched")
    return status["pending_updates"] == 0 and not status["running"] and held(h) == expected(h)


def send(h: Harness, table: str, rows: list[dict[str, Any]]) -> None:
    """Sent and loaded into the input table (the view may still lag)."""
    answer = h.post(f"/v1/tables/{table}/updates", json={"rows": rows})
    assert answer.status_code == 202, answer.text
    h.wait_loaded(table, int(answer.json()["updates"][0]["sequence"]))


def setup(h: Harness) -> None:
    for table in (CUSTOMERS, SALES):
        assert h.post("/v1/admin/tables", token=OPERATOR, json=table).status_code == 201


@pytest.mark.allow_errors("the answer of the view commit was lost")
def test_a_view_follows_its_inputs_across_upserts_restarts_and_a_lost_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    with Harness(data) as h:
        setup(h)
        send(h, "customers", [{"cid": 1, "cname": "ann"}, {"cid": 2, "cname": "bob"}])
        send(h, "sales", [{"sid": k, "cid": 1 + k % 3, "amt": float(k)} for k in range(6)])
        created = h.post("/v1/admin/views", token=OPERATOR, json=VIEW)  # over tables holding rows already
        assert created.status_code == 201, created.text
        assert h.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 200  # the same again
        h.wait(lambda: caught_up(h))
        send(h, "customers", [{"cid": 3, "cname": "cy"}, {"cid": 1, "cname": "ann2"}])  # an insert, an upsert
        send(h, "sales", [{"sid": 9, "cid": 3, "amt": 9.0}, {"sid": 9, "cid": 3, "amt": 9.0}])  # two copies
        h.wait(lambda: caught_up(h))
        assert held(h)[(9, 9.0, "cy")] == 2 and ("ann",) not in {k[2:] for k in held(h)}
        status = h.status("enriched")
        assert status["mode"] == "view" and status["delta_version"] >= 1 and status["staleness_seconds"] >= 0
        assert 'loader_table_staleness_seconds{table="enriched"}' in h.get("/metrics").text
        admin = h.get("/v1/admin/views/enriched").json()
        assert [p["input"] for p in admin["executor"]["pipelines"]] == ["s", "c"]
        assert {i["table"]: i["version_held"] >= 1 for i in admin["inputs"]} == {"sales": True, "customers": True}
        # A view load whose commit lands but whose answer is lost (as a crash right after the
        # commit): the next attempt rebuilds the executor from Delta and loads nothing twice.
        real = view_delta.ViewTable.commit
        lost = {"left": 1}

        def commit_then_fail(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = real(self, *args, **kwargs)
            if lost["left"]:
                lost["left"] -= 1
                raise OSError("the answer of the view commit was lost")
            return out

        monkeypatch.setattr(view_delta.ViewTable, "commit", commit_then_fail)
        send(h, "sales", [{"sid": 10, "cid": 2, "amt": 1.5}])
        h.wait(lambda: lost["left"] == 0 and caught_up(h))
        assert h.get("/v1/admin/views/enriched").json()["rebuilds"] >= 2
        # The trace export declares the view over its inputs, for the simulator to derive
        # its updates; asking for the view brings its inputs.
        exported = h.get("/v1/admin/trace?tables=enriched")
        trace = parse_trace(exported.text.splitlines())
        assert int(exported.headers["X-Trace-Updates"]) == trace.n_updates
        assert [(t.name, t.view_of) for t in trace.tables] == [
            ("customers", None),
            ("sales", None),
            ("enriched", ("sales", "customers")),
        ]
        assert simulate(trace, make_policy("myopic"), 2).freshness.tables[2].updates >= 1
    with Harness(data) as h:  # restart: the executor is rebuilt from the inputs at the versions the view holds
        assert h.get("/v1/admin/views").json() == {"views": ["enriched"], "broken": {}}
        send(h, "customers", [{"cid": 2, "cname": "bob2"}])
        send(h, "sales", [{"sid": 11, "cid": 2, "amt": 2.5}])
        h.wait(lambda: caught_up(h))
        assert held(h)[(10, 1.5, "bob2")] == 1 and sum(held(h).values()) == sum(expected(h).values())


def test_a_window_keeps_the_last_rows_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    windowed = {
        **VIEW,
        "name": "recent",
        "inputs": [{"table": "sales", "alias": "s", "window": {"rows": 3}}, VIEW["inputs"][1]],
    }

    def last_three(h: Harness) -> Counter:
        names = {r["cid"]: r["cname"] for r in h.rows("customers")}
        return Counter((sid, float(sid), names[cid]) for sid, cid in sent[-3:] if cid in names)

    def recent(h: Harness) -> Counter:
        return Counter({(r["sid"], r["amt"], r["customer"]): r["__loader_count"] for r in h.rows("recent")})

    sent: list[tuple[int, int]] = []
    with Harness(data) as h:
        setup(h)
        assert h.post("/v1/admin/views", token=OPERATOR, json=windowed).status_code == 201
        send(h, "customers", [{"cid": 1, "cname": "ann"}, {"cid": 2, "cname": "bob"}])
        for k in range(4):
            sent.append((k, 1 + k % 2))
            send(h, "sales", [{"sid": k, "cid": 1 + k % 2, "amt": float(k)}])
            h.wait(lambda: h.status("recent")["pending_updates"] == 0 and recent(h) == last_three(h))
    with Harness(data) as h:
        for k in range(4, 6):
            sent.append((k, 1 + k % 2))
            send(h, "sales", [{"sid": k, "cid": 1 + k % 2, "amt": float(k)}])
            h.wait(lambda: h.status("recent")["pending_updates"] == 0 and recent(h) == last_three(h))


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"on": ["s.cid < c.cid"]}, "not an equality"),
    ({"on": ["s.nope = c.cid"]}, "has no column 'nope'"),
    ({"on": ["s.amt = c.cid"]}, "same type"),
    ({"inputs": [{"table": "sales", "alias": "s"}, {"table": "enriched", "alias": "c"}]}, "view over a view"),
    ({"inputs": [{"table": "sales"}, {"table": "sales"}], "on": ["sales.cid = sales.sid"]}, "used twice"),
    ({"inputs": [VIEW["inputs"][0], {"table": "customers", "alias": "c", "window": {"rows": 2}}]}, "latest table"),
    ({"name": "sales"}, "a table has that name"),
]


def test_declarations_that_cannot_be_maintained_are_refused_with_the_reason(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        setup(h)
        assert h.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 201
        for change, reason in REFUSED:
            answer = h.post("/v1/admin/views", token=OPERATOR, json={**VIEW, "name": "other", **change})
            assert answer.status_code == 422 and reason in answer.json()["message"], (change, answer.text)
        assert h.get("/v1/admin/views").json() == {"views": ["enriched"], "broken": {}}
        other = h.post("/v1/admin/views", token=OPERATOR, json={**VIEW, "select": ["s.sid"]})
        assert other.status_code == 409 and "another declaration" in other.json()["message"]
        assert h.get("/v1/admin/views/nope").status_code == 404
        # customers holds nothing yet, but a view reads it by its mode: the mode stays.
        appended = {k: v for k, v in CUSTOMERS.items() if k != "key"} | {"mode": "append"}
        answer = h.post("/v1/admin/tables", token=OPERATOR, json=appended)
        assert answer.status_code == 409 and "read by join views ['enriched']" in answer.json()["message"], answer.text
        assert h.status("customers")["mode"] == "latest"


def test_a_three_way_view_with_a_globally_consistent_cache_in_admin_and_metrics(tmp_path: Path) -> None:
    """Section 6 through the service: sales -> customers -> regions, with the customers-regions
    cache in the sales pipeline forced (customers join sales first, so only section 6 allows
    it). The view stays the join of its inputs; the admin view and /metrics show the
    candidates with their scope and state and the cache with its figures."""
    regions = {
        "name": "regions",
        "schema": {"columns": [{"name": "rid", "type": "int64"}, {"name": "rname", "type": "string"}]},
    }
    clients = {
        "name": "clients",
        "schema": {"columns": [{"name": "cid", "type": "int64"}, {"name": "rid", "type": "int64"}]},
    }
    view = {
        "name": "geo",
        "inputs": [{"table": "sales", "alias": "s"}, {"table": "clients", "alias": "c"}, {"table": "regions"}],
        "on": ["s.cid = c.cid", "c.rid = regions.rid"],
        "select": ["s.sid", "regions.rname"],
        "caching": {"mode": "static", "caches": ["s:[c regions]*"]},
    }

    def joined(h: Harness) -> Counter:
        names = {r["rid"]: r["rname"] for r in h.rows("regions")}
        homes = Counter((r["cid"], names[r["rid"]]) for r in h.rows("clients") if r["rid"] in names)
        out: Counter = Counter()
        for r in h.rows("sales"):
            for (cid, name), times in homes.items():
                if cid == r["cid"]:
                    out[(r["sid"], name)] += times
        return out

    def geo(h: Harness) -> Counter:
        return Counter({(r["sid"], r["rname"]): r["__loader_count"] for r in h.rows("geo")})

    with Harness(tmp_path / "data") as h:
        for table in (SALES, clients, regions):
            assert h.post("/v1/admin/tables", token=OPERATOR, json=table).status_code == 201
        assert h.post("/v1/admin/views", token=OPERATOR, json=view).status_code == 201, "declared"
        send(h, "regions", [{"rid": 1, "rname": "north"}, {"rid": 2, "rname": "south"}])
        send(h, "clients", [{"cid": 7, "rid": 1}, {"cid": 8, "rid": 2}])
        send(h, "sales", [{"sid": 1, "cid": 7, "amt": 1.0}, {"sid": 2, "cid": 7, "amt": 2.0}])
        send(h, "clients", [{"cid": 7, "rid": 2}])  # a second home: the cached entry for 7 is maintained
        send(h, "sales", [{"sid": 3, "cid": 7, "amt": 3.0}, {"sid": 4, "cid": 8, "amt": 4.0}])
        h.wait(lambda: h.status("geo")["pending_updates"] == 0 and geo(h) == joined(h))
        assert sum(joined(h).values()) == 7
        executor = h.get("/v1/admin/views/geo").json()["executor"]
        scopes = {c["name"]: (c["scope"], c["state"]) for c in executor["candidates"]}
        assert scopes == {"regions:[c s]": ("prefix", "unused"), "s:[c regions]*": ("global", "used")}
        (cache,) = executor["caches"]
        assert cache["name"] == "s:[c regions]*" and cache["hits"] >= 1 and cache["bytes"] > 0
        metrics = h.get("/metrics").text
        assert 'loader_view_cache_state{cache="s:[c regions]*",state="used",view="geo"} 1.0' in metrics
        info = 'loader_view_cache_candidate_info{cache="regions:[c s]",pipeline="regions",scope="prefix",view="geo"}'
        assert info in metrics
        assert f'loader_view_cache_hits_total{{cache="s:[c regions]*",view="geo"}} {float(cache["hits"])}' in metrics
        assert 'loader_view_probes_total{view="geo"}' in metrics
        families = [f.name for f in text_string_to_metric_families(metrics)]
        assert len(families) == len(set(families)), "a metric family is exported twice"


def test_a_view_joined_on_a_decimal_carries_new_types_exactly(tmp_path: Path) -> None:
    """Join columns of a new flat type (a decimal) and a payload of the others (binary,
    timestamp_ntz, int8) reach the view exactly (issue 35)."""
    import datetime as dt
    import decimal

    accounts = {
        "name": "accounts",
        "schema": {
            "columns": [
                {"name": "acct", "type": "decimal(20,0)", "nullable": False},
                {"name": "tag", "type": "binary"},
                {"name": "tier", "type": "byte"},
            ]
        },
        "mode": "latest",
        "key": ["acct"],
    }
    moves = {
        "name": "moves",
        "schema": {
            "columns": [
                {"name": "mid", "type": "long"},
                {"name": "acct", "type": "decimal(20,0)"},
                {"name": "amount", "type": "decimal(38,2)"},
                {"name": "local", "type": "timestamp_ntz"},
            ]
        },
    }
    view = {
        "name": "booked",
        "inputs": [{"table": "moves", "alias": "m"}, {"table": "accounts", "alias": "a"}],
        "on": ["m.acct = a.acct"],
        "select": ["m.mid", "m.amount", "m.local", "a.tag", "a.tier"],
    }
    with Harness(tmp_path / "data") as h:
        for table in (accounts, moves):
            assert h.post("/v1/admin/tables", token=OPERATOR, json=table).status_code == 201
        assert h.post("/v1/admin/views", token=OPERATOR, json=view).status_code == 201
        send(h, "accounts", [{"acct": "99999999999999999999", "tag": "AP8=", "tier": -128}])
        answer = h.post(
            "/v1/tables/moves/updates",
            content=b'{"rows": [{"mid": 1, "acct": 99999999999999999999, "amount": 12345678901234567.89, '
            b'"local": "2024-03-10T02:30:00"}, {"mid": 2, "acct": 1, "amount": 0.01}]}',
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 202, answer.text
        h.wait(lambda: len(h.rows("booked")) == 1 if (h.settings.warehouse_path / "booked").exists() else False, 30)
        (row,) = h.rows("booked")
    assert (row["mid"], row["amount"], row["local"], row["tag"], row["tier"]) == (
        1,
        decimal.Decimal("12345678901234567.89"),
        dt.datetime(2024, 3, 10, 2, 30),
        b"\x00\xff",
        -128,
    )


def test_a_view_carries_a_nested_payload_and_refuses_to_join_on_one(tmp_path: Path) -> None:
    """A payload of nested columns (a struct holding an array, a map) reaches the view exactly,
    updated when its latest input's value changes; joining on a nested column is a 422."""
    shelf = {
        "type": "struct",
        "fields": [
            {"name": "aisle", "type": "short", "nullable": False, "metadata": {}},
            {
                "name": "bins",
                "type": {"type": "array", "elementType": "string", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    products = {
        "name": "products",
        "schema": {
            "columns": [
                {"name": "pid", "type": "long", "nullable": False},
                {"name": "shelf", "type": shelf},
                {"name": "labels", "type": {"type": "map", "keyType": "string", "valueType": "string"}},
            ]
        },
        "mode": "latest",
        "key": ["pid"],
    }
    picks = {
        "name": "picks",
        "schema": {
            "columns": [
                {"name": "kid", "type": "long"},
                {"name": "pid", "type": "long"},
                {"name": "shelf", "type": shelf},
            ]
        },
    }
    view = {
        "name": "picked",
        "inputs": [{"table": "picks", "alias": "k"}, {"table": "products", "alias": "p"}],
        "on": ["k.pid = p.pid"],
        "select": ["k.kid", "p.shelf", "p.labels"],
    }
    with Harness(tmp_path / "data") as h:
        for table in (products, picks):
            assert h.post("/v1/admin/tables", token=OPERATOR, json=table).status_code == 201
        on_nested = {**view, "name": "bad", "on": ["k.shelf = p.shelf"]}
        refused = h.post("/v1/admin/views", token=OPERATOR, json=on_nested)
        assert refused.status_code == 422 and "nested" in refused.text, refused.text
        assert h.post("/v1/admin/views", token=OPERATOR, json=view).status_code == 201
        send(h, "products", [{"pid": 1, "shelf": {"aisle": 3, "bins": ["a", None]}, "labels": {"c": "red"}}])
        send(h, "picks", [{"kid": 10, "pid": 1}, {"kid": 11, "pid": 2}])
        send(h, "products", [{"pid": 1, "shelf": {"aisle": 4, "bins": []}, "labels": {"c": "blue", "d": "x"}}])

        def rows() -> list[tuple]:
            if not (h.settings.warehouse_path / "picked").exists():
                return []
            return [(r["kid"], r["shelf"], r["labels"], r["__loader_count"]) for r in h.rows("picked")]

        want = [(10, {"aisle": 4, "bins": []}, [("c", "blue"), ("d", "x")], 1)]
        h.wait(lambda: rows() == want, 30)
        # The input's struct gains a field: the view keeps the type it declared, and follows on.
        grown = {**shelf, "fields": [*shelf["fields"], {"name": "note", "type": "string", "nullable": True}]}
        columns = [{**c, "type": grown} if c["name"] == "shelf" else c for c in products["schema"]["columns"]]
        answer = h.client.patch(
            "/v1/admin/tables/products/schema",
            json={"columns": columns},
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
        assert answer.status_code == 200 and answer.json()["fields_added"] == ["shelf.note"], answer.text
        send(h, "products", [{"pid": 1, "shelf": {"aisle": 5, "bins": None, "note": "new"}, "labels": {}}])
        h.wait(lambda: rows() == [(10, {"aisle": 5, "bins": None}, [], 1)], 30)


def test_a_views_delta_table_ages_as_the_tables_do(tmp_path: Path) -> None:
    """A view commits as often as its inputs load: its Delta table gets the loader's
    checkpoint interval and log retention, and the log-keeping job visits it."""
    with Harness(tmp_path / "data") as h:
        setup(h)
        assert h.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 201
        send(h, "customers", [{"cid": 1, "cname": "ann"}])
        send(h, "sales", [{"sid": 1, "cid": 1, "amt": 2.5}])
        h.wait(lambda: caught_up(h))
        configuration = DeltaTable(str(h.settings.warehouse_path / "enriched")).metadata().configuration
        assert configuration["delta.checkpointInterval"] == "20"
        assert configuration["delta.logRetentionDuration"] == "interval 168 hours"
        kept = h.client.portal.call(h.service.maintenance.keep_logs)
        assert {k.table for k in kept} == {"orders", "clicks", "customers", "sales", "enriched"}
        assert all(k.problem is None for k in kept)
