"""Tables that age: a load into a table 100,000 commits old, and an outside reader's open of it,
against the same on a new table, before and after the log-keeping job (issue 38, part 4).

The old table is made old quickly (``testing.aged_tables.age_table``: commits written straight
into its log with the loader's application transaction, checkpoints every 1,000 versions,
every log file dated ten days back), the new one is created as the loader creates tables
(checkpoint interval 20, no commits). Both then take the same loads from one ``DeltaRsSink``
on an in-process Spark session (100 rows a load, the default lean changes: the cached handle,
the check of the loader's own last commit, the direct log commit and its checkpoints every 20
versions), the two tables' loads interleaved. "Open" is what a reader that never saw the
table does: ``DeltaTable(path)`` and its application transaction.

Phases: ``before``, the old table as it aged under Delta's default 30-day log retention (as
the loader's tables did before it gave them a retention); then both tables are given the
retention the loader now gives the tables it creates (168 hours: an existing table keeps its
own until someone sets it, here by hand), the log-keeping job runs once on both
(``loader.ops.delta_log.keep_log``), and ``after``. Ratios old / new within each round, medians over rounds.
Targets (after): a load at most 1.2x a new table's, an open at most 1.2x.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.spark import session
from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from loader.durability.transactions import app_id
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.sinks.delta_table import create_table
from loader.loading.sinks.log_cleanup import RETENTION, retention_value
from loader.ops.delta_log import keep_log
from testing.aged_tables import age_table
from testing.report import log, machine_markdown

SCHEMA = TableSchema.model_validate(
    {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "v", "type": "float64"}]}
)
ROWS = 100
TARGET = 1.2
RETENTION_HOURS = 168
T = Template("aged-tables")


def _rows(seq: int) -> pa.Table:
    ids = pa.array(range(seq * ROWS, (seq + 1) * ROWS), pa.int64())
    return pa.table({"id": ids, "v": pa.array([float(seq)] * ROWS)}, schema=SCHEMA.arrow())


def _open(path: Path, table: str) -> float:
    began = time.perf_counter()
    DeltaTable(str(path)).transaction_version(app_id(table))
    return time.perf_counter() - began


def _log_files(path: Path) -> int:
    return len(os.listdir(path / "_delta_log"))


def _listing(path: Path, repeats: int = 51) -> dict[str, float]:
    """The ``_delta_log`` directory's own size and the median time to list it: a directory
    that once held 100,000 entries keeps its size on ext4 (it never shrinks), and every
    listing reads all of it, whatever is left."""
    log_dir = path / "_delta_log"
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        os.listdir(log_dir)
        times.append(time.perf_counter() - began)
    return {"dir_bytes": log_dir.stat().st_size, "list_ms": 1e3 * statistics.median(times)}


def _fresh_copy_opens(warehouse: Path, opens: int, repeats: int) -> list[float]:
    """The old table copied (the same files in a new directory), against the new table:
    the open ratio per round, as ``phase`` takes it."""
    shutil.copytree(warehouse / "old", warehouse / "old-copy")
    ratios = []
    for _ in range(repeats):
        copy = [_open(warehouse / "old-copy", "old") for _ in range(opens)]
        new = [_open(warehouse / "new", "new") for _ in range(opens)]
        ratios.append(statistics.median(copy) / statistics.median(new))
    return ratios


class Tables:
    """The two tables, their next sequence numbers and the sink loading both."""

    def __init__(self, warehouse: Path, sink: DeltaRsSink) -> None:
        self.warehouse, self.sink = warehouse, sink
        self.next = {"old": 0, "new": 0}

    def load(self, name: str) -> float:
        seq = self.next[name] = self.next[name] + 1
        batch = Batch(name, (Update(table=name, seq=seq, release=float(seq), rows=_rows(seq)),))
        began = time.perf_counter()
        result = self.sink.load(batch, SCHEMA)
        elapsed = time.perf_counter() - began
        assert result.rows == ROWS and not result.skipped, result
        return elapsed


def phase(tables: Tables, rounds: int, loads: int, opens: int) -> list[dict[str, float]]:
    """``rounds`` rounds; in each, ``loads`` loads of each table in turn (enough to pass a
    checkpoint) and ``opens`` opens of each in turn: per round the mean load, the median open."""
    out = []
    for _ in range(rounds):
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(loads):
            for name in ("old", "new"):
                times[name].append(tables.load(name))
        opened: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(opens):
            for name in ("old", "new"):
                opened[name].append(_open(tables.warehouse / name, name))
        row = {f"load_{n}_ms": 1e3 * statistics.fmean(times[n]) for n in times}
        row |= {f"open_{n}_ms": 1e3 * statistics.median(opened[n]) for n in opened}
        row["load_ratio"] = row["load_old_ms"] / row["load_new_ms"]
        row["open_ratio"] = row["open_old_ms"] / row["open_new_ms"]
        out.append(row)
    return out


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    run.meta.update(commits=args.commits, rows=ROWS, loads=args.loads, opens=args.opens, retention=RETENTION_HOURS)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="aged-") as tmp, session() as spark:
        warehouse = Path(tmp)
        properties = {"delta.checkpointInterval": "20"}  # as the loader creates its tables
        for name in ("old", "new"):
            create_table(warehouse / name, SCHEMA.arrow(), [], name=name, properties=properties)
        began = time.perf_counter()
        age_table(warehouse / "old", "old", args.commits, checkpoint_every=1000)
        results["age_seconds"] = time.perf_counter() - began
        log(f"aged a table by {args.commits:,} commits in {results['age_seconds']:.0f} s")
        tables = Tables(warehouse, DeltaRsSink(warehouse, spark))
        tables.next["old"] = args.commits
        for name in ("old", "new"):  # each table's first load (the handle opened, Spark warm)
            tables.load(name)
        results["files_before"] = {n: _log_files(warehouse / n) for n in ("old", "new")}
        results["before"] = phase(tables, args.repeats, args.loads, args.opens)
        log(f"before: {results['before']}")
        for name in ("old", "new"):
            DeltaTable(str(warehouse / name)).alter.set_table_properties({RETENTION: retention_value(RETENTION_HOURS)})
        kept = {n: keep_log(n, warehouse / n) for n in ("old", "new")}
        results["keep_log"] = {n: {"removed": k.removed, "after": k.files_after} for n, k in kept.items()}
        results["files_kept"] = {n: _log_files(warehouse / n) for n in ("old", "new")}
        results["after"] = phase(tables, args.repeats, args.loads, args.opens)
        log(f"after: {results['after']}")
        results["files_after"] = {n: _log_files(warehouse / n) for n in ("old", "new")}
        results["listing"] = {n: _listing(warehouse / n) for n in ("old", "new")}
        results["fresh_copy_open_ratios"] = _fresh_copy_opens(warehouse, args.opens, args.repeats)
    for name in ("before", "after"):
        results[f"{name}_median"] = {k: statistics.median(r[k] for r in results[name]) for k in results[name][0]}
    return results


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    rows = [{"phase": name, **results[f"{name}_median"]} for name in ("before", "after")]
    after = results["after_median"]
    verdicts = {
        k: ("PASS" if after[f"{k}_ratio"] <= TARGET else "MISS") + f" ({after[f'{k}_ratio']:.2f})"
        for k in ("load", "open")
    }
    listing = results.get("listing")
    directory = ""
    if listing is not None:
        directory = T(
            "directory",
            old=listing["old"],
            new=listing["new"],
            copy_ratio=statistics.median(results["fresh_copy_open_ratios"]),
            commits=meta["commits"],
            old_mb=listing["old"]["dir_bytes"] / 2**20,
            new_kb=listing["new"]["dir_bytes"] / 2**10,
        )
    return T(
        "section",
        directory=directory,
        machine=machine_markdown(meta, "loader"),
        meta=meta,
        table=T.table("table", rows),
        target=TARGET,
        verdicts=verdicts,
        files=results["files_before"],
        kept=results["files_kept"],
        final=results["files_after"],
        age_seconds=results["age_seconds"],
    )


BENCHMARK = Benchmark(
    measure,
    render,
    repeats=(2, 5),
    counts={
        "commits": (10_000, 100_000, "commits the old table is aged by"),
        "loads": (20, 40, "loads of each table a round (checkpoints every 20)"),
        "opens": (5, 9, "opens of each table a round"),
    },
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
