"""Intake over several processes (issue 36, part 5): ``intake.acceptors`` = 0 (HTTP in the
service's own process) against acceptor processes (api/acceptors/), side by side in one run.

For each setting, interleaved ``--repeats`` times: ``loader serve`` in its default connect
mode with the isolation benchmark's 8 tables (3 small rows an update), closed-loop saturation
of the single-update route with every table paused (intake alone) and then loading on, of
100-update requests to ``POST /v1/updates`` with loading on, and the single-update route at
1,000 requests/s open loop with loading on; the bare FastAPI endpoint's saturation in the same
run is the ceiling the targets are set against. CPU by process kind: the service's process,
its acceptors, its load workers, its Spark server.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import service as serving
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from benchmarks.isolation.__main__ import bare_server, closed, drain, open_loop
from testing import service_server as srv
from testing.report import log, machine_markdown

TARGET_P99_MS = 20.0
TARGET_CEILING_SHARE = 0.6
TARGET_MULTI_UPDATES = 30_000.0
T = Template("acceptors")


def one_setting(acceptors: int, timing: tuple[float, float]) -> dict[str, Any]:
    extra = {"spark": {"master": srv.SPARK_MASTER, "mode": "connect"}, "intake": {"acceptors": acceptors}}
    out: dict[str, Any] = {"acceptors": acceptors}
    with srv.running_service(tables=serving.INTAKE_TABLES, workers=serving.WORKERS, extra=extra) as service:
        target = (service.port, service.pid)
        serving.pause(service, True)
        out["paused"] = closed(target, 1, timing, 1)
        serving.pause(service, False)
        # Each part starts with nothing left to load: a backlog from the part before would
        # compete with it (and the faster intake left the larger one).
        drain(service)
        out["single"] = closed(target, 1, timing, 1)
        drain(service)
        out["multi"] = closed(target, 100, timing, 1)
        drain(service)
        out["open"] = open_loop(target, 1, 1000, timing)
    log(
        f"[{acceptors} acceptors] paused {out['paused']['median_requests_per_second']:,.0f} req/s, loading on "
        f"{out['single']['median_requests_per_second']:,.0f} req/s, 100/request "
        f"{out['multi']['median_updates_per_second']:,.0f} updates/s, open 1,000/s p99 {out['open']['p99_ms']:.1f} ms"
    )
    return out


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    timing = (1.0, 4.0) if args.quick else (2.0, 8.0)
    counts = [int(n) for n in args.acceptors.split(",")]
    run.meta.update(acceptors=args.acceptors, tables=len(serving.INTAKE_TABLES), rows=serving.ROWS_PER_UPDATE)
    run.meta.update(warmup=timing[0], duration=timing[1])
    with bare_server() as bare:
        ceiling = closed(bare, 1, timing, args.repeats)
    log(f"[bare] ceiling {ceiling['median_requests_per_second']:,.0f} req/s")
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for n in counts:
            runs.setdefault(str(n), []).append(one_setting(n, timing))
            run.save({"ceiling": ceiling, "runs": runs})  # (an interrupted run keeps what it measured)
    return {"ceiling": ceiling, "runs": runs}


def summary(settings: list[dict[str, Any]]) -> dict[str, Any]:
    """One setting's medians over its runs."""

    def median_of(part: str, key: str) -> float:
        return medians([r[part] for r in settings], [key])[key]

    return {
        "paused_rps": median_of("paused", "median_requests_per_second"),
        "single_rps": median_of("single", "median_requests_per_second"),
        "single_p99_ms": median_of("single", "median_p99_ms"),
        "multi_ups": median_of("multi", "median_updates_per_second"),
        "open_p99_ms": median_of("open", "p99_ms"),
        "open_answered": median_of("open", "answered_per_second"),
        "cores_single": medians(r["single"]["median_cores"] for r in settings),
        "cores_paused": medians(r["paused"]["median_cores"] for r in settings),
    }


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    ceiling = results["ceiling"]["median_requests_per_second"]
    rows = []
    for n, s in ((n, summary(settings)) for n, settings in results["runs"].items()):
        rows.append(
            {
                **s,
                "acceptors": int(n),
                "share": s["single_rps"] / ceiling,
                "service_paused": s["cores_paused"]["service"],
                "acceptors_paused": s["cores_paused"].get("acceptors", 0.0),
                "service": s["cores_single"]["service"],
                "acceptor_cores": s["cores_single"].get("acceptors", 0.0),
                "spark": s["cores_single"]["spark"],
                "workers": s["cores_single"]["workers"],
                "us_paused": 1e6 * (s["cores_paused"]["service"]) / s["paused_rps"],
                "us_paused_all": 1e6
                * (s["cores_paused"]["service"] + s["cores_paused"].get("acceptors", 0.0))
                / s["paused_rps"],
            }
        )
    best = max(rows, key=lambda r: r["single_rps"])
    p99 = min(r["open_p99_ms"] for r in rows)
    multi = max(r["multi_ups"] for r in rows)
    share = f"{best['share']:.0%} of the bare ceiling ({best['single_rps']:,.0f} of {ceiling:,.0f} requests/s"
    verdicts = [
        f"- single-update p99 at 1,000 requests/s open loop, loading on: {p99:.1f} ms at best (target "
        f"{TARGET_P99_MS:.0f} ms): " + ("met" if p99 <= TARGET_P99_MS else "**missed**"),
        f"- single-update saturation, loading on: {share}, {best['acceptors']} acceptors; target "
        f"{TARGET_CEILING_SHARE:.0%}): " + ("met" if best["share"] >= TARGET_CEILING_SHARE else "**missed**"),
        f"- 100-update requests, loading on: {multi:,.0f} updates/s at best (target {TARGET_MULTI_UPDATES:,.0f}): "
        + ("met" if multi >= TARGET_MULTI_UPDATES else "**missed**"),
    ]
    base = next(r for r in rows if r["acceptors"] == 0)
    split = min((r for r in rows if r["acceptors"] > 0), key=lambda r: r["us_paused"], default=base)
    multi_row = max(rows, key=lambda r: r["multi_ups"])
    cause = T(
        "cause",
        us0=base["us_paused"],
        us1=split["us_paused"],
        spark=base["spark"],
        workers=base["workers"],
        service=base["service"],
        share=base["share"],
        rps=base["single_rps"],
        per_update=1e6 * (multi_row["service"] + multi_row["acceptor_cores"]) / multi_row["multi_ups"],
        need=TARGET_MULTI_UPDATES * (multi_row["service"] + multi_row["acceptor_cores"]) / multi_row["multi_ups"],
    )
    return T(
        "section",
        cause=cause,
        machine=machine_markdown(meta, "loader"),
        meta=meta,
        ceiling=ceiling,
        verdicts="\n".join(verdicts),
        table=T.table("table", rows, "lrrrrrrrrrrrrr"),
    )


def options(parser: Any) -> None:
    parser.add_argument("--acceptors", default="0,1,2", help="intake.acceptors settings, comma-separated")


BENCHMARK = Benchmark(measure, render, repeats=(1, 3), seed=36, options=options)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
