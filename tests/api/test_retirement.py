"""DELETE /v1/admin/tables/{t} and /views/{v}: a retired table takes no more updates (410),
loads every update it acknowledged exactly once, then leaves the catalog, the metrics and
the listings; idempotent, durable across a restart in the middle, never resurrected; a
retired name registers again as a new table (docs/tables.md, "Retiring a table or a view").

Spark-free (testing/fakes.py); a gate in the sink keeps acknowledged updates pending.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from testing.fakes import ArrowSink
from testing.prom import sample_value
from testing.service_harness import CLICKS, OPERATOR, Harness

EVENTS: dict[str, Any] = {
    "name": "events",
    "schema": {"columns": [{"name": "k", "type": "int64"}, {"name": "v", "type": "string"}]},
}
OTHER_SCHEMA: dict[str, Any] = {"name": "events", "schema": {"columns": [{"name": "x", "type": "float64"}]}}
VIEW: dict[str, Any] = {
    "name": "joined",
    "inputs": [{"table": "events", "alias": "e"}, {"table": "clicks", "alias": "c"}],
    "on": ["e.v = c.url"],
    "select": ["e.k", "c.n"],
}
RETIRE = "/v1/admin/tables/events"


class GatedSink(ArrowSink):
    """Loads only while ``gate`` is set; a load that finds it closed fails at once (a retry
    with back-off follows), so nothing runs when a harness closes."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(warehouse)
        self.gate = threading.Event()
        self.gate.set()

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        if not self.gate.is_set():
            raise RuntimeError("gate closed")
        if batch.table == "events" and any((r.get("k") or 0) < 0 for t in batch.row_tables for r in t.to_pylist()):
            raise ValueError("cannot write a negative k")  # a poison update: quarantined after 3 attempts
        return super().load(batch, schema)


FAST_RETRY = {"loading": {"retry_base_seconds": 0.01, "retry_max_seconds": 0.05, "max_attempts": 3}}


def harness(data: Path) -> Harness:
    return Harness(data, sink=lambda s: GatedSink(s.warehouse_path), **FAST_RETRY)


def gate(h: Harness) -> threading.Event:
    return h.sink.gate  # type: ignore[attr-defined, no-any-return]


def register(h: Harness, table: dict[str, Any] = EVENTS) -> None:
    answer = h.post("/v1/admin/tables", token=OPERATOR, json=table)
    assert answer.status_code == 201, answer.text


def send(h: Harness, k: int) -> int:
    answer = h.post("/v1/tables/events/updates", json={"rows": [{"k": k, "v": f"v{k}"}]})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["updates"][0]["sequence"])


def keys(h: Harness) -> list[int]:
    return sorted(r["k"] for r in h.rows("events"))


def retired(h: Harness, path: str = RETIRE) -> dict[str, Any]:
    """Polls the DELETE (idempotent) until it answers 200: the table is gone."""
    answers: list[Any] = []

    def gone() -> bool:
        answers.append(h.delete(path))
        assert answers[-1].status_code in (200, 202), answers[-1].text
        return answers[-1].status_code == 200

    h.wait(gone)
    return answers[-1].json()  # type: ignore[no-any-return]


def listed(h: Harness) -> set[str]:
    return {t["name"] for t in h.get("/v1/tables?limit=1000").json()["tables"]}


@pytest.mark.allow_errors("gate closed")
def test_a_retired_table_refuses_updates_loads_what_it_acknowledged_once_and_leaves(tmp_path: Path) -> None:
    with harness(tmp_path / "data") as h:
        register(h)
        h.wait_loaded("events", send(h, 0))
        metrics = h.get("/metrics").text
        assert sample_value(metrics, "loader_updates_loaded_total", table="events") == 1
        gate(h).clear()
        last = max(send(h, k) for k in range(1, 4))  # acknowledged, not loadable yet
        answer = h.delete(RETIRE)
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["state"] == "retiring" and body["pending_updates"] == 3 and body["purge"] is False
        assert h.status("events")["retiring"] is True
        # Every producer route answers 410, naming the table and how to use the name again.
        refused = [
            h.post("/v1/tables/events/updates", json={"rows": [{"k": 9, "v": "x"}]}),
            h.post(
                "/v1/tables/events/updates",
                content=b'{"k": 9, "v": "x"}\n',
                headers={"Content-Type": "application/x-ndjson"},
            ),
            h.post("/v1/tables/events/updates", json={"files": ["events/part-0.parquet"]}),
            h.post(
                "/v1/updates",
                json={
                    "updates": [{"table": "clicks", "rows": [{"url": "u", "n": 1}]}, {"table": "events", "rows": []}]
                },
            ),
        ]
        for r in refused:
            assert r.status_code == 410, r.text
            assert r.json()["table"] == "events" and "POST /v1/admin/tables" in r.json()["message"]
        assert h.delete(RETIRE).status_code == 202  # idempotent while it drains
        gate(h).set()
        done = retired(h)
        assert done == {**done, "name": "events", "kind": "table", "state": "retired", "purged": False}
        assert keys(h) == [0, 1, 2, 3]  # every acknowledged update, once
        assert h.service.catalog.retired["events"].last_seq == last
        # Gone from the catalog, the listings and the metrics.
        assert "events" not in h.service.catalog.entries
        assert "events" not in listed(h) and "clicks" in listed(h)
        assert h.get("/v1/tables/events").status_code == 404
        metrics = h.get("/metrics").text
        assert 'table="events"' not in metrics
        assert sample_value(metrics, "loader_tables") == len(listed(h))
        assert "events" not in json.dumps(h.get("/v1/admin/pending").json())
        assert "events" not in h.get("/v1/admin/trace").text and "events" not in h.get("/v1/admin/schedule").text
        assert "events" not in h.get("/v1/tables:history").text
        assert h.get("/v1/tables:history?tables=events").status_code == 404
        # Repeating the DELETE answers the same; updates still get 410.
        again = h.delete(RETIRE)
        assert again.status_code == 200 and again.json() == done
        assert h.post("/v1/tables/events/updates", json={"rows": [{"k": 9, "v": "x"}]}).status_code == 410


def test_unknown_names_are_404_and_a_table_a_view_reads_is_409(harness: Harness) -> None:
    for path in ("/v1/admin/tables/nosuch", "/v1/admin/views/nosuch"):
        answer = harness.delete(path)
        assert answer.status_code == 404 and "'nosuch'" in answer.json()["message"], answer.text
    assert harness.delete("/v1/admin/tables/clicks", token=None).status_code == 401
    register(harness)
    assert harness.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 201
    refused = harness.delete(RETIRE)
    assert refused.status_code == 409, refused.text
    assert refused.json()["views"] == ["joined"] and "retire them first" in refused.json()["message"]
    assert "events" in harness.service.catalog.entries and not harness.service.catalog.entries["events"].retiring
    view = harness.delete("/v1/admin/views/joined?purge=true")
    assert view.status_code == 200, view.text
    assert view.json()["state"] == "retired" and view.json()["purged"] is True
    assert not (harness.settings.warehouse_path / "joined").exists()
    assert harness.get("/v1/admin/views").json()["views"] == []
    assert "joined" not in listed(harness)
    assert harness.delete("/v1/admin/views/joined").json()["state"] == "retired"  # idempotent
    assert retired(harness)["state"] == "retired"  # no view reads it now


def test_purge_removes_the_delta_table_and_a_new_table_of_the_name_starts_empty_and_above(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with harness(data) as h:
        register(h)
        last = max(send(h, k) for k in range(3))
        h.wait_loaded("events", last)
        done = retired(h, RETIRE + "?purge=true")
        assert done["purged"] is True
        assert not (h.settings.warehouse_path / "events").exists()
        # The name again, with another schema: a new table (the old Delta table is gone).
        register(h, OTHER_SCHEMA)
        answer = h.post("/v1/tables/events/updates", json={"rows": [{"x": 1.5}]})
        assert answer.status_code == 202, answer.text
        seq = int(answer.json()["updates"][0]["sequence"])
        assert seq > last  # numbered above the old table: its WAL records are never taken for the new one's
        h.wait_loaded("events", seq)
        assert h.rows("events") == [{"x": 1.5}]
    with harness(data) as h:  # the WAL still holds the old table's records: not replayed into the new one
        h.wait(lambda: h.status("events")["pending_updates"] == 0)
        assert h.rows("events") == [{"x": 1.5}]
        assert h.post("/v1/tables/events/updates", json={"rows": [{"x": 2.5}]}).status_code == 202


def test_a_name_retired_without_purge_registers_again_with_its_schema_and_continues(harness: Harness) -> None:
    h = harness
    register(h)
    h.wait_loaded("events", send(h, 1))
    retired(h)
    # The kept Delta table has the old schema: another one is refused, nothing registered.
    conflict = h.post("/v1/admin/tables", token=OPERATOR, json=OTHER_SCHEMA)
    assert conflict.status_code == 409 and "Delta table" in conflict.json()["message"], conflict.text
    assert "events" not in h.service.catalog.entries
    assert h.post("/v1/tables/events/updates", json={"rows": [{"k": 9, "v": "x"}]}).status_code == 410
    register(h)  # its own schema: the Delta table continues
    h.wait_loaded("events", send(h, 2))
    assert keys(h) == [1, 2]


@pytest.mark.allow_errors("gate closed")
def test_a_restart_in_the_middle_resumes_the_retirement_and_never_resurrects_the_table(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with harness(data) as h:
        register(h)
        gate(h).clear()
        for k in range(5):
            send(h, k)
        assert h.delete(RETIRE).status_code == 202
        h.wait(lambda: not h.service.dispatcher.is_running("events"))
    with harness(data) as h:  # the retirement is durable: it resumes, loads what is pending, then leaves
        assert h.post("/v1/tables/events/updates", json={"rows": [{"k": 9, "v": "x"}]}).status_code == 410
        retired(h)
        assert keys(h) == [0, 1, 2, 3, 4]
    with harness(data) as h:  # gone for good: not in the catalog, no update replayed or loaded twice
        assert "events" not in h.service.catalog.entries and "events" not in listed(h)
        assert h.post("/v1/tables/events/updates", json={"rows": [{"k": 9, "v": "x"}]}).status_code == 410
        assert keys(h) == [0, 1, 2, 3, 4]


def test_a_configured_table_stays_retired_across_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Harness(data) as h:
        assert h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "u", "n": 1}]}).status_code == 202
        retired(h, "/v1/admin/tables/clicks?purge=true")
    with Harness(data) as h:  # the configuration still declares it: it is not registered again
        assert "clicks" not in h.service.catalog.entries
        assert h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "u", "n": 1}]}).status_code == 410
        register(h, CLICKS)
        answer = h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "w", "n": 2}]})
        assert answer.status_code == 202
        h.wait_loaded("clicks", int(answer.json()["updates"][0]["sequence"]))
        assert h.rows("clicks") == [{"url": "w", "n": 2}]


def quarantined(h: Harness) -> list[dict[str, Any]]:
    return h.get("/v1/admin/quarantine").json()["batches"]  # type: ignore[no-any-return]


@pytest.mark.allow_errors("gate closed", "cannot write a negative k")
def test_quarantined_updates_block_the_retirement_until_an_operator_settles_them(tmp_path: Path) -> None:
    with harness(tmp_path / "data") as h:
        register(h)
        send(h, -1)
        h.wait(lambda: len(quarantined(h)) == 1)
        refused = h.delete(RETIRE)  # acknowledged data nobody chose to drop: the operator decides first
        assert refused.status_code == 409, refused.text
        assert refused.json()["quarantined_updates"] == 1 and "retry or discard" in refused.json()["message"]
        assert not h.service.catalog.entries["events"].retiring
        first = quarantined(h)[0]["first_sequence"]
        assert h.delete(f"/v1/admin/quarantine/events/{first}").status_code == 200
        # A batch quarantined while the table drains holds the retirement until it is settled.
        gate(h).clear()
        send(h, 1)
        send(h, -2)
        assert h.delete(RETIRE).status_code == 202
        gate(h).set()
        h.wait(lambda: len(quarantined(h)) == 1)
        waiting = h.delete(RETIRE)
        assert waiting.status_code == 202 and waiting.json()["quarantined_updates"] == 1, waiting.text
        first = quarantined(h)[0]["first_sequence"]
        retry = h.post(f"/v1/admin/quarantine/events/{first}/retry", token=OPERATOR)  # a retiring table's retry
        assert retry.status_code == 202, retry.text  # is taken (it fails again: quarantined again)
        h.wait(lambda: len(quarantined(h)) == 1 and quarantined(h)[0]["first_sequence"] != first)
        assert h.delete(f"/v1/admin/quarantine/events/{quarantined(h)[0]['first_sequence']}").status_code == 200
        retired(h)
        assert keys(h) == [1]


def test_a_latest_table_retires_after_its_newest_values_load(harness: Harness) -> None:
    columns = [{"name": "k", "type": "int64", "nullable": False}, {"name": "v", "type": "string"}]
    register(harness, {"name": "events", "schema": {"columns": columns}, "mode": "latest", "key": ["k"]})
    paused = harness.post("/v1/admin/tables/events/pause", token=OPERATOR)  # values wait; retiring resumes it
    assert paused.status_code == 200, paused.text
    for k, v in ((1, "a"), (2, "b"), (1, "c")):
        answer = harness.post("/v1/tables/events/updates", json={"rows": [{"k": k, "v": v}]})
        assert answer.status_code == 202, answer.text
    assert harness.delete(RETIRE).status_code == 202
    retired(harness)
    assert sorted((r["k"], r["v"]) for r in harness.rows("events")) == [(1, "c"), (2, "b")]


def test_a_view_retired_with_purge_and_stopped_before_the_purge_is_purged_by_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's retirement is saved, then the process stops before its files go (as a kill
    -9 right after the catalog's save would): the next start finishes the purge, the view
    stays retired, its inputs stay live, and its name can be declared again."""
    data = tmp_path / "data"
    with harness(data) as h:
        register(h)
        assert h.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 201
        h.wait(lambda: (h.settings.warehouse_path / "joined" / "_delta_log").is_dir())
        with monkeypatch.context() as m:
            m.setattr(type(h.service), "_purge", lambda self, record: _not_yet())
            answer = h.delete("/v1/admin/views/joined?purge=true")
        assert answer.status_code == 200 and answer.json()["purged"] is False, answer.text
        assert (h.settings.warehouse_path / "joined").exists()
    with harness(data) as h:
        assert not (h.settings.warehouse_path / "joined").exists()
        assert h.get("/v1/admin/views").json()["views"] == []
        answer = h.delete("/v1/admin/views/joined")
        assert answer.json()["state"] == "retired" and answer.json()["purged"] is True, answer.text
        send(h, 1)  # its inputs live on
        assert h.post("/v1/admin/views", token=OPERATOR, json=VIEW).status_code == 201


async def _not_yet() -> None:
    """A purge that never ran."""
