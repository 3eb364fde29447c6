"""Whose fault a failed load is, and how a table's own rules are read, without Spark.

A table that refuses the loader's writes, or changes under a load, is not the batch's fault:
such a failure never counts toward quarantine, on either side of the worker-process
boundary, and each kind of refusal keeps its reason (the metric's label). The rules
themselves are read from real Delta tables altered the way other tools alter them.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake._internal import TableFeatures

from loader.core.schema import Column, TableSchema
from loader.core.views import COUNT_COLUMN, ROW_COLUMN
from loader.loading.failures import (
    TableChanged,
    TableRefusesWrites,
    batch_at_fault,
    table_refusal,
    updates_at_fault,
)
from loader.loading.sinks.table_rules import (
    RowRule,
    RuleViolated,
    TableRules,
    commit_error,
    committing,
    native_error,
    open_error,
)
from loader.loading.sinks.view_delta import ViewTable
from loader.loading.spark import SparkUnreachable
from loader.loading.workers.messages import LoadFailure
from loader.ops.metrics import Metrics
from testing.delta_alter import commit_metadata, invariant, protocol_with
from testing.prom import sample_value

IDENTITY = {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.highWaterMark": 2}


def table(path: Path) -> Path:
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])}))
    return path


def rules(path: Path) -> TableRules:
    return TableRules.read("t", DeltaTable(str(path)))


# -- whose fault ------------------------------------------------------------------------------
def test_a_refusal_or_a_changed_table_is_not_the_batch_fault_but_a_violation_is() -> None:
    refused = TableRefusesWrites("t refuses", "append_only", "t")
    changed = TableChanged("t changed")
    violated = RuleViolated("update 3 breaks id_small", RowRule("constraint", "id_small", "id < 1000"), {"id": 5}, 3)
    wrapped = RuntimeError("load failed")
    wrapped.__cause__ = refused
    assert not batch_at_fault(refused) and not batch_at_fault(changed) and not batch_at_fault(wrapped)
    assert batch_at_fault(violated) and batch_at_fault(ValueError("bad row"))
    assert table_refusal(wrapped) is refused and table_refusal(changed) is None
    assert not batch_at_fault(OSError(errno.ENOSPC, "disk full")) and not batch_at_fault(SparkUnreachable("gone"))


@pytest.mark.parametrize(
    "error",
    [
        TableRefusesWrites("table 't' refuses the loader's writes: writer feature 'rowTracking'", "writer_feature"),
        TableChanged("table 't' got a new protocol"),
        RuleViolated("update 4, row 0 violates CHECK constraint c", RowRule("constraint", "c", "x > 0"), None, 4),
    ],
    ids=["refused", "changed", "violated"],
)
def test_the_classification_crosses_the_worker_process_boundary(error: Exception) -> None:
    """A worker sends a LoadFailure (pickled); the service raises what it rebuilds from it,
    and the dispatcher and the metrics class that exactly as the original."""
    import pickle

    try:
        raise RuntimeError("the sink failed") from error
    except RuntimeError as raised:
        failure = pickle.loads(pickle.dumps(LoadFailure.of(raised)))
    rebuilt = failure.error()
    assert batch_at_fault(rebuilt) == batch_at_fault(error)
    original = table_refusal(error)
    found = table_refusal(rebuilt)
    assert (found is None) == (original is None)
    if original is not None and found is not None:
        assert found.reason == original.reason and str(original) in str(found)
    assert updates_at_fault(rebuilt) == updates_at_fault(error)  # (the violation names update 4)


# -- reading the rules ------------------------------------------------------------------------
def test_rules_are_read_from_what_other_tools_wrote(tmp_path: Path) -> None:
    path = table(tmp_path / "t")
    assert rules(path).row_rules == () and rules(path).refusal("append") is None
    DeltaTable(str(path)).alter.add_constraint({"id_small": "id < 1000"})
    commit_metadata(path, column_metadata={"v": invariant("v <> 'bad'")})
    found = rules(path)
    assert found.constraints == (RowRule("constraint", "id_small", "id < 1000"),)
    assert found.invariants == (RowRule("invariant", "v", "v <> 'bad'"),)
    assert (found.min_writer, found.version) == (3, 2)
    assert {"checkConstraints", "invariants", "appendOnly"} <= found.features
    assert found.refusal("append") is None and found.refusal("merge") is None


def test_append_only_lets_appends_through_and_refuses_a_merge(tmp_path: Path) -> None:
    path = table(tmp_path / "t")
    DeltaTable(str(path)).alter.set_table_properties({"delta.appendOnly": "true"})
    found = rules(path)
    assert found.append_only and found.refusal("append") is None
    for writer in ("delta-rs", "delta-spark"):
        refused = found.refusal("merge", writer)  # type: ignore[arg-type]
        assert refused is not None and refused.reason == "append_only"
        assert "delta.appendOnly is true" in str(refused) and "set delta.appendOnly to false" in str(refused)


@pytest.mark.parametrize(
    "feature",
    [TableFeatures.RowTracking, TableFeatures.DomainMetadata, TableFeatures.IdentityColumns],
    ids=["rowTracking", "domainMetadata", "identityColumns"],
)
def test_a_writer_feature_the_loader_does_not_honour_refuses_every_write(tmp_path: Path, feature: object) -> None:
    path = table(tmp_path / "t")
    DeltaTable(str(path)).alter.add_feature(feature, allow_protocol_versions_increase=True)
    found = rules(path)
    [name] = found.features - {"appendOnly", "invariants", "checkConstraints"}
    for write in ("append", "merge"):
        refused = found.refusal(write)  # type: ignore[arg-type]
        assert refused is not None and refused.reason == "writer_feature", write
        assert f"writer feature {name!r}" in str(refused) and f"DROP FEATURE {name}" in str(refused)
    # The native writer is Delta Spark's to judge (it refuses what it does not support itself).
    assert found.refusal("append", "delta-spark") is None


@pytest.mark.parametrize("feature", ["clustering", "inCommitTimestamp", "someFutureFeature"])
def test_features_deltalake_cannot_add_and_unknown_ones_are_refused_by_name(tmp_path: Path, feature: str) -> None:
    path = table(tmp_path / "t")
    commit_metadata(path, protocol=protocol_with(path, feature))
    refused = rules(path).refusal("append")
    assert refused is not None and refused.reason == "writer_feature" and repr(feature) in str(refused)


def test_honoured_features_leave_appends_and_merges_alone(tmp_path: Path) -> None:
    path = table(tmp_path / "t")
    honoured = (TableFeatures.ChangeDataFeed, TableFeatures.TimestampWithoutTimezone, TableFeatures.DeletionVectors)
    for feature in honoured:
        DeltaTable(str(path)).alter.add_feature(feature, allow_protocol_versions_increase=True)
    found = rules(path)
    assert {"changeDataFeed", "timestampNtz", "deletionVectors"} <= found.features
    assert found.refusal("append") is None and found.refusal("merge") is None


def test_identity_columns_and_column_mapping_by_name_are_refused(tmp_path: Path) -> None:
    path = table(tmp_path / "t")
    commit_metadata(
        path,
        column_metadata={"id": IDENTITY},
        protocol={"minReaderVersion": 1, "minWriterVersion": 6},
    )
    refused = rules(path).refusal("append")
    assert refused is not None and "identityColumns" in str(refused) and "version 6" in str(refused)

    other = table(tmp_path / "u")
    commit_metadata(
        other,
        column_metadata={
            "id": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"},
            "v": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-2"},
        },
        configuration={"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"},
        protocol={"minReaderVersion": 2, "minWriterVersion": 5},
    )
    refused = rules(other).refusal("append")
    assert refused is not None and "delta.columnMapping.mode is 'name'" in str(refused)


def test_a_protocol_newer_than_the_loader_knows_and_an_unreadable_invariant_are_refused(tmp_path: Path) -> None:
    found = TableRules("t", 3, 4, 8, frozenset(), False, "none", (), (), (), ())
    refused = found.refusal("append")
    assert refused is not None and "writer version 8" in str(refused)
    path = table(tmp_path / "t")
    commit_metadata(path, column_metadata={"v": {"delta.invariants": "v <> 'bad'"}})  # not the protocol's JSON
    refused = rules(path).refusal("append")
    assert refused is not None and refused.reason == "rule_unsupported" and "not the protocol's JSON" in str(refused)


# -- commits ----------------------------------------------------------------------------------
def test_delta_rs_refusing_a_commit_for_a_changed_table_is_table_changed(tmp_path: Path) -> None:
    """The fence between the check and the commit: a commit against a version older than
    another writer's new metadata fails, as TableChanged, and the next read sees the rule."""
    path = table(tmp_path / "t")
    stale = DeltaTable(str(path))
    checked = TableRules.read("t", stale)
    DeltaTable(str(path)).alter.add_constraint({"id_small": "id < 1000"})
    with pytest.raises(TableChanged, match="after version 0, where the loader checked its rules"):
        with committing(checked):
            stale.create_write_transaction([], "append", stale.schema())
    assert DeltaTable(str(path)).version() == 1
    assert rules(path).constraints[0].name == "id_small"


def test_deltalake_errors_that_blame_the_table_are_classed_as_such() -> None:
    check = RowRule("constraint", "c", "startswith(v, 'a')")
    found = TableRules("t", 3, 1, 3, frozenset(), False, "none", (check,), (), (), ())
    unsupported = commit_error(found, RuntimeError("Unsupported table features required: [RowTracking]"))
    assert isinstance(unsupported, TableRefusesWrites) and unsupported.reason == "writer_feature"
    append_only = commit_error(
        found, RuntimeError("The transaction includes Remove action with data change but Delta table is append-only")
    )
    assert isinstance(append_only, TableRefusesWrites) and append_only.reason == "append_only"
    planning = RuntimeError("Generic DeltaTable error: Error during planning: Invalid function 'startswith'")
    unplannable = commit_error(found, planning, merge=True)
    assert isinstance(unplannable, TableRefusesWrites) and unplannable.reason == "rule_unsupported"
    assert commit_error(found, planning, merge=False) is None
    violated = RuntimeError("Invalid data found: 1 rows failed validation check.")
    assert commit_error(found, violated, merge=True) is None  # the batch's fault
    assert commit_error(found, OSError("disk full")) is None
    unreadable = RuntimeError("Kernel error: Unsupported: Feature 'x' is not supported")
    assert isinstance(open_error("t", unreadable), TableRefusesWrites)
    assert open_error("t", FileNotFoundError("gone")) is None


@pytest.mark.parametrize(
    ("text", "kind", "reason"),
    [
        ("[DELTA_CANNOT_MODIFY_APPEND_ONLY] This table only allows appends.", TableRefusesWrites, "append_only"),
        ("[DELTA_UNSUPPORTED_FEATURES_FOR_WRITE] Unable to write this table ...", TableRefusesWrites, "writer_feature"),
        ("io.delta.exceptions.MetadataChangedException: [DELTA_METADATA_CHANGED] ...", TableChanged, None),
        ("[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint c (x > 0) violated by row with values", None, None),
    ],
)
def test_native_writer_errors_that_blame_the_table_are_classed_as_such(
    text: str, kind: type | None, reason: str | None
) -> None:
    mapped = native_error("t", RuntimeError(text))
    if kind is None:
        assert mapped is None  # Delta's own violation message: the batch's fault
        return
    assert isinstance(mapped, kind) and not batch_at_fault(mapped)
    if reason is not None:
        assert mapped.reason == reason  # type: ignore[union-attr]


def test_a_join_view_table_made_append_only_refuses_its_merge(tmp_path: Path) -> None:
    schema = TableSchema(
        columns=(
            Column(name="id", type="int64"),
            Column(name=ROW_COLUMN, type="string", nullable=False),
            Column(name=COUNT_COLUMN, type="int64", nullable=False),
        )
    )
    view = ViewTable(tmp_path / "v", schema, "v")
    view.ensure()
    assert view.commit({(1,): 1}, {"a": 1}, {})[0] == 1
    DeltaTable(str(tmp_path / "v")).alter.set_table_properties({"delta.appendOnly": "true"})
    with pytest.raises(TableRefusesWrites, match="delta.appendOnly is true") as refused:
        view.commit({(1,): -1}, {"a": 2}, {})
    assert refused.value.reason == "append_only" and DeltaTable(str(tmp_path / "v")).version() == 2


# -- the metric -------------------------------------------------------------------------------
def test_the_refusal_gauge_is_set_per_reason_and_cleared_by_a_load() -> None:
    metrics = Metrics()
    metrics.table_added("t")
    text = lambda: metrics_text(metrics)  # noqa: E731
    assert "loader_table_writes_refused{" not in text()
    metrics.on_writes_refused("t", "append_only")
    assert sample_value(text(), "loader_table_writes_refused", table="t", reason="append_only") == 1
    assert sample_value(text(), "loader_tables_writes_refused", reason="append_only") == 1
    metrics.on_writes_refused("t", "writer_feature")
    assert sample_value(text(), "loader_table_writes_refused", table="t", reason="append_only") == 0
    assert sample_value(text(), "loader_table_writes_refused", table="t", reason="writer_feature") == 1
    metrics.on_writes_refused("t", None)
    assert sample_value(text(), "loader_table_writes_refused", table="t", reason="writer_feature") == 0
    assert sample_value(text(), "loader_tables_writes_refused", reason="writer_feature") == 0


def metrics_text(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()
