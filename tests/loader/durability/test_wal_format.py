"""The WAL's row bodies: Arrow IPC streams, encoded from cached schema messages."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.durability.wal_format import _rows_to_ipc
from testing.depth import examples

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.float32()),
        pa.field("s", pa.string()),
        pa.field("d", pa.date32()),
        pa.field("t", pa.timestamp("us", tz="UTC")),
        pa.field("b", pa.bool_()),
    ]
)
ROW = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "v": st.none() | st.floats(width=32, allow_nan=False),
        "s": st.none() | st.text(max_size=20),
        "d": st.none() | st.dates(),
        "t": st.none() | st.datetimes(timezones=st.just(dt.UTC)),
        "b": st.none() | st.booleans(),
    }
)


def _stream_writer(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


@settings(max_examples=examples(25), deadline=None, derandomize=True)
@given(st.lists(ROW, max_size=8), st.integers(0, 8), st.integers(1, 3))
def test_row_bodies_are_byte_for_byte_what_the_ipc_stream_writer_writes(rows: list, cut: int, copies: int) -> None:
    """Replay reads them with ``pa.ipc.open_stream``, and old segments were written by the
    stream writer: the cheaper encoding must not change a byte, for slices and for tables of
    several batches too."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    for variant in (table, table.slice(min(cut, len(rows))), pa.concat_tables([table] * copies)):
        body = _rows_to_ipc(variant)
        assert body == _stream_writer(variant)
        assert pa.ipc.open_stream(body).read_all().equals(variant)
