"""RELIABILITY.md: each reliability trial script rewrites its own section of it.

The trials (crash consistency, API fuzzing, hostile input, access control, overload,
disk faults, Spark failures) report what they ran and what they found: trials,
requests, lost, duplicated, 5xx. Each owns one ``<!-- NAME:begin/end -->`` block, as
the benchmark scripts do in BENCHMARKS.md (testing/report.py).
"""

from __future__ import annotations

from pathlib import Path

from testing.report import REPO_ROOT, write_section

RELIABILITY_MD = REPO_ROOT / "RELIABILITY.md"
#: Where each trial keeps its results (JSON), beside the section it renders from them.
RESULTS_DIR = REPO_ROOT / "trials" / "results"


def write_reliability(name: str, body: str) -> Path:
    """Rewrite section ``name`` of RELIABILITY.md (the file and its header must exist)."""
    return write_section(name, body, RELIABILITY_MD)
