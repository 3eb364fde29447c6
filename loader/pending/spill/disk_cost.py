"""c0 and c1 of the spill disk: the extended cost model of one operation, c0 + c1 * bytes (section 3).

Measured as a whole file written sequentially and made durable, for a small and a
large size. Spills are not fsynced, but their cost to the disk is paid all the same when
the page cache writes them back; timing without the fsync would measure a memory copy.
The line through the two medians gives the fixed cost per operation (c0: open, metadata,
the device's latency) and the cost per byte (c1: bandwidth). Takes well under a second;
run once at start-up when a policy needs the figures and configuration does not give them.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SMALL = 64 << 10
LARGE = 16 << 20


@dataclass(frozen=True)
class DiskCost:
    c0: float  # seconds per operation
    c1: float  # seconds per byte

    @property
    def block_bytes(self) -> float:
        """GreedyChunk's T = c0 / c1: the size at which transfer costs as much as the seek."""
        return self.c0 / self.c1

    @property
    def bandwidth(self) -> float:
        return 1.0 / self.c1


def _timed_write(directory: Path, payload: bytes) -> float:
    path = directory / f".disk-cost-{uuid.uuid4().hex}"
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - started
    path.unlink()
    return elapsed


def measure(directory: Path, repeats: int = 3) -> DiskCost:
    """Median of ``repeats`` timed writes at two sizes; c0 and c1 kept positive."""
    directory.mkdir(parents=True, exist_ok=True)
    small = os.urandom(SMALL)
    large = os.urandom(LARGE)
    t_small = statistics.median(_timed_write(directory, small) for _ in range(repeats))
    t_large = statistics.median(_timed_write(directory, large) for _ in range(repeats))
    c1 = max((t_large - t_small) / (LARGE - SMALL), 1e-12)
    c0 = max(t_small - c1 * SMALL, 1e-6)
    return DiskCost(c0, c1)
