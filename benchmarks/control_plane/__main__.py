"""Benchmark of the control plane at 1,000 and 10,000 tables, and of partitioning 100,000. A full
run takes ~15 min on 2 cores, ``--quick`` ~1 min.

Parts (each one's docstring says what is timed): registration (``registration.py``), dispatch,
reads, partitioning; those left out with ``--skip`` keep their figures from the results file
(``--skip registration,reads,partitioning`` measures dispatch again).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import random
import statistics
import tempfile
import time
import zlib
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from benchmarks.control_plane.registration import OPERATOR, configuration
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians, repeat
from benchmarks.harness.spark import timed
from loader.abc import FinishedBatch
from loader.config import load_settings
from loader.core.updates import Batch, LoadResult, Update
from loader.loading.dispatcher import Dispatcher
from loader.pending.store import PendingStore
from schedulers.generators import many_feeds
from schedulers.model import BatchRecord, TableSpec, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from testing.observed_staleness import ObservedUpdate, summarize
from testing.report import LoadMonitor, fmt_num, log, machine_markdown, median
from testing.service_server import run_child

PARTS = ("registration", "dispatch", "reads", "partitioning")
SEED = 5  # dispatch's table weights and periods
WORKERS = 2
TOP_K = 100
#: partitioning: (tables, horizon s, configurations: (instances, workers per instance)), quick and full.
PART_SEED, RATE, JOB_SECONDS = 14, 0.01, 0.2
QUICK = (10_000, 600.0, [(1, 2), (10, 2), (1, 20)])
FULL = (100_000, 1200.0, [(1, 2), (10, 2), (50, 2), (100, 2), (1, 200), (10, 20)])


def run_registration(sizes: list[int], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"repeats": repeats, "config": [], "bulk": []}
    for tables, mode in itertools.product(sizes, ("config", "bulk")):
        label = f"registration: {mode}, {tables:,} tables"
        runs = repeat(repeats, label, run_child, f"{__package__}.registration", {"mode": mode, "tables": tables}, 3600)
        out[mode].append({"tables": tables, "runs": runs})
    return out


# -- dispatch ---------------------------------------------------------------------------
class InlineExecutor(Executor):
    """Runs each call at once on the submitting thread (the event loop's)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the dispatcher as a failed load
            future.set_exception(exc)
        return future


class Cycle:
    """The dispatcher's handler: an empty load, and the table's next update once it finished.
    ``marks``: the clock at the end of the warm-up and at the last decision."""

    def __init__(self, warmup: int, decisions: int) -> None:
        self.dispatcher: Dispatcher
        self.warmup, self.target = warmup, warmup + decisions
        self.decisions = 0
        self.marks: list[float] = []
        self.done = asyncio.Event()
        self.next_seq: dict[str, int] = {}
        self.last_release: dict[str, float] = {}

    def load(self, worker: int, batch: Batch) -> LoadResult:
        return LoadResult(batch.table, batch.last_seq, rows=0, delta_version=None)

    def loaded(self, done: FinishedBatch) -> None:
        self.decisions += 1
        if self.decisions in (self.warmup, self.target):
            self.marks.append(time.perf_counter())
        if self.decisions >= self.target:
            self.done.set()
        else:
            self.release(done.table)

    def release(self, table: str) -> None:
        seq = self.next_seq[table] = self.next_seq.get(table, 0) + 1
        release = self.last_release[table] = max(time.time(), self.last_release[table] + 1e-6)
        self.dispatcher.released(Update(table, seq, release))

    def failed(self, failed: object) -> None:
        raise AssertionError(f"an empty load failed: {failed}")


async def dispatch(tables: int, policy: str, decisions: int, inline: bool) -> float:
    """One dispatch decision in the live dispatcher (loader/loading/dispatcher.py) at N tables:
    microseconds per decision, over ``decisions`` after a warm-up of a fifth as many, on a fresh
    event loop, dispatcher and policy.

    The driver around the pure policy (whose cost is in ``benchmarks/scheduling``), as the
    service runs it: every table has a pending update; one decision is a finished batch's
    table getting its next update (``Dispatcher.released``), the free worker offered to the
    policy (``choose``), the chosen queue taken and started, the finish accounted (ledger,
    cost estimate, stretches, the handler's ``loaded``). ``inline``: the pool is replaced by
    an executor that runs the (empty) load at once on the event loop's thread, the
    dispatcher's own cost; ``threads``: the real pool, with its hand-offs between threads
    (``call_soon_threadsafe``): the most decisions per second one service can drive.
    """
    rng = random.Random(SEED)
    cycle = Cycle(decisions // 5, decisions)
    dispatcher = cycle.dispatcher = Dispatcher(make_policy(policy), WORKERS, PendingStore(), cycle)
    if inline:
        dispatcher._executor.shutdown()
        dispatcher._executor = InlineExecutor()  # type: ignore[assignment]  # (benchmark only)
    now = time.time()
    names = [f"t{i:05d}" for i in range(tables)]
    for name in names:
        weight = round(20.0 ** rng.random(), 3)
        spec = TableSpec(name=name, alpha=0.001, overhead=0.2, weight=weight, period=rng.choice((1, 10, 100)))
        cycle.last_release[name] = origin = now - 300 + rng.random() * 200
        dispatcher.add_table(spec, origin=origin)
    for name in names:
        cycle.release(name)
    dispatcher.start()
    await cycle.done.wait()
    await dispatcher.wait_idle()
    dispatcher.shutdown()
    return (cycle.marks[1] - cycle.marks[0]) / decisions * 1e6


# -- reads ------------------------------------------------------------------------------
def _get(client: TestClient, path: str, repeats: int, **params: Any) -> tuple[Any, dict[str, Any]]:
    """The last answer, and the median and every wall time of ``repeats`` GETs, the answer's bytes."""
    answers, times = zip(*(timed(client.get, path, params=params) for _ in range(repeats)))
    answer = answers[-1]
    assert answer.status_code == 200, answer.text[:300]
    return answer, {"median_s": statistics.median(times), "all_s": list(times), "bytes": len(answer.content)}


def _populate(service: Any) -> None:
    """On the event loop: metric children as after one load of each table, pending updates."""
    m, now = service.metrics, time.time()
    for k, name in enumerate(service.catalog.entries):
        m.batches.labels(name, "loaded").inc()
        m.rows_loaded.labels(name).inc(100)
        m.updates_loaded.labels(name).inc()
        m.updates_received.labels(name).inc(2)
        m.batch_duration.labels(name).observe(0.2)
        m.stretch.labels(name).observe(1.3)
        m.delta_version.labels(name).set(1)
        if k % 10 == 0:
            service.dispatcher.released(Update(name, 1, now + k * 1e-6))


def read(tables: int, repeats: int) -> dict[str, Any]:
    """What operators and Prometheus read at N tables: a /metrics scrape and GET /v1/tables pages.

    A service of N configured tables without Spark (``load=False``: nothing loaded, no Delta
    table made) behind FastAPI's TestClient: each figure is the route's work on the event
    loop (a pause of intake), JSON or text included, without a network. Every table has the
    metric children of one load, one in ten a pending update, so the top-k choice and the
    staleness order have work. /metrics with every table's series and with the top-k (k =
    100); pages of GET /v1/tables: the default (1,000), 100 by name, the next 100 (cursor),
    100 stalest first, every table (limit 10,000).
    """
    log(f"reads: {tables:,} tables")
    out: dict[str, Any] = {"tables": tables, "metrics": {}, "pages": {}}
    with tempfile.TemporaryDirectory(prefix="control-plane-reads-") as tmp:
        app = create_app(load_settings(None, **configuration(Path(tmp), tables, columns=1)), load=False)
        with TestClient(app, headers={"Authorization": f"Bearer {OPERATOR}"}) as client:
            service = client.app.state.service  # type: ignore[attr-defined]
            client.portal.call(_populate, service)  # type: ignore[union-attr]
            for mode, top_k in (("all", None), ("top-k", TOP_K)):
                client.portal.call(service.metrics.attach, service.dispatcher, top_k)  # type: ignore[union-attr]
                answer, figures = _get(client, "/metrics", repeats)
                out["metrics"][mode] = figures | {"lines": answer.content.count(b"\n"), "top_k": top_k}
            cursor = client.get("/v1/tables", params={"limit": 100}).json()["next_cursor"]
            asks = {
                "default page (limit 1,000)": {},
                "100 by name": {"limit": 100},
                "the next 100 (cursor)": {"limit": 100, "cursor": cursor},
                "100 stalest first": {"limit": 100, "sort": "staleness"},
                "every table (limit 10,000)": {"limit": 10_000},
            }
            for label, params in asks.items():
                answer, figures = _get(client, "/v1/tables", repeats, **params)
                out["pages"][label] = figures | {"tables": len(answer.json()["tables"])}
    return out


# -- partitioning -------------------------------------------------------------------------
def partition(trace: Trace, instances: int) -> list[Trace]:
    """One trace per instance: the tables whose crc32(name) mod k is its number, in trace order."""
    if instances == 1:
        return [trace]
    owner = [zlib.crc32(spec.name.encode()) % instances for spec in trace.tables]
    parts = [Trace(tables=[]) for _ in range(instances)]
    local = []  # each table's number in its instance
    for spec, k in zip(trace.tables, owner):
        local.append(len(parts[k].tables))
        parts[k].tables.append(spec)
    for tid, release in zip(trace.update_tables, trace.update_releases):
        parts[owner[tid]].update_tables.append(local[tid])
        parts[owner[tid]].update_releases.append(release)
    return parts


def freshness(trace: Trace, schedule: list[BatchRecord], horizon: float) -> dict[str, float]:
    """Staleness over [0, horizon] of this schedule and of the ideal one, every update visible
    when the batch that loaded it finished; update latencies."""
    index = trace.table_index()
    done: list[list[BatchRecord]] = [[] for _ in trace.tables]
    for record in sorted(schedule, key=lambda b: b.finish):
        done[index[record.table]].append(record)
    observed = {}
    for tid, releases in enumerate(trace.releases_by_table()):
        lasts = [b.last_release for b in done[tid]]
        observed[tid] = [ObservedUpdate(r, done[tid][bisect.bisect_left(lasts, r)].finish) for r in releases]
    summary = summarize(observed, 0.0, horizon, dict.fromkeys(observed, 0.0), math.inf)
    out = {"mean_staleness_s": summary.mean_staleness, "ideal_mean_staleness_s": summary.ideal_mean_staleness}
    out |= {"ratio_to_ideal": summary.ratio}
    out["mean_latency_s"] = statistics.fmean(u.visible - u.arrival for us in observed.values() for u in us)
    return out | {"p99_latency_s": summary.latency_p99}


def run_configuration(trace: Trace, instances: int, workers: int, horizon: float) -> dict[str, Any]:
    parts = partition(trace, instances)
    done = [timed(lambda p=part: simulate(p, make_policy("myopic"), workers, record_schedule=True)) for part in parts]
    runs, batches = [seconds for _, seconds in done], sum(result.freshness.batches for result, _ in done)
    out: dict[str, Any] = {"instances": instances, "workers_per_instance": workers}
    out["tables_per_instance"] = [len(p.tables) for p in parts]
    out |= {"batches": batches, "simulate_s_total": sum(runs), "simulate_s_largest": max(runs)}
    return out | freshness(trace, [b for result, _ in done for b in result.schedule or ()], horizon)


def partitioning(quick: bool) -> dict[str, Any]:
    """100,000 tables across loader instances, checked with the simulator (docs/scaling.md).

    Every table gets Poisson updates at one rate (``schedulers.generators.many_feeds``), every
    load is a single-table job of fixed cost, policy myopic, ``schedulers.simulator.simulate``
    as it is. k instances x P workers: tables partitioned by crc32(name) mod k, as a
    deployment would route them, each instance simulated alone (instances share nothing but
    the warehouse, so this is exact for the model); "pooled" is one instance with all k x P
    workers. Figures over [0, horizon], so a drain after the last update does not count
    (``testing.observed_staleness``). Simulator time: the sum over instances (one machine
    simulating all) and the largest instance's (instances simulated in parallel).
    """
    tables, horizon, configurations = QUICK if quick else FULL
    log(f"partitioning: {tables:,} tables, {len(configurations)} configurations")
    trace, seconds = timed(many_feeds, tables=tables, rate=RATE, horizon=horizon, overhead=JOB_SECONDS, seed=PART_SEED)
    out = {"tables": tables, "rate_per_table": RATE, "horizon_s": horizon, "job_seconds": JOB_SECONDS}
    out |= {"updates": trace.n_updates, "generate_s": seconds}
    return out | {"configurations": [run_configuration(trace, k, p, horizon) for k, p in configurations]}


def run_dispatch(sizes: list[int], policies: list[str], decisions: int, repeats: int) -> dict[str, Any]:
    rows = []
    for tables, policy, mode in itertools.product(sizes, policies, ("inline", "threads")):
        label = f"dispatch: {tables:,} tables, {policy}, {mode}"
        us = repeat(repeats, label, lambda *a: asyncio.run(dispatch(*a)), tables, policy, decisions, mode == "inline")
        rows.append({"tables": tables, "policy": policy, "mode": mode, "median_us": median(us), "all_us": us})
    return {"decisions": decisions, "repeats": repeats, "workers": WORKERS, "rows": rows}


def measure(run: Run) -> dict[str, Any]:
    args, quick = run.args, run.args.quick
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([1000] if quick else [1000, 10_000])
    run.meta["sizes"] = sizes
    earlier = run.previous() if args.skip else {}  # the parts not run now keep their figures from the last run
    results: dict[str, Any] = {part: earlier[part] for part in PARTS if part in args.skip and part in earlier}
    policies = ["myopic"] if quick else ["myopic", "max-benefit", "fifo"]
    r = 3 if quick else 5  # reads
    runners = {
        "registration": lambda: run_registration(sizes, args.repeats),
        "dispatch": lambda: run_dispatch(sizes, policies, 5_000 if quick else 20_000, args.repeats),
        "reads": lambda: {"repeats": r, "top_k": TOP_K, "rows": [read(n, r) for n in sizes]},
        "partitioning": lambda: partitioning(quick),
    }
    for part, measure_part in runners.items():
        if part not in args.skip:
            with LoadMonitor(interval=2.0) as during:
                results[part] = measure_part()
            now, commit = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), run.meta["machine"]["git_commit"]
            results[part]["measured"] = {"date_utc": now, "git_commit": commit, "loadavg_peak": during.peak}
    return results


#: Goals of this section (set here, not by the issue): "1,000 and 10,000 tables must work",
#: made concrete. Start-up: intake open within this many seconds at the largest size.
GOAL_INTAKE_OPEN_S = 5.0
#: A top-k scrape costs what its k tables cost: at the largest size at most this many times
#: the smallest size's.
GOAL_TOP_K_GROWTH = 1.5
#: A page of 100 tables (by name or stalest first) at most this long at the largest size.
GOAL_PAGE_S = 0.05
#: The dispatcher's own work per decision grows at most this much from the smallest size to the largest.
GOAL_DISPATCH_GROWTH = 2.0
#: Cell formats: seconds as ms, bytes as MB; the k of a top-k scrape ("" for every table's series).
FORMATS = {"ms": lambda seconds: fmt_num(seconds * 1e3, 3), "MB": lambda n: f"{n / 1e6:.2f}"}
T = Template("control-plane", FORMATS | {"k": lambda k: "" if k is None else f" (k = {k})"})


def _check(block: str, ok: bool, **values: Any) -> dict[str, Any]:
    check, measured, goal = T.line(block, **values).split(" | ")
    return {"check": check, "measured": measured, "goal": goal, "ok": ok}


def checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    registration = results.get("registration")
    if registration and registration["config"]:
        largest = registration["config"][-1]
        for start, when in (("first", "first start"), ("restart", "restart on the same data")):
            m = medians(largest["runs"])[start]
            ok, goal = m["intake_open_s"] <= GOAL_INTAKE_OPEN_S, GOAL_INTAKE_OPEN_S
            out.append(_check("check-open", ok, tables=largest["tables"], when=when, m=m, goal=goal))
    if registration and registration["bulk"]:
        saves = max(run["bulk"]["catalog_saves"] for size in registration["bulk"] for run in size["runs"])
        sizes = ", ".join(f"{size['tables']:,}" for size in registration["bulk"])
        out.append(_check("check-bulk", saves == 1, saves=saves, sizes=sizes))
    reads = results.get("reads")
    if reads and reads["rows"]:
        small, large = reads["rows"][0], reads["rows"][-1]
        growth = large["metrics"]["top-k"]["median_s"] / small["metrics"]["top-k"]["median_s"]
        values = {"k": reads["top_k"], "large": large, "small": small, "growth": growth, "goal": GOAL_TOP_K_GROWTH}
        out.append(_check("check-top-k", growth <= GOAL_TOP_K_GROWTH, **values))
        slowest = max(large["pages"][page]["median_s"] for page in ("100 by name", "100 stalest first"))
        out.append(_check("check-pages", slowest <= GOAL_PAGE_S, large=large, goal=GOAL_PAGE_S * 1e3))
    dispatch = results.get("dispatch")
    rows = [r for r in dispatch["rows"] if r["mode"] == "inline" and r["policy"] == "myopic"] if dispatch else []
    if len(rows) >= 2:
        growth = rows[-1]["median_us"] / rows[0]["median_us"]
        values = {"large": rows[-1], "small": rows[0], "growth": growth, "goal": GOAL_DISPATCH_GROWTH}
        out.append(_check("check-dispatch", growth <= GOAL_DISPATCH_GROWTH, **values))
    return out


def registration_table(registration: dict[str, Any], mode: str) -> str:
    """Per size: its first run (sizes of files and bodies), the medians over its runs, RSS per table
    above the empty service (config), the most catalog writes of one call (bulk)."""
    rows = []
    for size in registration[mode]:
        runs, m = size["runs"], medians(size["runs"])
        per_table = (m["first"]["rss_mb"] - m["baseline_rss_mb"]) * 1024 / size["tables"] if mode == "config" else None
        saves = max(run["bulk"]["catalog_saves"] for run in runs) if mode == "bulk" else None
        rows.append({"tables": size["tables"], "first": runs[0], "m": m, "per_table": per_table, "saves": saves})
    return T.table(f"{mode}-table", rows)


def dispatch_table(dispatch: dict[str, Any]) -> str:
    modes: dict[tuple[int, str], dict[str, float]] = {}
    for row in dispatch["rows"]:
        modes.setdefault((row["tables"], row["policy"]), {})[row["mode"]] = row["median_us"]
    rows = [(n, policy, us["inline"], us["threads"], 1e6 / us["threads"]) for (n, policy), us in modes.items()]
    return T.table("dispatch-table", rows)


def partitioning_table(part: dict[str, Any]) -> str:
    rows = []
    for c in part["configurations"]:
        per, pooled = c["tables_per_instance"], c["instances"] == 1 and c["workers_per_instance"] > 2
        spread = f"{min(per):,}–{max(per):,}" if len(per) > 1 else f"{per[0]:,}"
        rows.append(c | {"pooled": " (pooled)" if pooled else "", "spread": spread})
    return T.table("partitioning-table", rows)


def measured(part: dict[str, Any]) -> str:
    """When and under what load a part was measured (parts may come from different runs)."""
    if not (stamp := part.get("measured")):
        return ""
    peak = stamp.get("loadavg_peak")
    return T("measured", stamp=stamp, peak="" if peak is None else T.line("peak", peak=peak))


def markdown(results: dict[str, Any]) -> str:
    checks_table = T.table("checks-table", checks(results), "llll")
    parts = [T("head", machine=machine_markdown(results["meta"], "loader"), checks=checks_table)]
    if registration := results.get("registration"):
        config, bulk = registration_table(registration, "config"), registration_table(registration, "bulk")
        parts.append(T("registration", measured=measured(registration), r=registration, config=config, bulk=bulk))
    if dispatch := results.get("dispatch"):
        parts.append(T("dispatch", measured=measured(dispatch), d=dispatch, table=dispatch_table(dispatch)))
    if reads := results.get("reads"):
        metrics = [(r["tables"], mode, f, f["bytes"] / 1e6) for r in reads["rows"] for mode, f in r["metrics"].items()]
        pages = [(r["tables"], label, f, f["bytes"] / 1e3) for r in reads["rows"] for label, f in r["pages"].items()]
        tables = {"metrics": T.table("metrics-table", metrics), "pages": T.table("pages-table", pages)}
        parts.append(T("reads", measured=measured(reads), r=reads, **tables))
    if part := results.get("partitioning"):
        parts.append(T("partitioning", measured=measured(part), p=part, table=partitioning_table(part)))
    return "".join(parts).rstrip() + "\n"


BENCHMARK = Benchmark(
    measure,
    markdown,
    fingerprints=("api",),
    quick_saves=True,
    repeats=(1, 3),
    parts=PARTS,
    options=lambda parser: parser.add_argument("--sizes", help="table counts, comma-separated (default 1000,10000)"),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
