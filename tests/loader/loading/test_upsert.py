"""Latest tables' loads (loader/loading/sinks/upsert.py) against a real local Spark and Delta.

What matters: one row per key holding its newest value, whichever reader looks (deltalake,
DuckDB over the log's files, Spark); an older ``order_by`` never overwrites a newer stored
value; superseded values are counted; a replayed batch changes nothing, and a batch that
changes nothing still records its transaction.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from loader.core.schema import TableSchema
from loader.core.tables import TableConfig
from loader.core.updates import Batch, FileFormat, FileRef, Update
from loader.durability.transactions import app_id
from loader.loading.failures import TableRefusesWrites
from loader.loading.sinks import make_sink
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.sinks.upsert import LatestFilesUnsupported
from testing.tables import loosened_schema, read_delta, read_duckdb, read_spark

COLUMNS = [
    {"name": "sym", "type": "string", "nullable": False},
    {"name": "venue", "type": "int32", "nullable": False},
    {"name": "px", "type": "float64"},
    {"name": "ts", "type": "int64", "nullable": False},
]


def latest(order_by: str | None, upsert: str = "merge") -> TableSchema:
    return TableConfig.model_validate(
        {
            "name": "quotes",
            "schema": {"columns": COLUMNS},
            "mode": "latest",
            "key": ["sym", "venue"],
            "order_by": order_by,
            "upsert": upsert,
        }
    ).schema_


@pytest.fixture(params=["merge", "deletion-vectors"])
def upsert(request: pytest.FixtureRequest) -> str:
    """Both upserts (loader/loading/sinks/upsert.py, upsert_dv.py) hold the same behaviours."""
    return str(request.param)


def update(schema: TableSchema, seq: int, rows: list[tuple[str, int, float | None, int]]) -> Update:
    data = pa.table({c.name: [r[i] for r in rows] for i, c in enumerate(schema.columns)}, schema=schema.arrow())
    return Update(table="quotes", seq=seq, release=float(seq), rows=data)


def stored(path: Path) -> list[dict[str, Any]]:
    return sorted(read_delta(path).to_pylist(), key=lambda r: (r["sym"], r["venue"]))


@pytest.fixture
def sink(spark, tmp_path: Path) -> DeltaRsSink:
    made = make_sink("delta-rs", tmp_path / "warehouse", spark)
    assert isinstance(made, DeltaRsSink)
    return made


def test_a_batch_upserts_the_newest_value_per_key_by_order_by(spark, sink: DeltaRsSink, upsert: str) -> None:
    schema = latest("ts", upsert)
    sink.ensure_table("quotes", schema)
    path = sink.table_path("quotes")
    first = Batch(
        "quotes",
        (
            update(schema, 1, [("ibm", 1, 10.0, 5), ("ibm", 1, 11.0, 7), ("msft", 1, 20.0, 1)]),
            update(schema, 2, [("ibm", 1, 9.0, 6), ("ibm", 2, 12.0, 1)]),  # ts 6 < 7: older, superseded
        ),
    )
    result = sink.load(first, schema)
    assert (result.rows, result.details["superseded_rows"]) == (3, 2)
    assert [(r["sym"], r["venue"], r["px"]) for r in stored(path)] == [
        ("ibm", 1, 11.0),
        ("ibm", 2, 12.0),
        ("msft", 1, 20.0),
    ]
    # The next batch: a newer ibm/1, an older msft/1 (the table's newer value stays), a new key.
    second = Batch("quotes", (update(schema, 3, [("ibm", 1, 13.0, 8), ("msft", 1, 19.0, 0), ("aapl", 1, 1.0, 1)]),))
    result = sink.load(second, schema)
    assert (result.details["rows_inserted"], result.details["rows_updated"], result.details["superseded_rows"]) == (
        1,
        1,
        1,
    )
    want = [("aapl", 1, 1.0), ("ibm", 1, 13.0), ("ibm", 2, 12.0), ("msft", 1, 20.0)]
    assert [(r["sym"], r["venue"], r["px"]) for r in stored(path)] == want
    # (Spark here has no Delta reader: it reads the Parquet files the log lists, so deletion
    # vectors, which Delta Spark applies, are DuckDB's and deltalake's to show)
    readers = [read_duckdb(path)] + ([read_spark(spark, path, schema)] if upsert == "merge" else [])
    for reader in readers:
        assert sorted((r["sym"], r["venue"], r["px"]) for r in reader.to_pylist()) == want
    assert DeltaTable(str(path)).transaction_version(app_id("quotes")) == 3


def test_without_order_by_the_value_that_arrived_last_wins(sink: DeltaRsSink, upsert: str) -> None:
    schema = latest(None, upsert)
    sink.ensure_table("quotes", schema)
    batch = Batch(
        "quotes",
        (
            update(schema, 4, [("ibm", 1, 1.0, 9), ("ibm", 1, 2.0, 1)]),  # later in the update wins
            update(schema, 5, [("msft", 1, 3.0, 0)]),
            update(schema, 6, [("msft", 1, 4.0, 0), ("ibm", 1, 5.0, 0)]),  # a later update wins
        ),
    )
    sink.load(batch, schema)
    sink.load(Batch("quotes", (update(schema, 7, [("msft", 1, 6.0, -5)]),)), schema)  # no order_by: newer load wins
    assert [(r["sym"], r["px"]) for r in stored(sink.table_path("quotes"))] == [("ibm", 5.0), ("msft", 6.0)]


def test_replays_change_nothing_and_a_no_op_batch_still_records_its_sequence(sink: DeltaRsSink, upsert: str) -> None:
    schema = latest("ts", upsert)
    sink.ensure_table("quotes", schema)
    path = sink.table_path("quotes")
    batch = Batch("quotes", (update(schema, 1, [("ibm", 1, 10.0, 5)]),))
    sink.load(batch, schema)
    assert sink.load(batch, schema).skipped  # a replay after a crash
    stale = Batch("quotes", (update(schema, 2, [("ibm", 1, 1.0, 4)]),))  # older than the stored value
    result = sink.load(stale, schema)
    assert not result.skipped and result.rows == 1 and result.details["superseded_rows"] == 1
    assert DeltaTable(str(path)).transaction_version(app_id("quotes")) == 2
    assert sink.load(stale, schema).skipped
    empty = Batch("quotes", (Update(table="quotes", seq=3, release=3.0),))  # data_until only
    sink.load(empty, schema)
    assert DeltaTable(str(path)).transaction_version(app_id("quotes")) == 3
    assert [(r["sym"], r["px"]) for r in stored(path)] == [("ibm", 10.0)]


def test_a_random_stream_of_batches_leaves_the_newest_value_of_every_key(sink: DeltaRsSink, upsert: str) -> None:
    schema = latest("ts", upsert)
    sink.ensure_table("quotes", schema)
    rng = random.Random(16)
    newest: dict[tuple[str, int], tuple[int, int, float]] = {}  # key -> (ts, arrival, px)
    seq = arrival = 0
    for _ in range(4):
        updates = []
        for _ in range(rng.randint(1, 3)):
            seq += 1
            rows = []
            for _ in range(rng.randint(0, 12)):
                arrival += 1
                key, ts, px = (rng.choice("abcde"), rng.randint(1, 2)), rng.randint(0, 5), round(rng.random(), 6)
                rows.append((key[0], key[1], px, ts))
                if key not in newest or (ts, arrival) >= newest[key][:2]:
                    newest[key] = (ts, arrival, px)
            updates.append(update(schema, seq, rows))
        sink.load(Batch("quotes", tuple(updates)), schema)
    got = {(r["sym"], r["venue"]): (r["ts"], r["px"]) for r in stored(sink.table_path("quotes"))}
    assert got == {k: (v[0], v[2]) for k, v in newest.items()}


def test_latest_tables_are_loaded_alone_in_a_group_and_refuse_landing_files(sink: DeltaRsSink, tmp_path: Path) -> None:
    schema = latest("ts")
    sink.ensure_table("quotes", schema)
    outcomes = sink.load_group([Batch("quotes", (update(schema, 1, [("ibm", 1, 1.0, 1)]),))], [schema])
    assert not isinstance(outcomes[0], BaseException) and outcomes[0].rows == 1
    landing = tmp_path / "f.json"
    landing.write_text('{"sym": "x", "venue": 1, "px": 1.0, "ts": 1}\n')
    files = Update(table="quotes", seq=2, release=2.0, files=(FileRef(str(landing), FileFormat.json, 40),))
    with pytest.raises(LatestFilesUnsupported, match="takes rows"):
        sink.load(Batch("quotes", (files,)), schema)


@pytest.mark.slow
def test_over_spark_connect_an_upsert_reads_back_as_in_process(spark, connect_spark, tmp_path: Path) -> None:
    schema = latest("ts")
    batches = [
        Batch(
            "quotes",
            (update(schema, 1, [("ibm", 1, 1.0, 3), ("ibm", 1, 2.0, 2)]), update(schema, 2, [("a", 1, 0.5, 1)])),
        ),
        Batch("quotes", (update(schema, 3, [("ibm", 1, 4.0, 3), ("a", 1, 0.1, 0)]),)),
    ]
    results = []
    for session, where in ((connect_spark, "connect"), (spark, "local")):
        sink = DeltaRsSink(tmp_path / where, session)
        sink.ensure_table("quotes", schema)
        results.append([sink.load(b, schema).details["superseded_rows"] for b in batches])
    assert results[0] == results[1] == [1.0, 1.0]
    assert stored(tmp_path / "connect" / "quotes") == stored(tmp_path / "local" / "quotes")


def test_a_latest_table_keyed_by_new_types_keeps_their_values_exact(sink: DeltaRsSink) -> None:
    """Key columns of the new flat types (int8, a decimal, binary), order_by a timestamp_ntz,
    values of every new type: the newest value per key, exact, in every reader."""
    schema = TableConfig.model_validate(
        {
            "name": "exact",
            "schema": {
                "columns": [
                    {"name": "k8", "type": "byte", "nullable": False},
                    {"name": "kd", "type": "decimal(38,10)", "nullable": False},
                    {"name": "kb", "type": "binary", "nullable": False},
                    {"name": "at", "type": "timestamp_ntz", "nullable": False},
                    {"name": "px", "type": "decimal(20,8)"},
                    {"name": "raw", "type": "binary"},
                    {"name": "n", "type": "short"},
                ]
            },
            "mode": "latest",
            "key": ["k8", "kd", "kb"],
            "order_by": "at",
        }
    ).schema_
    D = decimal.Decimal
    big = D("-" + "9" * 28 + "." + "9" * 10)
    t0 = dt.datetime(2024, 3, 10, 2, 30)

    def rows(*values: tuple) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(schema.names, v)) for v in values], schema=schema.arrow())

    sink.ensure_table("exact", schema)
    first = rows(
        (-128, big, b"\x00", t0, D("0.00000001"), b"a", 1),
        (-128, big, b"\x00", t0 + dt.timedelta(microseconds=1), D("999999999999.99999999"), b"b", 2),
        (127, D("0E-10"), b"", t0, None, None, None),
    )
    sink.load(Batch("exact", (Update(table="exact", seq=1, release=1.0, rows=first),)), schema)
    second = rows((-128, big, b"\x00", t0, D("1.00000000"), b"older", 3))  # older by order_by: ignored
    sink.load(Batch("exact", (Update(table="exact", seq=2, release=2.0, rows=second),)), schema)
    want = sorted(
        [
            (-128, big, b"\x00", t0 + dt.timedelta(microseconds=1), D("999999999999.99999999"), b"b", 2),
            (127, D("0E-10"), b"", t0, None, None, None),
        ]
    )
    path = sink.table_path("exact")
    assert sorted(tuple(r.values()) for r in read_delta(path).select(schema.names).to_pylist()) == want
    assert (
        sorted(tuple(r.values()) for r in read_spark(sink.spark, path, schema).select(schema.names).to_pylist()) == want
    )


def test_a_latest_table_of_nested_values_keeps_each_keys_newest_value(sink: DeltaRsSink) -> None:
    """Primitive key and order_by, nested values (a struct of an array and a map): the newest
    value per key, exactly as sent, in deltalake and Spark; a nested key is refused."""
    payload = {
        "type": "struct",
        "fields": [
            {
                "name": "tags",
                "type": {"type": "array", "elementType": "string", "containsNull": False},
                "nullable": True,
                "metadata": {},
            },
            {
                "name": "px",
                "type": {"type": "map", "keyType": "string", "valueType": "decimal(10,4)"},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    declared = {
        "name": "books",
        "schema": {
            "columns": [
                {"name": "sym", "type": "string", "nullable": False},
                {"name": "v", "type": "long", "nullable": False},
                {"name": "book", "type": payload},
            ]
        },
        "mode": "latest",
        "key": ["sym"],
        "order_by": "v",
    }
    schema = TableConfig.model_validate(declared).schema_
    with pytest.raises(ValueError, match="key columns \\['book'\\] are of nested types"):
        TableConfig.model_validate({**declared, "key": ["sym", "book"]})
    D = decimal.Decimal

    def rows(seq: int, *values: tuple) -> Update:
        data = pa.Table.from_pylist([dict(zip(schema.names, v)) for v in values], schema=schema.arrow())
        return Update(table="books", seq=seq, release=float(seq), rows=data)

    newest = {"tags": ["a", ""], "px": [("bid", D("1.2500")), ("ask", None)]}
    sink.ensure_table("books", schema)
    sink.load(Batch("books", (rows(1, ("x", 2, newest), ("x", 1, {"tags": None, "px": []}), ("y", 1, None)),)), schema)
    sink.load(
        Batch("books", (rows(2, ("x", 0, {"tags": ["old"], "px": None}), ("y", 3, {"tags": [], "px": None})),)), schema
    )
    want = [("x", 2, newest), ("y", 3, {"tags": [], "px": None})]
    path = sink.table_path("books")
    assert sorted(tuple(r.values()) for r in read_delta(path).select(schema.names).to_pylist()) == want
    spark_rows = read_spark(sink.spark, path, schema).select(schema.names).cast(loosened_schema(schema.arrow()))
    spark_rows = spark_rows.to_pylist()
    assert sorted(tuple(r.values()) for r in spark_rows) == want


def test_a_table_declared_for_deletion_vectors_later_gets_the_feature_and_honours_the_property(
    sink: DeltaRsSink,
) -> None:
    """A table created as upsert = "merge", then declared "deletion-vectors" (allowed while it
    holds nothing): its next load adds the feature and delta.enableDeletionVectors = true; a
    table whose property someone set to false refuses the upsert (the protocol's rule)."""
    schema = latest("ts")
    sink.ensure_table("quotes", schema)
    path = sink.table_path("quotes")
    vectors = latest("ts", "deletion-vectors")
    sink.load(Batch("quotes", (update(vectors, 1, [("ibm", 1, 1.0, 1), ("msft", 1, 2.0, 1)]),)), vectors)
    sink.load(Batch("quotes", (update(vectors, 2, [("ibm", 1, 3.0, 2)]),)), vectors)
    delta = DeltaTable(str(path))
    assert "deletionVectors" in (delta.protocol().writer_features or [])
    assert delta.metadata().configuration.get("delta.enableDeletionVectors") == "true"
    assert [(r["sym"], r["px"]) for r in stored(path)] == [("ibm", 3.0), ("msft", 2.0)]
    assert pa.table(delta.deletion_vectors()).num_rows == 1  # the first load's file, ibm's old row
    delta.alter.set_table_properties({"delta.enableDeletionVectors": "false"})
    with pytest.raises(TableRefusesWrites, match="enableDeletionVectors"):
        sink.load(Batch("quotes", (update(vectors, 3, [("ibm", 1, 4.0, 3)]),)), vectors)
    # a float key is refused at declaration: engines disagree on -0.0 and NaN
    with pytest.raises(ValueError, match="floating point"):
        TableConfig.model_validate(
            {
                "name": "q",
                "schema": {"columns": [{"name": "k", "type": "float64", "nullable": False}]},
                "mode": "latest",
                "key": ["k"],
                "upsert": "deletion-vectors",
            }
        )


@pytest.mark.parametrize("order_by", ["ts", None])
def test_the_newest_value_per_key_is_the_same_in_process_as_in_spark(spark, tmp_path: Path, order_by) -> None:
    """Step 1 runs in process for small batches of tables without row rules
    (upsert.newest_in_process): it keeps exactly the rows Spark's window keeps."""
    from loader.loading.sinks.upsert import ORDER_COLUMN, newest_in_process, newest_per_key

    schema = latest(order_by)
    rng = random.Random(11)
    for trial in range(6):
        n = rng.randint(1, 60)
        rows = pa.table(
            {
                "sym": [rng.choice("abc") for _ in range(n)],
                "venue": pa.array([rng.randint(1, 2) for _ in range(n)], pa.int32()),
                "px": [rng.choice([None, round(rng.random(), 3)]) for _ in range(n)],
                "ts": pa.array([rng.randint(0, 3) for _ in range(n)], pa.int64()),  # ties on purpose
                ORDER_COLUMN: pa.array(rng.sample(range(10 * n), n), pa.int64()),
            }
        )
        mine = newest_in_process(rows, schema).to_pylist()
        theirs = newest_per_key(spark, rows, schema, tmp_path / str(trial)).toArrow().to_pylist()
        key = lambda r: (r["sym"], r["venue"])  # noqa: E731
        assert sorted(mine, key=key) == sorted(theirs, key=key)
