"""Latest tables' key policies in the simulator, beside UpStream's figures.

The pure update queues (schedulers/keys/queue.py, the objects the live pending store runs)
through schedulers/keys/simulator.py, on the paper's workloads (Figures 7 and 9, other loads,
Zipf key rates) and in the loader's setting (batches with a fixed cost); templates/keys.md.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template, table
from schedulers.keys.simulator import KEYED_POLICIES, simulate_keys
from schedulers.keys.workloads import key_rates, keyed_workload
from testing.report import machine_markdown


def over_seeds(
    seeds: int,
    point: dict[str, Any],
    policies: Sequence[str],
    second: str,
    figure: Callable[[Any], float],
    **fixed: Any,
) -> dict[str, Any]:
    """The point and, per policy, the median over seeds of the application staleness and of ``figure``
    (``"<policy> <second>"``); the point and ``fixed`` set the workload and the simulator's options."""
    setting = point | fixed
    simulator = {k: setting.pop(k) for k in ("overhead", "max_keys") if k in setting}
    row = dict(point)
    for policy in policies:
        runs = [simulate_keys(keyed_workload(**setting, seed=s), policy, **simulator) for s in range(seeds)]
        row[policy] = statistics.median([r.application.mean for r in runs])
        row[f"{policy} {second}"] = statistics.median([figure(r) for r in runs])
    return row


def figure7(seeds: int, updates: int) -> list[dict[str, Any]]:
    points = [{"keys": keys, "load": load} for keys in (1, 10) for load in (0.5, 0.9, 1.0, 2.0, 5.0, 10.0)]
    policies, queue = ("fifo-aq", "fifo-uq", "in-place"), attrgetter("queue.mean")
    return [over_seeds(seeds, p, policies, "queue", queue, shape="uniform", updates=updates) for p in points]


#: Figure 9's two LINECUTTINGs: the paper's rule, and ours (schedulers/keys/queue.py).
CUTTERS: tuple[str, ...] = ("linecutting", "linecutting-bounded")


def _root(f: Callable[[float], float]) -> float:
    """The x >= 0 where a decreasing ``f`` crosses 0 (bisection), 0.0 if f(0) <= 0."""
    if f(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while f(hi) > 0.0:
        hi *= 2.0
    lo = 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0.0 else (lo, mid)
    return (lo + hi) / 2


def fluid(slow: int, load: float = 5.0) -> tuple[float, float]:
    """Queue staleness (mean over keys, in C_t) of IN-PLACE and of the best waits, in the fluid
    model of schedulers/keys/queue.py: key k waits W_k, then stays fresh I_k = 1/u_k, and the
    loader is busy (sum of 1 / (I_k + W_k) = 1). IN-PLACE: one wait R for all; the optimum:
    W_k^2 / 2 + W_k I_k = K for all k. Overloaded settings only (load > 1)."""
    intervals = [1.0 / (share * load) for share in key_rates("two-class", 10, slow=slow)]

    def staleness(waits: list[float]) -> float:
        return statistics.mean(w * w / 2 / (i + w) for i, w in zip(intervals, waits))

    def wait(i: float, k: float) -> float:
        return 2 * k / (i + math.sqrt(i * i + 2 * k))

    rnd = _root(lambda r: sum(1.0 / (i + r) for i in intervals) - 1.0)
    k = _root(lambda k: sum(1.0 / (i + wait(i, k)) for i in intervals) - 1.0)
    return staleness([rnd] * len(intervals)), staleness([wait(i, k) for i in intervals])


def figure9(seeds: int, updates: int) -> list[dict[str, Any]]:
    rows = []
    everyone = ("in-place", *CUTTERS)
    for slow in range(11):
        in_place, best = fluid(slow)
        # The slow keys' own arrival rate against the loader's rate (1 key per C_t).
        slow_load = 5.0 * slow * 0.1 / (10 - slow + slow * 0.1)
        row: dict[str, Any] = {"slow": slow, "slow_load": slow_load, "fluid_ratio": in_place / best if best else 1.0}
        samples: dict[str, list[float]] = defaultdict(list)
        for s in range(seeds):
            w = keyed_workload("two-class", keys=10, load=5.0, slow=slow, updates=updates, seed=s)
            runs = {p: simulate_keys(w, p) for p in everyone}
            for p in CUTTERS:
                samples[f"queue_ratio {p}"].append(runs["in-place"].queue.mean / runs[p].queue.mean)
                samples[f"application_ratio {p}"].append(runs["in-place"].application.mean / runs[p].application.mean)
                samples[f"cut_share {p}"].append(runs[p].cuts / len(w.arrivals))
            for p, r in runs.items():
                for group, keys in (("fast", range(10 - slow)), ("slow", range(10 - slow, 10))):
                    row[f"{group} {p}"] = None  # (a group of no keys)
                    if keys:
                        samples[f"{group} {p}"].append(statistics.mean(r.queue_by_key[k] for k in keys))
        rows.append(row | {k: statistics.median(v) for k, v in samples.items()})
    return rows


def other_loads(seeds: int, updates: int) -> list[dict[str, Any]]:
    """Figure 9's queue staleness ratios at other loads, for 2, 5 and 8 slow keys of 10."""
    rows = []
    for load in (0.5, 0.9, 2.0, 10.0):
        for slow in (2, 5, 8):
            ratios: dict[str, list[float]] = {p: [] for p in CUTTERS}
            for s in range(seeds):
                w = keyed_workload("two-class", keys=10, load=load, slow=slow, updates=updates, seed=s)
                a = simulate_keys(w, "in-place")
                for p in CUTTERS:
                    ratios[p].append(a.queue.mean / simulate_keys(w, p).queue.mean)
            rows.append({"load": load, "slow": slow, **{p: statistics.median(ratios[p]) for p in CUTTERS}})
    return rows


#: Figure 9 across slow-to-fast ratios: the ratios and loads swept, the two readings of
#: section 5.3's n, and whether u_k is the workload's true rate or estimated online.
RATIOS = (10, 20, 40, 60, 100)
SWEEP_LOADS = (5.0, 10.0)
READINGS = {"linecutting": "all waiting", "linecutting-faster": "faster only"}


def figure9_ratios(seeds: int, updates: int) -> list[dict[str, Any]]:
    """Queue staleness IN-PLACE / LINECUTTING for 0..10 slow keys of 10, per load, ratio,
    reading of n and rates (known or estimated); a row per curve, medians over seeds."""
    rows = []
    for load in SWEEP_LOADS:
        for ratio in RATIOS:
            curves: dict[tuple[str, bool], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
            for slow in range(11):
                for s in range(seeds):
                    w = keyed_workload("two-class", keys=10, load=load, slow=slow, ratio=ratio, updates=updates, seed=s)
                    base = simulate_keys(w, "in-place").queue.mean  # (IN-PLACE reads no rate)
                    for policy, known in ((p, k) for p in READINGS for k in (False, True)):
                        ratio_ = base / simulate_keys(w, policy, known_rates=known).queue.mean
                        curves[policy, known][slow].append(ratio_)
            for (policy, known), by_slow in curves.items():
                row: dict[str, Any] = {"load": load, "ratio": ratio, "reading": policy, "known": known}
                row |= {str(slow): statistics.median(v) for slow, v in by_slow.items()}
                rows.append(row)
    return rows


def paper_shape(row: dict[str, Any], tolerance: float = 0.02, peak: float = 1.2) -> bool:
    """Figure 9's shape as the issue states it: 1.00 at 0 and 10 slow keys, the highest at 8, at least ``peak``."""
    curve = [row[str(slow)] for slow in range(11)]
    ends = abs(curve[0] - 1.0) <= tolerance and abs(curve[10] - 1.0) <= tolerance
    return ends and max(range(1, 10), key=curve.__getitem__) == 8 and curve[8] >= peak


def zipf(seeds: int, updates: int) -> list[dict[str, Any]]:
    points = [{"keys": keys, "theta": theta} for keys in (10, 100) for theta in (0.0, 0.5, 0.9)]
    p99 = attrgetter("application.p99")
    return [over_seeds(seeds, p, KEYED_POLICIES, "p99", p99, shape="zipf", load=5.0, updates=updates) for p in points]


def batched(seeds: int, updates: int) -> list[dict[str, Any]]:
    """1,000 keys, Zipf 0.9; a job costs 50 C_t plus 1 C_t per key, at most ``max_keys`` keys."""
    setting = {"shape": "zipf", "keys": 1000, "theta": 0.9, "load": 0.8, "updates": updates, "overhead": 50.0}
    batches = attrgetter("batches")
    points = ({"max_keys": k} for k in (None, 200, 50, 20))
    return [over_seeds(seeds, point, KEYED_POLICIES, "batches", batches, **setting) for point in points]


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}" if value >= 1000 else f"{value:.2f}"


T = Template("keys", {"kf": _f})
#: (seeds, updates per run), quick and full.
SIZE = {True: (2, 5_000), False: (5, 20_000)}
#: The same for the ratio sweep (2,200 runs a seed at full size).
SWEEP_SIZE = {True: (1, 2_000), False: (3, 10_000)}


def measure(run: Run) -> dict[str, Any]:
    seeds, updates = SIZE[run.args.quick]
    figures = {"figure7": figure7, "figure9": figure9, "other_loads": other_loads, "zipf": zipf, "batched": batched}
    out = {name: figure(seeds, updates) for name, figure in figures.items()}
    return out | {"figure9_ratios": figure9_ratios(*SWEEP_SIZE[run.args.quick])}


def render(saved: dict[str, Any]) -> str:
    f7, f9, fl, zf, bt = (saved[k] for k in ("figure7", "figure9", "other_loads", "zipf", "batched"))
    seeds, updates = SIZE[saved["meta"]["quick"]]
    lc, lcb = CUTTERS
    zipf_means = "; ".join(
        f"{r['keys']} keys, theta {r['theta']:g}: {r['in-place'] / r[lcb]:.3f}" for r in zf if r[lcb]
    )
    small = [r for r in bt if r["max_keys"] is not None and r["max_keys"] < 200]
    f7 = [dict(r, ratio=f"{r['in-place'] / r['fifo-uq']:.2f}" if r["fifo-uq"] else "—") for r in f7]
    upper = [p.upper() for p in KEYED_POLICIES]
    zipf_cells = ["{keys}", "{theta:g}", *(lambda r, p=p: f"{_f(r[p])} ({_f(r[f'{p} p99'])})" for p in KEYED_POLICIES)]
    batch_cells = [
        lambda r: "unlimited" if r["max_keys"] is None else r["max_keys"],
        *(lambda r, p=p: f"{_f(r[p])} ({r[f'{p} batches']:,.0f})" for p in KEYED_POLICIES),
    ]
    n = len(KEYED_POLICIES)
    tables = {"figure7": T.table("figure7", f7, "rrrrrr"), "figure9": T.table("figure9", f9, "r" * 15)}
    tables["loads"] = T.table("loads", fl, "rrrr")
    tables["zipf"] = table(["keys", "theta", *upper], zipf_cells, zf, "r" * (2 + n))
    tables["batched"] = table(["max keys per batch", *upper], batch_cells, bt, "l" + "r" * n)
    queue = {cutter: lambda r, c=cutter: r[f"queue_ratio {c}"] for cutter in CUTTERS}
    values = {"best": max(f9, key=queue[lc]), "best_b": max(f9, key=queue[lcb]), "worst": min(f9, key=queue[lc])}
    values |= {"worst_b": min(f9, key=queue[lcb]), "fluid": max(f9, key=lambda r: r["fluid_ratio"])}
    values |= {"low": min(fl, key=lambda r: r[lc]), "low_b": min(fl, key=lambda r: r[lcb]), "zipf_means": zipf_means}
    for name, cutter in (("batch_ratios", lcb), ("batch_ratios_lc", lc)):
        values[name] = ", ".join(f"{r['in-place'] / r[cutter]:.2f} at {r['max_keys']} keys" for r in small)
    values |= _ratio_sweep(saved.get("figure9_ratios"), saved["meta"]["quick"])
    return T("section", machine=machine_markdown(saved["meta"]), updates=updates, seeds=seeds, **tables, **values)


def _ratio_sweep(rows: list[dict[str, Any]] | None, quick: bool) -> dict[str, str]:
    """Figure 9 across ratios: its tables and which curves have the paper's shape."""
    if not rows:
        return {"sweep": ""}
    seeds, updates = SWEEP_SIZE[quick]
    cells = [
        lambda r: f"{r['ratio']}x",
        lambda r: READINGS[r["reading"]],
        lambda r: "known" if r["known"] else "estimated",
        *(lambda r, s=s: f"{r[str(s)]:.2f}" for s in range(11)),
        lambda r: "yes" if paper_shape(r) else "",
    ]
    header = ["slow : fast", "n counts", "u_k", *(str(s) for s in range(11)), "paper's shape"]
    tables = {
        f"{load:g}": table(header, cells, [r for r in rows if r["load"] == load], "lll" + "r" * 11 + "l")
        for load in SWEEP_LOADS
    }
    shaped = [r for r in rows if paper_shape(r)]
    found = "; ".join(
        f"load {r['load']:g}, {r['ratio']}x, n = {READINGS[r['reading']]}, u_k {'known' if r['known'] else 'estimated'}"
        f" ({r['8']:.2f} at 8)"
        for r in shaped
    )
    at5 = [r for r in shaped if r["load"] == 5.0]
    equal = [r for r in rows if r["reading"] == "linecutting-faster" and r["known"]]
    ends = max(max(abs(r["0"] - 1.0), abs(r["10"] - 1.0)) for r in equal)
    return {
        "sweep": T(
            "sweep",
            seeds=seeds,
            updates=updates,
            load5=tables["5"],
            load10=tables["10"],
            found=found or "none",
            verdict="PASS" if at5 else "MISS",
            ends=f"{ends:.3f}",
        )
    }


BENCHMARK = Benchmark(measure, render, package="schedulers")

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
