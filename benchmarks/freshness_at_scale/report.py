"""Verdicts and presentation of the freshness-at-scale benchmark: targets, notes, the
BENCHMARKS.md section and the console tables.

Reads only the results dict (what ``freshness_at_scale.json`` holds), so ``--rerender``
rebuilds everything from saved figures.
"""

from __future__ import annotations

import math
from typing import Any

from testing.report import fmt_num, machine_markdown, md_table, print_table, status

#: Issue 14's targets: staleness ratio to ideal by table count; own metrics within 5%.
RATIO_TARGETS = {50: 1.5, 200: 2.0, 1000: 2.0}
STARVATION_TABLES = (200, 1000)
OWN_TOLERANCE = 0.05

Rows = list[list[Any]]
TableRows = tuple[list[str], Rows]


def _s(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "never"
    return fmt_num(float(value), digits)


def _pct(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{100 * value:+.1f}%"


def _cells(results: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(w["workload"], cell) for w in results["workloads"] for cell in w["cells"]]


def _integrity_text(integrity: dict[str, Any]) -> str:
    if integrity["ok"]:
        return f"ok ({integrity['expected_updates']:,} updates)"
    words = {
        "missing": "not in the table after the drain",
        "duplicated": "duplicated",
        "partial": "with rows missing",
        "in_several_commits": "in more than one commit",
        "unexpected": "never acknowledged",
    }
    parts = [f"{integrity[k]} {word}" for k, word in words.items() if integrity.get(k)]
    if integrity["rows_read"] != integrity["rows_expected"]:
        parts.append(f"rows {integrity['rows_read']:,} of {integrity['rows_expected']:,}")
    if "deltalake_rows" in integrity and integrity["deltalake_rows"] != integrity["rows_expected"]:
        parts.append(f"deltalake rows {integrity['deltalake_rows']:,}")
    return "PROBLEM: " + ", ".join(parts or ["see JSON"])


def _integrity_short(integrity: dict[str, Any]) -> str:
    lost = integrity.get("missing", 0) + integrity.get("partial", 0)
    twice = integrity.get("duplicated", 0) + integrity.get("in_several_commits", 0)
    text = f"{lost:,} / {twice:,}"
    if integrity.get("missing"):
        text += f" ({integrity['missing']:,} not visible after the drain)"
    return text


# =====================================================================================
# Verdicts
# =====================================================================================
def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target and system; the issue's goals are for the loader after parts 3+4,
    every system is judged against them so the table reads side by side."""
    targets: list[dict[str, Any]] = []
    for workload, cell in _cells(results):
        n = workload["tables"]
        name = cell["variant"]
        figures = cell.get("figures")
        if figures is None:
            targets.append(
                {
                    "system": name,
                    "tables": n,
                    "target": "the run completed",
                    "measured": cell.get("error", "?"),
                    "goal": "a measurement",
                    "ok": False,
                }
            )
            continue
        if n in RATIO_TARGETS:
            goal = RATIO_TARGETS[n]
            targets.append(
                {
                    "system": name,
                    "tables": n,
                    "target": f"staleness ratio to ideal at {n:,} tables",
                    "measured": f"{figures['ratio']:.2f} ({_s(figures['mean_staleness'])} s / "
                    f"{_s(figures['ideal_mean_staleness'])} s)",
                    "goal": f"<= {goal}",
                    "ok": figures["ratio"] <= goal,
                }
            )
        if n in STARVATION_TABLES:
            targets.append(
                {
                    "system": name,
                    "tables": n,
                    "target": f"no table starved at {n:,} tables",
                    "measured": f"{figures['starved']} starved ("
                    + (
                        f"{figures['never_visible_in_window']:,} window updates never visible)"
                        if figures["never_visible_in_window"]
                        else f"longest wait {_s(figures['latency_max'])} s)"
                    ),
                    "goal": f"0 (no update waits > {figures['starved_after_seconds']:.0f} s)",
                    "ok": figures["starved"] == 0,
                }
            )
            own = figures.get("own_staleness")
            if own is not None and "relative_difference" in own:
                diff = own["relative_difference"]
                targets.append(
                    {
                        "system": name,
                        "tables": n,
                        "target": f"loader's own staleness vs the outside reader's at {n:,} tables",
                        "measured": f"{_s(own['loader_mean_staleness'])} s vs {_s(own['outside_mean_staleness'])} s "
                        f"({_pct(diff)})",
                        "goal": f"within {100 * OWN_TOLERANCE:.0f}%",
                        "ok": math.isfinite(diff) and abs(diff) <= OWN_TOLERANCE,
                    }
                )
            elif own is not None:
                targets.append(
                    {
                        "system": name,
                        "tables": n,
                        "target": f"loader's own staleness vs the outside reader's at {n:,} tables",
                        "measured": f"not comparable: {own.get('note')}",
                        "goal": f"within {100 * OWN_TOLERANCE:.0f}%",
                        "ok": None,
                    }
                )
        targets.append(
            {
                "system": name,
                "tables": n,
                "target": f"nothing lost or duplicated at {n:,} tables",
                "measured": _integrity_text(figures["integrity"]),
                "goal": "every acknowledged update once, all its rows",
                "ok": figures["integrity"]["ok"],
            }
        )
    return targets


def build_notes(results: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    meta = results["meta"]
    if meta.get("quick"):
        notes.append(
            "Smoke run only (`--quick`): few tables, a short window; the figures show that the harness works, "
            "not where the systems stand. The full run is "
            f"`{results['options']['full_command']}`."
        )
    peak = meta.get("loadavg_peak")
    nproc = meta["machine"]["nproc"]
    if peak is not None and peak > nproc + 1:
        notes.append(
            f"The 1-minute load average reached {peak:.1f} on {nproc} cores: the benchmark's own processes "
            "(producer, reader) and the system under test share the cores, and other work may have run too."
        )
    for workload, cell in _cells(results):
        tag = f"{workload['tables']:,} tables, {cell['variant']}"
        if "error" in cell:
            notes.append(f"{tag}: the run failed: {cell['error']}")
            continue
        f = cell["figures"]
        reader = f["reader"]
        gen = f["generator"]
        if gen["errors"]:
            notes.append(f"{tag}: the producer met errors {gen['errors']} (first: {gen['first_error']}).")
        if gen["lag_p99"] is not None and isinstance(gen["lag_p99"], float) and gen["lag_p99"] > 0.25:
            notes.append(
                f"{tag}: arrivals lagged their schedule (p99 {_s(gen['lag_p99'])} s, max {_s(gen['lag_max'])} s): "
                "the producer or the system was slow (a busy machine), which shifts arrivals but not the definition "
                "(arrival = accepted)."
            )
        if not reader["drained"]:
            notes.append(
                f"{tag}: not every acknowledged update was visible {results['options']['drain_timeout']:.0f} s after "
                "the last arrival (see integrity)."
            )
        if f.get("peer"):
            peer = f["peer"]
            notes.append(
                f"{tag}: Spark session up in {_s(peer['session_seconds'])} s, {peer['queries_started']} streaming "
                f"queries started in {_s(peer['queries_start_seconds'])} s; priming (first file of every table "
                f"visible) took {_s(f['prime_seconds'])} s; {peer['active_at_end']} queries active at the end"
                + (f"; failed: {dict(list(peer['failed'].items())[:3])}" if peer.get("failed") else "")
                + "."
            )
        if f["never_visible_in_window"] or f["latency_p50"] > f["window_seconds"]:
            notes.append(
                f"{tag}: most of its window's updates became visible only after the window closed, or never: its "
                "staleness there is bounded by the time since the arrivals began, so the ratio understates how far "
                "behind it was; the latencies say it."
            )
        if f["alive_at_end"] is False:
            notes.append(f"{tag}: the system's process had exited by the end of the run.")
    return notes


# =====================================================================================
# Tables
# =====================================================================================
def targets_table(results: dict[str, Any]) -> TableRows:
    headers = ["target", "system", "measured", "goal", "result"]
    rows = [[t["target"], t["system"], t["measured"], t["goal"], status(t["ok"])] for t in results["targets"]]
    return headers, rows


def workload_table(workload: dict[str, Any]) -> TableRows:
    headers = [
        "system",
        "mean staleness s",
        "ideal s",
        "ratio",
        "latency p50 / p99 / max s",
        "starved",
        "worst table mean s",
        "commits/s",
        "CPU s (Python + JVM)",
        "cores",
        "own vs outside",
        "lost / duplicated",
        "ready s",
        "priming s",
        "load peak",
    ]
    rows: Rows = []
    for cell in workload["cells"]:
        f = cell.get("figures")
        if f is None:
            rows.append([cell["variant"], f"failed: {cell.get('error', '?')[:120]}"] + ["–"] * (len(headers) - 2))
            continue
        cpu = f["cpu"] or {}
        own = f.get("own_staleness")
        own_text = "n/a"
        if own and "relative_difference" in own:
            loader, outside = own["loader_mean_staleness"], own["outside_mean_staleness"]
            own_text = f"{_s(loader)} / {_s(outside)} ({_pct(own['relative_difference'])})"
        integrity = f["integrity"]
        rows.append(
            [
                cell["variant"],
                _s(f["mean_staleness"]),
                _s(f["ideal_mean_staleness"]),
                f"{f['ratio']:.2f}",
                f"{_s(f['latency_p50'])} / {_s(f['latency_p99'])} / {_s(f['latency_max'])}",
                str(f["starved"]),
                _s(f["worst_table"]["mean_staleness"]),
                f"{f['commits_per_second']:.1f}",
                f"{_s(cpu.get('seconds'))} ({_s(cpu.get('python_seconds'))} + {_s(cpu.get('jvm_seconds'))})",
                _s(cpu.get("cores")),
                own_text,
                "0 / 0" if integrity["ok"] else _integrity_short(integrity),
                _s(f["ready_seconds"]),
                _s(f["prime_seconds"]),
                _s(cell.get("loadavg_peak"), 2),
            ]
        )
    return headers, rows


def resolution_table(workload: dict[str, Any]) -> TableRows:
    headers = [
        "system",
        "poll every s",
        "round p50 / p99 ms",
        "mean gap between checks s",
        "reader CPU s",
        "producer CPU s",
        "arrival lag p50 / p99 s",
        "drain s",
    ]
    rows: Rows = []
    for cell in workload["cells"]:
        f = cell.get("figures")
        if f is None:
            continue
        r, g = f["reader"], f["generator"]
        rounds = r["poll_rounds"]
        rows.append(
            [
                cell["variant"],
                _s(r["interval"]),
                f"{1e3 * rounds.get('p50_seconds', math.nan):.1f} / {1e3 * rounds.get('p99_seconds', math.nan):.1f}",
                _s(r["mean_observation_gap"]),
                _s(r["cpu_seconds_before_drain"]),
                _s(g["cpu_seconds"]),
                f"{_s(g['lag_p50'])} / {_s(g['lag_p99'])}",
                _s(r["drain_seconds"]),
            ]
        )
    return headers, rows


# =====================================================================================
# Markdown and console
# =====================================================================================
def render_markdown(results: dict[str, Any]) -> str:
    meta, options = results["meta"], results["options"]
    lines = [
        "## Freshness at scale: the loader against Structured Streaming (`benchmarks/freshness_at_scale/`)",
        "",
        machine_markdown(meta, "loader"),
        "Systems, one after the other on this machine (each alone with the benchmark's producer and reader):",
        "",
    ]
    for variant in results["variants"]:
        where = ""
        if variant["kind"] == "loader":
            git = variant.get("code_git") or {}
            where = (
                f" Code: `{variant['code_dir']}` (git {git.get('commit')}{', modified' if git.get('modified') else ''})"
            )
            if variant["env"]:
                where += "; environment " + ", ".join(f"`{k}={v}`" for k, v in variant["env"].items())
            if variant["settings"]:
                where += f"; settings `{variant['settings']}`"
            where += "."
        elif variant["conf"]:
            where = f" Spark conf `{variant['conf']}`."
        lines.append(f"- **{variant['name']}**: {variant['label']}.{where}")
    lines += [
        "",
        "Workloads: N tables (schema u int64, r int32, v float64, s string), Poisson arrivals per table, "
        f"{options['rows_per_update']} rows per update, seed {options['seed']} (the same schedule for every "
        "system). Loaders: `loader serve` as a subprocess, Spark `local[2]`, every other setting at its "
        "default except no compaction or vacuum; tables declared in the config file; each update is one "
        "`POST /v1/tables/{t}/updates`. Peer: one Python process with a `SparkSession` `local[2]` running "
        'one `readStream.parquet(landing/t)` → `writeStream.format("parquet")` query per table '
        '(checkpoint per table, `trigger(processingTime="1 second")`); each update is a Parquet file '
        "written aside and renamed into the table's landing directory.",
        "",
        "Definitions (Bateni et al.): at time t a table's **staleness** is t minus the arrival time of the "
        "newest update visible at t; **mean staleness** is its time average over the window, averaged over "
        "tables; **ideal** is the same with every update visible the instant it arrives; **ratio** = mean / "
        "ideal. **Arrival**: the loader's 202 was read by the producer / the peer's landing rename returned. "
        "**Visible**: the outside reader (a separate process) first found the commit holding the update in "
        "the table's `_delta_log/` (loader) or `_spark_metadata/` (peer), polling every table's log every "
        f"{options['poll_interval'] * 1e3:.0f} ms (resolution: see the last table; staleness is charged "
        "until the check that found the commit). Every table is primed with one update that is visible "
        "before the window opens (systems warm, a defined start); the window opens after a warm-up of "
        "arrivals. **Latency**: arrival to visible, updates arriving in the window. **Starved**: a table "
        f"with an update that waited more than {options['starved_factor']:g} mean inter-arrival times of "
        "its table to become visible (20 s at 0.5 updates/s, 100 s at 0.1), or never did. **Commits/s**: "
        "commits that added data, seen in the window, all tables (a job loading several tables commits each "
        "of them). **CPU**: user + system seconds of the "
        "system's process group in the window (loader: its Python process and Spark JVM; peer: the Python "
        "driver and its JVM). **Own vs outside**: the loader's mean staleness from its /metrics "
        "(increase of `loader_table_staleness_seconds_squared` between scrapes at the window's ends) against "
        "the outside reader's over the same interval. **Lost / duplicated**: after the run every "
        "acknowledged update id must be read back exactly once with all its rows, from the files the log "
        "lists (and, for Delta, again through `deltalake`).",
        "",
        "### Targets",
        "",
        "The issue sets them for the loader after parts 3+4; every system is judged against them.",
        "",
        md_table(*targets_table(results), align="lllll"),
        "",
    ]
    for workload in results["workloads"]:
        w = workload["workload"]
        lines += [
            f"### {w['tables']:,} tables, {w['rate']:g} updates/s each ({w['tables'] * w['rate']:g}/s in all)",
            "",
            f"Window {w['duration']:.0f} s after a warm-up of {w['warmup']:.0f} s of arrivals; "
            f"{workload['updates']:,} scheduled updates.",
            "",
            md_table(*workload_table(workload)),
            "",
        ]
    lines += ["### The outside reader and the producer", ""]
    for workload in results["workloads"]:
        lines += [f"{workload['workload']['tables']:,} tables:", "", md_table(*resolution_table(workload)), ""]
    if results.get("notes"):
        lines += ["### Notes", ""] + [f"- {note}" for note in results["notes"]] + [""]
    return "\n".join(lines)


def print_console(results: dict[str, Any]) -> None:
    print_table("Targets", *targets_table(results))
    for workload in results["workloads"]:
        w = workload["workload"]
        print_table(f"{w['tables']} tables, {w['rate']:g} updates/s each", *workload_table(workload))
    for note in results.get("notes", []):
        print(f"- {note}")
