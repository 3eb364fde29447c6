"""One keyed feed two ways through the live service: a latest table, and an append table
that readers query for the newest row per key.

    python -m benchmarks.latest_vs_append            # 3 runs of a 60 s feed, BENCHMARKS.md "latest-vs-append"
    python -m benchmarks.latest_vs_append --quick    # 1 run of a 15 s feed, prints only

The service in this process (``testing.service_harness``: the real intake, WAL, pending
store and dispatcher) with the embedded Delta writer on Spark ``local[2]``, 2 workers.
One producer sends the same updates (10 rows each, keys drawn from 200 with Zipf 0.9,
``ts`` increasing) to both tables, 20 updates a second, and then waits until both are
loaded. Reported, median of the runs (each its own seed): rows each Delta table holds,
rows its loads wrote (a MERGE rewrites the files holding the keys it touches, so a latest
table writes more rows than it holds), its versions, the service's staleness integral
over LOW for each table, and what a reader pays for "the newest row of every key":
reading the latest table against DuckDB's window query over the append table (median of
5 reads).
"""

from __future__ import annotations

import argparse
import json
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


def rows_written(path: Path) -> int:
    """Rows in every data file the table's loads added, from the Delta log's file
    statistics (compactions, which rewrite what is there, left out)."""
    total = 0
    for entry in sorted((path / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("operation") == "OPTIMIZE":
            continue
        for action in actions:
            if "add" in action:
                total += json.loads(action["add"].get("stats") or "{}").get("numRecords", 0)
    return total


def run(seconds: float, spark: Any, seed: int) -> dict[str, Any]:
    from loader.loading.sinks import make_sink

    weights = [1.0 / (rank**0.9) for rank in range(1, KEYS + 1)]
    rng = random.Random(seed)
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
                    "rows_written": rows_written(path),
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
    return out


def _spread(values: list[float], fmt: str) -> str:
    """Median, and the range when there are several runs."""
    mid = format(statistics.median(values), fmt)
    return mid if len(values) == 1 else f"{mid} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def main(argv: list[str] | None = None) -> int:
    from loader.loading.spark import build_spark_session

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one 15 s feed, no BENCHMARKS.md")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 3; 1 with --quick)")
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    runs = args.runs or (1 if args.quick else 3)
    began = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
    }
    spark = build_spark_session("local[2]", fair_pools=2)
    try:
        results = [run(15.0 if args.quick else 60.0, spark, seed=16 + i) for i in range(runs)]
    finally:
        spark.stop()
    meta["run_seconds"] = time.perf_counter() - began
    meta["loadavg_end"] = load_average()
    first = results[0]
    rows = []
    for name, label in (("feed_latest", "latest table"), ("feed_append", "append table + newest-row query")):
        of = [r[name] for r in results]
        ratios = [x["ratio"] for x in of if x["ratio"] is not None]
        reads = [statistics.median(r["reads"]["latest" if name == "feed_latest" else "append"]) * 1000 for r in results]
        rows.append(
            [
                label,
                _spread([x["rows"] for x in of], ",.0f"),
                _spread([x["rows_written"] for x in of], ",.0f"),
                _spread([x["versions"] for x in of], ".0f"),
                _spread(ratios, ".2f") if ratios else "—",
                _spread([x["superseded_rows"] for x in of], ",.0f"),
                _spread(reads, ".1f"),
            ]
        )
    same = all(r["same_answer"] for r in results)
    markdown = (
        "## One keyed feed as a latest table and as an append table (`benchmarks/latest_vs_append.py`)\n\n"
        + machine_markdown(meta, "loader")
        + f"\nThe live service in process (embedded writer, Spark `local[2]`, 2 workers); one producer sends "
        f"{first['updates']:,} updates of {ROWS} rows ({KEYS} keys, Zipf 0.9, `ts` increasing) to both tables at "
        f"{RATE:g} updates/s for {first['seconds']:g} s. {runs} run(s), each its own seed: median (range). "
        "Rows written: rows in every data file the loads added (from the Delta log; compactions left out). "
        "Staleness / LOW is the service's own account of each table "
        '(per update, docs/latest-tables.md). A reader\'s "newest row of every key": the latest table read whole '
        "(deltalake) against DuckDB's window query over the append table's files, median of 5; both give the same "
        f"answer in every run: {'yes' if same else 'NO'}.\n\n"
        + md_table(
            [
                "table",
                "rows held",
                "rows written",
                "Delta versions",
                "staleness / LOW",
                "superseded rows",
                "newest-per-key read ms",
            ],
            rows,
            "lrrrrrr",
        )
        + "\n"
    )
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "latest_vs_append.json", {"meta": meta, "runs": results})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
