"""The Delta table's own rules, enforced by the embedded writer against a real local Spark.

Each case alters a table from outside between loads, as other tools do (deltalake's
``alter``, or a commit of new metadata: testing/delta_alter.py), and then loads: a row that
breaks a CHECK constraint, an invariant or a generated column's expression is never
committed and its error names the rule and the row; NULL is judged as delta-rs's own writer
judges it (checked side by side); an append-only table takes appends but no upsert; a
writer feature the loader does not honour stops the table's loads before any Spark work; a
change of the table between the check and the commit fails the commit, and the retry
checks again. What was committed reads back with deltalake and DuckDB.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake._internal import TableFeatures

from loader.core.schema import TableSchema
from loader.core.tables import TableConfig
from loader.core.updates import Batch, FileFormat, FileRef, Update
from loader.durability.transactions import app_id
from loader.loading.failures import TableChanged, TableRefusesWrites, batch_at_fault, updates_at_fault
from loader.loading.sinks import make_sink, table_rules
from loader.loading.sinks import upsert as upsert_module
from loader.loading.sinks.delta_rs import STAGING_PREFIX, DeltaRsSink
from loader.loading.sinks.table_rules import RuleViolated
from testing.delta_alter import commit_metadata, invariant, protocol_with
from testing.tables import read_delta, read_duckdb

pytestmark = pytest.mark.slow

ORDERS = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "float64"},
            {"name": "twice", "type": "int64"},
        ]
    }
)
PRICES = TableConfig.model_validate(
    {
        "name": "prices",
        "schema": {
            "columns": [
                {"name": "sym", "type": "string", "nullable": False},
                {"name": "px", "type": "float64"},
            ]
        },
        "mode": "latest",
        "key": ["sym"],
    }
).schema_


def rows(schema: TableSchema, records: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in records], schema=schema.arrow())


def update(table: str, schema: TableSchema, seq: int, records: list[dict[str, Any]]) -> Update:
    return Update(table=table, seq=seq, release=float(seq), rows=rows(schema, records))


def orders(seq: int, *ids: int, **values: Any) -> Update:
    return update("orders", ORDERS, seq, [{"id": i, "name": "n", "amount": 1.0, **values} for i in ids])


def ids(path: Path) -> list[int]:
    return sorted(r["id"] for r in read_delta(path).to_pylist())


def staging_left(path: Path) -> list[Path]:
    return list(path.glob(f"{STAGING_PREFIX}*"))


@pytest.fixture
def sink(spark, tmp_path: Path) -> DeltaRsSink:
    made = make_sink("delta-rs", tmp_path / "warehouse", spark)
    assert isinstance(made, DeltaRsSink)
    return made


@pytest.mark.parametrize("located_from", ["memory", "a file"])  # a batch over 1 MiB is located from a file
def test_a_check_constraint_added_from_outside_refuses_the_violating_row_and_names_it(
    sink: DeltaRsSink, located_from: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if located_from == "a file":
        monkeypatch.setattr(table_rules, "INLINE_ROWS_MAX_BYTES", 0)
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    sink.load(Batch("orders", (orders(1, 1, 2, 3),)), ORDERS)
    DeltaTable(str(path)).alter.add_constraint({"id_small": "id < 1000"})  # another tool, while the loader runs
    version = DeltaTable(str(path)).version()

    batch = Batch("orders", (orders(2, 4, 5), orders(3, 6, 5000, 7), orders(4, 8), orders(5, 9000, 9001)))
    with pytest.raises(RuleViolated) as err:
        sink.load(batch, ORDERS)

    message = str(err.value)
    assert "update 3, row 1 of table 'orders' violates CHECK constraint id_small (id < 1000)" in message
    assert '"id": 5000' in message and "Nothing of updates 2..5 was committed" in message
    assert err.value.seq == 3 and err.value.row is not None and err.value.row["id"] == 5000
    # Every update holding a violating row is named, each with its own first such row (one search).
    named = updates_at_fault(err.value)
    assert sorted(named) == [3, 5] and named[3] == message.replace("updates 2..5", "updates 3..3")
    assert "update 5, row 0 of table 'orders'" in named[5] and '"id": 9000' in named[5]
    assert batch_at_fault(err.value)  # the batch's fault: retried, then set aside
    assert DeltaTable(str(path)).version() == version and not staging_left(path)
    # deltalake's own writer refuses the same row for the same constraint.
    with pytest.raises(Exception, match="failed validation check"):
        write_deltalake(str(path), rows(ORDERS, [{"id": 5000, "name": "n", "amount": 1.0}]), mode="append")
    # The batch without the violating update (what the quarantine path leaves) loads.
    result = sink.load(Batch("orders", (orders(2, 4, 5), orders(4, 8))), ORDERS)
    assert result.rows == 3 and sink.committed_seq("orders") == 4
    assert ids(path) == [1, 2, 3, 4, 5, 8]
    assert sorted(r["id"] for r in read_duckdb(path).to_pylist()) == [1, 2, 3, 4, 5, 8]


def test_null_and_generated_columns_are_judged_as_delta_rs_judges_them(sink: DeltaRsSink, tmp_path: Path) -> None:
    """Each row goes to the loader and, on a copy of the same table, to deltalake's own
    writer: both accept it or both refuse it. NULL violates a CHECK constraint and an
    invariant (they must be true); a generated column must equal its expression (<=>); a
    NULL there is filled by the loader (it cannot tell it from a value left out), as
    delta-rs fills a column left out."""
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    sink.load(Batch("orders", (orders(1, 1, twice=2),)), ORDERS)
    DeltaTable(str(path)).alter.add_constraint({"positive": "amount > 0"})
    commit_metadata(path, column_metadata={"name": invariant("name <> 'bad'")})
    commit_metadata(
        path,
        column_metadata={"twice": {"delta.generationExpression": "id * 2"}},
        protocol={"minReaderVersion": 1, "minWriterVersion": 4},
    )
    cases: list[tuple[dict[str, Any], bool, str | None]] = [
        ({"id": 10, "name": "ok", "amount": 1.5, "twice": 20}, True, None),
        ({"id": 11, "name": "ok", "amount": None, "twice": 22}, False, "CHECK constraint positive (amount > 0)"),
        ({"id": 12, "name": "ok", "amount": -1.0, "twice": 24}, False, "CHECK constraint positive (amount > 0)"),
        ({"id": 13, "name": None, "amount": 1.0, "twice": 26}, False, "the invariant of column 'name'"),
        ({"id": 14, "name": "bad", "amount": 1.0, "twice": 28}, False, "the invariant of column 'name'"),
        ({"id": 15, "name": "ok", "amount": 1.0, "twice": 7}, False, "generated column 'twice'"),
        ({"id": 16, "name": "ok", "amount": 1.0, "twice": None}, True, None),
    ]
    seq = 1
    for record, accepted, rule in cases:
        reference = tmp_path / f"reference-{record['id']}"
        shutil.copytree(path, reference)
        given = {k: v for k, v in record.items() if not (k == "twice" and v is None)}  # left out for delta-rs
        shape = pa.schema([f for f in ORDERS.arrow() if f.name in given])
        try:
            write_deltalake(str(reference), pa.Table.from_pylist([given], schema=shape), mode="append")
            delta_rs_accepts = True
        except Exception as exc:
            assert "failed validation check" in str(exc), exc
            delta_rs_accepts = False
        seq += 1
        try:
            sink.load(Batch("orders", (update("orders", ORDERS, seq, [record]),)), ORDERS)
            loader_accepts = True
        except RuleViolated as exc:
            loader_accepts = False
            assert rule is not None and rule in str(exc), (record, str(exc))
        assert loader_accepts == delta_rs_accepts == accepted, record
    stored = {r["id"]: r["twice"] for r in read_delta(path).to_pylist()}
    assert stored == {1: 2, 10: 20, 16: 32}  # the NULL was filled from the row
    assert {r["id"]: r["twice"] for r in read_duckdb(path).to_pylist()} == stored


@pytest.mark.parametrize("readable", [True, False], ids=["file-read-again", "files-past-the-bound"])
def test_a_violating_row_in_a_landing_file_names_its_update_and_row(
    sink: DeltaRsSink, tmp_path: Path, readable: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed load's search reads the batch's landing files again (as intake checked
    them) up to a bound; a row past it is still named by its values, and its update is left
    to bisection."""
    if not readable:
        monkeypatch.setattr(upsert_module, "LOCATE_FILE_BYTES", 0)
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    sink.load(Batch("orders", (orders(1, 1),)), ORDERS)
    DeltaTable(str(path)).alter.add_constraint({"id_small": "id < 1000"})
    landed = tmp_path / "landed.parquet"
    pq.write_table(rows(ORDERS, [{"id": 2}, {"id": 7000, "name": "far"}]), landed)
    batch = Batch(
        "orders",
        (
            orders(2, 3),
            Update("orders", 3, 3.0, files=(FileRef(str(landed), FileFormat.parquet, landed.stat().st_size),)),
        ),
    )
    with pytest.raises(RuleViolated) as err:
        sink.load(batch, ORDERS)
    assert '"id": 7000' in str(err.value) and ids(path) == [1]
    if readable:
        assert "update 3, row 1 of table 'orders' violates CHECK constraint id_small" in str(err.value)
        assert list(updates_at_fault(err.value)) == [3]
    else:
        assert "a row of the landing files of updates 2..3" in str(err.value)
        assert updates_at_fault(err.value) == {}


def test_a_latest_table_checks_the_value_it_writes_and_names_its_update(sink: DeltaRsSink) -> None:
    sink.ensure_table("prices", PRICES)
    path = sink.table_path("prices")
    DeltaTable(str(path)).alter.add_constraint({"px_positive": "px > 0"})

    def prices(seq: int, *pairs: tuple[str, float | None]) -> Update:
        return update("prices", PRICES, seq, [{"sym": s, "px": p} for s, p in pairs])

    # b's -1 is superseded by its 3.0 in the same batch: only what the MERGE writes is checked.
    sink.load(Batch("prices", (prices(1, ("a", 5.0), ("b", -1.0)), prices(2, ("b", 3.0)))), PRICES)
    assert {r["sym"]: r["px"] for r in read_delta(path).to_pylist()} == {"a": 5.0, "b": 3.0}
    with pytest.raises(RuleViolated) as err:
        sink.load(Batch("prices", (prices(3, ("c", 1.0)), prices(4, ("a", 2.0), ("d", None)))), PRICES)
    assert "update 4, row 1 of table 'prices' violates CHECK constraint px_positive (px > 0)" in str(err.value)
    assert '"px": null' in str(err.value) and sink.committed_seq("prices") == 2
    assert list(updates_at_fault(err.value)) == [4]


def test_append_only_takes_appends_and_stops_upserts_until_it_is_lifted(sink: DeltaRsSink) -> None:
    sink.ensure_table("orders", ORDERS)
    sink.ensure_table("prices", PRICES)
    for table in ("orders", "prices"):
        DeltaTable(str(sink.table_path(table))).alter.set_table_properties({"delta.appendOnly": "true"})
    assert sink.load(Batch("orders", (orders(1, 1, 2),)), ORDERS).rows == 2

    batch = Batch("prices", (update("prices", PRICES, 1, [{"sym": "a", "px": 1.0}]),))
    version = DeltaTable(str(sink.table_path("prices"))).version()
    with pytest.raises(TableRefusesWrites) as err:
        sink.load(batch, PRICES)
    assert err.value.reason == "append_only" and not batch_at_fault(err.value)
    assert "delta.appendOnly is true" in str(err.value)
    assert DeltaTable(str(sink.table_path("prices"))).version() == version
    DeltaTable(str(sink.table_path("prices"))).alter.set_table_properties({"delta.appendOnly": "false"})
    assert sink.load(batch, PRICES).rows == 1 and sink.committed_seq("prices") == 1


def test_a_writer_feature_the_loader_does_not_honour_stops_loads_before_any_spark_work(
    sink: DeltaRsSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    DeltaTable(str(path)).alter.add_feature(TableFeatures.RowTracking, allow_protocol_versions_increase=True)
    version = DeltaTable(str(path)).version()

    def no_spark(*_: object, **__: object) -> None:
        raise AssertionError("a refused table must not cost a Spark job")

    monkeypatch.setattr("loader.loading.sinks.delta_rs.build_batch_frame", no_spark)
    with pytest.raises(TableRefusesWrites) as err:
        sink.load(Batch("orders", (orders(1, 1),)), ORDERS)
    assert err.value.reason == "writer_feature" and "'rowTracking'" in str(err.value)
    assert not batch_at_fault(err.value) and DeltaTable(str(path)).version() == version


def test_deletion_vectors_allow_appends_and_merges(sink: DeltaRsSink) -> None:
    sink.ensure_table("orders", ORDERS)
    sink.ensure_table("prices", PRICES)
    for table in ("orders", "prices"):
        DeltaTable(str(sink.table_path(table))).alter.add_feature(
            TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
        )
    assert sink.load(Batch("orders", (orders(1, 1, 2),)), ORDERS).rows == 2
    path = sink.table_path("orders")
    # deltalake's pyarrow reader refuses a table that declares deletion vectors; its DataFusion reader reads it.
    found = pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute("SELECT id FROM t").read_all())
    assert sorted(found.column("id").to_pylist()) == [1, 2] == sorted(r["id"] for r in read_duckdb(path).to_pylist())
    # deltalake's MERGE reads through deletion vectors (tests/loader/loading/test_upsert_dv.py)
    assert sink.load(Batch("prices", (update("prices", PRICES, 1, [{"sym": "a", "px": 1.0}]),)), PRICES).rows == 1


def test_a_rule_spark_cannot_evaluate_on_the_loaders_columns_stops_the_table(sink: DeltaRsSink) -> None:
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    commit_metadata(
        path,
        configuration={"delta.constraints.elsewhere": "discount < amount"},  # a column the loader does not have
        protocol={"minReaderVersion": 1, "minWriterVersion": 3},
    )
    with pytest.raises(TableRefusesWrites) as err:
        sink.load(Batch("orders", (orders(1, 1),)), ORDERS)
    assert err.value.reason == "rule_unsupported"
    assert "CHECK constraint elsewhere (discount < amount)" in str(err.value) and "discount" in str(err.value)
    assert sink.committed_seq("orders") == 0


def test_a_rule_added_between_the_check_and_the_commit_fails_the_commit_and_the_retry_checks_it(
    sink: DeltaRsSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink.ensure_table("orders", ORDERS)
    path = sink.table_path("orders")
    commit = DeltaRsSink._commit_staged

    def racing(self: DeltaRsSink, *args: Any, **kwargs: Any) -> Any:
        if not DeltaTable(str(path)).metadata().configuration:  # once: another tool adds a constraint now
            DeltaTable(str(path)).alter.add_constraint({"id_small": "id < 1000"})
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(DeltaRsSink, "_commit_staged", racing)
    batch = Batch("orders", (orders(1, 1, 5000),))
    with pytest.raises(TableChanged, match="where the loader checked its rules") as err:
        sink.load(batch, ORDERS)
    assert not batch_at_fault(err.value)
    assert DeltaTable(str(path)).transaction_version(app_id("orders")) is None and ids(path) == []
    assert not [p for p in path.glob("*.parquet")]  # the published files were taken back
    with pytest.raises(RuleViolated, match="id_small"):  # the retry reads the new rule
        sink.load(batch, ORDERS)
    assert sink.load(Batch("orders", (orders(1, 1, 2),)), ORDERS).rows == 2


def test_a_rule_added_during_an_upsert_fails_its_merge(sink: DeltaRsSink, monkeypatch: pytest.MonkeyPatch) -> None:
    sink.ensure_table("prices", PRICES)
    path = sink.table_path("prices")
    merge = upsert_module._merge

    def racing(delta: DeltaTable, *args: Any) -> Any:
        DeltaTable(str(path)).alter.set_table_properties({"delta.appendOnly": "true"})
        return merge(delta, *args)

    monkeypatch.setattr(upsert_module, "_merge", racing)
    with pytest.raises(TableChanged):
        sink.load(Batch("prices", (update("prices", PRICES, 1, [{"sym": "a", "px": 1.0}]),)), PRICES)
    assert sink.committed_seq("prices") == 0
    monkeypatch.setattr(upsert_module, "_merge", merge)
    with pytest.raises(TableRefusesWrites, match="delta.appendOnly is true"):
        sink.load(Batch("prices", (update("prices", PRICES, 1, [{"sym": "a", "px": 1.0}]),)), PRICES)


def test_a_group_job_loads_tables_with_rules_alone_and_refuses_what_a_table_refuses(sink: DeltaRsSink) -> None:
    names = ("plain", "checked", "broken", "tracked")
    for name in names:
        sink.ensure_table(name, ORDERS)
    DeltaTable(str(sink.table_path("checked"))).alter.add_constraint({"id_small": "id < 1000"})
    DeltaTable(str(sink.table_path("broken"))).alter.add_constraint({"id_small": "id < 1000"})
    commit_metadata(sink.table_path("tracked"), protocol=protocol_with(sink.table_path("tracked"), "rowTracking"))

    def batch(name: str, *values: int) -> Batch:
        return Batch(name, (update(name, ORDERS, 1, [{"id": i} for i in values]),))

    outcomes = sink.load_group(
        [batch("plain", 1, 2), batch("checked", 3), batch("broken", 4, 4000), batch("tracked", 5)], [ORDERS] * 4
    )
    plain, checked, broken, tracked = outcomes
    assert not isinstance(plain, BaseException) and plain.rows == 2
    assert not isinstance(checked, BaseException) and checked.rows == 1
    assert isinstance(broken, RuleViolated) and "update 1, row 1" in str(broken)
    assert isinstance(tracked, TableRefusesWrites) and tracked.reason == "writer_feature"
    assert [sink.committed_seq(n) for n in names] == [1, 1, 0, 0]
    assert ids(sink.table_path("plain")) == [1, 2] and ids(sink.table_path("checked")) == [3]


def test_a_table_that_expires_transactions_is_refused_until_it_stops(tmp_path: Path) -> None:
    """deltalake forgets an expired application transaction (found by a review: the loader's
    transaction read back as None), so a replayed batch would load twice: no writes until the
    property goes."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}))
    DeltaTable(path).alter.set_table_properties({table_rules.TRANSACTION_EXPIRY: "interval 1 days"})
    rules = table_rules.TableRules.read("t", DeltaTable(path))
    for writer in ("delta-rs", "delta-spark"):
        refused = rules.refusal("append", writer)  # type: ignore[arg-type]
        assert isinstance(refused, TableRefusesWrites) and refused.reason == "rule_unsupported"
        assert "delta.setTransactionRetentionDuration is 'interval 1 days'" in str(refused)
    assert table_rules.TableRules.read("t2", _plain(tmp_path / "t2")).refusal("append") is None


def _plain(path: Path) -> DeltaTable:
    write_deltalake(str(path), pa.table({"id": pa.array([1], pa.int64())}))
    return DeltaTable(str(path))
