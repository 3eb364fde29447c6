"""A join view's Delta table and its loads: one MERGE per view load, exactly once.

The view table (loader/core/views.py) holds one row per distinct output with its number
of copies, keyed by a digest of the output values. A view load's delta (rows with their
change of copies, summed over the load) becomes one MERGE: a row the table lacks is
inserted, a held row's count moves, a row whose count reaches 0 is deleted. The commit
carries one application transaction per input table the load absorbed, (view, table,
the table's last version absorbed): the exactly-once key of a view, read back by
``versions`` (loader/loading/views/maintainer.py). A load whose delta cancels out still
commits, the transactions alone, so the view never lags behind what it holds.

Committed by ``deltalake`` for both writers: the view's rows come from the executor on
the loader's side, so a Spark job would only copy them. The view table's own rules are read
from the handle the MERGE runs against (loader/loading/sinks/table_rules.py): a view table
made append-only, or given a writer feature the loader does not honour, refuses the load
(``TableRefusesWrites``: the view retries with back-off until it is fixed); its CHECK
constraints, invariants and generated columns are checked by delta-rs's MERGE itself, which
refuses a violating row; a protocol or metadata change by another writer meanwhile fails
the commit (``TableChanged``), and the retry checks again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.core.views import COUNT_COLUMN, ROW_COLUMN
from loader.durability.transactions import view_app_id
from loader.loading.sinks.delta_table import create_table, schema_differences
from loader.loading.sinks.table_rules import TableRules, committing, opening


def row_digest(row: tuple) -> str:
    """The MERGE key of an output row: stable across processes (not Python's ``hash``)."""
    return hashlib.blake2b(repr(row).encode(), digest_size=16).hexdigest()


class ViewTable:
    """The Delta table at ``path`` that only the loader writes."""

    def __init__(self, path: Path, schema: TableSchema, view: str, properties: Mapping[str, str] | None = None) -> None:
        self.path, self.schema, self.view = path, schema, view
        #: Table properties of a new view table (the loader's checkpoint interval and log
        #: retention: a view commits as often as its inputs load, and its log ages as theirs).
        self.properties = dict(properties or {})
        self._outputs = [c.name for c in schema.columns if c.name not in (ROW_COLUMN, COUNT_COLUMN)]

    def ensure(self) -> None:
        """Create the table if missing; refuse one with other columns (ValueError)."""
        try:
            existing = DeltaTable(str(self.path))
        except TableNotFoundError:
            create_table(self.path, self.schema.arrow(), properties=self.properties or None)
            return
        differences = schema_differences(existing, self.schema)
        if differences:
            raise ValueError(
                f"the Delta table of view {self.view!r} exists with other columns: " + "; ".join(differences)
            )

    def versions(self, tables: Iterable[str]) -> dict[str, int]:
        """Each input table's last version the view holds (absent: none)."""
        delta = DeltaTable(str(self.path))
        found = {table: delta.transaction_version(view_app_id(self.view, table)) for table in tables}
        return {table: version for table, version in found.items() if version is not None}

    def last_metadata(self, key: str) -> object | None:
        """``key`` of the newest commit that carries it (a view load's), JSON-decoded."""
        for info in DeltaTable(str(self.path)).history(10):
            if key in info:
                return json.loads(info[key])
        return None

    def commit(
        self, changed: Mapping[tuple, int], versions: Mapping[str, int], metadata: Mapping[str, str]
    ) -> tuple[int, int, int]:
        """The module docstring's MERGE; the new version, rows inserted and rows deleted."""
        with opening(self.view):
            delta = DeltaTable(str(self.path))
        rules = TableRules.read(self.view, delta)
        refused = rules.refusal("merge")
        if refused is not None:
            raise refused
        with committing(rules, merge=True):
            return self._merge(delta, changed, versions, metadata)

    def _merge(
        self, delta: DeltaTable, changed: Mapping[tuple, int], versions: Mapping[str, int], metadata: Mapping[str, str]
    ) -> tuple[int, int, int]:
        before = delta.version()
        commit = CommitProperties(
            app_transactions=[Transaction(view_app_id(self.view, t), v) for t, v in sorted(versions.items())],
            custom_metadata=dict(metadata),
        )
        failpoints.hit("view.before-commit")
        inserted = deleted = 0
        if changed:
            rows = list(changed)
            arrow = self.schema.arrow()
            columns = {name: [row[k] for row in rows] for k, name in enumerate(self._outputs)}
            columns[ROW_COLUMN] = [row_digest(row) for row in rows]
            columns[COUNT_COLUMN] = list(changed.values())
            source = pa.Table.from_pydict(columns, schema=arrow)
            t, s = f't."{COUNT_COLUMN}"', f's."{COUNT_COLUMN}"'
            metrics = (
                delta.merge(
                    source,
                    f't."{ROW_COLUMN}" = s."{ROW_COLUMN}"',
                    source_alias="s",
                    target_alias="t",
                    streamed_exec=False,
                    commit_properties=commit,
                )
                .when_matched_delete(predicate=f"{t} + {s} <= 0")
                .when_matched_update(updates={COUNT_COLUMN: f"{t} + {s}"})
                .when_not_matched_insert_all(predicate=f"{s} > 0")
                .execute()
            )
            inserted = int(metrics.get("num_target_rows_inserted", 0))
            deleted = int(metrics.get("num_target_rows_deleted", 0))
        delta.update_incremental()
        if delta.version() == before:  # nothing changed: the transactions alone
            delta.create_write_transaction([], "append", delta.schema(), commit_properties=commit)
            delta.update_incremental()
        failpoints.hit("view.after-commit")
        return delta.version(), inserted, deleted
