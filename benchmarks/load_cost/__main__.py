"""The fixed cost of one small load, where it goes, and what each lean change saves. A full run takes
~25 min on 2 cores; ``--quick`` ~4 min (writes load_cost-quick.json only).

Loads run in worker processes (``benchmarks.load_cost.worker``) so each JVM goes away with its
process. Parts: ``changes`` (each lean change alone, the default set, without and with each
change, in rotating order; the target comes from here), ``local`` (where a load's time goes,
on ``local[2]``).
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.load_cost import report
from loader.loading.spark import ALL_LEAN, DEFAULT_LEAN, LEAN_CHANGES
from testing.report import load_average, log
from testing.service_server import run_child

WORKER = "benchmarks.load_cost.worker"
ROWS_PER_UPDATE = 100
SIZES = (1, 10, 100)  # updates per batch


def change_variants() -> dict[str, list[str]]:
    """Baseline; each change alone; the default set; the default set without each of its
    changes, and with each change it leaves out."""
    default = sorted(DEFAULT_LEAN)
    variants: dict[str, list[str]] = {"baseline": []}
    variants |= {f"only-{name}": [name] for name in sorted(ALL_LEAN)}
    variants["default"] = default
    variants |= {f"default-without-{name}": [c for c in default if c != name] for name in default}
    variants |= {f"default-with-{name}": sorted([*default, name]) for name in sorted(ALL_LEAN - DEFAULT_LEAN)}
    return variants


def run_changes(args: argparse.Namespace) -> dict[str, Any]:
    spec = _spec("changes", [1], args.change_warmup, args.change_rounds, change_variants())
    runs = []
    for k in range(args.change_runs):
        log(f"[changes] run {k + 1}/{args.change_runs}: {args.change_warmup} warm-up + {args.change_rounds} rounds")
        load = load_average()
        runs.append(run_child(WORKER, spec, timeout=3600) | {"loadavg": [load, load_average()]})
    return {"spec": spec, "runs": runs}


def run_breakdown(args: argparse.Namespace) -> dict[str, Any]:
    variants = {"baseline": [], "default": sorted(DEFAULT_LEAN)}
    spec = _spec("breakdown", list(SIZES), args.breakdown_warmup, args.breakdown_loads, variants)
    spec["event_log"] = True
    log(f"[breakdown] {args.breakdown_warmup} warm-up rounds, {args.breakdown_loads} loads per block")
    load = load_average()
    return {"spec": spec, "result": run_child(WORKER, spec, timeout=3600), "loadavg": [load, load_average()]}


def _spec(mode: str, sizes: list[int], warmup: int, runs: int, variants: dict[str, list[str]]) -> dict:
    """A worker's spec (``benchmarks.load_cost.worker``), on ``local[2]``."""
    spec = {"mode": mode, "master": "local[2]", "rows_per_update": ROWS_PER_UPDATE, "sizes": sizes}
    return spec | {"warmup": warmup, "runs": runs, "variants": variants}


#: Flags of the parts: name -> quick and full default, help.
COUNTS = {
    "change_runs": (1, 3, "changes part: runs, each a fresh JVM"),
    "change_rounds": (4, 30, "measured rounds per run"),
    "change_warmup": (3, 40, "warm-up rounds per run"),
    "breakdown_loads": (3, 20, "loads per breakdown block"),
    "breakdown_warmup": (2, 60, "breakdown warm-up rounds"),
}


def _compact(value: Any) -> Any:
    """Seconds to the microsecond (the report shows tenths of milliseconds), and without each load's
    wall-clock marks (used only to find its Spark job in the event log): the JSON smaller."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if k != "marks"}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def judge(results: dict[str, Any]) -> None:
    results.update(_compact(results))
    results["summary"] = report.summarize(results)


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    for name in COUNTS:
        if getattr(args, name) < (0 if name.endswith("warmup") else 1):
            raise SystemExit(f"--{name.replace('_', '-')} is too small")
    # What each change was when measured (the report shows this, not the code of a later day).
    changes = {
        name: {"why": c.why, "default": c.default, "conf": dict(c.conf), "write_options": dict(c.write_options)}
        for name, c in LEAN_CHANGES.items()
    }
    run.meta.update(rows_per_update=ROWS_PER_UPDATE, lean_changes=changes)
    return run.parts(changes=lambda: run_changes(args), local=lambda: run_breakdown(args))


BENCHMARK = Benchmark(
    measure, report.render_markdown, quick_saves=True, parts=("changes", "local"), counts=COUNTS, finish=judge
)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
