"""Overload trial: intake driven well above what the workers can load, then relieved.

    python -m benchmarks.overload                 # 3 min of overload, ~6 min; rewrites RELIABILITY.md
    python -m benchmarks.overload --quick         # 45 s of overload, ~2 min; results/overload-quick.json only
    python -m benchmarks.overload --minutes 5     # longer overload phase
    python -m benchmarks.overload --rerender      # the saved results again (and their section)

``loader serve`` runs as a subprocess (real local Spark, delta-rs writer, fsync WAL) with
a small pending memory budget M and a spill disk budget that the overload fills within
the run. An open-loop load generator (``benchmarks._service_loadgen``, its own process)
sends uniquely numbered updates on a fixed schedule, whatever the answers:

1. warm: a rate the workers keep up with (the "normal" latency);
2. overload: several times what the workers can load, for minutes: the backlog fills
   M, spills, fills the disk budget, and intake must answer 503 + Retry-After;
3. recovery: back to the warm rate: 503s must stop, the backlog drain, latency return.

Meanwhile a sampler reads the server's /metrics and GET /v1/admin/pending, the process
group's RSS (Python service and JVM apart) and the spill directory's size, four times a
second. At the end everything acknowledged is waited for and every Delta table is read
with the deltalake package: each acknowledged request's rows must be there exactly once,
a refused (503) request's not at all (``benchmarks/_overload_report.py`` judges).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _overload_report as report
from benchmarks import _service_server as srv
from benchmarks._common import (
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    source_fingerprint,
    write_json,
)
from benchmarks._reliability import write_reliability
from benchmarks.service import run_child
from loader.rows import rows_to_arrow
from loader.schema import TableSchema
from tests.tables import read_delta

MODULE = "benchmarks.overload"
SECTION = "overload"

#: Every row's id is request number * ID_STRIDE + row index (rows < ID_STRIDE).
ID_STRIDE = 1000
PLACEHOLDER = "@K@"
#: Requests numbered below this are the priming requests sent before the load generator.
FIRST_KEY = 1000


@dataclass(frozen=True)
class Plan:
    """The knobs of one trial; ``quick``/``long``/``ci`` below are the ones used."""

    warm_seconds: float
    overload_seconds: float
    recovery_seconds: float
    #: requests/s; one update of ``rows`` rows each, round-robin over the tables.
    warm_rate: float
    overload_rate: float
    memory_budget: int
    disk_budget: int
    workers: int = 2
    spark_master: str = "local[2]"
    tables: int = 8
    rows: int = 200
    #: Length of each row's string column: payload bytes (what loading costs) come cheap to
    #: parse this way, so the overload is on the workers, not on the HTTP intake.
    note_chars: int = 1000
    connections: int = 64
    retry_after: int = 1
    sample_seconds: float = 0.25
    #: Spark driver heap: bounds the JVM part of the RSS (the pending budget bounds Python's).
    driver_memory: str = "1g"
    #: Seconds to wait for the backlog to load after the last request.
    drain_timeout: float = 300.0
    #: Seconds of idle RSS samples for the baseline.
    idle_seconds: float = 3.0

    @property
    def total_seconds(self) -> float:
        return self.warm_seconds + self.overload_seconds + self.recovery_seconds

    @property
    def table_names(self) -> list[str]:
        return [f"ov{i}" for i in range(self.tables)]


def long_plan(minutes: float) -> Plan:
    """~30 MB/s of payload offered for ``minutes``, over 8 tables.

    A worker loads a table's whole backlog as one batch, so what the workers can load grows
    with the backlog, up to batches of about (M + disk budget) / tables: with 4 tables and
    32 MiB of disk two workers kept up with 16 MB/s here (on a quiet machine). 8 tables and
    24 MiB cap a batch near 4 MiB; they loaded about 10 MB/s of such batches."""
    return Plan(
        warm_seconds=30.0,
        overload_seconds=60.0 * minutes,
        recovery_seconds=60.0,
        warm_rate=8.0,
        overload_rate=150.0,
        memory_budget=8 << 20,
        disk_budget=24 << 20,
    )


def quick_plan() -> Plan:
    return Plan(
        warm_seconds=15.0,
        overload_seconds=45.0,
        recovery_seconds=30.0,
        warm_rate=8.0,
        overload_rate=120.0,
        memory_budget=4 << 20,
        disk_budget=12 << 20,
    )


def ci_plan() -> Plan:
    """The test suite's version (tests/test_overload.py): 16 s of traffic, one worker, 12 MB/s
    offered against batches capped near 2.5 MiB (about half that on a quiet machine)."""
    return Plan(
        warm_seconds=2.0,
        overload_seconds=8.0,
        recovery_seconds=6.0,
        warm_rate=6.0,
        overload_rate=60.0,
        memory_budget=1 << 20,
        disk_budget=4 << 20,
        workers=1,
        tables=2,
        connections=32,
        sample_seconds=0.2,
        drain_timeout=120.0,
        idle_seconds=1.0,
    )


# -- requests ---------------------------------------------------------------------------
def body_template(plan: Plan) -> str:
    """One update's body with the request number left as ``PLACEHOLDER`` in every row's id
    (id = number * ID_STRIDE + row): the load generator fills it in per request."""
    note = "n" * plan.note_chars
    rows = ",".join(f'{{"id":{PLACEHOLDER}{j:03d},"v":{j * 0.5},"s":"{note}"}}' for j in range(plan.rows))
    return '{"rows":[' + rows + "]}"


def body(plan: Plan, key: int) -> str:
    return body_template(plan).replace(PLACEHOLDER, str(key))


def update_payload_bytes(plan: Plan) -> int:
    """What one update holds in the pending store's memory: its rows as the service converts
    them (``loader.rows.rows_to_arrow``), measured in Arrow buffer bytes like the budget."""
    schema = TableSchema.model_validate(srv.SCHEMA)
    rows = json.loads(body(plan, FIRST_KEY))["rows"]
    return int(rows_to_arrow(rows, schema, "probe").get_total_buffer_size())


def generator_spec(plan: Plan, svc: srv.Service) -> dict[str, Any]:
    template = body_template(plan)
    return {
        "mode": "open",
        "host": "127.0.0.1",
        "port": svc.port,
        "token": srv.PRODUCER_TOKEN,
        "connections": plan.connections,
        "warmup": 0.0,
        "schedule": [
            [plan.warm_rate, plan.warm_seconds],
            [plan.overload_rate, plan.overload_seconds],
            [plan.warm_rate, plan.recovery_seconds],
        ],
        "drain_seconds": 60.0,
        "requests": [{"path": f"/v1/tables/{t}/updates", "body": template, "updates": 1} for t in plan.table_names],
        "unique": {"placeholder": PLACEHOLDER, "base": FIRST_KEY},
        "record": True,
    }


def service_settings(plan: Plan) -> dict[str, Any]:
    return {
        # The key quoted: write_config puts it into a TOML inline table as it is.
        "spark": {"master": plan.spark_master, "conf": {'"spark.driver.memory"': plan.driver_memory}},
        "spill": {
            "memory_budget_bytes": plan.memory_budget,
            "disk_budget_bytes": plan.disk_budget,
            "retry_after_seconds": plan.retry_after,
        },
    }


# -- sampling ---------------------------------------------------------------------------
def dir_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (the spill segments as they lie on disk)."""
    total = 0
    for entry in path.rglob("*"):
        with contextlib.suppress(OSError):
            if entry.is_file():
                total += entry.stat().st_size
    return total


@dataclass
class Sampler:
    """Polls the server in a thread: pending store, counters, RSS, spill directory size."""

    svc: srv.Service
    interval: float
    samples: list[dict[str, float]] = field(default_factory=list)
    failures: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="overload-sampler", daemon=True)

    def sample(self, http: httpx.Client) -> dict[str, float]:
        t = time.time()
        pending = srv.get(http, "/v1/admin/pending").json()
        metrics = srv.scrape(http)
        rss = srv.group_rss(self.svc.pid)
        return {
            "t": t,
            "resident": pending["resident_bytes"],
            "spilled": pending["spilled_bytes"],
            "in_flight": pending["in_flight_bytes"],
            "in_flight_disk": pending.get("in_flight_disk_bytes", 0),
            "peak_resident": pending["peak_resident_bytes"],
            "chunk": pending.get("chunk_bytes", 0),
            "metric_resident": metrics.get("loader_pending_resident_bytes", 0.0),
            "metric_spilled": metrics.get("loader_pending_spilled_bytes", 0.0),
            "metric_in_flight": metrics.get("loader_pending_in_flight_bytes", 0.0),
            "refused": metrics.get('loader_intake_refused_total{reason="spill_full"}', 0.0),
            "received": metrics.get("sum:loader_updates_received_total", 0.0),
            "loaded": metrics.get("sum:loader_updates_loaded_total", 0.0),
            "pending_updates": metrics.get("sum:loader_table_pending_updates", 0.0),
            "spill_files": dir_bytes(self.svc.workdir / "data" / "spill"),
            "rss_python": rss["python"],
            "rss_jvm": rss["jvm"],
        }

    def _run(self) -> None:
        with self.svc.client(timeout=10.0) as http:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    self.samples.append(self.sample(http))
                except (httpx.HTTPError, OSError, KeyError, ValueError):
                    self.failures += 1
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def wait_for_sample_after(self, moment: float, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.samples and self.samples[-1]["t"] > moment) and time.monotonic() < deadline:
            time.sleep(self.interval / 4)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def idle_rss(svc: srv.Service, seconds: float) -> dict[str, int]:
    """The group's RSS at rest (the median of a few samples): the baseline of the peak."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(srv.group_rss(svc.pid))
        time.sleep(0.25)
    samples.sort(key=lambda s: s["python"] + s["jvm"])
    return samples[len(samples) // 2]


# -- the trial --------------------------------------------------------------------------
def prime(plan: Plan, svc: srv.Service, http: httpx.Client) -> list[dict[str, Any]]:
    """One update per table, loaded, so that Spark's JVM has run a job of each before the
    idle baseline is taken (classes loaded, JIT warm, Arrow buffers allocated)."""
    sent = []
    for i, table in enumerate(plan.table_names):
        key = 1 + i
        r = http.post(
            f"/v1/tables/{table}/updates",
            content=body(plan, key),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {srv.PRODUCER_TOKEN}"},
        )
        r.raise_for_status()
        ack = r.json()["updates"][0]
        sent.append({"key": key, "table": table, "status": r.status_code, "acks": [[ack["table"], ack["sequence"]]]})
    done, _ = srv.wait_loaded(http, timeout=180)
    if not done:
        raise RuntimeError("the priming updates were not loaded within 180 s")
    return sent


def read_ids(svc: srv.Service, tables: list[str]) -> dict[str, list[int]]:
    """Every row id of every table, as the deltalake package reads the Delta table."""
    out = {}
    for table in tables:
        path = svc.workdir / "data" / "warehouse" / table
        out[table] = read_delta(path).column("id").to_pylist() if (path / "_delta_log").exists() else []
    return out


def run_trial(plan: Plan) -> dict[str, Any]:
    """Start the service, prime it, run the three phases, wait for the backlog, read Delta.

    Returns the raw material (records, samples, Delta ids, baselines); ``report.analyse``
    turns it into figures and verdicts.
    """
    out: dict[str, Any] = {
        "plan": dict(asdict(plan), table_names=plan.table_names, id_stride=ID_STRIDE, first_key=FIRST_KEY),
        "update_payload_bytes": update_payload_bytes(plan),
        "request_body_bytes": len(body(plan, FIRST_KEY).encode()),
    }
    with (
        srv.running_service(tables=plan.table_names, workers=plan.workers, extra=service_settings(plan)) as svc,
        svc.client(timeout=60.0) as http,
    ):
        out["server_ready_seconds"] = svc.ready_seconds
        log(f"[overload] server ready in {svc.ready_seconds:.1f} s (pid {svc.pid}, port {svc.port})")
        out["rss_at_start"] = srv.group_rss(svc.pid)
        out["primed"] = prime(plan, svc, http)
        out["rss_baseline"] = idle_rss(svc, plan.idle_seconds)
        log(
            f"[overload] idle RSS after priming: service {out['rss_baseline']['python'] >> 20} MiB, "
            f"JVM {out['rss_baseline']['jvm'] >> 20} MiB"
        )
        spec = generator_spec(plan, svc)
        spec["start_at"] = time.time() + 1.0
        out["start_at"] = spec["start_at"]
        log(
            f"[overload] {plan.warm_rate:g} req/s for {plan.warm_seconds:g} s, {plan.overload_rate:g} req/s for "
            f"{plan.overload_seconds:g} s, {plan.warm_rate:g} req/s for {plan.recovery_seconds:g} s "
            f"({plan.rows} rows of ~{plan.note_chars + 30} B per update, {plan.tables} tables)"
        )
        with Sampler(svc, plan.sample_seconds) as sampler:
            generated = run_child("benchmarks._service_loadgen", spec, timeout=plan.total_seconds + 180)
            out["generator_end"] = time.time()
            drained, drain_seconds = srv.wait_loaded(http, timeout=plan.drain_timeout, poll=0.25)
            sampler.wait_for_sample_after(time.time())  # the drained state is in the series
        out["records"] = generated.pop("records")
        out["generator"] = {k: v for k, v in generated.items() if k not in ("latencies", "service")}
        out["samples"] = sampler.samples
        out["sampler_failures"] = sampler.failures
        out["drained"] = drained
        out["drain_seconds_after_generator"] = drain_seconds
        out["rss_after"] = idle_rss(svc, plan.idle_seconds)
        out["pending_final"] = srv.get(http, "/v1/admin/pending").json()
        out["tables_final"] = srv.table_status(http)
        out["metrics_final"] = {
            k: v
            for k, v in srv.scrape(http).items()
            if k.startswith(("loader_intake_refused", "loader_http_requests", "sum:loader_", "loader_spill"))
        }
        out["log_tail"] = svc.proc.log_tail(30)
        out["delta_ids"] = read_ids(svc, plan.table_names)
    log(f"[overload] generator: {out['generator']['sent']} requests, errors {out['generator']['errors']}")
    return out


# -- main -------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="minutes of overload (default 3; not with --quick)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="45 s of overload with smaller budgets; writes results/overload-quick.json and leaves "
        "RELIABILITY.md alone unless --write",
    )
    parser.add_argument("--write", action="store_true", help="rewrite the RELIABILITY.md section even with --quick")
    parser.add_argument("--no-write", action="store_true", help="leave RELIABILITY.md alone")
    parser.add_argument("--json", type=Path, default=None, help="results (default benchmarks/results/overload*.json)")
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="measure nothing: print the saved results (--json) again and rewrite the section from them",
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.json is None:
        args.json = RESULTS_DIR / ("overload-quick.json" if args.quick else "overload.json")
    return args


def saved(results: dict[str, Any]) -> dict[str, Any]:
    """What goes to the JSON file: setup, figures, verdicts and the per-second timeline; not
    the per-request records, samples and row ids (megabytes, summarised by the analysis)."""
    trial = {k: v for k, v in results["trial"].items() if k not in ("records", "delta_ids", "samples")}
    return {**results, "trial": trial}


def latest_quick() -> dict[str, Any] | None:
    path = RESULTS_DIR / "overload-quick.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        results = json.loads(args.json.read_text(encoding="utf-8"))
        if not args.no_write and (args.write or not results["meta"]["quick"]):
            write_reliability(SECTION, report.render_markdown(results, latest_quick()))
            log(f"wrote section '{SECTION}' of RELIABILITY.md from {args.json}")
        report.print_console(results)
        return 0 if report.all_pass(results["analysis"]) else 1
    plan = quick_plan() if args.quick else long_plan(args.minutes)
    started = time.perf_counter()
    machine = machine_info("loader")
    meta: dict[str, Any] = {"command": command_line(MODULE, argv), "quick": args.quick, "machine": machine}
    with LoadMonitor() as monitor:
        trial = run_trial(plan)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
    results = {"meta": meta, "trial": trial, "analysis": report.analyse(trial)}
    write_json(args.json, saved(results))
    log(f"results: {args.json}")
    if not args.no_write and (args.write or not args.quick):
        write_reliability(SECTION, report.render_markdown(results, latest_quick()))
        log(f"wrote section '{SECTION}' of RELIABILITY.md")
    report.print_console(results)
    log(f"done in {fmt_duration(meta['run_seconds'])}")
    return 0 if report.all_pass(results["analysis"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
