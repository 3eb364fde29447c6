"""An in-memory stand-in for the service's two submit routes, for the producer's unit
tests: Idempotency-Keys (the first answer again for the same key and body, 409 for another
body), per-table sequences, all-or-none multi-table requests, and faults on demand. Bad
rows are refused as the service words it (loader/intake/rows.py: the first bad row of the
update, numbered from 0, in the message and as ``row``), and with a ``capacity`` a request
whose rows take more bytes is refused for good as ``BeyondCapacity`` is (413, with the
budget in the body)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class FakeService:
    #: Rows loaded per table, in load order.
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Every request seen: (path, key, body).
    seen: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    #: Decides a fault for a request before it is handled: None, ("status", code, retry_after),
    #: or "drop" (handled, then the answer is lost: a transport error).
    fault: Callable[[httpx.Request], Any] = lambda request: None
    answers: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)
    #: Bytes of rows (their JSON) a request may hold at most, as memory plus spill disk; None: no limit.
    capacity: int | None = None
    #: Tables' schemas as ``GET /v1/tables/{table}`` shows them (for sends of columns); others: 404.
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each update's data_until as it arrived, per table.
    until: dict[str, list[float | None]] = field(default_factory=dict)

    def rows(self, table: str) -> list[dict[str, Any]]:
        return self.tables.get(table, [])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            self.seen.append((request.url.path, None, b""))
            fault = self.fault(request)
            if isinstance(fault, tuple) and fault[0] == "status":
                return httpx.Response(fault[1], json={"error": "fault", "message": "injected"})
            table = request.url.path.rsplit("/", 1)[1]
            if table not in self.schemas:
                return httpx.Response(404, json={"error": "not_found", "message": f"table {table!r} does not exist"})
            return httpx.Response(200, json={"name": table, "schema": self.schemas[table]})
        body = request.read()
        key = request.headers.get("idempotency-key")
        self.seen.append((request.url.path, key, body))
        fault = self.fault(request)
        if isinstance(fault, tuple) and fault[0] == "status":
            headers = {"Retry-After": str(fault[2])} if fault[2] is not None else {}
            return httpx.Response(fault[1], json={"error": "fault", "message": "injected"}, headers=headers)
        digest = hashlib.sha256(str(request.url).encode() + body).hexdigest()
        if key is not None and key in self.answers:
            stored_digest, answer = self.answers[key]
            if stored_digest != digest:
                return httpx.Response(409, json={"error": "conflict", "message": "key reused for another request"})
            response = httpx.Response(202, json=answer, headers={"Idempotent-Replayed": "true"})
        else:
            if request.headers.get("content-type") == ARROW:  # as the service reads one: the columns' rows
                until = request.url.params.get("data_until")
                parsed = {"rows": _arrow_rows(body), "data_until": float(until) if until else None}
            else:
                parsed = json.loads(body)
            if request.url.path == "/v1/updates":
                updates = parsed["updates"]
            else:
                updates = [{**parsed, "table": request.url.path.split("/")[3]}]
            for update in updates:
                refusal = bad_row(update["table"], update.get("rows", []))
                if refusal is not None:
                    return httpx.Response(422, json=refusal)
            size = sum(len(json.dumps(row, default=str)) for update in updates for row in update.get("rows", []))
            if self.capacity is not None and size > self.capacity:
                memory = self.capacity // 4
                return httpx.Response(
                    413,
                    json={
                        "error": "payload_too_large",
                        "message": f"{size} bytes of rows in one request are more than memory ({memory} bytes) and "
                        f"the spill disk ({self.capacity - memory} bytes) hold at once: send these updates in "
                        "smaller requests",
                        "request_bytes": size,
                        "memory_budget_bytes": memory,
                        "disk_budget_bytes": self.capacity - memory,
                        "capacity_bytes": self.capacity,
                    },
                )
            acks = []
            for update in updates:
                table = update["table"]
                self.sequences[table] = self.sequences.get(table, 0) + 1
                self.tables.setdefault(table, []).extend(
                    update.get("rows", []) or [{"file": f} for f in update["files"]]
                )
                self.until.setdefault(table, []).append(update.get("data_until"))
                acks.append({"table": table, "sequence": self.sequences[table], "release_time": 1.0})
            answer = {"updates": acks}
            if key is not None:
                self.answers[key] = (digest, answer)
            response = httpx.Response(202, json=answer)
        if fault == "drop":
            raise httpx.ReadError("the answer was lost")
        return response


ARROW = "application/vnd.apache.arrow.stream"


def _arrow_rows(body: bytes) -> list[dict[str, Any]]:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.BufferReader(body)).read_all().to_pylist()


def bad_row(table: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The 422 body for the first bad row (``"bad": true``, or an ``id`` that is not an integer),
    in the service's words; None if every row is good."""
    for index, row in enumerate(rows):
        if row.get("bad"):
            problem, column = "expected false, got true", "bad"
        elif "id" in row and not isinstance(row["id"], int):
            problem, column = f"expected an integer, got {json.dumps(row['id'])}", "id"
        else:
            continue
        return {
            "error": "invalid",
            "message": f"row {index} of table {table!r}: column {column!r}: {problem}; nothing of the update was "
            "accepted: fix it and send the whole update again",
            "table": table,
            "row": index,
            "column": column,
        }
    return None


def held(service: FakeService, release: asyncio.Event) -> httpx.MockTransport:
    """A transport to ``service`` that answers nothing until ``release`` is set: requests
    stay in flight, so the producer's buffer stays full."""

    async def handler(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return service(request)

    return httpx.MockTransport(handler)
