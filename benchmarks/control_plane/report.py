"""The control-plane benchmark's checks, tables and section, from the results alone."""

from __future__ import annotations

import functools
import operator
from typing import Any

from benchmarks.harness.markdown import Template
from testing.report import fmt_num, machine_markdown, median

#: Goals of this section (set here, not by the issue): "1,000 and 10,000 tables must work",
#: made concrete. Start-up: intake open within this many seconds at the largest size.
GOAL_INTAKE_OPEN_S = 5.0
#: A top-k scrape costs what its k tables cost: at the largest size at most this many times
#: the smallest size's.
GOAL_TOP_K_GROWTH = 1.5
#: A page of 100 tables (by name or stalest first) at most this long at the largest size.
GOAL_PAGE_S = 0.05
#: The dispatcher's own work per decision grows at most this much from the smallest size to the largest.
GOAL_DISPATCH_GROWTH = 2.0
T = Template("control-plane", {"ms": lambda seconds: fmt_num(seconds * 1e3, 3)})
TIMES = (("first", "intake_open_s"), ("first", "ready_s"), ("restart", "intake_open_s"), ("restart", "ready_s"))


def _median(runs: list[dict[str, Any]], *path: str) -> float:
    return median([functools.reduce(operator.getitem, path, run) for run in runs])


def _check(block: str, ok: bool, **values: Any) -> dict[str, Any]:
    check, measured, goal = T.line(block, **values).split(" | ")
    return {"check": check, "measured": measured, "goal": goal, "ok": ok}


def checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    registration = results.get("registration")
    if registration and registration["config"]:
        largest = registration["config"][-1]
        for start, when in (("first", "first start"), ("restart", "restart on the same data")):
            opened, ready = _median(largest["runs"], start, "intake_open_s"), _median(largest["runs"], start, "ready_s")
            values = {"tables": largest["tables"], "when": when, "opened": opened, "ready": ready}
            out.append(_check("check-open", opened <= GOAL_INTAKE_OPEN_S, goal=GOAL_INTAKE_OPEN_S, **values))
    if registration and registration["bulk"]:
        saves = max(run["bulk"]["catalog_saves"] for size in registration["bulk"] for run in size["runs"])
        sizes = ", ".join(f"{size['tables']:,}" for size in registration["bulk"])
        out.append(_check("check-bulk", saves == 1, saves=saves, sizes=sizes))
    reads = results.get("reads")
    if reads and reads["rows"]:
        smallest, largest = reads["rows"][0], reads["rows"][-1]
        top = largest["metrics"]["top-k"]["median_s"]
        growth = top / smallest["metrics"]["top-k"]["median_s"]
        values = {"k": reads["top_k"], "large": largest["tables"], "small": smallest["tables"], "top": top}
        everything = largest["metrics"]["all"]["median_s"]
        ok = growth <= GOAL_TOP_K_GROWTH
        out.append(_check("check-top-k", ok, growth=growth, everything=everything, goal=GOAL_TOP_K_GROWTH, **values))
        pages = [largest["pages"]["100 by name"]["median_s"], largest["pages"]["100 stalest first"]["median_s"]]
        values = {"tables": largest["tables"], "by_name": pages[0], "stalest": pages[1], "goal": GOAL_PAGE_S * 1e3}
        out.append(_check("check-pages", max(pages) <= GOAL_PAGE_S, **values))
    dispatch = results.get("dispatch")
    rows = [r for r in dispatch["rows"] if r["mode"] == "inline" and r["policy"] == "myopic"] if dispatch else []
    if len(rows) >= 2:
        growth = rows[-1]["median_us"] / rows[0]["median_us"]
        values = {"large": rows[-1], "small": rows[0], "growth": growth, "goal": GOAL_DISPATCH_GROWTH}
        out.append(_check("check-dispatch", growth <= GOAL_DISPATCH_GROWTH, **values))
    return out


def config_table(registration: dict[str, Any]) -> str:
    def row(size: dict[str, Any]) -> list[Any]:
        runs, n = size["runs"], size["tables"]
        rss = _median(runs, "first", "rss_mb")
        figures = [_median(runs, *path) for path in (("parse_validate_s",), *TIMES)]
        per_table = (rss - _median(runs, "baseline_rss_mb")) * 1024 / n
        return [n, runs[0]["config_bytes"] / 1e6, *figures, rss, per_table, runs[0]["catalog_bytes"] / 1e6]

    return T.table("config-table", map(row, registration["config"]))


def bulk_table(registration: dict[str, Any]) -> str:
    def row(size: dict[str, Any]) -> list[Any]:
        runs = size["runs"]
        times = [_median(runs, *path) for path in (("bulk", "wall_s"), ("bulk", "loop_lag", "max_ms"))]
        again = [_median(runs, *path) for path in (("again", "wall_s"), ("invalid", "wall_s"))]
        saves = max(run["bulk"]["catalog_saves"] for run in runs)
        return [size["tables"], runs[0]["body_bytes"] / 1e6, times[0], saves, times[1], *again, _median(runs, "rss_mb")]

    return T.table("bulk-table", map(row, registration["bulk"]))


def dispatch_table(dispatch: dict[str, Any]) -> str:
    modes: dict[tuple[int, str], dict[str, float]] = {}
    for row in dispatch["rows"]:
        modes.setdefault((row["tables"], row["policy"]), {})[row["mode"]] = row["median_us"]
    rows = [(n, policy, us["inline"], us["threads"], 1e6 / us["threads"]) for (n, policy), us in modes.items()]
    return T.table("dispatch-table", rows)


def metrics_table(reads: dict[str, Any]) -> str:
    rows = [
        (row["tables"], mode if f["top_k"] is None else f"{mode} (k = {f['top_k']})", f, f["bytes"] / 1e6)
        for row in reads["rows"]
        for mode, f in row["metrics"].items()
    ]
    return T.table("metrics-table", rows)


def pages_table(reads: dict[str, Any]) -> str:
    rows = [(row["tables"], label, f, f["bytes"] / 1e3) for row in reads["rows"] for label, f in row["pages"].items()]
    return T.table("pages-table", rows)


def partitioning_table(part: dict[str, Any]) -> str:
    def label(c: dict[str, Any]) -> str:
        pooled = c["instances"] == 1 and c["workers_per_instance"] > 2
        return f"{c['instances']} x {c['workers_per_instance']}" + (" (pooled)" if pooled else "")

    def spread(per: list[int]) -> str:
        return f"{min(per):,}–{max(per):,}" if len(per) > 1 else f"{per[0]:,}"

    rows = [dict(c, label=label(c), spread=spread(c["tables_per_instance"])) for c in part["configurations"]]
    return T.table("partitioning-table", rows)


def measured(part: dict[str, Any]) -> str:
    """When and under what load a part was measured (parts may come from different runs)."""
    if not (stamp := part.get("measured")):
        return ""
    peak = stamp.get("loadavg_peak")
    return T("measured", stamp=stamp, peak="" if peak is None else T.line("peak", peak=peak))


def markdown(results: dict[str, Any]) -> str:
    checks_table = T.table("checks-table", checks(results), "llll")
    parts = [T("head", machine=machine_markdown(results["meta"], "loader"), checks=checks_table)]
    if registration := results.get("registration"):
        config, bulk = config_table(registration), bulk_table(registration)
        parts.append(T("registration", measured=measured(registration), r=registration, config=config, bulk=bulk))
    if dispatch := results.get("dispatch"):
        parts.append(T("dispatch", measured=measured(dispatch), d=dispatch, table=dispatch_table(dispatch)))
    if reads := results.get("reads"):
        tables = {"metrics": metrics_table(reads), "pages": pages_table(reads)}
        parts.append(T("reads", measured=measured(reads), r=reads, **tables))
    if part := results.get("partitioning"):
        parts.append(T("partitioning", measured=measured(part), p=part, table=partitioning_table(part)))
    return "".join(parts).rstrip() + "\n"
