"""Part 2 of ``benchmarks/spill/``: the live spill segments against this disk's raw bandwidth.

Like with like: spill segments are not fsynced in the service (the WAL is the durability), so
writes are compared both without fsync and with one; the raw figure is the best of three passes,
the hardest comparison (templates/spill.md says how and why).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.harness.spark import timed
from loader.core.updates import Update
from loader.pending.spill.model import DiskOp, Item
from loader.pending.spill.registry import make_spill_policy
from loader.pending.spill.segments import SegmentFiles
from loader.pending.store import PendingStore
from testing.report import log

MiB = 1 << 20
PIECE = 4 * MiB
RAW_PASSES = 3
TABLES = 4
POLICY = "buffered-head"
EVENT_TYPES = "page_view click add_to_cart purchase refund signup login logout search".split()
COUNTRIES = "US GB DE FR IN BR JP CA AU NL ES IT".split()


def event_rows(target_bytes: int, seed: int) -> pa.Table:
    """An events table of about ``target_bytes`` of Arrow buffers (random, so nothing compresses away)."""
    rng = np.random.default_rng(seed)
    sample = _rows(rng, 1000)
    return _rows(rng, max(1, int(target_bytes * 1000 / sample.get_total_buffer_size())))


def _rows(rng: np.random.Generator, n: int) -> pa.Table:
    sessions = [f"{a:016x}{b:016x}" for a, b in rng.integers(0, 1 << 62, size=(n, 2)).tolist()]
    paths, depth = rng.integers(0, 1 << 40, size=n).tolist(), rng.integers(1, 5, size=n).tolist()
    urls = [f"https://shop.example.com/{'/'.join(['c'] * d)}/item-{p:x}?ref=feed" for p, d in zip(paths, depth)]
    ids, ts = rng.integers(0, 1 << 62, size=n), np.sort(rng.integers(0, 3_600_000_000, size=n))  # in column order
    columns = {"event_id": ids, "ts": pa.array(1_700_000_000_000_000 + ts, pa.timestamp("us", tz="UTC"))}
    columns |= {"user_id": rng.integers(0, 10_000_000, size=n), "session_id": sessions}
    columns["event_type"] = [EVENT_TYPES[i] for i in rng.integers(0, len(EVENT_TYPES), size=n)]
    columns |= {"amount": rng.gamma(2.0, 20.0, size=n), "quantity": rng.integers(1, 10, size=n).astype(np.int32)}
    columns["country"] = [COUNTRIES[i] for i in rng.integers(0, len(COUNTRIES), size=n)]
    columns |= {"url": urls, "is_mobile": rng.random(size=n) < 0.6, "score": rng.random(size=n).astype(np.float32)}
    return pa.table(columns)


class TimedSegments(SegmentFiles):
    """SegmentFiles that clocks its own writes and reads, and remembers every file it wrote."""

    def __init__(self, directory: Path, schema: pa.Schema) -> None:
        super().__init__(directory, lambda _table: schema)
        self.write_seconds = self.read_seconds = 0.0
        self.file_bytes_written = self.file_bytes_read = 0
        self.written_paths: list[Path] = []

    def write(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        self.write_seconds += timed(super().write, queue, segment, items)[1]
        path = self.path(str(queue), segment)
        self.file_bytes_written += path.stat().st_size
        self.written_paths.append(path)

    def read(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        size = self.path(str(queue), segment).stat().st_size
        self.read_seconds += timed(super().read, queue, segment, items)[1]
        self.file_bytes_read += size


def _with_fd(path: Path, action: Callable[[int], object]) -> bool:
    """Apply ``action`` to a read-only descriptor of ``path``; False if the file no longer exists."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        action(fd)
    finally:
        os.close(fd)
    return True


def fsync_paths(paths: list[Path]) -> float:
    """fsync every file that still exists, then their directories; seconds taken."""
    began = time.perf_counter()
    for directory in {path.parent for path in paths if _with_fd(path, os.fsync)}:
        _with_fd(directory, os.fsync)
    return time.perf_counter() - began


def drop_from_cache(paths: list[Path]) -> None:
    """Evict the (clean, fsynced) pages of these files: the next read comes from the device."""
    for path in paths:
        _with_fd(path, lambda fd: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))


def _output(*command: str) -> str | None:
    """What ``command`` prints, None if it is missing or fails."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def cached_bytes(paths: list[Path]) -> int | None:
    """Bytes of these files resident in the page cache (util-linux fincore), None if unavailable."""
    if not (existing := [str(p) for p in paths if p.exists()]):
        return 0
    out = _output("fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *existing)
    return None if out is None else sum(int(line) for line in out.split() if line.isdigit())


def rates(figures: dict[str, tuple[int, float]]) -> dict[str, float]:
    """``<name>_MBps`` of each figure's (bytes, seconds), NaN where no time was spent."""
    return {f"{k}_MBps": n / s / 1e6 if s else float("nan") for k, (n, s) in figures.items()}


def raw_run(directory: Path, total: int) -> dict[str, Any]:
    """Sequential write (timed without and with its fsync), cold read, warm read of one file."""
    payload, path, written = os.urandom(PIECE), directory / "raw.bin", 0
    os.sync()
    began = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while written < total:
            written += os.write(fd, payload)
        buffered = time.perf_counter() - began
        os.fsync(fd)
    finally:
        os.close(fd)
    durable = time.perf_counter() - began
    drop_from_cache([path])
    resident, cold, warm = cached_bytes([path]), _read_file(path), _read_file(path)
    path.unlink()
    seconds = {"write_buffered": buffered, "write_fsync": durable, "read_cold": cold, "read_warm": warm}
    out = {"bytes": written, **{f"{k}_s": s for k, s in seconds.items()}, "cached_before_cold_read": resident}
    return out | rates({k: (written, s) for k, s in seconds.items()})


def _read_file(path: Path) -> float:
    view = memoryview(bytearray(PIECE))
    began = time.perf_counter()
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(view):
            pass
    return time.perf_counter() - began


def update_pool(count: int = 8, seed: int = 7) -> list[pa.Table]:
    """Row payloads of 1 to 4 MiB, shared by the updates (the segment writer copies them to disk)."""
    rng = random.Random(seed)
    return [event_rows(int(rng.uniform(1, 4) * MiB), seed + i) for i in range(count)]


def spill_run(directory: Path, total: int, budget: int, pool: list[pa.Table], limit: int) -> dict[str, Any]:
    """Fill the store until ``total`` payload bytes arrived, then drain it ``limit`` updates at a time."""
    segments = TimedSegments(directory / "spill", pool[0].schema)
    segments.reset()
    ops: dict[str, list[DiskOp]] = {"write": [], "read": []}
    store = PendingStore(make_spill_policy(POLICY, budget), budget, segments, on_op=lambda op: ops[op.kind].append(op))
    tables = [f"events_{i}" for i in range(TABLES)]
    for table in tables:
        store.add_table(table)
    os.sync()
    arrived = seq = 0
    began = time.perf_counter()
    while arrived < total:
        update = Update(tables[seq % TABLES], seq // TABLES + 1, float(seq), rows=pool[seq % len(pool)])
        store.append(update)
        arrived += update.resident_bytes
        seq += 1
    writes, paths = ops["write"], segments.written_paths
    out = {"updates": seq, "payload_bytes": arrived, "append_s": time.perf_counter() - began, "writes": len(writes)}
    out |= {"payload_bytes_written": sum(op.nbytes for op in writes), "file_bytes_written": segments.file_bytes_written}
    out["write_s"] = segments.write_seconds
    out["segment_MiB_median"] = float(np.median([op.nbytes for op in writes])) / MiB if writes else 0.0
    out["fsync_s"] = fsync_paths(paths)
    drop_from_cache(paths)
    out["cached_before_drain"] = cached_bytes(paths)
    out["file_bytes_on_disk"] = sum(p.stat().st_size for p in paths if p.exists())
    written_before, began = len(writes), time.perf_counter()
    while any(store.count(t) for t in tables):
        for table in (t for t in tables if store.count(t)):
            store.take(table, limit=limit)
            store.loaded(table)
    reads = ops["read"]
    out |= {"drain_s": time.perf_counter() - began, "reads": len(reads)}
    out["payload_bytes_read"] = sum(o.nbytes for o in reads)
    out |= {"file_bytes_read": segments.file_bytes_read, "read_s": segments.read_seconds}
    out["writes_during_drain"] = len(writes) - written_before
    shutil.rmtree(directory / "spill", ignore_errors=True)
    w, r = out["write_s"], out["read_s"]
    durable = w + out["fsync_s"] if w else 0.0  # nothing written: no write rates
    written, read = out["payload_bytes_written"], out["payload_bytes_read"]
    figures = {"write_buffered": (written, w), "write_fsync": (written, durable)}
    figures |= {"write_file": (out["file_bytes_written"], durable), "read_cold": (read, r)}
    return out | rates(figures | {"read_file": (out["file_bytes_read"], r)})


def codec_ceiling(pool: list[pa.Table], repeats: int = 5) -> dict[str, float]:
    """Parquet encode and decode of one segment's rows in memory, with the segment writer's options:
    best of ``repeats`` (first encodes into fresh memory are slow here)."""
    data = pa.concat_tables(pool[:4])
    payload = data.get_total_buffer_size()
    encode, decode = [], []
    for _ in range(repeats):
        sink = pa.BufferOutputStream()
        began = time.perf_counter()
        pq.write_table(data, sink, compression="none", use_dictionary=False, write_statistics=False)
        encode.append(time.perf_counter() - began)
        buffer = sink.getvalue()
        began = time.perf_counter()
        pq.read_table(pa.BufferReader(buffer))
        decode.append(time.perf_counter() - began)
    return {"payload_bytes": payload, **rates({"encode": (payload, min(encode)), "decode": (payload, min(decode))})}


def run_io(repeats: int, directory: Path | None, total_mib: int) -> dict[str, Any]:
    total, budget, limit = total_mib * MiB, 64 * MiB, 16
    log("[io] building the update pool (1-4 MiB of Arrow rows each)")
    pool = update_pool()
    runs = []
    with tempfile.TemporaryDirectory(prefix="spill-bench-", dir=directory) as scratch:
        where = Path(scratch)
        # Untimed warm-up: the first large allocation of page cache in a VM is several times
        # slower than later ones (the host backs guest memory on first touch).
        log("[io] warm-up (untimed raw write and spill)")
        raw_run(where, total)
        spill_run(where, min(total, 128 * MiB), budget, pool, limit)
        for k in range(repeats):
            log(f"[io] run {k + 1}/{repeats}: raw file of {total // MiB} MiB, {RAW_PASSES} passes")
            passes = [raw_run(where, total) for _ in range(RAW_PASSES)]
            raw = {key: max(p[key] for p in passes) for key in passes[0] if key.endswith("MBps")}
            cached = [p["cached_before_cold_read"] for p in passes if p["cached_before_cold_read"] is not None]
            raw |= {"cached_before_cold_read": max(cached, default=None), "passes": passes}
            log(f"[io] run {k + 1}/{repeats}: spill of {total // MiB} MiB through PendingStore (M = 64 MiB)")
            spill = spill_run(where, total, budget, pool, limit)
            runs.append({"raw": raw, "spill": spill, "codec": codec_ceiling(pool)})
        lines = (_output("df", "--output=source,fstype", scratch) or "").strip().splitlines()
    out = {"total_bytes": total, "budget_bytes": budget, "tables": TABLES, "policy": POLICY, "take_limit": limit}
    out["pool"] = [{"rows": t.num_rows, "bytes": t.get_total_buffer_size()} for t in pool]
    out |= {"row_bytes": pool[0].get_total_buffer_size() / pool[0].num_rows, "columns": pool[0].num_columns}
    out["directory"] = str(directory) if directory else tempfile.gettempdir()
    out["filesystem"] = " ".join(lines[-1].split()) if len(lines) > 1 else "unknown"
    return out | {"runs": runs}
