"""A durable producer's journal: what ``send`` accepted, until the service acknowledged it.

One append-only file of JSON lines in the producer's ``state_dir``:

- ``add``: one ``send`` (each update its rows went to, with table, sequence and the rows'
  JSON text or the landing files; the data interval end; the caller's checkpoint), one
  line fsynced before ``send`` returns: from then on the producer owns the rows, and after
  a crash the rows and the checkpoint are both there or neither is.
- ``req``: the updates a request carries, fsynced before its first attempt, so a restart
  sends the same request (same key, same body) and the service answers it once if the
  lost attempt had landed.
- ``done``: a request acknowledged (or refused, or given up on); ``split``: a multi-table
  request refused, its updates to go out alone. Not fsynced: lost, they only make a
  restart send again what the service answers from its idempotency store.
- ``epoch``: drawn when the journal is made and part of every key, so a producer_id that
  starts over in a new state_dir does not reuse keys the service still remembers;
- ``seq``: a table's next sequence, written when the journal is compacted, so keys are
  never reused for other rows; ``checkpoint``: the caller's last checkpoint (``send``'s
  ``checkpoint``, written with its rows: the caller's input position and the rows it
  produced are durable together, so a restart resumes exactly where the journal stops).

A restart reads the journal (a torn last line is what a crash mid-write leaves and is
skipped), rewrites it compacted (atomically: a temporary file, fsync, rename), and hands
back the sequences, the requests to send again and the updates still waiting. The
service remembers keys for 24 h by default: a producer that stays down longer may load
its last unacknowledged request twice (docs/producers.md).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from producer.batching import Batch

#: Compact a live journal past this size (it holds at most the buffer's worth of live rows).
COMPACT_BYTES = 64 << 20


@dataclass
class Recovered:
    """What a restarted producer takes over."""

    sequences: dict[str, int] = field(default_factory=dict)
    #: Requests formed before the restart and not answered, in order: key and updates.
    requests: list[tuple[str, list[Batch]]] = field(default_factory=list)
    #: Closed updates not in a request yet, in journal order.
    waiting: list[Batch] = field(default_factory=list)
    #: The caller's last checkpoint, journaled with the rows of the ``send`` that gave it.
    checkpoint: str | None = None
    #: Drawn when the journal is made, part of every key: a new state_dir never reuses the
    #: keys of an old one under the same producer_id (the service would refuse them, 409).
    epoch: str = ""

    @property
    def batches(self) -> int:
        return sum(len(r) for _, r in self.requests) + len(self.waiting)


def _part(batch: Batch, rows: list[str] | None) -> dict[str, Any]:
    """One update's share of an ``add`` record (its rows, or its files; the caller's own key)."""
    part: dict[str, Any] = {"t": batch.table, "s": batch.seq}
    if rows is None:
        part["f"] = list(batch.files)
    else:
        part["r"] = rows
    if batch.explicit_key is not None:
        part["k"] = batch.explicit_key
    return part


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "journal.ndjson"
        self._file: IO[str] | None = None
        self.size = 0

    # -- writing ----------------------------------------------------------------------------
    def _write(self, record: dict[str, Any], sync: bool) -> None:
        assert self._file is not None, "recover() opens the journal"
        line = json.dumps(record, separators=(",", ":")) + "\n"
        self._file.write(line)
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())
        self.size += len(line)

    def add(
        self, parts: Sequence[tuple[Batch, list[str] | None]], data_until: float | None, checkpoint: str | None
    ) -> None:
        """One ``send``: its rows in each update they went to (None: the update's landing
        files) and the caller's checkpoint, in one line and one fsync: after a crash both are
        in the journal or neither is."""
        record: dict[str, Any] = {"op": "add", "p": [_part(b, rows) for b, rows in parts], "u": data_until}
        if checkpoint is not None:
            record["c"] = checkpoint
        self._write(record, sync=True)

    def request(self, key: str, batches: Iterable[Batch]) -> None:
        self._write({"op": "req", "k": key, "p": [[b.table, b.seq] for b in batches]}, sync=True)

    def done(self, key: str) -> None:
        self._write({"op": "done", "k": key}, sync=False)

    def split(self, key: str) -> None:
        self._write({"op": "split", "k": key}, sync=False)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- reading and compacting ----------------------------------------------------------------
    def recover(self) -> Recovered:
        """Read what an earlier run left, compact it, and open the journal for this run."""
        self.close()
        sequences: dict[str, int] = {}
        batches: dict[tuple[str, int], Batch] = {}
        requests: dict[str, list[tuple[str, int]]] = {}
        solo: set[tuple[str, int]] = set()
        checkpoint: str | None = None
        epoch = uuid.uuid4().hex[:8]
        gone: set[tuple[str, int]] = set()
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                if number == len(lines):
                    break  # torn by a crash mid-write: that send never returned
                raise ValueError(f"{self.path}: line {number} is not JSON; the journal is damaged") from None
            op = record["op"]
            if "c" in record:
                checkpoint = record["c"]
            if op == "epoch":
                epoch = record["e"]
            elif op == "seq":
                sequences[record["t"]] = max(sequences.get(record["t"], 0), record["n"])
            elif op == "add":
                for part in record["p"]:
                    key = (part["t"], part["s"])
                    batch = batches.get(key)
                    if batch is None:
                        batch = batches[key] = Batch(part["t"], part["s"], 0.0)
                    if "f" in part:
                        batch.files = tuple(part["f"])
                        batch.nbytes = sum(len(f) for f in batch.files)
                    else:
                        batch.rows.extend(part["r"])
                        batch.nbytes += sum(len(r) + 1 for r in part["r"])
                    batch.later(record["u"])
                    if part.get("o"):
                        solo.add(key)
                    if part.get("k"):
                        batch.explicit_key = part["k"]
                        solo.add(key)
                    sequences[part["t"]] = max(sequences.get(part["t"], 0), part["s"] + 1)
            elif op == "req":
                requests[record["k"]] = [tuple(p) for p in record["p"]]  # type: ignore[misc]
            elif op == "done":
                gone.update(requests.pop(record["k"], ()))
            elif op == "split":
                parts = requests.pop(record["k"], ())
                solo.update(parts)
        recovered = Recovered(sequences=sequences, checkpoint=checkpoint, epoch=epoch)
        in_requests: set[tuple[str, int]] = set()
        for key, parts in requests.items():
            live = [batches[p] for p in parts if p in batches and p not in gone]
            if live:
                recovered.requests.append((key, live))
                in_requests.update(parts)
        for key, batch in batches.items():
            if key in gone or key in in_requests:
                continue
            batch.solo = key in solo
            recovered.waiting.append(batch)
        self.compact(recovered)
        return recovered

    def compact(self, state: Recovered) -> None:
        """Rewrite the journal with ``state`` alone (atomic), and reopen it for appending."""
        self.close()
        temporary = self.path.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            out.write(json.dumps({"op": "epoch", "e": state.epoch}, separators=(",", ":")) + "\n")
            if state.checkpoint is not None:
                out.write(json.dumps({"op": "checkpoint", "c": state.checkpoint}, separators=(",", ":")) + "\n")
            for table, next_seq in sorted(state.sequences.items()):
                out.write(json.dumps({"op": "seq", "t": table, "n": next_seq}, separators=(",", ":")) + "\n")
            for batch in [b for _, r in state.requests for b in r] + state.waiting:
                part = _part(batch, None if batch.files else batch.rows)
                if batch.solo:
                    part["o"] = 1
                record = {"op": "add", "p": [part], "u": batch.data_until}
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
            for key, batches in state.requests:
                parts = [[b.table, b.seq] for b in batches]
                out.write(json.dumps({"op": "req", "k": key, "p": parts}, separators=(",", ":")) + "\n")
            out.flush()
            os.fsync(out.fileno())
        temporary.replace(self.path)
        _fsync_dir(self.directory)
        self._file = self.path.open("a", encoding="utf-8")
        self.size = self.path.stat().st_size
