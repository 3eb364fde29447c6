"""The WAL's row bodies: Arrow IPC streams, encoded from cached schema messages."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.durability.wal_format import rows_to_ipc
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
        body = rows_to_ipc(variant)
        assert body == _stream_writer(variant)
        assert pa.ipc.open_stream(body).read_all().equals(variant)


def test_nested_rows_round_trip_through_a_row_body() -> None:
    """Struct, array and map columns, each level with its own nullability, come back from a
    row body with their very types (the table's Arrow schema, loader/core/schema.py)."""
    from loader.core.schema import TableSchema

    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "id", "type": "long", "nullable": False},
                {
                    "name": "s",
                    "type": {
                        "type": "struct",
                        "fields": [
                            {"name": "a", "type": "decimal(38,10)", "nullable": False, "metadata": {}},
                            {
                                "name": "m",
                                "type": {
                                    "type": "map",
                                    "keyType": "string",
                                    "valueType": {
                                        "type": "array",
                                        "elementType": "timestamp_ntz",
                                        "containsNull": False,
                                    },
                                },
                                "nullable": True,
                                "metadata": {},
                            },
                        ],
                    },
                },
            ]
        }
    )
    rows = pa.Table.from_pylist(
        [
            {
                "id": 1,
                "s": {"a": decimal.Decimal("1.5"), "m": [("k", [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)])]},
            },
            {"id": 2, "s": None},
            {"id": 3, "s": {"a": decimal.Decimal("-0.0000000001"), "m": None}},
        ],
        schema=schema.arrow(),
    )
    body = rows_to_ipc(rows)
    back = pa.ipc.open_stream(body).read_all()
    assert back.schema == schema.arrow() and back.equals(rows)
