"""One keyed feed two ways through the live service: a latest table, and an append table
that readers query for the newest row per key.

The service in this process (``testing.service_harness``) with the embedded Delta writer;
a MERGE rewrites the files holding the keys it touches, so a latest table writes more rows
than it holds. templates/latest-vs-append.md says what is reported.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb
from deltalake import DeltaTable

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.spark import declared
from testing.report import log, machine_markdown
from testing.service_harness import OPERATOR, Harness
from testing.tables import read_delta

KEYS, ROWS, RATE = 200, 10, 20.0
T = Template("latest-vs-append")
LABELS = {"feed_latest": "latest table", "feed_append": "append table + newest-row query"}
FIGURES = (("rows", ",.0f"), ("rows_written", ",.0f"), ("versions", ".0f"), ("superseded_rows", ",.0f"))
SCHEMA = declared("sym string not null", "px float64", "ts int64 not null")
TABLES = {
    "feed_latest": {"schema": SCHEMA, "mode": "latest", "key": ["sym"], "order_by": "ts"},
    "feed_append": {"schema": SCHEMA},
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


def _feed(h: Harness, tables: list[str], seconds: float, rng: random.Random, keys: Callable[[], Iterable[str]]) -> int:
    """One producer: updates of ``ROWS`` rows (keys from ``keys()``, ``ts`` increasing) to every
    table at ``RATE`` a second for ``seconds``; returns once all are loaded, with their count."""
    started, sent, ts, last = time.monotonic(), 0, 0, {}
    while time.monotonic() - started < seconds:
        rows = []
        for sym in keys():
            ts += 1
            rows.append({"sym": sym, "px": round(rng.random(), 6), "ts": ts})
        for name in tables:
            answer = h.post(f"/v1/tables/{name}/updates", json={"rows": rows})
            assert answer.status_code == 202, answer.text
            last[name] = answer.json()["updates"][0]["sequence"]
        sent += 1
        time.sleep(max(0.0, started + sent / RATE - time.monotonic()))
    log(f"sent {sent} updates to each table; waiting for the loads")
    for name, seq in last.items():
        h.wait_loaded(name, seq, timeout=600)
    return sent


def run_feed(seconds: float, session: Any, seed: int) -> dict[str, Any]:
    from loader.loading.sinks import make_sink

    weights = [1.0 / (rank**0.9) for rank in range(1, KEYS + 1)]
    rng = random.Random(seed)
    out: dict[str, Any] = {"seconds": seconds, "keys": KEYS, "rows_per_update": ROWS, "rate": RATE}
    with tempfile.TemporaryDirectory() as directory:
        sink = lambda settings: make_sink("delta-rs", settings.warehouse_path, session)  # noqa: E731
        with Harness(Path(directory) / "data", sink=sink) as h:
            for name, declaration in TABLES.items():
                assert h.post("/v1/admin/tables", token=OPERATOR, json={"name": name, **declaration}).status_code == 201
            keys = lambda: (f"s{sym:03d}" for sym in rng.choices(range(KEYS), weights, k=ROWS))  # noqa: E731
            out["updates"] = _feed(h, list(TABLES), seconds, rng, keys)
            for name in TABLES:
                status = h.status(name)
                path = h.settings.warehouse_path / name
                ratio = status["staleness_integral"] / status["low_bound"] if status["low_bound"] else None
                out[name] = {"rows": read_delta(path).num_rows, "rows_written": rows_written(path), "ratio": ratio}
                out[name] |= {"versions": DeltaTable(str(path)).version(), "superseded_rows": status["superseded_rows"]}
            con, warehouse = duckdb.connect(), h.settings.warehouse_path
            reads: dict[str, list[float]] = {"latest": [], "append": []}
            for _ in range(5):
                mine, took = spark.timed(read_delta, warehouse / "feed_latest")
                reads["latest"].append(took)
                newest, took = spark.timed(lambda: con.sql(_newest_query(warehouse / "feed_append")).to_arrow_table())
                reads["append"].append(took)
            got = {r["sym"]: (r["ts"], r["px"]) for r in mine.to_pylist()}
            want = {r["sym"]: (r["ts"], r["px"]) for r in newest.to_pylist()}
            out |= {"same_answer": got == want, "reads": reads}
    return out


#: Held keys of the tables fed in ``run_held``, and the target: the latest table's staleness at
#: most this many times the append table's (issue 38).
HELD, HELD_QUICK, HELD_TARGET = 1_000_000, 100_000, 1.2
UPSERTS = ("deletion-vectors", "merge")


def run_held(seconds: float, session: Any, seed: int, upsert: str, held: int) -> dict[str, Any]:
    """The feed against tables that hold ``held`` keys: the latest table (declared ``upsert``)
    and the append table start with the same ``held`` rows (keys sorted, written straight into
    their Delta tables before the feed, row groups as the deletion-vector upsert writes them),
    and every update's 10 rows hit held keys at random (a change feed of accounts)."""
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    from loader.loading.sinks import make_sink
    from loader.loading.sinks.upsert_dv import ROW_GROUP_ROWS

    rng = random.Random(seed)
    tables = {"feed_latest": TABLES["feed_latest"] | {"upsert": upsert}, "feed_append": TABLES["feed_append"]}
    out: dict[str, Any] = {"seconds": seconds, "held": held, "upsert": upsert, "rate": RATE}
    with tempfile.TemporaryDirectory() as directory:
        sink = lambda settings: make_sink("delta-rs", settings.warehouse_path, session)  # noqa: E731
        with Harness(Path(directory) / "data", sink=sink) as h:
            for name, declaration in tables.items():
                assert h.post("/v1/admin/tables", token=OPERATOR, json={"name": name, **declaration}).status_code == 201
            base = pa.table(
                {"sym": [f"s{i:07d}" for i in range(held)], "px": [0.0] * held, "ts": pa.array([0] * held, pa.int64())}
            )
            for name in tables:
                h.wait(lambda name=name: (h.settings.warehouse_path / name / "_delta_log").is_dir(), 60)
                groups = WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression="SNAPPY")
                write_deltalake(str(h.settings.warehouse_path / name), base, mode="append", writer_properties=groups)
            keys = lambda: (f"s{rng.randrange(held):07d}" for _ in range(ROWS))  # noqa: E731
            out["updates"] = _feed(h, list(tables), seconds, rng, keys)
            for name in tables:
                status = h.status(name)
                out[name] = {"staleness": status["staleness_integral"], "low": status["low_bound"]}
                out[name]["versions"] = DeltaTable(str(h.settings.warehouse_path / name)).version()
    return out


def _spread(values: list[float], fmt: str) -> str:
    """Median, and the range when there are several runs."""
    mid = format(statistics.median(values), fmt)
    return mid if len(values) == 1 else f"{mid} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def measure(run: Run) -> dict[str, Any]:
    seconds = 15.0 if run.args.quick else 60.0
    held = HELD_QUICK if run.args.quick else HELD
    with spark.session(fair_pools=2) as session:
        runs = [run_feed(seconds, session, 16 + i) for i in range(run.args.repeats)]
        return {"runs": runs, "held": [run_held(seconds, session, 38, upsert, held) for upsert in UPSERTS]}


def render(saved: dict[str, Any]) -> str:
    results = saved["runs"]
    rows = []
    for name, read in (("feed_latest", "latest"), ("feed_append", "append")):
        of = [r[name] for r in results]
        ratios = [x["ratio"] for x in of if x["ratio"] is not None]
        cells = [_spread([x[k] for x in of], f) for k, f in FIGURES]
        reads = _spread([statistics.median(r["reads"][read]) * 1000 for r in results], ".1f")
        rows.append([LABELS[name], *cells[:3], _spread(ratios, ".2f") if ratios else "—", cells[3], reads])
    values = {"first": results[0], "rows": ROWS, "keys": KEYS, "rate": RATE, "runs": len(results)}
    values["same"] = "yes" if all(r["same_answer"] for r in results) else "NO"
    values["table"] = T.table("table", rows, "lrrrrrr")
    text = T("section", machine=machine_markdown(saved["meta"], "loader"), **values)
    held = saved.get("held")
    if not held:  # (results before the held-keys runs)
        return text
    cells = []
    for r in held:
        latest, append = r["feed_latest"], r["feed_append"]
        ratio = latest["staleness"] / append["staleness"] if append["staleness"] else float("nan")
        verdict = "PASS" if ratio <= HELD_TARGET else "MISS"
        cells.append(
            [r["upsert"], f"{r['held']:,}", f"{r['updates']:,}", f"{latest['staleness'] / latest['low']:.2f}"]
            + [f"{append['staleness'] / append['low']:.2f}", f"{ratio:.2f}x", verdict]
            + [f"{latest['versions']:,} / {append['versions']:,}"]
        )
    first = held[0]
    return text + T("held", held=T.table("held-table", cells, "llrrrrrr"), first=first, target=HELD_TARGET)


BENCHMARK = Benchmark(measure, render, repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
