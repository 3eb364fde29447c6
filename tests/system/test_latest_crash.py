"""Latest tables through kill -9: a real ``loader serve`` (loads in worker processes over
Spark Connect, the default), killed the moment a worker's upsert committed and before the
service noted it, then started again. Every acknowledged
value was sent with a pause in between batches, so nothing is left unanswered; in the end
the Delta table holds one row per key, its newest acknowledged value (largest ``ts``, ties
to the later arrival), however the crashes split and replayed the upserts (docs/latest-tables.md).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from testing.server_process import ServerProcess, free_port, write_config
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "latest-crash-operator-token-01"
PRICES = {
    "name": "prices",
    "schema": {
        "columns": [
            {"name": "sym", "type": "string", "nullable": False},
            {"name": "px", "type": "int64"},
            {"name": "ts", "type": "int64", "nullable": False},
        ]
    },
    "mode": "latest",
    "key": ["sym"],
    "order_by": "ts",
    "key_policy": "linecutting",
    "max_keys_per_batch": 4,
}


def _send(server: ServerProcess, rng: random.Random, sent: list[tuple[str, int, int]], requests: int) -> int:
    """``requests`` acknowledged updates of random values; the last sequence number."""
    last = 0
    with server.client(timeout=60) as http:
        for _ in range(requests):
            rows = [(rng.choice("ABCDEFGHIJ"), len(sent) + i, rng.randint(0, 40)) for i in range(rng.randint(1, 6))]
            body = {"rows": [{"sym": s, "px": px, "ts": ts} for s, px, ts in rows]}
            answer = http.post("/v1/tables/prices/updates", json=body)
            assert answer.status_code == 202, answer.text
            sent.extend(rows)
            last = answer.json()["updates"][0]["sequence"]
    return last


def _newest(sent: list[tuple[str, int, int]]) -> dict[str, tuple[int, int]]:
    table: dict[str, tuple[int, int]] = {}
    for sym, px, ts in sent:  # in arrival order: a tie goes to the later value
        if sym not in table or ts >= table[sym][1]:
            table[sym] = (px, ts)
    return table


def test_upserts_survive_a_kill_between_the_commit_and_its_notice(
    tmp_path: Path, connect_server: ConnectEndpoint
) -> None:
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": 1,  # one table: a second worker would idle
            "spark": {"master": "local[2]", "mode": "connect", "remote": connect_server.url},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": [PRICES],
        },
    )
    server = ServerProcess(tmp_path, config, port, TOKEN)
    rng = random.Random(16)
    sent: list[tuple[str, int, int]] = []
    operator = {"Authorization": f"Bearer {TOKEN}"}
    try:
        # Life 1: values wait while the table is paused, then load in batches of 4 keys; the
        # service dies when the second batch's commit is reported, before it notes it.
        server.start(failpoints="load.after-commit=2")
        assert server.wait_ready()
        with server.client() as http:
            assert http.post("/v1/admin/tables/prices/pause", headers=operator).status_code == 200
        _send(server, rng, sent, 30)
        with server.client() as http:
            assert http.post("/v1/admin/tables/prices/resume", headers=operator).status_code == 200
        assert server.wait_exit(180) != 0, server.log_tail()
        # Life 2: replays the WAL into the update queue (a kill during a replay is the crash
        # suite's, tests/system/test_crash.py), takes more values, loads everything.
        server.start()
        assert server.wait_ready()
        last = _send(server, rng, sent, 20)
        deadline = time.monotonic() + 180
        with server.client() as http:
            while http.get("/v1/tables/prices").json()["last_loaded_sequence"] < last:
                assert time.monotonic() < deadline, server.log_tail()
                time.sleep(0.2)
            status = http.get("/v1/tables/prices").json()
        assert server.terminate() == 0
    finally:
        if server.alive:
            server.kill()
    stored = {r["sym"]: (r["px"], r["ts"]) for r in read_delta(tmp_path / "data" / "warehouse" / "prices").to_pylist()}
    assert stored == _newest(sent)
    assert read_delta(tmp_path / "data" / "warehouse" / "prices").num_rows == len(stored)  # one row per key
    assert status["keys"]["waiting"] == 0 and status["superseded_rows"] > 0
