"""Latest tables through the service (Spark-free sink, the real upsert rule and Delta MERGE):
declarations checked, one row per key with its newest value, superseded rows counted,
landing files refused, and a restart replays the WAL into the same table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testing.service_harness import OPERATOR, Harness

QUOTES: dict[str, Any] = {
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


def send(h: Harness, rows: list[tuple[str, float, int]]) -> int:
    answer = h.post("/v1/tables/quotes/updates", json={"rows": [{"sym": s, "px": p, "ts": t} for s, p, t in rows]})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["updates"][0]["sequence"])


def stored(h: Harness) -> dict[str, tuple[float, int]]:
    return {r["sym"]: (r["px"], r["ts"]) for r in h.rows("quotes")}


def test_a_latest_table_keeps_the_newest_value_per_key_and_counts_the_rest(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        created = h.post("/v1/admin/tables", token=OPERATOR, json=QUOTES)
        assert created.status_code == 201, created.text
        status = h.status("quotes")
        assert (
            status["mode"] == "latest" and status["schema"]["key"] == ["sym"] and status["schema"]["order_by"] == "ts"
        )
        send(h, [("ibm", 1.0, 5), ("ibm", 2.0, 6), ("msft", 3.0, 1)])
        last = send(h, [("ibm", 0.5, 4), ("aapl", 4.0, 2)])  # ibm ts 4 is older than 6: never stored
        h.wait_loaded("quotes", last)
        last = send(h, [("msft", 5.0, 2), ("msft", 6.0, 2)])  # equal ts: the later arrival wins
        h.wait_loaded("quotes", last)
        assert stored(h) == {"ibm": (2.0, 6), "msft": (6.0, 2), "aapl": (4.0, 2)}
        # ibm 1.0 (a newer ibm in its update), ibm 0.5 (older than the stored ibm), msft 5.0 (a later
        # msft of equal ts); msft 3.0 was loaded, then replaced: not superseded
        assert h.status("quotes")["superseded_rows"] == 3
        metrics = h.get("/metrics").text
        assert 'loader_superseded_rows_total{table="quotes"} 3.0' in metrics


def test_declarations_that_cannot_be_kept_are_refused_with_the_reason(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        nullable_key = {**QUOTES, "schema": {"columns": [{"name": "sym", "type": "string"}]}, "order_by": None}
        answer = h.post("/v1/admin/tables", token=OPERATOR, json=nullable_key)
        assert answer.status_code == 422 and '"nullable": false' in answer.json()["message"]
        no_key = {**QUOTES, "key": []}
        assert "needs a key" in h.post("/v1/admin/tables", token=OPERATOR, json=no_key).text
        keyed_append = {**QUOTES, "mode": "append"}
        refused = h.post("/v1/admin/tables", token=OPERATOR, json=keyed_append)
        assert refused.status_code == 422 and 'are for mode = "latest" tables' in refused.json()["message"]
        assert h.post("/v1/admin/tables", token=OPERATOR, json=QUOTES).status_code == 201
        assert h.post("/v1/admin/tables", token=OPERATOR, json=QUOTES).status_code in (200, 201)  # the same again
        as_append = {k: v for k, v in QUOTES.items() if k not in ("mode", "key", "order_by")}
        back = h.post("/v1/admin/tables", token=OPERATOR, json=as_append)  # never written to: may change
        assert back.status_code == 201 and back.json()["mode"] == "append"
        assert h.post("/v1/admin/tables", token=OPERATOR, json=QUOTES).json()["mode"] == "latest"
        files = h.post("/v1/tables/quotes/updates", json={"files": [{"path": "x.json", "format": "json"}]})
        assert files.status_code == 422 and "landing files are for append tables" in files.text
        assert h.status("quotes")["last_sequence"] == 0


def test_a_restart_replays_acknowledged_values_into_the_same_table(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=QUOTES).status_code == 201
        h.wait_loaded("quotes", send(h, [("ibm", 1.0, 1)]))
        assert h.post("/v1/admin/tables/quotes/pause", token=OPERATOR).status_code == 200
        send(h, [("ibm", 2.0, 3), ("msft", 1.0, 1)])
        last = send(h, [("ibm", 1.5, 2), ("msft", 2.0, 1)])
    with Harness(tmp_path / "data") as h:  # acknowledged, never loaded: in the WAL only
        assert h.post("/v1/admin/tables/quotes/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("quotes", last)
        assert stored(h) == {"ibm": (2.0, 3), "msft": (2.0, 1)}
        assert h.status("quotes")["superseded_rows"] == 2


def test_an_empty_table_may_change_its_mode_and_key_and_a_written_one_may_not(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        as_append = {k: v for k, v in QUOTES.items() if k not in ("mode", "key", "order_by")}
        assert h.post("/v1/admin/tables", token=OPERATOR, json=as_append).status_code == 201
        changed = h.post("/v1/admin/tables:bulk", token=OPERATOR, json={"tables": [QUOTES]})
        assert changed.status_code == 200 and changed.json()["changed"] == ["quotes"], changed.text
        assert h.status("quotes")["mode"] == "latest"
        assert h.status("quotes")["keys"]["next_batch"] == {"keys": 0, "updates": 0, "predicted_seconds": 0.3}
        h.wait_loaded("quotes", send(h, [("ibm", 1.0, 1), ("ibm", 2.0, 2)]))
        assert stored(h) == {"ibm": (2.0, 2)}
        refused = h.post("/v1/admin/tables", token=OPERATOR, json=as_append)
        assert refused.status_code == 409 and "has received updates" in refused.json()["message"]
    with Harness(tmp_path / "data") as h:  # the change outlives a restart
        assert h.status("quotes")["mode"] == "latest"


def test_the_key_queue_shows_in_status_and_metrics_and_batches_respect_max_keys(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        declared = {**QUOTES, "key_policy": "linecutting", "max_keys_per_batch": 2}
        assert h.post("/v1/admin/tables", token=OPERATOR, json=declared).status_code == 201
        assert h.post("/v1/admin/tables/quotes/pause", token=OPERATOR).status_code == 200
        send(h, [("a", 1.0, 1), ("b", 1.0, 1)])
        send(h, [("a", 2.0, 2), ("c", 1.0, 1)])  # a: overwritten while waiting
        last = send(h, [("d", 1.0, 1)])
        keys = h.status("quotes")["keys"]
        assert (keys["policy"], keys["max_keys_per_batch"], keys["waiting"], keys["loading"]) == (
            "linecutting",
            2,
            4,
            0,
        )
        assert keys["queue_staleness_seconds"]["max"] >= keys["queue_staleness_seconds"]["mean"] >= 0
        # What the table-level policies read: the next batch is the head update (a, b), and
        # catching up takes two such batches (schedulers/model.py, TableState).
        assert (keys["next_batch"]["keys"], keys["next_batch"]["updates"]) == (2, 1)
        assert keys["catch_up_seconds"] == pytest.approx(2 * keys["next_batch"]["predicted_seconds"])
        metrics = h.get("/metrics").text
        assert 'loader_table_waiting_keys{table="quotes"} 4.0' in metrics
        assert 'loader_table_next_batch_keys{table="quotes"} 2.0' in metrics
        assert 'loader_table_key_queue_staleness_seconds{stat="p99",table="quotes"}' in metrics
        assert h.post("/v1/admin/tables/quotes/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("quotes", last)
        assert stored(h) == {"a": (2.0, 2), "b": (1.0, 1), "c": (1.0, 1), "d": (1.0, 1)}
        assert h.service.sink.loads >= 2  # at most 2 keys a batch
        assert h.status("quotes")["keys"]["waiting"] == 0 and h.status("quotes")["superseded_rows"] == 1
        # The cost model of a latest table is per key, learnt from its loads and kept in the catalog.
        assert h.service.catalog.entries["quotes"].seconds_per_key == h.status("quotes")["keys"]["seconds_per_key"]
        bad = {k: v for k, v in QUOTES.items() if k not in ("mode", "key", "order_by")} | {"key_policy": "in-place"}
        refused = h.post("/v1/admin/tables", token=OPERATOR, json={**bad, "name": "other"})
        assert refused.status_code == 422 and "key_policy" in refused.json()["message"]


def test_a_configured_latest_table_takes_a_new_key_policy_but_not_a_new_key(tmp_path: Path) -> None:
    import pytest

    from loader.config import ConfigError
    from loader.core.tables import TableConfig
    from loader.durability.catalog import Catalog, CatalogEntry
    from loader.service import _register_configured

    catalog = Catalog(tmp_path / "catalog.json")
    _register_configured(catalog, [TableConfig.model_validate(QUOTES)])
    _register_configured(catalog, [TableConfig.model_validate({**QUOTES, "key_policy": "fifo-uq"})])
    entry: CatalogEntry = Catalog.open(tmp_path / "catalog.json").entries["quotes"]
    assert (entry.key_policy, entry.schema.key) == ("fifo-uq", ("sym",))
    with pytest.raises(ConfigError, match=r"schema of table 'quotes': the order_by cannot change \('ts' -> None\)"):
        _register_configured(catalog, [TableConfig.model_validate({**QUOTES, "order_by": None})])


def test_hostile_rows_of_a_latest_table_are_refused_and_change_nothing(tmp_path: Path) -> None:
    with Harness(tmp_path / "data") as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=QUOTES).status_code == 201
        h.wait_loaded("quotes", send(h, [("ibm", 1.0, 5)]))
        for rows, why in (
            ([{"px": 1.0, "ts": 6}], "sym"),  # the key missing
            ([{"sym": None, "px": 1.0, "ts": 6}], "sym"),  # a null key
            ([{"sym": 7, "px": 1.0, "ts": 6}], "sym"),  # a key of the wrong type
            ([{"sym": "ibm", "px": 1.0}], "ts"),  # order_by missing
            ([{"sym": "ibm", "px": 1.0, "ts": None}], "ts"),  # order_by null
        ):
            answer = h.post("/v1/tables/quotes/updates", json={"rows": rows})
            assert answer.status_code == 422 and why in answer.json()["message"], (rows, answer.text)
        assert h.status("quotes")["last_sequence"] == 1
        h.wait_loaded("quotes", send(h, [("ibm", 0.5, 4)]))  # order_by going backwards: kept out
        assert stored(h) == {"ibm": (1.0, 5)} and h.status("quotes")["superseded_rows"] == 1
