"""The exactly-once key: what Delta holds of each table, read back from its log.

Every load commits with a Delta application transaction ``(app_id(table), last
sequence number of the batch)``, in the same commit as its rows. So the table's
transaction version is the last sequence number Delta holds, and after any crash an
update with a sequence number at or below it is already loaded. Both writers check it
before they write (loader/loading/sinks) and recovery reads it before replaying the WAL
(loader/durability/recovery.py), with the ``deltalake`` package: no Spark needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

#: commitInfo field of every load's commit: the data interval end of its batch (the last
#: update's release). A join view's seconds window reads it back after a restart.
DATA_UNTIL_KEY = "loader.data_until"


def app_id(table: str) -> str:
    """Delta application-transaction id of a table's loader (one writer per table)."""
    return f"warehouse-loader:{table}"


def view_app_id(view: str, table: str) -> str:
    """A join view's transaction id for one input table: its version is the last version
    of ``table`` the view holds (docs/join-views.md), so a replayed view load is skipped."""
    return f"warehouse-loader:view:{view}:{table}"


def load_metadata(data_until: float | None) -> dict[str, str]:
    """A load's commit metadata (in its ``commitInfo``): its data interval end."""
    return {DATA_UNTIL_KEY: repr(float(data_until))} if data_until is not None else {}


def load_commit(table: str, seq: int, data_until: float | None) -> CommitProperties:
    """A load's commit properties: its application transaction and its data interval end."""
    metadata = load_metadata(data_until) or None
    return CommitProperties(app_transactions=[Transaction(app_id(table), seq)], custom_metadata=metadata)


def committed_seq(path: Path, table: str) -> int:
    """The table's Delta application-transaction version: every update <= it is loaded."""
    try:
        version = DeltaTable(str(path)).transaction_version(app_id(table))
    except TableNotFoundError:
        return 0
    return version or 0


def committed_seqs(warehouse: Path, tables: Sequence[str], threads: int = 8) -> dict[str, int]:
    """Every table's ``committed_seq`` (recovery at start-up): about a millisecond of log
    reading a table, overlapped on a few threads (deltalake's Rust core releases the GIL)."""
    if len(tables) < 2 * threads:
        return {table: committed_seq(warehouse / table, table) for table in tables}
    with ThreadPoolExecutor(threads, thread_name_prefix="delta-log") as pool:
        return dict(zip(tables, pool.map(lambda table: committed_seq(warehouse / table, table), tables)))
