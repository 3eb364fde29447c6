"""A join view's freshness: maintained incrementally under the loader's policies, against
rebuilding it on a fixed interval (issue 17, item 5, last point).

Costs measured over real Delta tables (the incremental view load for 1 to 32 waiting input
commits, fitted as ``overhead + per_commit * commits``, and a batch rebuild), then freshness
simulated over an hour of feeds at those costs: templates/view-freshness.md says how.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.harness.spark import schema, timed
from loader.core.views import ViewConfig, resolve
from loader.durability.transactions import load_commit
from loader.loading.views.maintainer import InputChange, ViewMaintainer
from schedulers.freshness import FreshnessLedger, TableFreshness
from schedulers.generators import jittered_feeds
from schedulers.model import TableSpec, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from testing.report import log, machine_markdown

SALES = schema("sid int64", "cid int64", "amt float64")
CUSTOMERS = schema("cid int64 not null", "region string", key=["cid"])
INPUTS = [{"table": "sales", "alias": "s"}, {"table": "customers", "alias": "c"}]
VIEW = ViewConfig(name="enriched", inputs=INPUTS, on=["s.cid = c.cid"], select=["s.sid", "s.amt", "c.region"])
COMMIT_ROWS = 200
CHANGES = [InputChange("sales", None), InputChange("customers", None)]
WAITING = (1, 4, 16, 32)
POLICIES = ("myopic", "max-benefit", "fifo")
INTERVALS = (1.0, 2.0, 10.0, 60.0, 900.0)
HOUR = 3600.0
T = Template("view-freshness")


class Warehouse:
    """The two input tables on disk and the view's maintainer over them."""

    def __init__(self, root: Path, sales: int, customers: int, seed: int) -> None:
        self.root, self.rng, self.customers, self.next_sid = root, random.Random(seed), customers, 0
        self.seq = {"sales": 0, "customers": 0}
        rows = [{"cid": c, "region": f"r{c % 50}"} for c in range(customers)]
        self.write("customers", pa.Table.from_pylist(rows, schema=CUSTOMERS.arrow()))
        self.append_sales(sales)
        self.maintainer = ViewMaintainer(resolve(VIEW, {"sales": SALES, "customers": CUSTOMERS}), root)
        self.maintainer.open()
        self.maintainer.load(CHANGES)

    def write(self, table: str, data: pa.Table) -> None:
        self.seq[table] += 1
        commit = load_commit(table, self.seq[table], float(self.seq[table]))
        write_deltalake(str(self.root / table), data, mode="append", commit_properties=commit)

    def append_sales(self, n: int) -> None:
        sid, customers = self.next_sid, self.customers
        rows = [{"sid": sid + k, "cid": self.rng.randrange(customers), "amt": float(k % 97)} for k in range(n)]
        self.next_sid += n
        self.write("sales", pa.Table.from_pylist(rows, schema=SALES.arrow()))

    def rebuild(self) -> None:
        """What a fixed-interval rebuild does: read the inputs, join, overwrite the view."""
        sales = DeltaTable(str(self.root / "sales")).to_pyarrow_table(columns=["sid", "cid", "amt"])
        customers = DeltaTable(str(self.root / "customers")).to_pyarrow_table(columns=["cid", "region"])
        joined = sales.join(customers, "cid", join_type="inner").select(["sid", "amt", "region"])
        write_deltalake(str(self.root / "rebuilt"), joined, mode="overwrite")


def measure_costs(sales: int, customers: int, repeats: int, seed: int) -> dict[str, Any]:
    loads: dict[int, list[float]] = {k: [] for k in WAITING}
    rebuilds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="view-freshness-") as tmp:
        warehouse = Warehouse(Path(tmp), sales, customers, seed)
        for _ in range(repeats):
            for waiting in WAITING:
                for _ in range(waiting):
                    warehouse.append_sales(COMMIT_ROWS)
                loads[waiting].append(timed(warehouse.maintainer.load, CHANGES)[1])  # every commit it lacks
            rebuilds.append(timed(warehouse.rebuild)[1])
        view_rows = DeltaTable(str(Path(tmp) / "enriched")).to_pyarrow_table().num_rows
    medians = {k: statistics.median(v) for k, v in loads.items()}
    # Least squares over the medians: seconds = overhead + per_commit * commits.
    per_commit, overhead = statistics.linear_regression(list(medians), list(medians.values()))
    out = {"sales_rows": sales, "customers": customers, "view_rows": view_rows}
    out |= {"load_seconds": {str(k): v for k, v in medians.items()}, "load_runs": {str(k): v for k, v in loads.items()}}
    out |= {"overhead": max(0.0, overhead), "per_commit": max(0.0, per_commit)}
    return out | {"rebuild_seconds": statistics.median(rebuilds), "rebuild_runs": rebuilds}


def trace(seed: int, seconds: float, view: TableSpec | None) -> Trace:
    """Sales every ~1 s, customers every ~10 s (the view, when given, after them)."""
    tables = [TableSpec(name="sales", alpha=0.02, overhead=0.2), TableSpec(name="customers", alpha=0.01, overhead=0.2)]
    return jittered_feeds(tables + ([view] if view is not None else []), (1.0, 10.0), seconds, seed)


def rebuilt_view(commits: list[float], interval: float, cost: float, horizon: float) -> dict[str, float]:
    """The view rebuilt every ``interval`` s (taking ``cost`` s on a worker of its own): each
    rebuild holds the input commits made before it started."""
    ledger = FreshnessLedger()
    vid = ledger.add_table("view")
    for previous, release in zip([0.0, *commits], commits):
        ledger.note_release(vid, release - previous)
    lo, start = 0, interval
    finish = 0.0
    while lo < len(commits):
        start = max(start, finish)  # a rebuild longer than the interval delays the next
        hi = lo
        while hi < len(commits) and commits[hi] <= start:
            hi += 1
        finish = start + cost
        if hi > lo:
            ledger.record_batch(vid, finish, commits, lo, hi, commits[lo - 1] if lo else 0.0)
            lo = hi
        start += interval
    return summary(ledger.table(vid), horizon)


def summary(view: TableFreshness, horizon: float) -> dict[str, float]:
    ratio = view.staleness / view.low_bound if view.low_bound else float("nan")
    out = {"mean_staleness": view.staleness / horizon, "ratio": ratio, "max_stretch": view.max_stretch}
    return out | {"view_loads": view.batches}


def freshness(costs: dict[str, Any], seed: int, seconds: float) -> dict[str, Any]:
    # The inputs alone (myopic): their commits are the view's releases, for the rebuilds, and
    # their rate turns the per-commit cost into the model's alpha (seconds per second of
    # the view's data interval, as the service fits it).
    result = simulate(trace(seed, seconds, None), make_policy("myopic"), 2, record_schedule=True)
    assert result.schedule is not None
    commits = sorted({b.finish for b in result.schedule})
    alpha = costs["per_commit"] * len(commits) / result.makespan
    view = TableSpec(name="view", alpha=alpha, overhead=costs["overhead"], view_of=("sales", "customers"))
    out: dict[str, Any] = {"policies": {}, "rebuilds": {}, "view_alpha": alpha, "input_commits": len(commits)}
    for name in POLICIES:
        result = simulate(trace(seed, seconds, view), make_policy(name), 2, record_schedule=True)
        assert result.schedule is not None
        view_figures = next(t for t in result.freshness.tables if t.name == "view")
        out["policies"][name] = summary(view_figures, result.makespan)
        out["policies"][name]["input_ratio"] = result.freshness.staleness_ratio
        busy = sum(b.finish - b.start for b in result.schedule if b.table == "view")
        out["policies"][name]["worker_seconds_per_hour"] = busy * HOUR / result.makespan
    for interval in INTERVALS:
        rebuilt = rebuilt_view(commits, interval, costs["rebuild_seconds"], result.makespan)
        rebuilt["worker_seconds_per_hour"] = rebuilt["view_loads"] * costs["rebuild_seconds"] * HOUR / result.makespan
        out["rebuilds"][str(interval)] = rebuilt
    return out


def render(saved: dict[str, Any]) -> str:
    costs, fresh = saved["costs"], saved["freshness"]
    rows = [(f"incremental, {name}", f, 2) for name, f in fresh["policies"].items()]
    rows += [(f"rebuilt every {float(t):.0f} s", f, 1) for t, f in fresh["rebuilds"].items()]
    absorbing = f"view load absorbing {{}} input commits of {COMMIT_ROWS} rows"
    loads = [(absorbing.format(k), f"{v:.3f}") for k, v in costs["load_seconds"].items()]
    loads.append(("fitted: overhead + per commit", f"{costs['overhead']:.3f} + {costs['per_commit']:.4f}"))
    loads.append(("rebuild (read both, pyarrow hash join, overwrite)", f"{costs['rebuild_seconds']:.3f}"))
    # The comparison at about equal compute: the rebuild interval whose worker time per hour is
    # nearest the incremental view's.
    name, inc = min(fresh["policies"].items(), key=lambda kv: kv[1]["mean_staleness"])
    compute = inc["worker_seconds_per_hour"]
    interval, rebuilt = min(fresh["rebuilds"].items(), key=lambda kv: abs(kv[1]["worker_seconds_per_hour"] - compute))
    one = costs["load_seconds"]["1"]
    values = {"costs_table": T.table("costs", loads), "freshness_table": T.table("freshness", rows), "costs": costs}
    values |= {"name": name, "inc": inc, "interval": float(interval), "rebuilt": rebuilt, "one": one}
    values["more"] = rebuilt["mean_staleness"] / inc["mean_staleness"]
    values["rebuild_ratio"] = costs["rebuild_seconds"] / one
    return T.line("section", machine=machine_markdown(saved["meta"], package="loader"), **values)


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    if args.quick:
        args.sales, args.customers = 50_000, 5_000
    log(f"measuring costs over {args.sales:,} sales rows and {args.customers:,} customers ...")
    costs = measure_costs(args.sales, args.customers, args.repeats, args.seed)
    log(f"costs: {costs['load_seconds']}, rebuild {costs['rebuild_seconds']:.3f} s")
    return {"costs": costs, "freshness": freshness(costs, args.seed, HOUR)}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sales", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=100_000)


BENCHMARK = Benchmark(measure, render, repeats=(1, 3), seed=1, options=options)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
