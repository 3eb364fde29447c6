"""An upsert that costs the batch (issue 38, part 1): a latest table's load with deletion vectors
(``upsert = "deletion-vectors"``, loader/loading/sinks/upsert_dv.py) against deltalake's MERGE
(``upsert = "merge"``) and against an append of the same rows, into tables of 1M, 10M and 100M keys;
then a read of the whole table by deltalake and DuckDB, deletion-vector layout against MERGE layout.

The three tables of a size share one set of data files (hard links), written once: files of
2^20 rows sorted by key in row groups of 16,384 rows (the layout the deletion-vector compaction
leaves; the MERGE reads the same files). Each run loads one batch of 100 rows (half new keys, half
held keys at random, one key twice) into each table through one ``DeltaRsSink`` (Spark ``local[2]``
in process: the Spark step, then the commit), in an order rotating from run to run. The MERGE table
is restored to its layout after each load (untimed: ``restore``, then vacuum of what the MERGE wrote);
the deletion-vector table keeps what each load leaves (one small file, one deletion vector file),
as it would between compactions. Reads after the runs: ``SELECT count(*), sum(v), sum(ts)`` over
the whole table by deltalake's query engine (which applies deletion vectors) and by DuckDB (the
log's files, each file's deleted rows left out by position, ``file_row_number``), the two layouts
interleaved; then the deletion-vector table compacted once with every deleted row purged
(dv_compaction, ``purge_fraction=0``) and read again.
Targets: a load at most 3x the append's at every size; a read at most 1.5x the MERGE layout's.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder
from deltalake.transaction import AddAction

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import int_keys
from benchmarks.harness.spark import schema
from loader.loading.estimates import CostEstimate
from loader.loading.sinks import deletion_vectors
from loader.loading.sinks.add_actions import file_stats
from loader.loading.sinks.dv_compaction import compact_latest
from loader.loading.sinks.live_files import LiveFiles
from loader.loading.sinks.log_commit import commit_next, log_entry
from loader.loading.sinks.upsert_dv import ROW_GROUP_ROWS
from schedulers.keys.cost import Rewrite, learned
from testing.report import log, machine_markdown

COLUMNS = ("id int64 not null", "v float64", "ts int64 not null")
SCHEMAS = {
    "append": schema(*COLUMNS),
    "merge": schema(*COLUMNS, key=["id"], order_by="ts"),
    "dv": schema(*COLUMNS, key=["id"], order_by="ts", upsert="deletion-vectors"),
}
VARIANTS = tuple(SCHEMAS)
LABELS = {"append": "append", "merge": "MERGE", "dv": "deletion vectors"}
ROWS = 100
#: New keys a batch holds (its even positions; its last, odd, position repeats its first).
NEW_KEYS = ROWS // 2
FILE_ROWS = 1 << 20
READS = 3
LOAD_TARGET, READ_TARGET = 3.0, 1.5
T = Template("upsert-dv")


def write_base(directory: Path, size: int) -> list[tuple[str, int, str]]:
    """The shared data files: name, bytes, statistics (keys 0 .. size-1, sorted)."""
    files = []
    for start in range(0, size, FILE_ROWS):
        ids = np.arange(start, min(size, start + FILE_ROWS), dtype=np.int64)
        rows = pa.table({"id": ids, "v": np.zeros(len(ids)), "ts": np.zeros(len(ids), np.int64)})
        name = f"part-{start // FILE_ROWS:05d}-base-c000.snappy.parquet"
        pq.write_table(rows, directory / name, row_group_size=ROW_GROUP_ROWS, compression="snappy")
        files.append((name, (directory / name).stat().st_size, file_stats(str(directory / name), SCHEMAS["merge"])))
    return files


def make_table(sink: Any, name: str, variant: str, base: Path, files: list[tuple[str, int, Any]]) -> int:
    """The variant's table over the shared files (hard links, one commit); its version."""
    sink.ensure_table(name, SCHEMAS[variant])
    root = sink.table_path(name)
    now = int(time.time() * 1000)
    actions = []
    for file, size, stats in files:
        os.link(base / file, root / file)
        actions.append(AddAction(file, size, {}, now, True, stats.to_json()))
    version = DeltaTable(str(root)).version()
    rows = sum(s.num_records for _, _, s in files)
    if not commit_next(root, version + 1, log_entry(actions, "benchmark-base", 0, {}, rows)):
        raise RuntimeError(f"could not write the base commit of {name}")
    return version + 1


def batch_rows(rng: random.Random, held: int, seq: int) -> pa.Table:
    """New keys at even positions, held keys at random at odd ones, the first key again last."""
    ids = [rng.randrange(held) if i % 2 else held + seq * ROWS + i for i in range(ROWS)]
    ids[-1] = ids[0]
    return pa.table({"id": ids, "v": [rng.random() for _ in ids], "ts": [seq] * ROWS}, schema=SCHEMAS["merge"].arrow())


def restore(root: Path, version: int) -> None:
    delta = DeltaTable(str(root))
    delta.restore(version)
    DeltaTable(str(root)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)


def read_deltalake(root: Path) -> tuple[float, tuple[Any, ...]]:
    began = time.perf_counter()
    query = "SELECT count(*) AS n, sum(v) AS v, sum(ts) AS ts FROM t"
    row = pa.table(QueryBuilder().register("t", DeltaTable(str(root))).execute(query).read_all()).to_pylist()[0]
    return time.perf_counter() - began, (row["n"], row["v"], row["ts"])


def read_duckdb(root: Path) -> tuple[float, tuple[Any, ...]]:
    """DuckDB over the log's files, each file's deleted rows (its deletion vector) left out."""
    began = time.perf_counter()
    live = LiveFiles(root)
    live.advance(DeltaTable(str(root)).version())
    paths = [str(root / name) for name in live.files]
    names, positions = [], []
    for name, file in live.files.items():
        if file.dv is not None:
            gone = deletion_vectors.read(root, file.dv)
            names += [str(root / name)] * len(gone)
            positions += list(gone)
    con = duckdb.connect()
    deleted = pa.table({"filename": pa.array(names, pa.string()), "pos": pa.array(positions, pa.int64())})
    con.register("deleted", deleted)
    scan = "read_parquet($paths, filename = true, file_row_number = true)"
    row = con.execute(
        f"SELECT count(*), sum(v), sum(ts) FROM {scan} p ANTI JOIN deleted d "
        "ON p.filename = d.filename AND p.file_row_number = d.pos",
        {"paths": paths},
    ).fetchone()
    assert row is not None
    return time.perf_counter() - began, tuple(row)


def measure_sizes(sizes: tuple[int, ...], runs: int, large_runs: int) -> dict[str, Any]:
    rng = random.Random(38)
    out: dict[str, Any] = {"sizes": list(sizes), "runs": {}, "times": {}, "reads": {}, "layout": {}, "predicted": {}}
    # The dispatcher's model of each latest table (loader/loading/dispatcher.py): a line per key
    # loaded and what its upsert rewrote (schedulers/keys/cost.py), learned from each load's
    # result; it predicts each load before it runs. It carries over from size to size, as a
    # live table's would while the table grows.
    models = {v: (CostEstimate(alpha=0.0, overhead=0.3), Rewrite()) for v in ("merge", "dv")}
    with spark.sink("upsert-dv-", fair_pools=1) as (_, sink), tempfile.TemporaryDirectory(prefix="dv-base-") as tmp:
        for size in sizes:
            base = Path(tmp) / str(size)
            base.mkdir()
            began = time.perf_counter()
            files = write_base(base, size)
            names = {v: f"{v}_{size}" for v in VARIANTS}
            versions = {v: make_table(sink, names[v], v, base, files) for v in VARIANTS}
            log(f"{size:,}: {len(files)} base files in {time.perf_counter() - began:.1f} s")
            times = out["times"][size] = {v: [] for v in VARIANTS}
            predicted = out["predicted"][size] = {v: [] for v in models}
            n_runs = out["runs"][size] = large_runs if size >= 100_000_000 else runs
            for run in range(-1, n_runs):  # run -1: warm-up
                seq = run + 2
                rows = batch_rows(rng, size, seq)
                for variant in VARIANTS[run % 3 :] + VARIANTS[: run % 3]:
                    update = spark.one_update(names[variant], seq, rows)
                    keys = len(set(rows.column("id").to_pylist()))
                    if variant in models:
                        estimate, rewrite = models[variant]
                        guess = estimate.predict(keys) + rewrite.seconds(keys)
                    loaded, elapsed = spark.timed(sink.load, update, SCHEMAS[variant])
                    if loaded.skipped:
                        raise RuntimeError(f"the load of {names[variant]} (sequence {seq}) was skipped")
                    if variant == "merge":
                        restore(sink.table_path(names[variant]), versions["merge"])
                    if variant in models:
                        details = loaded.details
                        copied = details.get("rows_copied", 0.0)
                        rewrite = learned(
                            rewrite,
                            int(details["stored_rows"]),
                            details["file_rows"],
                            copied,
                            details.get("rewrite_seconds"),
                            (details.get("rows_updated", 0.0), details.get("rows_inserted", 0.0)),
                        )
                        if run >= 0 or size != sizes[0]:  # (not the first loads: the JVM's and caches' warm-up)
                            estimate.observe(keys, max(0.0, elapsed - rewrite.per_row * copied))
                        models[variant] = (estimate, rewrite)
                        if run >= 0:
                            predicted[variant].append(guess)
                    if run >= 0:
                        times[variant].append(elapsed)
                log(f"{size:,} keys: run {run + 1}/{n_runs}")
            reads = out["reads"][size] = {f"{r}_{v}": [] for r in ("deltalake", "duckdb") for v in ("merge", "dv")}
            sums: dict[str, Any] = {}
            for _ in range(READS):
                for variant in ("merge", "dv"):
                    for reader, read in (("deltalake", read_deltalake), ("duckdb", read_duckdb)):
                        seconds, found = read(sink.table_path(names[variant]))
                        reads[f"{reader}_{variant}"].append(seconds)
                        sums[f"{reader}_{variant}"] = found
            dv_root = sink.table_path(names["dv"])
            live = LiveFiles(dv_root)
            live.advance(DeltaTable(str(dv_root)).version())
            layout = out["layout"][size] = {
                "base_files": len(files),
                "dv_files": len(live.files),
                "with_vectors": sum(1 for f in live.files.values() if f.dv is not None),
                "rows_deleted": sum(f.dv.cardinality for f in live.files.values() if f.dv is not None),
                "sums": {k: list(v) for k, v in sums.items()},
            }
            # (a full purge: every file with a deletion vector rewritten, what the reads cost after it)
            done, compaction = spark.timed(compact_latest, dv_root, SCHEMAS["dv"], purge_fraction=0.0)
            layout |= {"compaction_seconds": compaction, "compaction_files_removed": done.files_removed}
            reads["deltalake_dv_compacted"] = [read_deltalake(dv_root)[0] for _ in range(READS)]
            reads["duckdb_dv_compacted"] = [read_duckdb(dv_root)[0] for _ in range(READS)]
            for variant in VARIANTS:  # (disk: the next size's tables are larger)
                sink.cleanup(names[variant])
                shutil.rmtree(sink.table_path(names[variant]))
            shutil.rmtree(base)
            log(f"{size:,} keys: reads done; layout {layout}")
    return out


def render(saved: dict[str, Any]) -> str:
    result = {k: int_keys(v) if k in ("runs", "times", "reads", "layout", "predicted") else v for k, v in saved.items()}
    sizes = result["sizes"]

    def ratio(size: int, top: str, bottom: str = "append") -> float:
        times = result["times"][size]
        return statistics.median(t / b for t, b in zip(times[top], times[bottom]))

    def read_ratio(size: int, reader: str, top: str = "dv") -> float:
        reads = result["reads"][size]
        return statistics.median(t / b for t, b in zip(reads[f"{reader}_{top}"], reads[f"{reader}_merge"]))

    def verdict(value: float, target: float) -> str:
        return "PASS" if value <= target else "MISS"

    loads, reads = [], []
    for size in sizes:
        times = result["times"][size]
        cells = [f"{statistics.median(times[v]):.3f} ({max(times[v]):.3f})" for v in VARIANTS]
        dv_ratio = ratio(size, "dv")
        loads.append(
            [f"{size:,}", *cells, f"{ratio(size, 'merge'):.2f}x", f"{dv_ratio:.2f}x", verdict(dv_ratio, LOAD_TARGET)]
            + [str(result["runs"][size])]
        )
        r = result["reads"][size]
        row = [f"{size:,}"]
        for reader in ("deltalake", "duckdb"):
            value = read_ratio(size, reader)
            row += [
                f"{statistics.median(r[f'{reader}_merge']):.3f}",
                f"{statistics.median(r[f'{reader}_dv']):.3f}",
                f"{value:.2f}x {verdict(value, READ_TARGET)}",
                f"{read_ratio(size, reader, 'dv_compacted'):.2f}x",
            ]
        reads.append(row)
    layouts = [
        [f"{size:,}", lay["base_files"], lay["dv_files"], lay["with_vectors"], f"{lay['rows_deleted']:,}"]
        + [f"{lay['compaction_seconds']:.2f}", lay["compaction_files_removed"]]
        for size, lay in ((s, result["layout"][s]) for s in sizes)
    ]

    def agree(size: int) -> bool:
        """Both readers read the same rows of each layout, and the deletion-vector table holds its
        N keys plus each load's new ones (the MERGE table is restored after each load)."""
        got = result["layout"][size]["sums"]
        same = all(
            a == b if isinstance(a, int) else math.isclose(a, b, rel_tol=1e-9)  # (float sums: another order)
            for v in ("merge", "dv")
            for a, b in zip(got[f"deltalake_{v}"], got[f"duckdb_{v}"], strict=True)
        )
        return same and got["deltalake_dv"][0] == size + NEW_KEYS * (result["runs"][size] + 1)

    counts_agree = all(agree(s) for s in sizes)
    tracking = []
    for size in sizes:
        row = [f"{size:,}"]
        for variant in ("merge", "dv"):
            pairs = list(zip(result["predicted"][size][variant], result["times"][size][variant]))
            ratios = [p / m for p, m in pairs]
            row += [f"{statistics.median(p for p, _ in pairs):.3f}", f"{statistics.median(ratios):.2f}"]
            row += [f"{min(ratios):.2f} to {max(ratios):.2f}"]
        tracking.append(row)
    return T(
        "section",
        machine=machine_markdown(saved["meta"], "loader"),
        rows=ROWS,
        file_rows=FILE_ROWS,
        row_group=ROW_GROUP_ROWS,
        loads=T.table("loads", loads),
        reads=T.table("reads", reads),
        layouts=T.table("layouts", layouts),
        tracking=T.table("tracking", tracking),
        agree="agree" if counts_agree else "DO NOT agree",
        load_target=LOAD_TARGET,
        read_target=READ_TARGET,
    )


def measure(run: Run) -> dict[str, Any]:
    if run.args.quick:
        return measure_sizes((10_000, 200_000), 3, 3)
    return measure_sizes((1_000_000, 10_000_000, 100_000_000), 9, 5)


BENCHMARK = Benchmark(measure, render)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
