"""From one cell's raw records to its figures (templates/freshness-at-scale.md defines them).

The loader's own staleness is the increase of ``loader_table_staleness_seconds_squared``
between two scrapes, against the outside reader's integral over the same interval (the
scrape's instant recovered from each table's ``staleness`` + ``current_upto`` gauges).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from benchmarks.freshness_at_scale.systems import Workload
from testing.observed_staleness import ObservedUpdate, percentile, staleness_integral, summarize

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
