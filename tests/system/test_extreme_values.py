"""Issue 33 against a real ``loader serve`` (the shared one of tests/system/conftest.py: load
worker processes over a Spark Connect server): the extreme values of every type in JSON rows and NDJSON, and
landing files of a castable physical type, get 202 or 422 as designed, and every accepted
row is in its Delta table exactly once with the value sent. No load attempt may fail
(ServerProcess hands the server's log to the guard, tests/conftest.py): the value that
once got a 202 and then failed every load (``9999-12-31T23:59:59.999999Z``) is among them.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from testing.shared_service import Tables
from testing.tables import read_delta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "extreme-values-operator-token-1"
UTC = dt.UTC
COLUMNS = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "s", "type": "string"},
    {"name": "i32", "type": "int32"},
    {"name": "i64", "type": "int64"},
    {"name": "f32", "type": "float32"},
    {"name": "f64", "type": "float64"},
    {"name": "b", "type": "boolean"},
    {"name": "d", "type": "date"},
    {"name": "ts", "type": "timestamp"},
]
TABLES = [
    {"name": "extremes", "schema": {"columns": COLUMNS}},
    {"name": "by_ts", "schema": {"columns": COLUMNS, "partition_by": ["ts"]}},
    {"name": "by_s", "schema": {"columns": COLUMNS, "partition_by": ["s"]}},
    {"name": "latest", "schema": {"columns": COLUMNS}, "mode": "latest", "key": ["id"]},
    {"name": "feed", "schema": {"columns": [{"name": "id", "type": "int64"}, {"name": "n", "type": "int32"}]}},
]
TS_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
TS_MIN = dt.datetime(1, 1, 1, tzinfo=UTC)

#: (JSON row, the row as it must read back: only the columns it sets, the others are null).
ACCEPTED: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"id": 1, "ts": "9999-12-31T23:59:59.999999Z"}, {"ts": TS_MAX}),  # the reported value
    ({"id": 2, "ts": "0001-01-01T00:00:00Z", "d": "0001-01-01"}, {"ts": TS_MIN, "d": dt.date(1, 1, 1)}),
    ({"id": 3, "ts": "0001-01-01T01:00:00+01:00", "d": "9999-12-31"}, {"ts": TS_MIN, "d": dt.date(9999, 12, 31)}),
    ({"id": 4, "ts": "2025-12-31T23:30:00-01:00"}, {"ts": dt.datetime(2026, 1, 1, 0, 30, tzinfo=UTC)}),  # a year on
    ({"id": 5, "ts": -62135596800, "i32": -(2**31), "i64": -(2**63)}, {"ts": TS_MIN, "i32": -(2**31), "i64": -(2**63)}),
    (
        {"id": 6, "ts": 253402300799, "i32": 2**31 - 1, "i64": 2**63 - 1},
        {"ts": TS_MAX.replace(microsecond=0), "i32": 2**31 - 1, "i64": 2**63 - 1},
    ),
    (
        {"id": 7, "f32": 3.4028235e38, "f64": 1.7976931348623157e308},
        {"f32": 3.4028234663852886e38, "f64": 1.7976931348623157e308},
    ),
    (
        {"id": 8, "f32": -3.4028235e38, "f64": -1.7976931348623157e308},
        {"f32": -3.4028234663852886e38, "f64": -1.7976931348623157e308},
    ),
    ({"id": 9, "f32": 1.401298464324817e-45, "f64": 5e-324}, {"f32": 1.401298464324817e-45, "f64": 5e-324}),
    ({"id": 10, "f32": -0.0, "f64": -0.0, "b": False}, {"f32": -0.0, "f64": -0.0, "b": False}),
    (
        {"id": 11, "f32": 1e-46, "ts": "2026-01-01T00:00:00.1234560Z"},
        {"f32": 0.0, "ts": dt.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)},
    ),
    ({"id": 12, "s": "a\x00b \U0001f600\U0010ffff"}, {"s": "a\x00b \U0001f600\U0010ffff"}),
    ({"id": 13, "s": "x" * 1000, "b": True}, {"s": "x" * 1000, "b": True}),
]
#: (JSON row, the column the 422 names): values no reader holds.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"id": 100, "ts": "9999-12-31T23:30:00-01:00"}, "ts"),  # year 10000 in UTC
    ({"id": 101, "ts": "0001-01-01T00:30:00+01:00"}, "ts"),  # year 0 in UTC
    ({"id": 102, "ts": "2026-01-01T00:00:00.1234567Z"}, "ts"),  # below a microsecond
    ({"id": 103, "f32": 3.5e38}, "f32"),
    ({"id": 104, "i32": 2**31}, "i32"),
    ({"id": 105, "d": "0000-12-31"}, "d"),
]


def _string_partition_rows() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Rows for the table partitioned by s: a partition value must name a directory (no NUL,
    not empty, at most 255 bytes once escaped)."""
    names_a_directory = [
        (row, want) for row, want in ACCEPTED if "\x00" not in row.get("s", "") and len(row.get("s", "-")) < 80
    ]
    return names_a_directory + [({"id": 14, "s": "a/b=c%d \U0001f600"}, {"s": "a/b=c%d \U0001f600"})]


def _post_rows(http: httpx.Client, table: str, rows: list[dict[str, Any]], ndjson: bool = False) -> httpx.Response:
    if ndjson:
        body = "\n".join(json.dumps(r) for r in rows).encode()
        return http.post(f"/v1/tables/{table}/updates", content=body, headers={"Content-Type": "application/x-ndjson"})
    return http.post(f"/v1/tables/{table}/updates", json={"rows": rows})


def _wait_loaded(http: httpx.Client, tables: Tables, table: str) -> None:
    deadline = time.monotonic() + 180
    while True:
        status = http.get(f"/v1/tables/{tables.name(table)}").json()
        if status["last_loaded_sequence"] >= status["last_sequence"]:
            assert status["failures"] == 0, status
            return
        assert time.monotonic() < deadline, f"{table} not loaded: {status}\n{tables.server.log_tail()}"
        time.sleep(0.1)


def _same(value: Any) -> Any:
    """Floats by their bits (-0.0 is not 0.0), everything else as it is."""
    return value.hex() if isinstance(value, float) else value


def _rows(tables: Tables, table: str) -> dict[int, dict[str, Any]]:
    """The table's rows by id, each id exactly once."""
    rows = read_delta(tables.path(table)).to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{table}: a row loaded twice: {sorted(ids)}"
    return {r["id"]: r for r in rows}


def _assert_loaded(tables: Tables, table: str, expected: dict[int, dict[str, Any]]) -> None:
    rows = _rows(tables, table)
    assert sorted(rows) == sorted(expected), table
    for id_, want in expected.items():
        got = {k: _same(v) for k, v in rows[id_].items() if k != "id"}
        assert got == {c["name"]: _same(want.get(c["name"])) for c in COLUMNS if c["name"] != "id"}, (table, id_)


def test_extreme_values_get_202_or_a_precise_422_and_load_exactly_once(tables: Tables) -> None:
    tables.register(TABLES)
    with tables.client(timeout=60) as http:
        expected: dict[str, dict[int, dict[str, Any]]] = {"extremes": {}, "by_ts": {}, "by_s": {}, "latest": {}}
        # JSON rows, one update per row (each its own batch or merged: exactly once either way)
        for row, want in ACCEPTED:
            for table in ("extremes", "by_ts", "latest"):
                r = _post_rows(http, tables.name(table), [row])
                assert r.status_code == 202, (table, row, r.text)
                expected[table][row["id"]] = want
        # NDJSON: the same values, in one body, for the table partitioned by a string
        partition_rows = _string_partition_rows()
        r = _post_rows(http, tables.name("by_s"), [row for row, _ in partition_rows], ndjson=True)
        assert r.status_code == 202, r.text
        expected["by_s"] = {row["id"]: want for row, want in partition_rows}
        # refused: the 422 names the row and the column, and nothing of the update is kept
        for row, column in REFUSED:
            r = _post_rows(http, tables.name("extremes"), [{"id": 99}, row])
            assert r.status_code == 422, (row, r.text)
            body = r.json()
            assert (body["row"], body["column"]) == (1, column), body
            assert "row 1" in body["message"] and repr(column) in body["message"], body
        for value in ("", "__HIVE_DEFAULT_PARTITION__", "a\x00b"):
            r = _post_rows(http, tables.name("by_s"), [{"id": 98, "s": value}], ndjson=True)
            assert r.status_code == 422 and (r.json()["row"], r.json()["column"]) == (0, "s"), r.text
        for table in expected:
            _wait_loaded(http, tables, table)
        assert tables.quarantined(http) == []
    for table, want in expected.items():
        _assert_loaded(tables, table, want)


def test_castable_landing_files_are_converted_and_others_refused_naming_both_types(tables: Tables) -> None:
    tables.register(TABLES)
    landing = tables.landing

    def parquet(name: str, **columns: pa.Array) -> str:
        name = tables.name(name)  # the landing directory is the shared service's
        pq.write_table(pa.table(columns), landing / name)
        return name

    taken = {
        # an int32 column stored as int64 with small values (was a 202, then every load failed)
        parquet("narrow.parquet", id=pa.array([1, 2], pa.int64()), n=pa.array([-(2**31), 2**31 - 1], pa.int64())): {
            1: -(2**31),
            2: 2**31 - 1,
        },
        parquet("small.parquet", id=pa.array([3, 4], pa.int32()), n=pa.array([0, 65535], pa.uint16())): {
            3: 0,
            4: 65535,
        },
        parquet("unsigned.parquet", id=pa.array([5], pa.uint64()), n=pa.array([7], pa.uint32())): {5: 7},
    }
    text_csv, lines_jsonl = tables.name("text.csv"), tables.name("lines.jsonl")
    (landing / text_csv).write_text("id,n\n6,0x10\n7,-2147483648\n8,\n", encoding="utf-8")
    (landing / lines_jsonl).write_text('{"id": 9, "n": 2147483647}\n{"id": 10}\n', encoding="utf-8")
    refused = {
        # the reported file: ids as text ("1", "2") for an int64 column
        parquet("text_ids.parquet", id=pa.array(["1", "2"]), n=pa.array([1, 2], pa.int32())): (
            "id",
            None,
            "column 'id' is string in the file but int64 in the table",
        ),
        parquet("wide.parquet", id=pa.array([11, 12], pa.int64()), n=pa.array([1, 2**31], pa.int64())): (
            "n",
            1,
            "holds 2147483648, which is outside int32's range",
        ),
        parquet("floats.parquet", id=pa.array([13], pa.int64()), n=pa.array([1.0], pa.float64())): (
            "n",
            None,
            "column 'n' is double in the file but int32 in the table",
        ),
    }
    feed = tables.name("feed")
    with tables.client(timeout=60) as http:
        r = http.post(f"/v1/tables/{feed}/updates", json={"files": [*taken, text_csv, lines_jsonl]})
        assert r.status_code == 202, r.text
        for name, (column, row, fragment) in refused.items():
            r = http.post(f"/v1/tables/{feed}/updates", json={"files": [name]})
            assert r.status_code == 422, (name, r.text)
            body = r.json()
            assert body["column"] == column and body.get("row") == row and fragment in body["message"], body
            assert name in body["message"] and "fix the file" in body["message"]
        _wait_loaded(http, tables, "feed")
    rows = _rows(tables, "feed")
    want = {id_: n for values in taken.values() for id_, n in values.items()} | {
        6: 16,
        7: -(2**31),
        8: None,
        9: 2**31 - 1,
        10: None,
    }
    assert {id_: row["n"] for id_, row in rows.items()} == want
