"""Expired files of a Delta log deleted at a checkpoint that is complete and read.

The Delta protocol lets a writer delete log files older than the table's
``delta.logRetentionDuration`` once a checkpoint comes after them. Written here rather than
calling deltalake's ``cleanup_metadata``: deltalake 1.6.6 cuts at the newest file *named*
``<version>.checkpoint*`` before the oldest young commit without reading it, so a stray or
incomplete one (a multi-part checkpoint whose writer died, a ``.tmp`` left behind) made it
delete the only complete checkpoint and the commits before it, and the table could no longer
be opened (found by a review, reproduced in tests/loader/ops/test_delta_log.py). Used after the
loader's own checkpoints (loader/loading/sinks/delta_rs.py) and by the log-keeping job
(loader/ops/delta_log.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

from loader.core import failpoints

RETENTION = "delta.logRetentionDuration"
LAST_CHECKPOINT = "_last_checkpoint"
#: Delta's default ``delta.logRetentionDuration``.
DEFAULT_RETENTION_SECONDS = 30 * 86400.0
#: A file of the log that belongs to one version: its commit, checksum or checkpoint (any
#: kind, complete or not, ``.tmp`` leftovers included). Other names (``_last_checkpoint``,
#: ``_sidecars/``, staged commits) are never touched.
VERSIONED = re.compile(r"^(\d{20})\.")
COMMIT = re.compile(r"^\d{20}\.json$")
#: Checkpoints a cut may be anchored on: single-part, or a part of a multi-part one (part, parts).
#: UUID-named (V2) checkpoints, whose sidecar files this does not read, are never anchors.
CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
#: Older checkpoints tried as the anchor when the newest eligible one cannot be read.
ANCHOR_TRIES = 3
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(\w+?)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {
    "nanosecond": 1e-9,
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 7 * 86400.0,
}


def retention_value(hours: int) -> str:
    """Delta's interval syntax for ``delta.logRetentionDuration``."""
    return f"interval {hours} hours"


def cleanup_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table lets writers delete its expired log files (``delta.enableExpiredLogCleanup``)."""
    return configuration.get("delta.enableExpiredLogCleanup", "true").lower() != "false"


def retention_seconds(configuration: Mapping[str, str]) -> float | None:
    """The table's ``delta.logRetentionDuration`` in seconds (Delta's interval syntax,
    ``interval 72 hours``); None when it cannot be read (then nothing is cleaned)."""
    text = configuration.get(RETENTION)
    if text is None:
        return DEFAULT_RETENTION_SECONDS
    match = _INTERVAL.match(text)
    if match is None or match.group(2).lower() not in _UNIT_SECONDS:
        return None
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def checkpoint_parts(log_dir: Path, names: list[str], version: int) -> tuple[list[str], str | None]:
    """The files of the classic checkpoint at ``version`` and what keeps it from being complete."""
    single = f"{version:020d}.checkpoint.parquet"
    if single in names:
        return [single], None
    parts: dict[int, set[int]] = {}
    for name in names:
        match = CLASSIC_CHECKPOINT.match(name)
        if match and int(match.group(1)) == version and match.group(2) is not None:
            parts.setdefault(int(match.group(3)), set()).add(int(match.group(2)))
    for total, have in sorted(parts.items(), reverse=True):
        if have == set(range(1, total + 1)):
            return [f"{version:020d}.checkpoint.{k:010d}.{total:010d}.parquet" for k in range(1, total + 1)], None
    return [], f"no complete checkpoint of version {version} in {log_dir}"


def _readable(log_dir: Path, files: list[str]) -> tuple[int, str | None]:
    rows = 0
    for name in files:
        try:
            rows += pq.read_metadata(log_dir / name).num_rows
        except Exception as exc:  # noqa: BLE001 - any unreadable footer is the finding
            return rows, f"checkpoint file {log_dir / name} cannot be read ({type(exc).__name__}: {exc})"
    return rows, None


def newest_checkpoint(log_dir: Path) -> tuple[int | None, str | None]:
    """The version of the checkpoint readers start from (``_last_checkpoint``), and what is
    wrong with it (None: complete and readable, or no hint at all)."""
    hint = log_dir / LAST_CHECKPOINT
    try:
        info = json.loads(hint.read_text())
        version = int(info["version"])
    except FileNotFoundError:
        return None, None
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{hint} cannot be read ({type(exc).__name__}: {exc})"
    files, problem = checkpoint_parts(log_dir, os.listdir(log_dir), version)
    if problem is not None:
        return version, f"{hint} names checkpoint version {version}, and {problem}"
    rows, problem = _readable(log_dir, files)
    if problem is not None:
        return version, problem
    expected = info.get("size")
    if len(files) == 1 and isinstance(expected, int) and rows != expected:
        return version, f"checkpoint file {log_dir / files[0]} holds {rows} actions where {hint} says {expected}"
    return version, None


def clean_expired(log_dir: Path, retention: float, readers_from: int, now: float | None = None) -> int:
    """Delete the log files that are older than ``retention`` seconds and come before a
    complete, readable checkpoint (the anchor); returns how many went.

    The anchor is the newest complete classic checkpoint at or before both ``readers_from``
    (the checkpoint readers start from) and the oldest commit still inside the retention, so
    every version inside the retention can still be read (time travel needs a checkpoint at or
    before it and the commits after). Files go oldest first: a crash midway leaves a log that
    starts later, never one with a gap.
    """
    cutoff = (time.time() if now is None else now) - retention
    ages: dict[str, tuple[int, float]] = {}
    with os.scandir(log_dir) as entries:
        for entry in entries:
            match = VERSIONED.match(entry.name)
            if match and entry.is_file():
                ages[entry.name] = (int(match.group(1)), entry.stat().st_mtime)
    young = [v for name, (v, mtime) in ages.items() if COMMIT.match(name) and mtime >= cutoff]
    bound = min([readers_from, *young])
    names = list(ages)
    candidates = sorted(
        {int(m.group(1)) for n in names if (m := CLASSIC_CHECKPOINT.match(n)) and int(m.group(1)) <= bound},
        reverse=True,
    )
    anchor = None
    for version in candidates[:ANCHOR_TRIES]:
        files, problem = checkpoint_parts(log_dir, names, version)
        if problem is None and _readable(log_dir, files)[1] is None:
            anchor = version
            break
    if anchor is None:
        return 0
    doomed = sorted((v, name) for name, (v, mtime) in ages.items() if v < anchor and mtime < cutoff)
    for _, name in doomed:
        (log_dir / name).unlink(missing_ok=True)
        failpoints.hit("log.cleanup.delete")
    return len(doomed)
