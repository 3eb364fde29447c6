"""Verdicts and the section of ``benchmarks/spill/``, from the saved results alone (``--render``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from benchmarks.harness.markdown import Template, bullets, f2, pct, table
from benchmarks.harness.results import stats
from benchmarks.spill.model import POLICIES
from testing.report import machine_markdown, status

ACYCLIC = POLICIES[:4]
#: Small families whose consumption is round-robin with a consumption every tick (Theorem 4.2's premise).
ROUND_ROBIN_SMALL = ("bursty-1q", "bursty-2q-rr", "thm4.3")
EPS = 1e-9
MiB = 1 << 20


def spread(values: Sequence[float] | None, fmt: Callable[[float], str] = "{:,.0f}".format, sep: str = "-") -> str:
    """Median (min-max), or a dash for no values."""
    if not values or values[0] is None:
        return "–"
    s = stats(values)
    return f"{fmt(s['median'])} ({fmt(s['min'])}{sep}{fmt(s['max'])})"


T = Template(
    "spill",
    {
        "mib": lambda b: str(b // MiB),
        "MiB": lambda b: f"{b / MiB:,.0f}",
        "spread": spread,
        "MiBs": lambda values: spread([v / MiB for v in values]),
        "k": lambda values: spread([v / 1e3 for v in values]),
        "x": lambda values: spread(values, "x{:.2f}".format),
        "r3": lambda values: spread(values, "{:.3f}".format),
        "pcts": lambda values: spread(values, pct, " to "),
    },
)


def ops(run: dict[str, Any]) -> int:
    return int(run["writes"]) + int(run["reads"])


def moved(run: dict[str, Any]) -> int:
    return int(run["tuples_written"]) + int(run["tuples_read"])


def ratio(value: float, base: float) -> float | None:
    if base > 0:
        return value / base
    return None if value == 0 else math.inf


def med(values: Iterable[float | None]) -> float:
    return stats(values)["median"]


def med_max(values: Sequence[float]) -> str:
    """One value as it is, several as median / max."""
    if len(values) > 1:
        return f"{f2(med(values))} / {f2(max(values))}"
    return f2(values[0]) if values else "–"


def instances_for(family: dict[str, Any], policy: str) -> list[dict[str, Any]]:
    """Adversarial families count only the input built against the policy itself."""
    return [i for i in family["instances"] if i["params"].get("built_against", policy) == policy]


def adversarial(family: dict[str, Any]) -> bool:
    return "built_against" in family["instances"][0]["params"]


def diagonal(family: dict[str, Any], policy: str) -> dict[str, Any] | None:
    return next(iter(instances_for(family, policy)), None)


def unit_ratios(family: dict[str, Any], policy: str) -> list[float]:
    found = (ratio(ops(inst["unit"][policy]), inst["opt"]) for inst in instances_for(family, policy))
    return [r for r in found if r is not None]


def ext_ratios(family: dict[str, Any], profile: str, policy: str) -> list[float]:
    exts = (inst.get("ext", {}).get(profile) for inst in instances_for(family, policy))
    found = (ratio(ext["policies"][policy], ext["opt"]) for ext in exts if ext is not None)
    return [r for r in found if r is not None]


def family(model: dict[str, Any], key: str) -> dict[str, Any] | None:
    return next((f for f in model["small"] + model["large"] if f["key"] == key), None)


def bracket(inst: dict[str, Any], policy: str) -> tuple[float | None, float | None]:
    """(lower, upper) bound on policy / OPT when OPT is unknown: best policy >= OPT >= window bound."""
    value = ops(inst["unit"][policy])
    return ratio(value, min(ops(r) for r in inst["unit"].values())), ratio(value, inst["window_bound"])


# -- verdicts -----------------------------------------------------------------------------------------
def target(block: str, ok: bool | None, **values: Any) -> dict[str, Any]:
    """A target from its template line ``target | source | measured | goal``."""
    return dict(zip(("target", "source", "measured", "goal"), T.line(block, **values).split(" | "))) | {"ok": ok}


def at_most(values: Sequence[float], limit: float) -> bool | None:
    return None if not values else max(values) <= limit + EPS


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per target: target, source, measured (text), goal, ok (True / False / None)."""
    parts = {"model": _model_targets, "io": _io_targets, "chain": _chain_targets}
    return [t for part, judge in parts.items() if part in results for t in judge(results[part])]


def _model_targets(model: dict[str, Any]) -> list[dict[str, Any]]:
    small, large = model["small"], model["large"]
    single = [f for f in small if f["instances"] and f["instances"][0]["queues"] == 1]
    half = {f["key"]: unit_ratios(f, "half") for f in single}
    values, keys = [r for v in half.values() for r in v], ", ".join(sorted(k for k, v in half.items() if v))
    inst = (adversary := family(model, "thm2.2")) and diagonal(adversary, "half")
    tight = ratio(ops(inst["unit"]["half"]), inst["opt"]) if inst else None
    tight_text = T.line("tight", tight=tight) if tight else ""
    out = [target("half", at_most(values, 2), s=stats(values), keys=keys, tight=tight_text)]
    by_n: dict[int, list[float]] = {}
    for inst in (i for f in small if f["key"] in ROUND_ROBIN_SMALL for i in instances_for(f, "buffered-head")):
        if (r := ratio(ops(inst["unit"]["buffered-head"]), inst["opt"])) is not None:
            by_n.setdefault(inst["queues"], []).append(r)
    parts = (T.line("rr-part", n=n, s=stats(v), limit=2 * n) for n, v in sorted(by_n.items()))
    ok = all(max(v) <= 2 * n + EPS for n, v in by_n.items()) if by_n else None
    out.append(target("rr", ok, parts="; ".join(parts)))
    # BufferedHead on the larger instances: OPT unknown, so bracketed.
    verdicts, spans = dict.fromkeys(("proven", "violated", "undecided"), 0), []
    for inst in (i for f in large for i in instances_for(f, "buffered-head")):
        (lo, hi), limit = bracket(inst, "buffered-head"), 2 * inst["queues"]
        if hi is None:
            continue
        verdict = "proven" if hi <= limit + EPS else "violated" if lo is not None and lo > limit + EPS else "undecided"
        verdicts[verdict] += 1
        if verdict == "undecided":
            spans.append(T.line("span", name=inst["name"], lo=lo, hi=hi, limit=limit))
    total = sum(verdicts.values())
    more = f": {'; '.join(spans[:4])}" + (" ..." if len(spans) > 4 else "") if spans else ""
    ok = False if verdicts["violated"] else (True if total and not verdicts["undecided"] else None)
    out.append(target("bracketed", ok, total=total, spans=more, **verdicts))
    values = [r for f in single for r in ext_ratios(f, "T=2", "greedy-chunk")]
    c0, c1 = model["disk_profiles"]["T=2"]
    out.append(target("greedy", at_most(values, 4), c0=c0, c1=c1, s=stats(values)))
    if (multi := family(model, "bursty-2q-rr")) is not None:
        values = ext_ratios(multi, "T=2", "greedy-chunk")
        out.append(target("greedy-2q", at_most(values, 4), s=stats(values)))
    parts, every = [], []
    for profile in model["disk_profiles"]:
        values = [r for f in single for r in ext_ratios(f, profile, "hybrid")]
        picks = {i["ext"][profile]["hybrid_picks"] for f in single for i in f["instances"] if "ext" in i}
        if values:
            parts.append(T.line("hybrid-part", profile=profile, picks="/".join(sorted(picks)), worst=max(values)))
            every += values
    out.append(target("hybrid", at_most(every, 4), parts="; ".join(parts)))
    runs = [(p, inst["name"], inst["unit"][p]) for f in small + large for inst in f["instances"] for p in ACYCLIC]
    faulty = [(p, name, run) for p, name, run in runs if run["error"] or run["max_writes_per_tuple"] > 1]
    bad = [T.line("offender", policy=p, name=name, error=run["error"] or T.line("twice")) for p, name, run in faulty]
    offenders = f"; {'; '.join(bad[:3])}" if bad else ""
    ok = not bad if runs else None
    out.append(target("acyclic", ok, clean=len(runs) - len(bad), runs=len(runs), offenders=offenders))
    twice = [inst["unit"]["lru"]["tuples_written_twice"] for f in small + large for inst in f["instances"]]
    inst = (thrash := family(model, "thrash")) and thrash["instances"][0]
    again = inst["unit"]["lru"]["tuples_written_twice"] if inst else 0
    lru = ratio(ops(inst["unit"]["lru"]), inst["opt"]) if inst else None
    counts = {"total": sum(twice), "instances": sum(t > 0 for t in twice), "n": len(twice)}
    out.append(target("lru", None if thrash is None else again > 0, twice=again, ratio=lru, **counts))
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


#: The rows of table 2 with a target: label, raw figure, spill figure, spill figure per file byte.
IO_ROWS = (
    ("write, to the page cache (no fsync)", "raw_write_buffered", "spill_write_buffered", None),
    ("write + fsync of everything written", "raw_write_fsync", "spill_write_fsync", "spill_write_file"),
    ("read back, evicted from the page cache", "raw_read_cold", "spill_read_cold", "spill_read_file"),
)


def _io_targets(io: dict[str, Any]) -> list[dict[str, Any]]:
    fig = io_figures(io)
    out = []
    for label, raw, spill, _ in IO_ROWS:
        r = fig[spill]["median"] / fig[raw]["median"]
        out.append(target("io", r >= 0.5, label=label, ratio=r, runs=len(io["runs"]), spill=fig[spill], raw=fig[raw]))
    return out


#: The chain figures compared with MYOPIC's on the same trace: (result key, 1 for a relative change).
CHAIN_RATIOS = {"peak": ("peak_pending_bytes", 0), "memory": ("peak_memory_bytes", 0)}
CHAIN_RATIOS |= {"staleness": ("total_staleness", 1), "stretch": ("max_stretch", 0)}


def chain_comparisons(chain: dict[str, Any]) -> dict[tuple[float, str], dict[str, list[float]]]:
    """Per (utilization, config): per-trace ratios to MYOPIC on the same trace."""
    out: dict[tuple[float, str], dict[str, list[float]]] = {}
    for case in chain["cases"]:
        base = case["runs"]["myopic"]
        for name, run in case["runs"].items():
            if name != "myopic":
                d = out.setdefault((case["utilization"], name), {k: [] for k in CHAIN_RATIOS})
                for figure, (key, change) in CHAIN_RATIOS.items():
                    d[figure].append(run[key] / base[key] - change)
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
def unit_table(model: dict[str, Any]) -> str:
    rows = []
    for f in model["small"]:
        spilled = sum(1 for inst in f["instances"] if inst["opt"] > 0)
        n = "1 per policy" if adversarial(f) else f"{len(f['instances'])} ({spilled} spill)"
        opt = med(inst["opt"] for inst in f["instances"])
        rows.append([f["key"], n, f"{opt:g}", *(med_max(unit_ratios(f, p)) for p in POLICIES)])
    return table(["workload", "instances", "OPT ops (median)", *POLICIES], None, rows)


def ext_table(model: dict[str, Any]) -> str:
    rows = []
    for f in model["small"]:
        exts = [inst["ext"] for inst in f["instances"] if "ext" in inst]
        for profile in model["disk_profiles"] if exts else ():
            cells = (med_max(ext_ratios(f, profile, p)) for p in POLICIES)
            picks = "/".join(sorted({e[profile]["hybrid_picks"] for e in exts}))
            rows.append([f["key"], f"{profile} (hybrid: {picks})", f"{med(e[profile]['opt'] for e in exts):g}", *cells])
    return table(["workload", "c0/c1", "OPT cost (median)", *POLICIES], None, rows)


def absolute_table(model: dict[str, Any]) -> str:
    rows = []
    for f in model["small"] + model["large"]:
        cells = []
        for p in POLICIES:
            runs = [inst["unit"][p] for inst in instances_for(f, p)]
            cells.append(f"{med(ops(r) for r in runs):g} / {med(moved(r) for r in runs):g}" if runs else "–")
        base = med(inst.get("opt", inst["window_bound"]) for inst in f["instances"])
        rows.append([f["key"], f"{base:g} ({'OPT' if 'opt' in f['instances'][0] else 'bound'})", *cells])
    return table(["workload", "OPT or bound ops", *POLICIES], None, rows)


def large_table(model: dict[str, Any]) -> str:
    rows = []
    for f in model["large"]:
        insts = f["instances"]
        cells = [med_max([h for i in instances_for(f, p) if (h := bracket(i, p)[1]) is not None]) for p in POLICIES]
        lo, hi = zip(*(bracket(i, "buffered-head") for i in instances_for(f, "buffered-head")))
        span = f"[{f2(min(x for x in lo if x is not None))}, {f2(max(x for x in hi if x is not None))}]"
        n = "1 per policy" if adversarial(f) else str(len(insts))
        backlog, bound = med(i["peak_unconsumed"] for i in insts), med(i["window_bound"] for i in insts)
        rows.append([f["key"], n, f"{backlog:g}", f"{bound:g}", *cells, f"{span} (2n = {2 * insts[0]['queues']})"])
    heads = ["workload", "instances", "peak backlog", "bound ops", *POLICIES, "BufferedHead / OPT lies in"]
    return table(heads, None, rows)


def io_table(io: dict[str, Any]) -> str:
    figures = io_figures(io)
    fig = {k: f"{d['median']:,.0f} ({d['min']:,.0f}-{d['max']:,.0f})" for k, d in figures.items()}
    rows = []
    for label, raw, spill, file_key in IO_ROWS:
        r = figures[spill]["median"] / figures[raw]["median"]
        rows.append([label, fig[raw], fig[spill], fig[file_key] if file_key else "–", f"{r:.0%}", status(r >= 0.5)])
    rows.append(["read back, from the page cache", fig["raw_read_warm"], "–", "–", "–", "n/a"])
    codec = f"{fig['encode']} / {fig['decode']}"
    rows.append(["Parquet encode / decode in memory (no I/O)", "–", codec, "–", "–", "n/a"])
    return T.table("io-table", rows)


def chain_table(chain: dict[str, Any]) -> str:
    """Per load and policy: its figures (``c``, each a list over traces) and those against MYOPIC (``d``)."""
    comp, by = chain_comparisons(chain), {}
    for case in chain["cases"]:
        for name, run in case["runs"].items():
            by.setdefault((case["utilization"], name), []).append(run)
    rows = []
    for (u, name), runs in by.items():
        columns = {k: [r[k] for r in runs] for k in runs[0]}
        rows.append({"u": u, "name": name, "c": columns, "d": comp.get((u, name), dict.fromkeys(CHAIN_RATIOS))})
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
    sections = {"model": _model_markdown, "io": _io_markdown, "chain": _chain_markdown}
    return "".join(parts + [render(results[part]) for part, render in sections.items() if part in results])


def _model_markdown(model: dict[str, Any]) -> str:
    def described(part: str) -> str:
        return bullets(T.line("family", key=f["key"], description=f["description"]) for f in model[part])

    tables = {t.__name__: t(model) for t in (unit_table, ext_table, absolute_table, large_table)}
    small, large = described("small"), described("large")
    text = T("model", m=model["small_budget"], cap=model["small_cap"], small=small, large=large, **tables)
    notes = model_notes(model)
    return text + (T("notes", notes=bullets(notes)) if notes else "")


def model_notes(model: dict[str, Any]) -> list[str]:
    notes = []
    if adversary := family(model, "thm2.2"):
        diag = {p: diagonal(adversary, p) for p in POLICIES}
        text = ", ".join(
            f"{p} {f2(ratio(ops(i['unit'][p]), i['opt']))}" for p, i in diag.items() if i is not None and i["opt"]
        )
        notes.append(T.line("note-thm2.2", ratios=text))
        if (inst := diag.get("half")) and "ext" in inst:
            e = inst["ext"]["T=2"]
            notes.append(T.line("note-half-ext", ratio=ratio(e["policies"]["half"], e["opt"])))
    adversaries = [family(model, "thm4.3")] + [f for f in model["large"] if f["key"].startswith("thm4.3-")]
    if insts := [inst for f in adversaries if f and (inst := diagonal(f, "buffered-head"))]:
        ns = [(i["queues"], ops(i["unit"]["buffered-head"]), i.get("opt", i["window_bound"])) for i in insts]
        growth = ", ".join(T.line("note-thm4.3-n", n=n, ops=o, bound=b) for n, o, b in ns)
        notes.append(T.line("note-thm4.3", growth=growth))
    units = [inst["unit"] for f in model["large"] if f["key"].startswith("bursty-") for inst in f["instances"]]
    more = {p: sum(1 for u in units if ops(u[p]) < ops(u["buffered-head"])) for p in ("half", "lru")}
    if any(more.values()):
        fewer = {p: sum(1 for u in units if moved(u["buffered-head"]) < moved(u[p])) for p in ("half", "lru")}
        notes.append(T.line("note-bursty", total=len(units), more=more, fewer=fewer))
        two = family(model, "bursty-2q-rr")
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
    values = {"io": io, "first": runs[0]["spill"], "cache": cache_text, "table": io_table(io)}
    values |= {"write": w, "encode": enc, "read": r, "decode": dec}
    values["drain_writes"] = max(run["spill"]["writes_during_drain"] for run in runs)
    return T("io-section", bound=T.line("cpu-bound", what=" and ".join(bound)) if bound else "", **values)


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
    values = {"chain": chain, "kib": chain["size_range"][0] >> 10, "high": chain["size_range"][1] >> 20}
    values |= {"utilizations": " and ".join(f"{u:g}" for u in chain["utilizations"]), "table": chain_table(chain)}
    summary_text = T("chain-summary", parts="; ".join(summary)) if summary else ""
    return T("chain-section", summary=summary_text, lines=bullets(lines), **values) + worse
