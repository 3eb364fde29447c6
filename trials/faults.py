"""Disk-fault and Spark-failure trials, with figures for RELIABILITY.md.

    .venv/bin/python -m trials.faults [--repeats N] [--only disk|spark]

Runs the scenarios of tests/system/test_disk_faults.py (a real full tmpfs under the WAL and the
spill directory, a read-only spill directory, EROFS injected into the WAL) and of
tests/loader/loading/test_spark_failures.py (a Spark job cancelled mid-run; a data file corrupted after
intake, quarantined and retried) ``--repeats`` times each, and rewrites the sections
``disk-faults`` and ``spark-failures``. Every scenario asserts its promises as it runs (no
loss, no duplicate, 503 with Retry-After while closed, /readyz naming the fault, intake
reopening by itself); a failed assertion is a MISS row with its message.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testing.report import (
    command_line,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    median,
    print_table,
)
from trials.reliability import write_reliability


def _run(name: str, scenario: Callable[[Path], dict[str, Any]], repeats: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    misses: list[str] = []
    for k in range(repeats):
        log(f"{name}: run {k + 1}/{repeats}")
        with tempfile.TemporaryDirectory(prefix="fault-trial-") as tmp:
            try:
                runs.append(scenario(Path(tmp)))
            except pytest.skip.Exception as exc:
                return {"name": name, "skipped": str(exc)}
            except BaseException as exc:  # noqa: BLE001 - a failed promise is a MISS row
                misses.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
                traceback.print_exc()
    return {"name": name, "runs": runs, "misses": misses, "repeats": repeats}


def _summary_rows(results: list[dict[str, Any]], timing: str) -> list[list[Any]]:
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append([r["name"], "–", "–", "–", "–", "–", "–", f"skipped: {r['skipped']}"])
            continue
        runs = r["runs"]
        total = {key: sum(run.get(key, 0) for run in runs) for key in ("acknowledged", "refused", "lost", "duplicated")}
        times = [run[timing] for run in runs if timing in run]
        rows.append(
            [
                r["name"],
                f"{len(runs)}/{r['repeats']}",
                total["acknowledged"] or sum(run.get("rows", 0) for run in runs),
                total["refused"],
                total["lost"],
                total["duplicated"],
                f"{median(times):.2f}" if times else "–",
                "PASS" if not r["misses"] and total["lost"] == 0 and total["duplicated"] == 0 else "MISS",
            ]
        )
    return rows


def _spark_row(r: dict[str, Any]) -> list[Any]:
    runs = r["runs"]
    total = {
        key: sum(run[key] for run in runs) for key in ("rows", "failed attempts", "quarantined", "lost", "duplicated")
    }
    times = [run.get("landed after (s)", run.get("quarantined after (s)")) for run in runs]
    ok = not r["misses"] and total["lost"] == 0 and total["duplicated"] == 0
    return [
        r["name"],
        f"{len(runs)}/{r['repeats']}",
        *total.values(),
        f"{median(times):.2f}" if times else "–",
        "PASS" if ok else "MISS",
    ]


def disk_faults(repeats: int) -> list[dict[str, Any]]:
    from testing import disk_faults as t

    def wal_read_only(tmp: Path) -> dict[str, Any]:
        with pytest.MonkeyPatch.context() as mp:
            return t.wal_read_only(tmp, mp)

    scenarios: list[tuple[str, Callable[[Path], dict[str, Any]]]] = [
        ("WAL disk full (tmpfs 2 MiB)", t.wal_full),
        ("WAL read-only (EROFS injected)", wal_read_only),
        ("spill disk full (tmpfs 4 MiB)", lambda tmp: t.spill_fault(tmp, "full")),
        ("spill disk read-only (remount,ro)", lambda tmp: t.spill_fault(tmp, "read-only")),
    ]
    return [_run(name, scenario, repeats) for name, scenario in scenarios]


def spark_failures(repeats: int) -> list[dict[str, Any]]:
    from loader.loading.sinks import make_sink
    from loader.loading.spark import build_spark_session
    from testing import spark_failures as t
    from testing.service_harness import Harness

    spark = build_spark_session(master="local[2]", app_name="fault-trials", fair_pools=2)

    def live(scenario: Callable[[Harness], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
        def run(tmp: Path) -> dict[str, Any]:
            def sink(settings: Any) -> t.JobKiller:
                return t.JobKiller(make_sink("delta-rs", settings.warehouse_path, spark), spark)

            with Harness(tmp / "data", sink=sink, **t.RETRY) as h:
                return scenario(h)

        return run

    try:
        return [
            _run("Spark job cancelled mid-run", live(t.killed_job), repeats),
            _run("data file corrupted after intake", live(t.bad_file), repeats),
        ]
    finally:
        spark.stop()


def _section(
    title: str,
    intro: str,
    headers: list[str],
    rows: list[list[Any]],
    results: list[dict[str, Any]],
    command: str,
    meta: dict[str, Any],
    seconds: float,
) -> str:
    misses = [f"- {r['name']}: {m}" for r in results for m in r.get("misses", [])]
    return "\n\n".join(
        [
            f"## {title} (`trials/faults.py`)",
            intro,
            machine_markdown(
                {
                    "machine": meta,
                    "command": command,
                    "quick": False,
                    "run_seconds": seconds,
                    "loadavg_end": load_average(),
                },
                "loader",
            ).rstrip("\n"),
            md_table(headers, rows),
            "Misses:\n" + "\n".join(misses) if misses else "Misses: none.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["disk", "spark"])
    args = parser.parse_args(argv)
    command = command_line("trials.faults", argv)
    meta = machine_info("loader")
    ok = True
    if args.only in (None, "disk"):
        began = time.monotonic()
        results = disk_faults(args.repeats)
        headers = [
            "fault",
            "runs",
            "acknowledged updates",
            "refused (503)",
            "lost",
            "duplicated",
            "reopened after (s, median)",
            "result",
        ]
        rows = _summary_rows(results, "resumed_after_s")
        print_table("Disk faults", headers, rows)
        ok &= all(row[-1] != "MISS" for row in rows)
        write_reliability(
            "disk-faults",
            _section(
                "Disk faults",
                "The WAL's or the spill directory's disk fills up or turns read-only mid-run. Promise: "
                "intake answers 503 with Retry-After (the WAL: at once; the spill disk: once memory is full), /readyz "
                "names the fault (503 for the WAL, 200 with `faults.spill` for the spill disk), what was acknowledged "
                "still loads, and intake reopens by itself within about a second of the disk taking writes again; a "
                "restart afterwards replays cleanly. Suite: `tests/system/test_disk_faults.py`.",
                headers,
                rows,
                results,
                command,
                meta,
                time.monotonic() - began,
            ),
        )
    if args.only in (None, "spark"):
        began = time.monotonic()
        results = spark_failures(args.repeats)
        headers = [
            "failure",
            "runs",
            "rows",
            "failed attempts",
            "quarantined",
            "lost",
            "duplicated",
            "median seconds",
            "result",
        ]
        rows = [_spark_row(r) for r in results]
        print_table("Spark failures", headers, rows)
        ok &= all(row[-1] != "MISS" for row in rows)
        write_reliability(
            "spark-failures",
            _section(
                "Spark failures",
                "A load job fails. Promise: a job killed mid-run (SparkContext.cancelAllJobs while "
                "it writes) is retried with exponential back-off and lands once ('median seconds': submit to "
                "loaded); a batch whose data file was corrupted after intake fails `loading.max_attempts` (3 here) "
                "times, is quarantined with its error in `GET /v1/admin/quarantine` and the metrics while the other "
                "table and the table's later updates load ('median seconds': resume to quarantined), and after the "
                "operator restores the file a retry loads it exactly once. Suite: "
                "`tests/loader/loading/test_spark_failures.py`, `tests/loader/durability/test_quarantine.py`.",
                headers,
                rows,
                results,
                command,
                meta,
                time.monotonic() - began,
            ),
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
