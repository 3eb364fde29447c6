"""``loader simulate --schedule-out`` end to end on the 1,000,000-update trace (issue 36).

The scheduling benchmark's big trace (quasiperiodic, 1,000 tables, 8 workers, seed 1) as a trace
file; the command as a user runs it, with the schedule written and without, runs interleaved;
then in this process the same schedule written by ``write_schedule`` and by the json.dumps line
per batch it replaced, checked byte for byte. templates/simulate-cli.md says the rest.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from benchmarks.harness.cli import Benchmark, Run
from benchmarks.harness.markdown import Template
from benchmarks.scheduling.__main__ import BIG, build_big_trace
from benchmarks.scheduling.report import BIG_UPDATES
from schedulers.model import BatchRecord
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.traces import write_schedule, write_trace
from testing.report import log, machine_markdown

ROOT = Path(__file__).resolve().parents[1]
T = Template("simulate-cli")
TARGET_SECONDS = 10.0
#: The command's cases: label -> whether it writes the schedule.
CASES = {"schedule written": True, "no schedule": False}
BEFORE = "before, schedule written"


def json_dumps_lines(batches: Iterable[BatchRecord], out: IO[str]) -> None:
    """The writer before issue 36, kept to measure against."""
    for batch in batches:
        out.write(json.dumps(batch.as_dict()) + "\n")


NEW, OLD = "write_schedule (Arrow)", "json.dumps per line (before)"
WRITERS: dict[str, Callable[[Iterable[BatchRecord], IO[str]], None]] = {NEW: write_schedule, OLD: json_dumps_lines}


def run_command(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of the command."""
    before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=cwd)
    wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def measure(run: Run) -> dict[str, Any]:
    trace, horizon, _ = build_big_trace(BIG_UPDATES // 10 if run.args.quick else BIG_UPDATES)
    out: dict[str, Any] = {"updates": trace.n_updates, "horizon": horizon, "tables": BIG["tables"]}
    out |= {"workers": BIG["workers"], "seed": BIG["seed"], "target_seconds": TARGET_SECONDS}
    old: Path | None = run.args.before
    cases = [(case, written, ROOT) for case, written in CASES.items()] + ([(BEFORE, True, old)] if old else [])
    cli: dict[str, dict[str, list[float]]] = {case: {"seconds": [], "cpu_seconds": []} for case, _, _ in cases}
    writers: dict[str, list[float]] = {name: [] for name in WRITERS}
    with tempfile.TemporaryDirectory() as directory:
        path, schedule = Path(directory) / "trace.jsonl", Path(directory) / "schedule.jsonl"
        write_trace(trace, path)
        command = [sys.executable, "-m", "cli", "simulate", "--trace", str(path), "--policy", "myopic"]
        command += ["--workers", str(BIG["workers"]), "--json"]
        for repeat in range(run.args.repeats):
            for case, written, tree in cases:
                log(f"loader simulate, {case}, run {repeat + 1}/{run.args.repeats}")
                wall, cpu = run_command(command + (["--schedule-out", str(schedule)] if written else []), tree)
                cli[case]["seconds"].append(wall)
                cli[case]["cpu_seconds"].append(cpu)
        out["batches"] = sum(1 for _ in schedule.open(encoding="utf-8"))
        batches = simulate(trace, make_policy("myopic"), BIG["workers"], record_schedule=True).schedule or []
        texts = {}
        for repeat in range(run.args.repeats):
            for name, writer in WRITERS.items():
                log(f"{name}, run {repeat + 1}/{run.args.repeats}")
                gc.collect()
                with schedule.open("w", encoding="utf-8") as handle:
                    began = time.perf_counter()
                    writer(batches, handle)
                    writers[name].append(time.perf_counter() - began)
                texts[name] = hashlib.sha256(schedule.read_bytes()).hexdigest()
        out["same_bytes"] = len(set(texts.values())) == 1
        out["schedule_bytes"] = schedule.stat().st_size
    before = {"commit": _commit(old), **cli.pop(BEFORE)} if old else None
    return out | {"cli": cli, "writers": writers, "before": before}


def _commit(tree: Path) -> str:
    """A checkout's commit; an export (``git archive``) is named after its commit."""
    if not (tree / ".git").exists():
        return tree.name
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or tree.name


def render(saved: dict[str, Any]) -> str:
    cli, writers, median = saved["cli"], saved["writers"], statistics.median
    runs = len(cli["schedule written"]["seconds"])
    written = median(cli["schedule written"]["seconds"])
    ok = written < saved["target_seconds"] if saved["updates"] >= BIG_UPDATES else None
    target_row = {"updates": saved["updates"], "tables": saved["tables"], "workers": saved["workers"]}
    target_row |= {"seconds": written, "runs": runs, "goal": saved["target_seconds"], "ok": ok}
    cli_rows = [
        (case, median(c["seconds"]), ", ".join(f"{s:.2f}" for s in c["seconds"]), median(c["cpu_seconds"]))
        for case, c in cli.items()
    ]
    writer_rows = [
        (name, median(seconds), ", ".join(f"{s:.2f}" for s in seconds), saved["batches"] / median(seconds) / 1e6)
        for name, seconds in writers.items()
    ]
    values = {key: saved[key] for key in ("updates", "tables", "workers", "seed", "batches", "horizon")}
    values |= {"megabytes": saved["schedule_bytes"] / 1e6, "same": "yes" if saved["same_bytes"] else "**no**"}
    rest = median(cli["no schedule"]["seconds"])
    values |= {"share": written - rest, "runs": runs, "rest": rest, "room": saved["target_seconds"] - rest}
    values |= {"goal": saved["target_seconds"], "speedup": median(writers[OLD]) / median(writers[NEW])}
    tables = {
        "target_table": T.table("target", [target_row], "lllc"),
        "cli_table": T.table("cli", cli_rows, "lrlr"),
        "writers_table": T.table("writers", writer_rows, "lrlr"),
    }
    before = saved.get("before")
    if before is not None:
        old = {"seconds": median(before["seconds"]), "runs": len(before["seconds"]), "commit": before["commit"]}
        old |= {"runs_text": ", ".join(f"{s:.2f}" for s in before["seconds"]), "cpu": median(before["cpu_seconds"])}
        values["before"] = T.line("before", **old)
    else:
        values["before"] = ""
    return T("section", machine=machine_markdown(saved["meta"]), **values, **tables)


def options(parser: argparse.ArgumentParser) -> None:
    what = "a checkout of the code to compare with, or an export in a directory named after its commit"
    parser.add_argument("--before", type=Path, help=f"{what}: its runs alternate with the others")


BENCHMARK = Benchmark(measure, render, package="schedulers", repeats=(1, 3), options=options)

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
