"""A table's live data files with their deletion vectors, read from its Delta log.

An upsert that writes deletion vectors must name, in its ``remove``, the exact deletion
vector of the file it replaces: a reader reconciles ``add`` and ``remove`` by path *and*
deletion vector, so a wrong one would leave the file live twice. deltalake 1.6.6 applies
deletion vectors when it reads but exposes no descriptor (``get_add_actions`` lists none),
so the live ``add`` actions are replayed here (protocol, "Action Reconciliation"): the
newest complete classic checkpoint at or before the version (or version 0 when no
checkpoint is needed), then each commit after it; later versions are applied
incrementally, one commit file each.

What it does not read: V2 (UUID-named) checkpoints and sidecars, which the loader's tables
never have (deltalake and Spark write classic ones here); such a table is refused with what
to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from loader.loading.sinks.deletion_vectors import Descriptor
from loader.loading.sinks.log_cleanup import CLASSIC_CHECKPOINT, checkpoint_parts


class LogUnreadable(RuntimeError):
    """The log cannot be replayed here; the message says why and what to do."""


@dataclass
class LiveFile:
    """One live ``add``: what a rewrite of its entry needs, as the log holds it."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    stats: str | None
    dv: Descriptor | None = None
    tags: dict[str, str] | None = None
    #: Parsed ``stats`` (min/max of the key), filled on first use.
    parsed: dict[str, Any] | None = field(default=None, repr=False)

    def stat(self) -> dict[str, Any]:
        if self.parsed is None:
            try:
                self.parsed = json.loads(self.stats) if self.stats else {}
            except ValueError:
                self.parsed = {}
        return self.parsed

    def add_action(self, dv: Descriptor | None, now: int) -> dict[str, Any]:
        """This file's ``add`` with deletion vector ``dv``: its statistics kept but for
        ``tightBounds`` (the bounds may now cover deleted rows), as the protocol asks."""
        stats = dict(self.stat())
        stats["tightBounds"] = False
        add: dict[str, Any] = {
            "path": self.path,
            "partitionValues": self.partition_values,
            "size": self.size,
            "modificationTime": now,
            "dataChange": True,
            "stats": json.dumps(stats, separators=(",", ":")),
        }
        if dv is not None:
            add["deletionVector"] = dv.to_log()
        if self.tags:
            add["tags"] = self.tags
        return add

    def remove_action(self, now: int, data_change: bool = True) -> dict[str, Any]:
        remove: dict[str, Any] = {
            "path": self.path,
            "deletionTimestamp": now,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": self.partition_values,
            "size": self.size,
        }
        if self.dv is not None:
            remove["deletionVector"] = self.dv.to_log()
        return remove


class LiveFiles:
    """The live files of the table at ``root`` as of ``version`` (``advance`` moves it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log_dir = root / "_delta_log"
        self.version = -1
        self.files: dict[str, LiveFile] = {}

    def advance(self, version: int) -> None:
        """Bring the files to ``version``: commit by commit from the current one, or from a
        checkpoint when the commits in between are gone (cleaned) or it is the first read."""
        if version == self.version:
            return
        if version < self.version or not self._commits_exist(self.version + 1, version):
            self._start(version)
        for v in range(self.version + 1, version + 1):
            self.apply(v, self._read_commit(v))

    def apply(self, version: int, actions: list[dict[str, Any]]) -> None:
        """One commit's actions (in log order), as the table's version ``version``."""
        for action in actions:
            if "add" in action:
                add = action["add"]
                path = _unescape(add["path"])
                dv = add.get("deletionVector")
                self.files[path] = LiveFile(
                    add["path"],
                    int(add["size"]),
                    dict(add.get("partitionValues") or {}),
                    add.get("stats"),
                    Descriptor.from_log(dv) if dv else None,
                    dict(add["tags"]) if add.get("tags") else None,
                )
            elif "remove" in action:
                path = _unescape(action["remove"]["path"])
                dv = action["remove"].get("deletionVector")
                kept = self.files.get(path)
                # (an add earlier in the same commit with another DV replaces, not removed)
                if (
                    kept is not None
                    and (kept.dv is None) == (not dv)
                    and (not dv or kept.dv == Descriptor.from_log(dv))
                ):
                    del self.files[path]
        self.version = version

    def _commits_exist(self, first: int, last: int) -> bool:
        return first > 0 and all((self.log_dir / f"{v:020d}.json").exists() for v in (first, last))

    def _read_commit(self, version: int) -> list[dict[str, Any]]:
        try:
            text = (self.log_dir / f"{version:020d}.json").read_text()
        except FileNotFoundError:
            raise LogUnreadable(f"commit {version} of {self.root} is missing from its log") from None
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _start(self, version: int) -> None:
        self.files, self.version = {}, -1
        names = os.listdir(self.log_dir)
        if any(".checkpoint." in n and n.endswith(".parquet") and not CLASSIC_CHECKPOINT.match(n) for n in names):
            raise LogUnreadable(
                f"{self.log_dir} holds V2 (UUID-named) checkpoints, which the deletion-vector upsert does not read; "
                'declare the table with upsert = "merge"'
            )
        versions = sorted(
            {int(m.group(1)) for n in names if (m := CLASSIC_CHECKPOINT.match(n)) and int(m.group(1)) <= version},
            reverse=True,
        )
        for checkpoint in versions:
            files, problem = checkpoint_parts(self.log_dir, names, checkpoint)
            if problem is None:
                self._read_checkpoint(files)
                self.version = checkpoint
                return
        if not (self.log_dir / f"{0:020d}.json").exists():
            raise LogUnreadable(
                f"{self.log_dir} has no complete checkpoint at or before version {version} and no commit 0; "
                "write a checkpoint (DeltaTable.create_checkpoint)"
            )

    def _read_checkpoint(self, files: list[str]) -> None:
        for name in files:
            table = pq.read_table(self.log_dir / name, columns=["add"])
            for add in table.column("add").to_pylist():
                if add is None:
                    continue
                if isinstance(add.get("partitionValues"), list):  # (a Parquet map reads as pairs)
                    add["partitionValues"] = dict(add["partitionValues"])
                if add.get("deletionVector") is None:
                    add.pop("deletionVector", None)
                if isinstance(add.get("tags"), list):
                    add["tags"] = dict(add["tags"])
                self.apply(self.version, [{"add": add}])


def _unescape(path: str) -> str:
    """The log's percent-encoded path as the key files are known by (readers compare decoded)."""
    return unquote(path)
