"""Rows per second from one producer process: the producer client against raw HTTP calls.

One ``loader serve`` (classic Spark, local[1]; loads run beside intake as in production)
with three tables. One producer process (this one) sends ``--rows`` rows in sends of 1, 10
or 100 rows, round robin over the tables, and the clock stops when every row is
acknowledged (202: durable in the WAL):

- raw: ``httpx.Client`` with keep-alive, one ``POST /v1/tables/{t}/updates`` per send with
  an Idempotency-Key each (what a careful producer writes by hand), one at a time;
- client: ``LoaderProducer`` with its defaults (linger 50 ms, up to 4 requests in flight,
  several tables' updates in one ``POST /v1/updates``), a ``send`` per send, then ``flush``;
- client, durable: the same with a ``state_dir`` (each ``send`` fsynced to its journal).

Cases run interleaved, ``--repeats`` times; figures are medians, the ratio is per repeat.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Lookup, Template
from benchmarks.harness.service import serve
from benchmarks.harness.spark import declared
from producer import LoaderProducer
from testing.report import log, machine_markdown

TOKEN = "bench-producer-operator-token-01"
TABLES = ("t0", "t1", "t2")
SCHEMA = declared("id int64 not null", "v float64")
PER_SEND = (1, 10, 100)
T = Template("producer")


def sends(rows: int, per_send: int) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """Each send's number, table (round robin) and rows, made as they are sent."""
    for n, first in enumerate(range(0, rows, per_send)):
        yield n, TABLES[n % len(TABLES)], [{"id": k, "v": k * 0.5} for k in range(first, min(rows, first + per_send))]


def raw(url: str, rows: int, per_send: int, run: str) -> float:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
        began = time.perf_counter()
        for n, table, batch in sends(rows, per_send):
            answer = http.post(
                f"/v1/tables/{table}/updates", json={"rows": batch}, headers={"Idempotency-Key": f"{run}/{n}"}
            )
            if answer.status_code != 202:
                raise RuntimeError(f"HTTP {answer.status_code}: {answer.text}")
        return rows / (time.perf_counter() - began)


def client(url: str, rows: int, per_send: int, state_dir: Path | None) -> float:
    extra: dict[str, Any] = {"producer_id": "bench", "state_dir": state_dir} if state_dir is not None else {}
    began = time.perf_counter()
    with LoaderProducer(url=url, token=TOKEN, **extra) as producer:
        futures = [producer.send(table, batch) for _, table, batch in sends(rows, per_send)]
        producer.flush()
        if failed := [f.exception() for f in futures if f.exception() is not None]:
            raise RuntimeError(f"{len(failed)} sends failed: {failed[0]}")
    return rows / (time.perf_counter() - began)


def measure_rows(rows: int, repeats: int, work: Path) -> dict[str, Any]:
    settings = {"workers": 2, "spark": {"master": "local[1]", "mode": "classic"}}
    settings |= {"maintenance": {"compact_seconds": 0, "vacuum_seconds": 0}}
    settings["auth_tokens"] = [{"name": "ops", "token": TOKEN, "role": "operator"}]
    settings["tables"] = [{"name": t, "schema": SCHEMA} for t in TABLES]
    runs: dict[str, dict[str, list[float]]] = {}
    with serve(work, settings, TOKEN, timeout=180) as (server, _, _):
        for repeat in range(repeats):
            for per_send in PER_SEND:
                n = rows if per_send > 1 else rows // 10
                case = runs.setdefault(str(per_send), {"raw": [], "client": [], "durable": []})
                log(f"repeat {repeat + 1}/{repeats}: {per_send} row(s) a send, {n:,} rows")
                case["raw"].append(raw(server.base, n, per_send, f"raw-{repeat}-{per_send}"))
                case["client"].append(client(server.base, n, per_send, None))
                case["durable"].append(client(server.base, n, per_send, work / f"state-{repeat}-{per_send}"))
    return {"rows": rows, "runs": runs}


def ratio(runs: dict[str, list[float]], case: str) -> float:
    """The median of per-repeat ratios of ``case`` to raw HTTP."""
    return statistics.median(a / b for a, b in zip(runs[case], runs["raw"], strict=True))


def render(saved: dict[str, Any]) -> str:
    result = saved["result"]
    runs = result["runs"]
    med = {n: {k: statistics.median(v) for k, v in case.items()} for n, case in runs.items()}
    rows = [
        (n, m["raw"], m["client"], m["durable"], ratio(runs[n], "client"), ratio(runs[n], "durable"))
        for n, m in med.items()
    ]
    one, meta = med["1"], saved["meta"]
    values = {"result": result, "single": result["rows"] // 10, "repeats": meta["repeats"], "one": one}
    values |= {"table": T.table("table", rows, "rrrrrr"), "raw_ms": 1000 / one["raw"]}
    values["durable_ms"] = 1000 / one["durable"]
    values["ratio"] = Lookup(lambda n, case: ratio(runs[n], case))
    return T("section", machine=machine_markdown(meta, "producer"), **values)


def measure(run: Run) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="producer-bench-") as tmp:
        return {"result": measure_rows(10_000 if run.args.quick else run.args.rows, run.args.repeats, Path(tmp))}


BENCHMARK = Benchmark(
    measure,
    render,
    "producer",
    repeats=(1, 3),
    options=lambda parser: parser.add_argument("--rows", type=int, default=100_000),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
