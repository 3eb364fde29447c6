"""A table's Delta log kept short as the table ages (the ``log-keeping`` maintenance job).

Why. Every load is a commit file in ``_delta_log``, and Delta keeps commit files for
``delta.logRetentionDuration``, 30 days unless the table says otherwise: at a few commits a
second that is millions of files in one directory. deltalake lists the whole directory to
open a table or bring a handle up to date (on a local disk it cannot list from a version
onwards), so an aged table's open and refresh grow with its age, not its feed: measured here,
4.6 ms to open a table of 13 log files, 30 ms at 20,000 (BENCHMARKS.md, "Tables that age").

What this does, per table:

1. the newest checkpoint is verified first (``_last_checkpoint`` names it; each of its files
   must exist and its Parquet footer hold the rows the hint says). Log cleanup deletes the
   commits before that checkpoint, so with a broken one it would leave nothing to rebuild
   the table from: such a table is reported and its log left as it is;
2. a table without ``delta.logRetentionDuration`` is given the loader's
   (``[maintenance] log_retention_hours``; a table that sets its own keeps it);
3. a checkpoint is written when the newest is more than two checkpoint intervals behind (a
   post-commit checkpoint that failed, a table written by others without checkpoints):
   without one, cleanup can remove nothing newer and every open replays the commits since;
4. expired log files are cleaned with deltalake's ``cleanup_metadata`` (only files older
   than the retention and before the newest checkpoint), unless the table turns expired-log
   cleanup off (``delta.enableExpiredLogCleanup``).

The load workers' cached handles need nothing: they are brought up to date from their own
version onwards, and the check of the loader's own last commit (``known_commits``) falls
back to that once cleanup has removed the entry (loader/loading/sinks/delta_rs.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from deltalake import DeltaTable

from loader.loading.sinks.log_commit import DEFAULT_CHECKPOINT_INTERVAL

RETENTION = "delta.logRetentionDuration"
LAST_CHECKPOINT = "_last_checkpoint"


@dataclass(frozen=True)
class LogKept:
    """What keeping one table's log did (or, with ``problem``, why it did nothing)."""

    table: str
    files_before: int
    files_after: int
    checkpoint_written: bool = False
    retention_set: bool = False
    problem: str | None = None

    @property
    def removed(self) -> int:
        return max(0, self.files_before - self.files_after)


def retention_value(hours: int) -> str:
    """Delta's interval syntax for ``delta.logRetentionDuration``."""
    return f"interval {hours} hours"


def _log_files(log_dir: Path) -> int:
    with os.scandir(log_dir) as entries:
        return sum(1 for _ in entries)


def newest_checkpoint(log_dir: Path) -> tuple[int | None, str | None]:
    """The newest checkpoint's version by its hint, and what is wrong with it (None: readable,
    or no checkpoint at all). Single-part (``<v>.checkpoint.parquet``), multi-part and
    UUID-named (V2) checkpoints are recognised by their file names."""
    hint = log_dir / LAST_CHECKPOINT
    try:
        info = json.loads(hint.read_text())
        version = int(info["version"])
    except FileNotFoundError:
        return None, None
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{hint} cannot be read ({type(exc).__name__}: {exc})"
    prefix = f"{version:020d}.checkpoint."
    parts = sorted(p for p in os.listdir(log_dir) if p.startswith(prefix) and p.endswith(".parquet"))
    if not parts:
        return version, f"{hint} names checkpoint version {version}, and no file of it is in {log_dir}"
    rows = 0
    for name in parts:
        try:
            rows += pq.read_metadata(log_dir / name).num_rows
        except Exception as exc:  # noqa: BLE001 - any unreadable footer is the finding
            return version, f"checkpoint file {log_dir / name} cannot be read ({type(exc).__name__}: {exc})"
    expected = info.get("size")
    if info.get("parts") is None and isinstance(expected, int) and len(parts) == 1 and rows != expected:
        return version, f"checkpoint file {log_dir / parts[0]} holds {rows} actions where {hint} says {expected}"
    return version, None


def keep_log(table: str, path: Path, retention_hours: int) -> LogKept:
    """Verify, give a retention, checkpoint if far behind, clean expired files (module docstring)."""
    log_dir = path / "_delta_log"
    before = _log_files(log_dir)
    checkpoint, problem = newest_checkpoint(log_dir)
    if problem is not None:
        return LogKept(table, before, before, problem=problem)
    delta = DeltaTable(str(path))
    configuration = delta.metadata().configuration
    retention_set = False
    if retention_hours and RETENTION not in configuration:
        delta.alter.set_table_properties({RETENTION: retention_value(retention_hours)})
        retention_set = True
    try:
        interval = int(configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
    except ValueError:
        interval = DEFAULT_CHECKPOINT_INTERVAL
    version = delta.version()
    written = False
    if interval > 0 and version - (checkpoint if checkpoint is not None else -1) > 2 * interval:
        delta.create_checkpoint()
        written = True
    if configuration.get("delta.enableExpiredLogCleanup", "true").lower() != "false":
        delta.cleanup_metadata()
    return LogKept(table, before, _log_files(log_dir), checkpoint_written=written, retention_set=retention_set)
