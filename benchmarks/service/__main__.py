"""Benchmark of the live service: intake, end-to-end freshness against the simulator, commit cost.

    python -m benchmarks.service              # full run, ~11 min on 2 cores
    python -m benchmarks.service --quick      # smoke run, ~3 min
    python -m benchmarks.service --skip freshness,commit
    python -m benchmarks.service --rerender   # re-judge saved results, rewrite the report

Parts, each against real processes on this machine (templates/service.md says how): intake
(``loader serve`` driven by ``testing.loadgen``, closed and open loop), freshness (a trace
replayed live against the simulator's account of it), commit (``benchmarks.service.commit``).
Every subprocess is stopped on the way out, errors included; data lives in temporary directories.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.service import report
from schedulers import generators
from schedulers.model import TableSpec, Trace
from schedulers.registry import POLICIES, make_policy
from schedulers.simulator import simulate
from testing import service_server as srv
from testing.observed_staleness import percentile
from testing.report import log, median

SEED = 7
WORKERS = 2

INTAKE_TABLES = [f"t{i:02d}" for i in range(8)]
ROWS_PER_UPDATE = 3
MULTI_SIZES = (10, 100)  # updates per request
MULTI_CONNECTIONS = {10: 8, 100: 4}
SINGLE_CONNECTIONS = 16
OPEN_RATES = (250, 500, 1000)  # requests/s; 1000 is the target's
OPEN_CONNECTIONS = 32
TARGET_OPEN_RATE = 1000

FRESH_TABLES = 12
FRESH_PERIODS = (3.0, 6.0, 12.0)
FRESH_ROWS = 2

COMMIT_SIZES = (1_000, 10_000, 100_000)
COMMIT_ROWS_PER_UPDATE = 100


def _row(k: int) -> dict[str, Any]:
    return {"id": k, "v": k * 0.5, "s": f"payload-{k % 1000:04d}"}


def requests_for(size: int, tables: list[str] = INTAKE_TABLES, rows: int = ROWS_PER_UPDATE, stride: int = 0) -> list:
    """The generator's requests: one update per POST /v1/tables/{t}/updates (``size`` 1, each table
    in turn, the i-th's rows from ``i * stride``, default ``rows``), or ``size`` per POST /v1/updates."""

    def body(payload: dict[str, Any]) -> str:
        return json.dumps(payload, separators=(",", ":"))

    if size == 1:
        return [
            {
                "path": f"/v1/tables/{t}/updates",
                "updates": 1,
                "body": body({"rows": [_row(i * (stride or rows) + j) for j in range(rows)]}),
            }
            for i, t in enumerate(tables)
        ]
    items = [{"table": tables[k % len(tables)], "rows": [_row(k * rows + j) for j in range(rows)]} for k in range(size)]
    return [{"path": "/v1/updates", "body": body({"updates": items}), "updates": size}]


def generate(port: int, spec: dict[str, Any], timeout: float, observe: Callable[[], Any]) -> tuple[Any, ...]:
    """One ``testing.loadgen`` run at ``port`` with ``observe()`` just before and after it: its output,
    the figures every caller keeps, the two observations, the seconds between them, the latencies (ms)."""
    spec = dict(spec, host="127.0.0.1", port=port, token=srv.PRODUCER_TOKEN, start_at=time.time() + 1.0)
    before, t0 = observe(), time.time()
    out = srv.run_child("testing.loadgen", spec, timeout)
    after, seconds = observe(), time.time() - t0
    window = out["window_seconds"]
    latencies = [x * 1e3 for x in out["latencies"]] + [math.inf] * out.get("unanswered", 0)
    record = {
        "mode": spec["mode"],
        "connections": spec["connections"],
        "window_seconds": window,
        "requests_per_second": out["ok"] / window,
        "updates_per_second": out["updates"] / window,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "p999_ms": percentile(latencies, 0.999),
        "errors": out["errors"],
        "generator_cores": out["cpu_seconds"] / seconds,
    }
    if spec["mode"] == "open":
        record.update(rate=spec["rate"], unanswered=out["unanswered"])
    return out, record, before, after, seconds, latencies


def _measure(svc: srv.Service, spec: dict[str, Any], *, drain: bool = True) -> dict[str, Any]:
    """One generator run, the server observed around it; then (``drain``) wait for Delta."""
    with svc.client() as http:
        timeout = spec["warmup"] + spec["duration"] + spec.get("drain_seconds", 60) + 120
        observe = lambda: (srv.scrape(http), srv.group_cpu(svc.pid))  # noqa: E731
        out, record, (m0, c0), (m1, c1), seconds, latencies = generate(svc.port, spec, timeout, observe)
        drained, drain_seconds = srv.wait_loaded(http, timeout=180) if drain else (None, None)
    record.update(
        warmup_seconds=spec["warmup"],
        requests_ok=out["ok"],
        updates_acked=out["updates"],
        max_ms=max(latencies) if latencies else float("nan"),
        first_error=out["first_error"],
        reconnects=out["reconnects"],
        generator_loop=out["loop"],
        wal=srv.wal_delta(m0, m1, seconds),
        cpu=srv.cpu_delta(c0, c1, seconds),
        drained=drained,
        drain_seconds=drain_seconds,
    )
    if spec["mode"] == "open":
        service = [x * 1e3 for x in out["service"]]
        record["answered_in_window_per_second"] = out["done_in_window"] / out["window_seconds"]
        record.update(service_p50_ms=percentile(service, 0.5), service_p99_ms=percentile(service, 0.99))
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


def closed(svc: srv.Service, size: int, warmup: float, duration: float, repeats: int, drain: bool = True) -> dict:
    """Closed loop at saturation on one endpoint (``size`` updates per request), ``repeats`` runs."""
    requests = requests_for(size)
    connections = SINGLE_CONNECTIONS if size == 1 else MULTI_CONNECTIONS[size]
    spec = {"mode": "closed", "connections": connections, "warmup": warmup, "duration": duration, "requests": requests}
    runs = []
    for k in range(repeats):
        runs.append(r := _measure(svc, spec, drain=drain))
        log(
            f"[intake{'' if drain else ', loading paused'}] {size}/request, run {k + 1}: "
            f"{r['updates_per_second']:,.0f} updates/s, {r['requests_per_second']:,.0f} requests/s, p50 "
            f"{r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, {r['wal']['records_per_fsync']:.1f} records/fsync"
        )
    out = {"connections": connections, "body_bytes": len(requests[0]["body"].encode()), "runs": runs, **_summary(runs)}
    return out if size == 1 else {"updates_per_request": size, **out}


def open_loop(svc: srv.Service, rate: int, warmup: float, duration: float, drain: float | None) -> dict[str, Any]:
    """The single-update endpoint at ``rate`` requests/s; ``drain``: seconds to wait for Delta after."""
    spec = {"mode": "open", "rate": rate, "connections": OPEN_CONNECTIONS, "warmup": warmup, "duration": duration}
    r = _measure(svc, {**spec, "drain_seconds": drain or 60.0, "requests": requests_for(1)}, drain=drain is not None)
    log(
        f"[intake{'' if drain else ', loading paused'}] open loop {rate} req/s: answered "
        f"{r['answered_in_window_per_second']:,.0f}/s in window, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
        f"p99.9 {r['p999_ms']:.1f} ms, unanswered {r['unanswered']}"
    )
    return r


def run_intake(quick: bool, repeats: int) -> dict[str, Any]:
    warmup, duration = (1.0, 3.0) if quick else (2.0, 8.0)
    open_duration = 5.0 if quick else 20.0
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
    }
    with srv.running_service(tables=INTAKE_TABLES, workers=WORKERS) as svc:
        out["server_ready_seconds"] = svc.ready_seconds
        log(f"[intake] server ready in {svc.ready_seconds:.1f} s (pid {svc.pid}, port {svc.port})")
        out["multi"] = [closed(svc, size, warmup, duration, repeats) for size in MULTI_SIZES]
        out["single_saturation"] = closed(svc, 1, warmup, duration, repeats)
        rates = (TARGET_OPEN_RATE,) if quick else OPEN_RATES
        out["single_open"] = [open_loop(svc, rate, warmup, open_duration, 30.0 if quick else 60.0) for rate in rates]
        out["paused"] = run_paused(svc, warmup, duration)
    return out


def run_paused(svc: srv.Service, warmup: float, duration: float) -> dict[str, Any]:
    """Diagnostic: the same intake, one run each, with every table paused (then resumed and the backlog loaded)."""
    with svc.client() as http:
        for table in INTAKE_TABLES:
            http.post(f"/v1/admin/tables/{table}/pause").raise_for_status()
    out: dict[str, Any] = {"runs": 1}
    try:
        out["multi"] = [closed(svc, size, warmup, duration, 1, drain=False) for size in MULTI_SIZES]
        out["single_saturation"] = closed(svc, 1, warmup, duration, 1, drain=False)
        out["single_open"] = [open_loop(svc, TARGET_OPEN_RATE, warmup, duration, None)]
    finally:
        with svc.client() as http:
            for table in INTAKE_TABLES:
                http.post(f"/v1/admin/tables/{table}/resume")
            out["backlog_loaded"], out["backlog_seconds"] = srv.wait_loaded(http, timeout=300)
    log(f"[intake] tables resumed; paused backlog loaded in {out['backlog_seconds']:.1f} s")
    return out


def freshness_trace(horizon: float) -> Trace:
    return generators.quasiperiodic(
        tables=FRESH_TABLES, periods=FRESH_PERIODS, horizon=horizon, utilization=0.5, workers=WORKERS, seed=SEED
    )


def _replay(svc: srv.Service, trace: Trace) -> dict[str, Any]:
    """Register the trace's tables, replay its updates on the wall clock, wait for Delta."""
    names = [spec.name for spec in trace.tables]
    with svc.client(timeout=60.0) as http:
        for spec in trace.tables:
            r = http.post(
                "/v1/admin/tables", json={"name": spec.name, "schema": srv.SCHEMA, "period_hint": spec.period}
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
        "ack_lag_ms": {"p50": 1e3 * percentile(lags, 0.5), "p99": 1e3 * percentile(lags, 0.99), "max": 1e3 * max(lags)},
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
    return Trace(tables=specs, update_tables=[tid for _, tid in events], update_releases=[r for r, _ in events])


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
            f"[freshness] {policy}: live ratio {live['staleness_ratio']:.4f}, simulated {sim['staleness_ratio']:.4f} "
            f"(gap {100 * record['gap']:+.1f}%), batches {live['batches']:.0f} vs {sim['batches']}, mean batch "
            f"{live['mean_batch_seconds']:.3f} s vs {sim['mean_batch_seconds']:.3f} s"
        )
    return out


def run_commit(quick: bool, runs: int) -> dict[str, Any]:
    sizes = COMMIT_SIZES[:2] if quick else COMMIT_SIZES
    spec = {"master": srv.SPARK_MASTER, "sizes": list(sizes), "runs": runs, "rows_per_update": COMMIT_ROWS_PER_UPDATE}
    log(f"[commit] sizes {', '.join(f'{s:,}' for s in sizes)} rows, {runs} timed runs each (+1 warm-up)")
    out = srv.run_child("benchmarks.service.commit", spec, timeout=900)
    out.update({"master": srv.SPARK_MASTER, "runs": runs, "rows_per_update": COMMIT_ROWS_PER_UPDATE})
    for size in out["sizes"]:
        log(
            f"[commit] {size['rows']:,} rows: delta-rs path {size['delta_median']:.3f} s, bare Parquet "
            f"{size['bare_median']:.3f} s, difference {1e3 * size['overhead_median']:+.0f} ms"
        )
    return out


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policies", help="freshness policies, comma-separated (default myopic,max-benefit; quick myopic)"
    )


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    policies = [p.strip() for p in (args.policies or ("myopic" if args.quick else "myopic,max-benefit")).split(",")]
    if unknown := [p for p in policies if p not in POLICIES]:
        raise SystemExit(f"unknown policies: {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
    run.meta.update(commit_runs=args.commit_runs, policies=policies)
    return run.parts(
        intake=lambda: run_intake(args.quick, args.repeats),
        freshness=lambda: run_freshness(args.quick, policies),
        commit=lambda: run_commit(args.quick, args.commit_runs),
    )


def judge(results: dict[str, Any]) -> None:
    results["targets"] = report.evaluate_targets(results)
    results["notes"] = report.build_notes(results)


BENCHMARK = Benchmark(
    "benchmarks.service",
    "service",
    __doc__,
    measure,
    report.render_markdown,
    fingerprints=("api",),
    quick_saves=True,
    repeats=(1, 3),
    parts=("intake", "freshness", "commit"),
    counts={"commit_runs": (2, 7, "timed runs per batch size and path")},
    options=options,
    finish=judge,
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
