"""A join view's two engines side by side: the driver's MJoin executor against a Spark job per view load.

The view ``sales ⋈ customers`` of ``benchmarks/view_freshness.py`` kept by engine ``driver``
(the inputs in memory) and engine ``spark`` (one job over the inputs' files) over the same
Delta tables: view loads after sales commits and after customer upserts, the open after a
restart, the driver's memory. Both views must be equal at the end (checked).
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from benchmarks.harness import child, spark
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.view_freshness import CHANGES, COMMIT_ROWS, CUSTOMERS, SALES, VIEW, Warehouse, options
from loader.core.views import resolve
from loader.durability.transactions import load_commit
from loader.loading.sinks.view_join import run_view_job
from loader.loading.views.maintainer import ViewMaintainer
from testing.report import log, machine_markdown

WAITING = (1, 4, 16)
SPARK_VIEW = VIEW.model_copy(update={"name": "enriched_spark", "engine": "spark"})
CUSTOMER_UPSERTS = "one commit of 200 customer upserts"
T = Template("view-engines")


def upsert(warehouse: Warehouse, customers: int) -> None:
    """One commit of COMMIT_ROWS customers moved to another region: a MERGE, as a latest
    table's load commits it (loader/loading/sinks/upsert.py)."""
    moved = {warehouse.rng.randrange(customers): f"moved{warehouse.seq['customers']}" for _ in range(COMMIT_ROWS)}
    source = pa.Table.from_pylist([{"cid": c, "region": r} for c, r in moved.items()], schema=CUSTOMERS.arrow())
    warehouse.seq["customers"] += 1
    commit = load_commit("customers", warehouse.seq["customers"], float(warehouse.seq["customers"]))
    DeltaTable(str(warehouse.root / "customers")).merge(
        source, "t.cid = s.cid", source_alias="s", target_alias="t", commit_properties=commit, streamed_exec=False
    ).when_matched_update_all().when_not_matched_insert_all().execute()


def rows(path: Path, names: list[str]) -> dict[tuple, int]:
    table = DeltaTable(str(path)).to_pyarrow_table()
    return dict(zip(zip(*(table.column(n).to_pylist() for n in names)), table.column("__loader_count").to_pylist()))


def measure_engines(sales: int, customers: int, repeats: int, seed: int) -> dict[str, Any]:
    with spark.session(app_name="view-engines") as session, tempfile.TemporaryDirectory(prefix="view-engines-") as tmp:
        root = Path(tmp)
        log(f"writing {sales:,} sales and {customers:,} customers; the driver's view reads them")
        warehouse = Warehouse(root, sales, customers, seed)  # its maintainer: engine driver
        schemas = {"sales": SALES, "customers": CUSTOMERS}
        spark_view = ViewMaintainer(resolve(SPARK_VIEW, schemas), root)
        spark_view.open()

        def both() -> tuple[float, float]:
            driver = spark.timed(warehouse.maintainer.load, CHANGES)[1]
            return driver, spark.timed(spark_view.load, CHANGES, lambda job: run_view_job(session, job))[1]

        first = both()  # the Spark view's first load reads everything; not a figure
        log(f"first loads: driver {first[0]:.2f} s, spark {first[1]:.2f} s")
        loads: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"driver": [], "spark": []})
        for _ in range(repeats):
            for waiting in WAITING:
                for _ in range(waiting):
                    warehouse.append_sales(COMMIT_ROWS)
                for engine, seconds in zip(("driver", "spark"), both(), strict=True):
                    loads[f"sales x{waiting}"][engine].append(seconds)
            upsert(warehouse, customers)
            for engine, seconds in zip(("driver", "spark"), both(), strict=True):
                loads["customers x1"][engine].append(seconds)
        names = ["sid", "amt", "region"]
        equal = rows(root / "enriched", names) == rows(root / "enriched_spark", names)
        opens: dict[str, list[float]] = {"driver": [], "spark": []}
        memory: list[float] = []
        for _ in range(repeats):
            for engine, view in (("driver", VIEW), ("spark", SPARK_VIEW)):
                gc.collect()
                before = child.rss_mib()
                began = time.perf_counter()
                fresh = ViewMaintainer(resolve(view, schemas), root)
                fresh.open()
                opens[engine].append(time.perf_counter() - began)
                if engine == "driver":
                    memory.append(child.rss_mib() - before)  # (while the view is held)
                del fresh
    out = {"sales": sales, "customers": customers, "equal": equal, "driver_mib": statistics.median(memory)}
    out["loads"] = {case: {e: statistics.median(v) for e, v in by.items()} for case, by in loads.items()}
    out["open"] = {e: statistics.median(v) for e, v in opens.items()}
    return out | {"load_runs": loads, "open_runs": opens}


def _case(case: str) -> str:
    return case.replace("sales x", "sales commits of 200 rows: ").replace("customers x1", CUSTOMER_UPSERTS)


def render(saved: dict[str, Any]) -> str:
    meta, result = saved["meta"], saved["result"]
    loads = [(case, by["driver"], by["spark"], by["spark"] / by["driver"]) for case, by in result["loads"].items()]
    rows = [[_case(c), f"{d:.3f}", f"{s:.3f}", f"{r:.1f}"] for c, d, s, r in loads]
    opened = (result["open"]["driver"], result["open"]["spark"], result["open"]["spark"] / result["open"]["driver"])
    rows.append(["opening the view after a restart", *(f"{v:.2f}" for v in opened)])
    ratios = [r for *_, r in loads]
    equal = "are equal" if result["equal"] else "DIFFER"
    values = {"r": result, "repeats": meta["repeats"], "equal": equal, "low": min(ratios), "high": max(ratios)}
    return T("section", machine=machine_markdown(meta, "loader"), table=T.table("table", rows, "lrrr"), **values)


def measure(run: Run) -> dict[str, Any]:
    sales, customers = (50_000, 5_000) if run.args.quick else (run.args.sales, run.args.customers)
    result = measure_engines(sales, customers, run.args.repeats, run.args.seed)
    if not result["equal"]:
        log("the two engines' views DIFFER")
    return {"result": result}


BENCHMARK = Benchmark(measure, render, repeats=(1, 3), seed=1, options=options)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
