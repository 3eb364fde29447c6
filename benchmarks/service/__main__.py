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
import dataclasses
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
CONNECTIONS = {1: 16, 10: 8, 100: 4}  # closed loop, by updates per request
OPEN_RATES = (250, 500, 1000)  # requests/s; 1000 is the target's
OPEN_CONNECTIONS = 32
TARGET_OPEN_RATE = 1000

FRESH_TABLES = 12
FRESH_PERIODS = (3.0, 6.0, 12.0)
FRESH_ROWS = 2

COMMIT_SIZES = (1_000, 10_000, 100_000)
COMMIT_ROWS_PER_UPDATE = 100

#: Per-run figures summarized over repeats (median, min, max), and those only by their median.
SPREAD = ("updates_per_second", "requests_per_second", "p50_ms", "p99_ms", "p999_ms")
MEDIAN = ("fsyncs_per_second", "records_per_fsync", "mean_fsync_ms", "python_cores", "jvm_cores", "generator_cores")


def _row(k: int) -> dict[str, Any]:
    return {"id": k, "v": k * 0.5, "s": f"payload-{k % 1000:04d}"}


def _rows(first: int, n: int) -> list[dict[str, Any]]:
    return [_row(first + j) for j in range(n)]


def requests_for(size: int, tables: list[str] = INTAKE_TABLES, rows: int = ROWS_PER_UPDATE, stride: int = 0) -> list:
    """The generator's requests: one update per POST /v1/tables/{t}/updates (``size`` 1, each table
    in turn, the i-th's rows from ``i * stride``, default ``rows``), or ``size`` per POST /v1/updates."""
    if size == 1:
        bodies = [
            (f"/v1/tables/{t}/updates", {"rows": _rows(i * (stride or rows), rows)}) for i, t in enumerate(tables)
        ]
    else:
        items = [{"table": tables[k % len(tables)], "rows": _rows(k * rows, rows)} for k in range(size)]
        bodies = [("/v1/updates", {"updates": items})]
    return [{"path": p, "updates": size, "body": json.dumps(b, separators=(",", ":"))} for p, b in bodies]


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


def _measure(svc: srv.Service, spec: dict[str, Any], drain: bool) -> dict[str, Any]:
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
        max_ms=max(latencies, default=math.nan),
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
    log(
        f"[intake{'' if drain else ', loading paused'}] {spec['requests'][0]['updates']}/request, {spec['mode']} loop "
        f"{spec.get('rate', '')}: {record['requests_per_second']:,.0f} requests/s, p50 {record['p50_ms']:.1f} ms, "
        f"p99 {record['p99_ms']:.1f} ms, p99.9 {record['p999_ms']:.1f} ms"
    )
    return record


def closed(svc: srv.Service, size: int, warmup: float, duration: float, repeats: int, drain: bool) -> dict:
    """Closed loop at saturation on one endpoint (``size`` updates per request), ``repeats`` runs."""
    requests = requests_for(size)
    spec = {"mode": "closed", "connections": CONNECTIONS[size], "warmup": warmup, "duration": duration}
    runs = [_measure(svc, spec | {"requests": requests}, drain) for _ in range(repeats)]
    out = {"connections": CONNECTIONS[size], "body_bytes": len(requests[0]["body"].encode()), "runs": runs}
    flat = [{**r, **r["wal"], **r["cpu"]} for r in runs]
    for k in SPREAD + MEDIAN:
        values = [r[k] for r in flat]
        out[f"median_{k}"] = median(values)
        if k in SPREAD:
            out |= {f"min_{k}": min(values), f"max_{k}": max(values)}
    out["errors"] = sum(sum(r["errors"].values()) for r in runs)
    return out if size == 1 else {"updates_per_request": size, **out}


def open_loop(svc: srv.Service, rate: int, warmup: float, duration: float, drain: float | None) -> dict[str, Any]:
    """The single-update endpoint at ``rate`` requests/s; ``drain``: seconds to wait for Delta after."""
    spec = {"mode": "open", "rate": rate, "connections": OPEN_CONNECTIONS, "warmup": warmup, "duration": duration}
    return _measure(svc, {**spec, "drain_seconds": drain or 60.0, "requests": requests_for(1)}, drain is not None)


def intake_runs(svc: srv.Service, timing: tuple[float, ...], repeats: int, rates: Any, drain: Any) -> dict:
    """Both endpoints at saturation, then the single one in open loop at each rate (``timing``: warm-up,
    closed-loop and open-loop seconds; ``drain``: seconds to wait for Delta after an open run, None:
    loading is paused and nothing is waited for)."""
    warmup, duration, open_duration = timing
    return {
        "multi": [closed(svc, size, warmup, duration, repeats, drain is not None) for size in MULTI_SIZES],
        "single_saturation": closed(svc, 1, warmup, duration, repeats, drain is not None),
        "single_open": [open_loop(svc, rate, warmup, open_duration, drain) for rate in rates],
    }


def pause(svc: srv.Service, tables: list[str], paused: bool) -> None:
    with svc.client() as http:
        for table in tables:
            http.post(f"/v1/admin/tables/{table}/{'pause' if paused else 'resume'}").raise_for_status()


def run_intake(quick: bool, repeats: int) -> dict[str, Any]:
    warmup, duration, open_duration = (1.0, 3.0, 5.0) if quick else (2.0, 8.0, 20.0)
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
        rates = (TARGET_OPEN_RATE,) if quick else OPEN_RATES
        out |= intake_runs(svc, (warmup, duration, open_duration), repeats, rates, 30.0 if quick else 60.0)
        # Diagnostic: the same intake, one run each, with every table paused (then resumed, the backlog loaded).
        pause(svc, INTAKE_TABLES, True)
        paused = out["paused"] = {"runs": 1}
        try:
            paused |= intake_runs(svc, (warmup, duration, duration), 1, (TARGET_OPEN_RATE,), None)
        finally:
            pause(svc, INTAKE_TABLES, False)
            with svc.client() as http:
                paused["backlog_loaded"], paused["backlog_seconds"] = srv.wait_loaded(http, timeout=300)
        log(f"[intake] tables resumed; paused backlog loaded in {paused['backlog_seconds']:.1f} s")
    return out


def _replay(svc: srv.Service, trace: Trace) -> dict[str, Any]:
    """Register the trace's tables, replay its updates on the wall clock, wait for Delta."""
    names = [spec.name for spec in trace.tables]
    with svc.client(timeout=60.0) as http:
        for spec in trace.tables:
            body = {"name": spec.name, "schema": srv.SCHEMA, "period_hint": spec.period}
            if (r := http.post("/v1/admin/tables", json=body)).status_code != 201:
                raise RuntimeError(f"registering {spec.name}: {r.status_code} {r.text}")
        registered = {t["name"]: t["current_upto"] for t in srv.table_status(http)}
        t0 = time.time() + 1.0
        lags: list[float] = []
        for k, (tid, release) in enumerate(zip(trace.update_tables, trace.update_releases, strict=True), 1):
            at = t0 + release
            time.sleep(max(0.0, at - time.time()))
            body = {"rows": _rows(k * FRESH_ROWS, FRESH_ROWS), "data_until": at}
            if (r := http.post(f"/v1/tables/{names[tid]}/updates", json=body)).status_code != 202:
                raise RuntimeError(f"update of {names[tid]} at {release:.3f}: {r.status_code} {r.text}")
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
    tables, metrics = replay["tables"], replay["metrics"]

    def total(key: str) -> float:
        return sum(tables[n][key] for n in names)

    def metric(name: str, labels: str = "") -> float:
        return sum(metrics.get(f'{name}{{{labels}table="{n}"}}', 0.0) for n in names)

    staleness, low = total("staleness_integral_at_last_load"), total("low_bound")
    count = metric("loader_batch_duration_seconds_count")
    return {
        "total_staleness": staleness,
        "low_bound": low,
        "staleness_ratio": staleness / low if low > 0 else math.nan,
        "max_stretch": max(tables[n]["max_stretch"] for n in names),
        "batches": metric("loader_batches_total", 'outcome="loaded",'),
        "mean_batch_seconds": metric("loader_batch_duration_seconds_sum") / count if count else math.nan,
        "alpha": {n: tables[n]["alpha"] for n in names},
        "overhead": {n: tables[n]["overhead_seconds"] for n in names},
        "failures": total("failures"),
    }


def simulated_trace(trace: Trace, replay: dict[str, Any], live: dict[str, Any]) -> Trace:
    """The trace as the live service saw it: releases from each table's registration time,
    processing model = the alpha/overhead the service measured for that table."""
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
    events = sorted(
        (replay["t0"] + release - replay["registered"][specs[tid].name], tid)
        for tid, release in zip(trace.update_tables, trace.update_releases, strict=True)
    )
    return Trace(tables=specs, update_tables=[tid for _, tid in events], update_releases=[r for r, _ in events])


#: What ``per_table`` keeps of each table's GET /v1/tables entry.
TABLE_FIELDS = "staleness_integral_at_last_load low_bound max_stretch alpha overhead_seconds last_sequence failures"
TABLE_FIELDS = (*TABLE_FIELDS.split(), "period_estimate")


def run_freshness(quick: bool, policies: list[str]) -> dict[str, Any]:
    horizon = 30.0 if quick else 120.0
    trace = generators.quasiperiodic(
        tables=FRESH_TABLES, periods=FRESH_PERIODS, horizon=horizon, utilization=0.5, workers=WORKERS, seed=SEED
    )
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
            log(f"[freshness] {policy}: server ready in {svc.ready_seconds:.1f} s; replaying {trace.n_updates} updates")
            replay = _replay(svc, trace)
        live = _live_figures(replay, names)
        sim_trace = simulated_trace(trace, replay, live)
        result = simulate(sim_trace, make_policy(policy), WORKERS, record_schedule=True)
        batch_seconds = [b.finish - b.start for b in result.schedule or []]
        sim = {k: getattr(result.freshness, k) for k in ("total_staleness", "low_bound", "staleness_ratio")}
        sim |= {"max_stretch": result.freshness.max_stretch, "batches": result.freshness.batches}
        sim["mean_batch_seconds"] = statistics.fmean(batch_seconds) if batch_seconds else math.nan
        # Sensitivity: the same releases, every table costed at the live mean batch duration.
        flat_cost = {"alpha": 0.0, "overhead": float(live["mean_batch_seconds"])}
        flat = dataclasses.replace(sim_trace, tables=[s.model_copy(update=flat_cost) for s in sim_trace.tables])
        flat_freshness = simulate(flat, make_policy(policy), WORKERS).freshness
        sim |= {"flat_cost_ratio": flat_freshness.staleness_ratio, "flat_cost_max_stretch": flat_freshness.max_stretch}
        registered = replay["registered"]
        record = {
            "policy": policy,
            "live": live,
            "sim": sim,
            "gap": live["staleness_ratio"] / sim["staleness_ratio"] - 1.0,
            "low_relative_difference": live["low_bound"] / sim["low_bound"] - 1.0,
            "registration_spread_seconds": max(registered.values()) - min(registered.values()),
            "ack_lag_ms": replay["ack_lag_ms"],
            "drain_after_last_send_seconds": replay["drain_after_last_send_seconds"],
            "per_table": {
                n: {"registered": registered[n], **{k: replay["tables"][n][k] for k in TABLE_FIELDS}} for n in names
            },
            "alpha_range": [min(live["alpha"].values()), max(live["alpha"].values())],
            "overhead_range": [min(live["overhead"].values()), max(live["overhead"].values())],
        }
        out["policies"].append(record)
        log(
            f"[freshness] {policy}: live ratio {live['staleness_ratio']:.4f}, simulated {sim['staleness_ratio']:.4f} "
            f"(gap {100 * record['gap']:+.1f}%), batches {live['batches']:.0f} vs {sim['batches']}"
        )
    return out


def run_commit(quick: bool, runs: int) -> dict[str, Any]:
    sizes = COMMIT_SIZES[:2] if quick else COMMIT_SIZES
    spec = {"master": srv.SPARK_MASTER, "sizes": list(sizes), "runs": runs, "rows_per_update": COMMIT_ROWS_PER_UPDATE}
    log(f"[commit] sizes {', '.join(f'{s:,}' for s in sizes)} rows, {runs} timed runs each (+1 warm-up)")
    out = srv.run_child("benchmarks.service.commit", spec, timeout=900)
    return out | {"master": srv.SPARK_MASTER, "runs": runs, "rows_per_update": COMMIT_ROWS_PER_UPDATE}


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
