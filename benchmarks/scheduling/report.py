"""The ``scheduling`` section of BENCHMARKS.md, from the results alone (what ``scheduling.json`` holds)."""

from __future__ import annotations

from typing import Any

from benchmarks.harness.markdown import bullets, cell, table
from benchmarks.scheduling import claims
from testing.report import fmt_num, machine_markdown, status

FORMATS = claims.T.formatter.formats
PEERS = (("interval", "myopic"), ("no-batching", "myopic"), ("interval", "max-benefit"), ("no-batching", "max-benefit"))
T = claims.T


def _abbrev(name: str) -> str:
    return claims.POLICY_ABBREV.get(name, name)


def _suites(quality: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in quality:
        out.setdefault(r["suite"], []).append(r)
    return out


def metric_table(records: list[dict[str, Any]], policies: list[str], metric: str, floor: bool = False) -> str:
    """One quality metric, workload x policy."""
    cells: list[Any] = ["{workload}", "{updates:,}"]
    cells += [lambda r: f"{claims.processing_floor(r['alpha_mean']):.3f}"] if floor else []
    cells += [
        lambda r, p=p: fmt_num(r["policies"][p]["quality"][metric]) if p in r["policies"] else "–" for p in policies
    ]
    return table(["workload", "updates", *(["1+2α"] if floor else []), *map(_abbrev, policies)], cells, records)


def max_benefit_table(quality: list[dict[str, Any]]) -> str:
    return T.table("max-benefit-table", claims.max_benefit_rows(quality), goal=claims.MAX_BENEFIT_GAIN_TARGET)


def peers_table(quality: list[dict[str, Any]]) -> str:
    def cell(r: dict[str, Any], peer: str, good: str) -> str:
        total, weighted = claims.factor(r, peer, good), claims.factor(r, peer, good, "weighted_staleness")
        return "–" if total is None else f"{total:.2f}x ({weighted:.2f}x)"

    heads = ["workload", *(f"{_abbrev(p)} / {_abbrev(g)}" for p, g in PEERS)]
    return table(heads, ["{workload}", *(lambda r, p=p, g=g: cell(r, p, g) for p, g in PEERS)], quality)


def bounds_table(quality: list[dict[str, Any]]) -> str:
    return table(
        "workload | C = α_max t/p | Thm 3.1 bound | myopic ratio | worst eager ratio | Thm 4.3 premises | GaR stretch "
        "| GaR W-ratio",
        [
            "{workload}",
            "{x:.3f}",
            lambda b: "no bound" if b["bound"] is None else fmt_num(b["bound"]),
            "{myopic_ratio:opt}",
            lambda b: f"{fmt_num(b['worst_eager'][1])} ({_abbrev(b['worst_eager'][0])})" if b["worst_eager"] else "–",
            lambda b: ("yes: " if b["gar_applies"] else "no: ") + b["gar_premises"],
            "{gar_stretch:opt}",
            "{gar_weighted_ratio:opt}",
        ],
        claims.bound_rows(quality),
        "lrrrrlrr",
        FORMATS,
    )


def partitions_table(quality: list[dict[str, Any]]) -> str:
    rows = [(r["workload"], name, e["extras"]) for r in quality for name, e in r["policies"].items()]
    return table(
        "workload | policy | groups (period range → tables, workers) | spare | regroups",
        [
            "{0}",
            "{1:abbrev}",
            lambda row: "; ".join(
                f"[{fmt_num(g['period_range'][0], 3)}, {fmt_num(g['period_range'][1], 3)}] → "
                f"{g['tables']}t, w{','.join(map(str, g['workers']))}"
                for g in row[2].get("groups", [])
            ),
            lambda row: ",".join(map(str, row[2].get("spare_workers", []))) or "–",
            "{2[regroups]:,}",
        ],
        [row for row in rows if "regroups" in row[2]],
        "lllll",
        FORMATS,
    )


def workload_table(r: dict[str, Any], policies: list[str]) -> str:
    metrics = {
        "ratio": "{quality[staleness_ratio]:num}",
        "W-ratio": "{quality[weighted_ratio]:num}",
        "max stretch": "{quality[max_stretch]:num}",
        "batches": "{quality[batches]:,}",
        "makespan s": "{quality[makespan]:num}",
        "k upd/s": lambda e: f"{e['updates_per_second'] / 1000:.0f}",
    }
    pol = r["policies"]
    cells = [lambda m, p=p: "–" if p not in pol else cell(m[1], pol[p], FORMATS) for p in policies]
    return table(["", *map(_abbrev, policies)], ["{0}", *cells], metrics.items())


def big_table(big: dict[str, Any]) -> str:
    judged = big["updates"] >= claims.BIG_UPDATES
    return table(
        f"policy | runs | median s | median CPU s | all runs (s) | k upd/s | batches | ratio | "
        f"< {claims.BIG_SECONDS_TARGET:g} s",
        [
            "{0}",
            "{1[runs]}",
            "{1[median_seconds]:.2f}",
            lambda r: f"{r[1]['median_cpu_seconds']:.2f}" if "median_cpu_seconds" in r[1] else "–",
            "{1[seconds]:seconds}",
            lambda r: f"{r[1]['updates_per_second'] / 1000:.0f}",
            "{1[quality][batches]:,}",
            "{1[quality][staleness_ratio]:num}",
            lambda r: status(r[1]["median_seconds"] < claims.BIG_SECONDS_TARGET) if judged else "n/a",
        ],
        big["policies"].items(),
        formats=FORMATS,
    )


def decisions_table(dec: dict[str, Any]) -> str:
    def own(text: str) -> Any:  # "–" for the harness-only baseline
        return lambda r: "–" if r[0] == "(harness only)" else cell(text, r, FORMATS)

    return table(
        "policy | µs / decision | policy share µs | all runs (µs) | attach + notify all (ms) | index live / heap "
        f"entries | < {claims.DECISION_NS_TARGET / 1000:g} µs",
        [
            "{0}",
            lambda r: f"{r[1]['ns_per_decision'] / 1000:.2f}",
            own("{2:.2f}"),
            "{1[ns_per_decision_samples]:micro}",
            "{1[setup_ms]:.1f}",
            lambda r: (
                "–"
                if r[1]["index_live_entries"] is None
                else f"{r[1]['index_live_entries']:,} / {r[1]['index_heap_entries']:,}"
            ),
            own("{3:status}"),
        ],
        [
            (name, d, d["ns_policy_share"] / 1000, d["ns_per_decision"] < claims.DECISION_NS_TARGET)
            for name, d in dec["policies"].items()
        ],
        formats=FORMATS,
    )


def _consistency(results: dict[str, Any]) -> str:
    problems = []
    for r in results.get("quality") or []:
        for name, e in r["policies"].items():
            if e["evaluator_mismatches"]:
                mismatches = "; ".join(e["evaluator_mismatches"])
                problems.append(T.line("mismatch", workload=r["workload"], policy=name, mismatches=mismatches))
            if e["nondeterministic"]:
                problems.append(
                    T.line("nondeterministic", workload=r["workload"], policy=name, fields=e["nondeterministic"])
                )
    if problems:
        return T("problems", problems=bullets(problems))
    return T("consistent") if results["meta"]["verify"] and results.get("quality") else ""


def _quality(results: dict[str, Any], quality: list[dict[str, Any]]) -> list[str]:
    suite, policies = results["meta"]["suite"], results["meta"]["policies"]
    fleets = ", ".join(T.line("fleet", name=k, tables=t, workers=p) for k, (t, p) in suite["fleets"].items())
    scale = T.line("scale", scale=suite["horizon_scale"]) if suite["horizon_scale"] != 1 else ""
    periods = ", ".join(fmt_num(p) for p in suite["quasi_periods"])
    out = [T("quality", suite=suite, periods=periods, fleets=fleets, scale=scale)]
    for name, records in _suites(quality).items():
        out.append(T(f"suite-{name}", suite=suite) if f"suite-{name}" in T.blocks else f"#### {name}\n\n")
        skewed = [r for r in records if r["weighting"] == "skewed"]
        weighted = T("suite-weighted", table=metric_table(skewed, policies, "weighted_ratio")) if skewed else ""
        # The 1+2α floor ignores per-job overheads, so it means nothing for that suite.
        ratio = metric_table(records, policies, "staleness_ratio", floor=name != "overhead")
        out.append(
            T("suite-tables", ratio=ratio, weighted=weighted, stretch=metric_table(records, policies, "max_stretch"))
        )
    if claims.max_benefit_rows(quality):
        out.append(T("max-benefit", table=max_benefit_table(quality)))
    tables = {"peers": peers_table(quality), "bounds": bounds_table(quality), "partitions": partitions_table(quality)}
    out.append(T("peers", **tables))
    out += [T("workload", table=workload_table(r, policies), **r) for r in quality]
    return [*out, T("details-end")]


def render_markdown(results: dict[str, Any]) -> str:
    """The whole ``scheduling`` section of BENCHMARKS.md."""
    meta = results["meta"]
    quality = results.get("quality") or []
    targets = T.table("targets-table", results["targets"], "lllc")
    consistency = _consistency(results)
    out = [
        T(
            "head",
            machine=machine_markdown(meta, "schedulers"),
            meta=meta,
            suite=meta["suite"],
            consistency=consistency,
            targets=targets,
        )
    ]
    if results.get("claims"):
        out.append(T("claims", table=T.table("claims-table", results["claims"], "lllc")))
    if results.get("notes"):
        out.append(T("notes", notes=bullets(results["notes"])))
    if quality:
        out += _quality(results, quality)
    if big := results.get("big"):
        out.append(T("big", big=big, table=big_table(big)))
    if dec := results.get("decisions"):
        period, step = dec["interval_trigger_period"] * 1000, dec["clock_step"] * 1000
        out.append(T("decisions", dec=dec, period=period, step=step, table=decisions_table(dec)))
    return "".join(out).removesuffix("\n")
