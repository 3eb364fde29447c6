"""Verdicts and presentation of the service benchmark: targets, notes, the BENCHMARKS.md
section and the console tables.

Reads only the results dict (what ``service.json`` holds), so ``--rerender`` can rebuild
everything from saved figures. Each table is built once as (headers, rows) and rendered
as markdown or with rich.
"""

from __future__ import annotations

import math
from typing import Any

from testing.report import fmt_num, machine_markdown, md_table, print_table, status

TARGET_MULTI_UPDATES = 5000.0
TARGET_OPEN_RATE = 1000
TARGET_P99_MS = 20.0
TARGET_GAP = 0.15
#: The open-loop run counts as "at 1,000 requests/s" only if the server answered at least
#: this share of the offered rate inside the window.
RATE_TOLERANCE = 0.98

Rows = list[list[Any]]
TableRows = tuple[list[str], Rows]


def _ms(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "unanswered"
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _open_at(results: dict[str, Any], rate: int) -> dict[str, Any] | None:
    for r in results.get("intake", {}).get("single_open", []):
        if r["rate"] == rate:
            return r
    return None


# =====================================================================================
# Verdicts
# =====================================================================================
def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    intake = results.get("intake")
    if intake:
        best = max(intake["multi"], key=lambda m: m["median_updates_per_second"])
        parts = "; ".join(
            f"{m['updates_per_request']}/request: {_rate(m['median_updates_per_second'])} "
            "updates/s "
            f"(p99 {_ms(m['median_p99_ms'])} ms)"
            for m in intake["multi"]
        )
        targets.append(
            {
                "target": "acknowledged updates/s through POST /v1/updates, durability fsync (group commit)",
                "measured": f"{_rate(best['median_updates_per_second'])} at "
                f"{best['updates_per_request']} updates/request "
                f"(median of {intake['repeats']}); {parts}",
                "goal": f">= {TARGET_MULTI_UPDATES:,.0f}",
                "ok": best["median_updates_per_second"] >= TARGET_MULTI_UPDATES,
            }
        )
        run = _open_at(results, TARGET_OPEN_RATE)
        if run is not None:
            achieved = run["answered_in_window_per_second"]
            ok = (
                run["p99_ms"] < TARGET_P99_MS
                and achieved >= RATE_TOLERANCE * TARGET_OPEN_RATE
                and not run["unanswered"]
            )
            targets.append(
                {
                    "target": "p99 ack latency of POST /v1/tables/{t}/updates at "
                    f"{TARGET_OPEN_RATE:,} requests/s (open loop)",
                    "measured": f"p99 {_ms(run['p99_ms'])} ms (p50 {_ms(run['p50_ms'])} ms); "
                    f"answered {_rate(achieved)}/s "
                    f"of {TARGET_OPEN_RATE:,}/s offered; saturation "
                    f"{_rate(intake['single_saturation']['median_requests_per_second'])} "
                    "requests/s" + _paused_open_note(intake),
                    "goal": f"< {TARGET_P99_MS:g} ms",
                    "ok": ok,
                }
            )
    fresh = results.get("freshness")
    if fresh:
        for p in fresh["policies"]:
            targets.append(
                {
                    "target": f"live staleness ratio within {100 * TARGET_GAP:.0f}% of the "
                    f"simulator's ({p['policy']}, {fresh['workers']} workers)",
                    "measured": f"live {p['live']['staleness_ratio']:.4f} vs simulated "
                    f"{p['sim']['staleness_ratio']:.4f}: "
                    f"{100 * p['gap']:+.1f}%",
                    "goal": f"|gap| <= {100 * TARGET_GAP:.0f}%",
                    "ok": abs(p["gap"]) <= TARGET_GAP,
                }
            )
    for t in targets:
        t["status"] = status(t["ok"])
    return targets


def build_notes(results: dict[str, Any]) -> list[str]:
    """Explanations derived from the figures (every miss gets one)."""
    notes: list[str] = []
    intake = results.get("intake")
    if intake:
        sat = intake["single_saturation"]
        run = _open_at(results, TARGET_OPEN_RATE)
        if sat["median_requests_per_second"] < TARGET_OPEN_RATE:
            notes.append(
                "Single-update endpoint: it saturates at "
                f"{_rate(sat['median_requests_per_second'])} requests/s "
                f"(closed loop, {sat['connections']} connections), below the "
                f"{TARGET_OPEN_RATE:,}/s the latency target is "
                f"set at, so the open-loop run at {TARGET_OPEN_RATE:,}/s is an overload: requests "
                "queue and the latency "
                "measured from the scheduled send time grows for as long as the overload lasts"
                + (f" (p99 {_ms(run['p99_ms'])} ms)." if run else ".")
                + " The service's Python process used "
                + f"{sat['median_python_cores']:.2f} cores and the JVM "
                f"{sat['median_jvm_cores']:.2f} at saturation, with "
                f"{sat['median_records_per_fsync']:.1f} records per fsync "
                f"and {sat['median_fsyncs_per_second']:,.0f} fsyncs/s of "
                f"{sat['median_mean_fsync_ms']:.2f} ms each: "
                "the WAL disk is not the limit; the per-request work in the service's one Python "
                "process is, "
                "together with the loads competing with it (see the diagnostic and the findings "
                "below)."
            )
        best = max(intake["multi"], key=lambda m: m["median_updates_per_second"])
        if best["median_updates_per_second"] < TARGET_MULTI_UPDATES:
            notes.append(
                f"Multi-update endpoint: at most {_rate(best['median_updates_per_second'])} "
                "acknowledged updates/s "
                f"({best['updates_per_request']} per request) with loading on, the service's "
                "Python process at "
                f"{best['median_python_cores']:.2f} cores and the JVM at "
                f"{best['median_jvm_cores']:.2f}; group commit "
                f"is not the limit ({best['median_records_per_fsync']:.0f} records per fsync, "
                f"{best['median_fsyncs_per_second']:.0f} fsyncs/s). Per update the event loop "
                "parses JSON, builds an "
                "Arrow table, encodes a WAL record and notifies the policy, on the same "
                "interpreter as the loads."
            )
        met = [r for r in intake["single_open"] if r["p99_ms"] < TARGET_P99_MS and not r["unanswered"]]
        lowest = min(intake["single_open"], key=lambda r: r["rate"]) if intake["single_open"] else None
        if (
            lowest is not None
            and lowest["p99_ms"] >= TARGET_P99_MS
            and lowest["answered_in_window_per_second"] >= RATE_TOLERANCE * lowest["rate"]
        ):
            notes.append(
                f"At {lowest['rate']:,} requests/s, which the server keeps up with, p99 is still "
                f"{_ms(lowest['p99_ms'])} ms "
                f"and send→answer p99 {_ms(lowest['service_p99_ms'])} ms: not queueing in the "
                "generator but stalls "
                "inside the server while loads run (compare the paused diagnostic)."
            )
        if intake["single_open"]:
            parts = ", ".join(f"{r['rate']:,}/s: p99 {_ms(r['p99_ms'])} ms" for r in intake["single_open"])
            notes.append(
                f"Open-loop latency by offered rate ({parts}); the p99 < {TARGET_P99_MS:g} ms goal "
                + (f"holds up to {max(r['rate'] for r in met):,} requests/s." if met else "holds at none of them.")
            )
        multi = intake["multi"]
        small = min(multi, key=lambda m: m["updates_per_request"])
        notes.append(
            f"Group commit at work: with {small['updates_per_request']} updates per request the "
            "WAL made "
            f"{small['median_records_per_fsync']:.1f} records durable per fsync at "
            f"{small['median_fsyncs_per_second']:,.0f} "
            f"fsyncs/s (one record = one update; one append call = one request)."
        )
        paused = intake.get("paused")
        if paused and paused.get("single_saturation"):
            ps = paused["single_saturation"]
            pm = {m["updates_per_request"]: m for m in paused["multi"]}
            lm = {m["updates_per_request"]: m for m in multi}
            multi_parts = ", ".join(
                f"{k}/request {_rate(pm[k]['median_updates_per_second'])} vs "
                f"{_rate(lm[k]['median_updates_per_second'])} updates/s"
                for k in sorted(pm)
                if k in lm
            )
            po = (paused.get("single_open") or [None])[0]
            notes.append(
                "Concurrent loading is the largest single cost of intake here: with every table "
                "paused (no Spark job "
                f"running; diagnostic, one run each) the single-update endpoint saturates at "
                f"{_rate(ps['median_requests_per_second'])} requests/s against "
                f"{_rate(sat['median_requests_per_second'])} "
                f"with loading on, and {multi_parts}. The loads' driver-side Python (Arrow concat "
                "and cast, the batch's Parquet file, py4j round trips, the Delta commit) runs on "
                "worker threads of the same process, so it competes with the event "
                "loop for the GIL, and the JVM (reniced by `spark.driver_nice`) takes "
                f"{sat['median_jvm_cores']:.2f}–{lm[min(lm)]['median_jvm_cores']:.2f} "
                "of a core of the two."
                + (
                    f" Even without loading, {TARGET_OPEN_RATE:,} requests/s open loop gives p99 "
                    f"{_ms(po['p99_ms'])} ms: "
                    "the intake path alone costs about one core per "
                    f"{_rate(ps['median_requests_per_second'])} requests/s."
                    if po
                    else ""
                )
            )
        slow_drain = [m for m in multi if any(r["drained"] is False for r in m["runs"])]
        if slow_drain:
            notes.append("Some intake runs left updates unloaded after 180 s: loading fell behind intake.")
    fresh = results.get("freshness")
    if fresh:
        for p in fresh["policies"]:
            live, sim = p["live"], p["sim"]
            notes.append(
                f"Freshness, {p['policy']}: the live service ran {live['batches']:.0f} batches of "
                f"{live['mean_batch_seconds']:.3f} s "
                f"on average, the simulator {sim['batches']} of {sim['mean_batch_seconds']:.3f} s; "
                "LOW agrees to "
                f"{p['low_relative_difference']:+.1e} relative (same releases). Ack lag (answer "
                "time - release) p50 "
                f"{p['ack_lag_ms']['p50']:.1f} ms, max {p['ack_lag_ms']['max']:.1f} ms; tables "
                "registered within "
                f"{1e3 * p['registration_spread_seconds']:.0f} ms of each other."
            )
    if fresh:
        worse = [p for p in fresh["policies"] if p["gap"] > 0]
        if fresh["policies"]:
            p = max(fresh["policies"], key=lambda q: abs(q["gap"]))
            notes.append(
                "Where live and simulated freshness part: (1) a batch's time is not overhead + "
                "alpha x length: it varies "
                "from batch to batch and the online estimate per table ends anywhere in alpha "
                f"{p['alpha_range'][0]:.3f}–{p['alpha_range'][1]:.3f}, overhead "
                f"{p['overhead_range'][0]:.3f}–"
                f"{p['overhead_range'][1]:.3f} s (a decayed regression over few noisy points), so "
                "the simulator runs a "
                "different cost per table than the service met (costing every batch at the live "
                "mean instead gives "
                f"{p['sim']['flat_cost_ratio']:.4f} for {p['policy']}); (2) the two Spark jobs "
                "share the 2 cores with "
                "the server and each other, so a job's duration depends on what else runs, which "
                "the model's "
                "independent workers ignore; (3) an update is pending only once acknowledged (ack "
                "lag above) and a "
                "batch starts when the event loop dispatches it and the worker thread reaches "
                "Spark, while the "
                "simulator starts it at the release instant. "
                + (
                    "The live service was the staler in " + ", ".join(q["policy"] for q in worse) + "."
                    if worse
                    else "The live service was the fresher in every policy here."
                )
            )
    commit = results.get("commit")
    if commit:
        added = [c["publish_median"] + c["commit_median"] + _other(c) for c in commit["sizes"]]
        parts = "; ".join(
            f"{c['rows']:,} rows: publish + commit "
            f"{1e3 * (c['publish_median'] + c['commit_median']):.1f} ms, "
            f"table open/txn/refresh {1e3 * _other(c):.1f} ms, Spark write {c['spark_median']:.3f} "
            "s in the delta path vs "
            f"{c['bare_median']:.3f} s bare"
            for c in commit["sizes"]
        )
        notes.append(
            "Commit path: what the delta-rs path adds to the Spark write is the rename of the "
            "part files, the deltalake "
            "commit and opening/refreshing the table handle: "
            f"{1e3 * min(added):.0f}–{1e3 * max(added):.0f} ms per batch here, whatever its size ("
            + parts
            + "). The rest of the difference is in the Spark write itself, the same DataFrame "
            "and job in both "
            "paths, and lies within its run-to-run spread (see the bare range)."
        )
    return notes


# =====================================================================================
# Tables
# =====================================================================================
def targets_table(results: dict[str, Any]) -> TableRows:
    return (
        ["target", "measured", "goal", "result"],
        [[t["target"], t["measured"], t["goal"], t["status"]] for t in results["targets"]],
    )


def closed_table(intake: dict[str, Any]) -> TableRows:
    headers = [
        "endpoint",
        "updates/request",
        "connections",
        "updates/s",
        "requests/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "fsyncs/s",
        "records/fsync",
        "fsync ms",
        "service cores",
        "JVM cores",
        "generator cores",
    ]
    rows: Rows = []
    entries = [("POST /v1/updates", m, m["updates_per_request"]) for m in intake["multi"]]
    entries.append(("POST /v1/tables/{t}/updates", intake["single_saturation"], 1))
    for name, m, size in entries:
        rows.append(
            [
                name,
                size,
                m["connections"],
                f"{_rate(m['median_updates_per_second'])} "
                f"({_rate(m['min_updates_per_second'])}–{_rate(m['max_updates_per_second'])})",
                _rate(m["median_requests_per_second"]),
                _ms(m["median_p50_ms"]),
                _ms(m["median_p99_ms"]),
                _ms(m["median_p999_ms"]),
                _rate(m["median_fsyncs_per_second"]),
                f"{m['median_records_per_fsync']:.1f}",
                f"{m['median_mean_fsync_ms']:.2f}",
                f"{m['median_python_cores']:.2f}",
                f"{m['median_jvm_cores']:.2f}",
                f"{m['median_generator_cores']:.2f}",
            ]
        )
    return headers, rows


def open_table(intake: dict[str, Any]) -> TableRows:
    headers = [
        "offered requests/s",
        "answered in window/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "unanswered",
        "send→answer p50 / p99 ms",
        "fsyncs/s",
        "records/fsync",
        "service cores",
        "JVM cores",
        "generator cores",
    ]
    rows: Rows = []
    for r in intake["single_open"]:
        rows.append(
            [
                f"{r['rate']:,}",
                _rate(r["answered_in_window_per_second"]),
                _ms(r["p50_ms"]),
                _ms(r["p99_ms"]),
                _ms(r["p999_ms"]),
                _ms(r["max_ms"]),
                r["unanswered"],
                f"{_ms(r['service_p50_ms'])} / {_ms(r['service_p99_ms'])}",
                _rate(r["wal"]["fsyncs_per_second"]),
                f"{r['wal']['records_per_fsync']:.1f}",
                f"{r['cpu']['python_cores']:.2f}",
                f"{r['cpu']['jvm_cores']:.2f}",
                f"{r['generator_cores']:.2f}",
            ]
        )
    return headers, rows


def freshness_table(fresh: dict[str, Any]) -> TableRows:
    headers = [
        "policy",
        "live ratio",
        "simulated ratio",
        "gap",
        "result",
        "sim, flat cost",
        "live max stretch",
        "sim max stretch",
        "batches live / sim",
        "mean batch s live / sim",
        "measured alpha",
        "measured overhead s",
    ]
    rows: Rows = []
    for p in fresh["policies"]:
        live, sim = p["live"], p["sim"]
        rows.append(
            [
                p["policy"],
                f"{live['staleness_ratio']:.4f}",
                f"{sim['staleness_ratio']:.4f}",
                f"{100 * p['gap']:+.1f}%",
                status(abs(p["gap"]) <= TARGET_GAP),
                f"{sim['flat_cost_ratio']:.4f}",
                fmt_num(live["max_stretch"]),
                fmt_num(sim["max_stretch"]),
                f"{live['batches']:.0f} / {sim['batches']}",
                f"{live['mean_batch_seconds']:.3f} / {sim['mean_batch_seconds']:.3f}",
                f"{p['alpha_range'][0]:.4f}–{p['alpha_range'][1]:.4f}",
                f"{p['overhead_range'][0]:.3f}–{p['overhead_range'][1]:.3f}",
            ]
        )
    return headers, rows


def _other(size: dict[str, Any]) -> float:
    """Median per run of the delta path's time outside Spark, publish and commit: opening the
    DeltaTable, reading the app transaction, refreshing the handle after the commit."""
    return _median(
        [
            d["total_seconds"] - d["spark_seconds"] - d["publish_seconds"] - d["commit_seconds"]
            for d in size["delta_details"]
        ]
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return float("nan") if not n else (ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2]))


def commit_table(commit: dict[str, Any]) -> TableRows:
    headers = [
        "rows per batch",
        "updates per batch",
        "delta-rs load s",
        "of which Spark write s",
        "publish ms",
        "commit ms",
        "table open + txn check + refresh ms",
        "bare Spark Parquet s",
        "bare range s",
        "difference ms",
        "difference %",
    ]
    rows: Rows = []
    for s in commit["sizes"]:
        rows.append(
            [
                f"{s['rows']:,}",
                s["updates_per_batch"],
                f"{s['delta_median']:.3f}",
                f"{s['spark_median']:.3f}",
                f"{1e3 * s['publish_median']:.1f}",
                f"{1e3 * s['commit_median']:.1f}",
                f"{1e3 * _other(s):.1f}",
                f"{s['bare_median']:.3f}",
                f"{min(s['bare_seconds']):.3f}–{max(s['bare_seconds']):.3f}",
                f"{1e3 * s['overhead_median']:+.0f}",
                f"{100 * s['overhead_median'] / s['bare_median']:+.0f}%",
            ]
        )
    return headers, rows


# =====================================================================================
# Markdown and console
# =====================================================================================
def _paused_open_note(intake: dict[str, Any]) -> str:
    """The same open-loop run with loading paused: what intake alone achieves (diagnostic)."""
    runs = (intake.get("paused") or {}).get("single_open") or []
    run = next((r for r in runs if r.get("rate") == TARGET_OPEN_RATE), None)
    if run is None:
        return ""
    return (
        f"; with loading paused (intake alone, diagnostic): p99 {_ms(run['p99_ms'])} ms, "
        f"answered {_rate(run['answered_in_window_per_second'])}/s"
    )


FINDINGS = """\
What changed in the service after the first run of this benchmark (py-spy profiles of the
closed-loop single-update run; first run: 3,662 updates/s multi, 439 requests/s single with
loading on, 825 with loading paused):

- `api/deps.py`: the dependencies were plain `def`, so FastAPI ran each in its thread pool
  (two hand-offs per request, ~15% of the event loop's samples): now `async def`.
- `Update.nbytes` used `pyarrow.Table.nbytes`, which releases and re-takes the GIL (3.8 ms
  per call while a loader thread runs Python; ~22% of the event loop's samples): now
  `get_total_buffer_size()`.
- The two intake routes read token, headers and body themselves instead of through FastAPI's
  dependency machinery (about a third of a small request's cost).
- A batch's in-memory rows reach Spark as a Parquet file written by pyarrow (GIL released)
  instead of `createDataFrame` through py4j; `loader serve` sets the interpreter's switch
  interval to 1 ms (section *A load beside a busy request handler*) and renices the local
  driver JVM (`spark.driver_nice`, default 10) so loads yield the CPU to acks.

What remains: with loading on, the Spark jobs (about 0.2 s of JVM CPU each, back to back on
2 workers) and their driver-side Python share the 2 cores and the GIL with the request
handler. Running the Spark driver in a process of its own is the next step if a deployment
needs p99 < 20 ms at 1,000 single-update requests/s while loading on two cores.
"""


def _md(spec: TableRows, align: str | None = None) -> str:
    return md_table(*spec, align=align)


def render_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    parts = ["## Service (`benchmarks/service/`)", "", machine_markdown(meta, package="loader")]
    parts.append(
        f"Also api/*.py sha256 {meta['machine'].get('api_sha256', '?')}. Every process below "
        "(server with its "
        "Spark JVM, load generator) shares the same 2 cores; nothing runs on a second machine.\n"
    )
    parts += ["### Targets", "", _md(targets_table(results), "lllc"), ""]
    intake = results.get("intake")
    if intake:
        parts += [
            "### 1. Intake (durable mode: WAL fsync before every 202)",
            "",
            f"`loader serve` as a subprocess on loopback: {intake['tables']} tables of schema (id "
            "int64, v float64, "
            f"s string), {intake['workers']} workers, Spark `{intake['spark_master']}`, delta-rs "
            "writer, policy myopic, "
            f"ready {intake['server_ready_seconds']:.1f} s after launch. Each update holds "
            f"{intake['rows_per_update']} "
            f"small rows (like `{intake['row_example']}`). The server keeps loading everything it "
            "acknowledges into "
            "Delta during the runs (that cost is included) and every run waits until Delta holds "
            "all of it before "
            "the next starts.",
            "",
            "Load generator: `testing/loadgen.py`, one separate process, raw HTTP/1.1 "
            "keep-alive "
            "connections on asyncio with uvloop (prebuilt request bytes; httpx is too slow a "
            "client for these rates "
            "on 2 cores). Closed loop: each connection sends its next request when the previous "
            "answer arrives. "
            "Open loop: requests are scheduled at a constant rate and handed to the first free "
            "connection of a "
            "pool of 32; latency is measured from the scheduled send time, so queueing in the "
            "server or in the "
            "generator is charged (no coordinated omission). fsyncs/s and records/fsync come from "
            "/metrics "
            "(`loader_wal_fsync_duration_seconds_count`, "
            "`loader_wal_records_per_fsync_sum/_count`) around each run; "
            "cores are CPU seconds per wall second from /proc (service = the Python process, JVM "
            "= the rest of its "
            "process group).",
            "",
            f"Closed loop at saturation: {intake['warmup_seconds']:g} s warm-up then a "
            f"{intake['window_seconds']:g} s "
            f"window; **median of {intake['repeats']} run(s)** (throughput range in brackets; "
            "percentiles are per run, "
            "then the median).",
            "",
            _md(closed_table(intake)),
            "",
            "Open loop on the single-update endpoint: one run per rate, "
            f"{intake['warmup_seconds']:g} s warm-up then "
            f"a {intake['open_window_seconds']:g} s window; every request scheduled in the window "
            "counts (percentiles "
            'over all of them; "answered in window" = answers received inside the window per '
            "second).",
            "",
            _md(open_table(intake)),
            "",
        ]
        paused = intake.get("paused")
        if paused and paused.get("single_saturation"):
            parts += [
                "Diagnostic, intake alone: the same runs with every table paused (POST "
                "/v1/admin/tables/{t}/pause), "
                "so no Spark load competes with intake; **one run each**; afterwards the tables "
                "were resumed and the "
                f"backlog loaded in {paused['backlog_seconds']:.1f} s.",
                "",
                _md(closed_table(paused)),
                "",
                _md(open_table(paused)),
                "",
            ]
    fresh = results.get("freshness")
    if fresh:
        parts += [
            "### 2. End-to-end freshness: live service vs simulator",
            "",
            f"Trace: `schedulers.generators.quasiperiodic`, {fresh['tables']} tables, periods "
            f"{fresh['periods']} s "
            f"(inter-arrival uniform in [B/2, B]), {fresh['horizon']:g} s, seed {fresh['seed']}: "
            f"{fresh['updates']} "
            f"updates of {fresh['rows_per_update']} rows. Per policy a fresh `loader serve` "
            f"({fresh['workers']} workers) "
            "registers the tables (POST /v1/admin/tables), then each update is sent at wall time "
            "t0 + release with "
            "`data_until` = t0 + release, so release times are exact. Once every update is "
            "loaded, GET /v1/tables "
            "gives per table `staleness_integral_at_last_load`, `low_bound`, `alpha`, "
            "`overhead_seconds` and "
            "`max_stretch`; live ratio = sum of integrals / sum of LOW. The simulator "
            "(`schedulers.simulator.simulate`, "
            "same policy, same workers) replays the same releases measured from each table's "
            "registration time "
            "(where the live accounting of a table starts), each table with the alpha/overhead "
            "the live service "
            "measured for it (its final online estimate). 'Sim, flat cost': the same simulation "
            "with every batch "
            "costing the live mean batch duration (alpha 0), to show how much the per-table "
            "estimates matter. One "
            "run per policy; the figures are exact sums, not samples.",
            "",
            _md(freshness_table(fresh)),
            "",
        ]
    commit = results.get("commit")
    if commit:
        parts += [
            "### 3. Per-batch cost of the Delta commit path",
            "",
            "`DeltaRsSink.load` (read the app transaction, Spark writes Parquet to a staging "
            "directory, rename into "
            f"the table with footer statistics, one `deltalake` commit) against a bare "
            "`build_batch_frame(...).write.parquet(...)` of the same batch (updates of "
            f"{commit['rows_per_update']} "
            f"rows), Spark `{commit['master']}` in a process of its own. **Median of "
            f"{commit['runs']} runs** per "
            "size and path, alternating, after one untimed warm-up of each.",
            "",
            _md(commit_table(commit)),
            "",
        ]
    if results.get("notes"):
        parts += ["### Notes", ""] + [f"- {n}" for n in results["notes"]] + [""]
    if intake:
        parts += [FINDINGS]
    return "\n".join(parts).rstrip() + "\n"


def print_console(results: dict[str, Any]) -> None:
    print_table("Service targets", *targets_table(results))
    intake = results.get("intake")
    if intake:
        print_table("Intake, closed loop (median of runs)", *closed_table(intake))
        print_table("Intake, open loop, single-update endpoint", *open_table(intake))
    if results.get("freshness"):
        print_table("Freshness: live vs simulator", *freshness_table(results["freshness"]))
    if results.get("commit"):
        print_table("Commit path vs bare Parquet write", *commit_table(results["commit"]))
