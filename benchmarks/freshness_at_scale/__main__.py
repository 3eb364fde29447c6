"""Freshness at 50, 200 and 1,000 tables: the loader's variants against Spark Structured
Streaming, side by side in one run on this machine (issue 14, part 6). A full run takes ~45 min
on 2 cores; ``--quick``: 10 tables x 20 s per system; e.g. ``--systems peer,before --workloads 50:0.5``.

Per workload and system, one after the other: ``systems.run_cell`` measures, ``analyze`` computes
the figures; the results file is written after every measurement.
"""

from __future__ import annotations

import argparse
import math
import signal
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from typing import Any

from benchmarks.freshness_at_scale import systems
from benchmarks.freshness_at_scale.systems import Variant, Workload
from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template, bullets, missing, pct
from testing.observed_staleness import ObservedUpdate, percentile, staleness_integral, summarize
from testing.report import LoadMonitor, fmt_num, log, machine_markdown

FULL_WORKLOADS = "50:0.5,200:0.5,1000:0.1"
QUICK_WORKLOADS = "10:0.5"
#: Warm-up: this many mean inter-arrival times of a table (the cold-start backlog settles).
WARMUP_INTERARRIVALS = 3.0


def options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workloads", help=f"TABLES:RATE,... (default {FULL_WORKLOADS}; quick {QUICK_WORKLOADS})")
    add("--systems", help="variant names to run, comma-separated (default: all)")
    add("--warmup", type=float, help=f"seconds of arrivals before the window (default {WARMUP_INTERARRIVALS:g}/rate)")
    add("--rows", type=int, default=100, help="rows per update (default 100)")
    add("--poll", type=float, default=0.05, help="outside reader's poll interval, seconds")


def plan(args: argparse.Namespace) -> tuple[list[Workload], list[Variant]]:
    """The workloads and the systems to run (SystemExit for a wrong argument)."""
    try:
        workloads = []
        for item in (args.workloads or (QUICK_WORKLOADS if args.quick else FULL_WORKLOADS)).split(","):
            n, rate = int(item.split(":")[0]), float(item.split(":")[-1])
            if n < 1 or rate <= 0 or item.count(":") != 1:
                raise ValueError(f"workload {item!r}: write TABLES:RATE, e.g. 200:0.5")
            warmup = args.warmup if args.warmup is not None else max(4.0, WARMUP_INTERARRIVALS / rate)
            workloads.append(Workload(n, rate, warmup, args.duration, args.rows, args.seed))
        names = [v.name for v in systems.DEFAULT_VARIANTS]
        if unknown := set(wanted := args.systems.split(",") if args.systems else names) - set(names):
            raise ValueError(f"unknown systems {sorted(unknown)}; variants: {', '.join(names)}")
        variants = [v for v in systems.DEFAULT_VARIANTS if v.name in wanted]
        for variant in variants:
            systems.check_code_dir(variant)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return workloads, variants


# -- a cell's figures ------------------------------------------------------------------
INTEGRAL = "loader_table_staleness_seconds_squared_total"
STALENESS = "loader_table_staleness_seconds"
UPTO = "loader_table_current_upto_timestamp_seconds"
#: An update's fates counted against the integrity check.
PROBLEMS = ("missing", "duplicated", "partial", "in_several_commits", "unexpected")
#: A table is starved when an update waits more than this many mean inter-arrival times.
STARVED_FACTOR = 10.0


def _series(metrics: dict[str, float], name: str, tables: list[str]) -> dict[str, float]:
    """A per-table series of a scrape: its value for each table that has one."""
    return {t: v for t in tables if (v := metrics.get(f'{name}{{table="{t}"}}')) is not None}


def server_time(metrics: dict[str, float], tables: list[str]) -> float | None:
    """The loader's clock when it answered the scrape: staleness + current_upto of any table."""
    staleness, upto = _series(metrics, STALENESS, tables), _series(metrics, UPTO, tables)
    instants = [staleness[t] + upto[t] for t in staleness if t in upto]
    return statistics.median(instants) if instants else None


def own_staleness(
    record: dict[str, Any], observed: dict[str, list[ObservedUpdate]], base: dict[str, float]
) -> dict[str, Any] | None:
    """The loader's mean staleness from its /metrics against the outside reader's, same interval."""
    m0, m1 = record.get("metrics_w0"), record.get("metrics_w1")
    if not m0 or not m1:
        return None
    tables = list(observed)
    s0, s1 = server_time(m0, tables), server_time(m1, tables)
    i0, i1 = _series(m0, INTEGRAL, tables), _series(m1, INTEGRAL, tables)
    exported = [t for t in i0 if t in i1]
    if s0 is None or s1 is None or not exported or s1 <= s0:
        return {"note": "no per-table staleness series"}
    span = len(exported) * (s1 - s0)
    loader_mean = sum(i1[t] - i0[t] for t in exported) / span
    outside_mean = sum(staleness_integral(observed[t], s0, s1, base[t]) for t in exported) / span
    out = {"loader_mean_staleness": loader_mean, "outside_mean_staleness": outside_mean}
    return out | {"relative_difference": loader_mean / outside_mean - 1.0 if outside_mean > 0 else math.nan}


def analyze(record: dict[str, Any]) -> dict[str, Any]:
    """From one cell's raw records to its figures (templates/freshness-at-scale.md defines them).

    The loader's own staleness is the increase of ``loader_table_staleness_seconds_squared``
    between two scrapes, against the outside reader's integral over the same interval (the
    scrape's instant recovered from each table's ``staleness`` + ``current_upto`` gauges).
    """
    workload = record["workload"]
    per_update = int(workload["rows_per_update"])
    names = Workload(**workload).table_names()
    w0, w1 = record["window"]
    reader = record["reader"]

    arrival: dict[int, tuple[str, float]] = {}
    lags: list[float] = []
    unanswered: set[int] = set()
    errors: Counter[str] = Counter()
    for source in ("priming", "produced"):
        errors.update({f"{source}:{key}": count for key, count in record[source]["errors"].items()})
        for uid, table, scheduled, at, _, status, *_ in record[source]["records"]:
            if at is None and status == 0:
                unanswered.add(uid)  # may or may not have been accepted
            elif at is not None:
                arrival[uid] = (names[table], at)
                if source == "produced":
                    lags.append(at - scheduled)

    by_table: dict[str, list[int]] = defaultdict(list)
    for uid, (name, _) in arrival.items():
        by_table[name].append(uid)
    observed: dict[str, list[ObservedUpdate]] = {}
    own_base: dict[str, float] = {}
    integrity: dict[str, Any] = dict.fromkeys(PROBLEMS, 0)
    commits = 0
    gaps: list[float] = []
    for name in names:
        table = reader["tables"][name]
        seen = {version: at for version, at, *_ in table["commits"]}
        for _, at, previous, added, _ in table["commits"]:
            if added and w0 <= at < w1:
                commits += 1
                if previous is not None:
                    gaps.append(at - previous)
        present = {uid: (rows, first, versions) for uid, rows, first, versions in table["updates"]}
        observed[name] = []
        for uid in by_table[name]:
            rows, first, versions = present.get(uid, (0, None, 0))
            observed[name].append(ObservedUpdate(arrival[uid][1], seen.get(first)))
            integrity["in_several_commits"] += versions > 1
            if rows != per_update:
                integrity["missing" if rows == 0 else "duplicated" if rows > per_update else "partial"] += 1
        integrity["unexpected"] += len(set(present) - set(by_table[name]) - unanswered)
        # The loader's ledger counts from the table's newest loaded release: the priming update.
        own_base[name] = min((u.arrival for u in observed[name]), default=record["start_at"])
    integrity["expected_updates"] = len(arrival)
    integrity["rows_expected"] = rows_expected = len(arrival) * per_update
    integrity["rows_read"] = sum(reader["tables"][n]["rows"] for n in names)
    ok = not any(integrity[k] for k in PROBLEMS) and integrity["rows_read"] == rows_expected
    if (readback := record.get("deltalake_readback")) is not None:
        integrity["deltalake_rows"] = sum(t["rows"] for t in readback.values())
        integrity["deltalake_uids"] = sum(t["uids"] for t in readback.values())
        ok = ok and integrity["deltalake_rows"] == rows_expected and integrity["deltalake_uids"] == len(arrival)
    integrity["ok"] = ok

    cpu = None
    if (a := record.get("cpu_w0")) and (b := record.get("cpu_w1")):
        python, jvm = b["python"] - a["python"], b["jvm"] - a["jvm"]
        cpu = dict(python_seconds=python, jvm_seconds=jvm, seconds=python + jvm, cores=(python + jvm) / (w1 - w0))
    starved_after = STARVED_FACTOR / float(workload["rate"])
    # Every table is current when the arrivals start (its priming update visible, nothing
    # pending): staleness counts from then, for the system and the ideal alike.
    summary = summarize(observed, w0, w1, dict.fromkeys(names, record["start_at"]), starved_after)
    figures: dict[str, Any] = {"window_seconds": w1 - w0}
    figures |= {k: getattr(summary, k) for k in ("mean_staleness", "ideal_mean_staleness")}
    figures["ratio"] = summary.ratio if math.isfinite(summary.ratio) else math.nan
    figures |= {k: getattr(summary, k) for k in ("latency_p50", "latency_p99", "latency_max")}
    figures |= {"never_visible_in_window": summary.never_visible, "starved_after_seconds": starved_after}
    worst = {"name": summary.worst_table.name, "mean_staleness": summary.worst_table.mean_staleness}
    figures |= {"starved": len(summary.starved), "worst_table": worst, "commits_per_second": commits / (w1 - w0)}
    figures |= {"cpu": cpu, "integrity": integrity, "own_staleness": own_staleness(record, observed, own_base)}
    gap = statistics.fmean(gaps) if gaps else math.nan
    figures["reader"] = {k: v for k, v in reader.items() if k != "tables"} | {"mean_observation_gap": gap}
    first_error = record["produced"]["first_error"] or record["priming"]["first_error"]
    generator = {"errors": dict(errors), "first_error": first_error, "lag_p50": percentile(lags, 0.5)}
    generator |= {"lag_p99": percentile(lags, 0.99), "lag_max": max(lags, default=math.nan)}
    figures["generator"] = generator | {"cpu_seconds": record["produced"]["cpu_seconds"]}
    figures |= {k: record[k] for k in ("ready_seconds", "prime_seconds", "alive_at_end")}
    if status := record.get("peer_status"):
        keys = {"session_seconds": "session_seconds", "queries_start_seconds": "start_seconds"}
        keys |= {"queries_started": "started", "active_at_end": "active"}
        figures["peer"] = {ours: status.get(key) for ours, key in keys.items()} | {"failed": status.get("failed", {})}
    return figures


def measure_cell(variant: Variant, workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """One system under one workload: its figures, or the error that stopped it."""
    cell: dict[str, Any] = {"variant": variant.name}
    with LoadMonitor() as load:
        try:
            cell["figures"] = f = analyze(systems.run_cell(variant, workload, args))
            log(
                f"[{workload.name}] {variant.name}: ratio {f['ratio']:.2f}, p99 latency {f['latency_p99']:.2f} s, "
                f"starved {f['starved']}, integrity {'ok' if f['integrity']['ok'] else 'PROBLEM'}"
            )
        except Exception as exc:  # noqa: BLE001 - one failed system must not lose the others
            cell["error"] = f"{type(exc).__name__}: {exc}"[:3000]
            log(f"[{workload.name}] {variant.name}: FAILED {cell['error']}")
    cell["loadavg_peak"] = load.peak
    return cell


def measure(run: Run) -> dict[str, Any]:
    # SIGTERM unwinds like Ctrl-C, so every system and helper process is stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args = run.args
    workloads, variants = plan(args)
    options = {"poll_interval": args.poll, "drain_timeout": args.drain_timeout, "starved_factor": STARVED_FACTOR}
    options |= {"rows_per_update": args.rows, "seed": args.seed, "full_command": f"python -m {run.bench.module}"}
    results: dict[str, Any] = {"options": options, "variants": [v.to_json() for v in variants], "workloads": []}
    began = time.perf_counter()
    log(f"freshness at scale: {', '.join(w.name for w in workloads)} x {', '.join(v.name for v in variants)}")
    for workload in workloads:
        entry: dict[str, Any] = {"workload": asdict(workload), "updates": len(systems.schedule(workload)), "cells": []}
        results["workloads"].append(entry)
        for variant in variants:
            entry["cells"].append(measure_cell(variant, workload, args))
            run.meta["run_seconds"] = time.perf_counter() - began
            run.save(results)  # an interrupted run keeps what it measured
    return results


#: Issue 14's targets: staleness ratio to ideal by table count; own metrics within 5%.
RATIO_TARGETS = {50: 1.5, 200: 2.0, 1000: 2.0}
STARVATION_TABLES = (200, 1000)
OWN_TOLERANCE = 0.05


def _s(value: float | None, digits: int = 3) -> str:
    """Seconds to ``digits`` significant digits; "never" for an update never visible."""
    return "–" if missing(value) else "never" if value == math.inf else fmt_num(float(value), digits)  # type: ignore


#: Cell formats: seconds (``s``, ``s2``), a relative difference, seconds as ms (``ms``: 1 decimal, ``ms0``: none).
FORMATS = {"s": _s, "s2": lambda v: _s(v, 2), "diff": lambda v: pct(v) if v is not None and math.isfinite(v) else "–"}
FORMATS |= {"ms": lambda v: f"{1e3 * v:.1f}", "ms0": lambda v: f"{1e3 * v:.0f}"}
T = Template("freshness-at-scale", FORMATS)


def _cells(results: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(w["workload"], cell) for w in results["workloads"] for cell in w["cells"]]


def _integrity_text(integrity: dict[str, Any]) -> str:
    if integrity["ok"]:
        return f"ok ({integrity['expected_updates']:,} updates)"
    words = dict(missing="not in the table after the drain", duplicated="duplicated", partial="with rows missing")
    words |= dict(in_several_commits="in more than one commit", unexpected="never acknowledged")
    parts = [f"{integrity[k]} {word}" for k, word in words.items() if integrity.get(k)]
    if integrity["rows_read"] != integrity["rows_expected"]:
        parts.append(f"rows {integrity['rows_read']:,} of {integrity['rows_expected']:,}")
    if "deltalake_rows" in integrity and integrity["deltalake_rows"] != integrity["rows_expected"]:
        parts.append(f"deltalake rows {integrity['deltalake_rows']:,}")
    return "PROBLEM: " + ", ".join(parts or ["see JSON"])


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target and system; the issue's goals are for the loader after parts 3+4,
    every system is judged against them so the table reads side by side."""
    targets: list[dict[str, Any]] = []

    def add(block: str, ok: bool | None, **values: Any) -> None:
        name, measured, goal = T.line(block, n=n, **values).split(" | ")
        targets.append(dict(system=cell["variant"], tables=n, target=name, measured=measured, goal=goal, ok=ok))

    for workload, cell in _cells(results):
        n = workload["tables"]
        if (f := cell.get("figures")) is None:
            add("target-failed", False, error=cell.get("error", "?"))
            continue
        if n in RATIO_TARGETS:
            add("target-ratio", f["ratio"] <= RATIO_TARGETS[n], f=f, goal=RATIO_TARGETS[n])
        if n in STARVATION_TABLES:
            detail = T.line("starved-never" if f["never_visible_in_window"] else "starved-longest", f=f)
            add("target-starved", f["starved"] == 0, f=f, detail=detail)
            if (own := f.get("own_staleness")) is not None and "relative_difference" in own:
                ok = math.isfinite(diff := own["relative_difference"]) and abs(diff) <= OWN_TOLERANCE
                add("target-own", ok, own=own, tolerance=100 * OWN_TOLERANCE)
            elif own is not None:
                add("target-own-na", None, note=own.get("note"), tolerance=100 * OWN_TOLERANCE)
        add("target-integrity", f["integrity"]["ok"], integrity=_integrity_text(f["integrity"]))
    return targets


def build_notes(results: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    meta = results["meta"]
    if meta.get("quick"):
        notes.append(T.line("note-quick", command=results["options"]["full_command"]))
    peak, nproc = meta.get("loadavg_peak"), meta["machine"]["nproc"]
    if peak is not None and peak > nproc + 1:
        notes.append(T.line("note-load", peak=peak, nproc=nproc))
    for workload, cell in _cells(results):
        tag = f"{workload['tables']:,} tables, {cell['variant']}"
        if "error" in cell:
            notes.append(T.line("note-failed", tag=tag, error=cell["error"]))
            continue
        f = cell["figures"]
        gen = f["generator"]
        if gen["errors"]:
            notes.append(T.line("note-errors", tag=tag, gen=gen))
        if isinstance(gen["lag_p99"], float) and gen["lag_p99"] > 0.25:
            notes.append(T.line("note-lag", tag=tag, gen=gen))
        if not f["reader"]["drained"]:
            notes.append(T.line("note-undrained", tag=tag, timeout=results["options"]["drain_timeout"]))
        if peer := f.get("peer"):
            failed = f"; failed: {dict(list(peer['failed'].items())[:3])}" if peer.get("failed") else ""
            notes.append(T.line("note-peer", tag=tag, peer=peer, prime=f["prime_seconds"], failed=failed))
        if f["never_visible_in_window"] or f["latency_p50"] > f["window_seconds"]:
            notes.append(T.line("note-late", tag=tag))
        if f["alive_at_end"] is False:
            notes.append(T.line("note-exited", tag=tag))
    return notes


def workload_table(workload: dict[str, Any]) -> str:
    rows = []
    for cell in workload["cells"]:
        if (f := cell.get("figures")) is None:
            rows.append([cell["variant"], f"failed: {cell.get('error', '?')[:120]}"] + ["–"] * 13)
            continue
        own = f.get("own_staleness") or {}
        own_text = T.line("own", own=own) if "relative_difference" in own else "n/a"
        i = f["integrity"]
        lost = f"{i['missing'] + i['partial']:,} / {i['duplicated'] + i['in_several_commits']:,}"
        lost += f" ({i['missing']:,} not visible after the drain)" if i["missing"] else ""
        cpu = defaultdict(lambda: None, f["cpu"] or {})
        rows.append(T.line("workload-row", cell=cell, f=f, cpu=cpu, own=own_text, lost=lost).split(" | "))
    return T.table("workload-table", rows)


def _variant(v: dict[str, Any]) -> str:
    where = ""
    if v["kind"] == "loader":
        git = v.get("code_git") or {}
        where = T.line("variant-code", v=v, git=git, modified=", modified" if git.get("modified") else "")
        if v["env"]:
            where += "; environment " + ", ".join(f"`{k}={val}`" for k, val in v["env"].items())
        where += "."
    elif v["conf"]:
        where = T.line("variant-conf", conf=v["conf"])
    return T.line("variant", v=v, where=where)


def render_markdown(results: dict[str, Any]) -> str:
    options, machine = results["options"], machine_markdown(results["meta"], "loader")
    variants = bullets(_variant(v) for v in results["variants"])
    targets = T.table("targets-table", results["targets"], "lllll")
    out = [T("head", machine=machine, variants=variants, options=options, targets=targets)]
    for entry in results["workloads"]:
        w, table = entry["workload"], workload_table(entry)
        out.append(T("workload", w=w, total=w["tables"] * w["rate"], updates=entry["updates"], table=table))
    out.append(T("readers"))
    for e in results["workloads"]:
        rows = [{"variant": c["variant"], **c["figures"]} for c in e["cells"] if "figures" in c]
        out.append(T("reader", tables=e["workload"]["tables"], table=T.table("reader-table", rows)))
    if results.get("notes"):
        out.append(T("notes", notes=bullets(results["notes"])))
    return "".join(out).removesuffix("\n")


BENCHMARK = Benchmark(
    measure,
    render_markdown,
    quick_saves=True,
    seed=14,
    counts={"duration": (20.0, 120.0, "window seconds"), "drain_timeout": (120.0, 600.0, "seconds after the arrivals")},
    options=options,
    finish=lambda results: results.update(targets=evaluate_targets(results), notes=build_notes(results)),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
