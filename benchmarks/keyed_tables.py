"""Latest tables among append tables: what the table-level policies gain from seeing keys.

Three ways for max-benefit to rank a latest table in the simulator: key-blind (as an append
table: the service before it exposed the key queue), by its next batch, by its catch-up (the
default); MYOPIC reads no costs and is the control. templates/keyed-tables.md says the rest.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.results import medians
from schedulers.generators import poisson
from schedulers.keys.workloads import with_latest_tables
from schedulers.max_benefit import MaxBenefitPolicy
from schedulers.myopic import MyopicPolicy
from schedulers.simulator import simulate
from testing.report import log, machine_markdown

#: (keys per latest table, rows per update, max_keys_per_batch)
SCENARIOS = ((30, 20, None), (500, 50, None), (500, 50, 200), (2000, 50, 500), (200, 20, 50))
VARIANTS = ("key-blind", "next batch", "catch-up", "myopic")
T = Template("keyed-tables")


def run_scenario(keys: int, rows: int, bound: int | None, utilization: float, seed: int, horizon: float) -> dict:
    fleet = {"tables": 20, "rate_range": (0.2, 2.0), "workers": 2, "overhead": 0.1}
    base = poisson(**fleet, horizon=horizon, utilization=utilization, seed=seed)
    trace = with_latest_tables(base, 10, keys=keys, rows=rows, max_keys_per_batch=bound, seed=seed)
    out: dict[str, Any] = {}
    for variant in VARIANTS:
        policy = MyopicPolicy() if variant == "myopic" else MaxBenefitPolicy(catch_up=variant != "next batch")
        result = simulate(trace, policy, 2, key_costs=variant != "key-blind")
        keyed = result.keyed.values()
        out[variant] = {"ratio": result.freshness.staleness_ratio, "batches": result.freshness.batches}
        out[variant] |= {"key_staleness": statistics.mean(k.application.mean for k in keyed)}
        out[variant] |= {"key_staleness_p99": statistics.mean(k.application.p99 for k in keyed)}
    return out


def measure(run: Run) -> dict[str, Any]:
    seeds, horizon = (2, 300.0) if run.args.quick else (5, 600.0)
    results = []
    for (keys, rows, bound), utilization in itertools.product(SCENARIOS, (0.7, 0.9)):
        log(f"{keys} keys, {rows} rows an update, bound {bound}, utilization {utilization}")
        runs = [run_scenario(keys, rows, bound, utilization, seed, horizon) for seed in range(seeds)]
        scenario = {"keys": keys, "rows": rows, "max_keys_per_batch": bound, "utilization": utilization}
        results.append(scenario | {"runs": runs})
    return {"results": results}


def render(saved: dict[str, Any]) -> str:
    meta, results = saved["meta"], saved["results"]
    rows = [
        {**r, "bound": r["max_keys_per_batch"] or "-", "m": {v: medians(s[v] for s in r["runs"]) for v in VARIANTS}}
        for r in results
    ]
    horizon = 300.0 if meta["quick"] else 600.0
    table = T.table("table", rows, "r" * 11)
    return T("section", machine=machine_markdown(meta), seeds=len(results[0]["runs"]), horizon=horizon, table=table)


BENCHMARK = Benchmark(measure, render, package="schedulers")

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
