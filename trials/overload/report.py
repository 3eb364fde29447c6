"""How the overload trial reads in RELIABILITY.md and on the console: tables of phases,
figures and verdicts (computed by ``testing/overload.py``)."""

from __future__ import annotations

from typing import Any

from testing.overload import MIB
from testing.report import fmt_duration, machine_markdown, md_table, print_table, status


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
        "An open-loop load generator (`testing/loadgen.py`, its own process) drives "
        "`loader serve` (real local Spark, delta-rs writer, fsync WAL) far above what the workers "
        "can load, then drops back; every update is numbered, so each acknowledged row is looked "
        "for in Delta afterwards (read with the deltalake package). Script: `trials/overload/`; "
        "its short version runs in the test suite (`tests/system/test_overload.py`).",
        "",
        "Long: `.venv/bin/python -m trials.overload` (3 min of overload; `--minutes M` for more). "
        "Quick: `.venv/bin/python -m trials.overload --quick` (45 s, smaller budgets; JSON only "
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
    "bytes of admitted updates until they are in the store (`loader/intake/submission.py` releases them "
    "after the WAL write, or when the request is refused later); regression test "
    "`tests/system/test_overload.py::test_requests_admitted_during_one_slow_wal_write_cannot_overrun_the_disk_budget`. "
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
