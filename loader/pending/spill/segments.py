"""Spill segment files: one Parquet file per disk operation (a contiguous run of one table's queue).

Parquet, written with the table's own Arrow schema exactly as a load's in-memory rows
are handed to Spark (``loader.loading.sinks.frame``), so a load job reads a whole segment in
place: the rows never come back through the driver. Uncompressed, without dictionaries
or statistics: a spill is on the path of a burst, and encoding, not the disk, bounds its
rate (BENCHMARKS.md, ``benchmarks/spill/``).

Not a durability mechanism: nothing is fsynced and the directory is emptied at start-up;
the write-ahead log holds every acknowledged update until it is in Delta, and recovery
rebuilds the queues (and re-spills) from it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Hashable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core import failpoints
from loader.core.evolution import conform_rows
from loader.core.updates import SpilledRows, Update
from loader.pending.spill.model import Item

log = logging.getLogger(__name__)

SEGMENT_NAME = re.compile(r"[0-9]{12}\.parquet")


class SegmentFiles:
    """The live ``SegmentIO``: item values are ``Update`` objects, rows in memory or spilled."""

    def __init__(self, directory: Path, schema_of: Callable[[str], pa.Schema]) -> None:
        self.directory = directory
        self._schema_of = schema_of
        self.files = 0

    def reset(self) -> int:
        """Delete the segments of an earlier run (the WAL replay rebuilds what is pending);
        returns how many there were. Only files named as segments are touched, and table
        directories only once empty, so a mistaken ``spill.dir`` cannot destroy other data."""
        removed = 0
        if self.directory.exists():
            for path in self.directory.glob("*/*.parquet"):
                if SEGMENT_NAME.fullmatch(path.name) and path.is_file():
                    path.unlink(missing_ok=True)
                    removed += 1
            for child in self.directory.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()  # empty table directories only
        self.directory.mkdir(parents=True, exist_ok=True)
        self.files = 0
        return removed

    def path(self, table: str, segment: int) -> Path:
        return self.directory / table / f"{segment:012d}.parquet"

    def write(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        table = str(queue)
        schema = self._schema_of(table)
        updates: list[Update] = [item.value for item in items]
        parts = [conform_rows(u.rows, schema) for u in updates if u.rows is not None]
        data = pa.concat_tables(parts) if parts else schema.empty_table()
        path = self.path(table, segment)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # Plain encoding, no statistics: a segment is read once, whole, so dictionaries
            # and min/max buys nothing, and skipping them more than doubles the encode rate.
            pq.write_table(data, path, compression="none", use_dictionary=False, write_statistics=False)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        failpoints.hit("spill.write")
        self.files += 1
        offset = 0
        total = data.num_rows
        for item, update in zip(items, updates):
            if update.rows is None:
                continue
            count = update.rows.num_rows
            ref = SpilledRows(str(path), offset, count, total, update.resident_bytes)
            item.value = replace(update, rows=None, spilled=ref)
            offset += count

    def read(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        path = self.path(str(queue), segment)
        data = pq.read_table(path)
        for item in items:
            update: Update = item.value
            ref = update.spilled
            if ref is None:
                continue
            item.value = replace(update, rows=data.slice(ref.offset, ref.rows), spilled=None)

    def discard(self, queue: Hashable, segment: int) -> None:
        path = self.path(str(queue), segment)
        try:
            path.unlink()
            self.files -= 1
        except FileNotFoundError:
            pass
        except OSError as exc:  # a leftover costs disk space until the next start-up, nothing else
            log.warning("could not remove spill segment %s: %s", path, exc)

    def disk_free(self) -> int:
        """Bytes free on the spill filesystem."""
        stats = os.statvfs(self.directory)
        return stats.f_bavail * stats.f_frsize
