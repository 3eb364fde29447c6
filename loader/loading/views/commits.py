"""What an input table's Delta commits changed: the rows a join view must absorb.

A view learns of an input's new data from the input's Delta log, not from the batch
that was loaded: the log is durable (a restart finds exactly what the view lacks), it
holds the rows whatever their payload was (in the request, spilled, landing files that
are gone once loaded), and every writer produces it. Each version's rows are the files
its data-changing ``add`` actions name, in the log's order (a rows window counts rows
in that order, live and after a restart alike); compaction's ``add`` actions carry
``dataChange: false`` and add nothing. A latest table's MERGE rewrites whole files, so
its added files hold the changed keys' new rows and copies of unchanged ones, which
the executor recognises (an upsert of a key's current row changes nothing). A latest table's
deletion-vector upsert (loader/loading/sinks/upsert_dv.py) adds the changed keys' new rows
as a new file and re-adds the files holding their old rows with a deletion vector: those
re-adds add no rows, so an ``add`` carrying a deletion vector is not read (the spark
engine, which reads files whole, refuses such an input: its snapshots would hold the
deleted rows).

Read with ``deltalake`` and ``pyarrow`` on the loader's side for the driver engine; the
spark engine takes only the files' names from here (``state_files``, ``added_files``) and
its job reads them (loader/loading/sinks/view_join.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from loader.core.evolution import conform_rows
from loader.core.schema import TableSchema
from loader.durability.transactions import DATA_UNTIL_KEY


class HistoryGone(RuntimeError):
    """An input's Delta history the view needs was cleaned up (log retention, vacuum)."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One version of an input table as a view sees it."""

    version: int
    #: Rows added (None: the version changed no data: compaction, a transaction alone).
    rows: pa.Table | None
    #: The data interval end of the batch the version loaded (``DATA_UNTIL_KEY``); for
    #: commits of other writers, the commit's timestamp.
    data_until: float


def current_version(path: Path) -> int:
    """The table's newest version; -1 when it does not exist yet."""
    try:
        return DeltaTable(str(path)).version()
    except TableNotFoundError:
        return -1


def _log_entry(path: Path, version: int) -> list[dict]:
    file = path / "_delta_log" / f"{version:020d}.json"
    try:
        lines = file.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028, U+0085 are data
    except FileNotFoundError:
        raise HistoryGone(
            f"version {version} of the Delta table at {path} is no longer in its log (log retention "
            "cleaned it up); the view cannot absorb it: re-declare the view to rebuild it from the "
            "table's current state"
        ) from None
    return [json.loads(line) for line in lines if line.strip()]


def data_until_of(info: dict) -> float:
    """A commitInfo's data interval end (module docstring)."""
    if DATA_UNTIL_KEY in info:
        return float(info[DATA_UNTIL_KEY])
    meta = info.get("userMetadata") or ""
    if isinstance(meta, str) and meta.startswith(DATA_UNTIL_KEY + "="):
        return float(meta.split("=", 1)[1])
    return float(info.get("timestamp", 0)) / 1000.0


def added_files(path: Path, version: int) -> tuple[list[str], float, int | None]:
    """Version ``version``'s data-changing added files (relative to the table, in log order),
    its data interval end, and the rows they hold (None where a file's stats do not say)."""
    actions = _log_entry(path, version)
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    adds = [
        a["add"]
        for a in actions
        if "add" in a and a["add"].get("dataChange", True) and not a["add"].get("deletionVector")
    ]
    records = [json.loads(a["stats"]).get("numRecords") if a.get("stats") else None for a in adds]
    rows = None if any(r is None for r in records) else sum(records)  # type: ignore[arg-type]
    return [unquote(a["path"]) for a in adds], data_until_of(info), rows


def read_commit(path: Path, version: int, schema: TableSchema) -> Commit:
    """Version ``version``'s added rows, in log order (module docstring)."""
    added, data_until, _ = added_files(path, version)
    if not added:
        return Commit(version, None, data_until)
    delta = DeltaTable(str(path), version=version)
    if _has_deletion_vectors(delta) and not delta.metadata().partition_columns:  # (pyarrow's reader refuses it)
        arrow = schema.arrow()
        try:
            files = [pq.read_table(path / name) for name in added]
        except FileNotFoundError as exc:
            raise HistoryGone(
                f"a file of version {version} of the Delta table at {path} is gone (vacuumed: {exc}); keep "
                "[maintenance] vacuum_retention_hours above how far a view may lag behind its inputs"
            ) from None
        return Commit(version, conform_rows(pa.concat_tables(files, promote_options="permissive"), arrow), data_until)
    dataset = delta.to_pyarrow_dataset()
    root = str(path).replace("\\", "/").rstrip("/") + "/"
    fragments = {unquote(f.path).replace("\\", "/").split(root, 1)[-1]: f for f in dataset.get_fragments()}
    parts = []
    for name in added:
        fragment = fragments.get(name)
        try:
            if fragment is None:
                raise FileNotFoundError(name)
            parts.append(fragment.to_table(schema=dataset.schema))
        except FileNotFoundError:
            raise HistoryGone(
                f"file {name} of version {version} of the Delta table at {path} is gone (vacuumed); keep "
                "[maintenance] vacuum_retention_hours above how far a view may lag behind its inputs"
            ) from None
    arrow = schema.arrow()
    rows = conform_rows(pa.concat_tables(parts), arrow) if parts else arrow.empty_table()
    return Commit(version, rows, data_until)


def snapshot(path: Path, version: int, schema: TableSchema) -> pa.Table:
    """Every row of the table at ``version`` (a whole-table input after a restart)."""
    if version < 0:
        return schema.arrow().empty_table()
    delta = DeltaTable(str(path), version=version)
    arrow = schema.arrow()
    if _has_deletion_vectors(delta):  # deltalake's query engine applies them
        return conform_rows(pa.table(QueryBuilder().register("t", delta).execute("SELECT * FROM t").read_all()), arrow)
    dataset: pads.Dataset = delta.to_pyarrow_dataset()
    # (conform_rows: the view's own types, also of a nested column that gained fields since the view
    # was declared, and a NOT NULL field under a null struct, which pyarrow's cast refuses)
    return conform_rows(dataset.to_table(), arrow)


def state_files(path: Path, version: int) -> list[str]:
    """The Parquet files of the table's snapshot at ``version`` (absolute; none before it exists)."""
    if version < 0:
        return []
    delta = DeltaTable(str(path), version=version)
    if _has_deletion_vectors(delta):
        raise ValueError(
            f"the Delta table at {path} has deletion vectors, which the spark engine's whole-file reads would not "
            'apply; declare the view with engine = "driver", or its input with upsert = "merge"'
        )
    return sorted(_local(uri) for uri in delta.file_uris())


def _has_deletion_vectors(delta: DeltaTable) -> bool:
    return "deletionVectors" in (delta.protocol().reader_features or [])


def _local(uri: str) -> str:
    return uri.removeprefix("file://") if uri.startswith("file:///") else uri
