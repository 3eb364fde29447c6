"""The fixed cost of one small load, where it goes, and what each lean change saves.

    python -m benchmarks.load_cost              # full run (~25 min on 2 cores)
    python -m benchmarks.load_cost --quick      # smoke run (~4 min): writes load_cost-quick.json only
    python -m benchmarks.load_cost --skip cluster
    python -m benchmarks.load_cost --rerender   # the saved results again, and their section

The full run rewrites the ``load-cost`` section of BENCHMARKS.md and
``benchmarks/results/load_cost.json``. Every load is ``DeltaRsSink.load`` (Spark writes
Parquet into a staging directory, the files are renamed into the table, one deltalake
commit), of updates of 100 rows of a 3-column table, in worker processes
(``benchmarks.load_cost.worker``) so each JVM goes away with its process. Three parts:

1. changes: ``local[2]``, 1 update of 100 rows; baseline (no lean change), each lean
   change alone, the default set, the default set without each of its changes and with
   each of the others, loaded in rotating order in one session, after warm-up rounds;
   several such runs (each a fresh JVM), medians. The target row comes from here.
2. breakdown, ``local[2]``: 1, 10 and 100 updates, baseline and the default set: each load's
   steps timed in Python, its py4j round trips counted, its Spark job cut into phases by
   Spark's event log, the JVM's CPU by thread kind, a Java Flight Recorder profile.
3. breakdown, standalone cluster: the same against a master and a worker this benchmark
   starts (``spark-class`` of the pyspark package) and stops.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.load_cost import report
from loader.loading.spark import ALL_LEAN, DEFAULT_LEAN, LEAN_CHANGES
from testing.report import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    source_fingerprint,
    write_json,
    write_section,
)
from testing.service_server import run_child
from testing.spark_cluster import ClusterError, StandaloneCluster

MODULE = "benchmarks.load_cost"
WORKER = "benchmarks.load_cost.worker"
SECTION = "load-cost"
ROWS_PER_UPDATE = 100
SIZES = (1, 10, 100)  # updates per batch
PARTS = ("changes", "local", "cluster")


def change_variants() -> dict[str, list[str]]:
    """Baseline; each change alone; the default set; the default set without each of its
    changes, and with each change it leaves out."""
    default = sorted(DEFAULT_LEAN)
    variants: dict[str, list[str]] = {"baseline": []}
    variants |= {f"only-{name}": [name] for name in sorted(ALL_LEAN)}
    variants["default"] = default
    variants |= {f"default-without-{name}": [c for c in default if c != name] for name in default}
    variants |= {f"default-with-{name}": sorted([*default, name]) for name in sorted(ALL_LEAN - DEFAULT_LEAN)}
    return variants


def breakdown_variants() -> dict[str, list[str]]:
    return {"baseline": [], "default": sorted(DEFAULT_LEAN)}


def run_changes(args: argparse.Namespace) -> dict[str, Any]:
    spec = {
        "mode": "changes",
        "master": "local[2]",
        "rows_per_update": ROWS_PER_UPDATE,
        "sizes": [1],
        "warmup": args.change_warmup,
        "runs": args.change_rounds,
        "variants": change_variants(),
    }
    runs = []
    for k in range(args.change_runs):
        log(f"[changes] run {k + 1}/{args.change_runs}: {args.change_warmup} warm-up + {args.change_rounds} rounds")
        load = load_average()
        runs.append(run_child(WORKER, spec, timeout=3600) | {"loadavg": [load, load_average()]})
    return {"spec": spec, "runs": runs}


def run_breakdown(args: argparse.Namespace, master: str, conf: dict[str, str]) -> dict[str, Any]:
    spec = {
        "mode": "breakdown",
        "master": master,
        "conf": conf,
        "rows_per_update": ROWS_PER_UPDATE,
        "sizes": list(args.sizes),
        "warmup": args.breakdown_warmup,
        "runs": args.breakdown_loads,
        "variants": breakdown_variants(),
        "event_log": True,
        "jfr": True,
        "jfr_loads": args.jfr_loads,
    }
    log(f"[breakdown] {master}: {args.breakdown_warmup} warm-up rounds, {args.breakdown_loads} loads per block")
    load = load_average()
    return {"spec": spec, "result": run_child(WORKER, spec, timeout=3600), "loadavg": [load, load_average()]}


def run_cluster(args: argparse.Namespace) -> dict[str, Any]:
    log("[cluster] starting a standalone master and worker (spark-class of the pyspark package)")
    began = time.perf_counter()
    try:
        with StandaloneCluster(cores=2, memory="1g") as cluster:
            started = time.perf_counter() - began
            log(f"[cluster] up at {cluster.master_url} after {started:.1f} s")
            conf = {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.cores.max": "2",
                "spark.executor.memory": "1g",
            }
            out = run_breakdown(args, cluster.master_url, conf)
            out["cluster_start_seconds"] = started
            return out
    except ClusterError as exc:
        raise SystemExit(f"load_cost: {exc}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run; results/load_cost-quick.json, no BENCHMARKS.md"
    )
    parser.add_argument("--skip", default="", help=f"comma-separated parts to skip: {', '.join(PARTS)}")
    parser.add_argument(
        "--change-runs", type=int, default=None, help="changes part: runs, each a fresh JVM (3; quick 1)"
    )
    parser.add_argument("--change-rounds", type=int, default=None, help="measured rounds per run (30; quick 4)")
    parser.add_argument("--change-warmup", type=int, default=None, help="warm-up rounds per run (40; quick 3)")
    parser.add_argument("--breakdown-loads", type=int, default=None, help="loads per breakdown block (20; quick 3)")
    parser.add_argument("--breakdown-warmup", type=int, default=None, help="breakdown warm-up rounds (60; quick 2)")
    parser.add_argument("--jfr-loads", type=int, default=None, help="loads per profiled block (10; quick 2)")
    parser.add_argument("--markdown", type=Path, default=None, help="file whose section to rewrite")
    parser.add_argument("--json", type=Path, default=None, help="raw results file")
    parser.add_argument("--rerender", action="store_true", help="measure nothing: rewrite the report from --json")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "change_runs": (1, 3),
        "change_rounds": (4, 30),
        "change_warmup": (3, 40),
        "breakdown_loads": (3, 20),
        "breakdown_warmup": (2, 60),
        "jfr_loads": (2, 10),
    }
    for name, (q, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, q if quick else full)
        if getattr(args, name) < (0 if name.endswith("warmup") else 1):
            parser.error(f"--{name.replace('_', '-')} is too small")
    args.sizes = SIZES
    args.skip_parts = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.skip_parts - set(PARTS):
        parser.error(f"--skip takes {', '.join(PARTS)}; got {args.skip}")
    if args.json is None:
        args.json = RESULTS_DIR / ("load_cost-quick.json" if quick else "load_cost.json")
    if args.markdown is None and not quick:
        args.markdown = BENCHMARKS_MD
    return args


def _compact(value: Any) -> Any:
    """Seconds to the microsecond (the report shows tenths of milliseconds), the JSON smaller."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def compact_loads(results: dict[str, Any]) -> None:
    """Drop each load's wall-clock marks (used only to find its Spark job in the event log)."""
    loads = [
        load
        for run in results.get("changes", {}).get("runs", [])
        for v in run["variants"].values()
        for x in v.values()
        for load in x
    ]
    for part in ("local", "cluster"):
        for block in results.get(part, {}).get("result", {}).get("blocks", []):
            loads.extend(block["loads"])
    for load in loads:
        load.pop("marks", None)


def finish(results: dict[str, Any], args: argparse.Namespace) -> None:
    compact_loads(results)
    results = _compact(results)
    results["summary"] = report.summarize(results)
    write_json(args.json, results)
    log(f"raw results: {args.json}")
    if args.markdown is not None:
        write_section(SECTION, report.render_markdown(results), args.markdown)
        log(f"wrote section '{SECTION}' of {args.markdown}")
    report.print_console(results)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        finish(json.loads(args.json.read_text(encoding="utf-8")), args)
        return 0
    started = time.perf_counter()
    machine = machine_info("loader")
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "skipped": sorted(args.skip_parts),
        "rows_per_update": ROWS_PER_UPDATE,
        "machine": machine,
        # What each change was when measured (the report shows this, not the code of a later day).
        "lean_changes": {
            name: {"why": c.why, "default": c.default, "conf": dict(c.conf), "write_options": dict(c.write_options)}
            for name, c in LEAN_CHANGES.items()
        },
    }
    results: dict[str, Any] = {"meta": meta}
    with LoadMonitor() as monitor:
        if "changes" not in args.skip_parts:
            results["changes"] = run_changes(args)
        if "local" not in args.skip_parts:
            results["local"] = run_breakdown(args, "local[2]", {})
        if "cluster" not in args.skip_parts:
            results["cluster"] = run_cluster(args)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
    finish(results, args)
    log(f"done in {fmt_duration(meta['run_seconds'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
