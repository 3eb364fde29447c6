"""The lean changes (loader/loading/spark.py ``LEAN_CHANGES``) keep a load what it was.

The tests switch every change on (``ALL_LEAN``), the ones off by default included, so that
each code path is exercised; the suite's other sink tests run the default set.

A lean load still lands every row exactly once with its app transaction, leaves no side
file behind (no ``_SUCCESS``, no ``.crc``, no committer directory), reads back the same as
a load without any change, and the kept table handle sees commits others made. How much
each change saves is measured in ``benchmarks/load_cost``, not here.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from loader.core.schema import TableSchema
from loader.core.updates import Batch, FileFormat, FileRef, Update
from loader.durability.transactions import app_id
from loader.loading.sinks import frame
from loader.loading.sinks.delta_rs import STAGING_PREFIX, DeltaRsSink
from loader.loading.spark import ALL_LEAN, DEFAULT_LEAN, LEAN_CHANGES, lean_changes, set_write_checksums
from testing.tables import read_delta
from tests.loader.loading.test_sinks import ORDERS

pytestmark = pytest.mark.slow

UTC = dt.UTC
SCHEMA = ORDERS
BY_DAY = SCHEMA.model_copy(update={"partition_by": ("day",)})


def rows(seed: int, ids: range) -> pa.Table:
    rng = random.Random(seed)
    base = dt.datetime(2024, 3, 1, tzinfo=UTC)
    return pa.table(
        {
            "id": list(ids),
            "name": [rng.choice(["ada", None, "chloé", "", "it's"]) for _ in ids],
            "amount": [None if rng.random() < 0.1 else rng.uniform(-1e6, 1e6) for _ in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(3)) for _ in ids],
            "at": [base + dt.timedelta(microseconds=rng.randrange(10**12)) for _ in ids],
        },
        schema=SCHEMA.arrow(),
    )


def update(table: str, seq: int, data: pa.Table) -> Update:
    return Update(table=table, seq=seq, release=float(seq), rows=data)


def by_id(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def checksums(spark) -> Iterator[None]:
    """Leave the JVM's checksum flag as the session had it (the lean default: off)."""
    yield
    set_write_checksums(spark, False)


def watch_staging(sink: DeltaRsSink) -> list[list[str]]:
    """What Spark left in each load's staging output, seen when the sink publishes it."""
    seen: list[list[str]] = []
    publish = sink._publish

    def spy(staging: Path, *args: Any) -> Any:
        seen.append(sorted(str(p.relative_to(staging)) for p in staging.rglob("*")))
        return publish(staging, *args)

    sink._publish = spy  # type: ignore[method-assign]
    return seen


def test_lean_load_lands_once_and_leaves_no_side_files(spark, tmp_path: Path, checksums: None) -> None:
    sink = DeltaRsSink(tmp_path / "warehouse", spark, ALL_LEAN)
    set_write_checksums(spark, False)  # as build_spark_session sets it for no_checksum_files
    sink.ensure_table("orders", SCHEMA)
    seen = watch_staging(sink)
    first, second = rows(1, range(0, 100)), rows(2, range(100, 150))

    result = sink.load(Batch("orders", (update("orders", 1, first), update("orders", 2, second))), SCHEMA)

    path = sink.table_path("orders")
    assert (result.rows, result.skipped, result.delta_version) == (150, False, 1)
    assert by_id(read_delta(path)) == by_id(pa.concat_tables([first, second]))
    assert DeltaTable(str(path)).transaction_version("warehouse-loader:orders") == 2
    # One Parquet file and nothing else: no _SUCCESS, no .crc, no committer directory.
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith("part-") and seen[0][0].endswith(".parquet")
    assert sorted(p.name for p in path.iterdir() if not p.name.startswith("part-")) == ["_delta_log"]
    assert not list(path.glob(f"{STAGING_PREFIX}*"))
    # A replay changes nothing; the next batch commits once more.
    assert sink.load(Batch("orders", (update("orders", 2, second),)), SCHEMA).skipped
    assert sink.load(Batch("orders", (update("orders", 3, rows(3, range(150, 160))),)), SCHEMA).delta_version == 2
    assert read_delta(path).num_rows == 160


def test_without_lean_changes_hadoop_writes_its_checksum_files(spark, tmp_path: Path, checksums: None) -> None:
    """The other side of ``no_checksum_files``: the flag is what keeps the .crc away."""
    sink = DeltaRsSink(tmp_path / "warehouse", spark, frozenset())
    set_write_checksums(spark, True)
    sink.ensure_table("orders", SCHEMA)
    seen = watch_staging(sink)

    sink.load(Batch("orders", (update("orders", 1, rows(1, range(10))),)), SCHEMA)

    assert any(name.endswith(".parquet.crc") for name in seen[0])
    assert read_delta(sink.table_path("orders")).num_rows == 10


@pytest.mark.parametrize("schema", [SCHEMA, BY_DAY], ids=["unpartitioned", "partitioned"])
def test_lean_and_plain_loads_read_back_identically(
    spark, tmp_path: Path, schema: TableSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small rows (inline), large rows (a file), landing files: the same table either way."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "feed.json").write_text(
        '{"id": 900, "name": "jo", "amount": 2.25, "day": "2024-01-02", "at": "2000-01-01T00:00:00.5Z"}\n{"id": 901}\n',
        encoding="utf-8",
    )
    small, large = rows(4, range(0, 40)), rows(5, range(40, 400))
    monkeypatch.setattr(frame, "INLINE_ROWS_MAX_BYTES", small.nbytes)  # `large` goes as a file
    json_file = landing / "feed.json"
    batches = [
        Batch("t", (update("t", 1, small),)),
        Batch(
            "t",
            (
                update("t", 2, large),
                Update("t", 3, 3.0, files=(FileRef(str(json_file), FileFormat.json, json_file.stat().st_size),)),
            ),
        ),
    ]
    tables = {}
    for name, lean in (("lean", ALL_LEAN), ("plain", frozenset())):
        sink = DeltaRsSink(tmp_path / name, spark, lean)
        sink.ensure_table("t", schema)
        for batch in batches:
            sink.load(batch, schema)
        tables[name] = read_delta(sink.table_path("t"))
        assert DeltaTable(str(sink.table_path("t"))).transaction_version("warehouse-loader:t") == 3

    assert tables["lean"].schema == tables["plain"].schema
    assert by_id(tables["lean"]) == by_id(tables["plain"])
    assert tables["lean"].num_rows == 400 + 2


def test_kept_table_handle_sees_commits_of_others(spark, tmp_path: Path) -> None:
    """``cached_table``: a compaction committed by another handle (maintenance) between two
    loads is seen, so a replay is still skipped and versions stay right."""
    sink = DeltaRsSink(tmp_path / "warehouse", spark, ALL_LEAN)
    sink.ensure_table("orders", SCHEMA)
    for seq in (1, 2):
        sink.load(Batch("orders", (update("orders", seq, rows(seq, range(seq * 10, seq * 10 + 10))),)), SCHEMA)
    DeltaTable(str(sink.table_path("orders"))).optimize.compact()  # version 3, by someone else

    assert sink.load(Batch("orders", (update("orders", 2, rows(2, range(20, 30))),)), SCHEMA).skipped
    result = sink.load(Batch("orders", (update("orders", 3, rows(3, range(30, 40))),)), SCHEMA)
    assert result.delta_version == 4
    assert sorted(read_delta(sink.table_path("orders")).column("id").to_pylist()) == list(range(10, 40))


def test_known_commits_trusts_only_a_log_without_later_commits(spark, tmp_path: Path) -> None:
    """``known_commits``: a commit of the loader's own transaction that the sink never heard
    of (a load whose worker died after its commit landed, made by another handle here) is a
    later log file, so the next load reads the transaction from the log and skips the replay."""
    sink = DeltaRsSink(tmp_path / "warehouse", spark, ALL_LEAN)
    sink.ensure_table("orders", SCHEMA)
    sink.load(Batch("orders", (update("orders", 1, rows(1, range(10, 20))),)), SCHEMA)
    assert sink._known["orders"] == (1, 1)  # what the next load trusts while the log agrees
    other = DeltaRsSink(tmp_path / "warehouse", spark, ALL_LEAN)  # the dead worker's sink
    assert other.load(Batch("orders", (update("orders", 2, rows(2, range(20, 30))),)), SCHEMA).delta_version == 2

    assert sink.load(Batch("orders", (update("orders", 2, rows(2, range(20, 30))),)), SCHEMA).skipped
    assert sink.load(Batch("orders", (update("orders", 3, rows(3, range(30, 40))),)), SCHEMA).delta_version == 3
    assert sorted(read_delta(sink.table_path("orders")).column("id").to_pylist()) == list(range(10, 40))

    # Log cleanup after a checkpoint removes old entries, the next one after ours among them:
    # ours gone too, the handle is brought up to date rather than trusted.
    assert sink._known["orders"] == (3, 3)
    for seq in (4, 5):
        other.load(Batch("orders", (update("orders", seq, rows(seq, range(seq * 10, seq * 10 + 10))),)), SCHEMA)
    DeltaTable(str(sink.table_path("orders"))).create_checkpoint()
    log = sink.table_path("orders") / "_delta_log"
    for version in range(5):
        (log / f"{version:020d}.json").unlink()
    assert sink.load(Batch("orders", (update("orders", 5, rows(5, range(50, 60))),)), SCHEMA).skipped
    assert sorted(read_delta(sink.table_path("orders")).column("id").to_pylist()) == list(range(10, 60))


def test_direct_commits_write_checkpoints_at_the_tables_interval(spark, tmp_path: Path) -> None:
    """``direct_commit``: the sink's own log entries, a checkpoint every ``delta.checkpointInterval``
    versions as deltalake's hook writes them, and the table as a deltalake-committed one."""
    sink = DeltaRsSink(tmp_path / "warehouse", spark, ALL_LEAN)
    sink.table_properties = {"delta.checkpointInterval": "2"}
    sink.ensure_table("orders", SCHEMA)
    for seq in range(1, 6):
        sink.load(Batch("orders", (update("orders", seq, rows(seq, range(seq * 10, seq * 10 + 10))),)), SCHEMA)
    log = sink.table_path("orders") / "_delta_log"
    assert sorted(int(p.name.split(".")[0]) for p in log.glob("*.checkpoint.parquet")) == [1, 3, 5]
    assert "direct log commit" in (log / f"{5:020d}.json").read_text()
    delta = DeltaTable(str(sink.table_path("orders")))
    assert delta.version() == 5 and delta.transaction_version(app_id("orders")) == 5
    assert sorted(read_delta(sink.table_path("orders")).column("id").to_pylist()) == list(range(10, 60))


@pytest.mark.parametrize("escaped_literals", [False, True], ids=["default-parser", "escapedStringLiterals"])
def test_not_null_violation_fails_a_lean_load_and_commits_nothing(
    spark, tmp_path: Path, escaped_literals: bool
) -> None:
    """The check runs in the SQL text of ``few_round_trips`` (in-memory rows were checked by
    intake), whose message parses whatever the operator set for string literals."""
    if escaped_literals:
        spark.conf.set("spark.sql.parser.escapedStringLiterals", "true")
    try:
        _load_a_null_id(spark, tmp_path)
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


def _load_a_null_id(spark, tmp_path: Path) -> None:
    sink = DeltaRsSink(tmp_path / "warehouse", spark, ALL_LEAN)
    sink.ensure_table("orders", SCHEMA)
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": 1, "name": "ok"}\n{"id": null, "name": "no id"}\n', encoding="utf-8")
    batch = Batch(
        "orders",
        (
            update("orders", 1, rows(6, range(100, 105))),
            Update("orders", 2, 2.0, files=(FileRef(str(bad), FileFormat.json, bad.stat().st_size),)),
        ),
    )

    with pytest.raises(Exception, match="column 'id' is NOT NULL but a row of this batch holds null"):
        sink.load(batch, SCHEMA)

    assert sink.committed_seq("orders") == 0
    assert sorted(p.name for p in sink.table_path("orders").iterdir()) == ["_delta_log"]


def test_lean_writes_setting_names_changes() -> None:
    assert lean_changes(True) == DEFAULT_LEAN == {n for n, c in LEAN_CHANGES.items() if c.default}
    assert lean_changes(False) == frozenset()
    assert lean_changes(ALL_LEAN) == frozenset(LEAN_CHANGES)
    assert lean_changes(["cached_table"]) == {"cached_table"}
    with pytest.raises(ValueError, match=r"unknown lean_writes change\(s\) \['fast'\]; choose from"):
        lean_changes(["fast"])
