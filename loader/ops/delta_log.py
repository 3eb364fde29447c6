"""A table's Delta log kept short as the table ages (the ``log-keeping`` maintenance job).

Why. Every load is a commit file in ``_delta_log``, and Delta keeps commit files for
``delta.logRetentionDuration``, 30 days unless the table says otherwise: at a few commits a
second that is millions of files in one directory. deltalake lists the whole directory to
open a table or bring a handle up to date (on a local disk it cannot list from a version
onwards), so an aged table's open and refresh grow with its age, not its feed (BENCHMARKS.md,
"Tables that age": at 100,000 commits an outside reader's open took 19x a new table's).

What this does, per table:

1. the checkpoint readers start from (``_last_checkpoint`` names it) is verified: each of its
   files present and its Parquet footer readable. A table whose hint names a broken one is
   reported and nothing is deleted (deltalake cannot open it: the commits are what is left);
2. a checkpoint is written when the newest is more than two checkpoint intervals behind (a
   post-commit checkpoint that failed): without one, nothing newer can be cleaned and every
   open replays the commits since;
3. expired log files are deleted (``clean_expired``), unless the table turns expired-log
   cleanup off (``delta.enableExpiredLogCleanup``).

The deletion is loader/loading/sinks/log_cleanup.py's (why not deltalake's ``cleanup_metadata``:
see there).

The retention itself is the table's: the loader gives the tables it creates
``[maintenance] log_retention_hours`` (loader/service.py ``table_properties``); tables it did
not create keep theirs (Delta's 30 days unless set). Join views read their inputs' commits
back to their windows and held versions: keep the retention above the longest window and lag,
as the vacuum retention (docs/join-views.md).

The load workers' cached handles need nothing: they are brought up to date from their own
version onwards, and the check of the loader's own last commit (``known_commits``) falls
back to that once its entry is gone (loader/loading/sinks/delta_rs.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable

from loader.loading.sinks.log_cleanup import (
    RETENTION,
    clean_expired,
    cleanup_enabled,
    newest_checkpoint,
    retention_seconds,
)
from loader.loading.sinks.log_commit import checkpoint_interval


@dataclass(frozen=True)
class LogKept:
    """What keeping one table's log did (or, with ``problem``, why it did nothing)."""

    table: str
    files_before: int
    files_after: int
    checkpoint_written: bool = False
    problem: str | None = None

    @property
    def removed(self) -> int:
        return max(0, self.files_before - self.files_after)


def _log_files(log_dir: Path) -> int:
    with os.scandir(log_dir) as entries:
        return sum(1 for _ in entries)


def keep_log(table: str, path: Path) -> LogKept:
    """Verify, checkpoint if far behind, clean expired files (module docstring)."""
    log_dir = path / "_delta_log"
    before = _log_files(log_dir)
    checkpoint, problem = newest_checkpoint(log_dir)
    if problem is not None:
        return LogKept(table, before, before, problem=problem)
    delta = DeltaTable(str(path))
    configuration = delta.metadata().configuration
    interval = checkpoint_interval(configuration)
    version = delta.version()
    written = False
    if interval > 0 and version - (checkpoint if checkpoint is not None else -1) > 2 * interval:
        delta.create_checkpoint()
        written = True
        checkpoint, problem = newest_checkpoint(log_dir)
        if problem is not None:
            return LogKept(table, before, _log_files(log_dir), checkpoint_written=True, problem=problem)
    retention = retention_seconds(configuration)
    if retention is None:
        problem = f"its {RETENTION} {configuration.get(RETENTION)!r} is not an interval Delta reads"
        return LogKept(table, before, _log_files(log_dir), checkpoint_written=written, problem=problem)
    if cleanup_enabled(configuration) and checkpoint is not None:
        clean_expired(log_dir, retention, checkpoint)
    return LogKept(table, before, _log_files(log_dir), checkpoint_written=written)
