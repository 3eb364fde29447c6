"""What both writer paths share: table layout, creation and schema checks, the txn read.

All of it goes through the ``deltalake`` package, which reads any Delta log, so these
answers do not depend on whether Delta's JVM classes are present.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import TableNotFoundError

from loader.core.durable_files import fsync_directory
from loader.core.evolution import nested_change
from loader.core.schema import TableSchema, parse_type
from loader.core.updates import Batch
from loader.durability.transactions import app_id
from loader.loading.sinks.view_join import ViewJob, run_view_job
from loader.loading.spark import DEFAULT_LEAN, lean_changes, use_pool

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Hidden from Delta readers and vacuum (a leading dot), unique per load.
STAGING_PREFIX = ".staging-"


def _fields(schema: DeltaSchema) -> dict[str, tuple[str, bool]]:
    """Column name -> (Delta type as JSON text, nullable)."""
    fields = json.loads(schema.to_json())["fields"]
    return {
        f["name"]: (
            f["type"] if isinstance(f["type"], str) else json.dumps(f["type"]),
            bool(f["nullable"]),
        )
        for f in fields
    }


def _has_nested_ntz(kind: pa.DataType, nested: bool = False) -> bool:
    if pa.types.is_struct(kind):
        return any(_has_nested_ntz(f.type, True) for f in kind)
    if pa.types.is_map(kind):
        return _has_nested_ntz(kind.key_type, True) or _has_nested_ntz(kind.item_type, True)
    if pa.types.is_list(kind):
        return _has_nested_ntz(kind.value_type, True)
    return nested and pa.types.is_timestamp(kind) and kind.tz is None


#: The table property under which Delta writers write deletion vectors (Delta Spark's MERGE too).
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"


def create_table(
    path: Path,
    schema: pa.Schema,
    partition_by: list[str] | None = None,
    name: str | None = None,
    properties: dict[str, str] | None = None,
    features: tuple[str, ...] = (),
) -> None:
    """A new Delta table at ``path`` (``DeltaTable.create``, mode "error"), with the table
    ``properties`` (its metadata's configuration) given, and reader-writer table ``features``
    (``deletionVectors``) in its protocol from its first commit.

    deltalake 1.6 asks for Delta's ``timestampNtz`` feature only for a top-level timestamp_ntz
    column, then refuses its own new table when one is nested in a struct, array or map
    ("Table contains TIMESTAMP_NTZ columns but does not have the required 'timestampNtz'
    feature"). For such a schema the same first commit is written here: the protocol with the
    feature in reader and writer features (3/7, as deltalake writes it for a flat column), the
    table's metadata, created exclusively (a hard link that fails if the commit exists)."""
    if not features and not any(_has_nested_ntz(f.type) for f in schema):
        DeltaTable.create(
            str(path), schema, mode="error", partition_by=partition_by or None, name=name, configuration=properties
        )
        return
    log_dir = path / "_delta_log"
    log_dir.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    # (deltalake's own create, given delta.enableDeletionVectors, lists every feature it knows:
    # variantType, appendOnly, invariants too, a needless bar to older readers)
    wanted = [*(["timestampNtz"] if any(_has_nested_ntz(f.type, True) for f in schema) else []), *features]
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": wanted, "writerFeatures": wanted}
    metadata = {
        "id": str(uuid.uuid4()),
        "name": name,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": DeltaSchema.from_arrow(schema).to_json(),
        "partitionColumns": list(partition_by or []),
        "createdTime": now,
        "configuration": dict(properties or {}),
    }
    info = {
        "timestamp": now,
        "operation": "CREATE TABLE",
        "operationParameters": {
            "mode": "ErrorIfExists",
            "location": path.resolve().as_uri(),
            "protocol": json.dumps(protocol),
            "metadata": json.dumps(metadata),
        },
        "engineInfo": "loader",
    }
    text = "".join(json.dumps(a) + "\n" for a in ({"commitInfo": info}, {"protocol": protocol}, {"metaData": metadata}))
    first = log_dir / f"{0:020d}.json"
    tmp = log_dir / f".{first.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write(text.encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, first)  # FileExistsError: the table exists
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(log_dir)


def _grows(have: str, want: str) -> bool:
    """Whether a column of Delta type ``have`` (JSON text) becomes ``want`` as the loader evolves
    a column: the same type, or a nested type with new nullable fields (evolution.nested_change)."""
    if have == want:
        return True
    if not (have.startswith("{") and want.startswith("{")):
        return False
    problems, _ = nested_change(parse_type(json.loads(have)), parse_type(json.loads(want)), "")
    return not problems


def _nullability(nullable: bool) -> str:
    return "nullable" if nullable else "NOT NULL"


def schema_differences(table: DeltaTable, schema: TableSchema) -> list[str]:
    """How an existing table differs from the configured schema (column order aside)."""
    have = _fields(table.schema())
    want = _fields(DeltaSchema.from_arrow(schema.arrow()))
    out = [f"column {n!r} is missing from the table" for n in want if n not in have]
    out += [f"the table has column {n!r}, which the configured schema lacks" for n in have if n not in want]
    for name in (n for n in want if n in have):
        (t_have, null_have), (t_want, null_want) = have[name], want[name]
        if t_have != t_want:
            out.append(f"column {name!r} is {t_have} in the table but {t_want} in the configured schema")
        if null_have != null_want:
            out.append(
                f"column {name!r} is {_nullability(null_have)} in the table "
                f"but {_nullability(null_want)} in the configured schema"
            )
    parts = list(table.metadata().partition_columns)
    if parts != list(schema.partition_by):
        wanted = list(schema.partition_by)
        out.append(f"the table is partitioned by {parts}, the configured schema by {wanted}")
    return out


class DeltaTables:
    """The warehouse's Delta tables as the loader checks them, without Spark: paths, creation
    with a schema, schema checks and the application transaction's version.

    The service process uses this alone when loads run in worker processes
    (loader/loading/workers/pool.py); the Spark-backed sinks build on it.
    """

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = Path(warehouse)
        #: Delta table properties a table this creates starts with (``[loading] checkpoint_interval``).
        self.table_properties: dict[str, str] = {}

    def table_path(self, table: str) -> Path:
        return self.warehouse / table

    def open(self, table: str) -> DeltaTable | None:
        path = self.table_path(table)
        if not (path / "_delta_log").is_dir():
            return None  # no table (deltalake takes 1.5 ms to say so: a third of a registration)
        try:
            return DeltaTable(str(path))
        except TableNotFoundError:
            return None

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        existing = self.open(table)
        if existing is None:
            path = self.table_path(table)
            path.mkdir(parents=True, exist_ok=True)
            properties, features = dict(self.table_properties), ()
            if schema.upsert == "deletion-vectors":  # (the native writer's MERGE writes them too)
                properties[ENABLE_DELETION_VECTORS], features = "true", ("deletionVectors",)
            create_table(path, schema.arrow(), list(schema.partition_by), table, properties, features)
            return
        differences = schema_differences(existing, schema)
        if differences:
            raise ValueError(
                f"Delta table {table!r} at {self.table_path(table)} exists with another schema: "
                + "; ".join(differences)
            )

    def evolve_table(self, table: str, schema: TableSchema) -> bool:
        """Bring the Delta table up to ``schema`` where ``schema`` evolved from its schema as the
        loader evolves schemas (loader/core/evolution.py: nullable columns after the others, NOT
        NULL relaxed). The columns added are one metadata commit (deltalake's schema merge of an
        empty append); each column made nullable one more (the merge keeps a NOT NULL), so a
        reader may meet the new columns a moment before a NOT NULL goes, while the table's loads
        wait; whatever a crash leaves undone, the next call does. False when the table is on
        ``schema`` already; ValueError (as ``ensure_table``) when it is on a schema that
        ``schema`` does not evolve from."""
        existing = self.open(table)
        if existing is None:
            raise ValueError(f"Delta table {table!r} at {self.table_path(table)} does not exist")
        have = _fields(existing.schema())
        want = _fields(DeltaSchema.from_arrow(schema.arrow()))
        behind = (
            list(want)[: len(have)] == list(have)
            and all(_grows(have[n][0], want[n][0]) and (want[n][1] or not have[n][1]) for n in have)
            and all(want[n][1] for n in list(want)[len(have) :])
            and list(existing.metadata().partition_columns) == list(schema.partition_by)
        )
        if have == want and behind:
            return False
        if not behind:
            raise ValueError(
                f"Delta table {table!r} at {self.table_path(table)} exists with another schema: "
                + "; ".join(schema_differences(existing, schema))
            )
        path = str(self.table_path(table))
        if len(want) > len(have) or any(have[n][0] != want[n][0] for n in have):  # (a nested column's new fields too)
            write_deltalake(path, schema.arrow().empty_table(), mode="append", schema_mode="merge")
        now = _fields(DeltaTable(path).schema())
        for name in [n for n in have if want[n][1] and not now[n][1]]:
            DeltaTable(path).alter.drop_column_not_null(name)
        log.info("table %r: the Delta table's schema is now the declared one (%d columns)", table, len(want))
        return True

    def committed_seq(self, table: str) -> int:
        existing = self.open(table)
        return 0 if existing is None else existing.transaction_version(app_id(table)) or 0


def remove_staging(path: Path) -> int:
    """Remove the staging directories that crashed loads left in table directory ``path``;
    only while no load of that table runs. Returns how many there were."""
    stale = [p for p in path.glob(f"{STAGING_PREFIX}*") if p.is_dir()] if path.is_dir() else []
    for directory in stale:
        log.info("removing staging directory %s left by an interrupted load", directory)
        shutil.rmtree(directory, ignore_errors=True)
    # A direct log commit's entry written but not linked in (loader/loading/sinks/log_commit.py):
    # no reader looks at a dot file, and the version it was for is another's or free again.
    for entry in (path / "_delta_log").glob(".*.json.*.tmp") if path.is_dir() else []:
        entry.unlink(missing_ok=True)
    return len(stale)


class DeltaSinkBase(DeltaTables):
    """``DeltaTables`` plus the Spark session and FAIR pools of a Spark-backed sink.

    ``lean`` names the lean changes (loader/loading/spark.py ``LEAN_CHANGES``) the sink's
    code paths follow; a plain attribute, so a benchmark can switch them between loads.
    """

    name = "delta"

    def __init__(self, warehouse: Path, spark: SparkSession, lean: Iterable[str] = DEFAULT_LEAN) -> None:
        super().__init__(warehouse)
        self.spark = spark
        self.lean = lean_changes(lean)

    def use_pool(self, name: str) -> None:
        """Called by each worker thread with its pool name (``worker-<i>``) before loading."""
        use_pool(self.spark, name)

    def join_view(self, job: ViewJob) -> pa.Table:
        return run_view_job(self.spark, job)


def unloaded_part(batch: Batch, committed: int) -> Batch | None:
    """What Delta does not hold yet of ``batch`` given the table's transaction version.

    A whole batch at or below the version was committed before a crash (skip it). A batch
    straddling it is a retry whose first attempt committed after all (e.g. the worker
    failed after the commit) and that newer updates have since joined: only they are
    written, or the earlier ones would be loaded twice.
    """
    rest = tuple(u for u in batch.updates if u.seq > committed)
    if not rest:
        return None
    return batch if len(rest) == len(batch.updates) else Batch(batch.table, rest)
