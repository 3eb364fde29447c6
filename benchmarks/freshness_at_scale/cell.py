"""One measurement: one system under one workload, from start to read-back.

1. Start the system with the workload's tables (the loader: tables in its config file;
   the peer: one streaming query per table) and time how long it takes to be ready.
2. Prime: one update per table, then wait until the outside reader's view (the commit
   logs) holds every table's first update, so every table starts the window with data
   visible and the systems are warm.
3. Start the outside reader (its own process), then the producer (its own process) with
   the seeded Poisson schedule. The window opens ``warmup`` seconds after the first
   arrival and lasts ``duration`` seconds; CPU of the system's process group and, for
   the loader, its /metrics are taken at both ends.
4. After the last arrival, hand the reader every acknowledged update id and let it drain:
   it waits until all of them are visible (or the drain deadline), reads the committed
   files and reports rows per update id.
5. Stop the system; for a Delta table, count rows and update ids once more through
   ``deltalake`` (an independent reader of the same log).

The figures are computed by ``analyze`` from the raw records, which are kept in the
results too, so a report can be re-judged without measuring again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.freshness_at_scale import systems
from benchmarks.freshness_at_scale.variants import Variant
from benchmarks.freshness_at_scale.workload import UPDATE_ID, Arrival, Workload, priming, schedule
from testing.commit_logs import follower
from testing.report import log
from testing.service_server import group_cpu


@dataclass(frozen=True)
class Options:
    poll_interval: float
    drain_timeout: float
    ready_timeout: float
    prime_timeout: float
    starved_factor: float
    keep_dir: Path | None = None


def _events(arrivals: list[Arrival]) -> list[list[float | int]]:
    return [[a.offset, a.table, a.uid] for a in arrivals]


def _sleep_until(t: float) -> None:
    while (wait := t - time.time()) > 0:
        time.sleep(min(wait, 1.0))


def produce(
    system: systems.RunningSystem, workload: Workload, arrivals: list[Arrival], workdir: Path, tag: str, lead: float
) -> tuple[subprocess.Popen[bytes], Path, float]:
    """Start the producer process for ``arrivals``: the process, its output file and the
    schedule's start (Unix time), fixed by the producer once it is set up."""
    out, ready = workdir / f"{tag}-out.json", workdir / f"{tag}-ready.json"
    spec = {
        **system.feed,
        "tables": workload.table_names(),
        "rows": workload.rows_per_update,
        "lead": lead,
        "ready": str(ready),
        "events": _events(arrivals),
        "out": str(out),
    }
    proc = systems.spawn_module("benchmarks.freshness_at_scale.generator", spec, workdir, tag)
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            systems.stop_group(proc, grace=1.0)
            raise RuntimeError(f"the producer did not start:\n{systems.log_tail(workdir / f'{tag}.log')}")
        time.sleep(0.02)
    return proc, out, float(json.loads(ready.read_text(encoding="utf-8"))["start_at"])


def wait_primed(system: systems.RunningSystem, timeout: float) -> float:
    """Seconds until every table's log holds a commit that added data."""
    began = time.monotonic()
    logs = {name: follower(system.variant.log_kind, root, time.time) for name, root in system.roots.items()}
    waiting = set(logs)
    while waiting:
        for name in list(waiting):
            if any(commit.added for commit in logs[name].poll()):
                waiting.discard(name)
        if not waiting:
            break
        if not system.alive():
            raise RuntimeError(f"{system.variant.name} exited while priming:\n{systems.log_tail(system.log_path)}")
        if time.monotonic() - began > timeout:
            raise RuntimeError(
                f"{len(waiting)} of {len(logs)} tables had no visible first update after {timeout:.0f} s "
                f"(e.g. {sorted(waiting)[:3]})"
            )
        time.sleep(0.2)
    return time.monotonic() - began


def delta_readback(roots: dict[str, Path]) -> dict[str, Any]:
    """Rows and update ids per table through deltalake (independent of the reader's counting)."""
    from testing.tables import read_delta

    out: dict[str, Any] = {}
    for name, root in roots.items():
        column = read_delta(root).column(UPDATE_ID).to_pylist()
        counts = Counter(column)
        out[name] = {"rows": len(column), "uids": len(counts), "max_rows_per_uid": max(counts.values(), default=0)}
    return out


def run_cell(variant: Variant, workload: Workload, options: Options) -> dict[str, Any]:
    """Measure one system under one workload; raw records plus timings (see ``analyze``)."""
    names = workload.table_names()
    record: dict[str, Any] = {"variant": variant.to_json(), "workload": workload.to_json()}
    with contextlib.ExitStack() as stack:
        if options.keep_dir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fresh-")))
        else:  # kept for inspection: logs, configs, the tables themselves
            options.keep_dir.mkdir(parents=True, exist_ok=True)
            workdir = Path(tempfile.mkdtemp(prefix=f"{workload.tables}-{variant.name}-", dir=options.keep_dir))
        with systems.running_system(variant, names, workdir, options.ready_timeout) as system:
            record["ready_seconds"] = system.ready_seconds
            record["system"] = system.details
            log(f"[{workload.name}] {variant.name}: ready in {system.ready_seconds:.1f} s; priming")
            cpu_ready = group_cpu(system.pgid)
            proc, out, _ = produce(system, workload, priming(workload), workdir, "prime", lead=0.0)
            systems.wait_exit(proc, options.prime_timeout, "the priming producer", workdir / "prime.log")
            record["priming"] = json.loads(out.read_text(encoding="utf-8"))
            record["prime_seconds"] = wait_primed(system, options.prime_timeout)
            log(f"[{workload.name}] {variant.name}: primed in {record['prime_seconds']:.1f} s")

            ready_file, control = workdir / "reader-ready.json", workdir / "reader-control.json"
            reader_spec = {
                "kind": variant.log_kind,
                "tables": {name: str(root) for name, root in system.roots.items()},
                "column": UPDATE_ID,
                "interval": options.poll_interval,
                "control": str(control),
                "ready": str(ready_file),
                "out": str(workdir / "reader-out.json"),
            }
            reader = systems.spawn_module("benchmarks.freshness_at_scale.reader", reader_spec, workdir, "reader")
            producer = None
            try:
                deadline = time.monotonic() + 120
                while not ready_file.exists():
                    if reader.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the reader did not start:\n{systems.log_tail(workdir / 'reader.log')}")
                    time.sleep(0.05)
                arrivals = schedule(workload)
                producer, produced, start_at = produce(system, workload, arrivals, workdir, "produce", lead=0.5)
                w0, w1 = start_at + workload.warmup, start_at + workload.horizon
                record.update(start_at=start_at, window=[w0, w1], cpu_ready=cpu_ready)
                log(
                    f"[{workload.name}] {variant.name}: {len(arrivals)} updates over {workload.horizon:.0f} s "
                    f"(window {workload.duration:.0f} s after {workload.warmup:.0f} s)"
                )
                _sleep_until(w0)
                record["cpu_w0"], record["metrics_w0"] = group_cpu(system.pgid), _scrape(system)
                _sleep_until(w1)
                record["cpu_w1"], record["metrics_w1"] = group_cpu(system.pgid), _scrape(system)
                systems.wait_exit(producer, workload.horizon + 600, "the producer", workdir / "produce.log")
                record["produced"] = json.loads(produced.read_text(encoding="utf-8"))
                expected: dict[str, list[int]] = {name: [] for name in names}
                for source in (record["priming"], record["produced"]):
                    for uid, table, _, arrival, *_ in source["records"]:
                        if arrival is not None:
                            expected[names[table]].append(uid)
                tmp_control = control.with_name(control.name + ".tmp")
                tmp_control.write_text(
                    json.dumps({"expected": expected, "deadline": time.time() + options.drain_timeout}),
                    encoding="utf-8",
                )
                os.replace(tmp_control, control)
                log(f"[{workload.name}] {variant.name}: last arrival sent; draining")
                systems.wait_exit(reader, options.drain_timeout + 900, "the reader", workdir / "reader.log")
                record["reader"] = json.loads((workdir / "reader-out.json").read_text(encoding="utf-8"))
                record["cpu_end"] = group_cpu(system.pgid)
                record["alive_at_end"] = system.alive()
            finally:
                for helper in (producer, reader):
                    if helper is not None:
                        systems.stop_group(helper, grace=5.0)
        record["peer_status"] = system.peer_status()
        if variant.log_kind == "delta":
            record["deltalake_readback"] = delta_readback(system.roots)
    return record


def _scrape(system: systems.RunningSystem) -> dict[str, float] | None:
    try:
        return system.scrape()
    except Exception as exc:  # noqa: BLE001 - a failed scrape is reported, not fatal
        log(f"scrape of {system.variant.name} failed: {exc!r}")
        return None
