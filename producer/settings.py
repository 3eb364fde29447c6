"""A producer's settings and their defaults (docs/producers.md), after Kafka's producer where
the idea is the same: batching by size and linger time, a bounded buffer that blocks
``send``, a delivery timeout."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class ProducerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = "http://127.0.0.1:8000"
    #: A producer token of the service (``Authorization: Bearer``).
    token: str | None = None
    #: Names the producer in its Idempotency-Keys (``<producer_id>.<token>/<table>/<n>``). With
    #: ``state_dir`` the token is the journal's, kept across restarts with the sequences and
    #: the unacknowledged updates; without, each run draws its own.
    producer_id: str | None = None
    #: Where a durable producer journals what ``send`` accepted until the service acknowledged
    #: it: rows are fsynced there before ``send`` returns, and a restart delivers them with
    #: the keys they had. None: in memory only.
    state_dir: Path | None = None
    #: An update (one table's batch) closes at this many rows or bytes of JSON rows ...
    max_batch_rows: int = Field(default=10_000, ge=1)
    max_batch_bytes: int = Field(default=1 << 20, ge=1)
    #: ... or this many seconds after its first row (Kafka's linger.ms).
    linger: float = Field(default=0.05, ge=0.0, allow_inf_nan=False)
    #: Several tables' updates ready at once go out in one ``POST /v1/updates`` of up to this size.
    multi_table: bool = True
    max_request_bytes: int = Field(default=8 << 20, ge=1)
    #: Requests in flight at once (at most one per table: a table's updates stay in order).
    max_in_flight: int = Field(default=4, ge=1)
    #: Bytes of rows buffered until acknowledged; ``send`` blocks for room up to ``max_block``
    #: seconds, then raises BufferFull (Kafka's buffer.memory and max.block.ms).
    max_buffer_bytes: int = Field(default=32 << 20, ge=1)
    max_block: float = Field(default=60.0, ge=0.0, allow_inf_nan=False)
    #: One HTTP attempt's timeout, and an update's total time to be acknowledged (None: no limit).
    request_timeout: float = Field(default=30.0, gt=0.0, allow_inf_nan=False)
    delivery_timeout: float | None = Field(default=120.0, gt=0.0, allow_inf_nan=False)
    #: Retries back off exponentially from ``retry_backoff`` up to ``retry_backoff_max``
    #: seconds with full jitter; a Retry-After answer is waited at least.
    retry_backoff: float = Field(default=0.1, gt=0.0, allow_inf_nan=False)
    retry_backoff_max: float = Field(default=10.0, gt=0.0, allow_inf_nan=False)
    #: How long leaving a durable producer's ``with`` block waits for acknowledgements. A
    #: durable producer never gives an update up, so without a bound an unreachable service
    #: would hold the block forever; its journal keeps what is left for the next start, and
    #: ``ClosedWithPending`` says how much. None: wait until everything is acknowledged. (A
    #: producer without ``state_dir`` loses what it has not delivered when it closes, so its
    #: block waits until each update is acknowledged or failed: ``delivery_timeout`` bounds that.)
    close_timeout: float | None = Field(default=30.0, gt=0.0, allow_inf_nan=False)
    #: How a send of columns (a pyarrow Table or RecordBatch, a pandas DataFrame) goes: "auto" and
    #: "arrow", as Arrow IPC streams of the table's types (its own updates; "arrow" insists on
    #: pyarrow); "json", as JSON rows coalesced with other sends' rows. Rows given as dicts always go
    #: as JSON (docs/producers.md, "Columns").
    body_format: Literal["auto", "arrow", "json"] = "auto"
    #: Seeds the jitter (tests); None: random.
    seed: int | None = None

    @field_validator("body_format")
    @classmethod
    def _arrow_installed(cls, value: str) -> str:
        if value == "arrow" and importlib.util.find_spec("pyarrow") is None:
            raise ValueError('body_format "arrow" needs pyarrow (pip install pyarrow); "auto" sends JSON without it')
        return value

    @field_validator("producer_id")
    @classmethod
    def _valid_id(cls, value: str | None) -> str | None:
        if value is not None and not _ID.match(value):
            raise ValueError(
                "producer_id: 1 to 64 of letters, digits and _ . : - (it goes into Idempotency-Keys, "
                f"which are printable ASCII), got {value!r}"
            )
        return value
