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
#: Commits after the catalog's version that recovery reads itself before it leaves the table to
#: deltalake (a second of loads, a compaction; at more, deltalake's replay is the cheaper).
FORWARD_COMMITS = 32


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


def committed_at(path: Path, table: str, version: int, limit: int = FORWARD_COMMITS) -> int | None:
    """The table's transaction version read from its commit files from ``version`` on, when
    that commit is the loader's (or, version 0, the table's creation) and at most ``limit``
    commits follow it: the last of them naming the loader's transaction says it, else the one
    at ``version``. None: it cannot tell (then deltalake opens the table).

    Why: opening a table with deltalake lists its whole log and replays it from the last
    checkpoint, about a millisecond a table and more as the log grows, 10.3 s for a restart of
    10,000 tables (BENCHMARKS.md, "Control plane"); this reads a file or a few. The version
    comes from the catalog (``CatalogEntry.delta_version``, the loader's last commit, saved
    every second); commits since then (a load after the save, a compaction) are read too. The
    versions of a log are consecutive files, and log cleanup deletes only files before a
    checkpoint, so the first missing one is the end unless ``_last_checkpoint`` names a later
    version (checked). A stale answer could only be low (a transaction version never goes
    back), which recovery meets safely: the loads check the transaction and skip what Delta holds.
    """
    log_dir = path / "_delta_log"
    app = app_id(table)
    seq: int | None = None
    current = version
    while True:
        try:
            lines = (log_dir / f"{current:020d}.json").read_bytes().splitlines()
        except FileNotFoundError:  # the end of the log (or, at ``version``, cleaned away)
            if current == version:
                return None
            break
        ours = _transaction(lines, app)
        if ours is not None:
            seq = ours
        elif current == version:  # not the loader's commit: the catalog's version is not its last
            if version != 0:
                return None
            seq = 0  # the table's creation, before any load
        current += 1
        if current - version > limit:
            return None
    try:  # a checkpoint after the end says there were later commits
        if int(json.loads((log_dir / "_last_checkpoint").read_bytes())["version"]) >= current:
            return None
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError):
        return None
    return seq


def _transaction(lines: list[bytes], app: str) -> int | None:
    for line in lines:
        if b'"txn"' in line:
            action = json.loads(line).get("txn")
            if isinstance(action, dict) and action.get("appId") == app:
                return int(action["version"])
    return None


def committed_seqs(
    warehouse: Path, tables: Sequence[str], known: Mapping[str, int | None] | None = None, threads: int = 8
) -> dict[str, int]:
    """Every table's ``committed_seq`` (recovery's ``CommittedSeqs``, a registration adopting
    a Delta table). ``known``: the version of each
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
