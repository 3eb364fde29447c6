"""Files and the disks under them, as every stage meets them.

Small files that must survive a crash whole are written to a unique temporary name,
fsynced, renamed over the target, and the directory fsynced so the rename itself is
durable: a reader sees the old file or the new one, never a mix, and concurrent writers
never share a temporary file. A disk that is full or read-only is a fault of the
environment, not of the data being written (``environmental``): the WAL closes intake
until it heals, a load is retried rather than quarantined, a landing copy is a 503.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import uuid
from pathlib import Path

from loader.core.errors import caused_by

log = logging.getLogger(__name__)

ENVIRONMENTAL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
#: How Java and Hadoop word the same conditions (a Spark job's error is a Py4J/JVM message).
ENVIRONMENTAL_WORDS = ("No space left on device", "Read-only file system", "Disk quota exceeded")


def environmental(error: BaseException) -> bool:
    """True for a failure of the disk rather than of the batch: retried, never quarantined."""
    return caused_by(
        error,
        lambda e: (
            (isinstance(e, OSError) and e.errno in ENVIRONMENTAL_ERRNOS)
            or any(word in str(e) for word in ENVIRONMENTAL_WORDS)
        ),
    )


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """A file written by a library that does not sync (pyarrow's Parquet writer), made durable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def remove_files(paths: list[str]) -> None:
    """Best effort: a file left behind wastes space; failing a committed load would not."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s", path, exc)
