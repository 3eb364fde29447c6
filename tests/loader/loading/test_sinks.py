"""The Spark-backed Delta sinks against a real local Spark (one session for the module).

What matters to the loader: every acknowledged row lands exactly once with its types,
a replayed batch changes nothing, the table reads back the same from deltalake, DuckDB
and Spark, and a failed or interrupted load leaves no trace. Delta's JVM jars cannot be
fetched here, so the native path is checked only for its selection and its error.

DuckDB's ``delta`` extension is downloaded at first use (no network here, and no PyPI
build for DuckDB 2.0), so DuckDB reads the Parquet files the Delta log lists instead.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from loader.core.schema import TableSchema, parse_type
from loader.core.updates import Batch, FileFormat, FileRef, Update
from loader.durability.transactions import app_id
from loader.intake.landing import read_landing_file
from loader.loading.sinks import make_sink
from loader.loading.sinks.delta_rs import STAGING_PREFIX, DeltaRsSink
from loader.loading.sinks.delta_spark import DeltaSparkSink
from loader.loading.sinks.delta_table import DeltaTables
from loader.loading.sinks.frame import arrow_frame
from loader.loading.sinks.probe import DeltaJarsMissing
from loader.loading.spark import delta_jvm_available, use_pool
from testing.tables import loosened_schema, read_delta, read_duckdb, read_spark

# The session-scoped `spark` fixture (one JVM for the whole run).
pytestmark = pytest.mark.slow

UTC = dt.UTC

ORDERS = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "float64"},
            {"name": "day", "type": "date"},
            {"name": "at", "type": "timestamp"},
        ]
    }
)

ALL_TYPES = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "s", "type": "string"},
            {"name": "i32", "type": "int32"},
            {"name": "i64", "type": "int64"},
            {"name": "f32", "type": "float32"},
            {"name": "f64", "type": "float64"},
            {"name": "b", "type": "boolean"},
            {"name": "d", "type": "date"},
            {"name": "ts", "type": "timestamp"},
        ]
    }
)


# -- helpers --------------------------------------------------------------------------------
def order_rows(rng: random.Random, ids: range) -> pa.Table:
    base = dt.datetime(2024, 3, 1, tzinfo=UTC)
    return pa.table(
        {
            "id": list(ids),
            "name": [rng.choice(["ada", "bob", None, "chloé", ""]) for _ in ids],
            "amount": [None if rng.random() < 0.1 else round(rng.uniform(-1e6, 1e6), 3) for _ in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(400)) for _ in ids],
            "at": [base + dt.timedelta(microseconds=rng.randrange(10**12)) for _ in ids],
        },
        schema=ORDERS.arrow(),
    )


def rows_update(table: str, seq: int, rows: pa.Table) -> Update:
    return Update(table=table, seq=seq, release=float(seq), rows=rows)


def file_update(table: str, seq: int, path: Path, fmt: FileFormat) -> Update:
    return Update(
        table=table,
        seq=seq,
        release=float(seq),
        files=(FileRef(str(path), fmt, path.stat().st_size),),
    )


def by_id(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def log_versions(path: Path) -> list[int]:
    return sorted(int(p.stem) for p in (path / "_delta_log").glob("*.json"))


def add_actions(path: Path) -> list[dict[str, Any]]:
    return pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()


@pytest.fixture
def sink(spark, tmp_path: Path) -> DeltaRsSink:
    made = make_sink("delta-rs", tmp_path / "warehouse", spark)
    assert isinstance(made, DeltaRsSink)
    return made


# -- writer selection and session ---------------------------------------------------------
def test_auto_picks_delta_rs_without_jars_and_delta_spark_says_how_to_fix(spark, tmp_path: Path) -> None:
    if delta_jvm_available(spark):
        assert make_sink("auto", tmp_path, spark).name == "delta-spark"
        return
    assert make_sink("auto", tmp_path, spark).name == "delta-rs"
    with pytest.raises(DeltaJarsMissing) as err:
        make_sink("delta-spark", tmp_path, spark)
    assert "spark.jars.packages=io.delta:delta-spark_4.2_2.13:4.4.1" in str(err.value)
    assert "writer=delta-rs" in str(err.value)
    with pytest.raises(DeltaJarsMissing):
        DeltaSparkSink(tmp_path, spark)


def test_both_writers_produce_tables_that_read_back_identically(spark, tmp_path: Path) -> None:
    """The native path needs Delta's JVM jars, which this project's machines cannot download
    (no Maven access): the test runs where they are present (LOADER_TEST_SPARK_CONF, or the
    Docker image, whose Spark has them) and is skipped, saying so, everywhere else."""
    if not delta_jvm_available(spark):
        pytest.skip("Delta JVM jars are not on Spark's classpath (no Maven access here)")
    schema = TableSchema.model_validate(
        {
            "columns": [*ORDERS.model_dump()["columns"], {"name": "country", "type": "string"}],
            "partition_by": ["country"],
        }
    )
    rng = random.Random(5)
    rows = order_rows(rng, range(300))
    rows = rows.append_column("country", pa.array([rng.choice(["DE", "FR", None]) for _ in range(300)]))
    batch = Batch("t", (rows_update("t", 1, rows.slice(0, 100)), rows_update("t", 3, rows.slice(100))))
    native = DeltaSparkSink(tmp_path / "native", spark)
    embedded = DeltaRsSink(tmp_path / "embedded", spark)
    for sink in (native, embedded):
        sink.ensure_table("t", schema)
        assert sink.load(batch, schema).rows == 300
        assert sink.load(batch, schema).skipped  # the replay is refused by either path
        assert sink.committed_seq("t") == 3
    a, b = native.table_path("t"), embedded.table_path("t")
    assert DeltaTable(str(a)).schema().to_json() == DeltaTable(str(b)).schema().to_json()
    assert DeltaTable(str(a)).metadata().partition_columns == DeltaTable(str(b)).metadata().partition_columns
    expected = by_id(rows)
    for path in (a, b):
        assert by_id(read_delta(path)) == expected
        assert by_id(read_duckdb(path)) == expected
        assert by_id(spark.read.format("delta").load(str(path)).toArrow()) == expected


def test_session_runs_fair_pools_per_worker(spark) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.scheduler.mode") == "FAIR"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    scheduler = spark.sparkContext._jsc.sc()
    assert scheduler.getPoolForName("worker-0").isDefined()
    assert scheduler.getPoolForName("worker-1").isDefined()
    assert not scheduler.getPoolForName("worker-2").isDefined()
    use_pool(spark, "worker-1")
    try:
        assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") == "worker-1"
    finally:
        use_pool(spark, None)


# -- loading ----------------------------------------------------------------------------------
def test_rows_batch_lands_exactly_once_with_its_transaction(sink: DeltaRsSink) -> None:
    rng = random.Random(7)
    sink.ensure_table("orders", ORDERS)
    parts = [
        order_rows(rng, range(0, 120)),
        order_rows(rng, range(120, 150)),
        order_rows(rng, range(150, 400)),
    ]
    batch = Batch(
        "orders",
        tuple(rows_update("orders", seq, rows) for seq, rows in zip((1, 2, 5), parts, strict=True)),
    )

    result = sink.load(batch, ORDERS)

    expected = by_id(pa.concat_tables(parts))
    path = sink.table_path("orders")
    assert (result.rows, result.skipped, result.delta_version) == (400, False, 1)
    assert result.files_written == len(DeltaTable(str(path)).file_uris()) >= 1
    assert result.bytes_written == sum(a["size_bytes"] for a in add_actions(path))
    assert {"spark_seconds", "commit_seconds"} <= set(result.details)
    assert by_id(read_delta(path)) == expected
    assert by_id(read_duckdb(path)) == expected
    assert DeltaTable(str(path)).transaction_version(app_id("orders")) == 5 == sink.committed_seq("orders")
    assert sum(a["num_records"] for a in add_actions(path)) == 400


def test_batch_mixing_rows_parquet_csv_and_json_lands_as_intake_read_it(sink: DeltaRsSink, tmp_path: Path) -> None:
    rng = random.Random(11)
    sink.ensure_table("orders", ORDERS)
    landing = tmp_path / "landing"
    landing.mkdir()
    rows = order_rows(rng, range(0, 50))
    # pandas' default Parquet: nanosecond timestamps, int32 ids, columns in another order.
    from_pandas = order_rows(rng, range(50, 80))
    nanos = from_pandas.set_column(4, "at", from_pandas.column("at").cast(pa.timestamp("ns", tz="UTC")))
    pq.write_table(
        nanos.select(["at", "amount", "name", "day", "id"]).set_column(4, "id", nanos["id"].cast(pa.int32())),
        landing / "feed.parquet",
    )
    # CSV: header order differs, one column missing, one unknown, empties and NULL markers.
    (landing / "feed [2].csv").write_text(
        "name,extra,id,at,amount\n"
        "ada,x,80,2024-05-01T10:00:00.000001Z,1.5\n"
        ",y,81,2024-05-01T10:00:00Z,\n"
        '"",z,82,,NULL\n'
        "NULL,,83,2024-05-01 12:00:00+02:00,NaN\n",
        encoding="utf-8",
    )
    (landing / "feed.json").write_text(
        '{"id": 90, "name": "jo", "amount": 2.25, "at": "2000-01-01T00:00:00.5Z"}\n{"id": 91}\n',
        encoding="utf-8",
    )
    batch = Batch(
        "orders",
        (
            rows_update("orders", 1, rows),
            file_update("orders", 2, landing / "feed.parquet", FileFormat.parquet),
            file_update("orders", 3, landing / "feed [2].csv", FileFormat.csv),
            file_update("orders", 4, landing / "feed.json", FileFormat.json),
        ),
    )

    result = sink.load(batch, ORDERS)

    oracle = [rows] + [read_landing_file(Path(f.path), f.format, ORDERS.arrow()) for f in batch.files]
    expected = by_id(pa.concat_tables(oracle))
    assert result.rows == len(expected) == 50 + 30 + 4 + 2
    assert by_id(read_delta(sink.table_path("orders"))) == expected
    csv_rows = {r["id"]: r for r in expected if 80 <= r["id"] < 90}
    assert csv_rows[81]["name"] == "" and csv_rows[82]["name"] == "" and csv_rows[83]["name"] == "NULL"
    assert csv_rows[83]["amount"] is None and csv_rows[83]["at"] == dt.datetime(2024, 5, 1, 10, tzinfo=UTC)


def test_partitioned_table_has_right_partition_values_and_reads_back(spark, sink: DeltaRsSink) -> None:
    schema = TableSchema.model_validate(
        {
            "columns": [
                {"name": "id", "type": "int64", "nullable": False},
                {"name": "country", "type": "string"},
                {"name": "day", "type": "date"},
                {"name": "v", "type": "float64"},
            ],
            "partition_by": ["country", "day"],
        }
    )
    sink.ensure_table("sales", schema)
    rng = random.Random(3)
    countries = ["fr", "a b:c%d/e=f", "é", None]
    days = [dt.date(2024, 1, 1), dt.date(1900, 2, 28), None]
    n = 90
    rows = pa.table(
        {
            "id": list(range(n)),
            "country": [countries[i % 4] for i in range(n)],
            "day": [days[i % 3] for i in range(n)],
            "v": [rng.random() for _ in range(n)],
        },
        schema=schema.arrow(),
    )

    result = sink.load(Batch("sales", (rows_update("sales", 1, rows),)), schema)

    path = sink.table_path("sales")
    assert result.rows == n and result.files_written == 12
    actions = add_actions(path)
    assert sorted((str(a["partition.country"]), str(a["partition.day"])) for a in actions) == sorted(
        (str(c), str(d)) for c in countries for d in days
    )
    for action in actions:  # each file holds exactly its partition's rows
        expected_rows = sum(
            1
            for i in range(n)
            if countries[i % 4] == action["partition.country"] and days[i % 3] == action["partition.day"]
        )
        assert action["num_records"] == expected_rows
    expected = by_id(rows)
    assert by_id(read_delta(path)) == expected
    assert by_id(read_spark(spark, path, schema)) == expected
    assert by_id(read_duckdb(path)) == expected


def test_replayed_batch_is_skipped_and_a_later_batch_commits(sink: DeltaRsSink) -> None:
    rng = random.Random(5)
    sink.ensure_table("orders", ORDERS)
    first = Batch(
        "orders",
        (
            rows_update("orders", 1, order_rows(rng, range(0, 10))),
            rows_update("orders", 2, order_rows(rng, range(10, 20))),
        ),
    )
    path = sink.table_path("orders")

    assert sink.load(first, ORDERS).delta_version == 1
    versions = log_versions(path)
    replay = sink.load(first, ORDERS)
    assert replay.skipped and replay.rows == 0 and replay.delta_version is None
    assert log_versions(path) == versions
    assert read_delta(path).num_rows == 20

    later = Batch("orders", (rows_update("orders", 3, order_rows(rng, range(20, 25))),))
    result = sink.load(later, ORDERS)
    assert (result.skipped, result.rows, result.delta_version) == (False, 5, 2)
    assert sink.committed_seq("orders") == 3 == DeltaTable(str(path)).transaction_version(app_id("orders"))
    assert read_delta(path).num_rows == 25
    assert sorted(r["id"] for r in read_delta(path).to_pylist()) == list(range(25))
    # A batch ending at or below the committed sequence is a replay too.
    assert sink.load(Batch("orders", (rows_update("orders", 2, order_rows(rng, range(99, 100))),)), ORDERS).skipped


def test_all_column_types_round_trip_with_statistics(sink: DeltaRsSink) -> None:
    sink.ensure_table("types", ALL_TYPES)
    rows = pa.table(
        {
            "id": [1, 2, 3, 4],
            "s": ["plain", None, "b ✓ ünïcode", "x" * 40],
            "i32": [-(2**31), None, 2**31 - 1, 0],
            "i64": [-(2**63), 2**63 - 1, None, 0],
            "f32": [1.5, None, -0.25, 3.0e38],
            "f64": [math.pi, -1e308, None, 0.0],
            "b": [True, False, None, True],
            "d": [dt.date(1, 1, 1), dt.date(1582, 10, 4), dt.date(9999, 12, 31), None],
            "ts": [
                dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                dt.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=UTC),
                None,
                dt.datetime(1500, 1, 1, tzinfo=UTC),
            ],
        },
        schema=ALL_TYPES.arrow(),
    )

    sink.load(Batch("types", (rows_update("types", 1, rows),)), ALL_TYPES)

    path = sink.table_path("types")
    back = read_delta(path)
    assert back.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert [back.schema.field(n).type for n in ALL_TYPES.names] == [f.type for f in ALL_TYPES.arrow()]
    assert by_id(back) == by_id(rows)
    assert by_id(read_duckdb(path)) == by_id(rows)
    # Spark wrote microsecond timestamps (not INT96), readable by every Delta reader.
    data_file = DeltaTable(str(path)).file_uris()[0]
    ts_column = pq.read_metadata(data_file).schema.column(ALL_TYPES.names.index("ts"))
    assert json.loads(ts_column.logical_type.to_json())["timeUnit"] == "microseconds"
    stats = _stats_from_log(path)
    assert stats["numRecords"] == 4
    assert stats["nullCount"] == {
        "id": 0,
        "s": 1,
        "i32": 1,
        "i64": 1,
        "f32": 1,
        "f64": 1,
        "b": 1,
        "d": 1,
        "ts": 1,
    }
    assert stats["minValues"]["ts"] == "1500-01-01T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "2024-02-29T12:00:00.001Z"  # 1 µs past noon, rounded up
    assert stats["minValues"]["i64"] == -(2**63) and stats["maxValues"]["i32"] == 2**31 - 1
    assert stats["minValues"]["d"] == "0001-01-01" and stats["maxValues"]["d"] == "9999-12-31"
    assert stats["minValues"]["s"] == "b ✓ ünïcode" and "s" not in stats["maxValues"]  # "x"*40: too long a bound


#: The flat types of issue 35, declared by Delta's names and the loader's short ones.
NEW_TYPES = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "long", "nullable": False},
            {"name": "i8", "type": "byte"},
            {"name": "i16", "type": "int16"},
            {"name": "dec", "type": "decimal(38,2)"},
            {"name": "small", "type": "decimal(5,5)"},
            {"name": "whole", "type": "decimal(38,0)"},
            {"name": "bin", "type": "binary"},
            {"name": "ntz", "type": "timestamp_ntz"},
        ]
    }
)


def _new_type_rows(schema: TableSchema) -> pa.Table:
    return pa.table(
        {
            "id": [1, 2, 3, 4],
            "i8": [-128, 127, None, 0],
            "i16": [-(2**15), 2**15 - 1, 0, None],
            "dec": [
                decimal.Decimal("12345678901234567.89"),
                decimal.Decimal("-999999999999999999999999999999999999.99"),
                None,
                decimal.Decimal("0.00"),
            ],
            "small": [decimal.Decimal("0.99999"), decimal.Decimal("-0.00001"), None, decimal.Decimal("0.00000")],
            "whole": [decimal.Decimal(10**38 - 1), decimal.Decimal(-(10**38) + 1), decimal.Decimal(-5), None],
            "bin": [b"", b"\x00\xff", None, bytes(range(256))],
            "ntz": [
                dt.datetime(1, 1, 1),
                dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
                dt.datetime(2024, 3, 10, 2, 30),  # a wall-clock time no zone shifts
                None,
            ],
        },
        schema=schema.arrow(),
    )


@pytest.mark.parametrize("partition", [None, "i8", "i16", "whole", "ntz"])
def test_new_flat_types_round_trip_in_every_reader(sink: DeltaRsSink, partition: str | None) -> None:
    """int8, int16, decimals, binary and timestamp_ntz read back exactly with deltalake, DuckDB
    and Spark, unpartitioned and as partition columns (each names directories its own way)."""
    schema = NEW_TYPES.model_copy(update={"partition_by": (partition,) if partition else ()})
    table = f"new_types_{partition or 'flat'}"
    sink.ensure_table(table, schema)
    rows = _new_type_rows(schema)
    sink.load(Batch(table, (rows_update(table, 1, rows),)), schema)
    path = sink.table_path(table)
    back = read_delta(path).select(schema.names)
    assert [f.type for f in back.schema] == [f.type for f in schema.arrow()]
    assert by_id(back) == by_id(rows)
    assert by_id(read_spark(sink.spark, path, schema).select(schema.names).cast(schema.arrow())) == by_id(rows)
    duck = read_duckdb(path).select(schema.names)
    assert by_id(duck.cast(schema.arrow())) == by_id(rows)
    protocol = DeltaTable(str(path)).protocol()
    assert "timestampNtz" in (protocol.writer_features or [])
    if partition is None:
        stats = _stats_from_log(path)
        assert stats["numRecords"] == 4 and stats["nullCount"]["dec"] == 1
        assert stats["minValues"]["i8"] == -128 and stats["maxValues"]["i16"] == 2**15 - 1


def _stats_from_log(path: Path) -> dict[str, Any]:
    for line in (path / "_delta_log" / "00000000000000000001.json").read_text().splitlines():
        entry = json.loads(line)
        if "add" in entry:
            return json.loads(entry["add"]["stats"])
    raise AssertionError("no add action in commit 1")


def test_batch_without_rows_still_commits_its_sequence(sink: DeltaRsSink) -> None:
    sink.ensure_table("orders", ORDERS)
    empty = ORDERS.arrow().empty_table()
    result = sink.load(Batch("orders", (rows_update("orders", 4, empty),)), ORDERS)
    assert (result.rows, result.files_written, result.delta_version) == (0, 0, 1)
    assert sink.committed_seq("orders") == 4
    assert read_delta(sink.table_path("orders")).num_rows == 0


# -- tables, failures, leftovers ----------------------------------------------------------
def test_ensure_table_is_idempotent_and_refuses_another_schema(sink: DeltaRsSink) -> None:
    sink.ensure_table("orders", ORDERS)
    sink.ensure_table("orders", ORDERS)
    assert log_versions(sink.table_path("orders")) == [0]
    assert sink.committed_seq("orders") == 0

    changed = ORDERS.model_copy(
        update={
            "columns": (
                *ORDERS.columns[:2],
                ORDERS.columns[2].model_copy(update={"type": parse_type("float32")}),
                *ORDERS.columns[3:],
            )
        }
    )
    with pytest.raises(ValueError, match=r"column 'amount' is double in the table but float"):
        sink.ensure_table("orders", changed)
    fewer = TableSchema(columns=ORDERS.columns[:4])
    with pytest.raises(ValueError, match=r"the table has column 'at'"):
        sink.ensure_table("orders", fewer)
    nullable_id = TableSchema(columns=(ORDERS.columns[0].model_copy(update={"nullable": True}), *ORDERS.columns[1:]))
    with pytest.raises(ValueError, match=r"column 'id' is NOT NULL in the table but nullable"):
        sink.ensure_table("orders", nullable_id)
    partitioned = TableSchema(columns=ORDERS.columns, partition_by=("name",))
    with pytest.raises(ValueError, match=r"partitioned by \[\]"):
        sink.ensure_table("orders", partitioned)


def test_a_log_left_empty_by_a_crash_mid_create_is_created_again(tmp_path: Path) -> None:
    """A registration killed between the log directory and its first commit leaves an empty
    ``_delta_log``: that is no table yet, so the next start creates it."""
    tables = DeltaTables(tmp_path / "warehouse")
    (tables.table_path("orders") / "_delta_log").mkdir(parents=True)
    assert tables.open("orders") is None
    tables.ensure_table("orders", ORDERS)
    assert log_versions(tables.table_path("orders")) == [0]
    assert tables.committed_seq("orders") == 0


def test_failed_load_commits_nothing_and_leaves_no_files(sink: DeltaRsSink, tmp_path: Path) -> None:
    sink.ensure_table("orders", ORDERS)
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": 1, "name": "ok"}\n{"id": null, "name": "no id"}\n', encoding="utf-8")
    good = order_rows(random.Random(1), range(100, 110))
    batch = Batch("orders", (rows_update("orders", 1, good), file_update("orders", 2, bad, FileFormat.json)))
    path = sink.table_path("orders")

    with pytest.raises(Exception, match="NOT NULL"):
        sink.load(batch, ORDERS)

    assert log_versions(path) == [0] and sink.committed_seq("orders") == 0
    assert sorted(p.name for p in path.iterdir()) == ["_delta_log"]


def test_staging_left_by_a_crash_is_cleaned_and_loads_leave_none(sink: DeltaRsSink) -> None:
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    leftover = path / f"{STAGING_PREFIX}crashed" / "part-00000-dead.c000.snappy.parquet"
    leftover.parent.mkdir()
    pq.write_table(order_rows(random.Random(2), range(5)), leftover)

    sink.ensure_table("orders", ORDERS)
    assert not leftover.parent.exists()

    sink.load(Batch("orders", (rows_update("orders", 1, order_rows(random.Random(3), range(7))),)), ORDERS)
    assert not list(path.glob(f"{STAGING_PREFIX}*"))
    assert read_delta(path).num_rows == 7
    assert sink.cleanup("orders") == 0


def test_two_workers_load_two_tables_at_once_in_their_pools(sink: DeltaRsSink) -> None:
    sink.ensure_table("a", ORDERS)
    sink.ensure_table("b", ORDERS)
    rng = random.Random(9)
    batches = {t: Batch(t, (rows_update(t, 1, order_rows(rng, range(60))),)) for t in ("a", "b")}
    start = threading.Barrier(2)

    def work(worker: int, table: str) -> int:
        sink.use_pool(f"worker-{worker}")
        start.wait()
        return sink.load(batches[table], ORDERS).rows

    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(work, (0, 1), ("a", "b")))

    assert rows == [60, 60]
    for table in ("a", "b"):
        assert by_id(read_delta(sink.table_path(table))) == by_id(batches[table].row_tables[0])
        assert sink.committed_seq(table) == 1


def test_spilled_segments_are_read_in_place_whole_or_in_part_after_a_partial_commit(
    sink: DeltaRsSink, tmp_path: Path
) -> None:
    """A batch of memory rows plus spill segments lands whole; when part of it was committed
    before a restart, only the rest of a segment is loaded (read through the driver)."""
    from loader.pending.spill.registry import make_spill_policy
    from loader.pending.spill.segments import SegmentFiles
    from loader.pending.store import PendingStore

    rng = random.Random(11)
    sink.ensure_table("orders", ORDERS)
    parts = [order_rows(rng, range(k * 50, k * 50 + 50)) for k in range(8)]
    budget = 3 * parts[0].get_total_buffer_size()
    segments = SegmentFiles(tmp_path / "spill", lambda _: ORDERS.arrow())
    store = PendingStore(make_spill_policy("half", budget), budget, segments)
    store.add_table("orders")
    for seq, rows in enumerate(parts, start=1):
        store.append(rows_update("orders", seq, rows))
    updates = store.take("orders")
    assert any(u.spilled for u in updates) and any(u.rows is not None for u in updates)
    spilled = [u for u in updates if u.spilled is not None]

    # Updates 1..k were committed before a "crash": the retry holds a segment only in part.
    cut = spilled[0].seq  # commit up to the first spilled update: its segment is split
    assert spilled[0].spilled is not None and spilled[0].spilled.segment_rows > 50
    first = Batch("orders", tuple(u for u in updates if u.seq <= cut))
    assert sink.load(first, ORDERS).rows == 50 * cut
    result = sink.load(Batch("orders", updates), ORDERS)
    path = sink.table_path("orders")
    assert result.rows == 50 * (8 - cut)
    assert by_id(read_delta(path)) == by_id(pa.concat_tables(parts))
    store.loaded("orders")
    assert not list((tmp_path / "spill").rglob("*.parquet"))


def test_new_types_in_spill_segments_load_exactly(sink: DeltaRsSink, tmp_path: Path) -> None:
    """Spill segments (Parquet written by the pending store) carry the new flat types: whole
    segments read by Spark, memory rows inline, both exact."""
    sink.ensure_table("spilled", NEW_TYPES)
    base = _new_type_rows(NEW_TYPES)
    parts = [base.set_column(0, "id", pa.array([k * 10 + i for i in range(4)], pa.int64())) for k in range(8)]
    _load_half_spilled(sink, tmp_path, "spilled", NEW_TYPES, parts, budget=3 * parts[0].get_total_buffer_size())
    path = sink.table_path("spilled")
    assert by_id(read_delta(path).select(NEW_TYPES.names)) == by_id(pa.concat_tables(parts))


def _load_half_spilled(
    sink: DeltaRsSink, tmp_path: Path, table: str, schema: TableSchema, parts: list[pa.Table], budget: int
) -> None:
    """``parts`` as updates of a pending store whose ``budget`` spills some of them (whole
    segments, which Spark reads in place) and keeps the rest in memory, loaded as one batch."""
    from loader.pending.spill.registry import make_spill_policy
    from loader.pending.spill.segments import SegmentFiles
    from loader.pending.store import PendingStore

    store = PendingStore(
        make_spill_policy("half", budget), budget, SegmentFiles(tmp_path / "spill", lambda _: schema.arrow())
    )
    store.add_table(table)
    for seq, rows in enumerate(parts, start=1):
        store.append(rows_update(table, seq, rows))
    updates = store.take(table)
    assert any(u.spilled for u in updates) and any(u.rows is not None for u in updates)
    sink.load(Batch(table, updates), schema)
    store.loaded(table)


NESTED = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "long", "nullable": False},
            {
                "name": "items",
                "type": {
                    "type": "array",
                    "elementType": {
                        "type": "struct",
                        "fields": [
                            {"name": "sku", "type": "string", "nullable": False, "metadata": {}},
                            {"name": "price", "type": "decimal(38,9)", "nullable": True, "metadata": {}},
                            {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}},
                        ],
                    },
                    "containsNull": False,
                },
            },
            {
                "name": "attrs",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": {"type": "array", "elementType": "timestamp_ntz", "containsNull": True},
                    "valueContainsNull": True,
                },
            },
            {
                "name": "meta",
                "type": {
                    "type": "struct",
                    "fields": [
                        {"name": "raw", "type": "binary", "nullable": True, "metadata": {}},
                        {"name": "n", "type": "byte", "nullable": False, "metadata": {}},
                        {"name": "day", "type": "date", "nullable": True, "metadata": {}},
                        {
                            "name": "codes",
                            "type": {"type": "array", "elementType": "integer", "containsNull": False},
                            "nullable": False,
                            "metadata": {},
                        },
                        {
                            "name": "kv",
                            "type": {
                                "type": "map",
                                "keyType": "long",
                                "valueType": "float",
                                "valueContainsNull": False,
                            },
                            "nullable": False,
                            "metadata": {},
                        },
                    ],
                },
                "nullable": True,
            },
        ]
    }
)


def nested_rows(ids: range) -> pa.Table:
    D = decimal.Decimal
    at = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    rows = []
    for i in ids:
        rows.append(
            {
                "id": i,
                "items": [
                    {"sku": f"s{i}", "price": D("-99999999999999999999999999999.999999999"), "at": at},
                    {"sku": "", "price": None, "at": None},
                ]
                if i % 3
                else ([] if i % 2 else None),
                "attrs": [("k", [dt.datetime(1, 1, 1), None]), ("", None)] if i % 2 else [],
                "meta": {"raw": b"\x00\xff", "n": -128, "day": dt.date(1, 1, 1), "codes": [i, -1], "kv": [(i, 0.5)]}
                if i % 4
                else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=NESTED.arrow())


def test_nested_columns_load_and_read_back_exactly_in_every_reader(sink: DeltaRsSink, tmp_path: Path) -> None:
    """Struct, array and map columns, to depth 3, from memory rows and whole spill segments
    (Parquet, read in place by Spark): deltalake, DuckDB and Spark read back what was sent,
    with the table's Delta schema."""
    sink.ensure_table("nested", NESTED)
    parts = [nested_rows(range(k * 6, k * 6 + 6)) for k in range(4)]
    _load_half_spilled(sink, tmp_path, "nested", NESTED, parts, budget=2 * parts[0].get_total_buffer_size())
    path = sink.table_path("nested")
    sent = by_id(pa.concat_tables(parts))
    back = read_delta(path).select(NESTED.names)
    assert back.schema == NESTED.arrow()
    assert by_id(back) == sent
    loose = loosened_schema(NESTED.arrow())
    assert by_id(read_duckdb(path).select(NESTED.names).cast(loose)) == sent
    assert by_id(read_spark(sink.spark, path, NESTED).select(NESTED.names).cast(loose)) == sent
    logged = json.loads(DeltaTable(str(path)).schema().to_json())["fields"]
    assert [f["type"] for f in logged] == [c.type.delta for c in NESTED.columns]
    for uri in DeltaTable(str(path)).file_uris():  # Spark wrote the nested parts' nullability too
        written = pq.read_schema(uri)
        assert [written.field(n).type for n in NESTED.names] == [f.type for f in NESTED.arrow()]


def test_rows_acknowledged_before_a_struct_gained_a_field_load_with_it_null(sink: DeltaRsSink, tmp_path: Path) -> None:
    """A whole spill segment (read in place by Spark) and memory rows, both written before a
    struct column gained a nullable field, load into the evolved table with the field null."""
    from loader.core.updates import SpilledRows

    def schema(*extra: dict) -> TableSchema:
        fields = [{"name": "a", "type": "integer", "nullable": False, "metadata": {}}, *extra]
        return TableSchema.model_validate(
            {
                "columns": [
                    {"name": "id", "type": "long", "nullable": False},
                    {"name": "s", "type": {"type": "struct", "fields": fields}},
                ]
            }
        )

    old, new = schema(), schema({"name": "b", "type": "string", "nullable": True, "metadata": {}})
    sink.ensure_table("grown", old)
    assert sink.evolve_table("grown", new)
    before = pa.Table.from_pylist([{"id": 1, "s": {"a": 1}}, {"id": 2, "s": None}], schema=old.arrow())
    segment = tmp_path / "segment.parquet"
    pq.write_table(before, segment)
    spilled = Update(table="grown", seq=1, release=1.0, spilled=SpilledRows(str(segment), 0, 2, 2, 100))
    memory = rows_update("grown", 2, before.set_column(0, "id", pa.array([3, 4], pa.int64())))
    after = rows_update("grown", 3, pa.Table.from_pylist([{"id": 5, "s": {"a": 5, "b": "x"}}], schema=new.arrow()))
    sink.load(Batch("grown", (spilled, memory, after)), new)
    got = by_id(read_delta(sink.table_path("grown")))
    assert got == [
        {"id": 1, "s": {"a": 1, "b": None}},
        {"id": 2, "s": None},
        {"id": 3, "s": {"a": 1, "b": None}},
        {"id": 4, "s": None},
        {"id": 5, "s": {"a": 5, "b": "x"}},
    ]


def test_rows_chunked_differently_by_column_reach_spark_whole(spark) -> None:
    """pyspark's createDataFrame drops rows of an Arrow table whose columns are chunked
    differently (a column appended to concatenated tables, as the failed load's search and a
    latest table's rows are built); ``arrow_frame`` hands it every row."""
    from pyspark.sql.types import LongType, StructField, StructType

    parts = [pa.table({"id": pa.array(ids, pa.int64())}) for ids in ([3], [], [2, 7000])]
    rows = pa.concat_tables(parts).append_column(
        "at", pa.chunked_array([pa.array([1], pa.int64()), pa.array([2, 3], pa.int64())])
    )
    assert [c.num_chunks for c in rows.columns] == [3, 2]
    struct = StructType([StructField("id", LongType()), StructField("at", LongType())])
    got = sorted(tuple(r) for r in arrow_frame(spark, rows, struct).collect())
    assert got == [(2, 2), (3, 1), (7000, 3)]
