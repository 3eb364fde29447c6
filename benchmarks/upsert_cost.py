"""What a latest table's load costs beside an append, and what the Delta layout does to it:
one upsert (Spark keeps the newest value per key, deltalake's MERGE commits it) against one
append of the same batch, into tables of N keys laid out in several ways.

    python -m benchmarks.upsert_cost            # BENCHMARKS.md section "upsert-cost"
    python -m benchmarks.upsert_cost --quick    # 2 small sizes, 3 runs, prints only

``DeltaRsSink`` (the embedded writer) in this process, Spark ``local[2]``: each run loads one
batch into a latest table of each layout (one file; 16 shuffled files; the same Z-ordered; and
two what-ifs: partitioned by a key-range bucket, and the MERGE streamed as the sink did before)
and into an append table, in an order rotating from run to run; every latest table is restored
to its layout after each load (untimed). templates/upsert-cost.md says the rest. deltalake 1.6's
``num_target_files_scanned`` counts no file read (0 at 1M rows, streamed or not), so what is read
shows in ``scan_time_ms`` alone. A probe first checks whether MERGE writes deletion vectors.
"""

from __future__ import annotations

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

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Lookup, Template, table
from benchmarks.harness.results import int_keys
from loader.core.schema import TableSchema
from loader.loading.sinks.delta_rs import DeltaRsSink
from testing.report import log, machine_markdown

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
T = Template("upsert-cost")
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
    one = DeltaTable(str(sink.table_path(tables["one"]["name"])))
    one_bytes = sum(pa.table(one.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
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
        delta = DeltaTable(str(sink.table_path(info["name"])))
        info["version"], info["files"] = delta.version(), len(delta.file_uris())
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
    sink.load(spark.one_update(name, 1, rows), LATEST)
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


def measure_sizes(sizes: tuple[int, ...], runs: int) -> dict[str, Any]:
    rng = random.Random(16)
    out: dict[str, Any] = {"sizes": list(sizes), "runs": {}, "files": FILES, "layouts": {}, "times": {}, "merge": {}}
    out["deltalake_version"] = _deltalake_version()
    with spark.session(fair_pools=1) as session, tempfile.TemporaryDirectory() as directory:
        sink = DeltaRsSink(Path(directory) / "warehouse", session)
        streamed = StreamedSink(sink.warehouse, session)  # the same tables, only the what-if's loaded by it
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
                        loader = streamed if variant == "streamed" else sink
                        loaded, elapsed = spark.timed(loader.load, spark.one_update(name, seq, data), schema)
                        if loaded.skipped:
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
    return out


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


def render(saved: dict[str, Any]) -> str:
    result = {k: int_keys(v) if k in ("layouts", "times", "merge", "runs") else v for k, v in saved.items()}
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
                removed = _median_metric(result, size, kind, v, "num_target_files_removed")
                copied = _median_metric(result, size, kind, v, "num_target_rows_copied")
                scan = _median_metric(result, size, kind, v, "scan_time_ms")
                cells.append(f"{removed:.0f} of {layouts[TABLE_OF[v]]['files']}, {_rows_text(copied)}, {scan:.0f} ms")
            rewrites.append(head + cells)
    big = max(sizes)
    files = {v: result["layouts"][big][TABLE_OF[v]]["files"] for v in LAYOUTS}

    def r(kind: str, v: str, over: str = "one") -> str:
        return f"{_ratio(result, big, kind, v, over):.2f}x"

    def m(kind: str, v: str, metric: str) -> float:
        return _median_metric(result, big, kind, v, metric)

    best = min(((kind, v) for kind in KINDS for v in PRODUCT[1:]), key=lambda kv: _ratio(result, big, *kv, "one"))
    runs = result["runs"]
    ratio_heads = [
        "Z-ordered / Z-ordered streamed" if v == "streamed" else f"{LABELS[v]} / one file" for v in LAYOUTS[1:]
    ]
    align = "rl" + "r" * len(LAYOUTS)
    return T(
        "section",
        machine=machine_markdown(saved["meta"], "loader"),
        rows=ROWS,
        files=FILES,
        big=big,
        small_runs="/".join(map(str, sorted({n for s, n in runs.items() if s != big}) or [runs[big]])),
        big_runs=runs[big],
        seconds=table(
            ["N held", "held keys", *(LABELS[v] for v in VARIANTS)], None, seconds, "rl" + "r" * len(VARIANTS)
        ),
        ratios=table(["N held", "held keys", "one file / append", *ratio_heads], None, ratios, align),
        rewrites=table(["N held", "held keys", *(LABELS[v] for v in LAYOUTS)], None, rewrites, align),
        r=Lookup(r),
        copied=Lookup(lambda kind, v: _rows_text(m(kind, v, "num_target_rows_copied"))),
        touched=Lookup(lambda kind, v: f"{m(kind, v, 'num_target_files_removed'):.0f} of {files[v]}"),
        scan=Lookup(lambda kind, v: f"{m(kind, v, 'scan_time_ms'):.0f} ms"),
        best_label=LABELS[best[1]],
        best_kind=best[0],
        best_ratio=r(*best),
        out=m("random", "unsorted", "num_target_files_removed"),
        added=m("random", "unsorted", "num_target_files_added"),
        version=result.get("deltalake_version") or _deltalake_version(),  # (results before it was saved: installed)
        dv=result["deletion_vectors"],
        features=", ".join(result["deletion_vectors"]["reader_features"]),
    )


def _deltalake_version() -> str:
    import deltalake

    return str(deltalake.__version__)


def measure(run: Run) -> dict[str, Any]:
    return measure_sizes(QUICK_SIZES if run.args.quick else SIZES, 3 if run.args.quick else 9)


BENCHMARK = Benchmark("benchmarks.upsert_cost", "upsert-cost", __doc__, measure, render)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
