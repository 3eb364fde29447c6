"""The exactly-once key: what Delta holds of each table, read back from its log.

Every load commits with a Delta application transaction ``(app_id(table), last
sequence number of the batch)``, in the same commit as its rows. So the table's
transaction version is the last sequence number Delta holds, and after any crash an
update with a sequence number at or below it is already loaded. Both writers check it
before they write (loader/loading/sinks) and recovery reads it before replaying the WAL
(loader/durability/recovery.py), with the ``deltalake`` package: no Spark needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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


def committed_at(path: Path, table: str, version: int) -> int | None:
    """The table's transaction version read from one commit file, when the log shows that
    ``version`` is still its newest: that commit holds the loader's transaction (or, version 0,
    is the table's creation, before any load) and no commit follows it. None: it cannot tell.

    Why: opening a table with deltalake lists its whole log and replays it from the last
    checkpoint, about a millisecond a table and more as the log grows, 10.3 s for a restart of
    10,000 tables (BENCHMARKS.md, "Control plane"); this is two file operations. The version
    comes from the catalog (``CatalogEntry.delta_version``, the loader's last commit), saved
    every second: a commit since then is the next file, and then deltalake decides. A stale
    answer could only be low (the log cannot go back to a lower transaction), which recovery
    meets safely: the loads check the transaction again and skip what Delta holds.
    """
    log_dir = path / "_delta_log"
    if (log_dir / f"{version + 1:020d}.json").exists():
        return None
    try:  # a checkpoint after it says there were later commits (log cleanup deletes only before one)
        if int(json.loads((log_dir / "_last_checkpoint").read_bytes())["version"]) > version:
            return None
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError):
        return None
    try:
        lines = (log_dir / f"{version:020d}.json").read_bytes().splitlines()
    except FileNotFoundError:  # (cleaned away, or no such table)
        return None
    app = app_id(table)
    for line in lines:
        if b'"txn"' in line:
            action = json.loads(line).get("txn")
            if isinstance(action, dict) and action.get("appId") == app:
                return int(action["version"])
    return 0 if version == 0 else None


def committed_seqs(
    warehouse: Path, tables: Sequence[str], known: Mapping[str, int | None] | None = None, threads: int = 8
) -> dict[str, int]:
    """Every table's ``committed_seq`` (recovery at start-up). ``known``: the version of each
    table's last commit by the loader as the catalog has it (None: none yet), read with
    :func:`committed_at`; the others are opened with deltalake, about a millisecond of log
    reading a table, overlapped on a few threads (deltalake's Rust core releases the GIL)."""
    found: dict[str, int] = {}
    for table in tables if known is not None else ():
        version = known.get(table)
        seq = committed_at(warehouse / table, table, 0 if version is None else version)
        if seq is not None:
            found[table] = seq
    rest = [table for table in tables if table not in found]
    if len(rest) < 2 * threads:
        return found | {table: committed_seq(warehouse / table, table) for table in rest}
    with ThreadPoolExecutor(threads, thread_name_prefix="delta-log") as pool:
        return found | dict(zip(rest, pool.map(lambda table: committed_seq(warehouse / table, table), rest)))
