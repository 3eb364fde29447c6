"""Multi-table jobs: what a group job costs on Spark, and what grouping buys in freshness.

A least-squares line through the measured group durations gives the cost model's shared
overhead O and per-table cost (schedulers/job_groups.py); the simulator then runs the
service's policies at that cost. templates/job-groups.md says what each part measures.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import int_keys
from loader.core.updates import Batch
from schedulers.generators import many_feeds
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.traces import write_trace
from testing.report import log, machine_markdown

ROWS = 100
WORKLOADS = ((50, 0.5), (200, 0.5), (1000, 0.1))
T = Template("job-groups")
#: ``loader simulate`` as measured: its label -> its extra flags.
CLI_CASES = {"single-table": [], "grouped (32, rate)": ["--max-tables-per-job", "32", "--job-overhead", "0.15"]}


def measure_cost(sizes: list[int], runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": sizes, "runs": runs, "group": {}, "single": {}}
    with spark.sink("job-groups-", fair_pools=1) as (_, sink):
        names = [f"t{i}" for i in range(max(sizes))]
        for name in names:
            sink.ensure_table(name, spark.SCHEMA)
        seq = 0

        def batches(k: int) -> list[Batch]:
            nonlocal seq
            seq += 1
            return [spark.one_update(n, seq, spark.small_rows(range(seq * 1000, seq * 1000 + ROWS))) for n in names[:k]]

        def singly(work: list[Batch]) -> None:
            for b in work:
                sink.load(b, spark.SCHEMA)

        for k in (1, max(sizes)):  # warm-up: Spark's first jobs, Python workers
            sink.load_group(batches(k), [spark.SCHEMA] * k)
            singly(batches(1))
        for k in sizes:
            out["group"][k], out["single"][k] = [], []
            for run in range(runs):
                log(f"cost: {k} tables, run {run + 1}/{runs}")
                outcomes, seconds = spark.timed(sink.load_group, batches(k), [spark.SCHEMA] * k)
                out["group"][k].append(seconds)
                if failed := [o for o in outcomes if isinstance(o, BaseException)]:
                    raise RuntimeError(f"a group load failed: {failed[0]}")
                out["single"][k].append(spark.timed(singly, batches(k))[1])
    xs, ys = zip(*((k, t) for k in sizes for t in out["group"][k]), strict=True)
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
                f, area = r.freshness, tables * r.makespan
                grouped = (r.policy_state.get("job_groups") or {}).get("mean_tables_per_job") or 1.0
                row = {"tables": tables, "rate": rate, "policy": policy, "jobs": label, "ratio": f.staleness_ratio}
                row |= {"mean_staleness": f.total_staleness / area, "ideal_staleness": f.low_bound / area}
                row |= {"max_stretch": f.max_stretch, "batches": f.batches, "tables_per_job": grouped}
                results.append(row | {"overhead": overhead, "job_overhead": shared, "alpha": alpha})
    return results


def simulate_cli(runs: int) -> dict[str, Any]:
    """``loader simulate`` as a user runs it, on 1,000,000 updates over 1,000 tables."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "trace.jsonl"
        trace = many_feeds(tables=1000, rate=1_000_000 / 1000 / 4700, horizon=4700, seed=11, overhead=0.17, alpha=5e-4)
        write_trace(trace, path)
        out["updates"] = trace.n_updates
        for label, extra in CLI_CASES.items():
            times = []
            for run in range(runs):
                log(f"loader simulate, {label}, run {run + 1}/{runs}")
                command = [sys.executable, "-m", "cli", "simulate", "--trace", str(path), "--policy", "myopic"]
                command += ["--workers", "2", "--json", "--schedule-out", str(Path(directory) / "s.jsonl"), *extra]
                times.append(spark.timed(subprocess.run, command, check=True, capture_output=True)[1])
            out[label] = times
    return out


def measure(run: Run) -> dict[str, Any]:
    quick = run.args.quick
    cost = measure_cost([1, 4] if quick else [1, 2, 4, 8, 16, 32], 2 if quick else 5)
    fresh = freshness(cost, 60.0 if quick else 600.0)
    return {"cost": cost, "freshness": fresh, "cli": simulate_cli(1 if quick else 3)}


def render(saved: dict[str, Any]) -> str:
    cost, fresh, cli = saved["cost"], saved["freshness"], saved["cli"]
    group, single = int_keys(cost["group"]), int_keys(cost["single"])
    medians = [(k, statistics.median(group[k]), statistics.median(single[k])) for k in cost["sizes"]]
    cost_rows = [(k, g, g / k * 1000, s, s / k * 1000, s / g) for k, g, s in medians]
    cli_rows = [(case, statistics.median(cli[case]), ", ".join(f"{t:.2f}" for t in cli[case])) for case in CLI_CASES]
    tables = {"cost_table": T.table("cost", cost_rows, "rrrrrr"), "cli_table": T.table("cli", cli_rows, "lrl")}
    tables["fresh_table"] = T.table("freshness", fresh, "rllrrrrr")
    values = {"rows": ROWS, "cost": cost, "fit": cost["fit"], "per_table_ms": cost["fit"]["per_table"] * 1000}
    values |= {"shared": fresh[0]["job_overhead"], "seconds": "60" if saved["meta"]["quick"] else "600", "cli": cli}
    return T("section", machine=machine_markdown(saved["meta"], "loader"), **values, **tables)


BENCHMARK = Benchmark(measure, render)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
