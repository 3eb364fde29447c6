"""The benchmarks as a whole: BENCHMARKS.md's sections rendered again from saved results, or listed.

python -m benchmarks render [SECTION ...]   # each from benchmarks/results/<stem>.json (unchanged: same text)
python -m benchmarks list                   # every benchmark: its section, results file and --help
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from benchmarks.harness import results
from benchmarks.harness.cli import Benchmark
from benchmarks.harness.markdown import publish
from testing.report import BENCHMARKS_MD, RESULTS_DIR

#: Every benchmark, in the order of its section in BENCHMARKS.md.
MODULES = (
    "scheduling.__main__ service.__main__ load_contention fair_pools wal spill.__main__ control_plane.__main__ "
    "freshness_at_scale.__main__ job_groups load_cost.__main__ isolation.__main__ keys upsert_cost latest_vs_append "
    "keyed_tables join_views view_freshness view_adaptivity view_tuning view_engines producer schema_change "
    "nested_intake simulate_cli intake_speed acceptors live_freshness aged_tables upsert_dv"
).split()


def benchmarks() -> list[Benchmark]:
    return [importlib.import_module(f"benchmarks.{name}").BENCHMARK for name in MODULES]


def render(markdown: Path = BENCHMARKS_MD, directory: Path = RESULTS_DIR, only: set[str] | None = None) -> Path:
    """Each section (of ``only``) from its last full run; one without a results file is left as it is."""
    sections = {}
    for bench in (b for b in benchmarks() if not only or b.section in only):
        saved = directory / results.path(bench.stem).name
        if saved.exists():
            sections[bench.section] = bench.render(results.load(saved))
        else:
            print(f"{bench.section}: no results in {saved}; the section is left as it is", file=sys.stderr)
    return publish(sections, markdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", choices=["render", "list"])
    parser.add_argument("sections", nargs="*", help="only these sections (default: all)")
    parser.add_argument("--markdown", type=Path, default=BENCHMARKS_MD, help="the file to rewrite")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="the directory of saved results")
    args = parser.parse_args(argv)
    if args.command == "list":
        for bench in benchmarks():
            print(f"## {bench.section}: python -m {bench.module}, results {results.path(bench.stem)}\n")
            print(bench.parser().format_help())
        return 0
    if unknown := set(args.sections) - {bench.section for bench in benchmarks()}:
        parser.error(f"unknown sections {sorted(unknown)}")
    print(render(args.markdown, args.results, set(args.sections) or None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
