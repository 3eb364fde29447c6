"""The service benchmark's targets, notes and section, from the results alone (what ``service.json`` holds)."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.harness.markdown import Template, bullets
from testing.report import machine_markdown, median, status

TARGET_MULTI_UPDATES = 5000.0
TARGET_OPEN_RATE = 1000
TARGET_P99_MS = 20.0
TARGET_GAP = 0.15
#: The open-loop run counts as "at 1,000 requests/s" only if the server answered at least
#: this share of the offered rate inside the window.
RATE_TOLERANCE = 0.98


def _ms(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "unanswered"
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _other(details: list[dict[str, float]]) -> float:
    """Median per run of the delta path's time outside Spark, publish and commit: opening the
    DeltaTable, reading the app transaction, refreshing the handle after the commit."""
    return median(
        [d["total_seconds"] - d["spark_seconds"] - d["publish_seconds"] - d["commit_seconds"] for d in details]
    )


T = Template(
    "service",
    {
        "ms": _ms,
        "rate": lambda value: f"{value:,.0f}",
        "gap": lambda gap: status(abs(gap) <= TARGET_GAP),
        "ms1": lambda seconds: f"{1e3 * seconds:.1f}",
        "delta": lambda seconds: f"{1e3 * seconds:+.0f}",
        "range": lambda values: f"{min(values):.3f}–{max(values):.3f}",
        "other": lambda details: f"{1e3 * _other(details):.1f}",
    },
)


def _open_at(results: dict[str, Any], rate: int) -> dict[str, Any] | None:
    return next((r for r in results.get("intake", {}).get("single_open", []) if r["rate"] == rate), None)


def _target(block: str, ok: bool, **values: Any) -> dict[str, Any]:
    name, measured, goal = T.line(block, **values).split(" | ")
    return {"target": name, "measured": measured, "goal": goal, "ok": ok, "status": status(ok)}


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    if intake := results.get("intake"):
        best = max(intake["multi"], key=lambda m: m["median_updates_per_second"])
        parts = "; ".join(T.line("target-multi-part", **m) for m in intake["multi"])
        ok = best["median_updates_per_second"] >= TARGET_MULTI_UPDATES
        targets.append(
            _target("target-multi", ok, best=best, repeats=intake["repeats"], parts=parts, goal=TARGET_MULTI_UPDATES)
        )
        if (run := _open_at(results, TARGET_OPEN_RATE)) is not None:
            achieved = run["answered_in_window_per_second"]
            ok = (
                run["p99_ms"] < TARGET_P99_MS
                and achieved >= RATE_TOLERANCE * TARGET_OPEN_RATE
                and not run["unanswered"]
            )
            paused = (intake.get("paused") or {}).get("single_open") or []
            diagnostic = next((r for r in paused if r.get("rate") == TARGET_OPEN_RATE), None)
            targets.append(
                _target(
                    "target-open",
                    ok,
                    run=run,
                    rate=TARGET_OPEN_RATE,
                    goal=TARGET_P99_MS,
                    saturation=intake["single_saturation"]["median_requests_per_second"],
                    paused=T.line("target-open-paused", **diagnostic) if diagnostic else "",
                )
            )
    for p in (results.get("freshness") or {}).get("policies", []):
        workers = results["freshness"]["workers"]
        figures = {"live": p["live"], "sim": p["sim"], "difference": p["gap"], "policy": p["policy"]}
        targets.append(
            _target("target-freshness", abs(p["gap"]) <= TARGET_GAP, gap=100 * TARGET_GAP, workers=workers, **figures)
        )
    return targets


def build_notes(results: dict[str, Any]) -> list[str]:
    """Explanations derived from the figures (every miss gets one)."""
    notes: list[str] = []
    if intake := results.get("intake"):
        sat = intake["single_saturation"]
        run = _open_at(results, TARGET_OPEN_RATE)
        if sat["median_requests_per_second"] < TARGET_OPEN_RATE:
            p99 = T.line("note-saturation-p99", **run) if run else "."
            notes.append(T.line("note-saturation", sat=sat, rate=TARGET_OPEN_RATE, p99=p99))
        best = max(intake["multi"], key=lambda m: m["median_updates_per_second"])
        if best["median_updates_per_second"] < TARGET_MULTI_UPDATES:
            notes.append(T.line("note-multi", best=best))
        single_open = intake["single_open"]
        met = [r for r in single_open if r["p99_ms"] < TARGET_P99_MS and not r["unanswered"]]
        lowest = min(single_open, key=lambda r: r["rate"]) if single_open else None
        if (
            lowest is not None
            and lowest["p99_ms"] >= TARGET_P99_MS
            and lowest["answered_in_window_per_second"] >= RATE_TOLERANCE * lowest["rate"]
        ):
            notes.append(T.line("note-stalls", **lowest))
        if single_open:
            parts = ", ".join(T.line("note-open-part", **r) for r in single_open)
            holds = T.line("note-open-holds", rate=max(r["rate"] for r in met)) if met else T.line("note-open-none")
            notes.append(T.line("note-open", parts=parts, goal=TARGET_P99_MS, holds=holds))
        multi = intake["multi"]
        notes.append(T.line("note-group-commit", **min(multi, key=lambda m: m["updates_per_request"])))
        paused = intake.get("paused")
        if paused and paused.get("single_saturation"):
            ps = paused["single_saturation"]
            pm = {m["updates_per_request"]: m for m in paused["multi"]}
            lm = {m["updates_per_request"]: m for m in multi}
            parts = ", ".join(T.line("note-paused-multi", k=k, paused=pm[k], on=lm[k]) for k in sorted(pm) if k in lm)
            po = (paused.get("single_open") or [None])[0]
            alone = T.line("note-paused-open", rate=TARGET_OPEN_RATE, run=po, paused=ps) if po else ""
            jvm = lm[min(lm)]["median_jvm_cores"]
            notes.append(T.line("note-paused", paused=ps, sat=sat, multi=parts, jvm=jvm, open=alone))
        if [m for m in multi if any(r["drained"] is False for r in m["runs"])]:
            notes.append(T.line("note-drain"))
    if fresh := results.get("freshness"):
        for p in fresh["policies"]:
            notes.append(T.line("note-freshness", spread=1e3 * p["registration_spread_seconds"], **p))
        if fresh["policies"]:
            worse = [q["policy"] for q in fresh["policies"] if q["gap"] > 0]
            p = max(fresh["policies"], key=lambda q: abs(q["gap"]))
            staler = T.line("note-gap-staler", policies=", ".join(worse)) if worse else T.line("note-gap-fresher")
            notes.append(T.line("note-gap", p=p, staler=staler))
    if commit := results.get("commit"):
        added = [c["publish_median"] + c["commit_median"] + _other(c["delta_details"]) for c in commit["sizes"]]
        parts = "; ".join(
            T.line(
                "note-commit-part",
                publish_commit=1e3 * (c["publish_median"] + c["commit_median"]),
                other=1e3 * _other(c["delta_details"]),
                **c,
            )
            for c in commit["sizes"]
        )
        notes.append(T.line("note-commit", low=1e3 * min(added), high=1e3 * max(added), parts=parts))
    return notes


def closed_table(intake: dict[str, Any]) -> str:
    entries = [("POST /v1/updates", m, m["updates_per_request"]) for m in intake["multi"]]
    return T.table("closed-table", [*entries, ("POST /v1/tables/{t}/updates", intake["single_saturation"], 1)])


def render_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    targets = T.table("targets-table", results["targets"], "lllc")
    parts = [
        T(
            "head",
            machine=machine_markdown(meta, package="loader"),
            sha=meta["machine"].get("api_sha256", "?"),
            targets=targets,
        )
    ]
    if intake := results.get("intake"):
        parts.append(
            T("intake", intake=intake, closed=closed_table(intake), open=T.table("open-table", intake["single_open"]))
        )
        paused = intake.get("paused")
        if paused and paused.get("single_saturation"):
            parts.append(
                T(
                    "paused",
                    backlog_seconds=paused["backlog_seconds"],
                    closed=closed_table(paused),
                    open=T.table("open-table", paused["single_open"]),
                )
            )
    if fresh := results.get("freshness"):
        parts.append(T("freshness", fresh=fresh, table=T.table("freshness-table", fresh["policies"])))
    if commit := results.get("commit"):
        sizes = [dict(s, share=100 * s["overhead_median"] / s["bare_median"]) for s in commit["sizes"]]
        parts.append(T("commit", commit=commit, table=T.table("commit-table", sizes)))
    if results.get("notes"):
        parts.append(T("notes", notes=bullets(results["notes"])))
    if intake:
        parts.append(T("findings"))
    return "".join(parts).rstrip() + "\n"
