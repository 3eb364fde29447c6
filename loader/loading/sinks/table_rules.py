"""What a Delta table declares that every writer must honour, and how the loader honours it.

A table the loader writes may be altered by other tools while it loads (a CHECK constraint
added, ``delta.appendOnly`` set, a table feature enabled), and the Delta protocol
(PROTOCOL.md, "Requirements for Writers" and "Table Features") binds every writer to what
the table declares *now*. So before each commit a sink reads the table's protocol and
metadata from the very handle its commit is made against (``TableRules.read``), and:

- **refuses** a write the table does not allow, or needs a writer feature the loader's
  commit cannot honour (``TableRules.refusal``): the table's fault, not the batch's
  (``TableRefusesWrites``, loader/loading/failures.py), so nothing is quarantined and each
  retry checks again;
- **enforces** its row rules on the batch with Spark SQL, Delta's own dialect
  (``RuleChecks``): CHECK constraints (``delta.constraints.<name>``) and column invariants
  (``delta.invariants``) must evaluate to true (false *and* NULL violate them: the
  protocol's words for invariants, "must return true" for constraints, and what delta-rs
  and Delta Spark do); a generated column (``delta.generationExpression``) is filled from
  the row where it is NULL and must otherwise equal its expression, compared with ``<=>``
  as the protocol says. A violating row fails the batch (``RuleViolated``: the batch's
  fault, so the retry and quarantine path sets it aside) with the rule and the row named;
- **fences** the check against the commit: delta-rs refuses a commit whose table got a new
  protocol or metadata after the version it was read at ("... changed since last commit"),
  which ``committing`` turns into ``TableChanged`` (retried, checked again).

Which writer features the embedded writer honours, and how, is ``HONOURED``; every other
feature, known or not, stops the table's loads with its name and what to do. The native
delta-spark writer enforces the rules itself (Delta Spark is the reference writer): it only
gets the refusal of a MERGE into an append-only table up front, and Delta's own errors for
the table's rules mapped to the same classes (``native_error``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.schema import TableSchema
from loader.core.updates import ARRIVAL_SHIFT, Batch
from loader.loading.failures import RefusalReason, TableChanged, TableRefusesWrites
from loader.loading.sinks.frame import INLINE_ROWS_MAX_BYTES, arrow_frame, spark_struct
from loader.loading.spark import spark_unreachable

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

#: What a load does to the table: appends rows, or MERGEs (updates and inserts: a latest
#: table's upsert, a join view's delta).
WriteKind = Literal["append", "merge"]
Writer = Literal["delta-rs", "delta-spark"]

#: The writer features a protocol below version 7 implies (PROTOCOL.md, "Writer Version Requirements").
LEGACY_WRITER_FEATURES: dict[int, frozenset[str]] = {
    1: frozenset(),
    2: frozenset({"appendOnly", "invariants"}),
    3: frozenset({"appendOnly", "invariants", "checkConstraints"}),
    4: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}),
    5: frozenset(
        {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping"}
    ),
    6: frozenset(
        {
            "appendOnly",
            "invariants",
            "checkConstraints",
            "changeDataFeed",
            "generatedColumns",
            "columnMapping",
            "identityColumns",
        }
    ),
}
MAX_READER_VERSION, MAX_WRITER_VERSION = 3, 7
#: A table property under which Delta expires application transactions (refused: the loader's
#: exactly-once key is its application transaction, loader/durability/transactions.py).
TRANSACTION_EXPIRY = "delta.setTransactionRetentionDuration"

#: Writer features the embedded writer (Spark-written Parquet, deltalake commit) honours, and how.
HONOURED: dict[str, str] = {
    "appendOnly": "appends go on; a MERGE is refused while delta.appendOnly is true",
    "invariants": "every row is checked with Spark SQL before the commit",
    "checkConstraints": "every row is checked with Spark SQL before the commit",
    "generatedColumns": "filled from the row where NULL, otherwise checked with <=> before the commit",
    "changeDataFeed": "appends need no change files (readers derive inserts from add actions); "
    "delta-rs's MERGE writes them",
    "columnMapping": "only in mode none (the Parquet files Spark writes carry the logical column names)",
    "deletionVectors": "appends add files without deletion vectors and remove none; delta-rs's MERGE reads files "
    "through their deletion vectors and rewrites them without (tests/loader/loading/test_upsert_dv.py); the "
    "deletion-vector upsert writes them as the protocol specifies",
    "timestampNtz": "timestamp_ntz columns are written as Parquet TIMESTAMP without UTC adjustment, as the "
    "feature asks",
    "v2Checkpoint": "the loader's commits write classic checkpoints, which the feature allows",
    "variantType": "the loader writes no variant values",
    "variantType-preview": "the loader writes no variant values",
}

#: Why a feature the loader does not honour cannot be honoured, where the reason is known.
NOT_HONOURED: dict[str, str] = {
    "identityColumns": "identity columns need values generated above the high-water mark and the new mark "
    "committed with them, which the loader's deltalake commit cannot do",
    "rowTracking": "row tracking needs baseRowId and defaultRowCommitVersion on every added file and a row-ID "
    "high-water mark in the same commit, which the loader's commits do not write",
    "domainMetadata": "the loader's commit (delta-rs) does not honour domain metadata",
    "clustering": "clustered tables need their clustering domain metadata kept, which the loader's commit "
    "(delta-rs) does not do",
    "icebergCompatV1": "Iceberg compatibility needs column mapping and Parquet files written for it",
    "icebergCompatV2": "Iceberg compatibility needs column mapping and Parquet files written for it",
    "inCommitTimestamp": "in-commit timestamps must lead every commit, which the loader's commit does not write",
    "vacuumProtocolCheck": "the loader's commit (delta-rs) does not support the feature",
    "typeWidening": "the loader's commit (delta-rs) does not support type widening",
    "typeWidening-preview": "the loader's commit (delta-rs) does not support type widening",
    "checkpointProtection": "the loader's commits may clean up the log, which checkpoint protection restricts",
    "allowColumnDefaults": "column defaults must be filled for missing values, and the loader cannot tell a "
    "missing value from a NULL one",
    "catalogManaged": "catalog-managed tables are committed through their catalog, not the file system",
}

#: How to get loads going again after a refusal.
WHAT_TO_DO = (
    "the loader retries the table's loads with back-off and resumes by itself once the table allows them "
    "(the native writer, writer = \"delta-spark\" where Delta's jars are available, honours more of Delta's features)"
)

#: The marker a violating row's ``raise_error`` carries out of a Spark job: rule index,
#: locator (a latest table's row arrival, or "-"), the row as JSON.
VIOLATION = re.compile(r"LOADER_RULE_VIOLATED#(\d+)#(-|-?\d+)#(.*?)#LOADER_ROW_END", re.S)
#: A column added beside the table's while locating a violating row (never written).
LOCATOR = "__loader_locator"
#: Characters of a violating row shown in its error (a row may hold large strings).
ROW_SHOWN_CHARS = 2000


@dataclass(frozen=True)
class RowRule:
    """One rule a written row must satisfy: a CHECK constraint, a column invariant, or a
    generated column's expression (Spark SQL text as the table holds it)."""

    kind: Literal["constraint", "invariant", "generated"]
    #: The constraint's name, or the column the invariant or generation belongs to.
    name: str
    expression: str

    def describe(self) -> str:
        if self.kind == "constraint":
            return f"CHECK constraint {self.name} ({self.expression})"
        if self.kind == "invariant":
            return f"the invariant of column {self.name!r} ({self.expression})"
        return f"generated column {self.name!r} (GENERATED ALWAYS AS ({self.expression}))"

    def semantics(self) -> str:
        if self.kind == "generated":
            return (
                "the loader fills the column from the row where it is NULL; a value given must equal the "
                "expression (<=>, so NULL only where the expression is NULL)"
            )
        return "a row satisfies it only where the expression is true: false and NULL both violate it"

    def violation_sql(self, schema: TableSchema) -> str:
        """A Spark SQL predicate true for a row that breaks the rule (after generated columns are filled)."""
        if self.kind == "generated":
            column = _column_type(schema, self.name)
            return f"NOT (`{self.name}` <=> CAST(({self.expression}) AS {column}))"
        return f"NOT coalesce(({self.expression}), false)"


def _column_type(schema: TableSchema, name: str) -> str:
    for column in schema.columns:
        if column.name == name:
            return column.type.spark
    raise KeyError(name)


@dataclass(frozen=True)
class TableRules:
    """A table's protocol and metadata as of ``version``: what the loader must honour there."""

    table: str
    version: int
    min_reader: int
    min_writer: int
    #: Writer features in force: the protocol's list at version 7, the ones its version implies below.
    features: frozenset[str]
    append_only: bool
    column_mapping: str
    constraints: tuple[RowRule, ...]
    invariants: tuple[RowRule, ...]
    generated: tuple[RowRule, ...]
    identity_columns: tuple[str, ...]
    #: Rules the table declares in a form the loader cannot read (what, and why).
    unreadable: tuple[str, ...] = ()
    #: ``delta.setTransactionRetentionDuration``, when the table sets one: Delta then expires
    #: application transactions, the loader's exactly-once key among them.
    transaction_expiry: str | None = None
    #: ``delta.enableDeletionVectors`` as the table sets it (None: unset); the protocol lets
    #: writers write deletion vectors only while it is true.
    deletion_vectors_enabled: str | None = None

    @classmethod
    def read(cls, table: str, delta: DeltaTable) -> TableRules:
        """The rules of ``delta``'s snapshot: the version the sink's commit is made against."""
        protocol = delta.protocol()
        metadata = delta.metadata()
        configuration = dict(metadata.configuration)
        fields = json.loads(delta.schema().to_json())["fields"]
        writer = int(protocol.min_writer_version)
        if writer >= 7:
            features = frozenset(protocol.writer_features or ())
        else:
            features = LEGACY_WRITER_FEATURES[max(writer, 1)]
        constraints = tuple(
            RowRule("constraint", key.removeprefix("delta.constraints."), value)
            for key, value in sorted(configuration.items())
            if key.startswith("delta.constraints.")
        )
        invariants: list[RowRule] = []
        generated: list[RowRule] = []
        identity: list[str] = []
        unreadable: list[str] = []
        for field in fields:
            meta: dict[str, Any] = field.get("metadata") or {}
            name = field["name"]
            if "delta.invariants" in meta:
                try:
                    expression = json.loads(meta["delta.invariants"])["expression"]["expression"]
                    invariants.append(RowRule("invariant", name, str(expression)))
                except (TypeError, KeyError, ValueError):
                    raw = meta["delta.invariants"]
                    unreadable.append(f"the invariant of column {name!r} is not the protocol's JSON: {raw!r}")
            if "delta.generationExpression" in meta:
                generated.append(RowRule("generated", name, str(meta["delta.generationExpression"])))
            if any(key.startswith("delta.identity.") for key in meta):
                identity.append(name)
        return cls(
            table=table,
            version=int(delta.version()),
            min_reader=int(protocol.min_reader_version),
            min_writer=writer,
            features=features,
            # Stricter than the letter of protocol version 7 (which asks for the feature too):
            # a table whose property says append-only is not rewritten by the loader.
            append_only=configuration.get("delta.appendOnly", "false").strip().lower() == "true",
            column_mapping=configuration.get("delta.columnMapping.mode", "none").strip().lower(),
            transaction_expiry=configuration.get(TRANSACTION_EXPIRY),
            deletion_vectors_enabled=configuration.get("delta.enableDeletionVectors"),
            constraints=constraints,
            invariants=tuple(invariants),
            generated=tuple(generated),
            identity_columns=tuple(identity),
            unreadable=tuple(unreadable),
        )

    @property
    def row_rules(self) -> tuple[RowRule, ...]:
        """Every rule a row is checked against, in the order they are checked (a generated
        column's value is checked before the constraints that may read it)."""
        return (*self.generated, *self.invariants, *self.constraints)

    def refuse(self, reason: RefusalReason, what: str) -> TableRefusesWrites:
        """The refusal of this table's writes for ``what`` it declares, with how loads resume."""
        return TableRefusesWrites(
            f"table {self.table!r} (Delta version {self.version}) refuses the loader's writes: {what}; {WHAT_TO_DO}",
            reason,
            self.table,
        )

    def refusal(self, write: WriteKind, writer: Writer = "delta-rs") -> TableRefusesWrites | None:
        """Why the table must not get this write from this writer now, or None.

        The native writer enforces the table's features itself (Delta Spark refuses what it
        does not support, ``native_error``); it is refused up front only a MERGE into an
        append-only table, as the embedded writer is.
        """
        if writer == "delta-rs":
            refused = self._feature_refusal(write)
            if refused is not None:
                return refused
        if self.transaction_expiry is not None:  # both writers: the key is the loader's, not theirs
            return self.refuse(
                "rule_unsupported",
                f"{TRANSACTION_EXPIRY} is {self.transaction_expiry!r}, so Delta forgets application transactions "
                "older than that, and the loader's exactly-once key is one (a batch replayed after a crash, or an "
                "update retried, would load twice once its table's transaction expired); unset the property to let "
                "the loader write",
            )
        if write == "merge" and self.append_only:
            return self.refuse(
                "append_only",
                "delta.appendOnly is true, and a MERGE (a latest table's upsert, a join view's delta) updates and "
                "deletes rows, which an append-only table forbids; set delta.appendOnly to false to let the table "
                "take upserts, or declare it an append table",
            )
        if writer == "delta-rs" and self.unreadable:
            return self.refuse("rule_unsupported", "; ".join(self.unreadable))
        return None

    def _feature_refusal(self, write: WriteKind) -> TableRefusesWrites | None:
        if self.min_reader > MAX_READER_VERSION or self.min_writer > MAX_WRITER_VERSION:
            return self.refuse(
                "writer_feature",
                f"its protocol (reader version {self.min_reader}, writer version {self.min_writer}) is newer than "
                f"the Delta protocol the loader knows (reader {MAX_READER_VERSION}, writer {MAX_WRITER_VERSION})",
            )
        implied = f" (implied by protocol writer version {self.min_writer})" if self.min_writer < 7 else ""
        for feature in sorted(self.features):
            if feature in HONOURED:
                continue
            why = NOT_HONOURED.get(feature, "the loader does not know this feature, so it cannot honour it")
            return self.refuse(
                "writer_feature",
                f"it needs writer feature {feature!r}{implied}: {why}; drop the feature from the table "
                f"(Delta Lake: ALTER TABLE ... DROP FEATURE {feature})",
            )
        if self.identity_columns:
            return self.refuse(
                "writer_feature",
                f"column(s) {', '.join(map(repr, self.identity_columns))} are identity columns: "
                + NOT_HONOURED["identityColumns"],
            )
        if self.column_mapping not in ("", "none"):
            return self.refuse(
                "writer_feature",
                f"delta.columnMapping.mode is {self.column_mapping!r}: the Parquet files Spark writes for the loader "
                "name their columns logically and carry no field ids, which column mapping readers would read as "
                "nulls; the loader writes tables in column mapping mode none only",
            )
        return None


class RuleViolated(ValueError):
    """Rows of the batch break rules the table declares: the batch's fault, with the rule,
    its expression and the first such row named, and every update found to hold such a row
    named with its own first violating row (``updates_at_fault``), so that the dispatcher
    sets each of them aside at once instead of finding them one failed load at a time."""

    def __init__(
        self,
        message: str,
        rule: RowRule,
        row: dict[str, Any] | None,
        seq: int | None,
        updates_at_fault: dict[int, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.rule = rule
        self.row = row
        self.seq = seq
        #: The updates to blame, each with why (``loader.loading.failures.updates_at_fault``).
        self.updates_at_fault: dict[int, str] = (
            dict(updates_at_fault) if updates_at_fault else ({seq: message} if seq is not None else {})
        )


#: At most this many violating rows are fetched to name the updates at fault in one failed
#: load; updates past them are named by the next failure of the batch's later part.
VIOLATIONS_NAMED = 1000


class RuleChecks:
    """Evaluates tables' row rules with Spark SQL on batch frames, for one sink's session.

    The check runs inside the load's own Spark job (a ``raise_error`` where a row breaks a
    rule, as the frame's NOT NULL check does), so a table with rules costs no extra job; only
    a batch that fails pays for finding its first violating row. Each new set of rules is
    analysed once first, so a rule Spark cannot evaluate (a column the loader's schema
    lacks, a syntax error) stops the table's loads rather than failing its batches.
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._analysed: set[tuple[object, ...]] = set()

    def applied(
        self, frame: DataFrame, rules: TableRules, schema: TableSchema, locator: str | None = None
    ) -> DataFrame:
        """``frame`` (the table's columns, plus ``locator`` if named) with generated columns
        filled and every row checked; lazily evaluated, like the frame itself."""
        if not rules.row_rules:
            return frame
        self.analyse(rules, schema)
        return _checked(_filled(frame, rules, schema, locator), rules, schema, locator)

    def analyse(self, rules: TableRules, schema: TableSchema) -> None:
        """Refuse the table's writes (``rule_unsupported``) if Spark cannot evaluate its rules
        on the loader's columns."""
        key = (rules.table, rules.row_rules, schema.model_dump_json())
        if key in self._analysed:
            return
        from pyspark.errors import AnalysisException

        missing = [r.name for r in rules.generated if r.name not in schema.names]
        if missing:
            raise rules.refuse(
                "rule_unsupported",
                f"generated column(s) {', '.join(map(repr, missing))} are not columns of the loader's schema, so the "
                "loader cannot fill them",
            )
        empty = self.spark.createDataFrame([], spark_struct(schema))
        try:
            _ = _checked(_filled(empty, rules, schema, None), rules, schema, None).schema
        except AnalysisException as exc:
            culprit = self._culprit(empty, rules, schema)
            what = culprit.describe() if culprit is not None else "one of its rules"
            raise rules.refuse(
                "rule_unsupported",
                f"Spark SQL cannot evaluate {what} on the loader's columns ({_first_line(exc)}); change the rule, or "
                "the table's columns, to ones the loader's schema has",
            ) from exc
        self._analysed.add(key)

    def _culprit(self, empty: DataFrame, rules: TableRules, schema: TableSchema) -> RowRule | None:
        from pyspark.errors import AnalysisException

        filled = empty
        with contextlib.suppress(AnalysisException):
            filled = _filled(empty, rules, schema, None)
            _ = filled.schema
        for rule in rules.row_rules:
            try:
                _ = filled.selectExpr(rule.violation_sql(schema)).schema
            except AnalysisException:
                return rule
        return None

    def explain(
        self,
        error: BaseException,
        rules: TableRules,
        schema: TableSchema,
        batch: Batch,
        scratch: Path,
        arrivals: Callable[[], pa.Table] | None = None,
        located: DataFrame | None = None,
    ) -> RuleViolated | None:
        """The rule violation that failed a load, with its row and every update at fault;
        None when ``error`` is something else.

        The rows are searched once more (one more Spark job, only on this failure path):
        ``located``, a frame of the table's columns and each row's arrival as ``LOCATOR``
        (a latest table's newest rows), or ``arrivals``, the batch's in-memory and spilled
        rows with their arrival as a last column (an append's). Rows that came from a
        landing file carry no arrival: the violation is then named by the row the job met.
        """
        found = _violation_in(error)
        if found is None or not rules.row_rules:
            return None
        index, locator, row_text = found
        checked = rules.row_rules
        if index >= len(checked):
            return None
        rule = checked[index]
        row = _json_row(row_text)
        seq = position = None
        if locator is not None:
            seq, position = locator >> ARRIVAL_SHIFT, locator & ((1 << ARRIVAL_SHIFT) - 1)
        at_fault: dict[int, str] = {}
        if located is not None or arrivals is not None:
            try:
                frame = located if located is not None else self._arrival_frame(schema, arrivals(), scratch)  # type: ignore[misc]
                violations = self.violations(rules, schema, frame) if frame is not None else []
            except Exception as exc:  # the first row the job met is still worth reporting
                if spark_unreachable(exc):
                    raise
                log.warning(
                    "could not search %s updates %d..%d for the rows at fault: %s",
                    batch.table,
                    batch.first_seq,
                    batch.last_seq,
                    exc,
                )
                violations = []
            updates = {u.seq: u for u in batch.updates}
            for v_seq, v_position, v_index, v_row in violations:
                if v_seq not in at_fault and v_seq in updates:  # (its own words, should it be set aside alone)
                    alone = Batch(batch.table, (updates[v_seq],))
                    at_fault[v_seq] = _violation_message(rules, checked[v_index], alone, v_row, v_seq, v_position)
            if violations and seq is None:
                seq, position, index, row = violations[0]
                rule = checked[index]
        shown = row if row is not None else row_text
        message = _violation_message(rules, rule, batch, shown, seq, position)
        if seq is not None and seq not in at_fault:
            at_fault[seq] = message
        return RuleViolated(message, rule, row, seq, at_fault)

    def _arrival_frame(self, schema: TableSchema, arrived: pa.Table, scratch: Path) -> DataFrame | None:
        """The table's columns and each row's arrival (``LOCATOR``) as a Spark frame."""
        rows = arrived.rename_columns([*schema.names, LOCATOR])
        if rows.num_rows == 0:
            return None
        struct = spark_struct(schema)
        from pyspark.sql.types import LongType, StructField

        struct = struct.add(StructField(LOCATOR, LongType(), True))
        if rows.nbytes <= INLINE_ROWS_MAX_BYTES:
            return arrow_frame(self.spark, rows, struct)
        scratch.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, scratch / "locate.parquet", compression="none")
        return self.spark.read.schema(struct).parquet(str(scratch / "locate.parquet"))

    def violations(
        self, rules: TableRules, schema: TableSchema, frame: DataFrame
    ) -> list[tuple[int, int, int, dict[str, Any]]]:
        """The first ``VIOLATIONS_NAMED`` rows of ``frame`` (the table's columns, then each
        row's arrival as ``LOCATOR``) by arrival that break a rule: (update sequence,
        position, the first rule broken's index, row)."""
        cases = " ".join(f"WHEN {rule.violation_sql(schema)} THEN {i}" for i, rule in enumerate(rules.row_rules))
        broken = "__loader_rule"
        hits = (
            _filled(frame, rules, schema, LOCATOR)
            .selectExpr("*", f"CASE {cases} END AS {broken}")
            .where(f"{broken} IS NOT NULL")
            .orderBy(LOCATOR)
            .limit(VIOLATIONS_NAMED)
            .toArrow()
        )
        out = []
        for found in hits.to_pylist():
            index = int(found.pop(broken))
            arrival = int(found.pop(LOCATOR))
            out.append((arrival >> ARRIVAL_SHIFT, arrival & ((1 << ARRIVAL_SHIFT) - 1), index, found))
        return out


def _filled(frame: DataFrame, rules: TableRules, schema: TableSchema, locator: str | None) -> DataFrame:
    """Generated columns computed from the row where they are NULL (the loader cannot tell a
    value left out from a NULL given; a NULL given where the expression is not NULL would
    break the rule, so filling it is what Delta Spark does for a column left out)."""
    if not rules.generated:
        return frame
    expressions = {r.name: r.expression for r in rules.generated}
    columns = []
    for column in schema.columns:
        name = f"`{column.name}`"
        if column.name in expressions:
            kind = column.type.spark
            columns.append(
                f"CASE WHEN {name} IS NULL THEN CAST(({expressions[column.name]}) AS {kind}) ELSE {name} END AS {name}"
            )
        else:
            columns.append(name)
    if locator is not None:
        columns.append(f"`{locator}`")
    return frame.selectExpr(*columns)


def _checked(frame: DataFrame, rules: TableRules, schema: TableSchema, locator: str | None) -> DataFrame:
    """Every row checked against every rule in one projection: the first rule a row breaks
    raises an error carrying the rule's index, the row's locator and the row as JSON."""
    names = [f"`{n}`" for n in schema.names]
    row_json = f"substring(to_json(struct({', '.join(names)}), map('ignoreNullFields', 'false')), 1, {ROW_SHOWN_CHARS})"
    where = f"coalesce(CAST(`{locator}` AS STRING), '-')" if locator is not None else "'-'"
    cases = " ".join(
        f"WHEN {rule.violation_sql(schema)} THEN "
        f"raise_error(concat('LOADER_RULE_VIOLATED#{i}#', {where}, '#', {row_json}, '#LOADER_ROW_END'))"
        for i, rule in enumerate(rules.row_rules)
    )
    first, rest = names[0], names[1:]
    columns = [f"CASE {cases} ELSE {first} END AS {first}", *rest]
    if locator is not None:
        columns.append(f"`{locator}`")
    return frame.selectExpr(*columns)


def _violation_in(error: BaseException) -> tuple[int, int | None, str] | None:
    from loader.core.errors import causes

    for cause in causes(error):
        match = VIOLATION.search(str(cause))
        if match is not None:
            locator = None if match.group(2) == "-" else int(match.group(2))
            return int(match.group(1)), locator, match.group(3)
    return None


def _json_row(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _violation_message(
    rules: TableRules,
    rule: RowRule,
    batch: Batch,
    row: dict[str, Any] | str | None,
    seq: int | None,
    position: int | None,
) -> str:
    if row is None:
        shown = "(its values could not be read)"
    else:
        shown = row if isinstance(row, str) else json.dumps(row, default=str, ensure_ascii=False)
        if len(shown) > ROW_SHOWN_CHARS:
            shown = shown[:ROW_SHOWN_CHARS] + "... (cut)"
    if seq is not None:
        where = f"update {seq}, row {position}" if position is not None else f"update {seq}"
    elif len(batch.updates) == 1:
        where = f"update {batch.first_seq} (a row of its landing files)"
    else:
        where = f"a row of the landing files of updates {batch.first_seq}..{batch.last_seq}"
    return (
        f"{where} of table {rules.table!r} violates {rule.describe()} (Delta version {rules.version}; "
        f"{rule.semantics()}): {shown}. Nothing of updates {batch.first_seq}..{batch.last_seq} was committed; "
        "correct the row at its producer, or the table's rule, then retry the quarantined update(s)"
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- opening and commits ----------------------------------------------------------------------
#: delta-rs's (delta-kernel's) words when it cannot even read the table's snapshot for what it declares.
UNREADABLE_TABLE_WORDS = ("Unsupported: Feature", "catalog-managed", "Unsupported reader features")


def open_error(table: str, error: BaseException) -> TableRefusesWrites | None:
    """A table deltalake cannot open for a feature it does not read (a reader feature it does
    not know, a catalog-managed table): the table's fault, or None."""
    text = str(error)
    if not any(word in text for word in UNREADABLE_TABLE_WORDS):
        return None
    return TableRefusesWrites(
        f"table {table!r} refuses the loader's writes: deltalake cannot read its snapshot ({_first_line(error)}), "
        f"so the loader cannot check or commit to it; drop the feature from the table; {WHAT_TO_DO}",
        "writer_feature",
        table,
    )


@contextlib.contextmanager
def opening(table: str) -> Iterator[None]:
    """Opening (or bringing up to date) the table's deltalake handle, a table it cannot read
    raised as ``TableRefusesWrites``."""
    try:
        yield
    except Exception as exc:
        mapped = open_error(table, exc)
        if mapped is None:
            raise
        raise mapped from exc


# -- commits ----------------------------------------------------------------------------------
#: delta-rs's words for a commit refused because the table's protocol or metadata moved on.
CHANGED_WORDS = ("changed since last commit",)
#: delta-rs's words when DataFusion cannot plan a rule's expression (its MERGE checks the rules itself).
UNPLANNABLE_WORDS = ("Error during planning", "This feature is not implemented", "Schema error", "SQL error")


def commit_error(rules: TableRules, error: BaseException, merge: bool = False) -> BaseException | None:
    """The table-level meaning of a failed deltalake commit or MERGE, or None if it has none."""
    text = str(error)
    table = rules.table
    if any(word in text for word in CHANGED_WORDS):
        return TableChanged(
            f"table {table!r} got a new protocol or metadata from another writer after version {rules.version}, "
            f"where the loader checked its rules, so the commit was refused ({_first_line(error)}); the load is "
            "retried and checks the table's rules again"
        )
    if "Unsupported table features" in text or "Unsupported reader features" in text:
        return rules.refuse("writer_feature", f"delta-rs refuses to commit to it: {_first_line(error)}")
    if "append-only" in text or "append only" in text.lower():
        return rules.refuse("append_only", f"delta-rs refuses to change rows of it: {_first_line(error)}")
    if merge and rules.row_rules and "failed validation check" not in text:
        if any(word in text for word in UNPLANNABLE_WORDS):
            return rules.refuse(
                "rule_unsupported",
                "the MERGE is committed by delta-rs, which checks the table's rules itself in DataFusion SQL and "
                f"cannot evaluate one of them ({_first_line(error)}); use rules both Spark SQL and DataFusion SQL "
                "evaluate, or the native writer",
            )
    return None


@contextlib.contextmanager
def committing(rules: TableRules, merge: bool = False) -> Iterator[None]:
    """A deltalake commit (or MERGE) against the handle ``rules`` were read from, with its
    table-level failures raised as ``TableChanged`` or ``TableRefusesWrites``."""
    try:
        yield
    except Exception as exc:
        mapped = commit_error(rules, exc, merge)
        if mapped is None:
            raise
        raise mapped from exc


#: Delta Spark's error classes that say the table, not the batch, failed the write.
NATIVE_CHANGED = (
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
    "MetadataChangedException",
    "ProtocolChangedException",
)
NATIVE_REFUSALS: tuple[tuple[str, RefusalReason], ...] = (
    ("DELTA_CANNOT_MODIFY_APPEND_ONLY", "append_only"),
    ("DELTA_UNSUPPORTED_FEATURES_FOR_WRITE", "writer_feature"),
    ("DELTA_UNSUPPORTED_FEATURES_FOR_READ", "writer_feature"),
    ("DELTA_INVALID_PROTOCOL_VERSION", "writer_feature"),
)


def native_error(table: str, error: BaseException) -> BaseException | None:
    """The table-level meaning of a failed native (delta-spark) write, or None.

    Delta Spark enforces the table's rules itself: a violated constraint, invariant or
    generation expression stays the batch's fault, with Delta's own message (which names
    the constraint and the row's values).
    """
    text = str(error)
    if any(word in text for word in NATIVE_CHANGED):
        return TableChanged(
            f"table {table!r} got a new protocol or metadata from another writer during the load "
            f"({_first_line(error)}); the load is retried"
        )
    for word, reason in NATIVE_REFUSALS:
        if word in text:
            return TableRefusesWrites(
                f"table {table!r} refuses the loader's writes: Delta Spark says {_first_line(error)}; {WHAT_TO_DO}",
                reason,
                table,
            )
    return None


@contextlib.contextmanager
def native_writing(table: str) -> Iterator[None]:
    """A native write, with its table-level failures raised as the loader's classes."""
    try:
        yield
    except Exception as exc:
        mapped = native_error(table, exc)
        if mapped is None:
            raise
        raise mapped from exc
