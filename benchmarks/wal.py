"""The write-ahead log alone: acknowledged records per second and ack latency, by concurrency.

    python -m benchmarks.wal            # fsync and flush, 1 / 8 / 64 appenders, 3 runs each
    python -m benchmarks.wal --quick    # 2 s runs, 1 repeat, prints only

What group commit buys: with one appender every record pays a whole fsync; with many,
records queued during an fsync share the next one. Each appender awaits its own append
(as a request handler does) and appends the next record as soon as it returns.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from loader.core.updates import Update, WalRecord
from loader.durability.wal import WriteAheadLog
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

MODULE = "benchmarks.wal"
SECTION = "wal"
CONCURRENCY = (1, 8, 64)
ROWS = pa.table(
    {
        "id": pa.array(range(8), pa.int64()),
        "name": [f"user-{i:04d}" for i in range(8)],
        "value": pa.array([i / 3 for i in range(8)]),
    }
)


def run_once(concurrency: int, seconds: float, directory: Path, durability: str) -> dict[str, float]:
    groups: list[int] = []
    latencies: list[float] = []
    with WriteAheadLog(directory, durability=durability, on_fsync=lambda s, r, b: groups.append(r)) as wal:

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
    return {
        "records_per_second": len(latencies) / elapsed,
        "fsyncs_per_second": len(groups) / elapsed,
        "records_per_fsync": len(latencies) / max(1, len(groups)),
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "bytes_per_record": bytes_per_record,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s runs, 1 repeat, no BENCHMARKS.md")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to measure (default: /tmp)")
    args = parser.parse_args(argv)
    seconds = 2.0 if args.quick else 5.0
    repeats = args.repeats or (1 if args.quick else 3)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
        "seconds": seconds,
        "repeats": repeats,
    }
    rows, raw = [], []
    for durability in ("fsync", "flush"):
        for concurrency in CONCURRENCY:
            runs = []
            for k in range(repeats):
                log(f"{durability}, {concurrency} appenders, run {k + 1}/{repeats}")
                with tempfile.TemporaryDirectory(dir=args.dir) as d:
                    runs.append(run_once(concurrency, seconds, Path(d), durability))
            med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            raw.append({"durability": durability, "concurrency": concurrency, "runs": runs, "median": med})
            rows.append(
                [
                    durability,
                    concurrency,
                    f"{med['records_per_second']:,.0f}",
                    f"{med['fsyncs_per_second']:,.0f}",
                    f"{med['records_per_fsync']:.1f}",
                    f"{med['p50_ms']:.2f}",
                    f"{med['p99_ms']:.2f}",
                    f"{med['bytes_per_record']:.0f}",
                ]
            )
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    markdown = (
        "## Write-ahead log alone (`benchmarks/wal.py`)\n\n"
        + machine_markdown(meta, "loader")
        + f"\nMedian of {repeats} runs of {seconds:.0f} s each, in a temporary directory"
        f"{' under ' + str(args.dir) if args.dir else ' (/tmp)'}; one record = one update of 8 small rows. "
        "Each appender awaits its append before the next, as a request handler does.\n\n"
        + md_table(
            ["durability", "appenders", "records/s", "fsyncs/s", "records/fsync", "p50 ms", "p99 ms", "bytes/record"],
            rows,
            "lrrrrrrr",
        )
        + "\n"
    )
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "wal.json", {"meta": meta, "results": raw})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
