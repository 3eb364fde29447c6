"""Helpers shared by the benchmark scripts: machine description, timing, status words,
markdown and console tables, BENCHMARKS.md sections, JSON output.

Each benchmark script owns one section of BENCHMARKS.md, delimited by
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``, and rewrites only that block, so
several scripts can write their sections into one file independently. Besides the
standard library only ``rich`` (a project dependency) is used, for the console tables.
"""

from __future__ import annotations

import datetime as _dt
import gc
import hashlib
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = REPO_ROOT / "BENCHMARKS.md"
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"

MD_HEADER = (
    "# Benchmarks\n\n"
    "Each section below is written by its benchmark script (named in the section); "
    "edit the scripts, not the figures.\n"
)


# -- console ------------------------------------------------------------------------
def log(message: str) -> None:
    """Progress goes to stderr so stdout carries only the result tables."""
    print(message, file=sys.stderr, flush=True)


#: Cells right-aligned in console tables: figures, and the words a figure column may hold.
_NUMERIC = re.compile(r"^([-+0-9.,e%x() ]+|inf|nan|–|n/a|PASS|MISS)$")


def print_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table on stdout; PASS / MISS cells are coloured so misses stand out."""
    cells = [[str(cell) for cell in row] for row in rows]
    table = Table(title=title, title_justify="left", header_style="bold")
    for i, header in enumerate(headers):
        numeric = i > 0 and all(_NUMERIC.match(row[i]) for row in cells if i < len(row))
        table.add_column(str(header), justify="right" if numeric else "left", overflow="fold", no_wrap=i == 0)
    colours = {"PASS": "[green]PASS[/]", "MISS": "[bold red]MISS[/]"}
    for row in cells:
        # escape: cells such as period ranges "[1, 2]" are not rich markup.
        table.add_row(*(colours.get(cell, escape(cell)) for cell in row))
    # Piped or redirected output gets rich's 80 columns by default, too narrow for these tables.
    Console(width=None if sys.stdout.isatty() else 240).print(table)


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """The command as typed, for the report (interpreter path relative to the repo if inside)."""
    args = sys.argv[1:] if argv is None else list(argv)
    exe = sys.executable
    python = os.path.relpath(exe, REPO_ROOT) if exe.startswith(str(REPO_ROOT) + os.sep) else "python"
    return " ".join([shlex.quote(python), "-m", module, *map(shlex.quote, args)])


# -- timing -------------------------------------------------------------------------
def timed(run: Callable[[], T]) -> tuple[T, float]:
    """(result, wall seconds) of one call; see ``timed_with_cpu``."""
    result, wall, _ = timed_with_cpu(run)
    return result, wall


def timed_with_cpu(run: Callable[[], T]) -> tuple[T, float, float]:
    """(result, wall s, CPU s of this process), after ``gc.collect()`` so old garbage is not
    billed to the call. CPU time barely moves when other processes compete for the cores,
    so it shows how much of the wall time was spent waiting for one."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    result = run()
    return result, time.perf_counter() - t0, time.process_time() - c0


def load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages (None where the OS has none)."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


class LoadMonitor:
    """Samples the 1-minute load average in a background thread; ``peak`` is the highest seen.

    Start and end samples alone miss another job that ran mid-benchmark; one wake-up every
    few seconds costs nothing measurable.
    """

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self.peak: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-monitor", daemon=True)

    def _sample(self) -> None:
        load = load_average()
        if load is not None:
            self.peak = load[0] if self.peak is None else max(self.peak, load[0])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> LoadMonitor:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def run_meta(
    module: str,
    argv: Sequence[str] | None,
    machine: dict[str, Any],
    began: float,
    load: LoadMonitor,
    *,
    quick: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """The ``meta`` block of a results file: command, wall time since ``began``
    (``time.perf_counter``), machine and load while it ran."""
    return {
        "command": command_line(module, argv),
        "quick": quick,
        "run_seconds": time.perf_counter() - began,
        "machine": machine,
        "loadavg_end": load_average(),
        "loadavg_peak": load.peak,
        **extra,
    }


def status(ok: bool | None) -> str:
    """The word every benchmark uses for a target: PASS, MISS, or n/a when not measured."""
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def fmt_duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


# -- machine ------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def source_fingerprint(package: str = "schedulers") -> str:
    """sha256 (12 hex digits) over the package's .py files: which code was measured."""
    digest = hashlib.sha256()
    for path in sorted((REPO_ROOT / package).rglob("*.py")):
        digest.update(str(path.relative_to(REPO_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def machine_info(package: str = "schedulers") -> dict[str, Any]:
    """Where and on what code the figures were measured (kept in the JSON, shown in the report)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    dirty = _git("status", "--porcelain", "--", package)
    return {
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "loadavg_start": load_average(),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        f"{package}_modified_vs_commit": bool(dirty) if dirty is not None else None,
        f"{package}_sha256": source_fingerprint(package),
    }


def machine_markdown(meta: dict[str, Any], package: str = "schedulers") -> str:
    """The provenance lines every section starts with: command, machine, date, code, load."""
    machine = meta["machine"]
    load_start = machine.get("loadavg_start")
    load_end = meta.get("loadavg_end")
    load = ""
    if load_start:
        load = f"; load average (1 min) {load_start[0]:.2f} at start" + (
            f", {load_end[0]:.2f} at end" if load_end else ""
        )
        if meta.get("loadavg_peak") is not None:
            load += f", {meta['loadavg_peak']:.2f} at most"
    changed = "" if meta.get(f"{package}_unchanged_during_run", True) else f" (**{package}/ changed during the run**)"
    return (
        f"Command: `{meta['command']}` ({'quick smoke run' if meta['quick'] else 'full run'}, "
        f"{fmt_duration(meta['run_seconds'])}).  \n"
        f"Machine: {machine['cpu_model']}, {machine['nproc']} usable cores (of "
        f"{machine['cpu_count']}); "
        f"{machine['python']}; {machine['platform']}{load}.  \n"
        f"Date: {machine['date_utc']}.  \n"
        f"Code: git {machine['git_commit']}"
        + (f" + uncommitted changes in {package}/" if machine.get(f"{package}_modified_vs_commit") else "")
        + f"; {package}/*.py sha256 {machine[f'{package}_sha256']}{changed}.\n"
    )


# -- statistics ---------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    """Median, NaN for no values (a skipped measurement must not crash the report)."""
    return statistics.median(values) if values else float("nan")


# -- markdown -----------------------------------------------------------------------
def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub markdown table; ``align`` is one char per column: l, r or c (default: l then r)."""
    headers = [str(h) for h in headers]
    if align is None:
        align = "l" + "r" * (len(headers) - 1)
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(marks[a] for a in align) + " |",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    return "\n".join(lines)


def fmt_num(value: float, digits: int = 4) -> str:
    """Significant-digit formatting that stays readable for 1.04 as for 3.2e6."""
    if value is None:
        return "–"
    if isinstance(value, float) and (value != value):  # NaN
        return "nan"
    if value == float("inf"):
        return "inf"
    if abs(value) >= 1e6:
        return f"{value:.{digits - 1}e}"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def replace_section(text: str, name: str, body: str) -> str:
    """Put ``body`` between the markers of section ``name`` (appending the block if absent)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    start = text.find(begin)
    if start >= 0:
        stop = text.find(end, start)
        if stop < 0:
            raise ValueError(f"{begin} has no matching {end}; fix the file by hand")
        return text[:start] + block + text[stop + len(end) :]
    if not text.strip():
        text = MD_HEADER
    return text.rstrip("\n") + "\n\n" + block + "\n"


def write_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> Path:
    """Rewrite only section ``name`` of ``path``, creating the file with its header if absent."""
    text = path.read_text(encoding="utf-8") if path.exists() else MD_HEADER
    updated = replace_section(text, name, body)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(updated, encoding="utf-8")
    os.replace(tmp, path)
    return path


def json_safe(value: Any) -> Any:
    """Strict-JSON copy: inf and nan become the strings "inf" / "nan", tuples and sets lists."""
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    return value


def write_json(path: Path, payload: Any) -> Path:
    """Strict JSON, written atomically (a crashed run never leaves half a results file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(json_safe(payload), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
