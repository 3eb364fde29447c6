"""The flat types of issue 35 through the service: both submit routes (decimals parsed from
the body's text), a 422 naming row and column, the WAL's replay across a restart, and the
load, read back exactly (spill segments: tests/loader/loading/test_sinks.py)."""

from __future__ import annotations

import decimal
import threading
from pathlib import Path

import pytest

from testing.service_harness import OPERATOR, Harness

D = decimal.Decimal
TABLE = {
    "name": "ledger",
    "schema": {
        "columns": [
            {"name": "id", "type": "long", "nullable": False},
            {"name": "amount", "type": "decimal(38,2)"},
            {"name": "rate", "type": "double"},
            {"name": "flags", "type": "byte"},
            {"name": "blob", "type": "binary"},
            {"name": "local", "type": "timestamp_ntz"},
            {"name": "n", "type": "short"},
        ]
    },
}


@pytest.mark.allow_errors(r"injected failure")
def test_new_types_survive_the_wal_and_load_exactly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    fail = threading.Event()
    fail.set()  # nothing loads before the restart: the updates live in the WAL only
    with Harness(data, fail=fail) as first:
        r = first.post("/v1/admin/tables", token=OPERATOR, json=TABLE)
        assert r.status_code == 201, r.text
        body = (
            b'{"updates": [{"table": "ledger", "rows": [{"id": 1, "amount": 12345678901234567.89, "rate": 0.1, '
            b'"flags": -128, "blob": "AP8=", "local": "2024-03-10T02:30:00", "n": 32767}]}]}'
        )
        r = first.post("/v1/updates", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 202, r.text
        ndjson = (
            b'{"id": 2, "amount": "-999999999999999999999999999999999999.99", "rate": 1e-3}\n'
            b'{"id": 3, "amount": 0.10}\n'
        )
        r = first.post("/v1/tables/ledger/updates", content=ndjson, headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 202, r.text
        bad = b'{"rows": [{"id": 4, "amount": 1.005}, {"id": 5}]}'
        r = first.post("/v1/tables/ledger/updates", content=bad, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and (r.json()["row"], r.json()["column"]) == (0, "amount"), r.text
        assert "1.005 has more than the 2 digits after the point" in r.json()["message"]
        last = 2
    with Harness(data) as second:  # replayed from the WAL
        second.wait_loaded("ledger", last)
        rows = sorted(second.rows("ledger"), key=lambda row: row["id"])
    assert [(row["id"], row["amount"]) for row in rows] == [
        (1, D("12345678901234567.89")),
        (2, D("-999999999999999999999999999999999999.99")),
        (3, D("0.10")),
    ]
    assert rows[0]["rate"] == 0.1 and rows[1]["rate"] == 0.001
    assert (rows[0]["flags"], rows[0]["blob"], rows[0]["n"]) == (-128, b"\x00\xff", 32767)
    assert rows[0]["local"].isoformat() == "2024-03-10T02:30:00"
