"""A Delta table made old quickly: many commits written straight into its log, dated back.

Months of loads, without months: each commit is what a load that found nothing new to add
would leave (``commitInfo`` and the load's application transaction, written with the direct
log commit's own format, loader/loading/sinks/log_commit.py), checkpoints where deltalake
would have written them every ``checkpoint_every`` versions (deltalake writes them), and every
log file's modification time set ``days_old`` days back, as cleanup reads a file's age from
it. deltalake reads the result as any table with that many versions (tests/loader/ops/
test_delta_log.py; BENCHMARKS.md, "Tables that age").
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from deltalake import DeltaTable

from loader.durability.transactions import app_id
from loader.loading.sinks.log_commit import log_entry


def age_table(root: Path, table: str, commits: int, *, checkpoint_every: int = 1000, days_old: float = 10.0) -> int:
    """``commits`` commits after the table's current version, each the loader's application
    transaction of the next sequence number; returns the table's new version."""
    delta = DeltaTable(str(root))
    start, app = delta.version(), app_id(table)
    seq = delta.transaction_version(app) or 0
    log_dir = root / "_delta_log"
    for v in range(start + 1, start + commits + 1):
        seq += 1
        (log_dir / f"{v:020d}.json").write_bytes(log_entry([], app, seq, {}, 0))
        if (v + 1) % checkpoint_every == 0 or v == start + commits:
            delta.update_incremental()
            delta.create_checkpoint()
    then = time.time() - days_old * 86400
    with os.scandir(log_dir) as entries:
        for entry in entries:
            os.utime(entry.path, (then, then))
    return start + commits
