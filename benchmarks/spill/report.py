"""Verdicts and the section of ``benchmarks/spill/``, from the saved results alone (``--render``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from benchmarks.harness.markdown import Template, bullets, f2, pct, table
from benchmarks.harness.results import stats
from testing.report import machine_markdown, status

POLICIES = ("half", "buffered-head", "greedy-chunk", "hybrid", "lru")
ACYCLIC = POLICIES[:4]
ADVERSARIES = ("thm2.2", "thm4.3")
#: Small families whose consumption is round-robin with a consumption every tick (Theorem 4.2's premise).
ROUND_ROBIN_SMALL = ("bursty-1q", "bursty-2q-rr", "thm4.3")
EPS = 1e-9
MiB = 1 << 20
T = Template("spill", {"mib": lambda b: str(b // MiB), "MiB": lambda b: f"{b / MiB:,.0f}"})


def ops(run: dict[str, Any]) -> int:
    return int(run["writes"]) + int(run["reads"])


def moved(run: dict[str, Any]) -> int:
    return int(run["tuples_written"]) + int(run["tuples_read"])


def ratio(value: float, base: float) -> float | None:
    if base > 0:
        return value / base
    return None if value == 0 else math.inf


def med(values: Iterable[float | None]) -> float:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else float("nan")


def diagonal(family: dict[str, Any], policy: str) -> dict[str, Any] | None:
    return next((i for i in family["instances"] if i["params"].get("built_against") == policy), None)


def instances_for(family: dict[str, Any], policy: str) -> list[dict[str, Any]]:
    """Adversarial families count only the input built against the policy itself."""
    if family["key"] in ADVERSARIES or family["key"].startswith("thm4.3-"):
        inst = diagonal(family, policy)
        return [inst] if inst else []
    return list(family["instances"])


def unit_ratios(family: dict[str, Any], policy: str) -> list[float]:
    found = (ratio(ops(inst["unit"][policy]), inst["opt"]) for inst in instances_for(family, policy))
    return [r for r in found if r is not None]


def ext_ratios(family: dict[str, Any], profile: str, policy: str) -> list[float]:
    exts = (inst.get("ext", {}).get(profile) for inst in instances_for(family, policy))
    found = (ratio(ext["policies"][policy], ext["opt"]) for ext in exts if ext is not None)
    return [r for r in found if r is not None]


def families(results: dict[str, Any], part: str) -> list[dict[str, Any]]:
    return results.get("model", {}).get(part, [])


def family(results: dict[str, Any], key: str) -> dict[str, Any] | None:
    return next((f for f in families(results, "small") + families(results, "large") if f["key"] == key), None)


def bracket(inst: dict[str, Any], policy: str) -> tuple[float | None, float | None]:
    """(lower, upper) bound on policy / OPT when OPT is unknown: best policy >= OPT >= window bound."""
    value = ops(inst["unit"][policy])
    return ratio(value, min(ops(r) for r in inst["unit"].values())), ratio(value, inst["window_bound"])


# -- verdicts -----------------------------------------------------------------------------------------


def target(block: str, ok: bool | None, **values: Any) -> dict[str, Any]:
    """A target from its template line ``target | source | measured | goal``."""
    name, source, measured, goal = T.line(block, **values).split(" | ")
    return {"target": name, "source": source, "measured": measured, "goal": goal, "ok": ok}


def at_most(values: Sequence[float], limit: float) -> bool | None:
    return None if not values else max(values) <= limit + EPS


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per target: target, source, measured (text), goal, ok (True / False / None)."""
    out: list[dict[str, Any]] = []
    if "model" in results:
        out += _model_targets(results)
    if "io" in results:
        out += _io_targets(results["io"])
    if "chain" in results:
        out += _chain_targets(results["chain"])
    return out


def _model_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    small, large = families(results, "small"), families(results, "large")
    single = [f for f in small if f["instances"] and f["instances"][0]["queues"] == 1]
    half = [(f["key"], r) for f in single for r in unit_ratios(f, "half")]
    adversary = family(results, "thm2.2")
    inst = adversary and diagonal(adversary, "half")
    tight = ratio(ops(inst["unit"]["half"]), inst["opt"]) if inst else None
    values, keys = [r for _, r in half], ", ".join(sorted({k for k, _ in half}))
    tight_text = T.line("tight", tight=tight) if tight else ""
    out = [target("half", at_most(values, 2), s=stats(values), keys=keys, tight=tight_text)]
    by_n: dict[int, list[float]] = {}
    for f in small:
        for inst in instances_for(f, "buffered-head") if f["key"] in ROUND_ROBIN_SMALL else ():
            if (r := ratio(ops(inst["unit"]["buffered-head"]), inst["opt"])) is not None:
                by_n.setdefault(inst["queues"], []).append(r)
    parts = (T.line("rr-part", n=n, s=stats(v), limit=2 * n) for n, v in sorted(by_n.items()))
    ok = all(max(v) <= 2 * n + EPS for n, v in by_n.items()) if by_n else None
    out.append(target("rr", ok, parts="; ".join(parts)))
    # BufferedHead on the larger instances: OPT unknown, so bracketed.
    proven = violated = undecided = 0
    spans = []
    for f in large:
        for inst in instances_for(f, "buffered-head"):
            lo, hi = bracket(inst, "buffered-head")
            limit = 2 * inst["queues"]
            if hi is None:
                continue
            if hi <= limit + EPS:
                proven += 1
            elif lo is not None and lo > limit + EPS:
                violated += 1
            else:
                undecided += 1
                spans.append(T.line("span", name=inst["name"], lo=lo, hi=hi, limit=limit))
    total = proven + violated + undecided
    more = f": {'; '.join(spans[:4])}" + (" ..." if len(spans) > 4 else "") if spans else ""
    ok = False if violated else (True if total and not undecided else None)
    out.append(target("bracketed", ok, proven=proven, total=total, violated=violated, undecided=undecided, spans=more))
    profiles = results["model"]["disk_profiles"]
    values = [r for f in single for r in ext_ratios(f, "T=2", "greedy-chunk")]
    c0, c1 = profiles["T=2"]
    out.append(target("greedy", at_most(values, 4), c0=c0, c1=c1, s=stats(values)))
    if (multi := family(results, "bursty-2q-rr")) is not None:
        values = ext_ratios(multi, "T=2", "greedy-chunk")
        out.append(target("greedy-2q", at_most(values, 4), s=stats(values)))
    parts, every = [], []
    for profile in profiles:
        values = [r for f in single for r in ext_ratios(f, profile, "hybrid")]
        picks = {
            i["ext"][profile]["hybrid_picks"] for f in single for i in f["instances"] if profile in i.get("ext", {})
        }
        if values:
            parts.append(T.line("hybrid-part", profile=profile, picks="/".join(sorted(picks)), worst=max(values)))
            every += values
    out.append(target("hybrid", at_most(every, 4), parts="; ".join(parts)))
    runs = [(p, inst["name"], inst["unit"][p]) for f in small + large for inst in f["instances"] for p in ACYCLIC]
    bad = [
        T.line("offender", policy=p, name=name, error=run["error"] or T.line("twice"))
        for p, name, run in runs
        if run["error"] or run["max_writes_per_tuple"] > 1
    ]
    offenders = f"; {'; '.join(bad[:3])}" if bad else ""
    out.append(
        target("acyclic", not bad if runs else None, clean=len(runs) - len(bad), runs=len(runs), offenders=offenders)
    )
    every_instance = [inst["unit"]["lru"]["tuples_written_twice"] for f in small + large for inst in f["instances"]]
    thrash = family(results, "thrash")
    inst = thrash["instances"][0] if thrash else None
    twice = inst["unit"]["lru"]["tuples_written_twice"] if inst else 0
    out.append(
        target(
            "lru",
            None if thrash is None else twice > 0,
            twice=twice,
            ratio=ratio(ops(inst["unit"]["lru"]), inst["opt"]) if inst else None,
            total=sum(every_instance),
            instances=sum(t > 0 for t in every_instance),
            n=len(every_instance),
        )
    )
    return out


def io_figures(io: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Median over runs; min-max over runs, and for raw over every pass of every run."""

    def figure(side: str, key: str) -> dict[str, float]:
        spread = [p[key] for r in io["runs"] for p in r[side].get("passes", [r[side]])]
        return {"median": med(r[side][key] for r in io["runs"]), "min": min(spread), "max": max(spread)}

    sides = {
        "raw": ("write_buffered", "write_fsync", "read_cold", "read_warm"),
        "spill": ("write_buffered", "write_fsync", "write_file", "read_cold", "read_file"),
        "codec": ("encode", "decode"),
    }
    return {(f"{s}_" if s != "codec" else "") + k: figure(s, f"{k}_MBps") for s, keys in sides.items() for k in keys}


IO_ROWS = (
    ("write, to the page cache (no fsync)", "raw_write_buffered", "spill_write_buffered"),
    ("write + fsync of everything written", "raw_write_fsync", "spill_write_fsync"),
    ("read back, evicted from the page cache", "raw_read_cold", "spill_read_cold"),
)


def _io_targets(io: dict[str, Any]) -> list[dict[str, Any]]:
    fig = io_figures(io)
    out = []
    for label, raw, spill in IO_ROWS:
        r = fig[spill]["median"] / fig[raw]["median"]
        out.append(target("io", r >= 0.5, label=label, ratio=r, runs=len(io["runs"]), spill=fig[spill], raw=fig[raw]))
    return out


def chain_comparisons(chain: dict[str, Any]) -> dict[tuple[float, str], dict[str, list[float]]]:
    """Per (utilization, config): per-trace ratios to MYOPIC on the same trace."""
    out: dict[tuple[float, str], dict[str, list[float]]] = {}
    for case in chain["cases"]:
        base = case["runs"]["myopic"]
        for name, run in case["runs"].items():
            if name != "myopic":
                d = out.setdefault(
                    (case["utilization"], name), {"peak": [], "memory": [], "staleness": [], "stretch": []}
                )
                d["peak"].append(run["peak_pending_bytes"] / base["peak_pending_bytes"])
                d["memory"].append(run["peak_memory_bytes"] / base["peak_memory_bytes"])
                d["staleness"].append(run["total_staleness"] / base["total_staleness"] - 1)
                d["stretch"].append(run["max_stretch"] / base["max_stretch"])
    return out


def _by_config(comp: dict[tuple[float, str], dict[str, list[float]]]) -> dict[str, dict[str, list[float]]]:
    """Per config (highest watermarks first): every load's per-trace ratios together."""
    names = sorted({name for _, name in comp}, reverse=True)
    figures = ("peak", "staleness", "stretch")
    return {name: {k: [v for (_, n), d in comp.items() if n == name for v in d[k]] for k in figures} for name in names}


def _chain_targets(chain: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, d in _by_config(chain_comparisons(chain)).items():
        lower, within = sum(1 for v in d["peak"] if v < 1), sum(1 for v in d["staleness"] if v <= 0.05)
        peak, stale = stats(d["peak"]), stats(d["staleness"])
        out.append(target("chain-peak", lower == peak["n"] if peak["n"] else None, name=name, lower=lower, s=peak))
        ok = within == stale["n"] if stale["n"] else None
        out.append(target("chain-staleness", ok, name=name, within=within, s=stale))
    return out


# -- tables -----------------------------------------------------------------------------------------


def ratio_cells(f: dict[str, Any], ratios_of: Callable[[str], list[float]]) -> list[str]:
    """One cell per policy: its ratio on the input built against it, or median / max over instances."""
    cells = []
    for p in POLICIES:
        values = ratios_of(p)
        if not values:
            cells.append("–")
        elif f["key"] in ADVERSARIES or len(values) == 1:
            cells.append(f2(values[0]))
        else:
            cells.append(f"{f2(med(values))} / {f2(max(values))}")
    return cells


def unit_table(results: dict[str, Any]) -> str:
    rows = []
    for f in families(results, "small"):
        spilled = sum(1 for inst in f["instances"] if inst["opt"] > 0)
        n = "1 per policy" if f["key"] in ADVERSARIES else f"{len(f['instances'])} ({spilled} spill)"
        opt = med(inst["opt"] for inst in f["instances"])
        rows.append([f["key"], n, f"{opt:g}", *ratio_cells(f, lambda p, f=f: unit_ratios(f, p))])
    return table(["workload", "instances", "OPT ops (median)", *POLICIES], None, rows)


def ext_table(results: dict[str, Any]) -> str:
    rows = []
    for f in families(results, "small"):
        exts = [inst["ext"] for inst in f["instances"] if "ext" in inst]
        for profile in results["model"]["disk_profiles"] if exts else ():
            cells = ratio_cells(f, lambda p, f=f, profile=profile: ext_ratios(f, profile, p))
            picks = "/".join(sorted({e[profile]["hybrid_picks"] for e in exts}))
            rows.append([f["key"], f"{profile} (hybrid: {picks})", f"{med(e[profile]['opt'] for e in exts):g}", *cells])
    return table(["workload", "c0/c1", "OPT cost (median)", *POLICIES], None, rows)


def absolute_table(results: dict[str, Any]) -> str:
    rows = []
    for f in families(results, "small") + families(results, "large"):
        cells = []
        for p in POLICIES:
            runs = [inst["unit"][p] for inst in instances_for(f, p)]
            cells.append(f"{med(ops(r) for r in runs):g} / {med(moved(r) for r in runs):g}" if runs else "–")
        base = med(inst.get("opt", inst["window_bound"]) for inst in f["instances"])
        rows.append([f["key"], f"{base:g} ({'OPT' if 'opt' in f['instances'][0] else 'bound'})", *cells])
    return table(["workload", "OPT or bound ops", *POLICIES], None, rows)


def large_table(results: dict[str, Any]) -> str:
    rows = []
    for f in families(results, "large"):
        insts = f["instances"]
        cells = []
        for p in POLICIES:
            his = [h for i in instances_for(f, p) if (h := bracket(i, p)[1]) is not None]
            cells.append(f"{f2(med(his))} / {f2(max(his))}" if len(his) > 1 else (f2(his[0]) if his else "–"))
        lo_hi = [bracket(i, "buffered-head") for i in instances_for(f, "buffered-head")]
        lo = min(lo for lo, _ in lo_hi if lo is not None) if lo_hi else None
        span = f"[{f2(lo)}, {f2(max(hi for _, hi in lo_hi if hi is not None))}]" if lo_hi else "–"
        n = str(len(insts)) if not f["key"].startswith("thm4.3") else "1 per policy"
        backlog, bound = med(i["peak_unconsumed"] for i in insts), med(i["window_bound"] for i in insts)
        rows.append([f["key"], n, f"{backlog:g}", f"{bound:g}", *cells, f"{span} (2n = {2 * insts[0]['queues']})"])
    heads = ["workload", "instances", "peak backlog", "bound ops", *POLICIES, "BufferedHead / OPT lies in"]
    return table(heads, None, rows)


def spread(values: Sequence[float], fmt: str = "{:,.0f}", scale: float = 1.0) -> str:
    """Median (min-max)."""
    s = stats(v / scale for v in values)
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def io_table(io: dict[str, Any]) -> str:
    figures = io_figures(io)
    fig = {k: f"{d['median']:,.0f} ({d['min']:,.0f}-{d['max']:,.0f})" for k, d in figures.items()}
    rows = []
    for label, raw, spill in IO_ROWS:
        file_key = {"spill_write_fsync": "spill_write_file", "spill_read_cold": "spill_read_file"}.get(spill)
        r = figures[spill]["median"] / figures[raw]["median"]
        rows.append([label, fig[raw], fig[spill], fig[file_key] if file_key else "–", f"{r:.0%}", status(r >= 0.5)])
    rows.append(["read back, from the page cache", fig["raw_read_warm"], "–", "–", "–", "n/a"])
    codec = f"{fig['encode']} / {fig['decode']}"
    rows.append(["Parquet encode / decode in memory (no I/O)", "–", codec, "–", "–", "n/a"])
    return T.table("io-table", rows)


def chain_table(chain: dict[str, Any]) -> str:
    by: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for case in chain["cases"]:
        for name, run in case["runs"].items():
            by.setdefault((case["utilization"], name), []).append(run)
    comp = chain_comparisons(chain)
    rows = []
    for (u, name), runs in by.items():
        d = comp.get((u, name))
        s = stats(d["staleness"]) if d else None
        rows.append(
            [
                f"U = {u:g}",
                name,
                spread([r["peak_pending_bytes"] for r in runs], scale=MiB),
                spread([r["peak_memory_bytes"] for r in runs], scale=MiB),
                spread(d["peak"], "x{:.2f}") if d else "–",
                spread([r["total_staleness"] for r in runs], scale=1e3),
                spread([r["staleness_ratio"] for r in runs], "{:.3f}"),
                f"{pct(s['median'])} ({pct(s['min'])} to {pct(s['max'])})" if s else "–",
                spread([r["max_stretch"] for r in runs], scale=1e3),
                spread(d["stretch"], "x{:.2f}") if d else "–",
                "–" if runs[0]["times_entered"] is None else spread([r["times_entered"] for r in runs]),
            ]
        )
    return T.table("chain-table", rows)


# -- markdown -----------------------------------------------------------------------------------------


def render_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    changed = "" if meta.get("schedulers_unchanged_during_run", True) else T.line("changed")
    sha = meta["machine"].get("schedulers_sha256", "?")
    machine = machine_markdown(meta, "loader").rstrip("\n") + "  "  # a Markdown line break
    parts = [T("head", machine=machine, sha=sha, changed=changed)]
    if results.get("targets"):
        rows = [[t["target"], t["source"], t["measured"], t["goal"], status(t["ok"])] for t in results["targets"]]
        parts.append(T("targets", table=table("target | source | measured | goal | result", None, rows, "lllll")))
    if "model" in results:
        parts.append(_model_markdown(results))
    if "io" in results:
        parts.append(_io_markdown(results["io"]))
    if "chain" in results:
        parts.append(_chain_markdown(results["chain"]))
    return "".join(parts)


def _model_markdown(results: dict[str, Any]) -> str:
    def described(part: str) -> str:
        return bullets(T.line("family", key=f["key"], description=f["description"]) for f in families(results, part))

    tables = {f"{t.__name__}": t(results) for t in (unit_table, ext_table, absolute_table, large_table)}
    notes = model_notes(results)
    model = results["model"]
    text = T(
        "model",
        m=model["small_budget"],
        cap=model["small_cap"],
        small=described("small"),
        large=described("large"),
        **tables,
    )
    return text + (T("notes", notes=bullets(notes)) if notes else "")


def model_notes(results: dict[str, Any]) -> list[str]:
    notes = []
    if adversary := family(results, "thm2.2"):
        diag = {p: diagonal(adversary, p) for p in POLICIES}
        text = ", ".join(
            f"{p} {f2(ratio(ops(i['unit'][p]), i['opt']))}" for p, i in diag.items() if i is not None and i["opt"]
        )
        notes.append(T.line("note-thm2.2", ratios=text))
        if (inst := diag.get("half")) and "ext" in inst:
            e = inst["ext"]["T=2"]
            notes.append(T.line("note-half-ext", ratio=ratio(e["policies"]["half"], e["opt"])))
    ns = []
    for f in families(results, "large"):
        if f["key"].startswith("thm4.3-") and (inst := diagonal(f, "buffered-head")):
            ns.append((inst["queues"], ops(inst["unit"]["buffered-head"]), inst["window_bound"]))
    small43 = family(results, "thm4.3")
    if small43 and (inst := diagonal(small43, "buffered-head")):
        ns.insert(0, (inst["queues"], ops(inst["unit"]["buffered-head"]), inst["opt"]))
    if ns:
        growth = ", ".join(T.line("note-thm4.3-n", n=n, ops=o, bound=b) for n, o, b in ns)
        notes.append(T.line("note-thm4.3", growth=growth))
    large = [f for f in families(results, "large") if f["key"].startswith("bursty-")]
    units = [inst["unit"] for f in large for inst in f["instances"]]
    more = {p: sum(1 for u in units if ops(u[p]) < ops(u["buffered-head"])) for p in ("half", "lru")}
    if any(more.values()):
        fewer = {p: sum(1 for u in units if moved(u["buffered-head"]) < moved(u[p])) for p in ("half", "lru")}
        notes.append(T.line("note-bursty", total=len(units), more=more, fewer=fewer))
        two = family(results, "bursty-2q-rr")
        if two is not None and any("ext" in i for i in two["instances"]):
            bh, hf = med(ext_ratios(two, "T=2", "buffered-head")), med(ext_ratios(two, "T=2", "half"))
            notes[-1] += T.line("note-bursty-ext", bh=bh, half=hf)
    return notes


def _io_markdown(io: dict[str, Any]) -> str:
    fig = io_figures(io)
    runs = io["runs"]
    cached = [r["raw"]["cached_before_cold_read"] for r in runs] + [r["spill"]["cached_before_drain"] for r in runs]
    sizes = [io["total_bytes"]] * len(runs) + [r["spill"]["file_bytes_on_disk"] for r in runs]
    if any(c is None for c in cached):
        cache_text = T.line("no-fincore")
    else:
        worst = max(c / max(1, size) for c, size in zip(cached, sizes))
        share = "none" if worst == 0 else ("under 0.01%" if worst < 1e-4 else f"at most {worst:.2%}")
        cache_text = T.line("fincore", share=share)
    enc, dec = fig["encode"]["median"], fig["decode"]["median"]
    w, r = fig["spill_write_buffered"]["median"], fig["spill_read_cold"]["median"]
    bound = [name for name, spill, codec in (("writes", w, enc), ("reads", r, dec)) if spill >= 0.6 * codec]
    return T(
        "io-section",
        io=io,
        first=runs[0]["spill"],
        drain_writes=max(run["spill"]["writes_during_drain"] for run in runs),
        cache=cache_text,
        table=io_table(io),
        write=w,
        encode=enc,
        read=r,
        decode=dec,
        bound=T.line("cpu-bound", what=" and ".join(bound)) if bound else "",
    )


def _chain_markdown(chain: dict[str, Any]) -> str:
    comp = chain_comparisons(chain)
    lines = []
    for (u, name), d in sorted(comp.items()):
        worse = sum(1 for v in d["peak"] if v > 1)
        higher = T.line("chain-line-higher", worse=worse) if worse else ""
        lines.append(T.line("chain-line", u=u, name=name, higher=higher, **{k: stats(v) for k, v in d.items()}))
    bad = []
    traced = False  # the case whose schedule was traced by hand (the explanation in the template)
    for case in chain["cases"]:
        base = case["runs"]["myopic"]
        for name, run in case["runs"].items():
            if name != "myopic" and run["peak_pending_bytes"] > base["peak_pending_bytes"]:
                traced |= (case["utilization"], case["seed"], name) == (0.7, 1, "chain 0.4/0.2")
                bad.append(T.line("chain-worse", case=case, name=name, run=run, base=base))
    worse = "\n" + T("chain-worse-traced" if traced else "chain-worse-other", cases="; ".join(bad)) if bad else ""
    summary = []
    for name, d in _by_config(comp).items():
        higher = sum(1 for v in d["peak"] if v > 1)
        d = {k: stats(v) for k, v in d.items()}
        more = T.line("chain-summary-higher", worse=higher, **d) if higher else ""
        summary.append(T.line("chain-summary-part", name=name, higher=more, **d))
    return (
        T.line(
            "chain-section",
            chain=chain,
            utilizations=" and ".join(f"{u:g}" for u in chain["utilizations"]),
            kib=chain["size_range"][0] >> 10,
            high=chain["size_range"][1] >> 20,
            table=chain_table(chain),
            summary=T("chain-summary", parts="; ".join(summary)) if summary else "",
            lines=bullets(lines),
        )
        + "\n"
        + worse
    )
