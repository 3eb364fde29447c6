"""From one cell's raw records to its figures (templates/freshness-at-scale.md defines them).

Every table counts as current at the first scheduled instant (its priming update visible,
nothing pending), for the system and the ideal alike. The loader's own staleness is the
increase of ``loader_table_staleness_seconds_squared`` between two scrapes, against the
outside reader's integral over the same interval (the scrape's instant recovered from each
table's ``staleness`` + ``current_upto`` gauges), both from the priming update as the loader counts.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from benchmarks.freshness_at_scale.workload import Workload
from testing.observed_staleness import ObservedUpdate, percentile, staleness_integral, summarize

INTEGRAL = "loader_table_staleness_seconds_squared_total"
STALENESS = "loader_table_staleness_seconds"
UPTO = "loader_table_current_upto_timestamp_seconds"


def _per_table(metrics: dict[str, float], name: str, table: str) -> float | None:
    return metrics.get(f'{name}{{table="{table}"}}')


def server_time(metrics: dict[str, float], tables: list[str]) -> float | None:
    """The loader's clock when it answered the scrape: staleness + current_upto of any table."""
    instants = []
    for table in tables:
        staleness, upto = _per_table(metrics, STALENESS, table), _per_table(metrics, UPTO, table)
        if staleness is not None and upto is not None:
            instants.append(staleness + upto)
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
    exported = [
        t for t in tables if _per_table(m0, INTEGRAL, t) is not None and _per_table(m1, INTEGRAL, t) is not None
    ]
    if s0 is None or s1 is None or not exported or s1 <= s0:
        return {"tables_exported": len(exported), "tables": len(tables), "note": "no per-table staleness series"}
    length = s1 - s0
    loader_mean = sum(_per_table(m1, INTEGRAL, t) - _per_table(m0, INTEGRAL, t) for t in exported)  # type: ignore[operator]
    loader_mean /= len(exported) * length
    outside_mean = sum(staleness_integral(observed[t], s0, s1, base[t]) for t in exported) / (len(exported) * length)
    return {
        "interval": [s0, s1],
        "tables_exported": len(exported),
        "tables": len(tables),
        "loader_mean_staleness": loader_mean,
        "outside_mean_staleness": outside_mean,
        "relative_difference": loader_mean / outside_mean - 1.0 if outside_mean > 0 else float("nan"),
    }


def _cpu(a: dict[str, float] | None, b: dict[str, float] | None, seconds: float) -> dict[str, float] | None:
    if not a or not b:
        return None
    python, jvm = b["python"] - a["python"], b["jvm"] - a["jvm"]
    return {
        "python_seconds": python,
        "jvm_seconds": jvm,
        "seconds": python + jvm,
        "cores": (python + jvm) / seconds if seconds > 0 else float("nan"),
    }


def analyze(record: dict[str, Any], starved_factor: float) -> dict[str, Any]:
    workload = record["workload"]
    rows_per_update = int(workload["rows_per_update"])
    names = Workload(**workload).table_names()
    w0, w1 = record["window"]
    length = w1 - w0
    reader = record["reader"]

    arrival: dict[int, tuple[str, float]] = {}
    lags: list[float] = []
    unanswered: set[int] = set()
    generator_errors: dict[str, int] = defaultdict(int)
    for source in ("priming", "produced"):
        out = record[source]
        for key, count in out["errors"].items():
            generator_errors[f"{source}:{key}"] += count
        for uid, table, scheduled, at, _, status, *_ in out["records"]:
            if at is None and status == 0:
                unanswered.add(uid)  # may or may not have been accepted
            if at is not None:
                arrival[uid] = (names[table], at)
                if source == "produced":
                    lags.append(at - scheduled)

    observed: dict[str, list[ObservedUpdate]] = {name: [] for name in names}
    own_base: dict[str, float] = {}
    integrity: dict[str, Any] = {
        "missing": 0,
        "duplicated": 0,
        "partial": 0,
        "in_several_commits": 0,
        "unexpected": 0,
        "tables_with_problems": [],
    }
    commits_in_window = 0
    by_table: dict[str, list[int]] = defaultdict(list)
    for uid, (tname, _) in arrival.items():
        by_table[tname].append(uid)
    observation_gaps: list[float] = []
    for name in names:
        table = reader["tables"][name]
        seen = {version: at for version, at, _, _, _ in table["commits"]}
        for _, at, previous, added, _ in table["commits"]:
            if added and w0 <= at < w1:
                commits_in_window += 1
                if previous is not None:
                    observation_gaps.append(at - previous)
        present: dict[int, tuple[int, int, int]] = {uid: (rows, first, n) for uid, rows, first, n in table["updates"]}
        expected = by_table[name]
        problems = 0
        for uid in expected:
            rows, first, commits = present.get(uid, (0, None, 0))
            visible = seen.get(first) if first is not None else None
            observed[name].append(ObservedUpdate(arrival[uid][1], visible))
            if commits > 1:
                integrity["in_several_commits"] += 1
                problems += 1
            if rows == 0:
                integrity["missing"] += 1
                problems += 1
            elif rows > rows_per_update:
                integrity["duplicated"] += 1
                problems += 1
            elif rows < rows_per_update:
                integrity["partial"] += 1
                problems += 1
        unexpected = set(present) - set(expected) - unanswered
        integrity["unexpected"] += len(unexpected)
        problems += len(unexpected)
        if problems:
            integrity["tables_with_problems"].append(name)
        # The loader's ledger counts from the table's newest loaded release: the priming update.
        own_base[name] = min((u.arrival for u in observed[name]), default=record["start_at"])
    integrity["expected_updates"] = len(arrival)
    integrity["rows_expected"] = len(arrival) * rows_per_update
    integrity["rows_read"] = sum(reader["tables"][n]["rows"] for n in names)
    deltalake = record.get("deltalake_readback")
    if deltalake is not None:
        integrity["deltalake_rows"] = sum(t["rows"] for t in deltalake.values())
        integrity["deltalake_uids"] = sum(t["uids"] for t in deltalake.values())
        integrity["deltalake_max_rows_per_uid"] = max((t["max_rows_per_uid"] for t in deltalake.values()), default=0)
    integrity["ok"] = (
        not integrity["tables_with_problems"]
        and integrity["rows_read"] == integrity["rows_expected"]
        and (
            deltalake is None
            or (
                integrity["deltalake_rows"] == integrity["rows_expected"]
                and integrity["deltalake_uids"] == integrity["expected_updates"]
            )
        )
    )

    starved_after = starved_factor / float(workload["rate"])
    # Every table is current when the arrivals start (its priming update visible, nothing
    # pending): staleness counts from then, for the system and the ideal alike.
    start_at = record["start_at"]
    summary = summarize(observed, w0, w1, dict.fromkeys(names, start_at), starved_after)
    worst = summary.worst_table
    cpu = _cpu(record.get("cpu_w0"), record.get("cpu_w1"), length)
    figures: dict[str, Any] = {
        "variant": record["variant"]["name"],
        "window": [w0, w1],
        "window_seconds": length,
        "updates_in_window": summary.window_updates,
        "mean_staleness": summary.mean_staleness,
        "ideal_mean_staleness": summary.ideal_mean_staleness,
        "ratio": summary.ratio,
        "latency_p50": summary.latency_p50,
        "latency_p99": summary.latency_p99,
        "latency_max": summary.latency_max,
        "never_visible_in_window": summary.never_visible,
        "starved_after_seconds": starved_after,
        "starved": len(summary.starved),
        "starved_tables": list(summary.starved[:20]),
        "worst_table": {
            "name": worst.name,
            "mean_staleness": worst.mean_staleness,
            "ideal_mean_staleness": worst.ideal_mean_staleness,
            "max_staleness": worst.max_staleness,
            "max_latency": worst.max_latency,
        },
        "max_staleness": max(t.max_staleness for t in summary.tables),
        "commits": commits_in_window,
        "commits_per_second": commits_in_window / length,
        "cpu": cpu,
        "cpu_total_seconds": _cpu(record.get("cpu_ready"), record.get("cpu_end"), 1.0),
        "integrity": integrity,
        "own_staleness": own_staleness(record, observed, own_base),
        "reader": {
            "interval": reader["interval"],
            "poll_rounds": reader["poll_rounds"],
            "mean_observation_gap": statistics.fmean(observation_gaps) if observation_gaps else float("nan"),
            "max_observation_gap": max(observation_gaps, default=float("nan")),
            "drained": reader["drained"],
            "drain_seconds": reader["drain_seconds"],
            "cpu_seconds_before_drain": reader.get("cpu_seconds_before_drain"),
        },
        "generator": {
            "errors": dict(generator_errors),
            "first_error": record["produced"].get("first_error") or record["priming"].get("first_error"),
            "lag_p50": percentile(lags, 0.5),
            "lag_p99": percentile(lags, 0.99),
            "lag_max": max(lags, default=float("nan")),
            "cpu_seconds": record["produced"]["cpu_seconds"],
        },
        "ready_seconds": record["ready_seconds"],
        "prime_seconds": record["prime_seconds"],
        "alive_at_end": record.get("alive_at_end"),
        "per_table_mean_staleness": {
            "min": min(t.mean_staleness for t in summary.tables),
            "median": statistics.median(t.mean_staleness for t in summary.tables),
            "max": worst.mean_staleness,
        },
    }
    if record.get("peer_status"):
        status = record["peer_status"]
        figures["peer"] = {
            "session_seconds": status.get("session_seconds"),
            "queries_start_seconds": status.get("start_seconds"),
            "queries_started": status.get("started"),
            "active_at_end": status.get("active"),
            "failed": status.get("failed", {}),
        }
    if not math.isfinite(figures["ratio"]):
        figures["ratio"] = float("nan")
    return figures
