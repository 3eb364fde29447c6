"""Per-batch cost of the Delta commit path against a bare Spark Parquet write, in a process of
its own (Spark's JVM goes away with it): ``python -m benchmarks.service.commit SPEC.json``.

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
from benchmarks.harness.spark import SCHEMA, small_rows
from loader.core.updates import Batch, Update
from testing.report import log


def make_batch(table: str, rows: int, rows_per_update: int, first_seq: int, first_id: int) -> Batch:
    end = first_id + rows
    data = [small_rows(range(i, min(i + rows_per_update, end))) for i in range(first_id, end, rows_per_update)]
    return Batch(table, tuple(Update(table, first_seq + k, 1.0 + first_seq + k, rows=d) for k, d in enumerate(data)))


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    from loader.loading.sinks.delta_rs import DeltaRsSink
    from loader.loading.sinks.frame import build_batch_frame

    out: dict[str, Any] = {"sizes": []}
    with spark.session(spec["master"], fair_pools=0) as session, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        sink, seq = DeltaRsSink(Path(tmp) / "warehouse", session), 0
        for rows in spec["sizes"]:
            table = f"commit_{rows}"
            sink.ensure_table(table, SCHEMA)
            delta_runs, bare_runs = [], []
            for k in range(spec["runs"] + 1):  # k = 0: warm-up, not timed
                batch = make_batch(table, rows, spec["rows_per_update"], seq + 1, seq * rows)
                seq = batch.last_seq
                result, delta_seconds = spark.timed(sink.load, batch, SCHEMA)
                if result.skipped or result.rows != rows:
                    raise RuntimeError(f"delta load of {rows} rows wrote {result.rows} (skipped={result.skipped})")
                bare = Path(tmp) / "bare" / f"{table}-{k}"
                began = time.perf_counter()
                build_batch_frame(session, batch, SCHEMA, bare.with_name(f"{bare.name}-in")).write.parquet(str(bare))
                bare_seconds = time.perf_counter() - began
                shutil.rmtree(bare, ignore_errors=True)
                if k > 0:
                    delta_runs.append({"total_seconds": delta_seconds, **result.details})
                    bare_runs.append(bare_seconds)
            med, bare_median = medians(delta_runs), statistics.median(bare_runs)
            size = {"rows": rows, "updates_per_batch": len(batch.updates), "delta_details": delta_runs}
            size |= {f"{k}_median": med[f"{k}_seconds"] for k in ("spark", "publish", "commit")}
            size |= {"delta_median": med["total_seconds"], "bare_seconds": bare_runs, "bare_median": bare_median}
            out["sizes"].append(size | {"overhead_median": med["total_seconds"] - bare_median})
            log(f"[commit] {rows:,} rows: delta {med['total_seconds']:.3f} s, bare {bare_median:.3f} s")
    return out


if __name__ == "__main__":
    raise SystemExit(child.main(measure))
