"""Nested events against flat rows of the same bytes: intake (rows/s, MB/s) and a load's time.

The nested event: three levels (``user.address.geo``), a list of six line items (each
with a list of tags), and a map of eight attributes, about 1 KB of JSON. The flat row:
string, integer and float columns filled to the same JSON bytes. Both tables are declared
in Delta's schema JSON, the nested one with structs, arrays and a map (docs/tables.md).

Intake: an in-process service (``testing.service_harness``, the real intake, WAL and its
fsync; the tables paused, so no load competes for the core) takes ``--requests`` requests of
``--rows`` rows each, nested and flat alternating, timed per request from the POST to the 202.
MB/s is the JSON body's bytes over that time. A load: the rows of one request, as intake
made them, through the embedded writer's Spark sink (the product's ``DeltaRsSink``: Spark
writes the Parquet, deltalake commits), into a new table each time, nested and flat
alternating. Medians of the repeats; target: nested rows at least 50% of flat rows' MB/s.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from benchmarks.harness.spark import one_update, session, timed
from testing.report import log, machine_markdown

TARGET_RATIO = 0.5
T = Template("nested-intake")


def _field(name: str, kind: Any, nullable: bool = True) -> dict[str, Any]:
    return {"name": name, "type": kind, "nullable": nullable, "metadata": {}}


def _struct(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


NESTED_COLUMNS = [
    {"name": "event_id", "type": "long", "nullable": False},
    {"name": "kind", "type": "string"},
    {"name": "referrer", "type": "string"},
    {
        "name": "user",
        "type": _struct(
            _field("id", "long"),
            _field("name", "string"),
            _field(
                "address",
                _struct(
                    _field("street", "string"),
                    _field("city", "string"),
                    _field("zip", "string"),
                    _field("geo", _struct(_field("lat", "double"), _field("lon", "double"))),
                ),
            ),
        ),
    },
    {
        "name": "items",
        "type": {
            "type": "array",
            "elementType": _struct(
                _field("sku", "string"),
                _field("qty", "long"),
                _field("price", "double"),
                _field("tags", {"type": "array", "elementType": "string", "containsNull": True}),
            ),
            "containsNull": True,
        },
    },
    {
        "name": "attributes",
        "type": {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True},
    },
]


def nested_row(rng: random.Random, k: int) -> dict[str, Any]:
    return {
        "event_id": k,
        "kind": rng.choice(["view", "cart", "order", "refund"]),
        "referrer": f"https://shop.example.com/catalogue/section-{rng.randrange(100)}/item-{rng.randrange(10**6)}",
        "user": {
            "id": rng.randrange(10**9),
            "name": f"customer-{rng.randrange(10**6):06d}",
            "address": {
                "street": f"{rng.randrange(1, 999)} Long Street Name",
                "city": rng.choice(["Berlin", "Lisbon", "Toronto", "Osaka"]),
                "zip": f"{rng.randrange(10**5):05d}",
                "geo": {"lat": round(rng.uniform(-90, 90), 6), "lon": round(rng.uniform(-180, 180), 6)},
            },
        },
        "items": [
            {
                "sku": f"SKU-{rng.randrange(10**8):08d}",
                "qty": rng.randrange(1, 9),
                "price": round(rng.uniform(1, 500), 2),
                "tags": [rng.choice(["new", "sale", "gift", "bulk"]) for _ in range(2)],
            }
            for _ in range(6)
        ],
        "attributes": {f"attr_{a}": f"value-{rng.randrange(10**6):06d}" for a in range(8)},
    }


def flat_columns(width: int) -> list[dict[str, Any]]:
    """``width`` columns cycling string, long and double (the first, the id, not null)."""
    kinds = ("string", "long", "double")
    return [{"name": "event_id", "type": "long", "nullable": False}] + [
        {"name": f"c{k:02d}", "type": kinds[k % 3]} for k in range(width - 1)
    ]


def flat_row(rng: random.Random, k: int, columns: list[dict[str, Any]], pad: int) -> dict[str, Any]:
    row: dict[str, Any] = {"event_id": k}
    for c in columns[1:]:
        kind = c["type"]
        if kind == "string":
            row[c["name"]] = f"text-{rng.randrange(10**6):06d}" + "x" * pad
        elif kind == "long":
            row[c["name"]] = rng.randrange(10**9)
        else:
            row[c["name"]] = round(rng.uniform(-1e6, 1e6), 4)
    return row


def bodies(rows: int, seed: int) -> dict[str, tuple[list[dict[str, Any]], bytes]]:
    """The nested and the flat rows of one request, the flat ones padded to the nested bytes."""
    rng = random.Random(seed)
    nested = [nested_row(rng, k) for k in range(rows)]
    nested_body = json.dumps({"rows": nested}, separators=(",", ":")).encode()
    columns = flat_columns(36)
    flat: list[dict[str, Any]] = []
    for pad in range(0, 200):
        rng = random.Random(seed)
        flat = [flat_row(rng, k, columns, pad) for k in range(rows)]
        if len(json.dumps({"rows": flat}, separators=(",", ":"))) >= len(nested_body):
            break
    return {"nested": (nested, nested_body), "flat": (flat, json.dumps({"rows": flat}, separators=(",", ":")).encode())}


TABLES = {"nested": NESTED_COLUMNS, "flat": flat_columns(36)}


def intake_run(rows: int, requests: int, seed: int) -> dict[str, float]:
    from testing.service_harness import OPERATOR, Harness

    made = bodies(rows, seed)
    seconds = {kind: [] for kind in made}
    with tempfile.TemporaryDirectory(prefix="nested-bench-") as tmp:
        declared = [{"name": kind, "schema": {"columns": columns}} for kind, columns in TABLES.items()]
        spill = {"memory_budget_bytes": 1 << 30, "disk_budget_bytes": 1 << 34}
        with Harness(Path(tmp) / "data", tables=declared, spill=spill) as h:
            for kind in made:
                assert h.post(f"/v1/admin/tables/{kind}/pause", token=OPERATOR).status_code == 200
            for k in range(requests + 2):  # the first two of each kind warm up
                for kind, (_, body) in made.items():
                    began = time.perf_counter()
                    headers = {"Content-Type": "application/json"}
                    answer = h.post(f"/v1/tables/{kind}/updates", content=body, headers=headers)
                    took = time.perf_counter() - began
                    if answer.status_code != 202:
                        raise RuntimeError(f"{kind}: {answer.status_code} {answer.text[:300]}")
                    if k >= 2:
                        seconds[kind].append(took)
    out: dict[str, float] = {}
    for kind, (_, body) in made.items():
        per_request = statistics.median(seconds[kind])
        out[f"{kind}_bytes_per_row"] = len(body) / rows
        out[f"{kind}_rows_per_s"] = rows / per_request
        out[f"{kind}_mb_per_s"] = len(body) / per_request / 1e6
    out["mb_ratio"] = out["nested_mb_per_s"] / out["flat_mb_per_s"]
    out["rows_ratio"] = out["nested_rows_per_s"] / out["flat_rows_per_s"]
    return out


def load_run(spark: Any, rows: int, loads: int, seed: int) -> dict[str, float]:
    from loader.core.schema import TableSchema
    from loader.intake.rows import rows_to_arrow
    from loader.loading.sinks.delta_rs import DeltaRsSink

    made = bodies(rows, seed)
    schemas = {kind: TableSchema.model_validate({"columns": columns}) for kind, columns in TABLES.items()}
    data = {kind: rows_to_arrow(made[kind][0], schemas[kind], kind) for kind in made}
    seconds: dict[str, list[float]] = {kind: [] for kind in made}
    with tempfile.TemporaryDirectory(prefix="nested-load-") as warehouse:
        sink = DeltaRsSink(Path(warehouse), spark)
        for k in range(loads + 1):  # the first of each kind warms up
            for kind in made:
                table = f"{kind}_{k}"
                sink.ensure_table(table, schemas[kind])  # (untimed: a registration's part)
                batch = one_update(table, 1, data[kind])
                _, took = timed(sink.load, batch, schemas[kind])
                if k >= 1:
                    seconds[kind].append(took)
    out = {f"{kind}_load_ms": statistics.median(s) * 1e3 for kind, s in seconds.items()}
    out["load_ratio"] = out["nested_load_ms"] / out["flat_load_ms"]
    return out


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    run.meta.update(rows=args.rows, requests=args.requests, loads=args.loads)
    runs = []
    with session() as spark:
        for k in range(args.repeats):
            log(f"run {k + 1}/{args.repeats}: intake of {args.requests} requests of {args.rows} rows each, per kind")
            figures = intake_run(args.rows, args.requests, seed=args.seed + k)
            log(f"run {k + 1}/{args.repeats}: {args.loads} loads per kind")
            figures |= load_run(spark, args.rows, args.loads, seed=args.seed + k)
            runs.append(figures)
    return {"runs": runs, "median": medians(runs)}


def render(results: dict[str, Any]) -> str:
    meta, m = results["meta"], results["median"]
    met = m["mb_ratio"] >= TARGET_RATIO
    values = {"meta": meta, "m": m, "target": TARGET_RATIO * 100, "verdict": "met" if met else "**missed**"}
    values["table"] = T.table("table", results["runs"], "rrrrrrrrr")
    return T("section", machine=machine_markdown(meta, "loader"), **values)


def options(parser: Any) -> None:
    parser.add_argument("--rows", type=int, default=500, help="rows a request (default 500, about 0.5 MB)")


BENCHMARK = Benchmark(
    measure,
    render,
    repeats=(1, 3),
    seed=35,
    counts={
        "requests": (5, 20, "timed requests of each kind a run"),
        "loads": (2, 5, "timed loads of each kind a run"),
    },
    options=options,
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
