"""Sends of columns (producer/columns.py): a pyarrow Table, a RecordBatch or a pandas DataFrame
goes as Arrow IPC of the table's types (read from the service once), in updates of its own
cut at max_batch_rows; as JSON rows with body_format "json"; a column that does not convert
exactly fails the send with nothing buffered; a refused update names the send's own row;
and a durable producer journals the streams, so a restart sends the very bytes again and
the service loads them once. The producer's map of the service's schema JSON is the
service's own Arrow schema (checked against loader/core/schema.py)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow as pa
import pytest

from loader.core.schema import TableSchema
from producer import AsyncLoaderProducer, LoaderProducer, ProducerError, ProducerSettings, RequestRefused
from producer.aio import prepare
from producer.columns import arrow_schema
from tests.producer.fake_service import ARROW, FakeService

UTC = dt.UTC
ORDERS = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "n", "type": "int32"},
        {"name": "at", "type": "timestamp"},
        {"name": "bad", "type": "boolean"},
    ]
}


class Sleeps:
    async def __call__(self, seconds: float) -> None:
        await asyncio.sleep(0)


def service() -> FakeService:
    return FakeService(schemas={"orders": ORDERS})


def producer(fake: FakeService, **settings: Any) -> AsyncLoaderProducer:
    return AsyncLoaderProducer(
        ProducerSettings(url="http://loader", seed=1, **settings), transport=httpx.MockTransport(fake), sleep=Sleeps()
    )


def frame(first: int, count: int) -> pd.DataFrame:
    """What a DataFrame holds: int64 everywhere, nanosecond times."""
    ids = list(range(first, first + count))
    return pd.DataFrame(
        {"id": ids, "n": [k % 7 for k in ids], "at": pd.to_datetime([1_770_000_000 + k for k in ids], unit="s")}
    )


def posts(fake: FakeService) -> list[tuple[str, str | None, bytes]]:
    return [seen for seen in fake.seen if seen[0].endswith("/updates")]


def test_the_service_schema_json_maps_to_the_services_own_arrow_schema() -> None:
    declared = TableSchema.model_validate(
        {
            "columns": [
                {"name": name, "type": kind}
                for name, kind in [
                    ("s", "string"), ("b", "binary"), ("i8", "int8"), ("i16", "short"), ("i32", "int32"),
                    ("i64", "long"), ("f32", "float"), ("f64", "float64"), ("ok", "boolean"), ("d", "date"),
                    ("t", "timestamp"), ("w", "timestamp_ntz"), ("m", "decimal(38,9)"),
                ]
            ]
            + [
                {
                    "name": "nested",
                    "type": {
                        "type": "array",
                        "elementType": {
                            "type": "struct",
                            "fields": [
                                {"name": "k", "type": "string", "nullable": False, "metadata": {}},
                                {
                                    "name": "v",
                                    "type": {
                                        "type": "map",
                                        "keyType": "long",
                                        "valueType": "decimal(5,2)",
                                        "valueContainsNull": False,
                                    },
                                    "nullable": True,
                                    "metadata": {},
                                },
                            ],
                        },
                        "containsNull": False,
                    },
                    "nullable": False,
                }
            ]
        }
    )
    assert arrow_schema(declared.model_dump(mode="json")) == declared.arrow()


@pytest.mark.parametrize("kind", ["table", "record-batch", "dataframe"])
def test_columns_go_as_arrow_of_the_tables_types(kind: str) -> None:
    fake = service()
    data = frame(0, 5)
    value: Any = {"dataframe": data, "table": pa.Table.from_pandas(data, preserve_index=False)}.get(kind)
    if kind == "record-batch":
        value = pa.RecordBatch.from_pandas(data, preserve_index=False)

    async def run() -> None:
        async with producer(fake, linger=10.0) as p:
            ack = await (await p.send("orders", value, data_until=1_770_000_100.5))
            assert ack.table == "orders" and ack.sequence == 1

    asyncio.run(run())
    ((path, key, body),) = posts(fake)
    assert path == "/v1/tables/orders/updates" and key is not None
    stream = pa.ipc.open_stream(pa.BufferReader(body)).read_all()
    assert stream.schema.field("n").type == pa.int32() and stream.schema.field("at").type == pa.timestamp("us", "UTC")
    assert [r["id"] for r in fake.rows("orders")] == [0, 1, 2, 3, 4]
    assert fake.rows("orders")[1]["at"] == dt.datetime.fromtimestamp(1_770_000_001, UTC)
    assert fake.until["orders"] == [1_770_000_100.5]
    assert [s for s in fake.seen if s[0] == "/v1/tables/orders"] == [("/v1/tables/orders", None, b"")]  # read once


def test_a_large_send_of_columns_fills_several_updates_and_a_refusal_names_its_own_row() -> None:
    fake = service()
    data = pa.Table.from_pandas(frame(0, 10), preserve_index=False)
    bad = data.append_column("bad", pa.array([False] * 7 + [True] + [False] * 2))

    async def run() -> None:
        async with producer(fake, max_batch_rows=4, linger=10.0) as p:
            await (await p.send("orders", data))
            refused = await p.send("orders", bad, checkpoint="file-2")
            with pytest.raises(RequestRefused) as caught:
                await refused
            assert caught.value.row == 7 and caught.value.rows == (4, 8), caught.value
            assert "row 7 of this send (checkpoint 'file-2') to table 'orders'" in caught.value.message
            await (await p.send("orders", data.slice(0, 1)))  # the table's types read again after a 422

    asyncio.run(run())
    assert len(posts(fake)) == 3 + 3 + 1  # 10 rows in updates of 4, each alone
    reads = [s for s in fake.seen if s[0] == "/v1/tables/orders"]
    assert len(reads) == 2  # the second send had the schema cached; the third read it again
    # The refused send's other updates landed (as a JSON send larger than an update's do): its
    # refusal says which of its rows to send again, 4 to 7.
    assert [r["id"] for r in fake.rows("orders")] == [*range(10), 0, 1, 2, 3, 8, 9, 0]


def test_body_format_json_sends_columns_as_json_rows_with_other_rows() -> None:
    fake = FakeService()
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "blob": pa.array([b"\x00\xff", None]),
            "price": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(5, 2)),
            "attrs": pa.array([[(1, "a")], []], pa.map_(pa.int64(), pa.string())),
            "tags": pa.array([[("x", 1)], None], pa.map_(pa.string(), pa.int64())),
        }
    )

    async def run() -> None:
        async with producer(fake, body_format="json", linger=10.0) as p:
            first = await p.send("t", [{"id": 0}])
            second = await p.send("t", data)
            await p.flush()
            await first, await second

    asyncio.run(run())
    ((_, _, body),) = posts(fake)  # coalesced with the dict rows: one JSON update
    assert body.startswith(b'{"rows":[')
    assert fake.rows("t") == [
        {"id": 0},
        {"id": 1, "blob": base64.b64encode(b"\x00\xff").decode(), "price": "1.50", "attrs": [{"key": 1, "value": "a"}],
         "tags": {"x": 1}},
        {"id": 2, "blob": None, "price": None, "attrs": [], "tags": None},
    ]
    assert not [s for s in fake.seen if s[0] == "/v1/tables/t"]  # JSON needs no schema


def test_columns_that_do_not_convert_exactly_fail_the_send_and_buffer_nothing() -> None:
    fake = service()

    async def run() -> None:
        async with producer(fake) as p:
            with pytest.raises(ValueError, match=r"column 'n' is int64 but int32 in table 'orders'"):
                await p.send("orders", pa.table({"id": pa.array([1]), "n": pa.array([2**40])}))
            nanos = pa.table({"id": pa.array([1]), "at": pa.array([1], pa.timestamp("ns", "UTC"))})
            with pytest.raises(ValueError, match=r"column 'at' .* does not convert exactly"):
                await p.send("orders", nanos)
            with pytest.raises(ProducerError, match=r"columns of table 'nope' could not be read .*HTTP 404"):
                await p.send("nope", pa.table({"id": [1]}))
            with pytest.raises(ValueError, match="no rows"):
                await p.send("orders", pa.table({"id": pa.array([], pa.int64())}))
            assert p.metrics().buffered_bytes == 0 and p.metrics().sends == 0

    asyncio.run(run())
    assert not posts(fake)


def test_a_durable_producer_journals_the_stream_and_sends_the_same_bytes_after_a_crash(tmp_path: Path) -> None:
    """The first run's answers are lost (the service loaded the update); the restarts send
    the journaled stream again under the same key, byte for byte (also from the journal the
    second run compacted): answered from the service's idempotency store, loaded once."""
    fake = service()
    fake.fault = lambda r: "drop" if r.method == "POST" else None
    state = tmp_path / "state"

    async def first_run() -> None:
        p = producer(fake, producer_id="cols", state_dir=state, max_batch_rows=3)
        future = await p.send("orders", frame(0, 5), data_until=1_770_000_000.0, checkpoint="part-1")
        with pytest.raises(TimeoutError):
            await p.close(timeout=0.3)
        with pytest.raises(Exception, match="journal"):
            await future

    asyncio.run(first_run())
    sent_first = {(key, body) for _, key, body in posts(fake)}
    assert [r["id"] for r in fake.rows("orders")] == [0, 1, 2]  # the first update landed, its answer lost

    async def crashed_again() -> None:  # takes over the journal, compacts it, loses every answer again
        p = producer(fake, producer_id="cols", state_dir=state)
        await p.start()
        assert p.metrics().recovered == 2
        with pytest.raises(TimeoutError):
            await p.close(timeout=0.3)

    asyncio.run(crashed_again())
    assert [r["id"] for r in fake.rows("orders")] == [0, 1, 2]  # answered from the idempotency store
    fake.fault = lambda r: None

    async def third_run() -> None:
        async with producer(fake, producer_id="cols", state_dir=state) as p:
            assert p.metrics().recovered == 2 and p.checkpoint == "part-1"
            await p.flush()
            assert p.metrics().replayed == 1

    asyncio.run(third_run())
    assert [r["id"] for r in fake.rows("orders")] == [0, 1, 2, 3, 4]
    assert sent_first <= {(key, body) for _, key, body in posts(fake)}  # the same keys with the same bytes
    assert fake.until["orders"] == [1_770_000_000.0, 1_770_000_000.0]


def test_the_synchronous_producer_sends_a_dataframe(tmp_path: Path) -> None:
    fake = service()
    with LoaderProducer(ProducerSettings(url="http://loader"), transport=httpx.MockTransport(fake)) as p:
        p.send("orders", frame(0, 3)).result(timeout=10)
    assert [r["id"] for r in fake.rows("orders")] == [0, 1, 2]
    assert all(seen[2].startswith(b"\xff\xff\xff\xff") for seen in posts(fake))  # an IPC stream


def test_prepare_keeps_rows_as_rows_and_refuses_other_pandas_objects() -> None:
    assert prepare("t", [{"id": 1}], None, None, None, None).texts == ['{"id":1}']
    with pytest.raises(TypeError, match="pandas DataFrame"):
        prepare("t", pd.Series([1]), None, None, None, None)
    assert ARROW == "application/vnd.apache.arrow.stream"
