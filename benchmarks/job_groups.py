"""Multi-table jobs: what a group job costs on Spark, and what grouping buys in freshness.

    python -m benchmarks.job_groups            # Spark group jobs k = 1..32, simulator at 50/200/1,000 tables
    python -m benchmarks.job_groups --quick    # fewer runs and sizes, prints only

1. Cost. ``DeltaRsSink.load_group`` of k tables (one update of 100 rows each, one Spark
   job, k Delta commits) against k single-table ``DeltaRsSink.load`` calls of the same
   batches, alternating, Spark ``local[2]`` in this process, after a warm-up of each.
   A least-squares line through the group durations gives the model's shared overhead O
   (intercept) and the cost a table adds to a job (slope): schedulers/job_groups.py.
2. Freshness. The simulator (the policies the service runs) on the issue's workloads:
   50 and 200 tables at Poisson 0.5 updates/s each, 1,000 tables at 0.1/s, 2 workers,
   with the cost measured in (1): single-table jobs, and multi-table jobs under both
   rules. Staleness / LOW is the ratio to an ideal loader: LOW is exactly the staleness
   integral of a loader that makes every update visible the moment it arrives.
3. ``loader simulate`` end to end on 1,000,000 updates over 1,000 tables (trace parsing,
   simulation, schedule written), single-table and grouped.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from schedulers.generators import many_feeds
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.traces import write_trace
from testing.report import (
    RESULTS_DIR,
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
    write_section,
)

MODULE = "benchmarks.job_groups"
SECTION = "job-groups"
SCHEMA = TableSchema.model_validate(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "v", "type": "float64"},
            {"name": "s", "type": "string"},
        ]
    }
)
ROWS = 100
WORKLOADS = ((50, 0.5), (200, 0.5), (1000, 0.1))


def _rows(seed: int) -> pa.Table:
    return pa.table(
        {
            "id": list(range(seed, seed + ROWS)),
            "v": [i / 7 for i in range(ROWS)],
            "s": [f"row-{i}" for i in range(ROWS)],
        },
        schema=SCHEMA.arrow(),
    )


def measure_cost(sizes: list[int], runs: int) -> dict[str, Any]:
    from loader.loading.sinks.delta_rs import DeltaRsSink
    from loader.loading.spark import build_spark_session

    spark = build_spark_session("local[2]", fair_pools=1)
    out: dict[str, Any] = {"sizes": sizes, "runs": runs, "group": {}, "single": {}}
    with tempfile.TemporaryDirectory() as directory:
        sink = DeltaRsSink(Path(directory), spark)
        names = [f"t{i}" for i in range(max(sizes))]
        for name in names:
            sink.ensure_table(name, SCHEMA)
        seq = 0

        def batches(k: int) -> list[Batch]:
            nonlocal seq
            seq += 1
            return [Batch(n, (Update(n, seq, float(seq), _rows(seq * 1000)),)) for n in names[:k]]

        for k in (1, max(sizes)):  # warm-up: Spark's first jobs, Python workers
            sink.load_group(batches(k), [SCHEMA] * k)
            for b in batches(1):
                sink.load(b, SCHEMA)
        for k in sizes:
            group_times, single_times = [], []
            for run in range(runs):
                log(f"cost: {k} tables, run {run + 1}/{runs}")
                work = batches(k)
                began = time.perf_counter()
                outcomes = sink.load_group(work, [SCHEMA] * k)
                group_times.append(time.perf_counter() - began)
                failed = [o for o in outcomes if isinstance(o, BaseException)]
                if failed:
                    raise RuntimeError(f"a group load failed: {failed[0]}")
                work = batches(k)
                began = time.perf_counter()
                for b in work:
                    sink.load(b, SCHEMA)
                single_times.append(time.perf_counter() - began)
            out["group"][k] = group_times
            out["single"][k] = single_times
    spark.stop()
    xs = [k for k in sizes for _ in out["group"][k]]
    ys = [t for k in sizes for t in out["group"][k]]
    slope, intercept = statistics.linear_regression(xs, ys)
    out["fit"] = {"job_overhead": intercept, "per_table": slope}
    out["single_median"] = statistics.median(out["single"][1])
    return out


def freshness(cost: dict[str, Any], seconds: float) -> list[dict[str, Any]]:
    # The model's terms from the measurements: a table alone costs the single-table load; in a
    # group it adds the fitted per-table slope, so the part it shares (O) is the difference.
    # (The group job's own intercept can be lower than that: then the simulated groups cost
    # more than the measured ones, which makes the comparison conservative.)
    overhead = cost["single_median"]
    per_table = max(0.0, cost["fit"]["per_table"])
    shared = max(0.0, overhead - per_table)
    results = []
    for tables, rate in WORKLOADS:
        # Rows cost little next to the fixed costs (BENCHMARKS.md, per-batch cost: 1,000 and
        # 100,000 rows 0.20 and 0.23 s, about 0.3 µs a row); a second of data is rate x 100 rows.
        alpha = 0.3e-6 * ROWS * rate
        trace = many_feeds(tables=tables, rate=rate, horizon=seconds, seed=tables, overhead=overhead, alpha=alpha)
        for policy in ("myopic", "max-benefit"):
            for label, groups, rule in (("single-table", 1, "rate"), ("rate", 32, "rate"), ("delay", 32, "delay")):
                log(f"simulate {tables} tables, {policy}, {label}")
                made = make_policy(policy, max_tables_per_job=groups, job_overhead=shared, group_rule=rule)
                r = simulate(trace, made, 2, job_overhead=shared)
                f = r.freshness
                horizon = r.makespan
                results.append(
                    {
                        "tables": tables,
                        "rate": rate,
                        "policy": policy,
                        "jobs": label,
                        "ratio": f.staleness_ratio,
                        "mean_staleness": f.total_staleness / (tables * horizon),
                        "ideal_staleness": f.low_bound / (tables * horizon),
                        "max_stretch": f.max_stretch,
                        "batches": f.batches,
                        "tables_per_job": (r.policy_state.get("job_groups") or {}).get("mean_tables_per_job") or 1.0,
                        "overhead": overhead,
                        "job_overhead": shared,
                        "alpha": alpha,
                    }
                )
    return results


def simulate_cli(runs: int) -> dict[str, Any]:
    """``loader simulate`` as a user runs it, on 1,000,000 updates over 1,000 tables."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "trace.jsonl"
        trace = many_feeds(
            tables=1000, rate=1_000_000 / 1000 / 4700, horizon=4700, seed=11, overhead=0.17, alpha=0.0005
        )
        write_trace(trace, path)
        out["updates"] = trace.n_updates
        for label, extra in (
            ("single-table", []),
            ("grouped (32, rate)", ["--max-tables-per-job", "32", "--job-overhead", "0.15"]),
        ):
            times = []
            for run in range(runs):
                log(f"loader simulate, {label}, run {run + 1}/{runs}")
                command = [sys.executable, "-m", "cli", "simulate", "--trace", str(path), "--policy", "myopic"]
                command += ["--workers", "2", "--json", "--schedule-out", str(Path(directory) / "s.jsonl"), *extra]
                began = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True)
                times.append(time.perf_counter() - began)
            out[label] = times
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and runs, 60 s traces, no BENCHMARKS.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "machine": machine_info("loader"),
    }
    sizes = [1, 4] if args.quick else [1, 2, 4, 8, 16, 32]
    runs = 2 if args.quick else 5
    cost = measure_cost(sizes, runs)
    fresh = freshness(cost, 60.0 if args.quick else 600.0)
    cli = simulate_cli(1 if args.quick else 3)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()

    cost_rows = []
    for k in sizes:
        g, s = statistics.median(cost["group"][k]), statistics.median(cost["single"][k])
        cost_rows.append([k, f"{g:.3f}", f"{g / k * 1000:.0f}", f"{s:.3f}", f"{s / k * 1000:.0f}", f"{s / g:.1f}x"])
    fit = cost["fit"]
    shared = fresh[0]["job_overhead"]
    fresh_rows = [
        [
            r["tables"],
            r["policy"],
            r["jobs"],
            f"{r['mean_staleness']:.2f}",
            f"{r['ideal_staleness']:.2f}",
            f"{r['ratio']:.2f}",
            f"{r['max_stretch']:.1f}",
            f"{r['tables_per_job']:.1f}",
        ]
        for r in fresh
    ]
    cli_rows = [
        [label, f"{statistics.median(cli[label]):.2f}", ", ".join(f"{t:.2f}" for t in cli[label])]
        for label in ("single-table", "grouped (32, rate)")
    ]
    markdown = (
        "## Multi-table jobs (`benchmarks/job_groups.py`)\n\n"
        + machine_markdown(meta, "loader")
        + f"\n### 1. What a group job costs\n\nOne update of {ROWS} rows per table, 3 columns; "
        f"median of {runs} runs per size, group and single-table alternating, Spark `local[2]`, delta-rs writer.\n\n"
        + md_table(
            ["tables", "group job s", "ms per table", "k single loads s", "ms per table", "speed-up"],
            cost_rows,
            "rrrrrr",
        )
        + f"\nLeast squares through the group durations: intercept {fit['job_overhead']:.3f} s, "
        f"{fit['per_table'] * 1000:.1f} ms per table added (its Parquet file, its Delta commit). A single-table load "
        f"took {cost['single_median']:.3f} s, so a table shares O = {shared:.3f} s of it when it joins a group "
        "(the cost model of schedulers/job_groups.py; the service measures O online, "
        "`loader_job_overhead_seconds`).\n\n"
        "### 2. What grouping buys (simulator, the cost above)\n\n"
        f"Poisson arrivals, {'60' if args.quick else '600'} s, 2 workers; each table's overhead = the measured "
        "single-table load, O = the fitted intercept; staleness in seconds averaged over tables and time; "
        "ideal = every update visible on arrival (LOW); ratio = mean / ideal.\n\n"
        + md_table(
            ["tables", "policy", "jobs", "mean staleness s", "ideal s", "ratio", "max stretch", "tables/job"],
            fresh_rows,
            "rllrrrrr",
        )
        + f"\n### 3. `loader simulate` end to end, {cli['updates']:,} updates over 1,000 tables\n\n"
        "Trace parsing, simulation (myopic, 2 workers) and the schedule written, as a subprocess; target < 10 s.\n\n"
        + md_table(["jobs", "median s", "runs s"], cli_rows, "lrl")
        + "\n"
    )
    print(markdown)
    if not args.quick:
        write_json(RESULTS_DIR / "job_groups.json", {"meta": meta, "cost": cost, "freshness": fresh, "cli": cli})
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
