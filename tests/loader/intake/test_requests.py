"""Body parsing: 400 for malformed JSON, 415 for unknown media types, 422 for wrong shapes."""

from __future__ import annotations

import pytest

from loader.core.errors import BadRequest, Invalid, Unsupported
from loader.intake.requests import parse_multi, parse_single


def test_json_rows_and_data_until() -> None:
    req = parse_single(b'{"rows": [{"a": 1}], "data_until": "1970-01-01T00:01:00Z"}', "application/json", "t", None)
    assert req.rows == [{"a": 1}] and req.files is None and req.data_until == 60.0


def test_ndjson_rows_with_query_data_until() -> None:
    req = parse_single(b'{"a": 1}\n\n{"a": 2}\n', "application/x-ndjson; charset=utf-8", "t", "12.5")
    assert req.rows == [{"a": 1}, {"a": 2}] and req.data_until == 12.5


def test_files() -> None:
    req = parse_single(b'{"files": ["x.parquet", {"path": "y.csv", "format": "csv"}]}', None, "t", None)
    assert req.files == ["x.parquet", {"path": "y.csv", "format": "csv"}]


@pytest.mark.parametrize(
    "body,error,fragment",
    [
        (b"{", BadRequest, "not valid JSON"),
        (b"[]", Invalid, "JSON object"),
        (b'{"rows": [], "files": []}', Invalid, "exactly one"),
        (b"{}", Invalid, "exactly one"),
        (b'{"rows": {}}', Invalid, "must be a JSON list"),
        (b'{"rows": [], "extra": 1}', Invalid, "unknown field 'extra'"),
        (b'{"rows": [], "data_until": "soon"}', Invalid, "data_until"),
        (b'{"rows": [], "data_until": true}', Invalid, "data_until"),
    ],
)
def test_single_errors(body: bytes, error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        parse_single(body, "application/json", "t", None)


def test_bad_ndjson_line_is_named() -> None:
    with pytest.raises(BadRequest, match="NDJSON line 2"):
        parse_single(b'{"a": 1}\n{oops\n', "application/x-ndjson", "t", None)


def test_unsupported_media_type() -> None:
    with pytest.raises(Unsupported):
        parse_single(b"a,b", "text/csv", "t", None)
    with pytest.raises(Unsupported):
        parse_multi(b"{}", "application/x-ndjson")


def test_multi() -> None:
    reqs = parse_multi(
        b'{"updates": [{"table": "a", "rows": [{}]}, {"table": "b", "files": ["f.csv"]}]}', "application/json"
    )
    assert [r.table for r in reqs] == ["a", "b"]
    with pytest.raises(Invalid, match=r'updates\[0\] needs "table"'):
        parse_multi(b'{"updates": [{"rows": []}]}', "application/json")
    with pytest.raises(Invalid, match="empty"):
        parse_multi(b'{"updates": []}', "application/json")
