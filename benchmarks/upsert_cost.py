"""What a latest table's load costs beside an append, and what the Delta layout does to it:
one upsert (the sink's Spark step, then deltalake's MERGE) against one append of the same batch,
into tables of N keys laid out in several ways (templates/upsert-cost.md says which and how).

deltalake 1.6's ``num_target_files_scanned`` counts no file read (0 at 1M rows, streamed or not),
so what is read shows in ``scan_time_ms`` alone. A probe first checks whether MERGE writes
deletion vectors.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import statistics
from pathlib import Path
from typing import Any, cast

import deltalake
import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, WriterProperties, write_deltalake

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Lookup, Template, table
from benchmarks.harness.results import int_keys
from benchmarks.harness.spark import schema
from loader.loading.failures import TableRefusesWrites
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.sinks.upsert import merge_predicates
from testing.report import log, machine_markdown

COLUMNS = ("id int64 not null", "v float64", "ts int64 not null")
APPEND = schema(*COLUMNS)
LATEST = schema(*COLUMNS, key=["id"], order_by="ts")
#: What-if: the rows carry a key-range bucket, part of the key and the partition column.
BUCKETED = schema("bucket int64 not null", *COLUMNS, key=["bucket", "id"], order_by="ts", partition_by=["bucket"])
ROWS = 100
#: Files of the many-files layouts, and partitions of the partitioned one.
FILES = 16
#: Runs at 10,000,000 keys (each MERGE there reads the whole table and rewrites much of it).
LARGE_RUNS = 7
KINDS = ("random", "clustered")
#: The variants, measured side by side in each run (the order rotates from run to run).
LABELS = {"append": "append", "one": "one file", "unsorted": f"{FILES} files, unsorted"}
LABELS |= {"zorder": "many files, Z-ordered", "streamed": "Z-ordered, streamed (before)"}
LABELS["partitioned"] = f"{FILES} partitions (what-if)"
VARIANTS = tuple(LABELS)
LAYOUTS = VARIANTS[1:]
#: The table a variant loads where it is not its own name ("streamed": a copy of the Z-ordered one).
TABLE_OF = {"partitioned": "part"}
METRICS = ("num_target_files_removed", "num_target_files_added", "num_target_rows_copied", "scan_time_ms")
T = Template("upsert-cost")


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
    held_key = (lambda i: rng.randrange(held)) if kind == "random" else (lambda i: start + i // 2)
    ids = [held_key(i) if i % 2 else held + seq * ROWS + i for i in range(ROWS)]
    ids[-1] = ids[0]  # a key twice in the batch: one value superseded
    return pa.table({"id": ids, "v": [rng.random() for _ in ids], "ts": [seq] * len(ids)}, schema=APPEND.arrow())


def build_tables(sink: Any, size: int) -> dict[str, dict[str, Any]]:
    """The tables of one size: name, schema, the version holding the layout, files."""
    ids = np.arange(size, dtype=np.int64)
    tables: dict[str, dict[str, Any]] = {}
    for key, declared in (("append", APPEND), ("one", LATEST), ("unsorted", LATEST), ("zorder", LATEST)):
        tables[key] = {"name": f"{key}_{size}", "schema": declared}
        sink.ensure_table(f"{key}_{size}", declared)
        shuffled = key not in ("append", "one")
        for part in np.array_split(np.random.default_rng(size).permutation(size), FILES) if shuffled else [ids]:
            write_deltalake(str(sink.table_path(f"{key}_{size}")), _base(part), mode="append")
    one = DeltaTable(str(sink.table_path(f"one_{size}")))
    one_bytes = sum(pa.table(one.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    _z_order(sink.table_path(f"zorder_{size}"), size, one_bytes // FILES)
    width = math.ceil(size / FILES)
    tables["part"] = {"name": f"part_{size}", "schema": BUCKETED, "width": width}
    sink.ensure_table(f"part_{size}", BUCKETED)
    bucketed = _bucketed(_base(ids), width)
    write_deltalake(str(sink.table_path(f"part_{size}")), bucketed, mode="append", partition_by=["bucket"])
    # Its own table: its transactions must not make the sink skip a load of the Z-ordered one.
    tables["streamed"] = {"name": f"streamed_{size}", "schema": LATEST}
    shutil.copytree(sink.table_path(f"zorder_{size}"), sink.table_path(f"streamed_{size}"))
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
    """A table handle whose MERGE runs streamed (``streamed_exec=True``, deltalake's default)."""

    def __init__(self, delta: DeltaTable) -> None:
        self._delta = delta

    def __getattr__(self, name: str) -> Any:
        return getattr(self._delta, name)

    def merge(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("streamed_exec") is not False:
            raise RuntimeError("the sink's MERGE no longer passes streamed_exec=False: the streamed what-if is moot")
        return self._delta.merge(*args, **{**kwargs, "streamed_exec": True})


class StreamedSink(DeltaRsSink):
    """What-if, the sink before ``streamed_exec=False``: the same load with only that flag flipped back."""

    def _current_table(self, table: str) -> DeltaTable:
        return cast(DeltaTable, _StreamedMerge(super()._current_table(table)))


def probe_deletion_vectors(sink: Any, size: int = 10_000) -> dict[str, Any]:
    """A table created with deletion vectors enabled: the sink's upsert into it (refused before
    deltalake's MERGE was shown to honour vectors other writers leave), then the sink's MERGE (its predicates,
    ``streamed_exec=False``) through deltalake directly: does it mark the updated rows deleted, or
    rewrite their files?"""
    path = sink.table_path("dv_probe")
    path.mkdir(parents=True)
    DeltaTable.create(str(path), LATEST.arrow(), configuration={"delta.enableDeletionVectors": "true"}, name="dv_probe")
    sink.ensure_table("dv_probe", LATEST)
    write_deltalake(str(path), _base(np.arange(size, dtype=np.int64)), mode="append")
    rows, refused = _rows(random.Random(7), size, 1, "random"), None
    try:
        sink.load(spark.one_update("dv_probe", 1, rows), LATEST)
    except TableRefusesWrites as exc:
        refused = str(exc.reason)
    newest = pa.Table.from_pylist(list({r["id"]: r for r in rows.to_pylist()}.values()), schema=LATEST.arrow())
    on, newer = merge_predicates(LATEST)
    merge = DeltaTable(str(path)).merge(newest, on, source_alias="s", target_alias="t", streamed_exec=False)
    merge.when_matched_update_all(predicate=newer).when_not_matched_insert_all().execute()
    delta = DeltaTable(str(path))
    protocol, last = delta.protocol(), delta.history(1)[0]
    commit = path / "_delta_log" / f"{delta.version():020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    metrics = last.get("operationMetrics", {})
    out: dict[str, Any] = {"size": size, "min_reader_version": protocol.min_reader_version}
    if refused is not None:  # (the sink refused such a table until deltalake's MERGE was shown to honour vectors)
        out["sink_refused"] = refused
    out |= {"min_writer_version": protocol.min_writer_version, "reader_features": list(protocol.reader_features or [])}
    dv = sum(1 for a in actions for k in ("add", "remove") if a.get(k, {}).get("deletionVector"))
    out |= {"operation": last.get("operation"), "actions_with_deletion_vector": dv}
    out["files_with_deletion_vectors"] = pa.table(delta.deletion_vectors()).num_rows
    return out | {k: metrics.get(f"num_target_{k}") for k in ("files_removed", "files_added", "rows_copied")}


def merged(sink: Any, info: dict[str, Any]) -> dict[str, Any]:
    """The MERGE's metrics from the table's last commit; the table is restored to its layout."""
    delta = DeltaTable(str(sink.table_path(info["name"])))
    last = delta.history(1)[0]
    if last.get("operation") != "MERGE":
        raise RuntimeError(f"{info['name']}: the last commit is a {last.get('operation')}, not the MERGE")
    delta.restore(info["version"])
    return {m: last.get("operationMetrics", {}).get(m) for m in METRICS}


def measure_sizes(sizes: tuple[int, ...], runs: int) -> dict[str, Any]:
    rng = random.Random(16)
    out: dict[str, Any] = {"sizes": list(sizes), "runs": {}, "files": FILES, "layouts": {}, "times": {}, "merge": {}}
    out["deltalake_version"] = deltalake.__version__
    with spark.sink("upsert-cost-", fair_pools=1) as (session, sink):
        streamed = StreamedSink(sink.warehouse, session)  # the same tables, only the what-if's loaded by it
        out["deletion_vectors"] = probe_deletion_vectors(sink)
        for size in sizes:
            tables, seconds = spark.timed(build_tables, sink, size)
            log(f"{size:,}: tables built in {seconds:.1f} s")
            out["layouts"][size] = {k: {"files": t["files"]} for k, t in tables.items()}
            times = out["times"][size] = {kind: {v: [] for v in VARIANTS} for kind in KINDS}
            merge = out["merge"][size] = {kind: {v: [] for v in LAYOUTS} for kind in KINDS}
            out["runs"][size] = n_runs = runs if size < 10_000_000 else min(runs, LARGE_RUNS)
            for run in range(-1, n_runs):  # run -1: warm-up
                for k, kind in enumerate(KINDS):
                    shift = (run + 1) * len(KINDS) + k
                    seq = shift + 2
                    rows = _rows(rng, size, seq, kind)
                    for variant in VARIANTS[shift % len(VARIANTS) :] + VARIANTS[: shift % len(VARIANTS)]:
                        info = tables[TABLE_OF.get(variant, variant)]
                        data = _bucketed(rows, info["width"]) if "width" in info else rows
                        loader = streamed if variant == "streamed" else sink
                        batch = spark.one_update(info["name"], seq, data)
                        loaded, elapsed = spark.timed(loader.load, batch, info["schema"])
                        if loaded.skipped:
                            raise RuntimeError(f"the load of {info['name']} (sequence {seq}) was skipped")
                        metrics = None if variant == "append" else merged(sink, info)
                        if run >= 0:
                            times[kind][variant].append(elapsed)
                            if metrics is not None:
                                merge[kind][variant].append(metrics)
                log(f"{size:,} keys held: run {run + 1}/{n_runs}")
    return out


def _rows_text(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def render(saved: dict[str, Any]) -> str:
    result = {k: int_keys(v) if k in ("layouts", "times", "merge", "runs") else v for k, v in saved.items()}
    sizes, runs, big = result["sizes"], result["runs"], max(result["sizes"])

    def ratio(size: int, kind: str, top: str, bottom: str = "one") -> float:
        """Median over runs of the run's ``top`` time over its ``bottom`` time (same run, same batch)."""
        times = result["times"][size][kind]
        return statistics.median(t / b for t, b in zip(times[top], times[bottom]))

    def metric(size: int, kind: str, variant: str, name: str) -> float:
        return statistics.median(m[name] or 0 for m in result["merge"][size][kind][variant])

    def files(size: int, variant: str) -> int:
        return result["layouts"][size][TABLE_OF.get(variant, variant)]["files"]

    # Each layout over one file; the streamed what-if's column: the product's Z-ordered load over
    # it (what ``streamed_exec=False`` bought).
    over = [("one", "append"), *(("zorder", v) if v == "streamed" else (v, "one") for v in LAYOUTS[1:])]
    seconds, ratios, rewrites = [], [], []
    for size in sizes:
        for kind in KINDS:
            times, head = result["times"][size][kind], [f"{size:,}", kind]
            seconds.append(head + [f"{statistics.median(times[v]):.3f} ({max(times[v]):.3f})" for v in VARIANTS])
            ratios.append(head + [f"{ratio(size, kind, *pair):.2f}x" for pair in over])
            merges = {v: [metric(size, kind, v, m) for m in METRICS] for v in LAYOUTS}
            cells = [f"{m[0]:.0f} of {files(size, v)}, {_rows_text(m[2])}, {m[3]:.0f} ms" for v, m in merges.items()]
            rewrites.append(head + cells)
    best = min([(k, v) for k in KINDS for v in ("unsorted", "zorder", "partitioned")], key=lambda kv: ratio(big, *kv))
    ratio_heads = [
        "Z-ordered / Z-ordered streamed" if v == "streamed" else f"{LABELS[v]} / one file" for v in LAYOUTS[1:]
    ]
    align = "rl" + "r" * len(LAYOUTS)
    dv = result["deletion_vectors"]
    head = ["N held", "held keys"]
    tables = {"seconds": table([*head, *LABELS.values()], None, seconds, "rl" + "r" * len(VARIANTS))}
    tables["ratios"] = table([*head, "one file / append", *ratio_heads], None, ratios, align)
    tables["rewrites"] = table([*head, *(LABELS[v] for v in LAYOUTS)], None, rewrites, align)
    small_runs = "/".join(map(str, sorted({n for s, n in runs.items() if s != big}) or [runs[big]]))
    values = {"rows": ROWS, "files": FILES, "big": big, "small_runs": small_runs, "big_runs": runs[big]}
    values["r"] = Lookup(lambda kind, v, bottom="one": f"{ratio(big, kind, v, bottom):.2f}x")
    values["copied"] = Lookup(lambda kind, v: _rows_text(metric(big, kind, v, "num_target_rows_copied")))
    values["touched"] = Lookup(lambda k, v: f"{metric(big, k, v, 'num_target_files_removed'):.0f} of {files(big, v)}")
    values["scan"] = Lookup(lambda kind, v: f"{metric(big, kind, v, 'scan_time_ms'):.0f} ms")
    values |= {"best_label": LABELS[best[1]], "best_kind": best[0], "best_ratio": f"{ratio(big, *best):.2f}x"}
    values["out"] = metric(big, "random", "unsorted", "num_target_files_removed")
    values["added"] = metric(big, "random", "unsorted", "num_target_files_added")
    version = result.get("deltalake_version") or deltalake.__version__  # (results before it was saved: installed)
    dv_values = {"rows": ROWS, "version": version, "dv": dv, "features": ", ".join(dv["reader_features"])}
    text = T("section", machine=machine_markdown(saved["meta"], "loader"), **tables, **values)
    return text + T("dv-refused" if "sink_refused" in dv else "dv", **dv_values)  # dv: results before the refusal


def measure(run: Run) -> dict[str, Any]:
    sizes = (10_000, 100_000) if run.args.quick else (10_000, 1_000_000, 10_000_000)
    return measure_sizes(sizes, 3 if run.args.quick else 9)


BENCHMARK = Benchmark(measure, render)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
