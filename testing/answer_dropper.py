"""An HTTP proxy in front of the service that loses some answers after the service committed
them: the request is forwarded and answered by the service, then the proxy holds the answer
longer than the producer waits (a timeout on the producer's side). For the producer's tests:
the retry must carry the same Idempotency-Key and be answered, not loaded twice."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn

from testing.server_process import free_port

HOP_BY_HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}


class AnswerDropper:
    """ASGI app: forwards to ``target``; every ``every``-th POST's answer is held ``hold`` seconds."""

    def __init__(self, target: str, every: int, hold: float) -> None:
        self.target, self.every, self.hold = target, every, hold
        self.posts = 0
        self.dropped = 0
        self.enabled = True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in HOP_BY_HOP]
        path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        async with httpx.AsyncClient(base_url=self.target, timeout=60) as client:
            try:
                answer = await client.request(scope["method"], path, headers=headers, content=body)
            except httpx.TransportError:
                await send({"type": "http.response.start", "status": 502, "headers": []})
                await send({"type": "http.response.body", "body": b"the service is unreachable"})
                return
        if scope["method"] == "POST" and self.enabled:
            self.posts += 1
            if self.posts % self.every == 0 and answer.status_code == 202:
                self.dropped += 1
                await asyncio.sleep(self.hold)  # the producer gave up on this answer long ago
        out = [(k.encode(), v.encode()) for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        await send({"type": "http.response.body", "body": answer.content})


@contextlib.contextmanager
def answer_dropper(target: str, every: int = 4, hold: float = 3.0) -> Iterator[tuple[str, AnswerDropper]]:
    """The proxy on a loopback port (its own thread and event loop): its URL and the app."""
    app = AnswerDropper(target, every, hold)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the proxy did not start")
        threading.Event().wait(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(30)
