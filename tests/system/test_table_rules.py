"""A real ``loader serve`` (load worker processes over Spark Connect, the embedded writer)
whose Delta tables other tools alter while it loads (issue 33, "the Delta table's own rules").

- ``orders`` gets a CHECK constraint: an update with a violating row is never committed
  (it is quarantined, with the constraint and the row in its error), nothing acknowledged
  is lost (every good row is in the table or in quarantine), and the table's later
  updates load.
- ``prices`` (a latest table) is made append-only: its upserts are refused as the table's
  fault, never quarantined, ``loader_table_writes_refused{reason="append_only"}`` is 1; once
  the property is lifted the waiting updates load and the gauge drops to 0.
- ``clicks`` gets writer feature ``rowTracking``, which the loader does not honour: its
  loads stop (``reason="writer_feature"``) while the other tables load; once another
  tool drops the feature they resume.

What was committed reads back with deltalake and DuckDB.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable
from deltalake._internal import TableFeatures

from testing.delta_alter import commit_metadata
from testing.prom import sample_value
from testing.server_process import ServerProcess, free_port, write_config
from testing.tables import read_delta, read_duckdb
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    # Each refused or violating attempt is logged, as every failed load is; so is the quarantine.
    pytest.mark.allow_errors(
        r"loading (orders|prices|clicks) \(updates \d+\.\.\d+\) (failed|was named)",
        r"quarantining",
    ),
]

TOKEN = "table-rules-operator-token-01"
COLUMNS = [{"name": "id", "type": "int64", "nullable": False}, {"name": "amount", "type": "float64"}]
TABLES = [
    {"name": "orders", "schema": {"columns": COLUMNS}},
    {"name": "clicks", "schema": {"columns": COLUMNS}},
    {
        "name": "prices",
        "schema": {
            "columns": [{"name": "sym", "type": "string", "nullable": False}, {"name": "px", "type": "float64"}]
        },
        "mode": "latest",
        "key": ["sym"],
    },
]
DEADLINE = 120.0
#: What "dropping" row tracking takes out of the protocol (deltalake may add domainMetadata with it).
DROPPED = ("rowTracking", "domainMetadata")


@pytest.fixture
def server(tmp_path: Path, connect_server: ConnectEndpoint) -> Iterator[ServerProcess]:
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": 2,
            "spark": {"master": "local[2]", "remote": connect_server.url},
            "loading": {"max_attempts": 2, "retry_base_seconds": 0.2, "retry_max_seconds": 1.0},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": TABLES,
        },
    )
    proc = ServerProcess(tmp_path, config, port, TOKEN)
    proc.start()
    assert proc.wait_ready(), proc.log_tail()
    yield proc
    if proc.alive:
        proc.terminate()


def until(check: Callable[[], bool], what: str, proc: ServerProcess, seconds: float = DEADLINE) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {seconds}s:\n{proc.log_tail()}"
        time.sleep(0.2)


def post(http: httpx.Client, table: str, rows: list[dict[str, Any]]) -> int:
    answer = http.post(f"/v1/tables/{table}/updates", json={"rows": rows})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["updates"][0]["sequence"])


def loaded_through(http: httpx.Client, table: str) -> int:
    return int(http.get(f"/v1/tables/{table}").json()["last_loaded_sequence"])


def metric(http: httpx.Client, name: str, **labels: str) -> float:
    return sample_value(http.get("/metrics").text, name, **labels)


def quarantined(http: httpx.Client, table: str) -> list[dict[str, Any]]:
    return [b for b in http.get("/v1/admin/quarantine").json()["batches"] if b["table"] == table]


def ids(path: Path) -> list[int]:
    return sorted(r["id"] for r in read_delta(path).to_pylist())


def test_tables_altered_from_outside_are_loaded_by_their_own_rules(server: ServerProcess, tmp_path: Path) -> None:
    warehouse = tmp_path / "data" / "warehouse"
    orders, prices, clicks = (warehouse / name for name in ("orders", "prices", "clicks"))
    with server.client(timeout=60) as http:
        last = {
            "orders": post(http, "orders", [{"id": i, "amount": 1.0} for i in range(1, 6)]),
            "clicks": post(http, "clicks", [{"id": i, "amount": 1.0} for i in range(1, 4)]),
            "prices": post(http, "prices", [{"sym": "a", "px": 1.0}]),
        }
        until(lambda: all(loaded_through(http, t) >= s for t, s in last.items()), "the first loads", server)

        # Other tools alter the three tables while the loader runs.
        DeltaTable(str(orders)).alter.add_constraint({"id_small": "id < 1000"})
        DeltaTable(str(prices)).alter.set_table_properties({"delta.appendOnly": "true"})
        DeltaTable(str(clicks)).alter.add_feature(TableFeatures.RowTracking, allow_protocol_versions_increase=True)

        # orders: a violating update between two good ones, taken as one batch (paused meanwhile).
        assert http.post("/v1/admin/tables/orders/pause").status_code == 200
        good_before = post(http, "orders", [{"id": 6, "amount": 1.0}, {"id": 7, "amount": 2.0}])
        bad = post(http, "orders", [{"id": 8, "amount": 1.0}, {"id": 5000, "amount": 1.0}, {"id": 9, "amount": 1.0}])
        good_after = post(http, "orders", [{"id": 10, "amount": 1.0}])
        assert http.post("/v1/admin/tables/orders/resume").status_code == 200
        prices_seq = post(http, "prices", [{"sym": "b", "px": 2.0}])
        clicks_seq = post(http, "clicks", [{"id": 4, "amount": 1.0}])

        def set_aside() -> set[int]:
            return {s for e in quarantined(http, "orders") for s in range(e["first_sequence"], e["last_sequence"] + 1)}

        # Set aside alone once failing batches are bisected, or with the batch it came in before.
        until(
            lambda: bad in set_aside() and (loaded_through(http, "orders") >= good_after or good_after in set_aside()),
            "the violating update set aside and the batch's others settled",
            server,
        )
        [entry] = [e for e in quarantined(http, "orders") if e["first_sequence"] <= bad <= e["last_sequence"]]
        assert "CHECK constraint id_small (id < 1000)" in entry["error"] and '"id": 5000' in entry["error"]
        if entry["updates"] == 1:  # bisected down to the update: its row is named
            assert entry["row"] == 1 and f"update {bad}, row 1" in entry["error"]
        in_table = set(ids(orders))
        assert 5000 not in in_table
        # Nothing acknowledged is lost: each good update is in the table or set aside with the bad one.
        aside = set_aside()
        expected = {good_before: {6, 7}, bad: {8, 9}, good_after: {10}}
        for seq, values in expected.items():
            assert values <= in_table or seq in aside, (seq, in_table, aside)
        later = post(http, "orders", [{"id": 11, "amount": 3.0}, {"id": 12, "amount": 4.0}])
        until(lambda: loaded_through(http, "orders") >= later, "the later orders", server)
        assert {11, 12} <= set(ids(orders)) and 5000 not in ids(orders)

        # prices and clicks: refused as the tables' fault, never quarantined, the gauge says why.
        until(
            lambda: metric(http, "loader_table_writes_refused", table="prices", reason="append_only") == 1
            and metric(http, "loader_table_writes_refused", table="clicks", reason="writer_feature") == 1,
            "the refusals' gauges",
            server,
        )
        until(
            lambda: metric(http, "loader_batches_total", table="prices", outcome="failed") > 2
            and metric(http, "loader_batches_total", table="clicks", outcome="failed") > 2,
            "more failed attempts than max_attempts",
            server,
        )
        assert not quarantined(http, "prices") and not quarantined(http, "clicks")
        assert loaded_through(http, "prices") < prices_seq and loaded_through(http, "clicks") < clicks_seq
        assert "refuses the loader's writes" in server.log_text() and "'rowTracking'" in server.log_text()

        # Lifted by other tools: the waiting updates load, the gauges go back to 0.
        DeltaTable(str(prices)).alter.set_table_properties({"delta.appendOnly": "false"})
        protocol = DeltaTable(str(clicks)).protocol()
        commit_metadata(
            clicks,
            protocol={
                "minReaderVersion": protocol.min_reader_version,
                "minWriterVersion": 7,
                "writerFeatures": [f for f in protocol.writer_features or [] if f not in DROPPED],
            },
            configuration={"delta.enableRowTracking": None},
        )
        until(
            lambda: loaded_through(http, "prices") >= prices_seq and loaded_through(http, "clicks") >= clicks_seq,
            "the lifted tables' loads",
            server,
        )
        assert metric(http, "loader_table_writes_refused", table="prices", reason="append_only") == 0
        assert metric(http, "loader_table_writes_refused", table="clicks", reason="writer_feature") == 0

    # What was committed reads back the same with deltalake and DuckDB.
    assert sorted(r["id"] for r in read_duckdb(orders).to_pylist()) == ids(orders)
    assert 5000 not in ids(orders) and {1, 2, 3, 4, 5, 11, 12} <= set(ids(orders))
    assert ids(clicks) == [1, 2, 3, 4] == sorted(r["id"] for r in read_duckdb(clicks).to_pylist())
    stored = {r["sym"]: r["px"] for r in read_delta(prices).to_pylist()}
    assert stored == {"a": 1.0, "b": 2.0} == {r["sym"]: r["px"] for r in read_duckdb(prices).to_pylist()}
    assert DeltaTable(str(orders)).metadata().configuration["delta.constraints.id_small"] == "id < 1000"
