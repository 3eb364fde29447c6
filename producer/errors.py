"""What a producer raises, each saying what happened to the update and what to do."""

from __future__ import annotations

from typing import Any


class ProducerError(Exception):
    """Base of the producer's errors."""


class RequestRefused(ProducerError):
    """The service refused an update with a 4xx answer other than 429: it was not loaded, and
    sending it again unchanged would be refused again (bad rows, unknown table, no right to
    it). ``message`` is the service's own."""

    def __init__(self, status: int, body: Any, table: str, key: str) -> None:
        message = (body.get("message") or body.get("detail")) if isinstance(body, dict) else body
        super().__init__(f"HTTP {status} for table {table!r} (key {key}): {message}")
        self.status = status
        self.body = body
        self.message = str(message)
        self.table = table
        self.key = key


class DeliveryTimeout(ProducerError):
    """No acknowledgement within ``delivery_timeout``: the update may or may not have been
    loaded. ``key`` is the Idempotency-Key of the request that carried it (several updates
    share it when they went out together) and ``path`` and ``body`` that request: sending
    exactly it again under that key is safe; the rows under another key may load twice.
    A durable producer keeps trying (``retrying``): its journal holds the update until the
    service acknowledges it, and nothing is to be sent again."""

    def __init__(
        self, table: str, key: str, attempts: int, last: str, path: str = "", body: bytes = b"", retrying: bool = False
    ) -> None:
        what = (
            "still trying: the journal keeps it and it goes out until acknowledged"
            if retrying
            else f"it may or may not be loaded: resend the same request (path, body) under key {key} to be sure"
        )
        super().__init__(f"table {table!r}: not acknowledged after {attempts} attempt(s); last: {last}. {what}")
        self.table = table
        self.key = key
        self.attempts = attempts
        self.last = last
        self.path = path
        self.body = body
        self.retrying = retrying


class BufferFull(ProducerError):
    """``send`` waited ``max_block`` seconds for room in the producer's buffer (the service
    is slow to acknowledge or unreachable); nothing was buffered."""


class ProducerClosed(ProducerError):
    """``send`` after ``close`` (nothing was buffered), or a send ``close`` ended before the
    service acknowledged it: ``key`` is then the Idempotency-Key of the request that was in
    flight (it may have been loaded), None if it was never sent."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
