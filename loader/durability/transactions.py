"""The exactly-once key: what Delta holds of each table, read back from its log.

Every load commits with a Delta application transaction ``(app_id(table), last
sequence number of the batch)``, in the same commit as its rows. So the table's
transaction version is the last sequence number Delta holds, and after any crash an
update with a sequence number at or below it is already loaded. Both writers check it
before they write (loader/loading/sinks) and recovery reads it before replaying the WAL
(loader/durability/recovery.py), with the ``deltalake`` package: no Spark needed.
"""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError


def app_id(table: str) -> str:
    """Delta application-transaction id of a table's loader (one writer per table)."""
    return f"warehouse-loader:{table}"


def committed_seq(path: Path, table: str) -> int:
    """The table's Delta application-transaction version: every update <= it is loaded."""
    try:
        version = DeltaTable(str(path)).transaction_version(app_id(table))
    except TableNotFoundError:
        return 0
    return version or 0
