"""Figures and verdicts of the overload trial (``benchmarks/overload.py``): phases, latency,
backpressure, recovery, memory and disk against their budgets, and the row-by-row account
of what reached Delta.

Everything here is a pure function of the trial's raw material (per-request records of the
load generator, the sampler's series, the ids read from Delta), so the test suite
(tests/test_overload.py) asserts on the same verdicts the report prints.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from benchmarks._common import fmt_duration, machine_markdown, md_table, print_table, status

MIB = 1 << 20

#: Indices of a load generator record: [k, scheduled, sent, done, status, retry_after, acks].
K, SCHEDULED, SENT, DONE, STATUS, RETRY_AFTER, ACKS = range(7)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _phases(plan: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(name, start, end, offered rate) of each phase, in seconds from the generator's start."""
    w, o, r = plan["warm_seconds"], plan["overload_seconds"], plan["recovery_seconds"]
    return [
        ("warm", 0.0, w, plan["warm_rate"]),
        ("overload", w, w + o, plan["overload_rate"]),
        ("recovery", w + o, w + o + r, plan["warm_rate"]),
    ]


def _rel_samples(trial: dict[str, Any]) -> list[dict[str, float]]:
    start = trial["start_at"]
    out = []
    for s in trial["samples"]:
        s = dict(s, t=s["t"] - start)
        s["disk"] = s["spilled"] + s["in_flight_disk"]  # what check_room weighs against the disk budget
        out.append(s)
    return out


def _at(samples: list[dict[str, float]], t: float, key: str) -> float:
    """The sampled value of ``key`` nearest to time ``t`` (NaN without samples)."""
    if not samples:
        return float("nan")
    return min(samples, key=lambda s: abs(s["t"] - t))[key]


def phase_figures(trial: dict[str, Any]) -> list[dict[str, Any]]:
    plan = trial["plan"]
    samples = _rel_samples(trial)
    out = []
    for name, start, end, rate in _phases(plan):
        recs = [r for r in trial["records"] if start <= r[SCHEDULED] < end]
        seconds = end - start
        ok = [r for r in recs if r[STATUS] == 202]
        refused = [r for r in recs if r[STATUS] == 503]
        lat = [1e3 * (r[DONE] - r[SCHEDULED]) for r in ok]
        # The warm phase's first second opens the generator's connections: not "normal".
        settled = [1e3 * (r[DONE] - r[SCHEDULED]) for r in ok if r[SCHEDULED] >= start + 1.0] or lat
        lat503 = [1e3 * (r[DONE] - r[SCHEDULED]) for r in refused]
        loaded = _at(samples, end, "loaded") - _at(samples, start, "loaded")
        out.append(
            {
                "phase": name,
                "seconds": seconds,
                "offered_per_second": len(recs) / seconds,
                "target_rate": rate,
                "accepted": len(ok),
                "accepted_updates_per_second": len(ok) / seconds,
                "accepted_rows_per_second": len(ok) * plan["rows"] / seconds,
                "loaded_updates_per_second": loaded / seconds,
                "refused_503": len(refused),
                "other_statuses": dict(Counter(str(r[STATUS]) for r in recs if r[STATUS] not in (202, 503))),
                "p50_ms": percentile(lat, 0.5),
                "p99_ms": percentile(lat, 0.99),
                "max_ms": max(lat) if lat else float("nan"),
                "p99_503_ms": percentile(lat503, 0.99),
                "settled_p99_ms": percentile(settled, 0.99),
            }
        )
    return out


def account(trial: dict[str, Any]) -> dict[str, Any]:
    """Every request against what Delta holds: acknowledged rows exactly once, refused rows
    never, unanswered requests all or nothing, no row that nobody sent."""
    plan = trial["plan"]
    tables, rows, stride, first = plan["table_names"], plan["rows"], plan["id_stride"], plan["first_key"]
    fate: dict[int, tuple[str, int]] = {}  # key -> (table, status); status 0: no answer
    acks: list[tuple[str, int]] = []
    for p in trial["primed"]:
        fate[p["key"]] = (p["table"], p["status"])
        acks += [tuple(a) for a in p["acks"]]
    for r in trial["records"]:
        fate[first + r[K]] = (tables[r[K] % len(tables)], r[STATUS])
        if r[STATUS] == 202 and r[ACKS]:
            acks += [tuple(a) for a in r[ACKS]]
    for k in range(trial["generator"]["sent"]):  # held by a worker cancelled at the drain deadline
        fate.setdefault(first + k, (tables[k % len(tables)], 0))

    seen: Counter[tuple[str, int, int]] = Counter()
    for table, ids in trial["delta_ids"].items():
        seen.update((table, i // stride, i % stride) for i in ids)
    by_key: dict[tuple[str, int], list[int]] = {}
    for (table, key, _row), n in seen.items():
        by_key.setdefault((table, key), []).append(n)

    out = Counter()
    for key, (table, code) in fate.items():
        counts = by_key.pop((table, key), [])
        present, total = len(counts), sum(counts)
        if code == 202:
            out["acknowledged"] += 1
            out["lost_rows"] += rows - present
            out["duplicated_rows"] += total - present
            out["lost_updates"] += present < rows
            out["duplicated_updates"] += total > present
        elif code == 0:
            out["unanswered"] += 1
            out["unanswered_loaded"] += present == rows and total == rows
            out["unanswered_partial"] += 0 < present and (present < rows or total > present)
        else:
            out["refused"] += 1
            out["refused_but_loaded"] += present > 0
    out["phantom_rows"] = sum(sum(c) for c in by_key.values())
    out["delta_rows"] = sum(len(ids) for ids in trial["delta_ids"].values())
    out["duplicate_acks"] = len(acks) - len(set(acks))
    return {k: int(v) for k, v in out.items()}


def _first(samples: list[dict[str, float]], predicate: Any, after: float = -math.inf) -> float | None:
    for s in samples:
        if s["t"] >= after and predicate(s):
            return s["t"]
    return None


def latency_limit(normal_p99: float) -> float:
    """Normal latency: within twice the warm phase's p99 (after its first second), or 100
    ms above it (on a shared 2-core machine one Spark job start moves a small p99 by tens
    of milliseconds)."""
    return max(2 * normal_p99, normal_p99 + 100.0)


def _latency_recovery(trial: dict[str, Any], normal_p99: float, drop: float, end: float) -> float | None:
    """Seconds after the drop from which the accepted requests of the rest of the recovery
    phase have a p99 within ``latency_limit``: latency back to normal (a p99 over the rest,
    not a per-window maximum, so that one late hiccup of a shared machine does not undo a
    recovery). Checked on a 1-s grid; None: not even the last 10 s are normal."""
    limit = latency_limit(normal_p99)
    accepted = sorted(
        (r[SCHEDULED], 1e3 * (r[DONE] - r[SCHEDULED]))
        for r in trial["records"]
        if r[STATUS] == 202 and drop <= r[SCHEDULED] < end
    )
    for second in range(max(1, int(end - drop) - 9)):
        rest = [ms for t, ms in accepted if t >= drop + second]
        if rest and percentile(rest, 0.99) <= limit:
            return float(second)
    return None


def analyse(trial: dict[str, Any]) -> dict[str, Any]:
    plan = trial["plan"]
    M, D, P = plan["memory_budget"], plan["disk_budget"], plan["workers"]
    samples = _rel_samples(trial)
    phases = phase_figures(trial)
    records = trial["records"]
    drop = plan["warm_seconds"] + plan["overload_seconds"]
    end = drop + plan["recovery_seconds"]
    chunk = max((s["chunk"] for s in samples), default=0)
    update_bytes = trial.get("update_payload_bytes", 0)

    refused = [r for r in records if r[STATUS] == 503]
    with_header = [r for r in refused if r[RETRY_AFTER] is not None]
    right_header = [r for r in with_header if r[RETRY_AFTER] == str(plan["retry_after"])]
    fivexx = Counter(str(r[STATUS]) for r in records if r[STATUS] >= 500 and r[STATUS] != 503)
    fourxx = Counter(str(r[STATUS]) for r in records if 400 <= r[STATUS] < 500)
    unanswered = sum(1 for r in records if r[STATUS] == 0)
    first_503 = min((r[DONE] for r in refused), default=None)
    last_503 = max((r[SCHEDULED] for r in refused), default=None)
    # The disk budget is "hit" once the segments leave no room for one more spill write
    # (a chunk) and the update that triggers it: from then on check_room refuses while
    # memory is full (it also counts updates admitted whose WAL write is under way, which
    # the samples do not show, so refusals may begin a little below this level).
    full_level = D - chunk - update_bytes
    budget_hit = _first(samples, lambda s: s["disk"] >= full_level)
    near_first_503 = [s["disk"] for s in samples if first_503 is not None and abs(s["t"] - first_503) <= 0.5]

    warm, over, rec = phases
    recovery_second_half = [r for r in records if r[SCHEDULED] >= drop + plan["recovery_seconds"] / 2]
    spill_empty = _first(samples, lambda s: s["disk"] == 0, after=drop)
    backlog_loaded = trial["generator_end"] - trial["start_at"] + trial["drain_seconds_after_generator"]
    latency_back = _latency_recovery(trial, warm["settled_p99_ms"], drop, end)

    base = trial["rss_baseline"]
    peak_python = max((s["rss_python"] for s in samples), default=0)
    peak_group = max((s["rss_python"] + s["rss_jvm"] for s in samples), default=0)
    peak_jvm = max((s["rss_jvm"] for s in samples), default=0)
    python_growth = peak_python - base["python"]
    group_growth = peak_group - (base["python"] + base["jvm"])
    in_memory_bound = (P + 1) * (M + chunk)
    # RSS also holds what the budget does not govern: the requests being handled (up to one
    # per connection, each as body, Python objects, Arrow rows and WAL frame: ~4 bodies),
    # and the allocators' retained memory and buffers (64 MiB).
    body_bytes = trial.get("request_body_bytes", update_bytes)
    rss_allowance = in_memory_bound + plan["connections"] * 4 * body_bytes + 64 * MIB
    backlog_peak_bytes = max(
        (s["resident"] + s["spilled"] + s["in_flight"] + s["in_flight_disk"] for s in samples), default=0
    )

    acct = account(trial)
    figures = {
        "phases": phases,
        "chunk_bytes": chunk,
        "update_payload_bytes": update_bytes,
        "refused_503": len(refused),
        "refused_with_retry_after": len(with_header),
        "refused_with_configured_retry_after": len(right_header),
        "refused_metric": trial["metrics_final"].get('loader_intake_refused_total{reason="spill_full"}', 0.0),
        "other_5xx": dict(fivexx),
        "4xx": dict(fourxx),
        "unanswered": unanswered,
        "first_503_s": first_503,
        "budget_hit_s": budget_hit,
        "budget_hit_to_first_503_s": None if first_503 is None or budget_hit is None else first_503 - budget_hit,
        "disk_fill_near_first_503": max(near_first_503) / D if near_first_503 else None,
        "last_503_after_drop_s": None if last_503 is None else last_503 - drop,
        "recovery_second_half_requests": len(recovery_second_half),
        "recovery_second_half_accepted": sum(1 for r in recovery_second_half if r[STATUS] == 202),
        "spill_empty_after_drop_s": None if spill_empty is None else spill_empty - drop,
        "backlog_loaded_after_drop_s": backlog_loaded - drop if trial["drained"] else None,
        "latency_normal_after_drop_s": latency_back,
        "latency_limit_ms": latency_limit(warm["settled_p99_ms"]),
        "peak_resident_sampled": max((s["resident"] for s in samples), default=0),
        "peak_resident_metric": max((s["metric_resident"] for s in samples), default=0),
        "peak_resident_store": max((s["peak_resident"] for s in samples), default=0),
        "peak_in_memory": max((s["resident"] + s["in_flight"] for s in samples), default=0),
        "in_memory_bound": in_memory_bound,
        "peak_disk_accounted": max((s["disk"] for s in samples), default=0),
        "peak_spilled_metric": max((s["metric_spilled"] for s in samples), default=0),
        "peak_spill_files": max((s["spill_files"] for s in samples), default=0),
        "backlog_peak_bytes": backlog_peak_bytes,
        "accepted_payload_bytes": acct.get("acknowledged", 0) * update_bytes,
        "rss_baseline_python": base["python"],
        "rss_baseline_jvm": base["jvm"],
        "rss_at_start_python": trial["rss_at_start"]["python"],
        "rss_at_start_jvm": trial["rss_at_start"]["jvm"],
        "rss_peak_python": peak_python,
        "rss_peak_jvm": peak_jvm,
        "rss_peak_group": peak_group,
        "rss_growth_python": python_growth,
        "rss_growth_group": group_growth,
        "rss_allowance": rss_allowance,
        "rss_after_python": trial["rss_after"]["python"],
        "samples": len(samples),
        "sampler_failures": trial["sampler_failures"],
        "account": acct,
    }
    promises = {
        "memory: pending bytes in memory never above M": figures["peak_resident_sampled"] <= M
        and figures["peak_resident_metric"] <= M,
        "memory: waiting + in-flight payload within (P+1)(M+chunk)": figures["peak_in_memory"] <= in_memory_bound,
        "memory: service RSS growth within (P+1)(M+chunk) + requests in flight + 64 MiB": python_growth
        <= rss_allowance,
        "disk: spilled + in-flight segments never above the disk budget (+ one chunk)": figures["peak_disk_accounted"]
        <= D + chunk,
        "backpressure: 503s once the disk budget is hit": bool(refused)
        and budget_hit is not None
        and figures["budget_hit_to_first_503_s"] is not None
        and figures["budget_hit_to_first_503_s"] <= 1.0 + plan["sample_seconds"],
        "backpressure: every 503 carries Retry-After": bool(refused) and len(right_header) == len(refused),
        "recovery: 503s stop and every request is accepted after the drop": bool(recovery_second_half)
        and figures["recovery_second_half_accepted"] == len(recovery_second_half),
        "recovery: the backlog drains": trial["drained"] and spill_empty is not None,
        "recovery: latency back to normal in the recovery phase": latency_back is not None,
        "no 5xx but 503, no 4xx, every request answered": not fivexx and not fourxx and unanswered == 0,
        "nothing acknowledged lost": acct["lost_rows"] == 0 and acct.get("duplicate_acks", 0) == 0,
        "nothing duplicated": acct["duplicated_rows"] == 0,
        "nothing refused loaded, no phantom rows": acct.get("refused_but_loaded", 0) == 0
        and acct["phantom_rows"] == 0
        and acct.get("unanswered_partial", 0) == 0,
    }
    return {"figures": figures, "promises": promises, "timeline": timeline(trial, samples)}


def timeline(trial: dict[str, Any], samples: list[dict[str, float]]) -> list[dict[str, float]]:
    """Per second of the run (by scheduled send time): requests offered, accepted, refused,
    the p99 of accepted ones, and the sampled store, disk and RSS at that second."""
    buckets: dict[int, list[list[Any]]] = {}
    for r in trial["records"]:
        buckets.setdefault(int(r[SCHEDULED]), []).append(r)
    plan = trial["plan"]
    out = []
    for second in range(math.ceil(plan["warm_seconds"] + plan["overload_seconds"] + plan["recovery_seconds"])):
        recs = buckets.get(second, [])
        ok = [1e3 * (r[DONE] - r[SCHEDULED]) for r in recs if r[STATUS] == 202]
        row: dict[str, float] = {
            "t": second,
            "offered": len(recs),
            "accepted": len(ok),
            "refused": sum(1 for r in recs if r[STATUS] == 503),
            "p99_ms": round(percentile(ok, 0.99), 1),
        }
        if samples:
            s = min(samples, key=lambda x: abs(x["t"] - second))
            row.update(
                {k: s[k] for k in ("resident", "disk", "in_flight", "spill_files", "loaded", "rss_python", "rss_jvm")}
            )
        out.append(row)
    return out


def all_pass(analysis: dict[str, Any]) -> bool:
    return all(analysis["promises"].values())


# -- rendering --------------------------------------------------------------------------
def _mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB"


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f} s"


def _ms(x: float) -> str:
    return "–" if x != x else f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def phase_rows(analysis: dict[str, Any]) -> list[list[str]]:
    return [
        [
            p["phase"],
            f"{p['seconds']:.0f}",
            f"{p['offered_per_second']:.0f}",
            f"{p['accepted_updates_per_second']:.1f}",
            f"{p['accepted_rows_per_second']:,.0f}",
            f"{p['loaded_updates_per_second']:.1f}",
            str(p["refused_503"]),
            _ms(p["p50_ms"]),
            _ms(p["p99_ms"]),
            _ms(p["max_ms"]),
        ]
        for p in analysis["figures"]["phases"]
    ]


PHASE_HEADERS = [
    "phase",
    "s",
    "offered updates/s",
    "accepted updates/s",
    "accepted rows/s",
    "loaded updates/s",
    "503s",
    "p50 ms",
    "p99 ms",
    "max ms",
]


def _after_drop(x: float | None) -> str:
    if x is None:
        return "none"
    return f"{x:.1f} s" if x >= 0 else f"none after it (last {-x:.1f} s before)"


def figure_rows(results: dict[str, Any]) -> list[list[str]]:
    f = results["analysis"]["figures"]
    plan = results["trial"]["plan"]
    a = f["account"]
    M, D = plan["memory_budget"], plan["disk_budget"]
    fill = f["disk_fill_near_first_503"]
    return [
        [
            "503 answers (with the configured Retry-After); refusal metric",
            f"{f['refused_503']:,} ({f['refused_with_configured_retry_after']:,} with "
            f"`Retry-After: {plan['retry_after']}`); {f['refused_metric']:,.0f}",
        ],
        [
            "disk budget reached → first 503 (s after start)",
            f"{_s(f['budget_hit_s'])} → {_s(f['first_503_s'])}: {_s(f['budget_hit_to_first_503_s'])} "
            f"(sampled every {plan['sample_seconds']} s); disk fill within 0.5 s of it "
            + ("–" if fill is None else f"{fill:.1%}"),
        ],
        ["after the drop: last 503", _after_drop(f["last_503_after_drop_s"])],
        [
            "after the drop: spill empty / latency normal / everything loaded",
            f"{_s(f['spill_empty_after_drop_s'])} / {_s(f['latency_normal_after_drop_s'])} (p99 of the rest "
            f"≤ {f['latency_limit_ms']:.0f} ms) / {_s(f['backlog_loaded_after_drop_s'])}",
        ],
        [
            "peak pending payload in memory (sampled / metric / store's own peak) vs M",
            f"{_mib(f['peak_resident_sampled'])} / {_mib(f['peak_resident_metric'])} / "
            f"{_mib(f['peak_resident_store'])} vs {_mib(M)}",
        ],
        [
            "peak waiting + in-flight payload in memory vs (P+1)(M+chunk)",
            f"{_mib(f['peak_in_memory'])} vs {_mib(f['in_memory_bound'])}",
        ],
        [
            "peak spill disk (spilled + in-flight payload / metric spilled / files) vs budget",
            f"{_mib(f['peak_disk_accounted'])} / {_mib(f['peak_spilled_metric'])} / {_mib(f['peak_spill_files'])} "
            f"vs {_mib(D)}",
        ],
        [
            "peak backlog (memory + disk + in flight); payload accepted in all",
            f"{_mib(f['backlog_peak_bytes'])}; {_mib(f['accepted_payload_bytes'])}",
        ],
        [
            "RSS of the service (Python): idle baseline → peak (growth = × M; allowance)",
            f"{_mib(f['rss_baseline_python'])} → {_mib(f['rss_peak_python'])} (+{_mib(f['rss_growth_python'])} "
            f"= {f['rss_growth_python'] / M:.1f} M; {_mib(f['rss_allowance'])})",
        ],
        [
            "RSS of the JVM and its helpers (the group's other processes): at start → idle → peak",
            f"{_mib(f['rss_at_start_jvm'])} → {_mib(f['rss_baseline_jvm'])} → {_mib(f['rss_peak_jvm'])}",
        ],
        [
            "RSS of the process group: peak (growth over the idle baseline)",
            f"{_mib(f['rss_peak_group'])} (+{_mib(f['rss_growth_group'])})",
        ],
        [
            "requests acknowledged / refused / unanswered; rows in Delta",
            f"{a.get('acknowledged', 0):,} / {a.get('refused', 0):,} / {a.get('unanswered', 0):,}; {a['delta_rows']:,}",
        ],
        [
            "lost / duplicated rows; refused requests loaded; phantom rows",
            f"{a['lost_rows']} / {a['duplicated_rows']}; {a.get('refused_but_loaded', 0)}; {a['phantom_rows']}",
        ],
        [
            "5xx other than 503 / 4xx / unanswered",
            f"{sum(f['other_5xx'].values())} / {sum(f['4xx'].values())} / {f['unanswered']}",
        ],
    ]


def render_markdown(results: dict[str, Any], quick: dict[str, Any] | None = None) -> str:
    """The RELIABILITY.md section; ``quick``: the latest quick run's results, summed up in a line."""
    meta, trial, analysis = results["meta"], results["trial"], results["analysis"]
    plan = trial["plan"]
    meta = dict(meta, machine=dict(meta["machine"]))
    f = analysis["figures"]
    lines = [
        "## Overload",
        "",
        "An open-loop load generator (`benchmarks/_service_loadgen.py`, its own process) drives "
        "`loader serve` (real local Spark, delta-rs writer, fsync WAL) far above what the workers "
        "can load, then drops back; every update is numbered, so each acknowledged row is looked "
        "for in Delta afterwards (read with the deltalake package). Script: `benchmarks/overload.py`; "
        "its short version runs in the test suite (`tests/test_overload.py`).",
        "",
        "Long: `.venv/bin/python -m benchmarks.overload` (3 min of overload; `--minutes M` for more). "
        "Quick: `.venv/bin/python -m benchmarks.overload --quick` (45 s, smaller budgets; JSON only "
        "unless `--write`).",
        "",
        machine_markdown(meta, "loader"),
        f"Setup: {plan['workers']} workers, Spark `{plan['spark_master']}` (driver heap {plan['driver_memory']}), "
        f"{plan['tables']} tables, {plan['rows']} rows of ~{plan['note_chars'] + 30} B per update "
        f"({f['update_payload_bytes'] / 1024:.0f} KiB of payload in memory), spill memory budget M = "
        f"{_mib(plan['memory_budget'])} (buffered-head, chunk M/2n = {_mib(f['chunk_bytes'])}), disk budget "
        f"{_mib(plan['disk_budget'])}, `retry_after_seconds = {plan['retry_after']}`, {plan['connections']} "
        f"connections; service ready in {trial['server_ready_seconds']:.0f} s. Latency is measured from each "
        "request's scheduled send time (no coordinated omission).",
        "",
        md_table(PHASE_HEADERS, phase_rows(analysis)),
        "",
        md_table(["figure", "value"], figure_rows(results), "ll"),
        "",
        md_table(["promise", "verdict"], [[k, status(v)] for k, v in analysis["promises"].items()], "ll"),
        "",
        "What the budgets bound: M bounds the payload bytes of *waiting* updates held in the "
        "service's memory (Arrow buffers); a batch being loaded keeps its in-memory rows until its "
        "commit, so waiting + in flight stay below (P+1)(M+chunk) (docs/spilling.md). RSS also holds "
        "the Python and JVM baselines (measured idle after one load per table), the requests being "
        "parsed and the allocators' caches; the JVM's heap is bounded by `spark.driver.memory`, not "
        "by M. The disk budget bounds the payload bytes of spill segments, those of batches being "
        "loaded included (up to one chunk, below); the files hold about as many bytes "
        '(uncompressed Parquet). "Loaded" is what the workers committed to Delta per second '
        "(a whole table's backlog per batch, so it grows with the backlog up to the budgets).",
    ]
    lines += ["", FINDINGS]
    if quick is not None and not meta.get("quick"):
        lines += ["", quick_line(quick)]
    return "\n".join(lines) + "\n"


#: What the trial found in the service (fixed), for the section.
FINDINGS = (
    "Found and fixed by this trial: admission weighed each request against the pending store "
    "as it was *before* the WAL write, so every request arriving during one slow fsync (hundreds "
    "of milliseconds while Spark writes) passed on the same totals; the first quick run overran "
    "a 24 MiB disk budget by 54 % (36.9 MiB of segments). `PendingStore.admit` now counts the "
    "bytes of admitted updates until they are in the store (`loader/service.py` releases them "
    "after the WAL write, or when the request is refused later); regression test "
    "`tests/test_overload.py::test_requests_admitted_during_one_slow_wal_write_cannot_overrun_the_disk_budget`. "
    "The disk budget is a bound up to one spill chunk: an update admitted while it fits may "
    "trigger the write of a whole chunk (M/2n for buffered-head)."
)


def quick_line(results: dict[str, Any]) -> str:
    """One line on the latest quick run (results/overload-quick.json), beside the long run."""
    a, meta = results["analysis"], results["meta"]
    over = a["figures"]["phases"][1]
    acct = a["figures"]["account"]
    passed = sum(a["promises"].values())
    load = meta["machine"].get("loadavg_start") or [float("nan")]
    return (
        f"Latest quick run (`--quick`, {meta['machine']['date_utc']}, git {meta['machine']['git_commit']}, "
        f"load {load[0]:.2f} at start, {meta.get('loadavg_peak') or float('nan'):.2f} at most): "
        f"{passed}/{len(a['promises'])} promises PASS; overload {over['offered_per_second']:.0f} updates/s "
        f"offered, {over['accepted_updates_per_second']:.1f} accepted, {over['loaded_updates_per_second']:.1f} "
        f"loaded, {over['refused_503']:,} 503s, p99 {_ms(over['p99_ms'])} ms; lost {acct['lost_rows']}, "
        f"duplicated {acct['duplicated_rows']}."
    )


def print_console(results: dict[str, Any]) -> None:
    analysis = results["analysis"]
    print_table("overload: phases", PHASE_HEADERS, phase_rows(analysis))
    print_table("overload: figures", ["figure", "value"], figure_rows(results))
    print_table("overload: promises", ["promise", "verdict"], [[k, status(v)] for k, v in analysis["promises"].items()])
    meta = results["meta"]
    load = meta["machine"].get("loadavg_start")
    print(f"run {fmt_duration(meta['run_seconds'])}; load average at start {load}, peak {meta.get('loadavg_peak')}")
