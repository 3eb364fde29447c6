"""The hostile-input case table: one malformed or hostile request per case and what the
service must answer.

Shared by ``tests/api/test_hostile_input.py`` (every case is a regression test) and
``trials/hostile_input.py`` (the RELIABILITY.md table); ``testing/hostile_runner.py``
runs a case and checks that it changed nothing.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from testing.hostile_runner import (
    FEED,
    MAX_BODY_BYTES,
    MULTI,
    NDJSON,
    NES,
    ORD,
    TYP,
    WIDE,
    Case,
    Env,
)
from testing.service_harness import OPERATOR, ORDERS_ONLY

# ----------------------------------------------------------------------------- the cases


def _post(path: str, value: Any, headers: dict[str, str]) -> Callable[[Env], None]:
    """An earlier accepted request, encoded as ``send`` encodes (a retry sends the same bytes)."""

    def prepare(env: Env) -> None:
        r = env.harness.post(
            path, content=json.dumps(value).encode(), headers={**headers, "Content-Type": "application/json"}
        )
        assert r.status_code == 202, r.text

    return prepare


def _accept_until(env: Env) -> None:
    """An earlier accepted update of orders whose data ends now (memo["until"])."""
    env.memo["until"] = until = time.time()
    r = env.harness.post(ORD, json={"rows": [{"order_id": 60}], "data_until": until})
    assert r.status_code == 202, r.text


ROW = {"order_id": 5, "amount": 1.0, "country": "DE"}
RESEND = "send the whole update again"
SEND_JSON_HINT = "send utf-8 json"
KEY = "order-batch-0070"
FIRST = {"rows": [{"order_id": 70, "country": "DE"}]}


def _orders(**row: Any) -> dict[str, Any]:
    return {"rows": [{"order_id": 5, **row}]}


def _typed(**row: Any) -> dict[str, Any]:
    return {"rows": [row]}


def _files(*names: Any) -> dict[str, Any]:
    return {"files": list(names)}


def _multi(*updates: dict[str, Any]) -> dict[str, Any]:
    return {"updates": list(updates)}


def _deep(levels: int) -> Any:
    """A struct type ``levels`` deep (Delta's schema JSON)."""
    kind: Any = "long"
    for _ in range(levels):
        kind = {"type": "struct", "fields": [{"name": "f", "type": kind, "nullable": True, "metadata": {}}]}
    return kind


# -- columnar bodies (Arrow IPC streams and Parquet files), built when a case runs -----------------------
ARROW = "application/vnd.apache.arrow.stream"
PARQUET = "application/vnd.apache.parquet"


def _ipc(columns: dict[str, Any], **options: Any) -> Callable[[Env], bytes]:
    def build(env: Env) -> bytes:
        data = pa.table(columns)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, data.schema, options=pa.ipc.IpcWriteOptions(**options)) as writer:
            writer.write_table(data)
        return sink.getvalue().to_pybytes()

    return build


def _ipc_file(env: Env) -> bytes:
    data = pa.table({"order_id": pa.array([1], pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    return sink.getvalue().to_pybytes()


def _truncated(build: Callable[[Env], bytes], keep: int) -> Callable[[Env], bytes]:
    return lambda env: build(env)[:keep]


def _parquet(columns: Callable[[], dict[str, Any]]) -> Callable[[Env], bytes]:
    def build(env: Env) -> bytes:
        out = io.BytesIO()
        pq.write_table(pa.table(columns()), out, compression="zstd")
        return out.getvalue()

    return build


def _repeated(rows: int, text: str) -> pa.DictionaryArray:
    """One string, ``rows`` times, as a dictionary: a few bytes in a file, ``rows`` copies decoded."""
    return pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([text]))


_GOOD_ORDERS_IPC = _ipc({"order_id": pa.array([1, 2], pa.int64()), "country": ["DE", "FR"]})
_FIX_COLUMNS = "cast the column"


GOOD_ORDERS = {"table": "orders", "rows": [ROW]}
GOOD_CLICKS = {"table": "clicks", "rows": [{"url": "/b", "n": 2}]}

CASES: list[Case] = [
    # -- the body is not JSON ---------------------------------------------------------------
    Case("json", "invalid", 400, "not valid json", SEND_JSON_HINT, body=b'{"rows": ['),
    Case("json", "empty body", 400, "not valid json", SEND_JSON_HINT, body=b""),
    Case("json", "trailing garbage", 400, "extra data", SEND_JSON_HINT, body=b'{"rows": [{"order_id": 1}]} x'),
    Case("json", "nested 50000 deep", 400, "nested too deeply", SEND_JSON_HINT, body=b"[" * 50_000),
    Case(
        "json",
        "invalid UTF-8",
        400,
        "not valid utf-8",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "country": "\xff\xfe"}]}',
    ),
    Case(
        "json",
        "Latin-1 with charset",
        400,
        "not valid utf-8",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "country": "Stra\xdfe"}]}',
        content_type="application/json; charset=latin-1",
        note="bodies are UTF-8 whatever the charset parameter says",
    ),
    Case(
        "json",
        "UTF-8-encoded surrogate",
        400,
        "not valid utf-8",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "country": "\xed\xa0\x80"}]}',
    ),
    Case(
        "json",
        "lone surrogate escape in a value",
        400,
        "surrogate",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "country": "\\ud800"}]}',
    ),
    Case(
        "json",
        "lone surrogate escape after an escaped backslash",
        400,
        "surrogate",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "country": "\\\\ud800\\udc00"}]}',
        note="a backslash, text 'ud800', then a lone low surrogate",
    ),
    Case(
        "json",
        "lone surrogate escape in a UTF-16 body",
        400,
        "surrogate",
        SEND_JSON_HINT,
        body='{"rows": [{"order_id": 1, "country": "\\ud800"}]}'.encode("utf-16"),
    ),
    Case(
        "json",
        "lone surrogate escape in a key",
        400,
        "surrogate",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "\\udc00": 1}]}',
    ),
    Case(
        "json",
        "NaN literal",
        400,
        "nan is not a json number",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "amount": NaN}]}',
    ),
    Case(
        "json",
        "-Infinity literal",
        400,
        "-infinity is not a json number",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1, "amount": -Infinity}]}',
    ),
    Case(
        "json",
        "NaN data_until",
        400,
        "nan is not a json number",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": 1}], "data_until": NaN}',
    ),
    Case(
        "json",
        "5000-digit integer",
        400,
        "more digits",
        SEND_JSON_HINT,
        body=b'{"rows": [{"order_id": ' + b"9" * 5000 + b"}]}",
    ),
    # -- JSON of the wrong shape --------------------------------------------------------------
    Case("shape", "array body", 422, "must be a json object", '{"rows": [...]}', json=[ROW]),
    Case("shape", "string body", 422, "must be a json object", '{"rows": [...]}', json="rows"),
    Case("shape", "null body", 422, "must be a json object", '{"rows": [...]}', json=None),
    Case("shape", "number body", 422, "must be a json object", '{"rows": [...]}', json=42),
    Case("shape", "rows not a list", 422, '"rows" must be a json list', "of objects, one per row", json={"rows": ROW}),
    Case(
        "shape",
        "rows and files",
        422,
        "exactly one of",
        '"rows" (a list of objects)',
        json={"rows": [ROW], "files": []},
    ),
    Case("shape", "neither rows nor files", 422, "exactly one of", '"rows" (a list of objects)', json={}),
    Case(
        "shape",
        "unknown top-level field",
        422,
        "unknown field 'table_name'",
        "allowed fields are",
        json={"rows": [ROW], "table_name": "x"},
    ),
    Case("shape", "empty rows", 422, "has no rows", "send at least one row", json={"rows": []}),
    Case(
        "shape",
        "row is a list",
        422,
        "row 0 of table 'orders' is not a json object",
        RESEND,
        json={"rows": [[1, 1.0, "DE"]]},
    ),
    Case("shape", "row is null", 422, "row 0 of table 'orders' is not a json object", RESEND, json={"rows": [None]}),
    # -- values of the wrong type ---------------------------------------------------------------
    Case(
        "types", "string for int64", 422, "column 'order_id': expected an integer", RESEND, json=_orders(order_id="5")
    ),
    Case(
        "types",
        "fraction for int64",
        422,
        "column 'order_id': expected an integer, got 1.5",
        RESEND,
        json=_orders(order_id=1.5),
    ),
    Case("types", "2**63 for int64", 422, "out of range for int64", RESEND, json=_orders(order_id=2**63)),
    Case("types", "-2**63-1 for int64", 422, "out of range for int64", RESEND, json=_orders(order_id=-(2**63) - 1)),
    Case("types", "1e19 for int64", 422, "out of range for int64", RESEND, json=_orders(order_id=1e19)),
    Case("types", "true for int64", 422, "expected an integer, got true", RESEND, json=_orders(order_id=True)),
    Case(
        "types", "object for int64", 422, 'expected an integer, got {"v": 1}', RESEND, json=_orders(order_id={"v": 1})
    ),
    Case("types", "list for int64", 422, "expected an integer, got [1]", RESEND, json=_orders(order_id=[1])),
    Case(
        "types",
        "object for string",
        422,
        "column 'country': expected a string",
        RESEND,
        json=_orders(country={"code": "DE"}),
    ),
    Case(
        "types",
        "number for string",
        422,
        "column 'country': expected a string, got 49",
        RESEND,
        json=_orders(country=49),
    ),
    Case(
        "types",
        "true for float64",
        422,
        "column 'amount': expected a number, got true",
        RESEND,
        json=_orders(amount=True),
    ),
    Case("types", "string for float64", 422, 'expected a number, got "1.5"', RESEND, json=_orders(amount="1.5")),
    Case(
        "types",
        "1e400 (inf) for float64",
        422,
        "expected a finite number",
        RESEND,
        body=b'{"rows": [{"order_id": 1, "amount": 1e400}]}',
    ),
    Case("types", "2**31 for int32", 422, "out of range for int32", RESEND, path=TYP, json=_typed(i32=2**31)),
    Case("types", "1e39 for float32", 422, "out of range for float32", RESEND, path=TYP, json=_typed(f32=1e39)),
    Case("types", "1 for boolean", 422, "expected true or false, got 1", RESEND, path=TYP, json=_typed(ok=1)),
    Case("types", "February 30th", 422, "expected a date yyyy-mm-dd", RESEND, path=TYP, json=_typed(day="2026-02-30")),
    Case(
        "types",
        "timestamp past 9999 in UTC",
        422,
        "out of range in utc",
        RESEND,
        path=TYP,
        json=_typed(at="9999-12-31T23:59:59-01:00"),
    ),
    Case(
        "types",
        "timestamp before year 1 in UTC",
        422,
        "out of range in utc",
        RESEND,
        path=TYP,
        json=_typed(at="0001-01-01T00:00:00+01:00"),
    ),
    Case("types", "Unix time 1e20", 422, "out of range", RESEND, path=TYP, json=_typed(at=1e20)),
    # -- nested values ----------------------------------------------------------------------------------
    Case(
        "nested",
        "a struct field of another type in a list",
        422,
        "items[1].sku: expected a string, got 7",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "items": [{"sku": "a"}, {"sku": 7}]}]},
    ),
    Case(
        "nested",
        "decimal overflow inside a struct",
        422,
        "items[0].price",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "items": [{"price": "12345.67"}]}]},
    ),
    Case(
        "nested",
        "NaN for a decimal inside a struct",
        422,
        "items[0].price",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "items": [{"price": "NaN"}]}]},
    ),
    Case(
        "nested",
        "invalid base64 inside a struct",
        422,
        "expected base64",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "items": [{"blob": "not base64!"}]}]},
    ),
    Case(
        "nested",
        "a map with a null key",
        422,
        "a map key is null",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "codes": [{"key": None, "value": "x"}]}]},
    ),
    Case(
        "nested",
        "a map key twice",
        422,
        "repeats",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "codes": [{"key": 1, "value": "x"}, {"key": 1, "value": "y"}]}]},
    ),
    Case(
        "nested",
        "a value nested deeper than its type",
        422,
        "expected an integer",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "attrs": {"a": {"b": 1}}}]},
    ),
    Case(
        "nested",
        "an unknown field inside a struct",
        422,
        "unknown field",
        RESEND,
        path=NES,
        json={"rows": [{"id": 1, "items": [{"sku": "a", "colour": "red"}]}]},
    ),
    Case(
        "nested",
        "mixed types in a new field's list",
        422,
        "a list of mixed types",
        RESEND,
        path=FEED,
        json={"rows": [{"id": 1, "tags": ["a", 1]}]},
        note="the table adds new fields (on_new_fields = add), from values of one type only",
    ),
    Case(
        "nested",
        "a new field with a string and a number",
        422,
        "new field v: a string and an integer",
        RESEND,
        path=FEED,
        json={"rows": [{"id": 1, "v": "a"}, {"id": 2, "v": 3}]},
    ),
    Case(
        "nested",
        "a declared type nested 40 deep",
        422,
        "deep",
        "",
        path="/v1/admin/tables",
        token=OPERATOR,
        json={"name": "deep", "schema": {"columns": [{"name": "x", "type": _deep(40)}]}},
    ),
    # -- columns -------------------------------------------------------------------------------------
    Case(
        "columns",
        "required column missing",
        422,
        "'order_id' is required (not nullable) but missing",
        RESEND,
        json={"rows": [{"amount": 1.0}]},
    ),
    Case(
        "columns",
        "required column null",
        422,
        "'order_id' is required (not nullable) but null",
        RESEND,
        json=_orders(order_id=None),
    ),
    Case("columns", "unknown column", 422, 'unknown column "colour"', "columns are", json=_orders(colour="red")),
    Case(
        "columns",
        "NUL in a column name",
        422,
        'unknown column "order_id\\u0000"',
        "columns are",
        json={"rows": [{"order_id\x00": 1, "order_id": 1}]},
    ),
    Case(
        "columns",
        "3000 columns",
        422,
        "unknown column",
        "columns are",
        json={"rows": [{f"k{i}": i for i in range(3_000)}]},
    ),
    Case(
        "columns",
        "bad row after 100 good ones",
        422,
        "row 100 of table 'orders'",
        RESEND,
        json={"rows": [ROW] * 100 + [{"order_id": "x"}]},
    ),
    # -- partition values that cannot name a directory -------------------------------------------------
    Case(
        "partition",
        "NUL in a partition value",
        422,
        "partition column 'country' holds a nul character",
        RESEND,
        json=_orders(country="D\x00E"),
        note="accepted, the row would fail every load of the table (Spark does not escape NUL)",
    ),
    Case(
        "partition",
        "300-byte partition value",
        422,
        "as a directory name",
        "shorten the value",
        json=_orders(country="x" * 300),
    ),
    Case(
        "partition",
        "90 slashes (escaped x3)",
        422,
        "as a directory name",
        "shorten the value",
        json=_orders(country="/" * 90),
    ),
    # -- size limits -------------------------------------------------------------------------------------
    Case(
        "limits",
        "one value over max_body_bytes (Content-Length)",
        413,
        "exceeds the limit",
        "split the update or use files",
        json=_orders(country="x" * (MAX_BODY_BYTES + 1)),
        note="no separate row or value limit: max_body_bytes bounds every value",
    ),
    Case(
        "limits",
        "body over the limit, chunked",
        413,
        "exceeds the limit",
        "split the update or use files",
        json=_orders(country="x" * (MAX_BODY_BYTES + 1)),
        chunked=True,
    ),
    Case(
        "limits",
        "NDJSON over the limit, chunked",
        413,
        "exceeds the limit",
        "split the update or use files",
        body=b'{"order_id": 1, "country": "DE"}\n' * (MAX_BODY_BYTES // 30),
        content_type=NDJSON,
        chunked=True,
    ),
    Case(
        "limits",
        "batch over the limit, chunked",
        413,
        "exceeds the limit",
        "split the update or use files",
        path=MULTI,
        json=_multi(*[GOOD_ORDERS] * 2000),
        chunked=True,
    ),
    Case(
        "limits",
        "15000 {} rows of a 64-column table",
        413,
        "bytes of memory",
        "send fewer rows per request",
        path=WIDE,
        json={"rows": [{}] * 15_000},
        note="60 KB of JSON would take 7.7 MB as columns (x128): capped at 4 x max_body_bytes",
    ),
    # -- NDJSON ----------------------------------------------------------------------------------------
    Case(
        "ndjson",
        "broken line 2",
        400,
        "ndjson line 2 is not valid json",
        SEND_JSON_HINT,
        body=b'{"order_id": 1}\n{oops\n',
        content_type=NDJSON,
    ),
    Case(
        "ndjson",
        "line that is not an object",
        422,
        "row 1 of table 'orders' is not a json object",
        RESEND,
        body=b'{"order_id": 1}\n[2]\n',
        content_type=NDJSON,
    ),
    Case(
        "ndjson",
        "NaN in a line",
        400,
        "ndjson line 1 is not valid json: nan",
        SEND_JSON_HINT,
        body=b'{"order_id": 1, "amount": NaN}\n',
        content_type=NDJSON,
    ),
    Case(
        "ndjson", "only blank lines", 422, "has no rows", "send at least one row", body=b"\n\r\n\n", content_type=NDJSON
    ),
    Case(
        "ndjson",
        "wrong type in a line",
        422,
        "column 'order_id': expected an integer",
        RESEND,
        body=b'{"order_id": "x"}\n',
        content_type=NDJSON,
    ),
    Case(
        "ndjson",
        "data_until not a time",
        422,
        "data_until",
        "such as 2026-01-31t12:00:00z",
        path=ORD + "?data_until=yesterday",
        body=b'{"order_id": 1}\n',
        content_type=NDJSON,
    ),
    # -- columnar bodies: Arrow IPC streams and Parquet files -------------------------------------------
    Case(
        "columnar",
        "truncated Arrow stream",
        400,
        "not a readable arrow ipc stream",
        "send the stream format",
        body=_truncated(_GOOD_ORDERS_IPC, -30),
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow stream cut inside its schema",
        400,
        "not a readable arrow ipc stream",
        "send the stream format",
        body=_truncated(_GOOD_ORDERS_IPC, 40),
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow file format as a stream",
        400,
        "arrow ipc file format",
        "send the stream format",
        body=_ipc_file,
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow stream of the wrong schema",
        422,
        "column 'order_id' is int32 in the arrow stream but int64 in table 'orders'",
        _FIX_COLUMNS,
        body=_ipc({"order_id": pa.array([1], pa.int32())}),
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow stream with a huge dictionary",
        422,
        "column 'country' is dictionary<values=string",
        "dictionary-encoded columns decoded",
        body=_ipc({"order_id": pa.array([1], pa.int64()), "country": _repeated(1, "x" * 50_000)}),
        content_type=ARROW,
        note="refused from the schema message: no column of a table is dictionary-encoded",
    ),
    Case(
        "columnar",
        "compressed Arrow stream bomb",
        413,
        "would take 8,000,000 bytes of memory decoded",
        "send fewer rows per request",
        body=_ipc({"order_id": pa.array([0] * 1_000_000, pa.int64())}, compression="zstd"),
        content_type=ARROW,
        note="the uncompressed lengths its buffers declare, read before pyarrow decompresses them",
    ),
    Case(
        "columnar",
        "Arrow null in a NOT NULL column",
        422,
        "row 1 of table 'orders': column 'order_id' is required (not nullable) but null",
        RESEND,
        body=_ipc({"order_id": pa.array([1, None], pa.int64())}),
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow timestamp past year 9999",
        422,
        "row 0: column 'at' holds 11476-08-15",
        RESEND,
        path=TYP,
        body=_ipc({"at": pa.array([300_000_000_000_000_000], pa.timestamp("us", "UTC"))}),
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow NUL in a partition value",
        422,
        "partition column 'country' holds a nul character",
        RESEND,
        body=_ipc({"order_id": pa.array([1], pa.int64()), "country": ["D\x00E"]}),
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "Arrow new field for an on_new_fields add table",
        422,
        "unknown column 'colour'",
        "send the rows with the new field as json",
        path=FEED,
        body=_ipc({"id": pa.array([1], pa.int64()), "colour": ["red"]}),
        content_type=ARROW,
        note="new columns are inferred from JSON rows only: an Arrow type is its writer's, not a declared one",
    ),
    Case(
        "columnar",
        "Arrow stream to the batch endpoint",
        415,
        "is not supported",
        "takes application/json",
        path=MULTI,
        body=_GOOD_ORDERS_IPC,
        content_type=ARROW,
    ),
    Case(
        "columnar",
        "truncated Parquet body",
        400,
        "not a readable parquet file",
        "send a whole parquet file",
        body=_truncated(_parquet(lambda: {"order_id": pa.array([1, 2], pa.int64())}), -12),
        content_type=PARQUET,
    ),
    Case(
        "columnar",
        "Parquet column of the wrong type",
        422,
        "column 'order_id' is string in the file but int64 in the table",
        "write it as",
        body=_parquet(lambda: {"order_id": pa.array(["1"])}),
        content_type="application/x-parquet",
    ),
    Case(
        "columnar",
        "Parquet body declaring 5 million rows",
        413,
        "(5,000,000 rows) would take",
        "send fewer rows per request",
        body=_parquet(lambda: {"order_id": pa.array([7] * 5_000_000, pa.int64())}),
        content_type=PARQUET,
        note="the footer's row count, before a page is decoded",
    ),
    Case(
        "columnar",
        "Parquet dictionary bomb",
        413,
        "would take",
        "send fewer rows per request",
        body=_parquet(lambda: {"order_id": pa.array(range(4000), pa.int64()), "country": _repeated(4000, "y" * 5000)}),
        content_type=PARQUET,
        note="a dictionary column is read as one and measured before it is decoded",
    ),
    # -- content types ----------------------------------------------------------------------------------
    Case(
        "content-type",
        "text/csv",
        415,
        "'text/csv' is not supported",
        "use application/json",
        body=b"order_id\n1\n",
        content_type="text/csv",
    ),
    Case(
        "content-type",
        "text/plain",
        415,
        "'text/plain' is not supported",
        "use application/json",
        json={"rows": [ROW]},
        content_type="text/plain",
    ),
    Case(
        "content-type",
        "form-urlencoded",
        415,
        "is not supported",
        "use application/json",
        body=b"order_id=1",
        content_type="application/x-www-form-urlencoded",
    ),
    Case(
        "content-type",
        "XML",
        415,
        "is not supported",
        "use application/json",
        body=b"<rows/>",
        content_type="application/xml",
    ),
    Case(
        "content-type",
        "NDJSON to the batch endpoint",
        415,
        "is not supported",
        "takes application/json",
        path=MULTI,
        body=b'{"table": "orders"}\n',
        content_type=NDJSON,
    ),
    # -- table names in the path -------------------------------------------------------------------------
    Case(
        "table",
        "unknown table",
        404,
        "table 'nope' does not exist",
        "post /v1/admin/tables",
        path="/v1/tables/nope/updates",
        json={"rows": [ROW]},
    ),
    Case(
        "table",
        "%2e%2e",
        404,
        'table ".." does not exist',
        "post /v1/admin/tables",
        path="/v1/tables/%2e%2e/updates",
        json={"rows": [ROW]},
    ),
    Case(
        "table",
        "%2e%2e%2fclicks",
        404,
        "no endpoint",
        "/docs",
        path="/v1/tables/%2e%2e%2fclicks/updates",
        json={"rows": [ROW]},
        note="the decoded path matches no route",
    ),
    Case(
        "table",
        "absolute path %2fetc%2fpasswd",
        404,
        "no endpoint",
        "/docs",
        path="/v1/tables/%2fetc%2fpasswd/updates",
        json={"rows": [ROW]},
    ),
    Case(
        "table",
        "NUL in the name",
        404,
        "does not exist",
        "post /v1/admin/tables",
        path="/v1/tables/orders%00/updates",
        json={"rows": [ROW]},
    ),
    Case(
        "table",
        "5000-character name",
        404,
        "does not exist",
        "post /v1/admin/tables",
        path="/v1/tables/" + "a" * 5000 + "/updates",
        json={"rows": [ROW]},
    ),
    Case(
        "table",
        "batch: ../orders",
        404,
        'table "../orders" does not exist',
        "post /v1/admin/tables",
        path=MULTI,
        json=_multi({"table": "../orders", "rows": [ROW]}),
    ),
    Case(
        "table",
        "batch: name not a string",
        422,
        'needs "table"',
        "the name of the table",
        path=MULTI,
        json=_multi({"table": ["orders"], "rows": [ROW]}),
    ),
    Case(
        "table",
        "batch: lone surrogate name",
        400,
        "surrogate",
        SEND_JSON_HINT,
        path=MULTI,
        body=b'{"updates": [{"table": "\\ud800", "rows": [{}]}]}',
    ),
    # -- files --------------------------------------------------------------------------------------------
    Case(
        "files",
        "../../etc/passwd",
        400,
        "outside the landing directory",
        "put feed files there first",
        json=_files("../../etc/passwd"),
    ),
    Case(
        "files",
        "../../outside/secret.parquet",
        400,
        "outside the landing directory",
        "put feed files there first",
        json=_files("../../outside/secret.parquet"),
    ),
    Case(
        "files",
        "sub/../../outside/secret.parquet",
        400,
        "outside the landing directory",
        "put feed files there first",
        json=_files("sub/../../outside/secret.parquet"),
    ),
    Case(
        "files",
        "absolute path outside",
        400,
        "outside the landing directory",
        "put feed files there first",
        json=lambda env: _files(str(env.outside / "secret.parquet")),
    ),
    Case(
        "files",
        "/etc/passwd",
        400,
        "outside the landing directory",
        "put feed files there first",
        json=_files("/etc/passwd"),
    ),
    Case(
        "files",
        "symlink to a file outside",
        400,
        "symbolic link",
        "put the file itself",
        json=_files("link_out.parquet"),
    ),
    Case(
        "files",
        "symlink to a file inside",
        400,
        "symbolic link",
        "put the file itself",
        json=_files("link_in.parquet"),
        note="links are never followed (no check-then-open race)",
    ),
    Case(
        "files",
        "through a symlink to a directory outside",
        400,
        "symbolic link",
        "put the file itself",
        json=_files("link_dir/secret.parquet"),
    ),
    Case(
        "files",
        "through a symlink to a directory inside",
        400,
        "symbolic link",
        "put the file itself",
        json=_files("linkdir_in/inner.parquet"),
    ),
    Case(
        "files",
        "symlink to a directory",
        400,
        "symbolic link",
        "put the file itself",
        json=_files({"path": "link_dir", "format": "parquet"}),
    ),
    Case(
        "files",
        "a directory",
        400,
        "is a directory, not a regular file",
        "name a regular file",
        json=_files({"path": "sub", "format": "parquet"}),
    ),
    Case(
        "files",
        "the landing directory itself",
        400,
        "names the landing directory itself",
        "name a regular file",
        json=_files({"path": ".", "format": "parquet"}),
    ),
    Case("files", "a FIFO", 400, "is a pipe, socket or device", "name a regular file", json=_files("fifo.parquet")),
    Case(
        "files",
        "nonexistent file",
        400,
        "does not exist in the landing directory",
        "put the file there first",
        json=_files("missing.parquet"),
    ),
    Case(
        "files",
        "not a Parquet file",
        422,
        "cannot be loaded into table 'orders' as parquet",
        "fix the file",
        json=_files("not_parquet.parquet"),
    ),
    Case(
        "files",
        "Parquet with a string id",
        422,
        "cannot be loaded into table 'orders' as parquet",
        "fix the file",
        json=_files("wrong_type.parquet"),
    ),
    Case(
        "files",
        "Parquet with an unknown column",
        422,
        "unknown column 'colour'",
        "fix the file",
        json=_files("unknown_column.parquet"),
    ),
    Case(
        "files",
        "Parquet with nulls in a required column",
        422,
        "'order_id' with null values",
        "fix the file",
        json=_files("null_id.parquet"),
    ),
    Case(
        "files",
        "Parquet with a NUL partition value",
        422,
        "holds a nul character",
        RESEND,
        json=_files("nul_partition.parquet"),
    ),
    Case(
        "files",
        "CSV with a bad number",
        422,
        "cannot be loaded into table 'orders' as csv",
        "fix the file",
        json=_files("bad.csv"),
    ),
    Case("files", "unknown extension", 400, "cannot tell the format", "name it .parquet", json=_files("notes.txt")),
    Case(
        "files",
        "unknown declared format",
        400,
        'file format "orc" is not one of',
        "parquet, csv, json",
        json=_files({"path": "good.parquet", "format": "orc"}),
    ),
    Case("files", "entry not a path", 400, 'each entry of "files"', 'is a path string or {"path"', json=_files(5)),
    Case(
        "files",
        "no files",
        422,
        "names no files",
        "name at least one",
        json=_files(),
        note="was 202, then every load of the table failed (an update with neither rows nor files)",
    ),
    Case(
        "files",
        "the same file twice",
        422,
        "named twice",
        "name each file once",
        json=_files("good.parquet", "good.parquet"),
    ),
    Case(
        "files",
        "the same file, two spellings",
        422,
        "named twice",
        "name each file once",
        json=lambda env: _files("good.parquet", str(env.landing / "good.parquet")),
    ),
    Case(
        "files",
        "a file and a hard link to it",
        422,
        "named twice",
        "name each file once",
        json=_files("good.parquet", "hardlink.parquet"),
    ),
    Case(
        "files",
        "good file then a bad one",
        422,
        "cannot be loaded",
        "fix the file",
        json=_files("good.parquet", "sub/inner.parquet", "wrong_type.parquet"),
    ),
    Case(
        "files",
        "NUL in the path",
        400,
        "holds a nul character",
        "name a file in the landing directory",
        json=_files("good.parquet\x00.csv"),
    ),
    Case("files", "5000-character path", 400, "too long", "name a file", json=_files("a" * 5000 + ".parquet")),
    Case(
        "files", "lone surrogate in the path", 400, "surrogate", SEND_JSON_HINT, body=b'{"files": ["\\udfff.parquet"]}'
    ),
    # -- Idempotency-Key --------------------------------------------------------------------------------
    Case(
        "idempotency",
        "same key, different body",
        409,
        "already used with a different request",
        "use a new key",
        json={"rows": [{"order_id": 71, "country": "DE"}]},
        headers={"Idempotency-Key": KEY},
        prepare=_post(ORD, FIRST, {"Idempotency-Key": KEY}),
    ),
    Case(
        "idempotency",
        "same key, same body (replay)",
        202,
        None,
        None,
        json=FIRST,
        headers={"Idempotency-Key": KEY},
        prepare=_post(ORD, FIRST, {"Idempotency-Key": KEY}),
        replayed=True,
        note="the first answer again, nothing appended",
    ),
    Case(
        "idempotency",
        "same key on the batch endpoint",
        409,
        "already used with a different request",
        "use a new key",
        path=MULTI,
        json=_multi({"table": "orders", **FIRST}),
        headers={"Idempotency-Key": KEY},
        prepare=_post(ORD, FIRST, {"Idempotency-Key": KEY}),
    ),
    Case(
        "idempotency",
        "201-character key",
        400,
        "idempotency-key is 201 characters long",
        "e.g. a uuid",
        json={"rows": [ROW]},
        headers={"Idempotency-Key": "k" * 201},
    ),
    Case(
        "idempotency",
        "non-ASCII key",
        400,
        "other than printable ascii",
        "e.g. a uuid",
        json={"rows": [ROW]},
        headers={"Idempotency-Key": "ключ-1".encode()},
    ),
    Case(
        "idempotency",
        "empty key",
        400,
        "idempotency-key is empty",
        "e.g. a uuid",
        json={"rows": [ROW]},
        headers={"Idempotency-Key": ""},
    ),
    # -- data_until ---------------------------------------------------------------------------------------
    Case(
        "data_until",
        "backwards (before an accepted update)",
        422,
        "is not after",
        "send a later data_until",
        json=lambda env: {"rows": [ROW], "data_until": env.memo["until"] - 60},
        prepare=_accept_until,
        note="422 like any other invalid value; documented in docs/service.md",
    ),
    Case(
        "data_until",
        "equal to an accepted update's",
        422,
        "is not after",
        "send a later data_until",
        json=lambda env: {"rows": [ROW], "data_until": env.memo["until"]},
        prepare=_accept_until,
    ),
    Case(
        "data_until",
        "one hour in the future",
        422,
        "in the future",
        "check the producer's clock",
        json=lambda env: {"rows": [ROW], "data_until": time.time() + 3600},
    ),
    Case(
        "data_until",
        "in the query and the body",
        422,
        "given both",
        "give it once",
        path=ORD + "?data_until=1",
        json=lambda env: {"rows": [ROW], "data_until": time.time()},
    ),
    Case(
        "data_until",
        "not a time",
        422,
        "data_until",
        "such as 2026-01-31t12:00:00z",
        json={"rows": [ROW], "data_until": "soon"},
    ),
    Case(
        "data_until",
        "true",
        422,
        "data_until: expected an iso-8601 timestamp or unix seconds, got true",
        "iso-8601",
        json={"rows": [ROW], "data_until": True},
    ),
    # -- the batch endpoint: one bad update refuses all --------------------------------------------------
    Case(
        "batch",
        "bad row among good updates",
        422,
        "row 0 of table 'clicks': column 'n'",
        RESEND,
        path=MULTI,
        json=_multi(GOOD_ORDERS, {"table": "clicks", "rows": [{"n": "x"}]}, GOOD_ORDERS),
    ),
    Case(
        "batch",
        "unknown table among good updates",
        404,
        "table 'nope' does not exist",
        "post /v1/admin/tables",
        path=MULTI,
        json=_multi(GOOD_ORDERS, {"table": "nope", "rows": [{}]}),
    ),
    Case(
        "batch",
        "table the token may not use",
        403,
        "may not submit to table 'clicks'",
        None,
        path=MULTI,
        json=_multi(GOOD_ORDERS, GOOD_CLICKS),
        token=ORDERS_ONLY,
    ),
    Case(
        "batch",
        "good file, then a bad file",
        422,
        "cannot be loaded",
        "fix the file",
        path=MULTI,
        json=_multi(
            {"table": "orders", "files": ["good.parquet"]},
            GOOD_CLICKS,
            {"table": "orders", "files": ["wrong_type.parquet"]},
        ),
    ),
    Case(
        "batch",
        "same file in two updates of a table",
        422,
        "named twice",
        "name each file once",
        path=MULTI,
        json=_multi({"table": "orders", "files": ["good.parquet"]}, {"table": "orders", "files": ["./good.parquet"]}),
    ),
    Case(
        "batch",
        "data_until going backwards inside the request",
        422,
        "is not after",
        "send a later data_until",
        path=MULTI,
        json=lambda env: _multi(
            {"table": "orders", "rows": [ROW], "data_until": time.time()},
            GOOD_CLICKS,
            {"table": "orders", "rows": [ROW], "data_until": time.time() - 30},
        ),
    ),
    Case(
        "batch",
        "future data_until in the last update",
        422,
        "in the future",
        "check the producer's clock",
        path=MULTI,
        json=lambda env: _multi(GOOD_ORDERS, {"table": "clicks", "rows": [{}], "data_until": time.time() + 3600}),
    ),
    Case(
        "batch",
        "an update that is not an object",
        422,
        "updates[1] must be a json object",
        '{"rows": [...]}',
        path=MULTI,
        json=_multi(GOOD_ORDERS, 5),
    ),
    Case(
        "batch", "no updates", 422, '"updates" is empty', "send at least one update", path=MULTI, json={"updates": []}
    ),
    Case(
        "batch",
        "updates not a list",
        422,
        "request body must be",
        '{"updates": [',
        path=MULTI,
        json={"updates": GOOD_ORDERS},
    ),
    Case(
        "batch",
        "extra top-level field",
        422,
        "request body must be",
        '{"updates": [',
        path=MULTI,
        json={"updates": [GOOD_ORDERS], "x": 1},
    ),
    Case(
        "batch",
        "NaN in the second update",
        400,
        "nan is not a json number",
        SEND_JSON_HINT,
        path=MULTI,
        body=b'{"updates": [{"table": "orders", "rows": [{"order_id": 1}]}, '
        b'{"table": "orders", "rows": [{"order_id": 2, "amount": NaN}]}]}',
    ),
    Case(
        "batch",
        "rows too large in memory",
        413,
        "bytes of memory",
        "send fewer rows per request",
        path=MULTI,
        json=_multi(GOOD_ORDERS, {"table": "wide", "rows": [{}] * 15_000}),
    ),
]


def case_ids() -> list[str]:
    ids = [case.id for case in CASES]
    assert len(set(ids)) == len(ids), "case names must be unique"
    return ids
