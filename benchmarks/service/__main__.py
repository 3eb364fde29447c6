"""Benchmark of the live service: intake, end-to-end freshness against the simulator, commit cost.

    python -m benchmarks.service              # full run, ~11 min on 2 cores
    python -m benchmarks.service --quick      # smoke run, ~3 min
    python -m benchmarks.service --skip freshness,commit
    python -m benchmarks.service --rerender   # re-judge saved results, rewrite the report

The full run rewrites the ``service`` section of BENCHMARKS.md and
``benchmarks/results/service.json``; the quick run writes ``service-quick.json`` and
leaves BENCHMARKS.md alone (unless ``--markdown FILE``).

Three parts, each against real processes on this machine:

1. Intake. ``loader serve`` (durability fsync, 2 workers, local[2] Spark, delta-rs writer,
   8 tables) runs as a subprocess on loopback; a load generator process
   (``testing.loadgen``: raw HTTP/1.1 keep-alive on asyncio + uvloop) drives
   - POST /v1/updates, closed loop at saturation, 10 and 100 updates per request;
   - POST /v1/tables/{t}/updates, closed loop at saturation;
   - the same endpoint open loop at constant rates (1,000 requests/s and lower ones),
     latency from the scheduled send time (no coordinated omission).
   The server keeps loading what it accepts into Delta meanwhile (that is part of the
   cost); WAL group commit is read from /metrics, CPU per process from /proc.
2. Freshness. A seeded quasiperiodic trace is replayed in real time against a fresh
   server per policy (each update sent at t0 + release with data_until = t0 + release);
   the live staleness ratio (sum of integrals up to each table's last load / sum LOW) is
   compared with the simulator's on the same trace, the simulator fed the alpha/overhead
   the live service measured per table.
3. Commit path. ``DeltaRsSink.load`` against a bare ``df.write.parquet`` of the same
   DataFrame, per batch size (``benchmarks.service.commit``, its own process).

Every subprocess (servers and their JVMs, generators, the commit bench) is stopped on
the way out, errors included; data lives in temporary directories.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.service import report as report
from schedulers import generators
from schedulers.model import TableSpec, Trace
from schedulers.registry import POLICIES, make_policy
from schedulers.simulator import simulate
from testing import service_server as srv
from testing.report import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    median,
    source_fingerprint,
    write_json,
    write_section,
)

MODULE = "benchmarks.service"
SECTION = "service"
SEED = 7
WORKERS = 2

# -- intake ---------------------------------------------------------------------------
INTAKE_TABLES = [f"t{i:02d}" for i in range(8)]
ROWS_PER_UPDATE = 3
MULTI_SIZES = (10, 100)  # updates per request
MULTI_CONNECTIONS = {10: 8, 100: 4}
SINGLE_CONNECTIONS = 16
OPEN_RATES = (250, 500, 1000)  # requests/s; 1000 is the target's
OPEN_CONNECTIONS = 32
TARGET_MULTI_UPDATES = 5000.0
TARGET_OPEN_RATE = 1000
TARGET_P99_MS = 20.0

# -- freshness --------------------------------------------------------------------------
FRESH_TABLES = 12
FRESH_PERIODS = (3.0, 6.0, 12.0)
FRESH_ROWS = 2
TARGET_GAP = 0.15

# -- commit -----------------------------------------------------------------------------
COMMIT_SIZES = (1_000, 10_000, 100_000)
COMMIT_ROWS_PER_UPDATE = 100


# =====================================================================================
# helpers
# =====================================================================================
def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _row(k: int) -> dict[str, Any]:
    return {"id": k, "v": k * 0.5, "s": f"payload-{k % 1000:04d}"}


def multi_body(updates: int) -> str:
    items = [
        {
            "table": INTAKE_TABLES[k % len(INTAKE_TABLES)],
            "rows": [_row(k * ROWS_PER_UPDATE + j) for j in range(ROWS_PER_UPDATE)],
        }
        for k in range(updates)
    ]
    return json.dumps({"updates": items}, separators=(",", ":"))


def single_requests() -> list[dict[str, Any]]:
    return [
        {
            "path": f"/v1/tables/{table}/updates",
            "body": json.dumps(
                {"rows": [_row(i * ROWS_PER_UPDATE + j) for j in range(ROWS_PER_UPDATE)]},
                separators=(",", ":"),
            ),
            "updates": 1,
        }
        for i, table in enumerate(INTAKE_TABLES)
    ]


# =====================================================================================
# 1. Intake
# =====================================================================================
def _measure(svc: srv.Service, spec: dict[str, Any], *, drain: bool = True) -> dict[str, Any]:
    """One generator run, the server observed around it; then (``drain``) wait for Delta."""
    spec = dict(spec, host="127.0.0.1", port=svc.port, token=srv.PRODUCER_TOKEN, start_at=time.time() + 1.0)
    with svc.client() as http:
        m0, c0, t0 = srv.scrape(http), srv.group_cpu(svc.pid), time.time()
        timeout = spec["warmup"] + spec["duration"] + spec.get("drain_seconds", 60) + 120
        out = srv.run_child("testing.loadgen", spec, timeout)
        m1, c1, t1 = srv.scrape(http), srv.group_cpu(svc.pid), time.time()
        drained, drain_seconds = srv.wait_loaded(http, timeout=180) if drain else (None, None)
    window = out["window_seconds"]
    lat_ms = [x * 1e3 for x in out["latencies"]] + [math.inf] * out.get("unanswered", 0)
    record = {
        "mode": spec["mode"],
        "connections": spec["connections"],
        "window_seconds": window,
        "warmup_seconds": spec["warmup"],
        "requests_ok": out["ok"],
        "updates_acked": out["updates"],
        "requests_per_second": out["ok"] / window,
        "updates_per_second": out["updates"] / window,
        "p50_ms": percentile(lat_ms, 0.50),
        "p99_ms": percentile(lat_ms, 0.99),
        "p999_ms": percentile(lat_ms, 0.999),
        "max_ms": max(lat_ms) if lat_ms else float("nan"),
        "errors": out["errors"],
        "first_error": out["first_error"],
        "reconnects": out["reconnects"],
        "generator_loop": out["loop"],
        "generator_cores": out["cpu_seconds"] / (t1 - t0),
        "wal": srv.wal_delta(m0, m1, t1 - t0),
        "cpu": srv.cpu_delta(c0, c1, t1 - t0),
        "drained": drained,
        "drain_seconds": drain_seconds,
    }
    if spec["mode"] == "open":
        record["rate"] = spec["rate"]
        record["answered_in_window_per_second"] = out["done_in_window"] / window
        record["unanswered"] = out["unanswered"]
        service = [x * 1e3 for x in out["service"]]
        record["service_p50_ms"] = percentile(service, 0.5)
        record["service_p99_ms"] = percentile(service, 0.99)
    return record


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("updates_per_second", "requests_per_second", "p50_ms", "p99_ms", "p999_ms")
    out = {f"median_{k}": median([r[k] for r in runs]) for k in keys}
    out.update({f"min_{k}": min(r[k] for r in runs) for k in keys})
    out.update({f"max_{k}": max(r[k] for r in runs) for k in keys})
    out["median_fsyncs_per_second"] = median([r["wal"]["fsyncs_per_second"] for r in runs])
    out["median_records_per_fsync"] = median([r["wal"]["records_per_fsync"] for r in runs])
    out["median_mean_fsync_ms"] = median([r["wal"]["mean_fsync_ms"] for r in runs])
    out["median_python_cores"] = median([r["cpu"]["python_cores"] for r in runs])
    out["median_jvm_cores"] = median([r["cpu"]["jvm_cores"] for r in runs])
    out["median_generator_cores"] = median([r["generator_cores"] for r in runs])
    out["errors"] = sum(sum(r["errors"].values()) for r in runs)
    return out


def run_intake(quick: bool, repeats: int) -> dict[str, Any]:
    warmup, duration = (1.0, 3.0) if quick else (2.0, 8.0)
    open_duration = 5.0 if quick else 20.0
    rates = (TARGET_OPEN_RATE,) if quick else OPEN_RATES
    out: dict[str, Any] = {
        "tables": len(INTAKE_TABLES),
        "rows_per_update": ROWS_PER_UPDATE,
        "row_example": _row(1),
        "workers": WORKERS,
        "spark_master": srv.SPARK_MASTER,
        "repeats": repeats,
        "warmup_seconds": warmup,
        "window_seconds": duration,
        "open_window_seconds": open_duration,
        "multi": [],
        "single_open": [],
    }
    with srv.running_service(tables=INTAKE_TABLES, workers=WORKERS) as svc:
        out["server_ready_seconds"] = svc.ready_seconds
        log(f"[intake] server ready in {svc.ready_seconds:.1f} s (pid {svc.pid}, port {svc.port})")
        for size in MULTI_SIZES:
            body = multi_body(size)
            spec = {
                "mode": "closed",
                "connections": MULTI_CONNECTIONS[size],
                "warmup": warmup,
                "duration": duration,
                "requests": [{"path": "/v1/updates", "body": body, "updates": size}],
            }
            runs = []
            for k in range(repeats):
                runs.append(_measure(svc, spec))
                r = runs[-1]
                log(
                    f"[intake] multi {size}/request run {k + 1}: {r['updates_per_second']:,.0f} "
                    "updates/s, "
                    f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                    f"{r['wal']['records_per_fsync']:.1f} records/fsync, "
                    f"drained in {r['drain_seconds']:.1f} s"
                )
            out["multi"].append(
                {
                    "updates_per_request": size,
                    "body_bytes": len(body.encode()),
                    "connections": spec["connections"],
                    "runs": runs,
                    **_summary(runs),
                }
            )
        single = single_requests()
        spec = {
            "mode": "closed",
            "connections": SINGLE_CONNECTIONS,
            "warmup": warmup,
            "duration": duration,
            "requests": single,
        }
        runs = []
        for k in range(repeats):
            runs.append(_measure(svc, spec))
            r = runs[-1]
            log(
                f"[intake] single closed run {k + 1}: {r['requests_per_second']:,.0f} requests/s, "
                f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                f"{r['wal']['records_per_fsync']:.1f} records/fsync"
            )
        out["single_saturation"] = {
            "connections": SINGLE_CONNECTIONS,
            "body_bytes": len(single[0]["body"].encode()),
            "runs": runs,
            **_summary(runs),
        }
        for rate in rates:
            spec = {
                "mode": "open",
                "rate": rate,
                "connections": OPEN_CONNECTIONS,
                "warmup": warmup,
                "duration": open_duration,
                "drain_seconds": 30.0 if quick else 60.0,
                "requests": single,
            }
            r = _measure(svc, spec)
            out["single_open"].append(r)
            log(
                f"[intake] single open loop {rate} req/s: answered "
                f"{r['answered_in_window_per_second']:,.0f}/s in window, "
                f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, p99.9 {r['p999_ms']:.1f} ms, "
                f"unanswered {r['unanswered']}"
            )
        out["paused"] = run_paused(svc, warmup, duration, single)
    return out


def run_paused(svc: srv.Service, warmup: float, duration: float, single: list[dict[str, Any]]) -> dict[str, Any]:
    """Diagnostic: the same intake with every table paused, so no Spark load competes with it.

    One run per configuration; afterwards the tables are resumed and the backlog loaded.
    """
    with svc.client() as http:
        for table in INTAKE_TABLES:
            http.post(f"/v1/admin/tables/{table}/pause").raise_for_status()
    out: dict[str, Any] = {"multi": [], "runs": 1}
    try:
        for size in MULTI_SIZES:
            spec = {
                "mode": "closed",
                "connections": MULTI_CONNECTIONS[size],
                "warmup": warmup,
                "duration": duration,
                "requests": [{"path": "/v1/updates", "body": multi_body(size), "updates": size}],
            }
            r = _measure(svc, spec, drain=False)
            out["multi"].append(
                {
                    "updates_per_request": size,
                    "connections": spec["connections"],
                    "runs": [r],
                    **_summary([r]),
                }
            )
            log(
                f"[intake, loading paused] multi {size}/request: {r['updates_per_second']:,.0f} "
                f"updates/s, p99 {r['p99_ms']:.1f} ms"
            )
        spec = {
            "mode": "closed",
            "connections": SINGLE_CONNECTIONS,
            "warmup": warmup,
            "duration": duration,
            "requests": single,
        }
        r = _measure(svc, spec, drain=False)
        out["single_saturation"] = {"connections": SINGLE_CONNECTIONS, "runs": [r], **_summary([r])}
        log(
            f"[intake, loading paused] single closed: {r['requests_per_second']:,.0f} requests/s, "
            f"p99 {r['p99_ms']:.1f} ms"
        )
        spec = {
            "mode": "open",
            "rate": TARGET_OPEN_RATE,
            "connections": OPEN_CONNECTIONS,
            "warmup": warmup,
            "duration": duration,
            "drain_seconds": 60.0,
            "requests": single,
        }
        r = _measure(svc, spec, drain=False)
        out["single_open"] = [r]
        log(
            f"[intake, loading paused] single open loop {TARGET_OPEN_RATE} req/s: p50 "
            f"{r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
        )
    finally:
        with svc.client() as http:
            for table in INTAKE_TABLES:
                http.post(f"/v1/admin/tables/{table}/resume")
            out["backlog_loaded"], out["backlog_seconds"] = srv.wait_loaded(http, timeout=300)
    log(f"[intake] tables resumed; paused backlog loaded in {out['backlog_seconds']:.1f} s")
    return out


# =====================================================================================
# 2. Freshness: live service vs simulator
# =====================================================================================
def freshness_trace(horizon: float) -> Trace:
    return generators.quasiperiodic(
        tables=FRESH_TABLES,
        periods=FRESH_PERIODS,
        horizon=horizon,
        utilization=0.5,
        workers=WORKERS,
        seed=SEED,
    )


def _replay(svc: srv.Service, trace: Trace) -> dict[str, Any]:
    """Register the trace's tables, replay its updates on the wall clock, wait for Delta."""
    names = [spec.name for spec in trace.tables]
    with svc.client(timeout=60.0) as http:
        for spec in trace.tables:
            r = http.post(
                "/v1/admin/tables",
                json={"name": spec.name, "schema": srv.SCHEMA, "period_hint": spec.period},
            )
            if r.status_code != 201:
                raise RuntimeError(f"registering {spec.name}: {r.status_code} {r.text}")
        registered = {t["name"]: t["current_upto"] for t in srv.table_status(http)}
        t0 = time.time() + 1.0
        lags: list[float] = []
        k = 0
        for tid, release in zip(trace.update_tables, trace.update_releases, strict=True):
            name = names[tid]
            at = t0 + release
            wait = at - time.time()
            if wait > 0:
                time.sleep(wait)
            k += 1
            body = {"rows": [_row(k * FRESH_ROWS + j) for j in range(FRESH_ROWS)], "data_until": at}
            r = http.post(f"/v1/tables/{name}/updates", json=body)
            if r.status_code != 202:
                raise RuntimeError(f"update of {name} at {release:.3f}: {r.status_code} {r.text}")
            lags.append(time.time() - at)
        sent_all = time.time()
        drained, drain_seconds = srv.wait_loaded(http, timeout=180, poll=0.05)
        if not drained:
            raise RuntimeError(f"the service did not load every update within 180 s:\n{svc.proc.log_tail()}")
        tables = {t["name"]: t for t in srv.table_status(http)}
        metrics = srv.scrape(http)
    return {
        "t0": t0,
        "registered": registered,
        "tables": tables,
        "metrics": metrics,
        "ack_lag_ms": {
            "p50": 1e3 * percentile(lags, 0.5),
            "p99": 1e3 * percentile(lags, 0.99),
            "max": 1e3 * max(lags),
        },
        "drain_after_last_send_seconds": drain_seconds,
        "replay_seconds": sent_all - t0,
    }


def _live_figures(replay: dict[str, Any], names: list[str]) -> dict[str, Any]:
    tables = replay["tables"]
    metrics = replay["metrics"]
    total = sum(tables[n]["staleness_integral_at_last_load"] for n in names)
    low = sum(tables[n]["low_bound"] for n in names)
    batches = sum(metrics.get(f'loader_batches_total{{outcome="loaded",table="{n}"}}', 0.0) for n in names)
    duration_sum = sum(metrics.get(f'loader_batch_duration_seconds_sum{{table="{n}"}}', 0.0) for n in names)
    duration_count = sum(metrics.get(f'loader_batch_duration_seconds_count{{table="{n}"}}', 0.0) for n in names)
    return {
        "total_staleness": total,
        "low_bound": low,
        "staleness_ratio": total / low if low > 0 else float("nan"),
        "max_stretch": max(tables[n]["max_stretch"] for n in names),
        "batches": batches,
        "mean_batch_seconds": duration_sum / duration_count if duration_count else float("nan"),
        "alpha": {n: tables[n]["alpha"] for n in names},
        "overhead": {n: tables[n]["overhead_seconds"] for n in names},
        "failures": sum(tables[n]["failures"] for n in names),
    }


def simulated_trace(trace: Trace, replay: dict[str, Any], live: dict[str, Any]) -> Trace:
    """The trace as the live service saw it: releases from each table's registration time,
    processing model = the alpha/overhead the service measured for that table."""
    names = [spec.name for spec in trace.tables]
    specs = [
        TableSpec(
            name=spec.name,
            alpha=float(live["alpha"][spec.name]),
            overhead=float(live["overhead"][spec.name]),
            weight=spec.weight,
            period=spec.period,
        )
        for spec in trace.tables
    ]
    t0 = replay["t0"]
    events = sorted(
        (t0 + release - replay["registered"][names[tid]], tid)
        for tid, release in zip(trace.update_tables, trace.update_releases, strict=True)
    )
    return Trace(
        tables=specs,
        update_tables=[tid for _, tid in events],
        update_releases=[r for r, _ in events],
    )


def run_freshness(quick: bool, policies: list[str]) -> dict[str, Any]:
    horizon = 30.0 if quick else 120.0
    trace = freshness_trace(horizon)
    names = [spec.name for spec in trace.tables]
    out: dict[str, Any] = {
        "generator": "quasiperiodic",
        "tables": FRESH_TABLES,
        "periods": list(FRESH_PERIODS),
        "horizon": horizon,
        "seed": SEED,
        "updates": trace.n_updates,
        "rows_per_update": FRESH_ROWS,
        "workers": WORKERS,
        "policies": [],
    }
    for policy in policies:
        with srv.running_service(tables=[], policy=policy, workers=WORKERS) as svc:
            log(
                f"[freshness] {policy}: server ready in {svc.ready_seconds:.1f} s; replaying "
                f"{trace.n_updates} updates over {horizon:.0f} s"
            )
            replay = _replay(svc, trace)
        live = _live_figures(replay, names)
        sim_trace = simulated_trace(trace, replay, live)
        result = simulate(sim_trace, make_policy(policy), WORKERS, record_schedule=True)
        schedule = result.schedule or []
        sim = {
            "total_staleness": result.freshness.total_staleness,
            "low_bound": result.freshness.low_bound,
            "staleness_ratio": result.freshness.staleness_ratio,
            "max_stretch": result.freshness.max_stretch,
            "batches": result.freshness.batches,
            "mean_batch_seconds": statistics.fmean(b.finish - b.start for b in schedule) if schedule else float("nan"),
        }
        # Sensitivity: the same releases, every table costed at the live mean batch duration.
        flat = Trace(
            tables=[
                spec.model_copy(update={"alpha": 0.0, "overhead": float(live["mean_batch_seconds"])})
                for spec in sim_trace.tables
            ],
            update_tables=sim_trace.update_tables,
            update_releases=sim_trace.update_releases,
        )
        flat_result = simulate(flat, make_policy(policy), WORKERS)
        sim["flat_cost_ratio"] = flat_result.freshness.staleness_ratio
        sim["flat_cost_max_stretch"] = flat_result.freshness.max_stretch
        reg = list(replay["registered"].values())
        record = {
            "policy": policy,
            "live": live,
            "sim": sim,
            "gap": live["staleness_ratio"] / sim["staleness_ratio"] - 1.0,
            "low_relative_difference": live["low_bound"] / sim["low_bound"] - 1.0,
            "registration_spread_seconds": max(reg) - min(reg),
            "ack_lag_ms": replay["ack_lag_ms"],
            "drain_after_last_send_seconds": replay["drain_after_last_send_seconds"],
            "per_table": {
                n: {
                    "registered": replay["registered"][n],
                    **{
                        k: replay["tables"][n][k]
                        for k in (
                            "staleness_integral_at_last_load",
                            "low_bound",
                            "max_stretch",
                            "alpha",
                            "overhead_seconds",
                            "last_sequence",
                            "failures",
                            "period_estimate",
                        )
                    },
                }
                for n in names
            },
            "alpha_range": [min(live["alpha"].values()), max(live["alpha"].values())],
            "overhead_range": [min(live["overhead"].values()), max(live["overhead"].values())],
        }
        out["policies"].append(record)
        log(
            f"[freshness] {policy}: live ratio {live['staleness_ratio']:.4f}, simulated "
            f"{sim['staleness_ratio']:.4f} "
            f"(gap {100 * record['gap']:+.1f}%), batches {live['batches']:.0f} vs "
            f"{sim['batches']}, "
            f"mean batch {live['mean_batch_seconds']:.3f} s vs {sim['mean_batch_seconds']:.3f} s"
        )
    return out


# =====================================================================================
# 3. Commit path
# =====================================================================================
def run_commit(quick: bool, runs: int) -> dict[str, Any]:
    sizes = COMMIT_SIZES[:2] if quick else COMMIT_SIZES
    spec = {
        "master": srv.SPARK_MASTER,
        "sizes": list(sizes),
        "runs": runs,
        "rows_per_update": COMMIT_ROWS_PER_UPDATE,
    }
    log(f"[commit] sizes {', '.join(f'{s:,}' for s in sizes)} rows, {runs} timed runs each (+1 warm-up)")
    out = srv.run_child("benchmarks.service.commit", spec, timeout=900)
    out.update({"master": srv.SPARK_MASTER, "runs": runs, "rows_per_update": COMMIT_ROWS_PER_UPDATE})
    for size in out["sizes"]:
        log(
            f"[commit] {size['rows']:,} rows: delta-rs path {size['delta_median']:.3f} s, bare "
            f"Parquet {size['bare_median']:.3f} s, "
            f"difference {1e3 * size['overhead_median']:+.0f} ms"
        )
    return out


# =====================================================================================
# main
# =====================================================================================
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: short windows, 1 repeat, myopic only; "
        "writes results/service-quick.json and leaves BENCHMARKS.md alone unless --markdown",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="closed-loop intake runs per figure (default 3; quick 1)",
    )
    parser.add_argument(
        "--commit-runs",
        type=int,
        default=None,
        help="timed runs per batch size and path (default 7; quick 2)",
    )
    parser.add_argument(
        "--policies",
        default=None,
        help="freshness policies, comma-separated (default myopic,max-benefit; quick myopic)",
    )
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: intake, freshness, commit")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help=f"file whose '{SECTION}' section to rewrite (default {BENCHMARKS_MD.name}; quick: none)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="raw results (default benchmarks/results/service.json; quick: service-quick.json)",
    )
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="measure nothing: re-judge the saved results (--json) and rewrite the report",
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.commit_runs is None:
        args.commit_runs = 2 if args.quick else 7
    if args.repeats < 1 or args.commit_runs < 1:
        parser.error("--repeats and --commit-runs must be >= 1")
    if args.policies is None:
        args.policies = "myopic" if args.quick else "myopic,max-benefit"
    args.policy_list = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in args.policy_list if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policies: {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
    args.skip_parts = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.skip_parts - {"intake", "freshness", "commit"}:
        parser.error(f"--skip takes intake, freshness, commit; got {args.skip}")
    if args.json is None:
        args.json = RESULTS_DIR / ("service-quick.json" if args.quick else "service.json")
    if args.markdown is None and not args.quick:
        args.markdown = BENCHMARKS_MD
    return args


def finish(results: dict[str, Any], args: argparse.Namespace) -> None:
    results["targets"] = report.evaluate_targets(results)
    results["notes"] = report.build_notes(results)
    write_json(args.json, results)
    log(f"raw results: {args.json}")
    if args.markdown is not None:
        write_section(SECTION, report.render_markdown(results), args.markdown)
        log(f"wrote section '{SECTION}' of {args.markdown}")
    report.print_console(results)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        results = json.loads(args.json.read_text(encoding="utf-8"))
        finish(results, args)
        return 0
    started = time.perf_counter()
    machine = machine_info("loader")
    machine["api_sha256"] = source_fingerprint("api")
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "repeats": args.repeats,
        "commit_runs": args.commit_runs,
        "policies": args.policy_list,
        "skipped": sorted(args.skip_parts),
        "machine": machine,
    }
    results: dict[str, Any] = {"meta": meta}
    log(
        f"service benchmark: {'quick' if args.quick else 'full'}, repeats {args.repeats}, policies "
        f"{', '.join(args.policy_list)}"
    )
    with LoadMonitor() as monitor:
        if "intake" not in args.skip_parts:
            results["intake"] = run_intake(args.quick, args.repeats)
        if "freshness" not in args.skip_parts:
            results["freshness"] = run_freshness(args.quick, args.policy_list)
        if "commit" not in args.skip_parts:
            results["commit"] = run_commit(args.quick, args.commit_runs)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
    finish(results, args)
    log(f"done in {fmt_duration(meta['run_seconds'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
