"""A schema change through kill -9: a real ``loader serve`` (loads in worker processes over
Spark Connect) killed at ``schema.after-catalog``, the new schema saved in the catalog and
the Delta table not yet changed, with updates of the old schema waiting (the table paused).
The change comes from an operator (PATCH) or from the feed (a row with a new field, the
table declared ``on_new_fields = "add"``).

The request gets no answer (a feed's update was not acknowledged: it is sent again). The
restart brings the Delta table up to the catalog's schema before the table loads; intake
takes rows of the new schema; every update acknowledged before and after lands once, the
earlier ones with the new column null; and deltalake's reader sees the new schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from testing.server_process import remote_service
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "schema-crash-operator-token-01"
COLUMNS: list[dict[str, Any]] = [
    {"name": "k", "type": "int64", "nullable": False},
    {"name": "v", "type": "string", "nullable": False},
]
WIDER = [COLUMNS[0], {"name": "v", "type": "string"}, {"name": "w", "type": "string"}]


@pytest.mark.parametrize("by", ["operator", "feed"])
def test_a_schema_change_killed_after_the_catalogs_save_is_completed_by_the_restart(
    tmp_path: Path, connect_server: ConnectEndpoint, by: str
) -> None:
    data = tmp_path / "data"
    server = remote_service(tmp_path, connect_server.url, TOKEN)
    delta = data / "warehouse" / "events"
    try:
        server.start(failpoints=f"schema.after-catalog={1 if by == 'operator' else 2}")
        assert server.wait_ready()
        with server.client() as http:
            table = {"name": "events", "schema": {"columns": COLUMNS}, "on_new_fields": "add"}
            assert http.post("/v1/admin/tables", json=table).status_code == 201
            first = http.post("/v1/tables/events/updates", json={"rows": [{"k": 0, "v": "loaded"}]})
            server.until(lambda: http.get("/v1/tables/events").json()["last_loaded_sequence"] >= 1, "the first load")
            assert http.post("/v1/admin/tables/events/pause").status_code == 200
            for k in range(1, 4):
                answer = http.post("/v1/tables/events/updates", json={"rows": [{"k": k, "v": f"v{k}"}]})
                assert answer.status_code == 202, answer.text
            with pytest.raises(httpx.TransportError):
                if by == "operator":
                    http.patch("/v1/admin/tables/events/schema", json={"columns": WIDER})
                else:  # v made nullable by the operator, w by the feed (a request killed mid-way)
                    assert http.patch("/v1/admin/tables/events/schema", json={"columns": WIDER[:2]}).status_code == 200
                    http.post("/v1/tables/events/updates", json={"rows": [{"k": 4, "v": None, "w": "new"}]})
        assert first.status_code == 202
        assert server.wait_exit(60) != 0, server.log_tail()
        assert [f.name for f in DeltaTable(str(delta)).schema().fields] == ["k", "v"]  # killed before Delta's commit

        server.start()
        assert server.wait_ready()
        fields = DeltaTable(str(delta)).schema().fields
        assert [(f.name, f.nullable) for f in fields] == [("k", False), ("v", True), ("w", True)]
        with server.client() as http:
            assert http.post("/v1/admin/tables/events/resume").status_code == 200
            # (with by="feed", the request that got no answer, sent again)
            answer = http.post("/v1/tables/events/updates", json={"rows": [{"k": 4, "v": None, "w": "new"}]})
            assert answer.status_code == 202, answer.text
            server.until(
                lambda: http.get("/v1/tables/events").json()["last_loaded_sequence"] >= 5, "every update loaded"
            )
        assert server.terminate() == 0, server.log_tail()
    finally:
        if server.alive:
            server.kill()
    rows = sorted((r["k"], r["v"], r["w"]) for r in read_delta(delta).to_pylist())
    assert rows == [(0, "loaded", None), (1, "v1", None), (2, "v2", None), (3, "v3", None), (4, None, "new")]
