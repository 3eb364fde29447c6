"""Spilling pending updates: policies against the offline optimum, segment I/O against the disk, Chain mode.

    python -m benchmarks.spill                # ~2-3 min; rewrites the spill section of BENCHMARKS.md
    python -m benchmarks.spill --quick        # ~10 s smoke run, prints only
    python -m benchmarks.spill --repeats 5    # I/O runs (default 3; quick 1)
    python -m benchmarks.spill --rerender     # re-judge saved results, rewrite the report

Parts: ``model`` (the policies against the offline optimum, Motwani and Thomas, SODA 2004),
``io`` (segment files against this disk's raw bandwidth), ``chain`` (the Chain memory-pressure
mode, simulated). What each measures: its module's docstring and the section's text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.spill import report
from benchmarks.spill.chain import run_chain
from benchmarks.spill.disk import run_io
from benchmarks.spill.model import run_competitive
from testing.report import log


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    return run.parts(
        model=lambda: run_competitive(args.quick, log),
        io=lambda: run_io(args.repeats, args.dir, log, args.io_mib),
        chain=lambda: run_chain(args.quick, args.seeds, log),
    )


BENCHMARK = Benchmark(
    "benchmarks.spill",
    "spill",
    __doc__,
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
