"""Acknowledgement latency while tables' schemas change: p99 during a change against before it.

One ``loader serve`` (the default: loads in worker processes over its own Spark Connect
server) with the service benchmark's eight tables. ``testing.loadgen`` (its own process, raw
HTTP: httpx would cost more than the latencies measured) sends ``--rate`` requests a second,
open loop (one update of three rows each, the tables in turn) for the whole run. After a
quiet phase, an operator changes a schema every ``--gap`` seconds (``PATCH
/v1/admin/tables/{t}/schema``: a nullable column added to one of the tables, in turn), each
change pausing that table's loads until its Delta commit has landed.

"Before": the requests sent in the quiet phase (after its first second). "During": the
requests scheduled while a change was in flight (from its PATCH to its answer). Latency is
from the scheduled send to the 202 (no coordinated omission). Target: p99 during at most 50 ms.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from benchmarks.harness.service import INTAKE_TABLES, OPEN_CONNECTIONS, WORKERS, requests_for, serve
from testing import service_server as srv
from testing.observed_staleness import percentile
from testing.report import log, machine_markdown

TABLES = INTAKE_TABLES
COLUMNS = srv.SCHEMA["columns"]
TARGET_P99_MS = 50.0
T = Template("schema-change")


def change(url: str, start_at: float, quiet: float, gap: float, count: int) -> list[tuple[float, float, int, str]]:
    """(began, ended, status, table) of each schema change, one every ``gap`` seconds after
    ``quiet`` (seconds from ``start_at``, the generator's clock)."""
    done: list[tuple[float, float, int, str]] = []
    headers = {"Authorization": f"Bearer {srv.OPERATOR_TOKEN}"}
    columns = {t: list(COLUMNS) for t in TABLES}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
        for k in range(count):
            time.sleep(max(0.0, start_at + quiet + k * gap - time.time()))
            table = TABLES[k % len(TABLES)]
            columns[table].append({"name": f"c{k}", "type": "string"})
            began = time.time() - start_at
            answer = http.patch(f"/v1/admin/tables/{table}/schema", json={"columns": columns[table]})
            done.append((began, time.time() - start_at, answer.status_code, table))
    return done


def run_once(server: Any, port: int, rate: float, quiet: float, gap: float, changes: int) -> dict[str, float]:
    seconds = quiet + gap * changes + 1.0
    spec = {"mode": "open", "connections": OPEN_CONNECTIONS, "warmup": 0.0, "duration": seconds, "rate": rate}
    spec |= {"requests": requests_for(1), "record": True, "drain_seconds": 30.0, "start_at": time.time() + 1.0}
    spec |= {"host": "127.0.0.1", "port": port, "token": srv.PRODUCER_TOKEN}
    patched: list[tuple[float, float, int, str]] = []
    plan = (server.base, spec["start_at"], quiet, gap, changes)
    operator = threading.Thread(target=lambda: patched.extend(change(*plan)))
    operator.start()
    out = srv.run_child("testing.loadgen", spec, seconds + 120)
    operator.join()
    # A record: [k, scheduled, sent, done, status, retry_after, acks], seconds from start_at.
    sent = [
        (r[1], r[3] - r[1] if r[3] is not None else math.inf, r[4], (r[6] or [[None]])[0][0]) for r in out["records"]
    ]
    if bad := [s for _, _, s, _ in sent if s != 202] + [s for _, _, s, _ in patched if s != 200]:
        raise RuntimeError(f"{len(bad)} requests were not accepted (statuses {sorted(set(bad))})")
    before = [lat for at, lat, _, _ in sent if 1.0 <= at < quiet]
    during = [(lat, t == table) for at, lat, _, t in sent for b, e, _, table in patched if b <= at <= e]
    during_ms = [lat for lat, _ in during]
    changed = [lat for lat, same in during if same]  # to the table being changed
    change_ms = [(e - b) * 1e3 for b, e, _, _ in patched]
    return {
        "p50_before_ms": percentile(before, 0.5) * 1e3,
        "p99_before_ms": percentile(before, 0.99) * 1e3,
        "p50_during_ms": percentile(during_ms, 0.5) * 1e3,
        "p99_during_ms": percentile(during_ms, 0.99) * 1e3,
        "requests_during": float(len(during)),
        "p99_changed_table_ms": percentile(changed, 0.99) * 1e3,
        "requests_per_second": len(sent) / seconds,
        "change_median_ms": statistics.median(change_ms),
        "change_max_ms": max(change_ms),
    }


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    run.meta.update(rate=args.rate, gap=args.gap, changes=args.changes, quiet=args.quiet)
    runs = []
    for k in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="schema-bench-") as tmp:
            settings = srv.base_settings(0, Path(tmp) / "data", policy="myopic", workers=WORKERS)
            settings = {key: v for key, v in settings.items() if key not in ("port", "data_dir", "spark")}
            settings["tables"] = [{"name": t, "schema": srv.SCHEMA} for t in TABLES]
            with serve(Path(tmp), settings, srv.OPERATOR_TOKEN) as (server, port, _):
                log(f"run {k + 1}/{args.repeats}: {args.rate:.0f} requests/s, {args.changes} changes")
                runs.append(run_once(server, port, args.rate, args.quiet, args.gap, args.changes))
    return {"runs": runs, "median": medians(runs)}


def render(results: dict[str, Any]) -> str:
    meta, median = results["meta"], results["median"]
    met = median["p99_during_ms"] <= TARGET_P99_MS
    values = {"meta": meta, "m": median, "target": TARGET_P99_MS, "verdict": "met" if met else "**missed**"}
    values["table"] = T.table("table", results["runs"], "rrrrrrrrr")
    return T("section", machine=machine_markdown(meta, "loader"), **values)


def options(parser: Any) -> None:
    parser.add_argument("--rate", type=float, default=200.0, help="requests a second (default 200)")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between schema changes (default 2)")
    parser.add_argument("--quiet", type=float, default=6.0, help="seconds before the first change (default 6)")


BENCHMARK = Benchmark(
    measure, render, repeats=(1, 3), counts={"changes": (4, 16, "schema changes a run")}, options=options
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
