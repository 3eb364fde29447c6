"""Per-batch cost of the Delta commit path against a bare Spark Parquet write, in its own process
(so that Spark's JVM goes away with it whatever happens).

    python -m benchmarks.service.commit SPEC.json     # prints one JSON object on stdout

Per batch size the same ``Batch`` is written ``runs`` times by each path, alternating, after
one untimed warm-up of each: ``delta`` (``DeltaRsSink.load`` as the service runs it) and
``bare`` (``build_batch_frame(...).write.parquet``: the same DataFrame and job, nothing else).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import child
from benchmarks.harness.rows import SCHEMA, small_rows
from loader.core.updates import Batch, Update


def make_batch(table: str, rows: int, rows_per_update: int, first_seq: int, first_id: int) -> Batch:
    updates = []
    made = 0
    seq = first_seq
    while made < rows:
        n = min(rows_per_update, rows - made)
        data = small_rows(range(first_id + made, first_id + made + n))
        updates.append(Update(table, seq, 1.0 + seq, rows=data))
        made += n
        seq += 1
    return Batch(table, tuple(updates))


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    from loader.loading.sinks.delta_rs import DeltaRsSink
    from loader.loading.sinks.frame import build_batch_frame
    from loader.loading.spark import build_spark_session

    began = time.perf_counter()
    spark = build_spark_session(master=spec["master"], fair_pools=0)
    spark_start = time.perf_counter() - began
    out: dict[str, Any] = {"spark_start_seconds": spark_start, "sizes": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp:
            root = Path(tmp)
            sink = DeltaRsSink(root / "warehouse", spark)
            bare_root = root / "bare"
            bare_root.mkdir()
            seq = 0
            for rows in spec["sizes"]:
                table = f"commit_{rows}"
                sink.ensure_table(table, SCHEMA)
                delta_runs: list[dict[str, float]] = []
                bare_runs: list[float] = []
                files: list[int] = []
                for k in range(spec["runs"] + 1):  # k = 0: warm-up, not timed
                    batch = make_batch(table, rows, spec["rows_per_update"], seq + 1, seq * rows)
                    seq = batch.last_seq
                    t0 = time.perf_counter()
                    result = sink.load(batch, SCHEMA)
                    delta_seconds = time.perf_counter() - t0
                    if result.skipped or result.rows != rows:
                        raise RuntimeError(f"delta load of {rows} rows wrote {result.rows} (skipped={result.skipped})")
                    target = bare_root / f"{table}-{k}"
                    t0 = time.perf_counter()
                    build_batch_frame(spark, batch, SCHEMA, bare_root / f"{table}-{k}-in").write.mode(
                        "errorifexists"
                    ).parquet(str(target))
                    bare_seconds = time.perf_counter() - t0
                    shutil.rmtree(target, ignore_errors=True)
                    if k == 0:
                        continue
                    delta_runs.append({"total_seconds": delta_seconds, **result.details})
                    bare_runs.append(bare_seconds)
                    files.append(result.files_written)
                med = {key: statistics.median(r[key] for r in delta_runs) for key in delta_runs[0]}
                bare = statistics.median(bare_runs)
                out["sizes"].append(
                    {
                        "rows": rows,
                        "updates_per_batch": len(batch.updates),
                        "runs": len(bare_runs),
                        "delta_seconds": [r["total_seconds"] for r in delta_runs],
                        "delta_details": delta_runs,
                        "bare_seconds": bare_runs,
                        "delta_median": med["total_seconds"],
                        "spark_median": med.get("spark_seconds"),
                        "publish_median": med.get("publish_seconds"),
                        "commit_median": med.get("commit_seconds"),
                        "bare_median": bare,
                        "overhead_median": med["total_seconds"] - bare,
                        "files_written": files,
                    }
                )
                print(
                    f"[commit] {rows:,} rows: delta {med['total_seconds']:.3f} s, bare {bare:.3f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        spark.stop()
    return out


if __name__ == "__main__":
    raise SystemExit(child.main(measure))
