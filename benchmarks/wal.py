"""The write-ahead log alone: acknowledged records per second and ack latency, by concurrency.

What group commit buys: with one appender every record pays a whole fsync; with many,
records queued during an fsync share the next one. Each appender awaits its own append
(as a request handler does) and appends the next record as soon as it returns.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians, repeat
from loader.core.updates import Update, WalRecord
from loader.durability.wal import WriteAheadLog
from testing.report import machine_markdown

ROWS = pa.table({"id": list(range(8)), "name": [f"user-{i:04d}" for i in range(8)], "value": [i / 3 for i in range(8)]})
T = Template("wal")


def run_once(concurrency: int, seconds: float, scratch: Path | None, durability: str) -> dict[str, float]:
    groups: list[int] = []
    latencies: list[float] = []
    with (
        tempfile.TemporaryDirectory(dir=scratch) as directory,
        WriteAheadLog(Path(directory), durability=durability, on_fsync=lambda s, r, b: groups.append(r)) as wal,
    ):

        async def appender(t: int, deadline: float) -> None:
            seq = 0
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                await wal.append([WalRecord(Update(f"t{t}", seq, float(seq + 1), ROWS))])
                latencies.append(time.perf_counter() - began)
                seq += 1

        async def run() -> float:
            began = time.perf_counter()
            await asyncio.gather(*(appender(t, began + seconds) for t in range(concurrency)))
            return time.perf_counter() - began

        elapsed = asyncio.run(run())
        bytes_per_record = wal.size_bytes / max(1, len(latencies))
    latencies.sort()
    n = len(latencies)
    out = {"records_per_second": n / elapsed, "fsyncs_per_second": len(groups) / elapsed}
    out |= {"records_per_fsync": n / max(1, len(groups)), "p50_ms": latencies[n // 2] * 1e3}
    return out | {"p99_ms": latencies[int(n * 0.99)] * 1e3, "bytes_per_record": bytes_per_record}


def measure(run: Run) -> dict[str, Any]:
    seconds, directory = 2.0 if run.args.quick else 5.0, run.args.dir
    run.meta.update(seconds=seconds, directory=str(directory) if directory else None)
    out = []
    for durability in ("fsync", "flush"):
        for concurrency in (1, 8, 64):
            label = f"{durability}, {concurrency} appenders"
            runs = repeat(run.args.repeats, label, run_once, concurrency, seconds, directory, durability)
            out.append({"durability": durability, "concurrency": concurrency, "runs": runs, "median": medians(runs)})
    return {"results": out}


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    where = f" under {meta['directory']}" if meta.get("directory") else " (/tmp)"
    table = T.table("table", results["results"], "lrrrrrrr")
    return T("section", machine=machine_markdown(meta, "loader"), meta=meta, where=where, table=table)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, help="directory on the disk to measure (default: /tmp)")


BENCHMARK = Benchmark(measure, render, repeats=(1, 3), options=options)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
