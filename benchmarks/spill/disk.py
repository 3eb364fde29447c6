"""Part 2 of ``benchmarks/spill/``: the live spill segments against this disk's raw bandwidth.

Like with like: spill segments are not fsynced in the service (the WAL is the durability), so
writes are compared without fsync (mostly CPU) and with an fsync of everything written; reads
come from the device (pages dropped with ``posix_fadvise(DONTNEED)``, checked with ``fincore``).
The raw figure is the best of three passes: in this VM a pass varies 2-5x with how recently
the host backed the page-cache memory it gets, and the best pass is the hardest comparison.
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

from loader.core.updates import Update
from loader.pending.spill.model import DiskOp, Item
from loader.pending.spill.registry import make_spill_policy
from loader.pending.spill.segments import SegmentFiles
from loader.pending.store import PendingStore

MiB = 1 << 20
PIECE = 4 * MiB
RAW_PASSES = 3
TABLES = 4
POLICY = "buffered-head"
EVENT_TYPES = ["page_view", "click", "add_to_cart", "purchase", "refund", "signup", "login", "logout", "search"]
COUNTRIES = ["US", "GB", "DE", "FR", "IN", "BR", "JP", "CA", "AU", "NL", "ES", "IT"]

SCHEMA = pa.schema(
    [
        ("event_id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("user_id", pa.int64()),
        ("session_id", pa.string()),
        ("event_type", pa.string()),
        ("amount", pa.float64()),
        ("quantity", pa.int32()),
        ("country", pa.string()),
        ("url", pa.string()),
        ("is_mobile", pa.bool_()),
        ("score", pa.float32()),
    ]
)


def event_rows(target_bytes: int, seed: int) -> pa.Table:
    """An events table of about ``target_bytes`` of Arrow buffers (random, so nothing compresses away)."""
    rng = np.random.default_rng(seed)
    sample = _rows(rng, 1000)
    rows = max(1, int(target_bytes * 1000 / sample.get_total_buffer_size()))
    return _rows(rng, rows)


def _rows(rng: np.random.Generator, n: int) -> pa.Table:
    start = 1_700_000_000_000_000
    hexes = rng.integers(0, 1 << 62, size=(n, 2))
    sessions = [f"{a:016x}{b:016x}" for a, b in hexes.tolist()]
    paths = rng.integers(0, 1 << 40, size=n).tolist()
    depth = rng.integers(1, 5, size=n).tolist()
    urls = [f"https://shop.example.com/{'/'.join(['c'] * d)}/item-{p:x}?ref=feed" for p, d in zip(paths, depth)]
    return pa.table(
        {
            "event_id": pa.array(rng.integers(0, 1 << 62, size=n), pa.int64()),
            "ts": pa.array(start + np.sort(rng.integers(0, 3_600_000_000, size=n)), pa.timestamp("us", tz="UTC")),
            "user_id": pa.array(rng.integers(0, 10_000_000, size=n), pa.int64()),
            "session_id": pa.array(sessions, pa.string()),
            "event_type": pa.array([EVENT_TYPES[i] for i in rng.integers(0, len(EVENT_TYPES), size=n)], pa.string()),
            "amount": pa.array(rng.gamma(2.0, 20.0, size=n), pa.float64()),
            "quantity": pa.array(rng.integers(1, 10, size=n), pa.int32()),
            "country": pa.array([COUNTRIES[i] for i in rng.integers(0, len(COUNTRIES), size=n)], pa.string()),
            "url": pa.array(urls, pa.string()),
            "is_mobile": pa.array(rng.random(size=n) < 0.6, pa.bool_()),
            "score": pa.array(rng.random(size=n), pa.float32()),
        },
        schema=SCHEMA,
    )


class TimedSegments(SegmentFiles):
    """SegmentFiles that clocks its own writes and reads, and remembers every file it wrote."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, lambda _table: SCHEMA)
        self.write_seconds = 0.0
        self.read_seconds = 0.0
        self.file_bytes_written = 0
        self.file_bytes_read = 0
        self.written_paths: list[Path] = []

    def write(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        began = time.perf_counter()
        super().write(queue, segment, items)
        self.write_seconds += time.perf_counter() - began
        path = self.path(str(queue), segment)
        self.file_bytes_written += path.stat().st_size
        self.written_paths.append(path)

    def read(self, queue: Hashable, segment: int, items: list[Item]) -> None:
        size = self.path(str(queue), segment).stat().st_size
        began = time.perf_counter()
        super().read(queue, segment, items)
        self.read_seconds += time.perf_counter() - began
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
    directories = {path.parent for path in paths if _with_fd(path, os.fsync)}
    for directory in directories:
        _with_fd(directory, os.fsync)
    return time.perf_counter() - began


def drop_from_cache(paths: list[Path]) -> None:
    """Evict the (clean, fsynced) pages of these files: the next read comes from the device."""
    for path in paths:
        _with_fd(path, lambda fd: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))


def cached_bytes(paths: list[Path]) -> int | None:
    """Bytes of these files resident in the page cache (util-linux fincore), None if unavailable."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return 0
    if shutil.which("fincore") is None:
        return None
    try:
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *existing],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(int(line) for line in out.stdout.split() if line.strip().isdigit())


def raw_run(directory: Path, total: int) -> dict[str, Any]:
    """Sequential write (timed without and with its fsync), cold read, warm read of one file."""
    payload = os.urandom(PIECE)
    path = directory / "raw.bin"
    os.sync()
    began = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = 0
        while written < total:
            written += os.write(fd, payload)
        buffered = time.perf_counter() - began
        os.fsync(fd)
    finally:
        os.close(fd)
    durable = time.perf_counter() - began
    drop_from_cache([path])
    resident = cached_bytes([path])
    cold = _read_file(path)
    warm = _read_file(path)
    path.unlink()
    return {
        "bytes": written,
        "write_buffered_s": buffered,
        "write_fsync_s": durable,
        "read_cold_s": cold,
        "read_warm_s": warm,
        "cached_before_cold_read": resident,
        "write_buffered_MBps": written / buffered / 1e6,
        "write_fsync_MBps": written / durable / 1e6,
        "read_cold_MBps": written / cold / 1e6,
        "read_warm_MBps": written / warm / 1e6,
    }


def _read_file(path: Path) -> float:
    buffer = bytearray(PIECE)
    view = memoryview(buffer)
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
    segments = TimedSegments(directory / "spill")
    segments.reset()
    reads: list[DiskOp] = []
    writes: list[DiskOp] = []

    def on_op(op: DiskOp) -> None:
        (writes if op.kind == "write" else reads).append(op)

    store = PendingStore(make_spill_policy(POLICY, budget), budget, segments, on_op=on_op)
    tables = [f"events_{i}" for i in range(TABLES)]
    for table in tables:
        store.add_table(table)
    os.sync()
    arrived = seq = 0
    began = time.perf_counter()
    while arrived < total:
        rows = pool[seq % len(pool)]
        update = Update(tables[seq % TABLES], seq // TABLES + 1, float(seq), rows=rows)
        store.append(update)
        arrived += update.resident_bytes
        seq += 1
    append_s = time.perf_counter() - began
    fill = {
        "updates": seq,
        "payload_bytes": arrived,
        "append_s": append_s,
        "writes": len(writes),
        "payload_bytes_written": sum(op.nbytes for op in writes),
        "file_bytes_written": segments.file_bytes_written,
        "write_s": segments.write_seconds,
        "segment_MiB_median": float(np.median([op.nbytes for op in writes])) / MiB if writes else 0.0,
    }
    fill["fsync_s"] = fsync_paths(segments.written_paths)
    drop_from_cache(segments.written_paths)
    fill["cached_before_drain"] = cached_bytes(segments.written_paths)
    fill["file_bytes_on_disk"] = sum(p.stat().st_size for p in segments.written_paths if p.exists())
    write_ops_before = len(writes)
    began = time.perf_counter()
    while any(store.count(t) for t in tables):
        for table in tables:
            if store.count(table):
                store.take(table, limit=limit)
                store.loaded(table)
    drain_s = time.perf_counter() - began
    drain = {
        "drain_s": drain_s,
        "reads": len(reads),
        "payload_bytes_read": sum(op.nbytes for op in reads),
        "file_bytes_read": segments.file_bytes_read,
        "read_s": segments.read_seconds,
        "writes_during_drain": len(writes) - write_ops_before,
    }
    shutil.rmtree(directory / "spill", ignore_errors=True)
    out = {**fill, **drain}
    w, r = out["write_s"], out["read_s"]
    out["write_buffered_MBps"] = fill["payload_bytes_written"] / w / 1e6 if w else float("nan")
    out["write_fsync_MBps"] = fill["payload_bytes_written"] / (w + fill["fsync_s"]) / 1e6 if w else float("nan")
    out["write_file_MBps"] = fill["file_bytes_written"] / (w + fill["fsync_s"]) / 1e6 if w else float("nan")
    out["read_cold_MBps"] = drain["payload_bytes_read"] / r / 1e6 if r else float("nan")
    out["read_file_MBps"] = drain["file_bytes_read"] / r / 1e6 if r else float("nan")
    return out


def codec_ceiling(pool: list[pa.Table], repeats: int = 5) -> dict[str, float]:
    """The CPU ceiling of the segment writer and reader: Parquet encode and decode of one segment's
    rows in memory with its options, best of ``repeats`` (first encodes into fresh memory are slow here)."""
    import pyarrow.parquet as pq

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
    return {
        "payload_bytes": payload,
        "encode_MBps": payload / min(encode) / 1e6,
        "decode_MBps": payload / min(decode) / 1e6,
    }


def run_io(repeats: int, directory: Path | None, progress: Callable[[str], None], total_mib: int) -> dict[str, Any]:
    total = total_mib * MiB
    budget = 64 * MiB
    limit = 16
    progress(f"[io] building the update pool (1-4 MiB of Arrow rows each, {len(SCHEMA)} columns)")
    pool = update_pool()
    row_bytes = pool[0].get_total_buffer_size() / pool[0].num_rows
    runs = []
    with tempfile.TemporaryDirectory(prefix="spill-bench-", dir=directory) as scratch:
        where = Path(scratch)
        # Untimed warm-up: the first large allocation of page cache in a VM is several times
        # slower than later ones (the host backs guest memory on first touch).
        progress("[io] warm-up (untimed raw write and spill)")
        raw_run(where, total)
        spill_run(where, min(total, 128 * MiB), budget, pool, limit)
        for k in range(repeats):
            progress(f"[io] run {k + 1}/{repeats}: raw file of {total // MiB} MiB, {RAW_PASSES} passes")
            passes = [raw_run(where, total) for _ in range(RAW_PASSES)]
            raw = {key: max(p[key] for p in passes) for key in passes[0] if key.endswith("MBps")}
            raw["cached_before_cold_read"] = max(
                (p["cached_before_cold_read"] for p in passes if p["cached_before_cold_read"] is not None), default=None
            )
            raw["passes"] = passes
            progress(f"[io] run {k + 1}/{repeats}: spill of {total // MiB} MiB through PendingStore (M = 64 MiB)")
            spill = spill_run(where, total, budget, pool, limit)
            runs.append({"raw": raw, "spill": spill, "codec": codec_ceiling(pool)})
        fs = _filesystem(where)
    return {
        "total_bytes": total,
        "budget_bytes": budget,
        "tables": TABLES,
        "policy": POLICY,
        "take_limit": limit,
        "pool": [{"rows": t.num_rows, "bytes": t.get_total_buffer_size()} for t in pool],
        "row_bytes": row_bytes,
        "columns": len(SCHEMA),
        "directory": str(directory) if directory else tempfile.gettempdir(),
        "filesystem": fs,
        "runs": runs,
    }


def _filesystem(path: Path) -> str:
    try:
        out = subprocess.run(
            ["df", "--output=source,fstype", str(path)], capture_output=True, text=True, timeout=10, check=True
        )
        lines = out.stdout.strip().splitlines()
        return " ".join(lines[-1].split()) if len(lines) > 1 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
