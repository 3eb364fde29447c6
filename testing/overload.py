"""The overload trial's engine and verdicts, shared by the suite's short version
(tests/system/test_overload.py) and the trial that writes RELIABILITY.md (``python -m
trials.overload``), so both judge a run by the same functions.
Overload trial: intake driven well above what the workers can load, then relieved.

    python -m trials.overload                 # 3 min of overload, ~6 min; rewrites RELIABILITY.md
    python -m trials.overload --quick         # 45 s of overload, ~2 min; results/overload-quick.json only
    python -m trials.overload --minutes 5     # longer overload phase
    python -m trials.overload --rerender      # the saved results again (and their section)

``loader serve`` runs as a subprocess (real local Spark, delta-rs writer, fsync WAL) with
a small pending memory budget M and a spill disk budget that the overload fills within
the run. An open-loop load generator (``testing.loadgen``, its own process)
sends uniquely numbered updates on a fixed schedule, whatever the answers:

1. warm: a rate the workers keep up with (the "normal" latency);
2. overload: several times what the workers can load, for minutes: the backlog fills
   M, spills, fills the disk budget, and intake must answer 503 + Retry-After;
3. recovery: back to the warm rate: 503s must stop, the backlog drain, latency return.

Meanwhile a sampler reads the server's /metrics and GET /v1/admin/pending, the process
group's RSS (Python service and JVM apart) and the spill directory's size, four times a
second. At the end everything acknowledged is waited for and every Delta table is read
with the deltalake package: each acknowledged request's rows must be there exactly once,
a refused (503) request's not at all (``trials/overload/report.py`` judges).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loader.core.schema import TableSchema
from loader.intake.rows import rows_to_arrow
from testing import service_server as srv
from testing.report import log
from testing.tables import read_delta

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
    #: A running Spark Connect server to load through (``[spark] remote``); empty: the
    #: service starts its own, whose RSS the trial's memory figures then include.
    spark_remote: str = ""
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


def ci_plan(spark_remote: str = "") -> Plan:
    """The test suite's version (tests/system/test_overload.py): 13 s of traffic (5 of overload), one worker, 12 MB/s
    offered against batches capped near 2.5 MiB (about half that on a quiet machine), over the
    test process's Spark Connect server (what it tests is intake's budgets, not Spark's RSS)."""
    return Plan(
        spark_remote=spark_remote,
        warm_seconds=2.0,
        overload_seconds=5.0,
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
    them (``loader.intake.rows.rows_to_arrow``), measured in Arrow buffer bytes like the budget."""
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
        "spark": {
            "master": plan.spark_master,
            "conf": {'"spark.driver.memory"': plan.driver_memory},
            **({"remote": plan.spark_remote} if plan.spark_remote else {}),
        },
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

    Returns the raw material (records, samples, Delta ids, baselines); ``analyse`` below
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
            generated = srv.run_child("testing.loadgen", spec, timeout=plan.total_seconds + 180)
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


# -- verdicts ---------------------------------------------------------------------------
MIB = 1 << 20

#: Indices of a load generator record: [k, scheduled, sent, done, status, retry_after, acks].
K, SCHEDULED, SENT, DONE, STATUS, RETRY_AFTER, ACKS = range(7)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _phases(plan: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(name, start, end, offered rate) of each phase, in seconds from the generator's start."""
    w, o, r = plan["warm_seconds"], plan["overload_seconds"], plan["recovery_seconds"]
    return [
        ("warm", 0.0, w, plan["warm_rate"]),
        ("overload", w, w + o, plan["overload_rate"]),
        ("recovery", w + o, w + o + r, plan["warm_rate"]),
    ]


def _rel_samples(trial: dict[str, Any]) -> list[dict[str, float]]:
    start = trial["start_at"]
    out = []
    for s in trial["samples"]:
        s = dict(s, t=s["t"] - start)
        s["disk"] = s["spilled"] + s["in_flight_disk"]  # what check_room weighs against the disk budget
        out.append(s)
    return out


def _at(samples: list[dict[str, float]], t: float, key: str) -> float:
    """The sampled value of ``key`` nearest to time ``t`` (NaN without samples)."""
    if not samples:
        return float("nan")
    return min(samples, key=lambda s: abs(s["t"] - t))[key]


def phase_figures(trial: dict[str, Any]) -> list[dict[str, Any]]:
    plan = trial["plan"]
    samples = _rel_samples(trial)
    out = []
    for name, start, end, rate in _phases(plan):
        recs = [r for r in trial["records"] if start <= r[SCHEDULED] < end]
        seconds = end - start
        ok = [r for r in recs if r[STATUS] == 202]
        refused = [r for r in recs if r[STATUS] == 503]
        lat = [1e3 * (r[DONE] - r[SCHEDULED]) for r in ok]
        # The warm phase's first second opens the generator's connections: not "normal".
        settled = [1e3 * (r[DONE] - r[SCHEDULED]) for r in ok if r[SCHEDULED] >= start + 1.0] or lat
        lat503 = [1e3 * (r[DONE] - r[SCHEDULED]) for r in refused]
        loaded = _at(samples, end, "loaded") - _at(samples, start, "loaded")
        out.append(
            {
                "phase": name,
                "seconds": seconds,
                "offered_per_second": len(recs) / seconds,
                "target_rate": rate,
                "accepted": len(ok),
                "accepted_updates_per_second": len(ok) / seconds,
                "accepted_rows_per_second": len(ok) * plan["rows"] / seconds,
                "loaded_updates_per_second": loaded / seconds,
                "refused_503": len(refused),
                "other_statuses": dict(Counter(str(r[STATUS]) for r in recs if r[STATUS] not in (202, 503))),
                "p50_ms": percentile(lat, 0.5),
                "p99_ms": percentile(lat, 0.99),
                "max_ms": max(lat) if lat else float("nan"),
                "p99_503_ms": percentile(lat503, 0.99),
                "settled_p99_ms": percentile(settled, 0.99),
            }
        )
    return out


def account(trial: dict[str, Any]) -> dict[str, Any]:
    """Every request against what Delta holds: acknowledged rows exactly once, refused rows
    never, unanswered requests all or nothing, no row that nobody sent."""
    plan = trial["plan"]
    tables, rows, stride, first = plan["table_names"], plan["rows"], plan["id_stride"], plan["first_key"]
    fate: dict[int, tuple[str, int]] = {}  # key -> (table, status); status 0: no answer
    acks: list[tuple[str, int]] = []
    for p in trial["primed"]:
        fate[p["key"]] = (p["table"], p["status"])
        acks += [tuple(a) for a in p["acks"]]
    for r in trial["records"]:
        fate[first + r[K]] = (tables[r[K] % len(tables)], r[STATUS])
        if r[STATUS] == 202 and r[ACKS]:
            acks += [tuple(a) for a in r[ACKS]]
    for k in range(trial["generator"]["sent"]):  # held by a worker cancelled at the drain deadline
        fate.setdefault(first + k, (tables[k % len(tables)], 0))

    seen: Counter[tuple[str, int, int]] = Counter()
    for table, ids in trial["delta_ids"].items():
        seen.update((table, i // stride, i % stride) for i in ids)
    by_key: dict[tuple[str, int], list[int]] = {}
    for (table, key, _row), n in seen.items():
        by_key.setdefault((table, key), []).append(n)

    out = Counter()
    for key, (table, code) in fate.items():
        counts = by_key.pop((table, key), [])
        present, total = len(counts), sum(counts)
        if code == 202:
            out["acknowledged"] += 1
            out["lost_rows"] += rows - present
            out["duplicated_rows"] += total - present
            out["lost_updates"] += present < rows
            out["duplicated_updates"] += total > present
        elif code == 0:
            out["unanswered"] += 1
            out["unanswered_loaded"] += present == rows and total == rows
            out["unanswered_partial"] += 0 < present and (present < rows or total > present)
        else:
            out["refused"] += 1
            out["refused_but_loaded"] += present > 0
    out["phantom_rows"] = sum(sum(c) for c in by_key.values())
    out["delta_rows"] = sum(len(ids) for ids in trial["delta_ids"].values())
    out["duplicate_acks"] = len(acks) - len(set(acks))
    return {k: int(v) for k, v in out.items()}


def _first(samples: list[dict[str, float]], predicate: Any, after: float = -math.inf) -> float | None:
    for s in samples:
        if s["t"] >= after and predicate(s):
            return s["t"]
    return None


def latency_limit(normal_p99: float) -> float:
    """Normal latency: within twice the warm phase's p99 (after its first second), or 100
    ms above it (on a shared 2-core machine one Spark job start moves a small p99 by tens
    of milliseconds)."""
    return max(2 * normal_p99, normal_p99 + 100.0)


def _latency_recovery(trial: dict[str, Any], normal_p99: float, drop: float, end: float) -> float | None:
    """Seconds after the drop from which the accepted requests of the rest of the recovery
    phase have a p99 within ``latency_limit``: latency back to normal (a p99 over the rest,
    not a per-window maximum, so that one late hiccup of a shared machine does not undo a
    recovery). Checked on a 1-s grid; None: not even the last 10 s are normal."""
    limit = latency_limit(normal_p99)
    accepted = sorted(
        (r[SCHEDULED], 1e3 * (r[DONE] - r[SCHEDULED]))
        for r in trial["records"]
        if r[STATUS] == 202 and drop <= r[SCHEDULED] < end
    )
    for second in range(max(1, int(end - drop) - 9)):
        rest = [ms for t, ms in accepted if t >= drop + second]
        if rest and percentile(rest, 0.99) <= limit:
            return float(second)
    return None


def analyse(trial: dict[str, Any]) -> dict[str, Any]:
    plan = trial["plan"]
    M, D, P = plan["memory_budget"], plan["disk_budget"], plan["workers"]
    samples = _rel_samples(trial)
    phases = phase_figures(trial)
    records = trial["records"]
    drop = plan["warm_seconds"] + plan["overload_seconds"]
    end = drop + plan["recovery_seconds"]
    chunk = max((s["chunk"] for s in samples), default=0)
    update_bytes = trial.get("update_payload_bytes", 0)

    refused = [r for r in records if r[STATUS] == 503]
    with_header = [r for r in refused if r[RETRY_AFTER] is not None]
    right_header = [r for r in with_header if r[RETRY_AFTER] == str(plan["retry_after"])]
    fivexx = Counter(str(r[STATUS]) for r in records if r[STATUS] >= 500 and r[STATUS] != 503)
    fourxx = Counter(str(r[STATUS]) for r in records if 400 <= r[STATUS] < 500)
    unanswered = sum(1 for r in records if r[STATUS] == 0)
    first_503 = min((r[DONE] for r in refused), default=None)
    last_503 = max((r[SCHEDULED] for r in refused), default=None)
    # The disk budget is "hit" once the segments leave no room for one more spill write
    # (a chunk) and the update that triggers it: from then on check_room refuses while
    # memory is full (it also counts updates admitted whose WAL write is under way, which
    # the samples do not show, so refusals may begin a little below this level).
    full_level = D - chunk - update_bytes
    budget_hit = _first(samples, lambda s: s["disk"] >= full_level)
    near_first_503 = [s["disk"] for s in samples if first_503 is not None and abs(s["t"] - first_503) <= 0.5]

    warm, over, rec = phases
    recovery_second_half = [r for r in records if r[SCHEDULED] >= drop + plan["recovery_seconds"] / 2]
    spill_empty = _first(samples, lambda s: s["disk"] == 0, after=drop)
    backlog_loaded = trial["generator_end"] - trial["start_at"] + trial["drain_seconds_after_generator"]
    latency_back = _latency_recovery(trial, warm["settled_p99_ms"], drop, end)

    base = trial["rss_baseline"]
    peak_python = max((s["rss_python"] for s in samples), default=0)
    peak_group = max((s["rss_python"] + s["rss_jvm"] for s in samples), default=0)
    peak_jvm = max((s["rss_jvm"] for s in samples), default=0)
    python_growth = peak_python - base["python"]
    group_growth = peak_group - (base["python"] + base["jvm"])
    in_memory_bound = (P + 1) * (M + chunk)
    # RSS also holds what the budget does not govern: the requests being handled (up to one
    # per connection, each as body, Python objects, Arrow rows and WAL frame: ~4 bodies),
    # and the allocators' retained memory and buffers (64 MiB).
    body_bytes = trial.get("request_body_bytes", update_bytes)
    rss_allowance = in_memory_bound + plan["connections"] * 4 * body_bytes + 64 * MIB
    backlog_peak_bytes = max(
        (s["resident"] + s["spilled"] + s["in_flight"] + s["in_flight_disk"] for s in samples), default=0
    )

    acct = account(trial)
    figures = {
        "phases": phases,
        "chunk_bytes": chunk,
        "update_payload_bytes": update_bytes,
        "refused_503": len(refused),
        "refused_with_retry_after": len(with_header),
        "refused_with_configured_retry_after": len(right_header),
        "refused_metric": trial["metrics_final"].get('loader_intake_refused_total{reason="spill_full"}', 0.0),
        "other_5xx": dict(fivexx),
        "4xx": dict(fourxx),
        "unanswered": unanswered,
        "first_503_s": first_503,
        "budget_hit_s": budget_hit,
        "budget_hit_to_first_503_s": None if first_503 is None or budget_hit is None else first_503 - budget_hit,
        "disk_fill_near_first_503": max(near_first_503) / D if near_first_503 else None,
        "last_503_after_drop_s": None if last_503 is None else last_503 - drop,
        "recovery_second_half_requests": len(recovery_second_half),
        "recovery_second_half_accepted": sum(1 for r in recovery_second_half if r[STATUS] == 202),
        "spill_empty_after_drop_s": None if spill_empty is None else spill_empty - drop,
        "backlog_loaded_after_drop_s": backlog_loaded - drop if trial["drained"] else None,
        "latency_normal_after_drop_s": latency_back,
        "latency_limit_ms": latency_limit(warm["settled_p99_ms"]),
        "peak_resident_sampled": max((s["resident"] for s in samples), default=0),
        "peak_resident_metric": max((s["metric_resident"] for s in samples), default=0),
        "peak_resident_store": max((s["peak_resident"] for s in samples), default=0),
        "peak_in_memory": max((s["resident"] + s["in_flight"] for s in samples), default=0),
        "in_memory_bound": in_memory_bound,
        "peak_disk_accounted": max((s["disk"] for s in samples), default=0),
        "peak_spilled_metric": max((s["metric_spilled"] for s in samples), default=0),
        "peak_spill_files": max((s["spill_files"] for s in samples), default=0),
        "backlog_peak_bytes": backlog_peak_bytes,
        "accepted_payload_bytes": acct.get("acknowledged", 0) * update_bytes,
        "rss_baseline_python": base["python"],
        "rss_baseline_jvm": base["jvm"],
        "rss_at_start_python": trial["rss_at_start"]["python"],
        "rss_at_start_jvm": trial["rss_at_start"]["jvm"],
        "rss_peak_python": peak_python,
        "rss_peak_jvm": peak_jvm,
        "rss_peak_group": peak_group,
        "rss_growth_python": python_growth,
        "rss_growth_group": group_growth,
        "rss_allowance": rss_allowance,
        "rss_after_python": trial["rss_after"]["python"],
        "samples": len(samples),
        "sampler_failures": trial["sampler_failures"],
        "account": acct,
    }
    promises = {
        "memory: pending bytes in memory never above M": figures["peak_resident_sampled"] <= M
        and figures["peak_resident_metric"] <= M,
        "memory: waiting + in-flight payload within (P+1)(M+chunk)": figures["peak_in_memory"] <= in_memory_bound,
        "memory: service RSS growth within (P+1)(M+chunk) + requests in flight + 64 MiB": python_growth
        <= rss_allowance,
        "disk: spilled + in-flight segments never above the disk budget (+ one chunk)": figures["peak_disk_accounted"]
        <= D + chunk,
        "backpressure: 503s once the disk budget is hit": bool(refused)
        and budget_hit is not None
        and figures["budget_hit_to_first_503_s"] is not None
        and figures["budget_hit_to_first_503_s"] <= 1.0 + plan["sample_seconds"],
        "backpressure: every 503 carries Retry-After": bool(refused) and len(right_header) == len(refused),
        "recovery: 503s stop and every request is accepted after the drop": bool(recovery_second_half)
        and figures["recovery_second_half_accepted"] == len(recovery_second_half),
        "recovery: the backlog drains": trial["drained"] and spill_empty is not None,
        "recovery: latency back to normal in the recovery phase": latency_back is not None,
        "no 5xx but 503, no 4xx, every request answered": not fivexx and not fourxx and unanswered == 0,
        "nothing acknowledged lost": acct["lost_rows"] == 0 and acct.get("duplicate_acks", 0) == 0,
        "nothing duplicated": acct["duplicated_rows"] == 0,
        "nothing refused loaded, no phantom rows": acct.get("refused_but_loaded", 0) == 0
        and acct["phantom_rows"] == 0
        and acct.get("unanswered_partial", 0) == 0,
    }
    return {"figures": figures, "promises": promises, "timeline": timeline(trial, samples)}


def timeline(trial: dict[str, Any], samples: list[dict[str, float]]) -> list[dict[str, float]]:
    """Per second of the run (by scheduled send time): requests offered, accepted, refused,
    the p99 of accepted ones, and the sampled store, disk and RSS at that second."""
    buckets: dict[int, list[list[Any]]] = {}
    for r in trial["records"]:
        buckets.setdefault(int(r[SCHEDULED]), []).append(r)
    plan = trial["plan"]
    out = []
    for second in range(math.ceil(plan["warm_seconds"] + plan["overload_seconds"] + plan["recovery_seconds"])):
        recs = buckets.get(second, [])
        ok = [1e3 * (r[DONE] - r[SCHEDULED]) for r in recs if r[STATUS] == 202]
        row: dict[str, float] = {
            "t": second,
            "offered": len(recs),
            "accepted": len(ok),
            "refused": sum(1 for r in recs if r[STATUS] == 503),
            "p99_ms": round(percentile(ok, 0.99), 1),
        }
        if samples:
            s = min(samples, key=lambda x: abs(x["t"] - second))
            row.update(
                {k: s[k] for k in ("resident", "disk", "in_flight", "spill_files", "loaded", "rss_python", "rss_jvm")}
            )
        out.append(row)
    return out


def all_pass(analysis: dict[str, Any]) -> bool:
    return all(analysis["promises"].values())
