"""The benchmarks' renderer is faithful: every section of BENCHMARKS.md, emptied in a copy and
rendered again from ``benchmarks/results/`` (``python -m benchmarks render``), comes out as
committed; and every benchmark answers ``--help``.

Through ``python -m`` in a subprocess: tests and benchmarks share ``testing/`` only.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = re.compile(r"(<!-- ([a-z-]+):begin -->\n).*?(\n<!-- \2:end -->)", re.S)


def benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_render_reproduces_every_section(tmp_path: Path) -> None:
    committed = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    sections = MARKERS.findall(committed)
    assert len(sections) >= 20
    emptied = tmp_path / "BENCHMARKS.md"
    emptied.write_text(MARKERS.sub(r"\1(to be rendered)\3", committed), encoding="utf-8")
    done = benchmarks("render", "--markdown", str(emptied))
    assert done.returncode == 0, done.stderr
    assert "no results" not in done.stderr, done.stderr
    assert emptied.read_text(encoding="utf-8") == committed


def test_every_benchmark_answers_help() -> None:
    done = benchmarks("list")
    assert done.returncode == 0, done.stderr
    modules = re.findall(r"^usage: python -m (benchmarks\.\w+)", done.stdout, re.M)
    assert len(modules) == len(set(modules)) >= 20, modules
    assert "--quick" in done.stdout and "--render" in done.stdout


def test_rejudged_sections_are_unchanged(tmp_path: Path) -> None:
    """Verdicts and notes are derived on ``--render`` (``finish=``) from the templates: judged
    again from the saved raw figures, each section comes out as committed."""
    committed = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    for module, section, stem in (
        ("spill", "spill", "spill"),
        ("service", "service", "service"),
        ("scheduling", "scheduling", "scheduling"),
        ("freshness_at_scale", "freshness-at-scale", "freshness_at_scale"),
        ("load_cost", "load-cost", "load_cost"),
    ):
        saved, markdown = tmp_path / f"{stem}.json", tmp_path / f"{stem}.md"
        saved.write_bytes((ROOT / "benchmarks" / "results" / f"{stem}.json").read_bytes())
        markdown.write_text(committed, encoding="utf-8")
        command = [sys.executable, "-m", f"benchmarks.{module}", "--render", "--json", str(saved)]
        done = subprocess.run(
            [*command, "--markdown", str(markdown)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        assert markdown.read_text(encoding="utf-8") == committed, section
