"""Presentation of the scheduling benchmark: the BENCHMARKS.md section and the console tables.

Reads only the results dict (what ``scheduling.json`` holds), so a report can be rebuilt
from saved results. Every table is described as (headers, rows) once and rendered either
as markdown or with rich, so the two outputs cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.scheduling import claims as claims
from testing.report import fmt_num, machine_markdown, md_table, print_table, status

Rows = list[list[Any]]
TableRows = tuple[list[str], Rows]

POLICY_ABBREV = {
    "fifo": "fifo",
    "myopic": "myopic",
    "group-and-run": "GaR",
    "group-and-run-wc": "GaR-wc",
    "max-benefit": "max-ben",
    "interval": "interval",
    "no-batching": "no-batch",
}
SUITE_TITLES = {
    "main": "1a. Main grid (no per-job overhead)",
    "overhead": "1b. With a per-job overhead (batching matters)",
    "paper": "1c. Paper regime (inside Theorems 4.3 / 5.1's premises)",
}


def _abbrev(name: str) -> str:
    return POLICY_ABBREV.get(name, name)


def _suites(quality: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in quality:
        out.setdefault(r["suite"], []).append(r)
    return out


# =====================================================================================
# Tables, as (headers, rows)
# =====================================================================================
def metric_table(records: list[dict[str, Any]], policies: list[str], metric: str, floor: bool = False) -> TableRows:
    """One quality metric, workload x policy."""
    headers = ["workload", "updates"] + (["1+2α"] if floor else []) + [_abbrev(p) for p in policies]
    rows = []
    for r in records:
        row: list[Any] = [r["workload"], f"{r['updates']:,}"]
        if floor:
            row.append(f"{claims.processing_floor(r['alpha_mean']):.3f}")
        row += [fmt_num(r["policies"][p]["quality"][metric]) if p in r["policies"] else "–" for p in policies]
        rows.append(row)
    return headers, rows


def targets_table(results: dict[str, Any]) -> TableRows:
    return (
        ["target", "measured", "goal", "result"],
        [[t["target"], t["measured"], t["goal"], t["status"]] for t in results["targets"]],
    )


def claims_table(results: dict[str, Any]) -> TableRows:
    return (
        ["claim", "source", "measured", "result"],
        [[c["claim"], c["source"], c["measured"], c["status"]] for c in results["claims"]],
    )


def max_benefit_table(quality: list[dict[str, Any]]) -> TableRows:
    rows = [
        [
            row["workload"],
            fmt_num(row["myopic_weighted"]),
            fmt_num(row["max_benefit_weighted"]),
            fmt_num(row["weighted_low"]),
            f"{row['gain']:.1%}",
            f"{row['avoidable_gain']:.1%}",
            f"{row['ceiling']:.1%}",
            fmt_num(row["myopic_stretch"]),
            fmt_num(row["max_benefit_stretch"]),
            status(row["meets"]),
        ]
        for row in claims.max_benefit_rows(quality)
    ]
    return (
        [
            "workload",
            "W myopic",
            "W max-ben",
            "W LOW",
            "gain",
            "avoidable",
            "ceiling",
            "stretch myopic",
            "stretch max-ben",
            f"≥ {claims.MAX_BENEFIT_GAIN_TARGET:.0%}",
        ],
        rows,
    )


def peers_table(quality: list[dict[str, Any]]) -> TableRows:
    pairs = [
        ("interval", "myopic"),
        ("no-batching", "myopic"),
        ("interval", "max-benefit"),
        ("no-batching", "max-benefit"),
    ]
    rows = []
    for r in quality:
        cells: list[Any] = [r["workload"]]
        for peer, good in pairs:
            total, weighted = (
                claims.factor(r, peer, good),
                claims.factor(r, peer, good, "weighted_staleness"),
            )
            cells.append("–" if total is None else f"{total:.2f}x ({weighted:.2f}x)")
        rows.append(cells)
    return ["workload"] + [f"{_abbrev(p)} / {_abbrev(g)}" for p, g in pairs], rows


def bounds_table(quality: list[dict[str, Any]]) -> TableRows:
    rows = []
    for b in claims.bound_rows(quality):
        worst = b["worst_eager"]
        rows.append(
            [
                b["workload"],
                f"{b['x']:.3f}",
                "no bound" if b["bound"] is None else fmt_num(b["bound"]),
                fmt_num(b["myopic_ratio"]) if b["myopic_ratio"] is not None else "–",
                f"{fmt_num(worst[1])} ({_abbrev(worst[0])})" if worst else "–",
                ("yes: " if b["gar_applies"] else "no: ") + b["gar_premises"],
                fmt_num(b["gar_stretch"]) if b["gar_stretch"] is not None else "–",
                fmt_num(b["gar_weighted_ratio"]) if b["gar_weighted_ratio"] is not None else "–",
            ]
        )
    return (
        [
            "workload",
            "C = α_max t/p",
            "Thm 3.1 bound",
            "myopic ratio",
            "worst eager ratio",
            "Thm 4.3 premises",
            "GaR stretch",
            "GaR W-ratio",
        ],
        rows,
    )


def partitions_table(quality: list[dict[str, Any]]) -> TableRows:
    rows = []
    for r in quality:
        for name, e in r["policies"].items():
            extras = e["extras"]
            if "regroups" not in extras:
                continue
            groups = "; ".join(
                f"[{fmt_num(g['period_range'][0], 3)}, {fmt_num(g['period_range'][1], 3)}] → "
                f"{g['tables']}t, w{','.join(map(str, g['workers']))}"
                for g in extras.get("groups", [])
            )
            rows.append(
                [
                    r["workload"],
                    _abbrev(name),
                    groups,
                    ",".join(map(str, extras.get("spare_workers", []))) or "–",
                    f"{extras['regroups']:,}",
                ]
            )
    return [
        "workload",
        "policy",
        "groups (period range → tables, workers)",
        "spare",
        "regroups",
    ], rows


def workload_table(r: dict[str, Any], policies: list[str]) -> TableRows:
    metrics: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("ratio", lambda e: fmt_num(e["quality"]["staleness_ratio"])),
        ("W-ratio", lambda e: fmt_num(e["quality"]["weighted_ratio"])),
        ("max stretch", lambda e: fmt_num(e["quality"]["max_stretch"])),
        ("batches", lambda e: f"{e['quality']['batches']:,}"),
        ("makespan s", lambda e: fmt_num(e["quality"]["makespan"])),
        ("k upd/s", lambda e: f"{e['updates_per_second'] / 1000:.0f}"),
    ]
    pol = r["policies"]
    return (
        [""] + [_abbrev(p) for p in policies],
        [[label] + [fn(pol[p]) if p in pol else "–" for p in policies] for label, fn in metrics],
    )


def big_table(big: dict[str, Any]) -> TableRows:
    rows = []
    for name, e in big["policies"].items():
        q = e["quality"]
        rows.append(
            [
                name,
                e["runs"],
                f"{e['median_seconds']:.2f}",
                f"{e['median_cpu_seconds']:.2f}" if "median_cpu_seconds" in e else "–",
                ", ".join(f"{s:.2f}" for s in e["seconds"]),
                f"{e['updates_per_second'] / 1000:.0f}",
                f"{q['batches']:,}",
                fmt_num(q["staleness_ratio"]),
                status(e["median_seconds"] < claims.BIG_SECONDS_TARGET)
                if big["updates"] >= claims.BIG_UPDATES
                else "n/a",
            ]
        )
    return [
        "policy",
        "runs",
        "median s",
        "median CPU s",
        "all runs (s)",
        "k upd/s",
        "batches",
        "ratio",
        f"< {claims.BIG_SECONDS_TARGET:g} s",
    ], rows


def decisions_table(dec: dict[str, Any]) -> TableRows:
    rows = []
    for name, d in dec["policies"].items():
        harness = name == "(harness only)"
        index = "–" if d["index_live_entries"] is None else f"{d['index_live_entries']:,} / {d['index_heap_entries']:,}"
        rows.append(
            [
                name,
                f"{d['ns_per_decision'] / 1000:.2f}",
                "–" if harness else f"{d['ns_policy_share'] / 1000:.2f}",
                ", ".join(f"{s / 1000:.2f}" for s in d["ns_per_decision_samples"]),
                f"{d['setup_ms']:.1f}",
                index,
                "–" if harness else status(d["ns_per_decision"] < claims.DECISION_NS_TARGET),
            ]
        )
    return [
        "policy",
        "µs / decision",
        "policy share µs",
        "all runs (µs)",
        "attach + notify all (ms)",
        "index live / heap entries",
        f"< {claims.DECISION_NS_TARGET / 1000:g} µs",
    ], rows


# =====================================================================================
# Markdown
# =====================================================================================
def _md(spec: TableRows, align: str | None = None) -> str:
    return md_table(*spec, align=align) + "\n"


def _consistency(results: dict[str, Any]) -> str:
    problems = []
    for r in results.get("quality") or []:
        for name, e in r["policies"].items():
            if e["evaluator_mismatches"]:
                problems.append(
                    f"{r['workload']} {name}: evaluate_schedule disagrees: " + "; ".join(e["evaluator_mismatches"])
                )
            if e["nondeterministic"]:
                problems.append(f"{r['workload']} {name}: repeats differ in {e['nondeterministic']}")
    if problems:
        return "**Consistency problems:**\n\n" + "\n".join(f"- {p}" for p in problems) + "\n"
    if results["meta"]["verify"] and results.get("quality"):
        return (
            "Consistency: every timed repeat reproduced its quality figures exactly, and "
            "`evaluate_schedule` "
            "re-scored every recorded schedule to the simulator's figures (relative tolerance "
            "1e-9).\n"
        )
    return ""


def render_markdown(results: dict[str, Any]) -> str:
    """The whole ``scheduling`` section of BENCHMARKS.md."""
    meta = results["meta"]
    suite = meta["suite"]
    policies = meta["policies"]
    quality = results.get("quality") or []
    out: list[str] = []
    add = out.append

    add("## Scheduling core (`benchmarks/scheduling/`)\n")
    add(machine_markdown(meta, "schedulers"))
    add(
        f"Repeats: speed figures are the **median of {meta['repeats']}** timed run(s) (decision "
        "cost: median of "
        f"{meta['decision_repeats']}); quality figures are deterministic (seed {suite['seed']}). "
        "Garbage collector "
        "on, as in the service, with `gc.collect()` before each timed run. The machine may have "
        "been shared "
        "with other work: see the load averages.\n"
    )
    add(_consistency(results))

    add("### Targets (speed)\n")
    add(_md(targets_table(results), "lllc"))
    if results.get("claims"):
        add("### Claims (quality)\n")
        add(_md(claims_table(results), "lllc"))
    if results.get("notes"):
        add("Notes:\n")
        add("\n".join(f"- {n}" for n in results["notes"]) + "\n")

    if quality:
        fleets = suite["fleets"]
        add("### 1. Policy quality\n")
        add(
            f"Generators from `schedulers.generators`, seed {suite['seed']}: **quasiperiodic** "
            "(periods "
            f"{', '.join(fmt_num(p) for p in suite['quasi_periods'])} s, inter-arrival uniform "
            "in [B/2, B], equal "
            "alphas), **poisson** (per-table rate log-uniform in [0.01, 1]/s, alphas "
            "log-normal), **bursty** "
            "(Poisson flow starts, Pareto durations, no period hint, alphas log-normal). Fleets: "
            + ", ".join(f"**{k}** = {t} tables on {p} workers" for k, (t, p) in fleets.items())
            + ". Weights uniform (all 1) or skewed (log-uniform in [1, 20]). U = sum(alpha_i) / "
            "p (the per-job "
            "overhead is extra load). Horizons give ~12,000 updates per workload"
            + (f" (× {suite['horizon_scale']:g} in this quick run)" if suite["horizon_scale"] != 1 else "")
            + ".\n"
        )
        add(
            "**ratio** = total staleness / LOW; **W-ratio** = weighted staleness / weighted LOW; "
            "**max stretch** "
            "= max over updates. 1+2α (mean alpha) is about what even a zero-wait schedule pays "
            "for processing "
            "time (exact for quasiperiodic, indicative elsewhere). GaR = group-and-run "
            "(faithful: spare workers "
            "idle), GaR-wc = its work-conserving variant.\n"
        )
        for name, records in _suites(quality).items():
            add(f"#### {SUITE_TITLES.get(name, name)}\n")
            if name == "overhead":
                add(
                    f"Every job costs {suite['job_overhead']:g} s plus alpha × length, at U = "
                    f"{suite['overhead_utilization']:g}. LOW ignores overheads, so ratios are "
                    "higher for every "
                    "policy; what matters is the gap between policies, and whether no-batching "
                    "keeps up at all "
                    "(its makespan, in the per-workload tables, runs far past the horizon when "
                    "it does not).\n"
                )
            if name == "paper":
                add(
                    f"U = {suite['paper_utilization']:g} so that alpha <= (p - g) / 8t with the "
                    "g = 3 groups of the "
                    "period hints: Theorem 4.3 promises group-and-run max stretch < 3, Theorem "
                    "5.1 weighted "
                    "staleness <= 4.5 × optimal.\n"
                )
            add("Staleness ratio:\n")
            # The 1+2α floor ignores per-job overheads, so it means nothing for that suite.
            add(_md(metric_table(records, policies, "staleness_ratio", floor=name != "overhead")))
            skewed = [r for r in records if r["weighting"] == "skewed"]
            if skewed:
                add("Weighted ratio (skewed weights; with uniform weights it equals the ratio):\n")
                add(_md(metric_table(skewed, policies, "weighted_ratio")))
            add("Max stretch:\n")
            add(_md(metric_table(records, policies, "max_stretch")))

        if claims.max_benefit_rows(quality):
            add("#### max-benefit vs myopic, weighted staleness (skewed weights)\n")
            add(
                "**gain** = 1 − W(max-benefit) / W(myopic); **avoidable** = the same on W − "
                "W_LOW, the part a "
                "scheduler controls; **ceiling** = 1 − W_LOW / W(myopic), the largest gain any "
                "schedule could "
                "reach.\n"
            )
            add(_md(max_benefit_table(quality)))
        add("#### Peers vs myopic / max-benefit\n")
        add(
            "Total staleness of the peer over that of myopic / max-benefit (weighted staleness "
            "in brackets); "
            "> 1 means the peer is staler.\n"
        )
        add(_md(peers_table(quality)))
        add("#### The paper's bounds per workload\n")
        add(
            "Theorem 3.1 bounds every eager policy's staleness / LOW when C = max(alpha) t / p "
            "is small enough "
            "(best beta, delta found numerically; no bound otherwise, and none with overheads, "
            "which the theorem "
            "does not model). Theorem 4.3's premises: quasiperiodic, p >= 2g, alpha <= (p − g) / "
            "8t and <= 1/8, "
            "g = the number of groups group-and-run formed.\n"
        )
        add(_md(bounds_table(quality), "lrrrrlrr"))
        add("<details><summary>GroupAndRun partitions per workload</summary>\n")
        add(_md(partitions_table(quality), "lllll"))
        add("</details>\n")
        add("<details><summary>Per workload: all figures</summary>\n")
        for r in quality:
            add(
                f"**{r['workload']}**: {r['tables']} tables / {r['workers']} workers, "
                f"{r['updates']:,} updates, "
                f"horizon {fmt_num(r['horizon'])} s, overhead {fmt_num(r['overhead'])} s, alpha "
                "mean "
                f"{fmt_num(r['alpha_mean'], 3)} (max {fmt_num(r['alpha_max'], 3)}), weights "
                f"{fmt_num(r['weight_range'][0], 3)}–{fmt_num(r['weight_range'][1], 3)}\n"
            )
            add(_md(workload_table(r, policies)))
        add("</details>\n")

    big = results.get("big")
    if big:
        add("### 2. Simulator speed at scale\n")
        add(
            f"`quasiperiodic(tables={big['tables']}, periods=(1, 10, 100), "
            f"workers={big['workers']}, utilization={big['utilization']}, "
            f"horizon={fmt_num(big['horizon'])}, seed={big['seed']})`: {big['updates']:,} "
            f"updates, generated in {big['generation_seconds']:.2f} s (not included). Time = "
            "the `simulate()` call (state set-up, LOW, event loop, freshness summary) with a "
            "fresh policy; CPU s is this process's CPU time over the same call, which hardly "
            "grows when other processes compete for the cores. myopic (the target) is the "
            "median of its runs; the others run once each to keep the benchmark short, so "
            "their figures are single samples.\n"
        )
        add(_md(big_table(big)))

    dec = results.get("decisions")
    if dec:
        add(f"### 3. One dispatch decision at {dec['tables']:,} tables\n")
        add(
            f"{dec['tables']:,} `TableState`s (skewed weights, period hints 1/10/100 s), each "
            "with a pending update, "
            f"{dec['workers']} workers. One decision = the driver's cycle: the oldest running "
            "batch finishes "
            "(`running = False`, a new release on its table, `notify`), then `choose(worker, "
            "now)`, the table is "
            "started (`dispatched`, `running = True`) and notified. The index therefore holds "
            "~10,000 live entries "
            f"throughout. {dec['decisions_timed']:,} decisions timed after "
            f"{dec['warmup_decisions']:,} warm-up; "
            f"median of {dec['repeats']} runs, fresh states and policy each. The target is "
            "judged on the whole "
            "cycle; `(harness only)` is a do-nothing policy (the loop and the driver's own state "
            "changes), and "
            "**policy share** = policy − harness. `interval` runs with trigger period "
            f"{dec['interval_trigger_period'] * 1000:g} ms against a clock advancing "
            f"{dec['clock_step'] * 1000:g} ms per decision, so every table is due at once when "
            "its batch finishes "
            "(both its heaps work on every decision). Faithful group-and-run is driven with its "
            "assigned workers "
            "only (spare workers would get None).\n"
        )
        add(_md(decisions_table(dec)))
    return "\n".join(out)


# =====================================================================================
# Console
# =====================================================================================
def print_console(results: dict[str, Any]) -> None:
    """The headline tables on stdout: ratios, max-benefit gains, speed, targets, claims."""
    policies = results["meta"]["policies"]
    quality = results.get("quality") or []
    for name, records in _suites(quality).items():
        print_table(
            f"Staleness ratio (total / LOW): {SUITE_TITLES.get(name, name)}",
            *metric_table(records, policies, "staleness_ratio", floor=name != "overhead"),
        )
    if claims.max_benefit_rows(quality):
        print_table(
            "max-benefit vs myopic, weighted staleness (skewed weights)",
            *max_benefit_table(quality),
        )
    if results.get("big"):
        print_table(f"Simulator speed, {results['big']['updates']:,} updates", *big_table(results["big"]))
    if results.get("decisions"):
        print_table(
            f"Decision cost at {results['decisions']['tables']:,} tables",
            *decisions_table(results["decisions"]),
        )
    print_table("Targets (speed)", *targets_table(results))
    if results.get("claims"):
        print_table("Claims (quality)", *claims_table(results))
