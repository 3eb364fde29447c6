"""A real poison against a real ``loader serve`` (issue 33): one update whose landing file was
corrupted after its 202, batched with 10 good updates of the same table. Spark cannot read
it, so the batch fails as its own fault; it is bisected, only that update is quarantined
(named by sequence and Idempotency-Key, with Spark's error), and the 10 load once. Once the
file is repaired, a retry loads it once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from testing.poison_trial import EXPECTED_ERRORS, PoisonTrial
from testing.prom import sample_value
from testing.server_process import ServerProcess, free_port, write_config
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    # Each failed attempt of the bisection, and the quarantine of the poison, as Spark words it.
    pytest.mark.allow_errors(r"loading feed \(updates \d+\.\.\d+\) (failed|was named)"),
]

TOKEN = "poison-test-operator-token-01"
FEED = {
    "name": "feed",
    "schema": {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "note", "type": "string"}]},
}
GOOD, POISON = 10, 5  # ten good updates, the poison sixth among them


@pytest.fixture
def server(tmp_path: Path, connect_server: ConnectEndpoint) -> Iterator[ServerProcess]:
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": 1,
            "spark": {"master": "local[2]", "mode": "connect", "remote": connect_server.url},
            "loading": {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2, "max_attempts": 2},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": [FEED],
        },
    )
    proc = ServerProcess(tmp_path, config, port, TOKEN)
    proc.start()
    assert proc.wait_ready(), proc.log_tail()
    yield proc
    if proc.alive:
        assert proc.terminate() == 0, proc.log_tail()


def _entries(http: httpx.Client) -> list[dict[str, Any]]:
    r = http.get("/v1/admin/quarantine")
    assert r.status_code == 200, r.text
    return r.json()["batches"]


def _loaded_through(http: httpx.Client) -> int:
    return int(http.get("/v1/tables/feed").json()["last_loaded_sequence"])


def _ids(tmp_path: Path) -> list[int]:
    return sorted(read_delta(tmp_path / "data" / "warehouse" / "feed").column("id").to_pylist())


def test_a_poison_update_among_ten_good_ones_is_quarantined_alone_and_the_ten_load_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    landing = tmp_path / "data" / "landing"
    owned = tmp_path / "data" / "landed" / "feed"
    landing.mkdir(parents=True, exist_ok=True)
    with server.client(timeout=60) as http:
        assert http.post("/v1/admin/tables/feed/pause").status_code == 200  # one batch, all eleven
        seqs: list[int] = []
        poison_copy: Path | None = None
        for k in range(GOOD + 1):
            name = f"part-{k}.parquet"
            ids = list(range(100 * k, 100 * k + 10))
            pq.write_table(pa.table({"id": ids, "note": [f"u{k}"] * 10}), landing / name)
            before = set(owned.iterdir()) if owned.exists() else set()
            r = http.post("/v1/tables/feed/updates", json={"files": [name]}, headers={"Idempotency-Key": f"part-{k}"})
            assert r.status_code == 202, r.text
            seqs.append(r.json()["updates"][0]["sequence"])
            if k == POISON:
                [poison_copy] = set(owned.iterdir()) - before
        assert poison_copy is not None
        good_bytes = poison_copy.read_bytes()
        poison_copy.write_bytes(b"PAR1 this is not parquet any more PAR1")  # broken after the 202
        assert http.post("/v1/admin/tables/feed/resume").status_code == 200

        server.until(lambda: len(_entries(http)) == 1 and _loaded_through(http) >= seqs[-1], "the bisection", 240)
        [entry] = _entries(http)
        assert entry["first_sequence"] == entry["last_sequence"] == seqs[POISON], entry
        assert entry["updates"] == 1 and entry["files"] == 1 and entry["idempotency_key"] == f"part-{POISON}"
        assert entry["attempts"] == 2 and entry["error"], entry
        good = [100 * k + i for k in range(GOOD + 1) if k != POISON for i in range(10)]
        assert _ids(tmp_path) == good  # the ten, each row once
        metrics = http.get("/metrics").text
        assert sample_value(metrics, "loader_batch_splits_total", table="feed") >= 3
        assert sample_value(metrics, "loader_batches_total", table="feed", outcome="quarantined") == 1
        assert sample_value(metrics, "loader_table_quarantined_updates", table="feed") == 1

        poison_copy.write_bytes(good_bytes)  # the operator repairs the file, then retries
        r = http.post(f"/v1/admin/quarantine/feed/{seqs[POISON]}/retry")
        assert r.status_code == 202, r.text
        retried = r.json()["updates"][0]["sequence"]
        server.until(lambda: _loaded_through(http) >= retried, "the retry", 240)
        assert _ids(tmp_path) == sorted(good + list(range(100 * POISON, 100 * POISON + 10)))
        assert _entries(http) == []


@pytest.mark.allow_errors(*EXPECTED_ERRORS)
def test_poison_rounds_against_tables_altered_from_outside(tmp_path: Path, connect_server: ConnectEndpoint) -> None:
    """The hostile-input trial's second part, short (testing/poison_trial.py; the long run is
    ``python -m trials.hostile_input --poison-rounds N``): constraints added from outside
    while loading, then seeded rounds of good and poison updates in one batch each."""
    trial = PoisonTrial(tmp_path, seed=33, log=print, spark_remote=connect_server.url)
    try:
        trial.start()
        results = [trial.round() for _ in range(2)]
    finally:
        trial.close()
    for result in results:
        assert result.ok, result
    assert sum(r.poison for r in results) >= 2 and sum(r.poison_kinds["file"] for r in results) >= 1
    assert sum(r.held_values for r in results) >= 1  # a latest table's later values waited, then loaded
