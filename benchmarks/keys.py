"""Latest tables' key policies in the simulator, beside UpStream's figures.

    python -m benchmarks.keys            # every figure, 5 seeds each, BENCHMARKS.md section "keys"
    python -m benchmarks.keys --quick    # 2 seeds, fewer updates, prints only

The pure update queues (schedulers/keys/queue.py, the objects the live pending store
runs) through schedulers/keys/simulator.py, on the workloads of the paper
(../shared/seeds/001_*): one key at a time at cost C_t = 1, Poisson arrivals.

1. Figure 7: append queue (FIFO-AQ) vs update queues (FIFO-UQ, IN-PLACE) by load factor,
   one key and ten keys at one rate.
2. Figure 9: IN-PLACE / LINECUTTING queue staleness at load 5, ten keys, the number of
   slow updaters (10x slower) from 0 to 10; the same for our LINECUTTING-BOUNDED
   (schedulers/keys/queue.py), beside the fluid model's optimum it is derived from.
3. Figure 9's setting at other loads (the paper: "similar").
4. Zipf-distributed key rates (theta 0, 0.5, 0.9), ten and a hundred keys, load 5.
5. The loader's setting: a batch carries up to ``max_keys`` keys at a fixed cost per job
   (a Spark job's) plus a small cost per key.

Staleness is each key's time-average over the run, in units of C_t, averaged over keys;
figures are medians over seeds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from schedulers.keys.simulator import KEYED_POLICIES, simulate_keys
from schedulers.keys.workloads import key_rates, keyed_workload
from testing.report import (
    RESULTS_DIR,
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
    write_section,
)

MODULE = "benchmarks.keys"
SECTION = "keys"


def _median(values: list[float]) -> float:
    return statistics.median(values)


def figure7(seeds: int, updates: int) -> list[dict[str, Any]]:
    rows = []
    for keys in (1, 10):
        for load in (0.5, 0.9, 1.0, 2.0, 5.0, 10.0):
            row: dict[str, Any] = {"keys": keys, "load": load}
            for policy in ("fifo-aq", "fifo-uq", "in-place"):
                runs = [
                    simulate_keys(keyed_workload("uniform", keys=keys, load=load, updates=updates, seed=s), policy)
                    for s in range(seeds)
                ]
                row[policy] = _median([r.application.mean for r in runs])
                row[f"{policy} queue"] = _median([r.queue.mean for r in runs])
            rows.append(row)
    return rows


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
    for slow in range(11):
        ratios: dict[str, list[float]] = {p: [] for p in CUTTERS}
        app_ratios: dict[str, list[float]] = {p: [] for p in CUTTERS}
        fast: dict[str, list[float]] = {p: [] for p in ("in-place", *CUTTERS)}
        slow_keys: dict[str, list[float]] = {p: [] for p in ("in-place", *CUTTERS)}
        cuts: dict[str, list[float]] = {p: [] for p in CUTTERS}
        for s in range(seeds):
            w = keyed_workload("two-class", keys=10, load=5.0, slow=slow, updates=updates, seed=s)
            runs = {p: simulate_keys(w, p) for p in ("in-place", *CUTTERS)}
            a = runs["in-place"]
            for p in CUTTERS:
                ratios[p].append(a.queue.mean / runs[p].queue.mean)
                app_ratios[p].append(a.application.mean / runs[p].application.mean)
                cuts[p].append(runs[p].cuts / len(w.arrivals))
            for p, r in runs.items():
                if slow < 10:
                    fast[p].append(statistics.mean(r.queue_by_key[k] for k in range(10 - slow)))
                if slow:
                    slow_keys[p].append(statistics.mean(r.queue_by_key[k] for k in range(10 - slow, 10)))
        in_place, best = fluid(slow)
        row: dict[str, Any] = {
            "slow": slow,
            # The slow keys' own arrival rate against the loader's rate (1 key per C_t).
            "slow_load": 5.0 * slow * 0.1 / (10 - slow + slow * 0.1),
            "fluid_ratio": in_place / best if best else 1.0,
        }
        for p in CUTTERS:
            row[f"queue_ratio {p}"] = _median(ratios[p])
            row[f"application_ratio {p}"] = _median(app_ratios[p])
            row[f"cut_share {p}"] = _median(cuts[p])
        for p in ("in-place", *CUTTERS):
            row[f"fast {p}"] = _median(fast[p]) if fast[p] else None
            row[f"slow {p}"] = _median(slow_keys[p]) if slow_keys[p] else None
        rows.append(row)
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
            rows.append({"load": load, "slow": slow, **{p: _median(ratios[p]) for p in CUTTERS}})
    return rows


def zipf(seeds: int, updates: int) -> list[dict[str, Any]]:
    rows = []
    for keys in (10, 100):
        for theta in (0.0, 0.5, 0.9):
            row: dict[str, Any] = {"keys": keys, "theta": theta}
            for policy in KEYED_POLICIES:
                runs = [
                    simulate_keys(
                        keyed_workload("zipf", keys=keys, theta=theta, load=5.0, updates=updates, seed=s), policy
                    )
                    for s in range(seeds)
                ]
                row[policy] = _median([r.application.mean for r in runs])
                row[f"{policy} p99"] = _median([r.application.p99 for r in runs])
            rows.append(row)
    return rows


def batched(seeds: int, updates: int) -> list[dict[str, Any]]:
    """1,000 keys, Zipf 0.9; a job costs 50 C_t plus 1 C_t per key, at most ``max_keys`` keys."""
    rows = []
    for max_keys in (None, 200, 50, 20):
        row: dict[str, Any] = {"max_keys": max_keys}
        for policy in KEYED_POLICIES:
            runs = [
                simulate_keys(
                    keyed_workload("zipf", keys=1000, theta=0.9, load=0.8, updates=updates, seed=s),
                    policy,
                    overhead=50.0,
                    max_keys=max_keys,
                )
                for s in range(seeds)
            ]
            row[policy] = _median([r.application.mean for r in runs])
            row[f"{policy} batches"] = _median([float(r.batches) for r in runs])
        rows.append(row)
    return rows


def _f(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 5,000 updates per run, no BENCHMARKS.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    seeds, updates = (2, 5_000) if args.quick else (5, 20_000)
    meta: dict[str, Any] = {"command": command_line(MODULE, argv), "quick": args.quick, "machine": machine_info()}
    log("figure 7")
    f7 = figure7(seeds, updates)
    log("figure 9")
    f9 = figure9(seeds, updates)
    log("figure 9, other loads")
    fl = other_loads(seeds, updates)
    log("zipf")
    zf = zipf(seeds, updates)
    log("batched")
    bt = batched(seeds, updates)
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    lc, lcb = CUTTERS
    best9 = max(f9, key=lambda r: r[f"queue_ratio {lc}"])
    best9b = max(f9, key=lambda r: r[f"queue_ratio {lcb}"])
    worst9 = min(f9, key=lambda r: r[f"queue_ratio {lc}"])
    worst9b = min(f9, key=lambda r: r[f"queue_ratio {lcb}"])
    best_fluid = max(f9, key=lambda r: r["fluid_ratio"])
    worst_loads = min(fl, key=lambda r: r[lc])
    worst_loads_b = min(fl, key=lambda r: r[lcb])
    zipf_means = "; ".join(
        f"{r['keys']} keys, theta {r['theta']:g}: {r['in-place'] / r[lcb]:.3f}" for r in zf if r[lcb]
    )
    small = [r for r in bt if r["max_keys"] is not None and r["max_keys"] < 200]
    batch_ratios = ", ".join(f"{r['in-place'] / r[lcb]:.2f} at {r['max_keys']} keys" for r in small)
    batch_ratios_lc = ", ".join(f"{r['in-place'] / r[lc]:.2f} at {r['max_keys']} keys" for r in small)
    markdown = (
        "## Latest tables' key policies (`benchmarks/keys.py`, simulator)\n\n"
        + machine_markdown(meta)
        + f"\nUpStream's setting: one key loaded at a time at cost C_t = 1, Poisson arrivals, {updates:,} per run; "
        f"staleness = each key's time-average over the run in units of C_t, mean over keys; median of {seeds} seeds. "
        "Arrivals stop at the horizon and staleness is integrated up to it, so an append queue that falls behind "
        "shows a staleness that grows with the run's length.\n\n"
        "### 1. Append queue vs update queues, uniform key rates (the paper's Figure 7)\n\n"
        'Application staleness (queue staleness in brackets). The paper: update queues "significantly improve '
        'average staleness" over the append queue, and IN-PLACE is optimal when keys update at one rate '
        "(section 5.2).\n\n"
        + md_table(
            ["keys", "load", "FIFO-AQ", "FIFO-UQ", "IN-PLACE", "IN-PLACE / FIFO-UQ"],
            [
                [
                    r["keys"],
                    f"{r['load']:g}",
                    f"{_f(r['fifo-aq'])} ({_f(r['fifo-aq queue'])})",
                    f"{_f(r['fifo-uq'])} ({_f(r['fifo-uq queue'])})",
                    f"{_f(r['in-place'])} ({_f(r['in-place queue'])})",
                    f"{r['in-place'] / r['fifo-uq']:.2f}" if r["fifo-uq"] else "—",
                ]
                for r in f7
            ],
            "rrrrrr",
        )
        + "\n\n### 2. LINECUTTING vs IN-PLACE, two classes of updaters (the paper's Figure 9)\n\n"
        "Ten keys at load 5; slow keys update 10x less often than fast ones. LC: LINECUTTING as the paper states "
        "it (section 5.3); LC-B: our LINECUTTING-BOUNDED (schedulers/keys/queue.py: a key joining the queue is "
        "placed as if it had joined A = W_f + I - sqrt(I^2 + W_f^2) earlier, I its update interval and W_f the "
        "measured wait of the keys that update faster than they are served; A is below both W_f and I, so a slow "
        "key cuts nearly a round and never more, a fast key hardly moves). Ratios are IN-PLACE / policy, > 1: the "
        'policy is fresher; "fluid optimum" is the same ratio for the best waits of the fluid model A is '
        "derived from (not a bound on a real queue, a reference for the shape). Queue staleness of the fast and "
        'the slow keys beside it; "cutting" is the share of arrivals placed ahead of at least one waiting key; '
        "\"slow load\" is the slow keys' own arrival rate against the loader's rate. The paper reports ratio 1 at "
        "0 and 10 slow updaters, rising to its highest at 8 and dropping at 9.\n\n"
        + md_table(
            [
                "slow keys",
                "queue ratio: LC",
                "queue ratio: LC-B",
                "fluid optimum",
                "app. ratio: LC",
                "app. ratio: LC-B",
                "fast: IN-PLACE",
                "fast: LC",
                "fast: LC-B",
                "slow: IN-PLACE",
                "slow: LC",
                "slow: LC-B",
                "cutting: LC",
                "cutting: LC-B",
                "slow load",
            ],
            [
                [
                    r["slow"],
                    f"{r[f'queue_ratio {lc}']:.3f}",
                    f"{r[f'queue_ratio {lcb}']:.3f}",
                    f"{r['fluid_ratio']:.3f}",
                    f"{r[f'application_ratio {lc}']:.3f}",
                    f"{r[f'application_ratio {lcb}']:.3f}",
                    *[_f(r[f"fast {p}"]) for p in ("in-place", *CUTTERS)],
                    *[_f(r[f"slow {p}"]) for p in ("in-place", *CUTTERS)],
                    f"{r[f'cut_share {lc}']:.0%}",
                    f"{r[f'cut_share {lcb}']:.0%}",
                    f"{r['slow_load']:.2f}",
                ]
                for r in f9
            ],
            "r" * 15,
        )
        + f"\n\nThe paper's rule gains most at {best9['slow']} slow keys (ratio {best9[f'queue_ratio {lc}']:.3f}) "
        f"and loses most at {worst9['slow']} ({worst9[f'queue_ratio {lc}']:.3f}): once the slow keys' own arrivals "
        "approach the loader's rate (slow load near 1), every slow arrival finds a short queue, cuts, and the fast "
        "keys wait behind a stream of cutters. Its test is per key and does not count the other slow keys, which "
        "cut too; and a cut goes to the very front, ahead of keys that may have waited a whole round. "
        f"LINECUTTING-BOUNDED gains most at {best9b['slow']} slow keys (ratio {best9b[f'queue_ratio {lcb}']:.3f}) "
        f"and its lowest ratio is {worst9b[f'queue_ratio {lcb}']:.3f} (at {worst9b['slow']}): the fast keys wait "
        "a little longer than under IN-PLACE, the slow keys much less, and as no key cuts more than a round or "
        "more than its own update interval, the fast keys cannot starve. Its curve has the paper's shape (about 1 at "
        "both ends, rising with the slow keys, highest in the upper middle, dropping towards 10), peaking at "
        f"{best9b['slow']} where the paper's peaks at 8 and the fluid optimum at {best_fluid['slow']} "
        f"({best_fluid['fluid_ratio']:.3f}). At 0 and 10 slow keys every key has one rate, and the estimates' "
        "noise alone reorders keys a little, where IN-PLACE is optimal (section 5.2). The paper's own LINECUTTING "
        "may have peaked later than ours because its slow keys carried less of the load (it does not say how its "
        "load factor splits between the classes); the rule is kept as the paper states it, as `linecutting`.\n\n"
        "### 3. Figure 9's setting at other loads\n\n"
        'Queue staleness ratio IN-PLACE / policy, ten keys, slow keys 10x slower. The paper: "we repeated this '
        'experiment for other load levels as well, and obtained a similar result".\n\n'
        + md_table(
            ["load", "slow keys", "LC", "LC-B"],
            [[f"{r['load']:g}", r["slow"], f"{r[lc]:.3f}", f"{r[lcb]:.3f}"] for r in fl],
            "rrrr",
        )
        + f"\n\nBelow load 1 the queue is short, so by the paper's test nearly every key is slow and cuts, and "
        "LINECUTTING serves the newest key first: the worst ratio here is "
        f"{worst_loads[lc]:.3f} (load {worst_loads['load']:g}, {worst_loads['slow']} slow keys). "
        "LINECUTTING-BOUNDED moves a key ahead by less than the measured wait of the fast keys, short in a short "
        f"queue, so its order stays close to IN-PLACE's; its lowest ratio is {worst_loads_b[lcb]:.3f} "
        f"(load {worst_loads_b['load']:g}, {worst_loads_b['slow']} slow keys).\n\n"
        "### 4. Zipf key rates, load 5\n\nApplication staleness, mean over keys (p99 over keys in brackets).\n\n"
        + md_table(
            ["keys", "theta", *[p.upper() for p in KEYED_POLICIES]],
            [
                [r["keys"], f"{r['theta']:g}", *[f"{_f(r[p])} ({_f(r[f'{p} p99'])})" for p in KEYED_POLICIES]]
                for r in zf
            ],
            "r" * (2 + len(KEYED_POLICIES)),
        )
        + f"\n\nLINECUTTING-BOUNDED against IN-PLACE, mean over keys: {zipf_means}. It trades the fast keys' "
        "staleness for the slow keys' (the mean over keys is what it minimises), so its p99 over keys is the "
        "higher where rates are skewed; with one rate (theta 0) it stays within the estimates' noise of IN-PLACE. "
        "LINECUTTING loses most with a hundred keys at theta 0.9, where many keys pass the paper's test at once."
        + "\n\n### 5. The loader's setting: batches with a fixed cost\n\n"
        "1,000 keys, Zipf 0.9, load 0.8 (arrival rate x the cost of one key); a batch costs 50 C_t (a Spark job's "
        "fixed cost) plus 1 C_t per key and carries at most `max_keys_per_batch` keys. Application staleness "
        "(batches in brackets).\n\n"
        + md_table(
            ["max keys per batch", *[p.upper() for p in KEYED_POLICIES]],
            [
                [
                    "unlimited" if r["max_keys"] is None else r["max_keys"],
                    *[f"{_f(r[p])} ({r[f'{p} batches']:,.0f})" for p in KEYED_POLICIES],
                ]
                for r in bt
            ],
            "l" + "r" * len(KEYED_POLICIES),
        )
        + "\n\nWith no bound, or 200 keys, a batch takes every waiting key and order does not matter. With "
        f"smaller batches, IN-PLACE / LINECUTTING-BOUNDED: {batch_ratios}; IN-PLACE / LINECUTTING: "
        f"{batch_ratios_lc}. W_f is the measured wait of the fast keys, not the paper's c n: with batches n drops "
        "by a batch at each take and c (a batch's duration over its keys) is high while batches are small; with "
        "c n in W_f's place LINECUTTING-BOUNDED lost up to a fifth to IN-PLACE here over a run's first 5,000 "
        "arrivals (not shown).\n"
    )
    print(markdown)
    if not args.quick:
        write_json(
            RESULTS_DIR / "keys.json",
            {"meta": meta, "figure7": f7, "figure9": f9, "other_loads": fl, "zipf": zf, "batched": bt},
        )
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
