"""An in-memory stand-in for the service's two submit routes, for the producer's unit
tests: Idempotency-Keys (the first answer again for the same key and body, 409 for another
body), per-table sequences, all-or-none multi-table requests, and faults on demand."""

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

    def rows(self, table: str) -> list[dict[str, Any]]:
        return self.tables.get(table, [])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        key = request.headers.get("idempotency-key")
        self.seen.append((request.url.path, key, body))
        fault = self.fault(request)
        if isinstance(fault, tuple) and fault[0] == "status":
            headers = {"Retry-After": str(fault[2])} if fault[2] is not None else {}
            return httpx.Response(fault[1], json={"error": "fault", "message": "injected"}, headers=headers)
        digest = hashlib.sha256(request.url.path.encode() + body).hexdigest()
        if key is not None and key in self.answers:
            stored_digest, answer = self.answers[key]
            if stored_digest != digest:
                return httpx.Response(409, json={"error": "conflict", "message": "key reused for another request"})
            response = httpx.Response(202, json=answer, headers={"Idempotent-Replayed": "true"})
        else:
            parsed = json.loads(body)
            if request.url.path == "/v1/updates":
                updates = parsed["updates"]
            else:
                updates = [{**parsed, "table": request.url.path.split("/")[3]}]
            for update in updates:
                if any(row.get("bad") for row in update.get("rows", [])):
                    return httpx.Response(422, json={"error": "invalid", "message": f"a bad row in {update['table']}"})
            acks = []
            for update in updates:
                table = update["table"]
                self.sequences[table] = self.sequences.get(table, 0) + 1
                self.tables.setdefault(table, []).extend(
                    update.get("rows", []) or [{"file": f} for f in update["files"]]
                )
                acks.append({"table": table, "sequence": self.sequences[table], "release_time": 1.0})
            answer = {"updates": acks}
            if key is not None:
                self.answers[key] = (digest, answer)
            response = httpx.Response(202, json=answer)
        if fault == "drop":
            raise httpx.ReadError("the answer was lost")
        return response


def held(service: FakeService, release: asyncio.Event) -> httpx.MockTransport:
    """A transport to ``service`` that answers nothing until ``release`` is set: requests
    stay in flight, so the producer's buffer stays full."""

    async def handler(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return service(request)

    return httpx.MockTransport(handler)
