"""``LoaderProducer``: the asyncio producer on a thread of its own, for synchronous code.

``send`` blocks only while the buffer is full (up to ``max_block``) and returns a
``concurrent.futures.Future`` of the acknowledgement; batching, retries and the journal run
on the producer's thread (``aio.py``). Not to be called from that thread (a done-callback
of one of its futures): it would wait on itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from producer.aio import Ack, AsyncLoaderProducer, Prepared, ProducerMetrics, prepare
from producer.columns import columns_of
from producer.errors import BufferFull, ClosedWithPending, ProducerClosed
from producer.settings import ProducerSettings

T = TypeVar("T")


class LoaderProducer:
    """Sends rows to the loader service exactly once (docs/producers.md).

    ``with LoaderProducer(url=..., token=...) as producer:``, then
    ``producer.send("orders", rows).result()`` is the acknowledgement.
    """

    def __init__(
        self,
        settings: ProducerSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **overrides: Any,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        #: Bytes of sends handed over and not done yet (the buffer's room, counted here).
        self._reserved = 0
        self._room = threading.Condition()
        #: Taken to schedule work on the loop; after ``close`` began nothing more is.
        self._gate = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._loop.run_forever, name="loader-producer", daemon=True)
        self._thread.start()
        try:
            self._async = AsyncLoaderProducer(settings, transport=transport, **overrides)
            self._call(self._async.start())
        except BaseException:
            self._stop_loop()
            raise

    @property
    def settings(self) -> ProducerSettings:
        return self._async.settings

    @property
    def checkpoint(self) -> str | None:
        """The last ``send``'s checkpoint; after a restart of a durable producer, where to resume."""
        return self._async.checkpoint

    @property
    def prefix(self) -> str:
        """What this producer's Idempotency-Keys start with."""
        return self._async.prefix

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None, closing: bool = False) -> T:
        with self._gate:  # nothing is scheduled after close's own call: it would never run
            if self._loop.is_closed() or (self._closing and not closing):
                coroutine.close()
                raise ProducerClosed("this producer was closed; nothing was buffered")
            self._closing = self._closing or closing
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout)

    def send(
        self,
        table: str,
        rows: Iterable[dict[str, Any]] | Any | None = None,
        *,
        file: str | Path | None = None,
        data_until: float | None = None,
        key: str | None = None,
        checkpoint: str | None = None,
    ) -> concurrent.futures.Future[Ack]:
        """As ``AsyncLoaderProducer.send``; blocks while the buffer is full (``BufferFull`` after
        ``max_block``), returns once the rows are buffered (journaled, if durable).

        Rows are serialised on the caller's thread. A durable producer's send waits for its
        journal write on the producer's thread; otherwise the send is handed over without a
        round trip (sends of one thread keep their order), and the buffer's room is counted
        here, by the bytes of sends not yet done."""
        data = columns_of(rows) if rows is not None and file is None else None
        columns = self._call(self._async.columns_as(table, data.column_names)) if data is not None else None
        prepared = prepare(table, data if data is not None else rows, file, data_until, key, checkpoint, columns)
        if self._async.settings.state_dir is not None:
            inner = self._call(self._durable_send(prepared))
            durable: concurrent.futures.Future[Ack] = concurrent.futures.Future()
            self._loop.call_soon_threadsafe(self._link, inner, durable)
            return durable
        limit = self._async.settings.max_buffer_bytes
        with self._room:
            room = self._room.wait_for(
                lambda: self._reserved == 0 or self._reserved + prepared.size <= limit, self._async.settings.max_block
            )
            if not room:
                raise BufferFull(
                    f"no room for {prepared.size:,} bytes in the producer's buffer ({self._reserved:,} of {limit:,} "
                    f"bytes waiting for acknowledgement) after {self._async.settings.max_block:g} s: the service is "
                    "slow or unreachable; nothing was buffered"
                )
            self._reserved += prepared.size
        outer: concurrent.futures.Future[Ack] = concurrent.futures.Future()

        def hand_over() -> None:
            try:
                self._link(self._async.accept(prepared), outer)
            except BaseException as exc:  # closed meanwhile: this send fails, as it would have
                outer.set_exception(exc)

        outer.add_done_callback(lambda _: self._release(prepared.size))
        with self._gate:
            if self._closing:
                outer.set_exception(ProducerClosed("this producer was closed; nothing was buffered"))
                raise outer.exception()  # type: ignore[misc]
            self._loop.call_soon_threadsafe(hand_over)
        return outer

    async def _durable_send(self, prepared: Prepared) -> asyncio.Future[Ack]:
        return await self._async.accept_with_room(prepared)

    @staticmethod
    def _link(inner: asyncio.Future[Ack], outer: concurrent.futures.Future[Ack]) -> None:
        """Tell ``outer`` what ``inner`` (on the producer's loop) comes to."""

        def done(future: asyncio.Future[Ack]) -> None:
            if future.cancelled():
                outer.cancel()
            elif future.exception() is not None:
                outer.set_exception(future.exception())  # type: ignore[arg-type]
            else:
                outer.set_result(future.result())

        inner.add_done_callback(done)

    def _release(self, size: int) -> None:
        with self._room:
            self._reserved -= size
            self._room.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything sent is acknowledged or failed (TimeoutError after ``timeout``)."""
        self._call(self._async.flush(timeout))

    def metrics(self) -> ProducerMetrics:
        return self._async.metrics()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the producer's thread. After ``timeout`` seconds with updates still
        unacknowledged it stops anyway and raises ``ClosedWithPending``: a durable producer's
        journal keeps them for its next start; otherwise their futures fail with ``ProducerClosed``."""
        if not self._thread.is_alive():
            return
        try:
            self._call(self._async.close(timeout), closing=True)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> LoaderProducer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        """Close: a durable producer waits ``close_timeout`` at most (an unreachable service
        must not hold the block forever; its journal keeps the rest, and ``ClosedWithPending``
        says how much), a producer without a journal until every update is acknowledged or
        failed (what it closes on is lost). An exception already leaving the block stays the
        one raised, with the pending updates noted on it."""
        durable = self._async.settings.state_dir is not None
        try:
            self.close(self._async.settings.close_timeout if durable else None)
        except ClosedWithPending as pending:
            if error is None:
                raise
            error.add_note(str(pending))
