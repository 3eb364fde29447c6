"""Intake at the speed of the machine (issue 36): accepted MB/s of event bodies against the
machine's two ceilings for the same bytes, measured in the same run, with loading on.

The workload: ``loader serve`` (the default embedded writer, 2 load workers) with 4 tables of
a realistic event (9 typed columns: ids, a session, a kind, a URL, an amount, a quantity, a
flag and a timestamp; about 170 bytes of JSON a row). ``testing.loadgen`` posts bodies of
``--rows`` rows as fast as ``--connections`` closed-loop clients can, every table in turn,
for ``--seconds`` after a warm-up. Each form is a run of its own: NDJSON bodies, and Arrow
IPC streams when the service takes them. After the last answer, the time until every
acknowledged update is loaded (the service's own account), and an outside reader's count of
the Delta tables' rows against the acknowledged rows.

The ceilings, in the same process just before each run, on the same bytes: pyarrow's JSON
reader with the table's explicit schema on one core (``use_threads=False``), and sequential
writes to the service's disk with an fdatasync per MiB. Targets: NDJSON at least 50% of
the lower ceiling, every row visible within 2 s of the last acknowledgement; Arrow IPC
bodies at least 50% of the disk ceiling.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from benchmarks.harness.service import generate
from testing import service_server as srv
from testing.report import log, machine_markdown

TARGET = 0.5
VISIBLE_SECONDS = 2.0
T = Template("intake-speed")
TABLES = [f"events_{k}" for k in range(4)]
EVENT = {
    "columns": [
        {"name": "event_id", "type": "int64", "nullable": False},
        {"name": "user_id", "type": "int64"},
        {"name": "session", "type": "string"},
        {"name": "kind", "type": "string"},
        {"name": "url", "type": "string"},
        {"name": "amount", "type": "float64"},
        {"name": "quantity", "type": "int32"},
        {"name": "returning", "type": "boolean"},
        {"name": "at", "type": "timestamp"},
    ]
}
FORMS = {"ndjson": "application/x-ndjson", "arrow": "application/vnd.apache.arrow.stream"}


def event_rows(rng: random.Random, first: int, n: int) -> list[dict[str, Any]]:
    kinds = ("view", "click", "cart", "order")
    return [
        {
            "event_id": first + k,
            "user_id": rng.randrange(10**9),
            "session": f"{rng.getrandbits(64):016x}",
            "kind": rng.choice(kinds),
            "url": f"/shop/c{rng.randrange(100)}/p{rng.randrange(10**5)}",
            "amount": round(rng.uniform(0, 500), 2),
            "quantity": rng.randrange(1, 10),
            "returning": rng.random() < 0.3,
            "at": f"2026-11-28T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
            f".{rng.randrange(10**6):06d}Z",
        }
        for k in range(n)
    ]


def ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows)


def arrow_stream(rows: list[dict[str, Any]]) -> bytes:
    from loader.core.schema import TableSchema
    from loader.intake.rows import rows_to_arrow

    table = rows_to_arrow(rows, TableSchema.model_validate(EVENT), "events")
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def parse_ceiling(body: bytes, seconds: float = 3.0) -> float:
    """MB/s of pyarrow's JSON reader on one core, the table's schema given."""
    from loader.core.schema import TableSchema

    options = pa_json.ParseOptions(explicit_schema=TableSchema.model_validate(EVENT).arrow())
    single = pa_json.ReadOptions(use_threads=False)
    took, n = 0.0, 0
    while took < seconds:
        began = time.perf_counter()
        pa_json.read_json(io.BytesIO(body), read_options=single, parse_options=options)
        took += time.perf_counter() - began
        n += 1
    return len(body) * n / took / 1e6


def disk_ceiling(directory: Path, total: int = 256 << 20, chunk: int = 1 << 20) -> float:
    """MB/s of sequential writes with an fdatasync per MiB, where the service keeps its WAL."""
    block = os.urandom(chunk)
    path = directory / "disk-ceiling.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        began = time.perf_counter()
        for _ in range(total // chunk):
            os.write(fd, block)
            os.fdatasync(fd)
        took = time.perf_counter() - began
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return total / took / 1e6


def delta_rows(warehouse: Path) -> int:
    from deltalake import DeltaTable

    total = 0
    for table in TABLES:
        if (warehouse / table / "_delta_log").exists():
            total += DeltaTable(str(warehouse / table)).to_pyarrow_dataset().count_rows()
    return total


def service_run(args: Any, form: str, seed: int, loading: bool = True, acceptors: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    per_body = args.arrow_rows if form == "arrow" else args.rows
    rows = [event_rows(rng, k * per_body, per_body) for k in range(len(TABLES))]
    bodies = [ndjson(r) if form == "ndjson" else arrow_stream(r) for r in rows]
    json_bytes = statistics.mean(len(ndjson(r)) for r in rows)
    requests = [
        {
            "path": f"/v1/tables/{t}/updates",
            "updates": 1,
            "body_base64": base64.b64encode(b).decode(),
            "content_type": FORMS[form],
        }
        for t, b in zip(TABLES, bodies)
    ]
    extra = {"tables": [{"name": t, "schema": EVENT} for t in TABLES], "spill": {"memory_budget_bytes": 1 << 30}}
    extra["intake"] = {"acceptors": acceptors}
    with srv.running_service(tables=[], workers=2, extra=extra) as service:
        data = service.workdir / "data"
        if not loading:
            with service.client() as http:
                for table in TABLES:
                    http.post(f"/v1/admin/tables/{table}/pause").raise_for_status()
        ceilings = {"parse_mb_s": parse_ceiling(ndjson(rows[0])), "disk_mb_s": disk_ceiling(data)}
        spec = {
            "mode": "closed",
            "connections": args.connections,
            "duration": args.seconds,
            "warmup": 2.0,
            "requests": requests,
        }
        _, record, before, after, seconds, _ = generate(
            service.port, spec, args.seconds + 120, lambda: srv.tree_cpu(service.pid)
        )
        ended = time.monotonic()
        with service.client() as http:
            if not loading:
                for table in TABLES:
                    http.post(f"/v1/admin/tables/{table}/resume").raise_for_status()
            loaded, _ = srv.wait_loaded(http, timeout=120, poll=0.02)
            visible = time.monotonic() - ended
            acknowledged = sum(t["last_sequence"] for t in srv.table_status(http)) * per_body
        stored = delta_rows(data / "warehouse")
    per_second = record["requests_per_second"]
    out = {
        "acceptors": acceptors,
        "body_bytes": statistics.mean(len(b) for b in bodies),
        "json_bytes": json_bytes,
        "requests_s": per_second,
        "rows_s": per_second * per_body,
        "rows_per_body": per_body,
        "mb_s": per_second * statistics.mean(len(b) for b in bodies) / 1e6,
        "json_mb_s": per_second * json_bytes / 1e6,
        "p99_ms": record["p99_ms"],
        "errors": sum(record["errors"].values()) if isinstance(record["errors"], dict) else record["errors"],
        "visible_s": visible if loaded else float("inf"),
        "acknowledged_rows": acknowledged,
        "delta_rows": stored,
        **srv.cpu_delta(before, after, seconds),
        **ceilings,
    }
    out["ceiling_mb_s"] = min(out["parse_mb_s"], out["disk_mb_s"]) if form == "ndjson" else out["disk_mb_s"]
    out["share"] = out["json_mb_s" if form == "ndjson" else "mb_s"] / out["ceiling_mb_s"]
    log(
        f"[{form}, {acceptors} acceptors] {out['rows_s']:,.0f} rows/s, {out['mb_s']:.1f} MB/s, "
        f"{out['share']:.0%} of the ceiling, "
        f"visible {out['visible_s']:.2f} s after; Delta rows {stored:,} of {acknowledged:,} acknowledged"
    )
    return out


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    run.meta.update(
        rows=args.rows, arrow_rows=args.arrow_rows, seconds=args.seconds, connections=args.connections, forms=args.forms
    )
    run.meta.update(acceptors=args.acceptors)
    by_form: dict[str, list[dict[str, Any]]] = {}
    counts = [int(n) for n in str(args.acceptors).split(",")]
    for k in range(args.repeats):
        for form in args.forms.split(","):
            for n in counts:  # interleaved: the ways compared side by side in one run
                way = form if n == 0 else f"{form}, {n} acceptors"
                log(f"run {k + 1}/{args.repeats}: {way}")
                by_form.setdefault(way, []).append(service_run(args, form, args.seed + k, acceptors=n))
    return {"runs": by_form, "median": {form: medians(runs) for form, runs in by_form.items()}}


def render(results: dict[str, Any]) -> str:
    meta, m = results["meta"], results["median"]
    runs = results["runs"]
    rows = [dict(r, form=way.split(",")[0], run=k + 1) for way in runs for k, r in enumerate(runs[way])]
    verdicts = {}
    for way, figures in m.items():  # "ndjson", "arrow", "ndjson, 2 acceptors", ...
        if way.startswith("ndjson"):
            met = figures["share"] >= TARGET and figures["visible_s"] <= VISIBLE_SECONDS
        else:
            met = figures["share"] >= TARGET
        verdicts[way] = ("met" if met else "**missed**", figures)
    values = {"meta": meta, "target": TARGET * 100, "visible": VISIBLE_SECONDS, "verdicts": _verdicts(verdicts)}
    values["cause"] = T("cause", n=m["ndjson"], a=m["arrow"]) if {"ndjson", "arrow"} <= set(m) else ""
    values["table"] = T.table("table", rows, "lrrrrrrrrrrrrrr")
    return T("section", machine=machine_markdown(meta, "loader"), **values)


def _verdicts(verdicts: dict[str, tuple[str, dict[str, Any]]]) -> str:
    lines = []
    for form, (verdict, m) in verdicts.items():
        ndjson = form.startswith("ndjson")
        lines.append(
            f"- {form}: {m['share']:.0%} of the {'lower ceiling' if ndjson else 'disk ceiling'} "
            f"({m['json_mb_s' if ndjson else 'mb_s']:.1f} of {m['ceiling_mb_s']:.0f} MB/s), every row "
            f"visible {m['visible_s']:.2f} s after the last acknowledgement: {verdict}"
        )
    return "\n".join(lines)


def options(parser: Any) -> None:
    parser.add_argument("--rows", type=int, default=1000, help="rows a body (default 1,000)")
    parser.add_argument("--arrow-rows", type=int, default=10_000, help="rows an Arrow body (default 10,000)")
    parser.add_argument("--connections", type=int, default=4, help="closed-loop clients (default 4)")
    parser.add_argument("--forms", default="ndjson,arrow", help="body forms, comma-separated: ndjson, arrow")
    parser.add_argument(
        "--acceptors",
        default="0,2",
        help="intake.acceptors settings to compare, comma-separated (default 0,2; 0 = HTTP in the service's process)",
    )


BENCHMARK = Benchmark(
    measure,
    render,
    repeats=(1, 3),
    seed=36,
    counts={"seconds": (5.0, 20.0, "measured seconds a run")},
    options=options,
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
