"""A producer client of the loader service that makes exactly-once the default
(docs/producers.md): rows are batched per table by size and linger time, every update has
an Idempotency-Key derived from the producer and its per-table sequence, and requests are
retried with the same key and body on transport errors, timeouts, 429 and 5xx (honouring
Retry-After) until acknowledged, never on other 4xx; a bounded buffer blocks ``send`` when
the service falls behind. ``state_dir`` makes a producer durable across its own restarts.

Depends on httpx and pydantic only (and pyarrow, when installed, for sends of columns:
producer/columns.py): nothing of the service is imported.
"""

from producer.aio import Ack, AsyncLoaderProducer, ProducerMetrics
from producer.errors import (
    BufferFull,
    ClosedWithPending,
    DeliveryTimeout,
    ProducerClosed,
    ProducerError,
    RequestRefused,
)
from producer.settings import ProducerSettings
from producer.sync import LoaderProducer

__all__ = [
    "Ack",
    "AsyncLoaderProducer",
    "BufferFull",
    "ClosedWithPending",
    "DeliveryTimeout",
    "LoaderProducer",
    "ProducerClosed",
    "ProducerError",
    "ProducerMetrics",
    "ProducerSettings",
    "RequestRefused",
]
