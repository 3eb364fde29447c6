"""Acknowledgements beside loads (issue 15): does a producer's acknowledgement depend on how
much the warehouse is loading? A full run takes ~25 min on 2 cores; ``--quick`` ~8 min (writes
isolation-quick.json only).

Parts: the ceiling (``bare_app.py`` at saturation); ``loader serve`` in each Spark mode, tables
paused and loading on, closed and open loop on both endpoints; the price of the process boundary
(``load_cost.py``); the event loop's CPU per request (``intake_cost.py``); freshness in connect
mode (``benchmarks.service``'s replay, myopic).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import service as serving
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from benchmarks.service.__main__ import run_freshness as replay_against_simulator
from testing import service_server as srv
from testing.report import log
from testing.server_process import free_port

MODES = ("connect", "classic")
RATES = (250, 500, 1000, 1500)
ENDPOINTS = (1, 10, 100)  # updates per request; 1 = POST /v1/tables/{t}/updates
TARGET_P99_MS = 20.0
TARGET_RATE = 1000
TARGET_CEILING_SHARE = 0.6
TARGET_MULTI_UPDATES = 10_000.0
TARGET_GAP = 0.15


def drive(target: tuple[int, int], size: int, spec: dict[str, Any]) -> dict[str, Any]:
    """One generator run of ``size`` updates per request against ``target``: a server's port, and the
    process tree whose CPU is measured by kind."""
    port, pid = target
    connections = serving.OPEN_CONNECTIONS if spec["mode"] == "open" else serving.CONNECTIONS[size]
    spec |= {"connections": connections, "requests": serving.requests_for(size, stride=10)}
    timeout = spec["warmup"] + spec["duration"] + 240
    _, record, c0, c1, seconds, _ = serving.generate(port, spec, timeout, lambda: srv.tree_cpu(pid))
    record["cores"] = {k: (c1[k] - c0[k]) / seconds for k in c0}
    if spec["mode"] == "open":
        record["answered_per_second"] = record.pop("answered_in_window_per_second")
    return record | {"updates_per_request": size}


def closed(target: tuple[int, int], size: int, timing: tuple[float, float], repeats: int) -> dict[str, Any]:
    runs = [drive(target, size, {"mode": "closed", "warmup": timing[0], "duration": timing[1]}) for _ in range(repeats)]
    figures = medians(runs, ("requests_per_second", "updates_per_second", "p99_ms"))
    out = {"updates_per_request": size, "runs": runs, **{f"median_{k}": v for k, v in figures.items()}}
    return out | {"median_cores": medians(r["cores"] for r in runs)}


def open_loop(target: tuple[int, int], size: int, rate: int, timing: tuple[float, float]) -> dict[str, Any]:
    spec = {"mode": "open", "rate": rate, "warmup": timing[0], "duration": timing[1], "drain_seconds": 30.0}
    return drive(target, size, spec)


def drain(service: srv.Service) -> float:
    with service.client(timeout=60) as http:
        loaded, seconds = srv.wait_loaded(http, timeout=600)
    if not loaded:
        raise RuntimeError(f"acknowledged updates not loaded within 600 s:\n{service.proc.log_tail()}")
    return seconds


def run_mode(mode: str, timing: tuple[float, float], quick: bool, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode, "paused": {}, "closed": [], "open": []}
    extra = {"spark": {"master": srv.SPARK_MASTER, "mode": mode}}
    with srv.running_service(tables=serving.INTAKE_TABLES, workers=serving.WORKERS, extra=extra) as service:
        target = (service.port, service.pid)
        log(f"[{mode}] server ready in {service.ready_seconds:.1f} s; first with every table paused")
        serving.pause(service, True)
        out["paused"]["closed"] = closed(target, 1, timing, repeats)
        out["paused"]["open"] = open_loop(target, 1, TARGET_RATE, timing)
        serving.pause(service, False)
        out["paused"]["backlog_seconds"] = drain(service)
        for size in ENDPOINTS:
            out["closed"].append(closed(target, size, timing, repeats) | {"drain_seconds": drain(service)})
            for rate in (TARGET_RATE,) if quick else RATES:
                out["open"].append(open_loop(target, size, rate, timing) | {"drain_seconds": drain(service)})
    return out


@contextlib.contextmanager
def bare_server() -> Iterator[tuple[int, int]]:
    """``bare_app.py`` under uvicorn, as ``loader serve`` serves it: (port, pid)."""
    port = free_port()

    def up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.post(f"http://127.0.0.1:{port}/v1/tables/t/updates", json={"rows": []}).status_code == 202
        return False

    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp:
        app = ["uvicorn", "benchmarks.isolation.bare_app:app", "--port", str(port), "--log-level", "warning"]
        proc = serving.spawn(app, Path(tmp), "bare")
        try:
            serving.wait_until(up, proc, 60, "the bare FastAPI server did not start", Path(tmp) / "bare.log")
            yield port, proc.pid
        finally:
            serving.stop_group(proc)


def measure(run: Run) -> dict[str, Any]:
    quick, repeats = run.args.quick, run.args.repeats
    timing = (1.0, 3.0) if quick else (2.0, 8.0)
    out: dict[str, Any] = {"tables": len(serving.INTAKE_TABLES), "rows_per_update": serving.ROWS_PER_UPDATE}
    out |= {"workers": serving.WORKERS, "spark_master": srv.SPARK_MASTER}
    with bare_server() as bare:
        out["bare"] = closed(bare, 1, timing, repeats)
    log(f"[bare] ceiling {out['bare']['median_requests_per_second']:,.0f} req/s")
    out["modes"] = {mode: run_mode(mode, timing, quick, repeats) for mode in MODES}
    spec = {"master": srv.SPARK_MASTER, "rows": 100, "runs": 10 if quick else 40, "warmup": 3}
    out["load_cost"] = srv.run_child("benchmarks.isolation.load_cost", spec, 900)
    log(f"[load cost] medians {out['load_cost']['median_seconds']}")
    fresh = replay_against_simulator(quick, ["myopic"])
    gap = fresh["policies"][0]["gap"]
    log(f"[freshness] myopic, connect mode: gap to the simulator {100 * gap:+.1f}%")
    out["freshness"] = {"horizon": fresh["horizon"], "policy": "myopic", "gap": gap, "result": fresh}
    spec = {"requests": 4000 if quick else 8000, "rounds": 3 if quick else 5}
    out["intake_cost"] = srv.run_child("benchmarks.isolation.intake_cost", spec, 900)
    log(f"[intake cost] event-loop µs per request {out['intake_cost']['median_cpu_us']}")
    return out


def _dash(spec: str) -> Any:
    """A format that shows "—" for a figure a row does not have."""
    return lambda value: "—" if value is None else format(value, spec)


#: Cell formats: ms ("∞": a request never answered), a verdict, figures a row may not have ("—").
FORMATS = {"ms": lambda v: "∞" if math.isinf(v) else f"{v:,.1f}", "met": lambda ok: "yes" if ok else "NO"}
T = Template("isolation", FORMATS | {"n0": _dash(",.0f"), "c2": _dash(".2f")})


def judge(out: dict[str, Any]) -> dict[str, Any]:
    connect = out["modes"]["connect"]
    single_open = next(r for r in connect["open"] if r["updates_per_request"] == 1 and r["rate"] == TARGET_RATE)
    single_closed, multi = (next(c for c in connect["closed"] if c["updates_per_request"] == n) for n in (1, 100))
    ceiling, rate = out["bare"]["median_requests_per_second"], single_closed["median_requests_per_second"]
    p99 = single_open["p99_ms"]
    judged = {"p99_ms": p99, "p99_met": p99 <= TARGET_P99_MS and single_open["unanswered"] == 0}
    judged |= {"ceiling_share": rate / ceiling, "ceiling_met": rate >= TARGET_CEILING_SHARE * ceiling}
    updates = multi["median_updates_per_second"]
    return judged | {"multi_updates_per_second": updates, "multi_met": updates >= TARGET_MULTI_UPDATES}


def render(out: dict[str, Any]) -> str:
    meta, bare = out["meta"], out["bare"]
    cores = bare["median_cores"] | {"workers": None, "spark": None}
    bare_row = bare | {"median_updates_per_second": None, "median_cores": cores}
    closed = [{"mode": "bare FastAPI", "loading": "—", "c": bare_row}]
    opened = []
    for mode, result in out["modes"].items():
        closed.append({"mode": mode, "loading": "paused", "c": result["paused"]["closed"]})
        closed += [{"mode": mode, "loading": "on", "c": c} for c in result["closed"]]
        paused = result["paused"]["open"]
        opened.append({"mode": mode, "offered": f"{paused['rate']:,} (paused)", "r": paused})
        opened += [{"mode": mode, "offered": f"{r['rate']:,}", "r": r} for r in result["open"]]
    paused, fresh = out["modes"]["connect"]["paused"]["closed"], out.get("freshness")
    values = {"meta": meta, "m": meta["machine"], "minutes": meta["run_seconds"] / 60, "v": judge(out), "freshness": ""}
    if fresh:
        met = abs(fresh["gap"]) <= TARGET_GAP
        values["freshness"] = T("freshness", goal=TARGET_GAP, horizon=fresh["horizon"], gap=fresh["gap"], met=met)
    values |= {"closed": T.table("closed-table", closed, "-"), "open": T.table("open-table", opened, "-")}
    values["per_bare"] = 1e3 * bare["median_cores"]["service"] / bare["median_requests_per_second"]
    values["per_loader"] = 1e3 * paused["median_cores"]["service"] / paused["median_requests_per_second"]
    values |= {"ceiling": bare["median_requests_per_second"], "p99_goal": TARGET_P99_MS, "rate": TARGET_RATE}
    text = T("head", share_goal=TARGET_CEILING_SHARE, multi_goal=TARGET_MULTI_UPDATES, **values)
    if ic := out.get("intake_cost"):
        us = ic["median_cpu_us"]
        text += T("intake-cost", ic=ic, us=us, ratio={k: v / us["fast"] for k, v in us.items()})
    s = out["load_cost"]["median_seconds"]
    return text + T("boundary", cost=out["load_cost"], s=s, ratio={k: v / s["classic"] for k, v in s.items()})


BENCHMARK = Benchmark(measure, render, quick_saves=True, repeats=(1, 3))

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
