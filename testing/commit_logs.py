"""Following a table's commit log from outside the system that writes it.

A reader of the warehouse sees a commit once its log entry exists, whatever the writer
believes. The freshness benchmark (``benchmarks/freshness_at_scale``) therefore judges
the loader and its Structured Streaming peer with the same outside reader: it polls each
table's log for the next entry and records when it first saw it and which data files it
added. Both logs publish an entry by renaming a complete temporary file into place, so
an entry that exists is whole.

- Delta (the loader): ``<table>/_delta_log/<version, 20 digits>.json``, one JSON action
  per line; ``add``/``remove`` paths are URL-encoded and relative to the table root
  (absolute URIs are allowed too).
- Spark's file sink (the peer's Parquet sink): ``<out>/_spark_metadata/<batch>``, or
  ``<batch>.compact`` every ``spark.sql.streaming.fileSink.log.compactInterval`` batches,
  which then lists every live file so far; first line ``v1``, then one JSON entry per
  file with ``path`` (a URI) and ``action`` (``add`` or ``delete``).

Polling costs one ``stat`` of the log directory per table when nothing is new (about
2 µs; a failed ``open`` of the next entry costs five times that): the next entry is
looked for only when the directory changed since the last look, or so recently that a
change could hide behind the coarse clock of directory timestamps (``MTIME_MARGIN``).
A thousand tables can so be polled every 50 ms by one process for a few percent of a core.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

import pyarrow.compute as pc
import pyarrow.parquet as pq


@dataclass(frozen=True, slots=True)
class ObservedCommit:
    """One log entry as the outside reader met it."""

    #: Delta version or Spark batch id.
    version: int
    #: Wall time (Unix seconds) of the check that first found the entry.
    seen: float
    #: Wall time of the previous check of this log (the entry appeared in between); None
    #: for entries that already existed at the reader's first check.
    previous_check: float | None
    #: Absolute paths of the data files the entry added, and of those it removed.
    added: tuple[str, ...]
    removed: tuple[str, ...]


#: Directory timestamps come from the kernel's coarse clock (a tick of a few ms): a
#: directory whose mtime is older than the last look by more than this cannot have
#: changed after that look.
MTIME_MARGIN = 0.05


class _DirectoryGate:
    """Whether a log directory may hold something new since the last look for entries."""

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        self.looked_at: float | None = None

    def worth_a_look(self) -> bool:
        try:
            mtime = os.stat(self.directory).st_mtime_ns / 1e9
        except FileNotFoundError:
            return False
        return self.looked_at is None or mtime > self.looked_at - MTIME_MARGIN

    def looked(self, when: float) -> None:
        self.looked_at = when


class CommitLogFollower(Protocol):
    root: Path

    def poll(self) -> list[ObservedCommit]:
        """Entries that appeared since the last call, in log order (each returned once)."""
        ...


class MalformedLogEntry(ValueError):
    """An entry exists but cannot be read: not a log this follower understands."""


def _local_path(root: Path, reference: str) -> str:
    """A log's file reference (relative and URL-encoded, or a URI) as an absolute path."""
    parsed = urlparse(reference)
    if parsed.scheme in ("file", ""):
        path = unquote(parsed.path if parsed.scheme else reference)
        return path if path.startswith("/") else str(root / path)
    raise MalformedLogEntry(f"{reference!r} in the log of {root} is not a local file; only local tables are followed")


class DeltaLogFollower:
    """Follows ``<root>/_delta_log``: one ``open`` of the next version's file per poll."""

    def __init__(self, root: Path, clock: Callable[[], float]) -> None:
        self.root = root
        self.log_dir = root / "_delta_log"
        self.next_version = 0
        self.last_check: float | None = None
        self._clock = clock
        self._gate = _DirectoryGate(self.log_dir)

    def poll(self) -> list[ObservedCommit]:
        found: list[ObservedCommit] = []
        if not self._gate.worth_a_look():
            self.last_check = self._clock()
            return found
        while True:
            now = self._clock()
            try:
                with open(self.log_dir / f"{self.next_version:020d}.json", encoding="utf-8") as handle:
                    text = handle.read()
            except FileNotFoundError:
                self._gate.looked(now)
                self.last_check = now
                return found
            added, removed = [], []
            for line in text.split("\n"):  # (not splitlines: U+2028 or U+0085 in a value is data)
                if not line.strip():
                    continue
                try:
                    action = json.loads(line)
                except ValueError as exc:
                    raise MalformedLogEntry(f"version {self.next_version} of {self.log_dir}: {exc}") from exc
                if "add" in action:
                    added.append(_local_path(self.root, action["add"]["path"]))
                elif "remove" in action:
                    removed.append(_local_path(self.root, action["remove"]["path"]))
            found.append(ObservedCommit(self.next_version, now, self.last_check, tuple(added), tuple(removed)))
            self.next_version += 1


class SparkSinkLogFollower:
    """Follows ``<root>/_spark_metadata`` of a Structured Streaming file sink."""

    def __init__(self, root: Path, clock: Callable[[], float]) -> None:
        self.root = root
        self.log_dir = root / "_spark_metadata"
        self.next_batch = 0
        self.last_check: float | None = None
        self._live: set[str] = set()
        self._clock = clock
        self._gate = _DirectoryGate(self.log_dir)

    def _read(self, batch: int) -> str | None:
        for name in (str(batch), f"{batch}.compact"):
            try:
                with open(self.log_dir / name, encoding="utf-8") as handle:
                    return handle.read()
            except FileNotFoundError:
                continue
        return None

    def poll(self) -> list[ObservedCommit]:
        found: list[ObservedCommit] = []
        if not self._gate.worth_a_look():
            self.last_check = self._clock()
            return found
        while True:
            now = self._clock()
            text = self._read(self.next_batch)
            if text is None:
                self._gate.looked(now)
                self.last_check = now
                return found
            lines = text.splitlines()
            if not lines or not lines[0].startswith("v"):
                raise MalformedLogEntry(f"batch {self.next_batch} of {self.log_dir} has no version line")
            listed: list[str] = []
            deleted: list[str] = []
            for line in lines[1:]:
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except ValueError as exc:
                    raise MalformedLogEntry(f"batch {self.next_batch} of {self.log_dir}: {exc}") from exc
                path = _local_path(self.root, entry["path"])
                (deleted if entry.get("action") == "delete" else listed).append(path)
            # A compact entry lists every live file so far: what it adds is what is new.
            added = tuple(p for p in listed if p not in self._live)
            self._live.update(added)
            self._live.difference_update(deleted)
            found.append(ObservedCommit(self.next_batch, now, self.last_check, added, tuple(deleted)))
            self.next_batch += 1


FOLLOWERS: dict[str, Callable[[Path, Callable[[], float]], CommitLogFollower]] = {
    "delta": DeltaLogFollower,
    "spark-sink": SparkSinkLogFollower,
}


def follower(kind: str, root: Path, clock: Callable[[], float]) -> CommitLogFollower:
    """The follower of a log kind: ``delta`` or ``spark-sink``."""
    try:
        return FOLLOWERS[kind](root, clock)
    except KeyError:
        raise ValueError(f"unknown commit log kind {kind!r}; choose from {', '.join(FOLLOWERS)}") from None


def value_counts(path: str, column: str) -> Counter[int]:
    """How many rows of a data file hold each value of an integer ``column``."""
    counts = pc.value_counts(pq.read_table(path, columns=[column]).column(column))
    return Counter(dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)))


def live_files(commits: Iterable[ObservedCommit]) -> list[str]:
    """Data files a reader of the table sees after these commits (added, not removed)."""
    live: dict[str, None] = {}
    for commit in commits:
        for path in commit.added:
            live[path] = None
        for path in commit.removed:
            live.pop(path, None)
    return list(live)
