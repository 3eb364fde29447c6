"""Acknowledgements beside loads (issue 15): does a producer's acknowledgement depend on how
much the warehouse is loading? One run, side by side, on this machine:

    python -m benchmarks.isolation            # full run, ~25 min on 2 cores
    python -m benchmarks.isolation --quick    # smoke run, ~8 min; writes isolation-quick.json only

1. The ceiling: a bare FastAPI endpoint (``bare_app.py``) that parses the same small JSON
   body and answers 202, driven closed-loop at saturation by the same generator.
2. ``loader serve`` (fsync, 2 workers, local[2], delta-rs, 8 tables) in each Spark mode:
   ``connect`` (the default: loads in worker processes over Spark Connect) and ``classic``
   (the driver and the loads in the service process). In each: intake with every table
   paused (no load runs), then with loading on at full tilt (the generator keeps all 8
   tables busy): closed-loop saturation and open-loop p50/p99/p99.9 at 250, 500, 1,000
   and 1,500 requests/s, for the single-update and the 10- and 100-update endpoints.
   Latency counts from the scheduled send time (no coordinated omission). CPU per
   process: the service, its load workers, Spark (JVM and its Python helpers).
3. The price of the boundary: one 100-row load in process (classic), over Connect from
   the same process, and through a worker process (``load_cost.py``).
4. Freshness at 2 workers in the default (connect) mode: ``benchmarks.service``'s live
   replay against the simulator (myopic), whose gap must stay within 15% as before.
   ``--only freshness`` runs this part alone and adds it to the saved results.

The generator is ``testing.loadgen`` (raw HTTP/1.1 keep-alive, asyncio + uvloop), as in
``benchmarks.service``. Results: ``benchmarks/results/isolation.json`` and the
``isolation`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

from benchmarks.service.__main__ import _row, percentile
from testing import service_server as srv
from testing.report import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    command_line,
    log,
    machine_info,
    median,
    source_fingerprint,
    write_json,
    write_section,
)
from testing.server_process import free_port

MODULE = "benchmarks.isolation"
SECTION = "isolation"
TABLES = [f"t{i:02d}" for i in range(8)]
ROWS_PER_UPDATE = 3
WORKERS = 2
MODES = ("connect", "classic")
RATES = (250, 500, 1000, 1500)
ENDPOINTS = (1, 10, 100)  # updates per request; 1 = POST /v1/tables/{t}/updates
CONNECTIONS = {1: 16, 10: 8, 100: 4}
OPEN_CONNECTIONS = {1: 32, 10: 32, 100: 32}
TARGET_P99_MS = 20.0
TARGET_RATE = 1000
TARGET_CEILING_SHARE = 0.6
TARGET_MULTI_UPDATES = 10_000.0
TARGET_GAP = 0.15


def requests_for(size: int) -> list[dict[str, Any]]:
    """The generator's request mix for an endpoint: one update per request spread over the
    tables, or ``size`` updates per request (each table in turn)."""
    if size == 1:
        return [
            {
                "path": f"/v1/tables/{table}/updates",
                "body": json.dumps({"rows": [_row(i * 10 + j) for j in range(ROWS_PER_UPDATE)]}, separators=(",", ":")),
                "updates": 1,
            }
            for i, table in enumerate(TABLES)
        ]
    items = [
        {"table": TABLES[k % len(TABLES)], "rows": [_row(k * ROWS_PER_UPDATE + j) for j in range(ROWS_PER_UPDATE)]}
        for k in range(size)
    ]
    return [{"path": "/v1/updates", "body": json.dumps({"updates": items}, separators=(",", ":")), "updates": size}]


class Target:
    """A server under the generator: its port, its CPU by process kind, and (loader) its metrics."""

    def __init__(self, port: int, pid: int, service: srv.Service | None) -> None:
        self.port, self.pid, self.service = port, pid, service

    def cpu(self) -> dict[str, float]:
        return srv.tree_cpu(self.pid)


def measure(target: Target, spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec, host="127.0.0.1", port=target.port, token=srv.PRODUCER_TOKEN, start_at=time.time() + 1.0)
    c0, t0 = target.cpu(), time.time()
    out = srv.run_child("testing.loadgen", spec, spec["warmup"] + spec["duration"] + 240)
    c1, t1 = target.cpu(), time.time()
    window = out["window_seconds"]
    latencies = [x * 1e3 for x in out["latencies"]] + [math.inf] * out.get("unanswered", 0)
    record: dict[str, Any] = {
        "mode": spec["mode"],
        "connections": spec["connections"],
        "window_seconds": window,
        "requests_per_second": out["ok"] / window,
        "updates_per_second": out["updates"] / window,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "p999_ms": percentile(latencies, 0.999),
        "errors": out["errors"],
        "generator_cores": out["cpu_seconds"] / (t1 - t0),
        "cores": {k: (c1[k] - c0[k]) / (t1 - t0) for k in c0},
    }
    if spec["mode"] == "open":
        record["rate"] = spec["rate"]
        record["answered_per_second"] = out["done_in_window"] / window
        record["unanswered"] = out["unanswered"]
    return record


def closed(target: Target, size: int, warmup: float, duration: float, repeats: int) -> dict[str, Any]:
    spec = {
        "mode": "closed",
        "connections": CONNECTIONS[size],
        "warmup": warmup,
        "duration": duration,
        "requests": requests_for(size),
    }
    runs = [measure(target, spec) for _ in range(repeats)]
    return {
        "updates_per_request": size,
        "runs": runs,
        "median_requests_per_second": median([r["requests_per_second"] for r in runs]),
        "median_updates_per_second": median([r["updates_per_second"] for r in runs]),
        "median_p99_ms": median([r["p99_ms"] for r in runs]),
        "median_cores": {k: median([r["cores"][k] for r in runs]) for k in runs[0]["cores"]},
    }


def open_loop(target: Target, size: int, rate: int, warmup: float, duration: float) -> dict[str, Any]:
    spec = {
        "mode": "open",
        "rate": rate,
        "connections": OPEN_CONNECTIONS[size],
        "warmup": warmup,
        "duration": duration,
        "drain_seconds": 30.0,
        "requests": requests_for(size),
    }
    return dict(measure(target, spec), updates_per_request=size)


def _pause(service: srv.Service, paused: bool) -> None:
    with service.client() as http:
        for table in TABLES:
            http.post(f"/v1/admin/tables/{table}/{'pause' if paused else 'resume'}").raise_for_status()


def _drain(service: srv.Service) -> float:
    with service.client(timeout=60) as http:
        loaded, seconds = srv.wait_loaded(http, timeout=600)
    if not loaded:
        raise RuntimeError(f"acknowledged updates not loaded within 600 s:\n{service.proc.log_tail()}")
    return seconds


def run_mode(mode: str, quick: bool, repeats: int) -> dict[str, Any]:
    warmup, duration = (1.0, 3.0) if quick else (2.0, 8.0)
    rates = (TARGET_RATE,) if quick else RATES
    out: dict[str, Any] = {"mode": mode, "paused": {}, "closed": [], "open": []}
    extra = {"spark": {"master": srv.SPARK_MASTER, "mode": mode}}
    with srv.running_service(tables=TABLES, workers=WORKERS, extra=extra) as service:
        target = Target(service.port, service.pid, service)
        out["ready_seconds"] = service.ready_seconds
        log(f"[{mode}] server ready in {service.ready_seconds:.1f} s")
        _pause(service, True)
        out["paused"]["closed"] = closed(target, 1, warmup, duration, repeats)
        out["paused"]["open"] = open_loop(target, 1, TARGET_RATE, warmup, duration)
        p = out["paused"]
        log(
            f"[{mode}] loading paused: single {p['closed']['median_requests_per_second']:,.0f} req/s; "
            f"open {TARGET_RATE}/s p99 {p['open']['p99_ms']:.1f} ms"
        )
        _pause(service, False)
        out["paused"]["backlog_seconds"] = _drain(service)
        for size in ENDPOINTS:
            result = closed(target, size, warmup, duration, repeats)
            out["closed"].append(result)
            log(
                f"[{mode}] loading on, {size}/request closed: {result['median_requests_per_second']:,.0f} req/s, "
                f"{result['median_updates_per_second']:,.0f} updates/s, p99 {result['median_p99_ms']:.1f} ms, "
                f"cores {result['median_cores']}"
            )
            result["drain_seconds"] = _drain(service)
            for rate in rates:
                r = open_loop(target, size, rate, warmup, duration)
                out["open"].append(r)
                log(
                    f"[{mode}] loading on, {size}/request open {rate}/s: answered {r['answered_per_second']:,.0f}/s, "
                    f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, p99.9 {r['p999_ms']:.1f} ms, "
                    f"unanswered {r['unanswered']}, cores {r['cores']}"
                )
                r["drain_seconds"] = _drain(service)
    return out


@contextlib.contextmanager
def bare_server() -> Iterator[Target]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "benchmarks.isolation.bare_app:app", "--port", str(port)]
        + ["--log-level", "warning"],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.post(f"http://127.0.0.1:{port}/v1/tables/t/updates", json={"rows": []}).status_code == 202:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the bare FastAPI server did not start")
            time.sleep(0.2)
        yield Target(port, proc.pid, None)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def run(quick: bool, repeats: int) -> dict[str, Any]:
    warmup, duration = (1.0, 3.0) if quick else (2.0, 8.0)
    started = time.time()
    out: dict[str, Any] = {
        "machine": machine_info("loader"),
        "source": source_fingerprint("loader"),
        "quick": quick,
        "repeats": repeats,
        "tables": len(TABLES),
        "rows_per_update": ROWS_PER_UPDATE,
        "workers": WORKERS,
        "spark_master": srv.SPARK_MASTER,
    }
    with bare_server() as bare:
        out["bare"] = closed(bare, 1, warmup, duration, repeats)
    log(f"[bare] ceiling {out['bare']['median_requests_per_second']:,.0f} req/s")
    out["modes"] = {mode: run_mode(mode, quick, repeats) for mode in MODES}
    spec = {"master": srv.SPARK_MASTER, "rows": 100, "runs": 10 if quick else 40, "warmup": 3}
    out["load_cost"] = srv.run_child("benchmarks.isolation.load_cost", spec, 900)
    log(f"[load cost] medians {out['load_cost']['median_seconds']}")
    out["freshness"] = run_freshness(quick)
    out["intake_cost"] = run_intake_cost(quick)
    out["seconds"] = time.time() - started
    return out


def run_intake_cost(quick: bool) -> dict[str, Any]:
    spec = {"requests": 4000 if quick else 8000, "rounds": 3 if quick else 5}
    result = srv.run_child("benchmarks.isolation.intake_cost", spec, 900)
    log(f"[intake cost] event-loop µs per request {result['median_cpu_us']}")
    return result


def run_freshness(quick: bool) -> dict[str, Any]:
    from benchmarks.service.__main__ import run_freshness as replay_against_simulator

    result = replay_against_simulator(quick, ["myopic"])
    record = result["policies"][0]
    log(f"[freshness] myopic, connect mode: gap to the simulator {100 * record['gap']:+.1f}%")
    return {"horizon": result["horizon"], "policy": "myopic", "gap": record["gap"], "result": result}


# -- report -----------------------------------------------------------------------------
def _ms(value: float | str) -> str:
    """Milliseconds; "∞" for a request never answered (saved results spell it "inf")."""
    value = float(value)
    return "∞" if math.isinf(value) else f"{value:,.1f}"


def judge(out: dict[str, Any]) -> dict[str, Any]:
    connect = out["modes"]["connect"]
    single_open = next(r for r in connect["open"] if r["updates_per_request"] == 1 and r["rate"] == TARGET_RATE)
    single_closed = next(c for c in connect["closed"] if c["updates_per_request"] == 1)
    multi = next(c for c in connect["closed"] if c["updates_per_request"] == 100)
    ceiling = out["bare"]["median_requests_per_second"]
    return {
        "p99_ms": single_open["p99_ms"],
        "p99_met": single_open["p99_ms"] <= TARGET_P99_MS and single_open["unanswered"] == 0,
        "ceiling_share": single_closed["median_requests_per_second"] / ceiling,
        "ceiling_met": single_closed["median_requests_per_second"] >= TARGET_CEILING_SHARE * ceiling,
        "multi_updates_per_second": multi["median_updates_per_second"],
        "multi_met": multi["median_updates_per_second"] >= TARGET_MULTI_UPDATES,
    }


def render(out: dict[str, Any], argv: list[str] | None) -> str:
    verdict = judge(out)
    m = out["machine"]
    lines = [
        "## Acknowledgements beside loads: loads in worker processes (issue 15)",
        "",
        f"`{out.get('command') or command_line(MODULE, argv)}`, {m['nproc']} cores ({m['cpu_model']}), {m['python']}, "
        f"commit {m['git_commit']}, source {out['source']}; {out['seconds'] / 60:.0f} min. "
        f"Saturation figures are medians of {out['repeats']} runs of 8 s after 2 s of warm-up; "
        "open-loop runs are single 8-s runs with latency "
        "from the scheduled send time, unanswered requests counted as infinite. 8 tables, 3 small rows per "
        "update, 2 workers, local[2], fsync. `connect`: loads in worker processes over a local Spark Connect "
        "server (the default); `classic`: the Spark driver and the loads in the service process.",
        "",
        "| target | measured | met |",
        "| --- | --- | --- |",
        f"| single-update p99 ≤ {TARGET_P99_MS:.0f} ms at {TARGET_RATE:,} req/s open loop, loading on | "
        f"{_ms(verdict['p99_ms'])} ms | {'yes' if verdict['p99_met'] else 'NO'} |",
        f"| single-update saturation, loading on ≥ {TARGET_CEILING_SHARE:.0%} of the bare FastAPI ceiling | "
        f"{verdict['ceiling_share']:.0%} of {out['bare']['median_requests_per_second']:,.0f} req/s | "
        f"{'yes' if verdict['ceiling_met'] else 'NO'} |",
        f"| 100-update requests, loading on ≥ {TARGET_MULTI_UPDATES:,.0f} durable updates/s | "
        f"{verdict['multi_updates_per_second']:,.0f} | {'yes' if verdict['multi_met'] else 'NO'} |",
    ]
    if "freshness" in out:
        gap = out["freshness"]["gap"]
        lines.append(
            f"| freshness at 2 workers: live staleness ratio within {TARGET_GAP:.0%} of the simulator's "
            f"(myopic, `benchmarks.service`'s {out['freshness']['horizon']:.0f}-s replay, connect mode) | "
            f"{gap:+.1%} | {'yes' if abs(gap) <= TARGET_GAP else 'NO'} |"
        )
    lines += [
        "",
        "Closed-loop saturation (median requests/s and updates/s, median p99 ms; CPU cores by process):",
        "",
        "| mode | loading | updates/request | requests/s | updates/s | p99 ms | service | workers | Spark |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    b = out["bare"]
    lines.append(
        f"| bare FastAPI | — | 1 | {b['median_requests_per_second']:,.0f} | — | {_ms(b['median_p99_ms'])} | "
        f"{b['median_cores']['service']:.2f} | — | — |"
    )
    for mode, result in out["modes"].items():
        rows = [("paused", result["paused"]["closed"])] + [("on", c) for c in result["closed"]]
        for loading, c in rows:
            cores = c["median_cores"]
            lines.append(
                f"| {mode} | {loading} | {c['updates_per_request']} | {c['median_requests_per_second']:,.0f} | "
                f"{c['median_updates_per_second']:,.0f} | {_ms(c['median_p99_ms'])} | {cores['service']:.2f} | "
                f"{cores['workers']:.2f} | {cores['spark']:.2f} |"
            )
    lines += [
        "",
        "Open loop, loading on (paused: the single endpoint at 1,000/s with every table paused):",
        "",
        "| mode | updates/request | offered req/s | answered req/s | p50 ms | p99 ms | p99.9 ms | unanswered "
        "| service | workers | Spark |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, result in out["modes"].items():
        p = result["paused"]["open"]
        runs = [(f"{p['rate']:,} (paused)", 1, p)] + [
            (f"{r['rate']:,}", r["updates_per_request"], r) for r in result["open"]
        ]
        for offered, size, r in runs:
            cores = r["cores"]
            lines.append(
                f"| {mode} | {size} | {offered} | {r['answered_per_second']:,.0f} | {_ms(r['p50_ms'])} | "
                f"{_ms(r['p99_ms'])} | {_ms(r['p999_ms'])} | {r['unanswered']} | {cores['service']:.2f} | "
                f"{cores['workers']:.2f} | {cores['spark']:.2f} |"
            )
    bare = out["bare"]
    paused = out["modes"]["connect"]["paused"]["closed"]
    per_bare = 1e3 * bare["median_cores"]["service"] / bare["median_requests_per_second"]
    per_loader = 1e3 * paused["median_cores"]["service"] / paused["median_requests_per_second"]
    lines += [
        "",
        f"Where the ceiling goes: the service process spends {per_loader:.2f} ms of CPU per single-update "
        f"request with no load running, the bare endpoint {per_bare:.2f} ms. Intake is one event loop (one "
        "core at most, less the WAL writer's thread), so its own cost per request bounds saturation; with "
        "loading on, the Spark JVM and the workers (under SCHED_IDLE) take the other core, and the "
        "service's CPU per request rises (the dispatcher's handoff writes, caches shared with the JVM).",
    ]
    ic = out.get("intake_cost")
    if ic:
        ic_med = ic["median_cpu_us"]
        lines += [
            "",
            "The event loop's CPU per single-update request, in process (`benchmarks/isolation/intake_cost.py`: "
            f"each app driven as ASGI by {ic['concurrency']} coroutines, no HTTP server or generator; median of "
            f"{ic['rounds']} interleaved rounds of {ic['requests']:,} requests):",
            "",
            "| app | µs per request | ratio to the service as it runs |",
            "| --- | --- | --- |",
        ]
        for name, label in (
            ("bare", "bare FastAPI endpoint (parse the body, answer)"),
            ("routes", "service, submit routes through FastAPI's middleware and routing"),
            ("fast", "service as it runs: submit routes ahead of them (`api/fast_intake.py`)"),
            ("fast, no group delay", "the same with `wal.group_delay_seconds = 0`"),
        ):
            lines.append(f"| {label} | {ic_med[name]:.0f} | {ic_med[name] / ic_med['fast']:.2f} |")
    cost = out["load_cost"]
    med = cost["median_seconds"]
    lines += [
        "",
        f"The price of the process boundary: one {cost['rows']}-row load, median of {cost['runs']} "
        "(`benchmarks/isolation/load_cost.py`, the three ways interleaved):",
        "",
        "| way | median s | ratio to classic |",
        "| --- | --- | --- |",
    ]
    for name, label in (
        ("classic", "in process (py4j)"),
        ("connect", "Spark Connect client in the same process"),
        ("process", "worker process over Spark Connect (handoff file + socket)"),
    ):
        lines.append(f"| {label} | {med[name]:.3f} | {med[name] / med['classic']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows, one open-loop rate")
    parser.add_argument("--repeats", type=int, default=None, help="saturation runs per configuration (default 3)")
    parser.add_argument("--rerender", action="store_true", help="rewrite the report from the saved results")
    parser.add_argument(
        "--only", choices=["freshness", "intake-cost"], help="run one part alone, into the saved results"
    )
    args = parser.parse_args(argv)
    path = RESULTS_DIR / ("isolation-quick.json" if args.quick else "isolation.json")
    if args.rerender:
        out = json.loads(path.read_text(encoding="utf-8"))
    elif args.only is not None:
        out = json.loads(path.read_text(encoding="utf-8"))
        if args.only == "freshness":
            out["freshness"] = run_freshness(args.quick)
        else:
            out["intake_cost"] = run_intake_cost(args.quick)
        write_json(path, out)
    else:
        out = run(args.quick, args.repeats or (1 if args.quick else 3))
        out["command"] = command_line(MODULE, argv)  # (a --rerender names the run, not itself)
        write_json(path, out)
    text = render(out, argv)
    print(text)
    if not args.quick:
        write_section(SECTION, text, BENCHMARKS_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
