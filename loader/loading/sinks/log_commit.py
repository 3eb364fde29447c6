"""A load's append written as the Delta log entry itself (the ``direct_commit`` lean change).

Why by hand. ``deltalake``'s ``create_write_transaction`` costs 3 to 5 ms of CPU per commit
here, most of it outside the log write (it rebuilds the snapshot's state for its conflict
checks and post-commit hooks), and a group job commits every table it loads: at 200 tables
those commits took 44% of the load workers' CPU on a 2-core machine (BENCHMARKS.md, "Freshness
at 200 to 10,000 tables"). An append that nobody raced needs none of that. The Delta protocol
("Delta Log Entries", "Mutual exclusion") makes a commit one JSON file ``<version>.json`` that
must not exist yet: this module writes the same actions deltalake writes for an append
(``commitInfo`` with the loader's custom metadata, ``add`` per file, ``txn`` with the load's
application transaction), fsyncs the entry (the data files it names were moved into the table
as before, without a directory fsync, as deltalake's own commit leaves them), and links it in
under the next version's name, which fails if any other writer took that version first.

When it is not used. Only a table whose writer features the loader honours without writing
anything extra (:data:`PLAIN_FEATURES`) and only at the next version after the handle's own: a
table with other features, or a commit that lost the race (the link found the version taken),
goes through ``create_write_transaction``, whose conflict checker decides. Checkpoints, which
deltalake's post-commit hook would write every ``delta.checkpointInterval`` versions, are
written here at the same versions (``DeltaTable.create_checkpoint``), with the expired-log
cleanup that hook runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from deltalake.transaction import AddAction

#: Writer features an append honours without writing anything but data files and these actions:
#: append-only forbids only removes; invariants and CHECK constraints are row rules the loader
#: checks before its commit (group jobs leave tables with row rules to their own Spark jobs);
#: timestampNtz is a type. Anything else (row tracking's row ids, in-commit timestamps, change
#: data feed, deletion vectors, column mapping, identity columns ...) is deltalake's to write.
PLAIN_FEATURES = frozenset({"appendOnly", "invariants", "checkConstraints", "timestampNtz"})
#: Delta's default ``delta.checkpointInterval``.
DEFAULT_CHECKPOINT_INTERVAL = 100
ENGINE = "loader (direct log commit)"
#: The log holds each path as a URI path, percent-encoded; these characters stay as they are,
#: as deltalake leaves them (a few it leaves alone are encoded here: both decode to the same
#: path, which is what every reader compares).
PATH_SAFE = "/=!$&'()+,;:@~"


def log_entry(actions: Sequence[AddAction], app: str, seq: int, metadata: Mapping[str, str], rows: int) -> bytes:
    """The commit's JSON lines, as deltalake writes an append (commitInfo first)."""
    now = int(time.time() * 1000)
    info = {
        "timestamp": now,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "engineInfo": ENGINE,
        **metadata,
        "operationMetrics": {"num_added_files": len(actions), "num_removed_files": 0, "num_added_rows": rows},
    }
    lines = [{"commitInfo": info}]
    for action in actions:
        lines.append(
            {
                "add": {
                    "path": quote(action.path, safe=PATH_SAFE),
                    "partitionValues": dict(action.partition_values or {}),
                    "size": action.size,
                    "modificationTime": action.modification_time,
                    "dataChange": action.data_change,
                    "stats": action.stats,
                }
            }
        )
    lines.append({"txn": {"appId": app, "version": seq, "lastUpdated": now}})
    # UTF-8 as it is, as deltalake writes it: deltalake 1.6.6 reads an escaped surrogate pair
    # wrongly (a partition value U+20000 came back as U+10000; tests/loader/loading/test_log_commit.py).
    return "".join(json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n" for line in lines).encode()


def commit_next(root: Path, version: int, entry: bytes) -> bool:
    """Write ``entry`` as version ``version`` of the table at ``root`` if no writer has taken
    it: True once it is durable there, False when the version existed (nothing written)."""
    log_dir = root / "_delta_log"
    target = log_dir / f"{version:020d}.json"
    tmp = log_dir / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(entry)
            while view:  # (a write may take fewer bytes than asked: a cut entry must never be linked)
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, target)  # put-if-absent: fails if another writer took the version
        except FileExistsError:
            return False
        directory = os.open(log_dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def checkpoint_due(version: int, configuration: Mapping[str, str]) -> bool:
    """Whether deltalake's post-commit hook would write a checkpoint after committing
    ``version``: deltalake 1.6.6 writes one when ``version + 1`` is a multiple of the
    interval (versions 2, 5, 8 at an interval of 3; tests/loader/loading/test_log_commit.py)."""
    interval = checkpoint_interval(configuration)
    return interval > 0 and (version + 1) % interval == 0


def checkpoint_interval(configuration: Mapping[str, str]) -> int:
    """The table's ``delta.checkpointInterval`` (Delta's default when unset or unreadable)."""
    try:
        return int(configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
    except ValueError:
        return DEFAULT_CHECKPOINT_INTERVAL


def publish_and_commit(root: Path, staged: Sequence[Path], version: int, entry: bytes) -> bool:
    """Move ``staged`` files (written and fsynced in a staging directory of the table) into
    its root, then commit ``entry`` as ``version`` (``commit_next``): True once it landed,
    False when another writer took the version (the moved files are removed again).

    The files go in only at the commit, so a crash before it leaves them in the staging
    directory (removed when the table is next opened for loads) rather than in the table,
    where no vacuum would find them (deltalake's vacuum deletes only files a ``remove``
    names). A commit that raises after its entry was linked (the directory's fsync failing)
    keeps its files: the entry names them."""
    moved: list[Path] = []
    landed = False
    try:
        for path in staged:
            target = root / path.name
            os.replace(path, target)
            moved.append(target)
        try:
            landed = commit_next(root, version, entry)
        except BaseException:
            landed = _landed(root, version, entry)
            raise
        return landed
    finally:
        if not landed:
            for path in moved:
                path.unlink(missing_ok=True)


def _landed(root: Path, version: int, entry: bytes) -> bool:
    try:
        return (root / "_delta_log" / f"{version:020d}.json").read_bytes() == entry
    except OSError:
        return False
