"""The property-based tests at depth: every test that draws its examples through
``testing.depth.examples``, at ``--depth`` times the suite's count (10 by default).

    .venv/bin/python -m trials.properties              # ten times the suite's examples
    .venv/bin/python -m trials.properties --depth 30   # deeper
    .venv/bin/python -m trials.properties -- -k spill  # extra arguments go to pytest

The suite draws few enough examples to stay within its time (docs/testing.md); this runs the
same tests, on the same seeds (the ``repro`` profile derandomizes), over more of each
property's input space. ``HYPOTHESIS_PROFILE=explore`` draws new examples on each run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "from testing.depth import examples"


def property_test_files() -> list[str]:
    """The test modules whose counts follow the depth, found by their import of it."""
    return sorted(
        str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py") if MARKER in path.read_text()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=10, help="times the suite's example counts (default 10)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    if args.depth < 1:
        parser.error("--depth must be 1 or more")
    files = property_test_files()
    print(f"[properties] {len(files)} test modules at {args.depth} times the suite's examples", flush=True)
    env = {**os.environ, "TESTS_DEPTH": str(args.depth)}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", *files, *args.pytest_args]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
