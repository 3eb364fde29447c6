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
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import child, spark
from benchmarks.harness.results import medians
from benchmarks.harness.rows import SCHEMA, small_rows
from loader.core.updates import Batch, Update
from testing.report import log


def make_batch(table: str, rows: int, rows_per_update: int, first_seq: int, first_id: int) -> Batch:
    end = first_id + rows
    data = [small_rows(range(i, min(i + rows_per_update, end))) for i in range(first_id, end, rows_per_update)]
    return Batch(table, tuple(Update(table, first_seq + k, 1.0 + first_seq + k, rows=d) for k, d in enumerate(data)))


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    from loader.loading.sinks.delta_rs import DeltaRsSink
    from loader.loading.sinks.frame import build_batch_frame

    began = time.perf_counter()
    with spark.session(spec["master"], fair_pools=0) as session, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out: dict[str, Any] = {"spark_start_seconds": time.perf_counter() - began, "sizes": []}
        sink = DeltaRsSink(Path(tmp) / "warehouse", session)
        seq = 0
        for rows in spec["sizes"]:
            table = f"commit_{rows}"
            sink.ensure_table(table, SCHEMA)
            delta_runs, bare_runs, files = [], [], []
            for k in range(spec["runs"] + 1):  # k = 0: warm-up, not timed
                batch = make_batch(table, rows, spec["rows_per_update"], seq + 1, seq * rows)
                seq = batch.last_seq
                result, delta_seconds = spark.timed(sink.load, batch, SCHEMA)
                if result.skipped or result.rows != rows:
                    raise RuntimeError(f"delta load of {rows} rows wrote {result.rows} (skipped={result.skipped})")
                bare = Path(tmp) / "bare" / f"{table}-{k}"
                t0 = time.perf_counter()
                build_batch_frame(session, batch, SCHEMA, bare.with_name(f"{bare.name}-in")).write.parquet(str(bare))
                bare_seconds = time.perf_counter() - t0
                shutil.rmtree(bare, ignore_errors=True)
                if k > 0:
                    delta_runs.append({"total_seconds": delta_seconds, **result.details})
                    bare_runs.append(bare_seconds)
                    files.append(result.files_written)
            med = medians(delta_runs)
            out["sizes"].append(
                {
                    "rows": rows,
                    "updates_per_batch": len(batch.updates),
                    "runs": len(bare_runs),
                    "delta_seconds": [r["total_seconds"] for r in delta_runs],
                    "delta_details": delta_runs,
                    "bare_seconds": bare_runs,
                    "delta_median": med["total_seconds"],
                    "spark_median": med["spark_seconds"],
                    "publish_median": med["publish_seconds"],
                    "commit_median": med["commit_seconds"],
                    "bare_median": statistics.median(bare_runs),
                    "overhead_median": med["total_seconds"] - statistics.median(bare_runs),
                    "files_written": files,
                }
            )
            log(
                f"[commit] {rows:,} rows: delta {med['total_seconds']:.3f} s, bare {statistics.median(bare_runs):.3f} s"
            )
    return out


if __name__ == "__main__":
    raise SystemExit(child.main(measure))
