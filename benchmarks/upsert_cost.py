"""What a latest table's load costs beside an append: one upsert (Spark keeps the newest
value per key, deltalake's MERGE commits it) against one append of the same batch.

    python -m benchmarks.upsert_cost            # 10 runs per size, BENCHMARKS.md section "upsert-cost"
    python -m benchmarks.upsert_cost --quick    # 3 runs, prints only

``DeltaRsSink`` (the embedded writer) in this process, Spark ``local[2]``. Each run loads
one batch of 100 rows (half of them keys the table holds, some keys twice) into a latest
table that already holds ``N`` keys, and the same batch into an append table of ``N``
rows, alternating, after a warm-up of each. The MERGE reads the files holding the
matched keys and rewrites them, so its cost grows with the table; an append's does not.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from testing.report import (
    RESULTS_DIR,
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
ROWS = 100
SIZES = (1_000, 100_000, 1_000_000, 10_000_000)
#: Runs at the largest size (each MERGE there rewrites a 10M-row file).
LARGE_RUNS = 3


def _rows(rng: random.Random, held: int, seq: int) -> pa.Table:
    ids = [rng.randrange(held) if i % 2 else held + seq * ROWS + i for i in range(ROWS)]
    ids[-1] = ids[0]  # a key twice in the batch: one value superseded
    return pa.table({"id": ids, "v": [rng.random() for _ in ids], "ts": [seq] * len(ids)}, schema=APPEND.arrow())


def measure(sizes: tuple[int, ...], runs: int) -> dict[str, Any]:
    from loader.loading.sinks.delta_rs import DeltaRsSink
    from loader.loading.spark import build_spark_session

    spark = build_spark_session("local[2]", fair_pools=1)
    rng = random.Random(16)
    out: dict[str, Any] = {"sizes": list(sizes), "runs": runs, "append": {}, "upsert": {}}
    with tempfile.TemporaryDirectory() as directory:
        sink = DeltaRsSink(Path(directory), spark)
        for size in sizes:
            names = {"append": f"append_{size}", "upsert": f"latest_{size}"}
            base = pa.table({"id": list(range(size)), "v": [0.0] * size, "ts": [0] * size}, schema=APPEND.arrow())
            for kind, name in names.items():
                sink.ensure_table(name, LATEST if kind == "upsert" else APPEND)
                write_deltalake(str(sink.table_path(name)), base, mode="append")  # N rows / keys held
            times: dict[str, list[float]] = {"append": [], "upsert": []}
            for run in range(-1, runs if size < 10_000_000 else min(runs, LARGE_RUNS)):  # run -1: warm-up
                rows = _rows(rng, size, run + 2)
                for kind, name in names.items():
                    schema = LATEST if kind == "upsert" else APPEND
                    batch = Batch(name, (Update(name, run + 2, float(run + 2), rows),))
                    began = time.perf_counter()
                    sink.load(batch, schema)
                    if run >= 0:
                        times[kind].append(time.perf_counter() - began)
                log(f"{size:,} rows held: run {run + 1}/{runs}")
            out["append"][size] = times["append"]
            out["upsert"][size] = times["upsert"]
    spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, two sizes, no BENCHMARKS.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
    }
    sizes = SIZES[:2] if args.quick else SIZES
    runs = 3 if args.quick else 10
    result = measure(sizes, runs)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    rows = []
    for size in sizes:
        a, u = statistics.median(result["append"][size]), statistics.median(result["upsert"][size])
        rows.append([f"{size:,}", f"{a:.3f}", f"{u:.3f}", f"{u / a:.2f}x", f"{max(result['upsert'][size]):.3f}"])
    markdown = (
        "## A latest table's load: upsert against append (`benchmarks/upsert_cost.py`)\n\n"
        + machine_markdown(meta, "loader")
        + f"\nOne batch of {ROWS} rows (half new keys, half keys the table holds, one key twice) into a table "
        f"holding N rows/keys; `DeltaRsSink`, Spark `local[2]` in process; append and upsert alternating, median of "
        f"{runs} runs after a warm-up ({min(runs, LARGE_RUNS)} at 10,000,000). The upsert is a Spark job keeping "
        "the newest value per key, then deltalake's "
        "MERGE, which reads and rewrites the files holding matched keys (each table starts as one file).\n\n"
        + md_table(["N held", "append s", "upsert s", "upsert / append", "upsert worst s"], rows, "rrrrr")
        + "\n"
    )
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "upsert_cost.json", {"meta": meta, **result})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
