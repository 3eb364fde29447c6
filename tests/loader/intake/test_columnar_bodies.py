"""Arrow IPC and Parquet request bodies: the same columns as the same rows sent as JSON, for
every column type (nested, decimal and binary included); refusals that name the column (and
the row), taken before a batch is read where the schema alone decides; and bombs refused
with 413 from what the body declares, before it is decoded."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loader.core.errors import BadRequest, Invalid, ServiceError, TooLarge
from loader.core.schema import TableSchema
from loader.intake.columnar_bodies import ARROW_STREAM, PARQUET, is_columnar, parse_columnar
from loader.intake.requests import expansion_limit
from loader.intake.rows import rows_to_arrow

UTC = dt.UTC
SCHEMA = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "small", "type": "int16"},
            {"name": "f32", "type": "float32"},
            {"name": "price", "type": "decimal(12,2)"},
            {"name": "blob", "type": "binary"},
            {"name": "day", "type": "date"},
            {"name": "at", "type": "timestamp"},
            {"name": "wall", "type": "timestamp_ntz"},
            {"name": "country", "type": "string"},
            {
                "name": "items",
                "type": {
                    "type": "array",
                    "elementType": {
                        "type": "struct",
                        "fields": [
                            {"name": "sku", "type": "string", "nullable": False, "metadata": {}},
                            {"name": "qty", "type": "int32", "nullable": True, "metadata": {}},
                        ],
                    },
                    "containsNull": False,
                },
            },
            {
                "name": "attrs",
                "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
            },
        ],
        "partition_by": ["country"],
    }
)
ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "small": -7,
        "f32": 1.5,
        "price": "12345.67",
        "blob": "AAEC/w==",
        "day": "2026-01-31",
        "at": "2026-01-31T12:00:00.123456Z",
        "wall": "2026-01-31T12:00:00",
        "country": "DE",
        "items": [{"sku": "a", "qty": 2}, {"sku": "b"}],
        "attrs": {"x": 1, "y": None},
    },
    {"id": 2, "items": [], "attrs": {}},
    {"id": 3, "day": "9999-12-31", "at": "0001-01-01T00:00:00Z", "country": "FR"},
]
#: The rows as JSON takes them: what every columnar body of them must give.
EXPECTED = rows_to_arrow(ROWS, SCHEMA, "t")
LIMIT = 1 << 20


def ipc(data: pa.Table, **options: Any) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema, options=pa.ipc.IpcWriteOptions(**options)) as writer:
        writer.write_table(data)
    return sink.getvalue().to_pybytes()


def parquet(data: pa.Table, **options: Any) -> bytes:
    out = io.BytesIO()
    pq.write_table(data, out, **options)
    return out.getvalue()


def parse(body: bytes, media: str = ARROW_STREAM, new_fields: str = "reject", limit: int = LIMIT, schema=SCHEMA):  # type: ignore[no-untyped-def]
    return parse_columnar(body, media, "t", None, schema, new_fields, limit)


def refusal(body: bytes, media: str = ARROW_STREAM, **kwargs: Any) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        parse(body, media, **kwargs)
    return caught.value


def _as_pyarrow_writes_it(data: pa.Table) -> pa.Table:
    """The columns as a producer's pyarrow builds them: every field nullable, a list's
    element called ``item``, columns in another order."""
    columns = {}
    for field in reversed(data.schema):
        values = data.column(field.name)
        if field.name == "items":
            element = pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int32())])
            values = pa.array(values.to_pylist(), pa.list_(element))
        columns[field.name] = values
    return pa.table(columns)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(lambda: ipc(EXPECTED), id="ipc"),
        pytest.param(lambda: ipc(_as_pyarrow_writes_it(EXPECTED)), id="ipc-nullable-fields-other-order"),
        pytest.param(lambda: ipc(EXPECTED, compression="zstd"), id="ipc-zstd"),
        pytest.param(lambda: ipc(EXPECTED, compression="lz4"), id="ipc-lz4"),
    ],
)
def test_an_arrow_stream_gives_the_columns_the_rows_give(body: Any) -> None:
    media = ARROW_STREAM + "; charset=binary"
    update = parse_columnar(body(), media, "t", "2026-01-31T00:00:00Z", SCHEMA, "reject", LIMIT)
    assert update.columns is not None and update.rows is None and update.files is None
    assert update.columns.schema == SCHEMA.arrow()
    assert update.columns.equals(EXPECTED)
    assert update.data_until == dt.datetime(2026, 1, 31, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("media", [PARQUET, "application/x-parquet"])
def test_a_parquet_body_gives_the_columns_the_rows_give(media: str) -> None:
    assert is_columnar(media)
    assert parse(parquet(EXPECTED), media).columns.equals(EXPECTED)
    # Converted exactly, as a landing file's columns are: int32 ids, large strings.
    written = EXPECTED.set_column(0, "id", EXPECTED.column("id").cast(pa.int32()))
    written = written.set_column(8, "country", written.column("country").cast(pa.large_string()))
    assert parse(parquet(written), media).columns.equals(EXPECTED)


def test_a_column_the_body_lacks_is_null_and_nan_is_taken_as_from_a_file() -> None:
    data = pa.table(
        {"id": pa.array([5], pa.int64()), "f32": pa.array([float("nan")], pa.float32()), "items": pa.nulls(1)}
    )
    columns = parse(ipc(data)).columns
    assert columns.column("id").to_pylist() == [5] and columns.column("day").to_pylist() == [None]
    assert columns.column("items").type == SCHEMA.arrow().field("items").type  # Arrow's null type: nulls only
    assert columns.column("f32")[0].as_py() != columns.column("f32")[0].as_py()  # NaN


@pytest.mark.parametrize(
    ("data", "fragment", "details"),
    [
        (
            pa.table({"id": pa.array([1], pa.int32())}),
            "column 'id' is int32 in the arrow stream but int64 in table 't'",
            {"column": "id"},
        ),
        (
            pa.table({"id": pa.array([1], pa.int64()), "country": pa.array(["DE"]).dictionary_encode()}),
            "column 'country' is dictionary<values=string",
            {"column": "country"},
        ),
        (
            pa.table({"id": pa.array([1], pa.int64()), "price": pa.array([1], pa.int64())}),
            "int64 in the arrow stream but decimal(12,2) (decimal128(12, 2))",
            {"column": "price"},
        ),
        (
            pa.table({"id": pa.array([1], pa.int64()), "items": pa.array([[{"sku": "a", "qty": 1}]])}),
            "items[].qty: int64 in the stream, int32 in the table",
            {"column": "items"},
        ),
        (pa.table({"small": pa.array([1], pa.int16())}), "lacks column 'id', which is required", {"column": "id"}),
        (
            pa.table({"id": pa.array([1, None], pa.int64())}),
            "row 1 of table 't': column 'id' is required (not nullable) but null",
            {"row": 1, "column": "id"},
        ),
        (
            pa.table(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "at": pa.array([0, 300_000_000_000_000_000], pa.timestamp("us", "UTC")),
                }
            ),
            "row 1: column 'at' holds 11476-08-15",
            {"row": 1, "column": "at"},
        ),
        (
            pa.table({"id": pa.array([1], pa.int64()), "price": pa.array([1], pa.decimal128(14, 2))}),
            "decimal128(14, 2) in the arrow stream",
            {"column": "price"},
        ),
        (
            pa.table(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "items": pa.array(
                        [[], [{"sku": "a", "qty": 1}, {"sku": None, "qty": 2}]],
                        pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int32())])),
                    ),
                }
            ),
            "row 1: column 'items': items[].sku: null, but the field is not nullable",
            {"row": 1, "column": "items"},
        ),
        (
            pa.table({"id": pa.array([1, 2], pa.int64()), "country": ["DE", "F\x00R"]}),
            "row 1 of table 't': partition column 'country' holds a nul character",
            {"row": 1, "column": "country"},
        ),
        (pa.table({"id": pa.array([], pa.int64())}), "has no rows", {}),
    ],
    ids=[
        "int32-for-int64",
        "dictionary",
        "integer-for-decimal",
        "nested-leaf",
        "missing-not-null",
        "null-in-not-null",
        "timestamp-past-9999",
        "decimal-of-another-precision",
        "nested-null",
        "nul-partition",
        "no-rows",
    ],
)
def test_refusals_name_the_column_and_row(data: pa.Table, fragment: str, details: dict[str, Any]) -> None:
    error = refusal(ipc(data))
    assert isinstance(error, Invalid) and error.status == 422
    assert fragment in error.message.lower() or fragment in error.message, error.message
    assert "has no rows" in fragment or "send the whole update again" in error.message
    for key, value in details.items():
        assert error.details.get(key) == value, error.details


def test_unknown_columns_by_on_new_fields() -> None:
    data = pa.table({"id": pa.array([1], pa.int64()), "colour": ["red"]})
    refused = refusal(ipc(data))
    assert "unknown column 'colour'" in refused.message and "drops others" in refused.message
    added = refusal(ipc(data), new_fields="add")
    assert 'on_new_fields = "add" adds new fields from json rows only' in added.message.lower()
    assert parse(ipc(data), new_fields="ignore").columns.column_names == SCHEMA.names  # dropped
    encoded = pa.table({"id": pa.array([1], pa.int64()), "colour": pa.array(["red"]).dictionary_encode()})
    dropped = refusal(ipc(encoded), new_fields="ignore")
    assert isinstance(dropped, Invalid) and "holds a dictionary-encoded column" in dropped.message
    nullable = TableSchema.model_validate({"columns": [{"name": "id", "type": "int64"}]})
    alien = refusal(ipc(pa.table({"colour": ["red"]})), new_fields="ignore", schema=nullable)
    assert "holds none of the columns" in alien.message


def test_the_schema_is_judged_before_any_batch_is_read() -> None:
    """A stream of the wrong types is a 422 even when its batches are garbage (never read)."""
    good = ipc(pa.table({"id": pa.array([1], pa.int32())}))
    schema_only = ipc(pa.table({"id": pa.array([], pa.int32())}))[:-8]  # the schema, less the end marker
    body = schema_only + b"\xff\xff\xff\xff\x10\x00\x00\x00" + b"\x00" * 64
    assert isinstance(refusal(body), Invalid) and isinstance(refusal(good), Invalid)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (lambda: ipc(EXPECTED)[:-40], "not a readable arrow ipc stream"),
        (lambda: ipc(EXPECTED)[:20], "not a readable arrow ipc stream"),
        (lambda: b"", "empty arrow ipc stream"),
        (lambda: b'{"rows": []}', "not a readable arrow ipc stream"),
        (lambda: _file_format(EXPECTED), "arrow ipc file format"),
    ],
    ids=["truncated-batch", "truncated-schema", "empty", "json", "file-format"],
)
def test_an_unreadable_stream_is_400(body: Any, fragment: str) -> None:
    error = refusal(body())
    assert isinstance(error, BadRequest) and fragment in error.message.lower(), error.message


def _file_format(data: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (lambda: parquet(EXPECTED)[:-12], "not a readable parquet file"),
        (lambda: b"PAR1" + b"\x00" * 40 + b"PAR1", "not a readable parquet file"),
        (lambda: ipc(EXPECTED), "not a readable parquet file"),
    ],
    ids=["truncated", "garbage", "an-arrow-stream"],
)
def test_an_unreadable_parquet_body_is_400(body: Any, fragment: str) -> None:
    error = refusal(body(), PARQUET)
    assert isinstance(error, BadRequest) and fragment in error.message.lower(), error.message


def test_a_parquet_column_of_a_refused_type_is_named_from_the_footer() -> None:
    error = refusal(parquet(pa.table({"id": pa.array(["1"])})), PARQUET)
    assert isinstance(error, Invalid) and error.details["column"] == "id"
    assert "column 'id' is string in the file but int64 in the table" in error.message


# -- bombs: what a small body declares it decodes to is bounded before it is decoded -----------------------
LIMIT_SMALL = 64 << 10  # (max_body_bytes) the service's limit on what it decodes: 4 x this


def test_a_compressed_stream_is_measured_by_what_its_buffers_declare() -> None:
    zeros = pa.table({"id": pa.array([0] * 1_000_000, pa.int64())})
    body = ipc(zeros, compression="zstd")
    assert len(body) < 4096
    error = refusal(body, limit=LIMIT_SMALL)
    assert isinstance(error, TooLarge) and "8,000,000 bytes" in error.message, error.message
    assert "send fewer rows per request" in error.message


def test_a_parquet_body_declaring_many_rows_is_refused_from_its_footer() -> None:
    body = parquet(pa.table({"id": pa.array([7] * 2_000_000, pa.int64())}), compression="zstd")
    assert len(body) < 64 << 10
    error = refusal(body, PARQUET, limit=LIMIT_SMALL)
    assert isinstance(error, TooLarge) and "2,000,000 rows" in error.message, error.message


def test_a_parquet_dictionary_is_measured_before_it_is_decoded() -> None:
    """10,000 rows of two columns pass the footer's check (120,000 bytes); one 5,000-byte
    string repeated in each decodes to 50 MB."""
    rows = 10_000
    schema = TableSchema.model_validate({"columns": [{"name": "id", "type": "int64"}, {"name": "s", "type": "string"}]})
    repeated = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["y" * 5000]))
    body = parquet(pa.table({"id": pa.array(range(rows), pa.int64()), "s": repeated}), compression="zstd")
    assert len(body) < 64 << 10
    error = refusal(body, PARQUET, limit=LIMIT_SMALL, schema=schema)
    assert isinstance(error, TooLarge) and "would take" in error.message, error.message
    assert expansion_limit(LIMIT_SMALL) == 4 * LIMIT_SMALL


LISTS = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": True}},
            {"name": "scores", "type": {"type": "array", "elementType": "long", "containsNull": True}},
        ]
    }
)


def test_a_dictionary_inside_a_nested_column_is_measured_before_it_is_decoded() -> None:
    rows = 4000
    repeated = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["y" * 5000]))
    tags = pa.ListArray.from_arrays(pa.array(range(rows + 1), pa.int32()), repeated)
    body = parquet(pa.table({"id": pa.array(range(rows), pa.int64()), "tags": tags}), compression="zstd")
    assert len(body) < 64 << 10
    error = refusal(body, PARQUET, limit=LIMIT_SMALL, schema=LISTS)
    assert isinstance(error, TooLarge) and "would take" in error.message, error.message


def test_a_list_of_millions_of_elements_is_refused_once_its_chunk_is_decoded() -> None:
    scores = pa.ListArray.from_arrays(pa.array([0, 2_000_000], pa.int32()), pa.array([0] * 2_000_000, pa.int64()))
    body = parquet(pa.table({"id": pa.array([1], pa.int64()), "scores": scores}), compression="zstd")
    assert len(body) < 64 << 10
    error = refusal(body, PARQUET, limit=LIMIT_SMALL, schema=LISTS)
    assert isinstance(error, TooLarge) and "would take 16,2" in error.message, error.message


def test_a_large_honest_parquet_body_is_measured_as_it_decodes_not_more() -> None:
    """50,000 rows in several chunks, dictionary-encoded text (and nested text) among them:
    taken with a limit a little above what they decode to."""
    rows = 50_000
    data = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "tags": pa.array([[f"tag-{k % 100}", f"other-{k % 7}"] for k in range(rows)], pa.list_(pa.string())),
            "scores": pa.array([[k, k + 1] for k in range(rows)], pa.list_(pa.int64())),
        }
    )
    body = parquet(data)
    decoded = data.nbytes
    taken = parse(body, PARQUET, limit=decoded // 4 + (decoded // 8), schema=LISTS).columns
    assert taken.num_rows == rows
    assert taken.column("tags").to_pylist()[:2] == [["tag-0", "other-0"], ["tag-1", "other-1"]]


#: Run in a child process: a body that made pyarrow abort (a C++ exception through a noexcept
#: call: ``RowGroupMetaData.column(i)`` of a chunk with malformed size statistics) would kill
#: the test process, not fail a test.
_MUTATIONS = """
import random, sys
from loader.core.errors import ServiceError
from loader.intake.columnar_bodies import parse_columnar
from tests.loader.intake.test_columnar_bodies import ARROW_STREAM, EXPECTED, PARQUET, SCHEMA, ipc, parquet

bodies = [
    (ARROW_STREAM, ipc(EXPECTED)), (ARROW_STREAM, ipc(EXPECTED, compression="zstd")),
    (PARQUET, parquet(EXPECTED)), (PARQUET, parquet(EXPECTED, compression="snappy")),
]
rng = random.Random(int(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    media, body = rng.choice(bodies)
    data = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.2:
        data = data[: rng.randrange(len(data))]
    try:
        parse_columnar(bytes(data), media, "t", None, SCHEMA, "reject", 1 << 20)
    except ServiceError as error:
        assert error.status in (400, 413, 422), error
print("survived")
"""


def test_mutated_bodies_are_refused_with_4xx_never_crash_the_process() -> None:
    """Random bytes changed in good Arrow and Parquet bodies (seed 1 once found the abort)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _MUTATIONS, "1", "1500"], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr[-2000:]
