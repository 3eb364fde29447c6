"""A durable producer's journal: what ``send`` accepted, until the service acknowledged it.

One append-only file of JSON lines in the producer's ``state_dir``:

- ``add``: one ``send`` (each update its rows went to, with table, sequence and the rows'
  JSON text, the landing files, or, for a send of columns, the update's Arrow IPC stream
  in base64 (``a``) with its rows (``n``) and the send's first row (``i``): the very bytes
  a retry after a restart sends again; the data interval end; the caller's checkpoint), one
  line fsynced before ``send`` returns: from then on the producer owns the rows, and after
  a crash the rows and the checkpoint are both there or neither is.
- ``req``: the updates a request carries, fsynced before its first attempt, so a restart
  sends the same request (same key, same body) and the service answers it once if the
  lost attempt had landed.
- ``done``: a request acknowledged (or refused, or given up on); ``split``: a multi-table
  request refused, its updates to go out alone. Not fsynced: lost, they only make a
  restart send again what the service answers from its idempotency store.
- ``divide``: a coalesced update refused for its rows or size, split into one part per
  ``send`` (``Batch.split``), fsynced before the first part's first attempt: a restart
  sends the parts (under their own keys), never the whole update again, so no send's rows
  can land twice, once in a part and once in the whole. The parts are rebuilt from the
  update's ``add`` parts, one per send (compaction keeps them apart for this, with the
  send's first row ``i`` and checkpoint ``sc``), a part's own records carry ``x``, its
  number, and ``req`` names it as ``[table, sequence, part]``.
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

import base64
import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from producer.batching import Batch, Segment

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


Ident = tuple[str, int, int | None]


def _ident(entry: list[Any]) -> Ident:
    """A ``req`` record's name of an update: ``[table, seq]``, or ``[table, seq, part]``."""
    return (entry[0], entry[1], entry[2] if len(entry) > 2 else None)


def _name(batch: Batch) -> list[Any]:
    return [batch.table, batch.seq] if batch.part is None else [batch.table, batch.seq, batch.part]


def _part(batch: Batch, rows: list[str] | None) -> dict[str, Any]:
    """One update's share of an ``add`` record (its rows, its files, or its Arrow stream with
    the send's first row and its rows; the caller's own key)."""
    part: dict[str, Any] = {"t": batch.table, "s": batch.seq}
    if batch.part is not None:
        part["x"] = batch.part
    if batch.arrow is not None:
        segment = batch.segments[0]
        part["a"] = base64.b64encode(batch.arrow).decode("ascii")
        part["n"] = segment.count
        if segment.first:
            part["i"] = segment.first
    elif rows is None:
        part["f"] = list(batch.files)
    else:
        part["r"] = rows
    if batch.explicit_key is not None:
        part["k"] = batch.explicit_key
    return part


def _segment_parts(batch: Batch) -> list[tuple[dict[str, Any], Segment]]:
    """The update as ``add`` parts, one per send (``Segment``), for a compacted journal."""
    if batch.files or batch.arrow is not None:
        return [(_part(batch, None), batch.segments[0] if batch.segments else Segment(None, 0))]
    segments = batch.segments or [Segment(None, len(batch.rows), 0, batch.data_until)]
    out: list[tuple[dict[str, Any], Segment]] = []
    start = 0
    for segment in segments:
        part = _part(batch, batch.rows[start : start + segment.count])
        if segment.first:
            part["i"] = segment.first
        out.append((part, segment))
        start += segment.count
    return out


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
        self._write({"op": "req", "k": key, "p": [_name(b) for b in batches]}, sync=True)

    def done(self, key: str) -> None:
        self._write({"op": "done", "k": key}, sync=False)

    def split(self, key: str) -> None:
        self._write({"op": "split", "k": key}, sync=False)

    def divide(self, key: str, batch: Batch, parts: Sequence[Batch]) -> None:
        """Request ``key``, carrying ``batch`` alone, was refused: the update goes on as
        ``parts``, one per send. Fsynced, so that from now on only the parts go out."""
        record = {"op": "divide", "k": key, "t": batch.table, "s": batch.seq, "n": [len(p.rows) for p in parts]}
        self._write(record, sync=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- reading and compacting ----------------------------------------------------------------
    def recover(self) -> Recovered:
        """Read what an earlier run left, compact it, and open the journal for this run."""
        self.close()
        sequences: dict[str, int] = {}
        batches: dict[Ident, Batch] = {}
        requests: dict[str, list[Ident]] = {}
        solo: set[Ident] = set()
        #: Updates split into one part per send (``divide``), with their parts' row counts.
        divided: dict[Ident, list[int]] = {}
        checkpoint: str | None = None
        epoch = uuid.uuid4().hex[:8]
        gone: set[Ident] = set()
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
                first = 0  # an add record is one send: its parts follow one another in its rows
                for part in record["p"]:
                    key = (part["t"], part["s"], part.get("x"))
                    batch = batches.get(key)
                    if batch is None:
                        batch = batches[key] = Batch(part["t"], part["s"], 0.0, part=part.get("x"))
                    first = part.get("i", first)
                    if "a" in part:  # a send of columns: its Arrow stream, sent again byte for byte
                        batch.arrow = base64.b64decode(part["a"])
                        batch.nbytes = len(batch.arrow)
                        count = part["n"]
                        solo.add(key)
                    elif "f" in part:
                        batch.files = tuple(part["f"])
                        batch.nbytes = sum(len(f) for f in batch.files)
                        count = 0
                    else:
                        batch.rows.extend(part["r"])
                        batch.nbytes += sum(len(r) + 1 for r in part["r"])
                        count = len(part["r"])
                    # The send's checkpoint: its own (``c``), or kept by compaction (``sc``).
                    batch.segments.append(Segment(None, count, first, record["u"], record.get("sc", record.get("c"))))
                    first += count
                    batch.later(record["u"])
                    if part.get("o") or part.get("x") is not None:
                        solo.add(key)
                    if part.get("k"):
                        batch.explicit_key = part["k"]
                        solo.add(key)
                    sequences[part["t"]] = max(sequences.get(part["t"], 0), part["s"] + 1)
            elif op == "req":
                requests[record["k"]] = [_ident(p) for p in record["p"]]
            elif op == "done":
                gone.update(requests.pop(record["k"], ()))
            elif op == "split":
                solo.update(requests.pop(record["k"], ()))
            elif op == "divide":
                requests.pop(record["k"], None)
                divided[(record["t"], record["s"], None)] = record["n"]
        live: list[Batch] = []
        for key, batch in batches.items():
            if key in divided:
                parts = batch.split()
                if [len(p.rows) for p in parts] != divided[key]:
                    raise ValueError(
                        f"{self.path}: update {key[0]}/{key[1]} was split into parts of {divided[key]} rows but its "
                        f"sends hold {[len(p.rows) for p in parts]}; the journal is damaged"
                    )
                live.extend(parts)
            else:
                batch.solo = key in solo
                live.append(batch)
        recovered = Recovered(sequences=sequences, checkpoint=checkpoint, epoch=epoch)
        by_ident = {b.ident: b for b in live}
        in_requests: set[Ident] = set()
        for key, idents in requests.items():
            carried = [by_ident[i] for i in idents if i in by_ident and i not in gone]
            if carried:
                recovered.requests.append((key, carried))
                in_requests.update(idents)
        recovered.waiting = [b for b in live if b.ident not in gone and b.ident not in in_requests]
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
                # One record a send, as ``add`` wrote them: a split after a restart finds the sends.
                for part, segment in _segment_parts(batch):
                    if batch.solo:
                        part["o"] = 1
                    record: dict[str, Any] = {"op": "add", "p": [part], "u": segment.data_until}
                    if segment.checkpoint is not None:
                        record["sc"] = segment.checkpoint
                    out.write(json.dumps(record, separators=(",", ":")) + "\n")
            for key, batches in state.requests:
                parts = [_name(b) for b in batches]
                out.write(json.dumps({"op": "req", "k": key, "p": parts}, separators=(",", ":")) + "\n")
            out.flush()
            os.fsync(out.fileno())
        temporary.replace(self.path)
        _fsync_dir(self.directory)
        self._file = self.path.open("a", encoding="utf-8")
        self.size = self.path.stat().st_size
