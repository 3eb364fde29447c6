"""Spilling pending updates: policies against the offline optimum, segment I/O against the disk, Chain mode.
A full run takes ~2-3 min, ``--quick`` ~10 s; ``--repeats``: I/O runs.

Parts: ``model`` (the policies against the offline optimum, Motwani and Thomas, SODA 2004: model.py),
``io`` (segment files against this disk's raw bandwidth: disk.py), ``chain`` (the Chain memory-pressure
mode, simulated: below). What each measures: the section's text.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.spill import report
from benchmarks.spill.disk import run_io
from benchmarks.spill.model import run_competitive
from schedulers.chain import ChainPressure
from schedulers.generators import bursty
from schedulers.registry import make_policy
from schedulers.simulator import SimulationResult, simulate
from testing.report import log

# -- part 3: what the Chain memory-pressure mode buys and costs, in simulation (bursty traces with
# heterogeneous payload sizes; templates/spill.md says how) -----------------------------------------
TRACE = {"tables": 20, "workers": 2, "overhead": 0.2}
#: (high, low) watermarks as fractions of M: the service's default, and a lower pair.
WATERMARKS = ((0.8, 0.5), (0.4, 0.2))
CAP = 300.0  # the service's default staleness cap, seconds
M_FRACTION = 0.5  # M = this fraction of MYOPIC's peak pending bytes on the trace
UTILIZATIONS = (0.5, 0.7)
SIZE_RANGE = (1 << 16, 1 << 26)


def payload_sizes(trace_tables: int, update_tables: list[int], seed: int) -> tuple[list[int], list[float]]:
    """Bytes per update: a log-uniform mean per table, drawn apart from the load costs, times a log-normal factor."""
    rng = random.Random(1000 + seed)
    low, high = SIZE_RANGE
    means = [2 ** rng.uniform(low.bit_length() - 1, high.bit_length() - 1) for _ in range(trace_tables)]
    return [max(1, int(means[t] * rng.lognormvariate(0.0, 0.5))) for t in update_tables], means


def _figures(result: SimulationResult) -> dict[str, Any]:
    out = {k: getattr(result, k) for k in ("peak_pending_bytes", "peak_memory_bytes")}
    out |= {k: getattr(result.freshness, k) for k in ("total_staleness", "staleness_ratio", "max_stretch", "batches")}
    entered = result.policy_state.get("pressure_mode", {}).get("times_entered")
    return out | {"times_entered": entered, "wall_seconds": result.wall_seconds}


def run_chain(quick: bool, seeds: int) -> dict[str, Any]:
    horizon, workers = 900.0 if quick else 3600.0, TRACE["workers"]
    cases = []
    for utilization in UTILIZATIONS:
        for seed in range(1, seeds + 1):
            trace = bursty(horizon=horizon, utilization=utilization, seed=seed, **TRACE)
            sizes, means = payload_sizes(len(trace.tables), trace.update_tables, seed)
            plain = simulate(trace, make_policy("myopic"), workers, sizes=sizes)
            budget = int(M_FRACTION * plain.peak_pending_bytes)
            runs = {"myopic": _figures(plain)}
            for high, low in WATERMARKS:
                policy = ChainPressure(make_policy("myopic"), int(high * budget), int(low * budget), CAP)
                runs[f"chain {high:g}/{low:g}"] = _figures(simulate(trace, policy, workers, sizes=sizes))
            peaks = (f"{k} peak {v['peak_pending_bytes'] / 2**20:,.0f} MiB" for k, v in runs.items())
            log(f"[chain] U={utilization} seed {seed}: {trace.n_updates:,} updates, " + ", ".join(peaks))
            busy = sum(spec.alpha for spec in trace.tables) / workers
            case = {"utilization": utilization, "seed": seed, "updates": trace.n_updates, "budget_bytes": budget}
            cases.append(case | {"alpha_utilization": busy, "table_mean_bytes": means, "runs": runs})
    out = {**TRACE, "horizon": horizon, "watermarks": [list(w) for w in WATERMARKS], "cap": CAP}
    out |= {"m_fraction": M_FRACTION, "utilizations": list(UTILIZATIONS), "size_range": list(SIZE_RANGE)}
    return out | {"seeds": seeds, "cases": cases}


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    return run.parts(
        model=lambda: run_competitive(args.quick),
        io=lambda: run_io(args.repeats, args.dir, args.io_mib),
        chain=lambda: run_chain(args.quick, args.seeds),
    )


BENCHMARK = Benchmark(
    measure,
    report.render_markdown,
    fingerprints=("schedulers",),
    quick_saves=True,
    repeats=(1, 3),
    parts=("model", "io", "chain"),
    counts={"seeds": (2, 20, "traces per load in part 3"), "io_mib": (128, 512, "MiB spilled and written raw per run")},
    options=lambda parser: parser.add_argument("--dir", type=Path, help="the disk to measure (default: /tmp)"),
    finish=lambda results: results.update(targets=report.evaluate(results)),
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
