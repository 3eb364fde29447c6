"""Parse and validate request bodies into update requests, before anything is accepted.

Bodies are parsed here rather than by FastAPI's model binding because the contract
needs 400 for malformed JSON (FastAPI answers 422), NDJSON bodies, and 422 messages
that name the first bad row and column. Validation is all-or-nothing: the caller gets
either every update of the request ready for the WAL, or an error and no side effect.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from loader.errors import BadRequest, Invalid, Unsupported
from loader.rows import _Bad, parse_timestamp

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl", "application/json-lines")


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """One update as the producer sent it (rows not yet checked against the schema)."""

    table: str
    rows: list[Any] | None
    files: list[Any] | None
    data_until: float | None


@dataclass(slots=True)
class ValidUpdate:
    """An update whose payload passed validation, waiting for its sequence number."""

    table: str
    data_until: float | None
    rows: pa.Table | None = None
    files: tuple[Any, ...] = ()


def _loads(text: bytes, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}; send UTF-8 JSON") from None


def _data_until(value: Any) -> float | None:
    if value is None:
        return None
    try:
        moment = parse_timestamp(value)
    except _Bad as exc:
        raise Invalid(f"data_until: {exc}") from None
    return moment.timestamp()


def _update_from_object(obj: Any, table: str | None, where: str) -> UpdateRequest:
    if not isinstance(obj, dict):
        raise Invalid(f"{where} must be a JSON object")
    allowed = {"rows", "files", "data_until"} | ({"table"} if table is None else set())
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise Invalid(f"{where} has unknown field {unknown[0]!r}; allowed fields are {sorted(allowed)}")
    if table is None:
        table = obj.get("table")
        if not isinstance(table, str):
            raise Invalid(f'{where} needs "table": the name of the table the update is for')
    has_rows, has_files = "rows" in obj, "files" in obj
    if has_rows == has_files:
        raise Invalid(f'{where} must hold exactly one of "rows" (a list of objects) or "files" (a list of paths)')
    payload = obj["rows"] if has_rows else obj["files"]
    if not isinstance(payload, list):
        raise Invalid(f'{where}: "{"rows" if has_rows else "files"}" must be a JSON list')
    return UpdateRequest(
        table=table,
        rows=payload if has_rows else None,
        files=payload if has_files else None,
        data_until=_data_until(obj.get("data_until")),
    )


def _media_type(content_type: str | None) -> str:
    return (content_type or "application/json").split(";")[0].strip().lower()


def parse_single(body: bytes, content_type: str | None, table: str, data_until_param: str | None) -> UpdateRequest:
    """Body of POST /v1/tables/{table}/updates: JSON object or NDJSON rows."""
    media = _media_type(content_type)
    if media in NDJSON_TYPES:
        rows = []
        for number, line in enumerate(body.splitlines(), start=1):
            if line.strip():
                rows.append(_loads(line, f"NDJSON line {number}"))
        until = _data_until(_maybe_number(data_until_param)) if data_until_param is not None else None
        return UpdateRequest(table=table, rows=rows, files=None, data_until=until)
    if media != "application/json":
        raise Unsupported(f"content type {media!r} is not supported; use application/json or application/x-ndjson")
    request = _update_from_object(_loads(body, "request body"), table, "request body")
    if data_until_param is not None:
        if request.data_until is not None:
            raise Invalid("data_until given both as a query parameter and in the body; give it once")
        request = UpdateRequest(table, request.rows, request.files, _data_until(_maybe_number(data_until_param)))
    return request


def parse_multi(body: bytes, content_type: str | None) -> list[UpdateRequest]:
    """Body of POST /v1/updates: {"updates": [{"table": ..., "rows"|"files": ...}, ...]}."""
    media = _media_type(content_type)
    if media != "application/json":
        raise Unsupported(f"content type {media!r} is not supported; POST /v1/updates takes application/json")
    obj = _loads(body, "request body")
    if not isinstance(obj, dict) or set(obj) != {"updates"} or not isinstance(obj["updates"], list):
        raise Invalid('request body must be {"updates": [ {"table": ..., "rows": [...]}, ... ]}')
    if not obj["updates"]:
        raise Invalid('"updates" is empty; send at least one update')
    return [_update_from_object(item, None, f"updates[{k}]") for k, item in enumerate(obj["updates"])]


def _maybe_number(value: str) -> Any:
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC).isoformat().replace("+00:00", "Z")
