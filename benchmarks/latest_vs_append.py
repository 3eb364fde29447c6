"""One keyed feed two ways through the live service: a latest table, and an append table
that readers query for the newest row per key.

    python -m benchmarks.latest_vs_append            # 60 s feed, BENCHMARKS.md section "latest-vs-append"
    python -m benchmarks.latest_vs_append --quick    # 15 s feed, prints only

The service in this process (``testing.service_harness``: the real intake, WAL, pending
store and dispatcher) with the embedded Delta writer on Spark ``local[2]``, 2 workers.
One producer sends the same updates (10 rows each, keys drawn from 200 with Zipf 0.9,
``ts`` increasing) to both tables, 20 updates a second, and then waits until both are
loaded. Reported: rows each Delta table holds, its versions, the service's staleness
integral over LOW for each table, and what a reader pays for "the newest row of every
key": reading the latest table against DuckDB's window query over the append table
(median of 5 reads each).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
from deltalake import DeltaTable

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
from testing.service_harness import OPERATOR, Harness
from testing.tables import read_delta

MODULE = "benchmarks.latest_vs_append"
SECTION = "latest-vs-append"
KEYS, ROWS, RATE = 200, 10, 20.0
COLUMNS = [
    {"name": "sym", "type": "string", "nullable": False},
    {"name": "px", "type": "float64"},
    {"name": "ts", "type": "int64", "nullable": False},
]
TABLES = {
    "feed_latest": {"schema": {"columns": COLUMNS}, "mode": "latest", "key": ["sym"], "order_by": "ts"},
    "feed_append": {"schema": {"columns": COLUMNS}},
}


def _newest_query(path: Path) -> str:
    files = ", ".join(f"'{f}'" for f in DeltaTable(str(path)).file_uris())
    return (
        f"SELECT sym, px, ts FROM (SELECT *, row_number() OVER (PARTITION BY sym ORDER BY ts DESC) AS r "
        f"FROM read_parquet([{files}])) WHERE r = 1"
    )


def run(seconds: float) -> dict[str, Any]:
    from loader.loading.sinks import make_sink
    from loader.loading.spark import build_spark_session

    spark = build_spark_session("local[2]", fair_pools=2)
    weights = [1.0 / (rank**0.9) for rank in range(1, KEYS + 1)]
    rng = random.Random(16)
    out: dict[str, Any] = {"seconds": seconds, "keys": KEYS, "rows_per_update": ROWS, "rate": RATE}
    with tempfile.TemporaryDirectory() as directory:
        sink = lambda settings: make_sink("delta-rs", settings.warehouse_path, spark)  # noqa: E731
        with Harness(Path(directory) / "data", sink=sink) as h:
            for name, declaration in TABLES.items():
                assert h.post("/v1/admin/tables", token=OPERATOR, json={"name": name, **declaration}).status_code == 201
            started, sent, ts, last = time.monotonic(), 0, 0, {}
            while time.monotonic() - started < seconds:
                rows = []
                for sym in rng.choices(range(KEYS), weights, k=ROWS):
                    ts += 1
                    rows.append({"sym": f"s{sym:03d}", "px": round(rng.random(), 6), "ts": ts})
                for name in TABLES:
                    answer = h.post(f"/v1/tables/{name}/updates", json={"rows": rows})
                    assert answer.status_code == 202, answer.text
                    last[name] = answer.json()["updates"][0]["sequence"]
                sent += 1
                time.sleep(max(0.0, started + sent / RATE - time.monotonic()))
            log(f"sent {sent} updates to each table; waiting for the loads")
            for name, seq in last.items():
                h.wait_loaded(name, seq, timeout=300)
            out["updates"] = sent
            for name in TABLES:
                status = h.status(name)
                path = h.settings.warehouse_path / name
                out[name] = {
                    "rows": read_delta(path).num_rows,
                    "versions": DeltaTable(str(path)).version(),
                    "ratio": status["staleness_integral"] / status["low_bound"] if status["low_bound"] else None,
                    "superseded_rows": status["superseded_rows"],
                }
            con = duckdb.connect()
            latest_path = h.settings.warehouse_path / "feed_latest"
            append_path = h.settings.warehouse_path / "feed_append"
            reads: dict[str, list[float]] = {"latest": [], "append": []}
            for _ in range(5):
                began = time.perf_counter()
                mine = read_delta(latest_path)
                reads["latest"].append(time.perf_counter() - began)
                began = time.perf_counter()
                newest = con.sql(_newest_query(append_path)).to_arrow_table()
                reads["append"].append(time.perf_counter() - began)
            got = {r["sym"]: (r["ts"], r["px"]) for r in mine.to_pylist()}
            want = {r["sym"]: (r["ts"], r["px"]) for r in newest.to_pylist()}
            out["same_answer"] = got == want
            out["reads"] = reads
    spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 15 s feed, no BENCHMARKS.md")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
    }
    result = run(15.0 if args.quick else 60.0)
    meta["run_seconds"] = time.perf_counter() - began
    meta["loadavg_end"] = load_average()
    rows = []
    for name, label in (("feed_latest", "latest table"), ("feed_append", "append table + newest-row query")):
        r = result[name]
        read = statistics.median(result["reads"]["latest" if name == "feed_latest" else "append"])
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        rows.append([label, f"{r['rows']:,}", r["versions"], ratio, f"{r['superseded_rows']:,}", f"{read * 1000:.1f}"])
    markdown = (
        "## One keyed feed as a latest table and as an append table (`benchmarks/latest_vs_append.py`)\n\n"
        + machine_markdown(meta, "loader")
        + f"\nThe live service in process (embedded writer, Spark `local[2]`, 2 workers); one producer sends "
        f"{result['updates']:,} updates of {ROWS} rows ({KEYS} keys, Zipf 0.9, `ts` increasing) to both tables at "
        f"{RATE:g} updates/s for {result['seconds']:g} s. Staleness / LOW is the service's own account of each table "
        '(per update, docs/latest-tables.md). A reader\'s "newest row of every key": the latest table read whole '
        "(deltalake) against DuckDB's window query over the append table's files, median of 5; both give the same "
        f"answer: {'yes' if result['same_answer'] else 'NO'}.\n\n"
        + md_table(
            ["table", "rows held", "Delta versions", "staleness / LOW", "superseded rows", "newest-per-key read ms"],
            rows,
            "lrrrrr",
        )
        + "\n"
    )
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "latest_vs_append.json", {"meta": meta, **result})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
