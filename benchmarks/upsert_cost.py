"""What a latest table's load costs beside an append, and what the Delta layout does to it:
one upsert (Spark keeps the newest value per key, deltalake's MERGE commits it) against one
append of the same batch, into tables of N keys laid out in several ways.

    python -m benchmarks.upsert_cost            # BENCHMARKS.md section "upsert-cost"
    python -m benchmarks.upsert_cost --quick    # 2 small sizes, 3 runs, prints only

``DeltaRsSink`` (the embedded writer) in this process, Spark ``local[2]``. Each run loads
one batch of 100 rows (half of them keys the table holds, one key twice) into each latest
table of ``N`` keys and into an append table of ``N`` rows, in an order that rotates from
run to run, after a warm-up of each; the held keys are either spread at random over the
key range or one contiguous range ("clustered"). Every latest table is restored to its
layout after each load (``DeltaTable.restore``, untimed), so every run meets the layout
being measured. The layouts:

- one file, sorted by key (the table as one big load leaves it);
- 16 files of shuffled keys (every file spans the whole key range);
- the same 16 files Z-ordered by the key (``optimize.z_order(["id"])`` into about 16 files
  of disjoint key ranges; at 10,000 keys deltalake writes no file under 1,024 rows);
- what-if, not the product's table: partitioned by a key-range bucket that the rows carry
  and the key includes (``key = ["bucket", "id"]``), so the MERGE's match condition names
  the partition column;
- what-if, the sink before its MERGE passed ``streamed_exec=False``: a copy of the
  Z-ordered table loaded by the same sink code with only the MERGE's flag flipped back to
  deltalake's default, ``streamed_exec=True`` (``StreamedSink``), under which deltalake
  derives no file pruning from the batch and reads every file.

Every other variant is loaded the product's way, ``DeltaRsSink.load`` (``commit_upsert``): its
MERGE runs with ``streamed_exec=False``, so deltalake skips the files whose key range lies
outside the batch's (lowest to highest key), and the partitions of none of its values;
that helps the Z-ordered and partitioned layouts when the held keys cluster, never one
file or files that each span the key range, and random held keys still touch (and the
MERGE rewrites) nearly every file. deltalake 1.6's ``num_target_files_scanned`` and
``num_target_files_skipped_during_scan`` do not count the files read (at 1M rows both
report 0 scanned, streamed or not), so what is read shows in ``scan_time_ms`` alone.

Before the runs a probe checks whether deltalake's MERGE writes deletion vectors into a
table with ``delta.enableDeletionVectors = true``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, WriterProperties, write_deltalake

from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from loader.loading.sinks.delta_rs import DeltaRsSink
from testing.report import (
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
    write_section,
)

MODULE = "benchmarks.upsert_cost"
SECTION = "upsert-cost"
COLUMNS = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "v", "type": "float64"},
    {"name": "ts", "type": "int64", "nullable": False},
]
APPEND = TableSchema.model_validate({"columns": COLUMNS})
LATEST = TableSchema.model_validate({"columns": COLUMNS, "key": ["id"], "order_by": "ts"})
#: What-if: the rows carry a key-range bucket, part of the key and the partition column.
BUCKETED = TableSchema.model_validate(
    {
        "columns": [{"name": "bucket", "type": "int64", "nullable": False}, *COLUMNS],
        "key": ["bucket", "id"],
        "order_by": "ts",
        "partition_by": ["bucket"],
    }
)
ROWS = 100
SIZES = (10_000, 1_000_000, 10_000_000)
QUICK_SIZES = (10_000, 100_000)
#: Files of the many-files layouts, and partitions of the partitioned one.
FILES = 16
LARGE = 10_000_000
#: Runs at the largest size (each MERGE there reads the whole table and rewrites much of it).
LARGE_RUNS = 7
KINDS = ("random", "clustered")
#: Measured side by side in each run; the order rotates from run to run.
VARIANTS = ("append", "one", "unsorted", "zorder", "streamed", "partitioned")
LABELS = {
    "append": "append",
    "one": "one file",
    "unsorted": f"{FILES} files, unsorted",
    "zorder": "many files, Z-ordered",
    "streamed": "Z-ordered, streamed (before)",
    "partitioned": f"{FILES} partitions (what-if)",
}
LAYOUTS = VARIANTS[1:]
#: The variants the product's sink loads (all but the streamed what-if).
PRODUCT = tuple(v for v in LAYOUTS if v != "streamed")
#: Which table each variant loads ("streamed": a copy of the Z-ordered table, loaded by ``StreamedSink``).
TABLE_OF = {
    "append": "append",
    "one": "one",
    "unsorted": "unsorted",
    "zorder": "zorder",
    "streamed": "streamed",
    "partitioned": "part",
}
KEPT_METRICS = (
    "num_target_files_removed",
    "num_target_files_added",
    "num_target_rows_copied",
    "scan_time_ms",
    "rewrite_time_ms",
)


def _base(ids: np.ndarray) -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "v": np.zeros(n), "ts": np.zeros(n, np.int64)}, schema=APPEND.arrow())


def _bucketed(rows: pa.Table, width: int) -> pa.Table:
    ids = rows.column("id").to_numpy()
    return rows.add_column(0, pa.field("bucket", pa.int64(), False), pa.array(ids // width))


def _rows(rng: random.Random, held: int, seq: int, kind: str) -> pa.Table:
    """The batch: new keys at even positions, held keys at odd ones (at random, or the
    contiguous range ``start, start + 1, ...``), the first key again last."""
    start = rng.randrange(held - ROWS)
    ids = [
        (rng.randrange(held) if kind == "random" else start + i // 2) if i % 2 else held + seq * ROWS + i
        for i in range(ROWS)
    ]
    ids[-1] = ids[0]  # a key twice in the batch: one value superseded
    return pa.table({"id": ids, "v": [rng.random() for _ in ids], "ts": [seq] * len(ids)}, schema=APPEND.arrow())


def _files(path: Path) -> int:
    return len(DeltaTable(str(path)).file_uris())


def _bytes(path: Path) -> int:
    return sum(pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).column("size_bytes").to_pylist())


def build_tables(sink: Any, size: int) -> dict[str, dict[str, Any]]:
    """The tables of one size: name, schema, the version holding the layout, files."""
    ids = np.arange(size, dtype=np.int64)
    shuffled = np.array_split(np.random.default_rng(size).permutation(size), FILES)
    width = math.ceil(size / FILES)
    tables: dict[str, dict[str, Any]] = {}
    for key, schema in (("append", APPEND), ("one", LATEST), ("unsorted", LATEST), ("zorder", LATEST)):
        name = f"{key}_{size}"
        sink.ensure_table(name, schema)
        path = str(sink.table_path(name))
        if key in ("append", "one"):
            write_deltalake(path, _base(ids), mode="append")
        else:
            for part in shuffled:
                write_deltalake(path, _base(part), mode="append")
        tables[key] = {"name": name, "schema": schema}
    began = time.perf_counter()
    one_bytes = _bytes(sink.table_path(tables["one"]["name"]))
    _z_order(sink.table_path(tables["zorder"]["name"]), size, one_bytes // FILES)
    log(f"{size:,}: Z-order took {time.perf_counter() - began:.1f} s")
    name = f"part_{size}"
    sink.ensure_table(name, BUCKETED)
    write_deltalake(str(sink.table_path(name)), _bucketed(_base(ids), width), mode="append", partition_by=["bucket"])
    tables["part"] = {"name": name, "schema": BUCKETED, "width": width}
    # Its own table: its transactions must not make the sink skip a load of the Z-ordered one.
    name = f"streamed_{size}"
    shutil.copytree(sink.table_path(tables["zorder"]["name"]), sink.table_path(name))
    tables["streamed"] = {"name": name, "schema": LATEST}
    for info in tables.values():
        path = sink.table_path(info["name"])
        info["version"] = DeltaTable(str(path)).version()
        info["files"] = _files(path)
    return tables


def _z_order(path: Path, size: int, target: int) -> None:
    """``optimize.z_order(["id"])`` into about ``FILES`` files (Snappy, as the other tables).
    deltalake starts a new file once the one it writes passes the target size, checked at
    row-group ends, so row groups are kept small (1/64 of the table); an attempt far from
    ``FILES`` files is undone and tried again with the target scaled by the count it gave."""
    delta = DeltaTable(str(path))
    before = delta.version()
    properties = WriterProperties(max_row_group_size=max(1024, size // (4 * FILES)), compression="SNAPPY")
    for attempt in range(3):
        files = delta.optimize.z_order(["id"], target_size=max(1, target), writer_properties=properties)
        if abs(files["numFilesAdded"] - FILES) <= FILES // 4 or attempt == 2:
            return
        delta.restore(before)
        target = target * files["numFilesAdded"] // FILES


class _StreamedMerge:
    """A table handle whose MERGE runs streamed (``streamed_exec=True``, deltalake's
    default); everything else is passed to the handle it wraps."""

    def __init__(self, delta: DeltaTable) -> None:
        self._delta = delta

    def __getattr__(self, name: str) -> Any:
        return getattr(self._delta, name)

    def merge(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("streamed_exec") is not False:
            raise RuntimeError("the sink's MERGE no longer passes streamed_exec=False: the streamed what-if is moot")
        return self._delta.merge(*args, **{**kwargs, "streamed_exec": True})


class StreamedSink(DeltaRsSink):
    """What-if, the sink before this change: ``DeltaRsSink.load`` (same Spark step, same
    ``commit_upsert``, same transaction) with only the MERGE's ``streamed_exec`` flipped
    back to deltalake's default."""

    def _current_table(self, table: str) -> DeltaTable:
        return cast(DeltaTable, _StreamedMerge(super()._current_table(table)))


def probe_deletion_vectors(sink: Any, size: int = 10_000) -> dict[str, Any]:
    """One upsert through the sink into a table created with deletion vectors enabled: does
    the MERGE mark the updated rows deleted, or rewrite their files?"""
    name = "dv_probe"
    path = sink.table_path(name)
    path.mkdir(parents=True)
    DeltaTable.create(str(path), LATEST.arrow(), configuration={"delta.enableDeletionVectors": "true"}, name=name)
    sink.ensure_table(name, LATEST)
    write_deltalake(str(path), _base(np.arange(size, dtype=np.int64)), mode="append")
    rows = _rows(random.Random(7), size, 1, "random")
    sink.load(Batch(name, (Update(name, 1, 1.0, rows),)), LATEST)
    delta = DeltaTable(str(path))
    protocol = delta.protocol()
    commit = path / "_delta_log" / f"{delta.version():020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    with_dv = sum(1 for a in actions for kind in ("add", "remove") if a.get(kind, {}).get("deletionVector"))
    metrics = delta.history(1)[0].get("operationMetrics", {})
    return {
        "size": size,
        "min_reader_version": protocol.min_reader_version,
        "min_writer_version": protocol.min_writer_version,
        "reader_features": list(protocol.reader_features or []),
        "configuration": dict(delta.metadata().configuration),
        "operation": delta.history(1)[0].get("operation"),
        "actions_with_deletion_vector": with_dv,
        "files_with_deletion_vectors": pa.table(delta.deletion_vectors()).num_rows,
        "files_removed": metrics.get("num_target_files_removed"),
        "files_added": metrics.get("num_target_files_added"),
        "rows_copied": metrics.get("num_target_rows_copied"),
        "rows_updated": metrics.get("num_target_rows_updated"),
    }


def measure(sizes: tuple[int, ...], runs: int) -> dict[str, Any]:
    from loader.loading.spark import build_spark_session

    spark = build_spark_session("local[2]", fair_pools=1)
    rng = random.Random(16)
    out: dict[str, Any] = {"sizes": list(sizes), "runs": {}, "files": FILES, "layouts": {}, "times": {}, "merge": {}}
    with tempfile.TemporaryDirectory() as directory:
        sink = DeltaRsSink(Path(directory) / "warehouse", spark)
        streamed = StreamedSink(sink.warehouse, spark)  # the same tables, only the what-if's loaded by it
        out["deletion_vectors"] = probe_deletion_vectors(sink)
        for size in sizes:
            began = time.perf_counter()
            tables = build_tables(sink, size)
            log(f"{size:,}: tables built in {time.perf_counter() - began:.1f} s")
            out["layouts"][size] = {k: {"files": t["files"]} for k, t in tables.items()}
            times = {kind: {v: [] for v in VARIANTS} for kind in KINDS}
            merge = {kind: {v: [] for v in LAYOUTS} for kind in KINDS}
            n_runs = runs if size < LARGE else min(runs, LARGE_RUNS)
            out["runs"][size] = n_runs
            seq = 1
            for run in range(-1, n_runs):  # run -1: warm-up
                for k, kind in enumerate(KINDS):
                    seq += 1
                    rows = _rows(rng, size, seq, kind)
                    shift = (run + 1) * len(KINDS) + k
                    for variant in VARIANTS[shift % len(VARIANTS) :] + VARIANTS[: shift % len(VARIANTS)]:
                        info = tables[TABLE_OF[variant]]
                        name, schema = info["name"], info["schema"]
                        data = _bucketed(rows, info["width"]) if schema is BUCKETED else rows
                        batch = Batch(name, (Update(name, seq, float(seq), data),))
                        loader = streamed if variant == "streamed" else sink
                        started = time.perf_counter()
                        skipped = loader.load(batch, schema).skipped
                        elapsed = time.perf_counter() - started
                        if skipped:
                            raise RuntimeError(f"the load of {name} (sequence {seq}) was skipped")
                        if variant == "append":
                            if run >= 0:
                                times[kind][variant].append(elapsed)
                            continue
                        delta = DeltaTable(str(sink.table_path(name)))
                        last = delta.history(1)[0]
                        if last.get("operation") != "MERGE":
                            raise RuntimeError(f"{name}: the last commit is a {last.get('operation')}, not the MERGE")
                        metrics = last.get("operationMetrics", {})
                        delta.restore(info["version"])  # the layout again for the next load
                        if run >= 0:
                            times[kind][variant].append(elapsed)
                            merge[kind][variant].append({m: metrics.get(m) for m in KEPT_METRICS})
                log(f"{size:,} keys held: run {run + 1}/{n_runs}")
            out["times"][size] = times
            out["merge"][size] = merge
    spark.stop()
    return out


# -- report ------------------------------------------------------------------------------
def _ratio(result: dict[str, Any], size: int, kind: str, top: str, bottom: str) -> float:
    """Median over runs of the run's ``top`` time over its ``bottom`` time (same run, same batch)."""
    times = result["times"][size][kind]
    return statistics.median(t / b for t, b in zip(times[top], times[bottom]))


def _layout_ratio(result: dict[str, Any], size: int, kind: str, variant: str) -> float:
    """A layout's column of the ratios table: the layout over one file; for the streamed
    what-if, the product's Z-ordered load over it (what ``streamed_exec=False`` bought)."""
    if variant == "streamed":
        return _ratio(result, size, kind, "zorder", "streamed")
    return _ratio(result, size, kind, variant, "one")


def _median_metric(result: dict[str, Any], size: int, kind: str, variant: str, metric: str) -> float:
    return statistics.median(m[metric] or 0 for m in result["merge"][size][kind][variant])


def _rows_text(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def report(result: dict[str, Any], meta: dict[str, Any]) -> str:
    sizes = result["sizes"]
    seconds, ratios, rewrites = [], [], []
    for size in sizes:
        layouts = result["layouts"][size]
        for kind in KINDS:
            times = result["times"][size][kind]
            head = [f"{size:,}", kind]
            seconds.append(head + [f"{statistics.median(times[v]):.3f} ({max(times[v]):.3f})" for v in VARIANTS])
            ratios.append(
                head
                + [f"{_ratio(result, size, kind, 'one', 'append'):.2f}x"]
                + [f"{_layout_ratio(result, size, kind, v):.2f}x" for v in LAYOUTS[1:]]
            )
            cells = []
            for v in LAYOUTS:
                files = layouts[TABLE_OF[v]]["files"]
                removed = _median_metric(result, size, kind, v, "num_target_files_removed")
                copied = _median_metric(result, size, kind, v, "num_target_rows_copied")
                scan = _median_metric(result, size, kind, v, "scan_time_ms")
                cells.append(f"{removed:.0f} of {files}, {_rows_text(copied)}, {scan:.0f} ms")
            rewrites.append(head + cells)
    big = max(sizes)
    files = {v: result["layouts"][big][TABLE_OF[v]]["files"] for v in LAYOUTS}

    def r(kind: str, v: str, over: str = "one") -> str:
        return f"{_ratio(result, big, kind, v, over):.2f}x"

    def m(kind: str, v: str, metric: str) -> float:
        return _median_metric(result, big, kind, v, metric)

    def copied(kind: str, v: str) -> str:
        return _rows_text(m(kind, v, "num_target_rows_copied"))

    def touched(kind: str, v: str) -> str:
        return f"{m(kind, v, 'num_target_files_removed'):.0f} of {files[v]}"

    def scan(kind: str, v: str) -> str:
        return f"{m(kind, v, 'scan_time_ms'):.0f} ms"

    best = min(((kind, v) for kind in KINDS for v in PRODUCT[1:]), key=lambda kv: _ratio(result, big, *kv, "one"))
    dv = result["deletion_vectors"]
    runs = result["runs"]
    small_runs = sorted({n for s, n in runs.items() if s != big}) or [runs[big]]
    intro = (
        f"One batch of {ROWS} rows (half new keys, half keys the table holds, one key twice) into tables holding "
        "N rows/keys; `DeltaRsSink`, Spark `local[2]` in process. The upsert is the sink's own load: a Spark job "
        "keeping the newest value per key, then deltalake's MERGE with `streamed_exec=False` (`commit_upsert`), "
        "under which deltalake reads only the files the batch's keys can fall in: those whose key range overlaps "
        "the batch's lowest to highest key (the batch's new keys lie above the held ones, as keys handed out in "
        "order would), or, in a partitioned table, the partitions of the batch's values. The batch's held "
        "keys are `random` (spread over the key range) or `clustered` (one contiguous range). Layouts: **one file** "
        f"sorted by key (as one big load leaves it); **{FILES} files, unsorted** (keys shuffled: each file spans the "
        'whole key range); the same files **Z-ordered** by key (`DeltaTable.optimize.z_order(["id"])`, target file '
        f"size chosen for about {FILES} files: files of disjoint key ranges, as many as the last table shows). "
        "Two what-ifs that are *not* the product: **Z-ordered, streamed (before)**: a copy of the Z-ordered table "
        "loaded by the same sink code with only the MERGE's flag flipped back to `streamed_exec=True` "
        "(deltalake's default, which the sink passed before this change), under which deltalake derives no file "
        f"pruning from the batch and reads every file; and **{FILES} partitions** by a key-range bucket column that "
        'the rows would carry and the key would include (`key = ["bucket", "id"]`, `partition_by = ["bucket"]`): '
        "the loader derives no columns, so a latest table keyed by `id` alone cannot be partitioned by its key. "
        "All variants of a run load the same batch, in an order rotating from run to run; each latest table is "
        f"restored to its layout after each load (untimed). Median of {'/'.join(map(str, small_runs))} runs after "
        f"a warm-up ({runs[big]} at {big:,}), worst in parentheses; ratios are medians of per-run ratios.\n\n"
    )
    findings = (
        f"**What the layout does (at {big:,} keys).** The MERGE reads the files the batch's keys can fall in, "
        "then rewrites each file holding a matched key, copying that file's other rows, into new files (up to "
        f"`delta.targetFileSize`, 100 MB by default). One file: the upsert costs {r('random', 'one', 'append')} an "
        f"append ({r('clustered', 'one', 'append')} with clustered keys) and copies {copied('random', 'one')} rows "
        "each time; no pruning can spare its one file. Random held keys span the key range and touch nearly every "
        f"file of any layout ({touched('random', 'unsorted')} unsorted, {touched('random', 'zorder')} Z-ordered, "
        f"{touched('random', 'partitioned')} partitions), so the MERGE still reads and rewrites nearly the whole "
        f"table: unsorted {r('random', 'unsorted')}, Z-ordered {r('random', 'zorder')}, partitioned "
        f"{r('random', 'partitioned')} the one-file time, and `streamed_exec=False` buys nothing there (Z-ordered "
        f"{r('random', 'zorder', 'streamed')} its streamed time). Clustered held keys are what Z-order and the "
        f"change are for: the MERGE rewrites {touched('clustered', 'zorder')} files, copying "
        f"{copied('clustered', 'zorder')} rows, and reads only the files from the batch's lowest key to its highest "
        f"(its new keys lie above the held ones): scan {scan('clustered', 'zorder')} against "
        f"{scan('clustered', 'streamed')} streamed, which reads every file. The load costs "
        f"{r('clustered', 'zorder')} the one-file time, **{r('clustered', 'zorder', 'streamed')} of what it cost "
        f"streamed** (the sink before this change: {r('clustered', 'streamed')} the one-file time). Unsorted files "
        f"each span the whole range, so nothing is pruned ({touched('clustered', 'unsorted')} rewritten, "
        f"{r('clustered', 'unsorted')}, scan {scan('clustered', 'unsorted')}). Partitioned (what-if): deltalake "
        "prunes partitions by the batch's bucket values, not their range, so it reads only the held keys' "
        f"partition (the new keys' bucket holds no files yet): {touched('clustered', 'partitioned')} rewritten, "
        f"{r('clustered', 'partitioned')}, scan {scan('clustered', 'partitioned')} (with random keys it writes one "
        "file per touched partition). "
        f"The largest saving measured here: {LABELS[best[1]]} with {best[0]} held keys, {r(*best)} the one-file "
        "time. A many-files layout does not last under loads: a MERGE writes the files it touched into new files "
        f"up to the target size (random keys into the {FILES} unsorted files: "
        f"{m('random', 'unsorted', 'num_target_files_removed'):.0f} files out, "
        f"{m('random', 'unsorted', 'num_target_files_added'):.0f} in), so after one random-key batch the table is "
        "(nearly) one file again until it is optimized again; here it is restored after each load.\n\n"
    )
    deletion_vectors = (
        f"**Deletion vectors.** deltalake {_deltalake_version()} does not write them on MERGE: a table created "
        f"with `delta.enableDeletionVectors = true` gets protocol ({dv['min_reader_version']}, "
        f"{dv['min_writer_version']}) with reader features {', '.join(dv['reader_features'])}; a {ROWS}-row "
        f"upsert through `DeltaRsSink` into {dv['size']:,} keys then committed a {dv['operation']} that removed "
        f"{dv['files_removed']} file and added {dv['files_added']}, copying {dv['rows_copied']:,} unchanged rows; "
        f"{dv['actions_with_deletion_vector']} of its add/remove actions carry a `deletionVector`, and "
        f"`DeltaTable.deletion_vectors()` lists {dv['files_with_deletion_vectors']} files. (Delta Spark's MERGE "
        "can write them; the native writer's jars are not installed here, so that path is not measured.)\n"
    )
    ratio_heads = [
        "Z-ordered / Z-ordered streamed" if v == "streamed" else f"{LABELS[v]} / one file" for v in LAYOUTS[1:]
    ]
    return (
        "## A latest table's load: upsert against append, by table layout (`benchmarks/upsert_cost.py`)\n\n"
        + machine_markdown(meta, "loader")
        + "\n"
        + intro
        + "Seconds per load, median (worst):\n\n"
        + md_table(["N held", "held keys", *(LABELS[v] for v in VARIANTS)], seconds, "rl" + "r" * len(VARIANTS))
        + "\n\nRatios (same run, same batch): the one-file upsert over the append, each other layout over one file, "
        "and the product's Z-ordered load over the same load merged streamed (what the change bought):\n\n"
        + md_table(["N held", "held keys", "one file / append", *ratio_heads], ratios, "rl" + "r" * len(LAYOUTS))
        + "\n\nWhat each MERGE did (medians): files rewritten of the files the table holds, rows copied unchanged "
        "into new files, deltalake's scan time:\n\n"
        + md_table(["N held", "held keys", *(LABELS[v] for v in LAYOUTS)], rewrites, "rl" + "r" * len(LAYOUTS))
        + "\n\n"
        + findings
        + deletion_vectors
    )


def _deltalake_version() -> str:
    import deltalake

    return str(deltalake.__version__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, two small sizes, no BENCHMARKS.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
    }
    sizes = QUICK_SIZES if args.quick else SIZES
    runs = 3 if args.quick else 9
    with LoadMonitor() as monitor:
        result = measure(sizes, runs)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    markdown = report(result, meta)
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "upsert_cost.json", {"meta": meta, **result})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
