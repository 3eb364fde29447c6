"""What a producer raises, each saying what happened to the update and what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ProducerError(Exception):
    """Base of the producer's errors."""


class RequestRefused(ProducerError):
    """The service refused an update with a 4xx answer other than 429: it was not loaded, and
    sending it again unchanged would be refused again (bad rows, unknown table, no right to
    it). ``message`` is the service's own, with its row numbers turned into the send's when
    the update held that send's rows alone (``row``: the send's row index of the bad row;
    ``rows``: which of the send's rows the refused update held, first and end); ``body`` is
    the service's answer as it came. ``checkpoint``: the send's, to tell which input it was
    (also for a send an earlier run journaled, whose refusal only the log tells)."""

    def __init__(
        self,
        status: int,
        body: Any,
        table: str,
        key: str,
        *,
        message: str | None = None,
        row: int | None = None,
        rows: tuple[int, int] | None = None,
        checkpoint: str | None = None,
    ) -> None:
        if message is None:
            message = str((body.get("message") or body.get("detail")) if isinstance(body, dict) else body)
        super().__init__(f"HTTP {status} for table {table!r} (key {key}): {message}")
        self.status = status
        self.body = body
        self.message = message
        self.table = table
        self.key = key
        self.row = row
        self.rows = rows
        self.checkpoint = checkpoint


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


class ClosedWithPending(ProducerError, TimeoutError):
    """``close`` waited its ``timeout`` (leaving a durable producer's ``with`` block:
    ``close_timeout``) and updates were still not acknowledged. ``pending``: how many.
    ``journal``: for a durable producer, the directory that keeps them; the next start with
    the same ``producer_id`` and ``state_dir`` sends them before anything new of their
    tables, so there is nothing to send again. Without a journal their sends failed with
    ``ProducerClosed`` (they may or may not have been loaded)."""

    def __init__(self, pending: int, waited: float, journal: Path | None, producer_id: str | None) -> None:
        if journal is not None:
            same = f"producer_id {producer_id!r} and this state_dir" if producer_id else "this state_dir"
            what = (
                f"{pending} update(s) not acknowledged by the service after {waited:g} s remain journaled in "
                f"{journal}; the next start with {same} sends them first (nothing to send again)"
            )
        else:
            what = (
                f"{pending} update(s) not acknowledged by the service after {waited:g} s; their sends failed with "
                "ProducerClosed and may or may not have been loaded"
            )
        super().__init__(f"producer closed: {what}")
        self.pending = pending
        self.waited = waited
        self.journal = journal
