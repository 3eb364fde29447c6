"""Multi-table jobs against a real local Spark: one Spark job writes several tables' batches,
each table then commits on its own with its own application transaction.

What matters: every table lands exactly once and reads back as its single-table load would
have loaded it; the unpartitioned tables share one Spark job; a table that fails fails
alone; a crash between two tables' commits loads nothing twice on the retry.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from loader.core.schema import TableSchema
from loader.core.updates import Batch, FileFormat, LoadResult
from loader.durability.transactions import app_id
from loader.intake.landing import read_landing_file
from loader.loading.sinks import make_sink
from loader.loading.sinks.delta_rs import STAGING_PREFIX, DeltaRsSink
from loader.loading.sinks.group_job import GroupMember, describe
from testing.tables import read_delta, read_duckdb
from tests.loader.loading.test_sinks import (
    ALL_TYPES,
    NESTED,
    NEW_TYPES,
    ORDERS,
    _new_type_rows,
    by_id,
    file_update,
    nested_rows,
    order_rows,
    rows_update,
)

pytestmark = pytest.mark.slow

EVENTS = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "kind", "type": "string", "nullable": False},
            {"name": "score", "type": "float32"},
        ]
    }
)
REGIONAL = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "region", "type": "string"},
        ],
        "partition_by": ["region"],
    }
)


def events(ids: range) -> pa.Table:
    return pa.table(
        {"id": list(ids), "kind": [f"k{i % 3}" for i in ids], "score": [i / 4 for i in ids]}, schema=EVENTS.arrow()
    )


@pytest.fixture
def sinks(spark, tmp_path: Path) -> tuple[DeltaRsSink, DeltaRsSink]:
    """Two warehouses: one loaded by group jobs, one by single-table loads (the oracle)."""
    grouped = make_sink("delta-rs", tmp_path / "grouped", spark)
    single = make_sink("delta-rs", tmp_path / "single", spark)
    assert isinstance(grouped, DeltaRsSink) and isinstance(single, DeltaRsSink)
    return grouped, single


def _batches(tmp_path: Path) -> tuple[list[Batch], list[TableSchema]]:
    rng = random.Random(7)
    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(order_rows(rng, range(100, 130)), landing / "orders.parquet")
    pq.write_table(nested_rows(range(9, 14)), landing / "nested.parquet")  # (of the table's nested types)
    (landing / "orders.csv").write_text("id,name,amount\n200,ada,1.5\n201,,\n", encoding="utf-8")
    (landing / "events.json").write_text('{"id": 9, "kind": "x"}\n{"id": 10, "kind": "y", "score": 2.5}\n')
    types_rows = pa.table(
        {
            "id": [1, 2],
            "s": ["a", None],
            "i32": [1, None],
            "i64": [2**40, None],
            "f32": [0.5, None],
            "f64": [1e300, None],
            "b": [True, None],
            "d": [None, None],
            "ts": [None, None],
        },
        schema=ALL_TYPES.arrow(),
    )
    batches = [
        Batch(
            "orders",
            (
                rows_update("orders", 1, order_rows(rng, range(0, 40))),
                file_update("orders", 2, landing / "orders.parquet", FileFormat.parquet),
                file_update("orders", 3, landing / "orders.csv", FileFormat.csv),
            ),
        ),
        Batch("events", (rows_update("events", 1, events(range(0, 5))), rows_update("events", 2, events(range(5, 9))))),
        Batch("events2", (file_update("events2", 4, landing / "events.json", FileFormat.json),)),
        Batch("types", (rows_update("types", 3, types_rows),)),
        Batch("new_types", (rows_update("new_types", 1, _new_type_rows(NEW_TYPES)),)),
        Batch(
            "nested",
            (
                rows_update("nested", 1, nested_rows(range(0, 5))),
                rows_update("nested", 2, nested_rows(range(5, 9))),
                file_update("nested", 3, landing / "nested.parquet", FileFormat.parquet),
            ),
        ),
        Batch("regional", (rows_update("regional", 1, pa.table({"id": [1, 2], "region": ["eu", None]})),)),
    ]
    schemas = [ORDERS, EVENTS, EVENTS, ALL_TYPES, NEW_TYPES, NESTED, REGIONAL]
    return batches, schemas


def test_tables_of_different_schemas_share_one_job_and_read_back_as_single_loads(
    spark, sinks: tuple[DeltaRsSink, DeltaRsSink], tmp_path: Path
) -> None:
    grouped, single = sinks
    batches, schemas = _batches(tmp_path)
    for sink in sinks:
        for batch, schema in zip(batches, schemas):
            sink.ensure_table(batch.table, schema)

    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("group-under-test", "group job")
    try:
        unpartitioned = [(b, s) for b, s in zip(batches, schemas) if not s.partition_by]
        outcomes = grouped.load_group([b for b, _ in unpartitioned], [s for _, s in unpartitioned])
        jobs = tracker.getJobIdsForGroup("group-under-test")
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    assert len(jobs) == 1, "the unpartitioned tables should be written by one Spark job"
    outcomes += grouped.load_group([batches[-1]], [schemas[-1]])  # partitioned: a job of its own

    assert all(isinstance(o, LoadResult) and not o.skipped for o in outcomes), outcomes
    # Each table's own part of the shared job is measured (the dispatcher splits the job by it).
    assert all(isinstance(o, LoadResult) and o.own_seconds is not None and o.own_seconds > 0 for o in outcomes)
    for batch, schema, outcome in zip(batches, schemas, outcomes):
        assert isinstance(outcome, LoadResult)
        expected = single.load(batch, schema)
        assert outcome.rows == expected.rows
        path, oracle = grouped.table_path(batch.table), single.table_path(batch.table)
        assert DeltaTable(str(path)).transaction_version(app_id(batch.table)) == batch.last_seq
        got, want = read_delta(path), read_delta(oracle)
        assert got.schema == want.schema
        assert by_id(got) == by_id(want)
        assert by_id(read_duckdb(path)) == by_id(read_duckdb(oracle))
        assert not list(path.glob(f"{STAGING_PREFIX}*"))
    # The landing files were read by intake's rules, as the Spark path reads them.
    landed = read_landing_file(Path(batches[0].files[1].path), FileFormat.csv, ORDERS.arrow())
    assert {r["id"] for r in read_delta(grouped.table_path("orders")).to_pylist()} >= set(landed["id"].to_pylist())
    # Statistics for data skipping come from the same footers, so they match too.
    stats = pa.table(DeltaTable(str(grouped.table_path("types"))).get_add_actions(flatten=True)).to_pylist()
    oracle_stats = pa.table(DeltaTable(str(single.table_path("types"))).get_add_actions(flatten=True)).to_pylist()
    keys = [k for k in stats[0] if k.startswith(("null_count.", "min.", "max.", "num_records"))]
    assert {k: stats[0][k] for k in keys} == {k: oracle_stats[0][k] for k in keys}


def test_a_table_that_fails_in_a_group_fails_alone(sinks: tuple[DeltaRsSink, DeltaRsSink], tmp_path: Path) -> None:
    grouped, _ = sinks
    for name in ("good", "bad", "worse"):
        grouped.ensure_table(name, EVENTS)
    nullable = pa.schema([f.with_nullable(True) for f in EVENTS.arrow()])
    null_kind = pa.table({"id": [1], "kind": [None], "score": [1.0]}, schema=nullable)
    # Intake refuses both; here they stand for a batch the job cannot load. The file fails
    # on an executor, the rows on the driver.
    (tmp_path / "bad.json").write_text('{"id": 1}\n', encoding="utf-8")
    outcomes = grouped.load_group(
        [
            Batch("bad", (file_update("bad", 1, tmp_path / "bad.json", FileFormat.json),)),
            Batch("good", (rows_update("good", 1, events(range(3))),)),
            Batch("worse", (rows_update("worse", 1, null_kind),)),
        ],
        [EVENTS, EVENTS, EVENTS],
    )
    assert isinstance(outcomes[1], LoadResult) and outcomes[1].rows == 3
    assert isinstance(outcomes[0], RuntimeError) and "loading bad in a group job failed" in str(outcomes[0])
    assert isinstance(outcomes[2], ValueError) and "'kind'" in str(outcomes[2])
    assert grouped.committed_seq("good") == 1
    for name in ("bad", "worse"):
        assert grouped.committed_seq(name) == 0
        path = grouped.table_path(name)
        assert not list(path.rglob("*.parquet")), "a failed table must leave no data files"
        assert read_delta(path).num_rows == 0


def test_a_retry_after_a_crash_between_two_commits_loads_nothing_twice(
    sinks: tuple[DeltaRsSink, DeltaRsSink],
) -> None:
    grouped, _ = sinks
    names = ["a", "b", "c"]
    for name in names:
        grouped.ensure_table(name, EVENTS)
    batches = [Batch(n, (rows_update(n, 1, events(range(10 * i, 10 * i + 4))),)) for i, n in enumerate(names)]
    # The first attempt committed "a" and died (the failpoint kills a server; here the job
    # for "a" alone stands for the part that landed).
    grouped.load_group(batches[:1], [EVENTS])
    retry = grouped.load_group(batches, [EVENTS] * 3)
    assert isinstance(retry[0], LoadResult) and retry[0].skipped
    assert all(isinstance(o, LoadResult) and not o.skipped for o in retry[1:])
    for i, name in enumerate(names):
        assert sorted(read_delta(grouped.table_path(name))["id"].to_pylist()) == list(range(10 * i, 10 * i + 4))


def test_descriptors_round_trip_through_json(tmp_path: Path) -> None:
    batch = Batch("events", (rows_update("events", 1, events(range(3))),))
    member = describe(batch, EVENTS, tmp_path / "staging")
    assert GroupMember.from_json(member.to_json()) == member
    assert pq.read_table(member.rows_file).num_rows == 3
