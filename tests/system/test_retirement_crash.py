"""Retiring a table through kill -9: a real ``loader serve`` (loads in worker processes over
Spark Connect) killed at each durable step of a retirement (loader/core/failpoints.py):

1. ``retire.before-save``: the DELETE decided in memory, the catalog not saved, no answer:
   after the restart the table is live and takes updates (nothing was promised);
2. ``retire.after-save``: the drained table left the saved catalog, its ``?purge=true`` not
   done yet: every acknowledged update is in its Delta table exactly once, and the restart
   finishes the purge, answers 410 for it, lists it nowhere, and registers the name again
   as a new table into which no WAL record of the old one is replayed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.server_process import remote_service
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "retire-crash-operator-token-01"
EVENTS: dict[str, Any] = {
    "name": "events",
    "schema": {"columns": [{"name": "k", "type": "int64"}, {"name": "v", "type": "string"}]},
}
AGAIN: dict[str, Any] = {"name": "events", "schema": {"columns": [{"name": "x", "type": "float64"}]}}


def _send(http: httpx.Client, keys: range) -> int:
    last = 0
    for k in keys:
        answer = http.post("/v1/tables/events/updates", json={"rows": [{"k": k, "v": f"v{k}"}]})
        assert answer.status_code == 202, answer.text
        last = answer.json()["updates"][0]["sequence"]
    return last


def test_a_retirement_killed_at_each_durable_step_loses_nothing_and_resurrects_nothing(
    tmp_path: Path, connect_server: ConnectEndpoint
) -> None:
    data = tmp_path / "data"
    server = remote_service(tmp_path, connect_server.url, TOKEN)
    delta = data / "warehouse" / "events"
    try:
        # Life 1: killed between the decision and its save; the DELETE gets no answer.
        server.start(failpoints="retire.before-save=1")
        assert server.wait_ready()
        with server.client() as http:
            assert http.post("/v1/admin/tables", json=EVENTS).status_code == 201
            _send(http, range(0, 5))
            with pytest.raises(httpx.TransportError):
                http.delete("/v1/admin/tables/events?purge=true")
        assert server.wait_exit(60) != 0, server.log_tail()

        # Life 2: the table is live (the retirement was never promised); more updates wait
        # while it is paused; the DELETE resumes it, it drains, and the service dies once
        # the catalog says it is retired, before its files are purged.
        server.start(failpoints="retire.after-save=1")
        assert server.wait_ready()
        with server.client() as http:
            assert http.get("/v1/tables/events").json()["retiring"] is False
            assert http.post("/v1/admin/tables/events/pause").status_code == 200
            last = _send(http, range(5, 10))
            answer = http.delete("/v1/admin/tables/events?purge=true")
            assert answer.status_code == 202, answer.text
            assert answer.json()["state"] == "retiring" and answer.json()["pending_updates"] >= 5
            refused = http.post("/v1/tables/events/updates", json={"rows": [{"k": 99, "v": "late"}]})
            assert refused.status_code == 410, refused.text
        assert server.wait_exit(180) != 0, server.log_tail()
        rows = read_delta(delta).to_pylist()  # before the purge: every acknowledged update, once
        assert sorted(r["k"] for r in rows) == list(range(10))
        catalog = json.loads((data / "state" / "catalog.json").read_text(encoding="utf-8"))
        assert "events" not in {t["name"] for t in catalog["tables"]}  # killed after the save, before the purge
        assert [(r["name"], r["purge"], r["purged"]) for r in catalog["retired"]] == [("events", True, False)]

        # Life 3: the purge is finished at start; the name is retired; a new table of it
        # starts empty (the old records still in the WAL are not replayed into it).
        server.start()
        assert server.wait_ready()
        assert not delta.exists()
        with server.client() as http:
            answer = http.delete("/v1/admin/tables/events")
            assert answer.status_code == 200, answer.text
            assert answer.json()["state"] == "retired" and answer.json()["purged"] is True
            assert http.post("/v1/tables/events/updates", json={"rows": [{"k": 1, "v": "x"}]}).status_code == 410
            assert "events" not in {t["name"] for t in http.get("/v1/tables").json()["tables"]}
            assert 'table="events"' not in http.get("/metrics").text
            assert http.post("/v1/admin/tables", json=AGAIN).status_code == 201
            again = http.post("/v1/tables/events/updates", json={"rows": [{"x": 1.5}]})
            assert again.status_code == 202, again.text
            seq = again.json()["updates"][0]["sequence"]
            assert seq > last
            server.until(
                lambda: http.get("/v1/tables/events").json()["last_loaded_sequence"] >= seq, "the new table's load"
            )
        assert server.terminate() == 0, server.log_tail()
    finally:
        if server.alive:
            server.kill()
    assert read_delta(delta).to_pylist() == [{"x": 1.5}]
