"""What production saw, exported for the simulator: GET /v1/admin/trace and /schedule,
``loader export-trace`` and ``loader report`` (runs and simulations), and the rings' bounds.

The service runs in-process with the Spark-free sink; a seeded stream of updates with
``data_until`` goes to two tables, and the export must give back exactly the acknowledged
releases, shifted to the trace's time 0, with the service's current cost estimates.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from cli.plots import build_run
from loader.loading.observed import ObservedRecord, ObservedTable
from loader.service import LoaderService
from producer import LoaderProducer
from schedulers.freshness import evaluate_schedule
from schedulers.model import BatchRecord, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.traces import parse_trace, read_schedule, read_trace
from testing.service_harness import OPERATOR, PRODUCER, Harness, serve_in_thread

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TABLES = ("orders", "clicks")
runner = CliRunner(env={"COLUMNS": "400"})


def _row(table: str, k: int) -> dict[str, Any]:
    return {"order_id": k, "amount": k * 0.5, "country": "DE"} if table == "orders" else {"url": f"/{k}", "n": k}


def _plan(service: LoaderService, seed: int, count: int) -> list[tuple[str, float]]:
    """A seeded stream: (table, data_until), increasing per table, after registration."""
    rng = random.Random(seed)
    upto = {t: service.catalog.entries[t].created_at for t in TABLES}
    plan = []
    for _ in range(count):
        table = rng.choice(TABLES)
        upto[table] += rng.uniform(0.001, 0.004)
        plan.append((table, upto[table]))
    return plan


def _wait_clock(plan: list[tuple[str, float]]) -> None:
    """data_until in the past, so the service takes each as given (a future one counts as now)."""
    latest = max(until for _, until in plan)
    Harness.wait(lambda: time.time() > latest, timeout=5)


def _post_stream(
    h: Harness, seed: int, count: int, arrivals: list[tuple[float, str]] | None = None
) -> dict[str, list[float]]:
    """Posts the stream; returns each table's acknowledged releases (``arrivals``: all of
    them in the order the service took them)."""
    plan = _plan(h.service, seed, count)
    _wait_clock(plan)
    acked: dict[str, list[float]] = {t: [] for t in TABLES}
    for k, (table, until) in enumerate(plan):
        r = h.post(f"/v1/tables/{table}/updates", json={"rows": [_row(table, k)], "data_until": until})
        assert r.status_code == 202, r.text
        ack = r.json()["updates"][0]
        assert ack["release_time"] == pytest.approx(until, abs=2e-6)  # in the past: taken as given (to the µs)
        acked[table].append(ack["release_time"])
        if arrivals is not None:
            arrivals.append((ack["release_time"], table))
    for table in TABLES:
        h.wait_loaded(table, len(acked[table]))
    return acked


def _ndjson_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _schedule(text: str) -> list[BatchRecord]:
    return [BatchRecord(**json.loads(line)) for line in _ndjson_lines(text)]


def _assert_png(path: Path) -> None:
    assert path.stat().st_size > 1000, path
    assert path.read_bytes()[:8] == PNG_MAGIC, path


def _check_trace(trace: Trace, acked: dict[str, list[float]], origin: float, service: LoaderService) -> None:
    assert [spec.name for spec in trace.tables] == list(TABLES)
    per_table = dict(zip((spec.name for spec in trace.tables), trace.releases_by_table()))
    for table in TABLES:
        assert per_table[table] == [release - origin for release in acked[table]]
    # Time 0 is the earliest start of a table's first data interval: here a registration.
    assert origin == min(service.catalog.entries[t].created_at for t in TABLES)
    for spec in trace.tables:
        state = service.dispatcher.state(spec.name)
        assert (spec.alpha, spec.overhead, spec.weight) == (state.alpha, state.overhead, state.weight)
        assert spec.period == state.period_hint
    assert service.dispatcher.estimates[0].observations > 0  # measured, not the configured values
    result = simulate(trace, make_policy("myopic"), workers=2)
    assert result.freshness.updates == sum(map(len, acked.values()))
    assert math.isfinite(result.freshness.total_staleness) and math.isfinite(result.freshness.staleness_ratio)
    assert result.freshness.staleness_ratio >= 1.0 - 1e-9


def test_the_endpoint_exports_the_acknowledged_releases_and_the_estimates(harness: Harness) -> None:
    acked = _post_stream(harness, seed=5, count=60)
    response = harness.get("/v1/admin/trace")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    origin = float(response.headers["X-Trace-Origin"])
    assert response.headers["X-Trace-Updates"] == response.headers["X-Trace-Recorded"] == "60"
    assert response.headers["X-Trace-Dropped"] == "0"
    assert response.headers["X-Trace-Capacity"] == "1000000"
    assert response.headers["X-Loader-Policy"] == "myopic+groups(32)" and response.headers["X-Loader-Workers"] == "2"
    assert float(response.headers["X-Loader-Job-Overhead"]) >= 0
    trace = parse_trace(_ndjson_lines(response.text))
    _check_trace(trace, acked, origin, harness.service)

    # The schedule of the same origin covers the trace exactly; the earliest-registered
    # table starts at time 0, so its figures are the live ledger's.
    response = harness.get(f"/v1/admin/schedule?origin={origin!r}")
    assert response.status_code == 200, response.text
    batches = _schedule(response.text)
    assert response.headers["X-Schedule-Batches"] == str(len(batches)) and batches
    assert sum(b.n_updates for b in batches) == 60
    summary = evaluate_schedule(trace, batches)
    assert build_run(trace, batches).summary == summary
    first = min(TABLES, key=lambda t: harness.service.catalog.entries[t].created_at)
    live = harness.service.dispatcher.ledger.table(harness.service.dispatcher.index[first])
    exported = next(t for t in summary.tables if t.name == first)
    assert exported.staleness == pytest.approx(live.staleness, rel=1e-6)
    assert exported.low_bound == pytest.approx(live.low_bound, rel=1e-6)
    assert exported.max_stretch == pytest.approx(live.max_stretch, rel=1e-6)

    # Without an origin, the schedule uses the one the trace uses.
    assert harness.get("/v1/admin/schedule").headers["X-Schedule-Origin"] == repr(origin)


def test_filters_and_access(harness: Harness) -> None:
    acked = _post_stream(harness, seed=9, count=20)
    only = harness.get("/v1/admin/trace?tables=clicks")
    assert only.status_code == 200
    trace = parse_trace(_ndjson_lines(only.text))
    assert [s.name for s in trace.tables] == ["clicks"] and trace.n_updates == len(acked["clicks"])
    # A since window far longer than the test keeps everything; the origin is then the
    # registration again (no release before the window).
    window = harness.get("/v1/admin/trace?since=3600").headers
    assert window["X-Trace-Updates"] == "20"
    assert window["X-Trace-Origin"] == harness.get("/v1/admin/trace").headers["X-Trace-Origin"]
    # A window after the last release exports table lines only.
    empty = harness.get("/v1/admin/trace?since=0.000001")
    assert parse_trace(_ndjson_lines(empty.text)).n_updates == 0
    assert harness.get("/v1/admin/schedule?tables=orders&since=3600").status_code == 200
    assert harness.get("/v1/admin/trace?tables=nope").status_code == 404
    assert harness.get("/v1/admin/trace?tables=orders,,clicks").status_code == 422
    assert harness.get("/v1/admin/trace?since=-1").status_code == 422
    assert harness.get("/v1/admin/trace", token=PRODUCER).status_code == 403
    assert harness.get("/v1/admin/schedule", token=None).status_code == 401


def test_the_jobs_export_gives_each_loaded_jobs_timeline(harness: Harness) -> None:
    """``GET /v1/admin/jobs``: one line per job, its tables those the schedule's batches
    loaded, its marks in order; the per-stage metric counts them."""
    _post_stream(harness, seed=13, count=30)
    harness.wait(lambda: not harness.service.dispatcher.busy_workers and harness.service.dispatcher.observed.jobs)
    response = harness.get("/v1/admin/jobs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    jobs = [json.loads(line) for line in _ndjson_lines(response.text)]
    assert response.headers["X-Jobs-Lines"] == str(len(jobs)) and response.headers["X-Jobs-Capacity"] == "10000"
    assert int(response.headers["X-Jobs-Recorded"]) >= len(jobs) > 0
    for job in jobs:
        marks = job["marks"]
        assert marks["chosen"] <= marks["thread_start"] <= marks["reported"], marks
        assert job["tables"] and all(t["loaded"] for t in job["tables"]) and job["service_cpu"] > 0
        assert set(job["stages"]) <= {"dispatch", "handoff", "transport", "prepare", "spark", "commits", "reply"}
    loaded = sorted(t["table"] for job in jobs for t in job["tables"])
    assert loaded == sorted(b.table for b in _schedule(harness.get("/v1/admin/schedule").text))
    metrics = harness.get("/metrics").text
    assert f'loader_job_stage_seconds_count{{stage="dispatch"}} {float(len(jobs))}' in metrics
    assert harness.get("/v1/admin/jobs?since=0.000001").headers["X-Jobs-Lines"] == "0"
    assert harness.get("/v1/admin/jobs", token=PRODUCER).status_code == 403


def test_the_rings_keep_the_newest_and_say_what_they_dropped(tmp_path: Path) -> None:
    with Harness(tmp_path / "data", observed_trace_max_updates=7, observed_schedule_max_batches=3) as h:
        arrivals: list[tuple[float, str]] = []
        acked = _post_stream(h, seed=11, count=25, arrivals=arrivals)
        response = h.get("/v1/admin/trace")
        assert response.headers["X-Trace-Recorded"] == "25"
        assert response.headers["X-Trace-Dropped"] == "18"
        assert response.headers["X-Trace-Capacity"] == "7"
        origin = float(response.headers["X-Trace-Origin"])
        trace = parse_trace(_ndjson_lines(response.text))
        newest = arrivals[-7:]  # the ring keeps the last recorded, whatever their release times
        assert sorted(zip(trace.update_releases, (trace.tables[t].name for t in trace.update_tables))) == sorted(
            (release - origin, table) for release, table in newest
        )
        # Each table's oldest kept update starts at its newest dropped release: time 0 is
        # the earliest of those.
        starts = []
        for table in TABLES:
            kept = [r for r, t in newest if t == table]
            if kept:
                before = [r for r in acked[table] if r < kept[0]]
                starts.append(before[-1] if before else h.service.catalog.entries[table].created_at)
        assert origin == min(starts)
        assert simulate(trace, make_policy("myopic"), 2).freshness.updates == 7

        schedule = h.get(f"/v1/admin/schedule?origin={origin!r}")
        batches = _schedule(schedule.text)
        recorded = int(schedule.headers["X-Schedule-Recorded"])
        assert len(batches) == 3 == int(schedule.headers["X-Schedule-Batches"])
        assert int(schedule.headers["X-Schedule-Dropped"]) == recorded - 3
        assert [b.finish for b in batches] == sorted(b.finish for b in batches)  # finishing order
        run = build_run(trace, batches)  # partial: reported over what the rings cover
        assert run.summary.updates + run.unloaded_updates == 7
        assert run.summary.batches + run.skipped_batches == 3
        assert run.exact or run.notes()


def test_ring_unit_wraps_in_order() -> None:
    record = ObservedRecord(max_updates=1000, max_batches=10)
    record.add_table(0, 100.0)
    record.add_table(1, 50.0)
    for k in range(2500):
        record.release(k % 2, 1000.0 + k)
    for k in range(25):
        record.batch(k % 2, 0, 2000.0 + k, 2000.5 + k, 1000.0 + k, 1000.0 + k, 1)
    specs = [ObservedTable("a", 0.1, 0.0, 1.0, None), ObservedTable("b", 0.2, 0.1, 2.0, 5.0)]
    snapshot = record.snapshot_trace(specs, [0, 1])
    assert snapshot.releases.tolist() == [1000.0 + k for k in range(1500, 2500)]
    assert (snapshot.recorded, snapshot.dropped, record.memory_bytes) == (2500, 1500, 1000 * 12 + 10 * 48)
    assert snapshot.origin == 1000.0 + 1498  # table 0's newest dropped release (1499 is table 1's)
    trace = parse_trace("".join(snapshot.lines()).splitlines())
    assert trace.update_releases[0] == 2.0 and trace.tables[1].period == 5.0
    schedule = record.snapshot_schedule({0: "a"}, origin=1000.0)
    assert [b.first_release for b in schedule.records()] == [16.0, 18.0, 20.0, 22.0, 24.0]
    assert schedule.dropped == 8  # table 0's share of the 15 dropped batches
    window = record.snapshot_trace(specs, [0, 1], since=1000.0 + 2400)
    assert window.n_updates == 100 and window.starts == {0: 1000.0 + 2398, 1: 1000.0 + 2399}
    assert window.origin == 1000.0 + 2398
    assert record.snapshot_schedule({0: "a", 1: "b"}, origin=0.0, since=2000.5 + 23).n_batches == 2
    off = ObservedRecord(0, 0)
    off.add_table(0, 0.0)
    off.release(0, 1.0)
    assert off.snapshot_trace(specs[:1], [0]).n_updates == 0


def test_export_trace_command_and_report_on_the_run_and_a_simulation(tmp_path: Path) -> None:
    with serve_in_thread(tmp_path / "data") as (url, service):
        plan = _plan(service, seed=3, count=40)
        _wait_clock(plan)
        acked: dict[str, list[float]] = {t: [] for t in TABLES}
        with LoaderProducer(url=url, token=PRODUCER) as producer:
            for k, (table, until) in enumerate(plan):
                # One update each (a key of its own is never coalesced), acknowledged in turn.
                ack = producer.send(table, [_row(table, k)], data_until=until, key=f"trace/{k}").result()
                acked[table].append(ack.release_time)
        Harness.wait(lambda: all(service.intake.tables[t].committed_seq >= len(acked[t]) for t in TABLES))
        out, schedule_out, jobs_out = tmp_path / "trace.jsonl", tmp_path / "schedule.jsonl", tmp_path / "jobs.jsonl"
        result = runner.invoke(
            app,
            [
                *("export-trace", "--url", url, "--token", OPERATOR, "--out", str(out)),
                *("--schedule-out", str(schedule_out), "--jobs-out", str(jobs_out)),
            ],
        )
        assert result.exit_code == 0, result.output
        assert "40 updates" in result.stderr and "myopic on 2 workers" in result.stderr
        assert f"--jobs {jobs_out}" in result.stderr and " jobs" in result.stderr
        trace = read_trace(out)
        origin = min(service.catalog.entries[t].created_at for t in TABLES)
        _check_trace(trace, acked, origin, service)
        batches = read_schedule(schedule_out)
        assert evaluate_schedule(trace, batches).updates == 40

        bad = runner.invoke(app, ["export-trace", "--url", url, "--token", PRODUCER, "--out", str(tmp_path / "x")])
        assert bad.exit_code == 2 and "HTTP 403" in bad.output and not (tmp_path / "x").exists()

    # The simulator with the stage costs the jobs' timelines measured (``--jobs``).
    staged = runner.invoke(app, ["compare", "--trace", str(out), "--workers", "2", "--jobs", str(jobs_out), "--json"])
    assert staged.exit_code == 0, staged.output
    assert {r["policy"] for r in json.loads(staged.stdout.splitlines()[-1])["results"]} >= {"myopic", "fifo"}
    (tmp_path / "not-jobs.jsonl").write_text('{"worker": 0}\n')
    refused = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(out),
            "--policy",
            "myopic",
            "--workers",
            "2",
            "--jobs",
            str(tmp_path / "not-jobs.jsonl"),
        ],
    )
    assert refused.exit_code == 2 and "is not a jobs export" in refused.output

    for mode, args in (
        ("run", ["--schedule", str(schedule_out)]),
        ("simulation", ["--policy", "myopic", "--workers", "2"]),
    ):
        plots = tmp_path / f"plots-{mode}"
        result = runner.invoke(app, ["report", "--trace", str(out), *args, "--out-dir", str(plots)])
        assert result.exit_code == 0, result.output
        for name in ("staleness.png", "ratio.png", "stretch.png"):
            _assert_png(plots / name)
            assert f"wrote {plots / name}" in result.stdout
        assert "40 updates" in result.stdout


def test_report_refuses_unclear_requests(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"table","name":"a","alpha":0.1}\n{"type":"update","table":"a","release":1.0}\n')
    both = runner.invoke(
        app,
        [
            "report",
            "--trace",
            str(trace),
            "--schedule",
            str(trace),
            "--policy",
            "myopic",
            "--out-dir",
            str(tmp_path / "p"),
        ],
    )
    assert both.exit_code == 2 and "not both" in both.output
    neither = runner.invoke(app, ["report", "--trace", str(trace), "--out-dir", str(tmp_path / "p")])
    assert neither.exit_code == 2 and "--schedule FILE" in neither.output
    missing = runner.invoke(
        app,
        ["report", "--trace", str(trace), "--schedule", str(tmp_path / "none.jsonl"), "--out-dir", str(tmp_path / "p")],
    )
    assert missing.exit_code == 2 and "does not exist" in missing.output
