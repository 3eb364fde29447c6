"""One measurement: one system under one workload, from start to read-back.

Start the system (ready time); prime one update per table and wait until every table's
commit log shows it (systems warm, data visible); start the outside reader, then the
producer with the seeded schedule; take CPU (and the loader's /metrics) at the window's
ends; hand the reader every acknowledged update id to drain; stop the system and, for
Delta, count rows and update ids once more through ``deltalake``. ``analyze`` computes the
figures from the raw records (``--raw`` keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.freshness_at_scale import systems
from benchmarks.freshness_at_scale.systems import read_json
from benchmarks.freshness_at_scale.variants import Variant
from benchmarks.freshness_at_scale.workload import UPDATE_ID, Workload, priming, schedule
from benchmarks.harness import child
from testing.commit_logs import follower
from testing.report import log
from testing.service_server import group_cpu


def _sleep_until(t: float) -> None:
    while (wait := t - time.time()) > 0:
        time.sleep(min(wait, 1.0))


def produce(
    system: systems.RunningSystem, workload: Workload, events: list[list[Any]], workdir: Path, tag: str, lead: float
) -> tuple[subprocess.Popen[bytes], Path, float]:
    """Start the producer process for ``events``: the process, its output file and the
    schedule's start (Unix time), fixed by the producer once it is set up."""
    out, ready = workdir / f"{tag}-out.json", workdir / f"{tag}-ready.json"
    spec = {
        **system.feed,
        "tables": workload.table_names(),
        "rows": workload.rows_per_update,
        "lead": lead,
        "ready": str(ready),
        "events": events,
        "out": str(out),
    }
    proc = systems.spawn_module("benchmarks.freshness_at_scale.generator", spec, workdir, tag)
    systems.wait_until(ready.exists, proc, 120, "the producer did not start", workdir / f"{tag}.log")
    return proc, out, float(read_json(ready)["start_at"])


def wait_primed(system: systems.RunningSystem, timeout: float) -> float:
    """Seconds until every table's log holds a commit that added data."""
    began = time.monotonic()
    logs = {name: follower(system.variant.log_kind, root, time.time) for name, root in system.roots.items()}

    def primed() -> bool:
        for name in list(logs):
            if any(commit.added for commit in logs[name].poll()):
                del logs[name]
        return not logs

    what = f"{system.variant.name}: not every table's first update visible"
    systems.wait_until(primed, system.proc, timeout, what, system.log_path)
    return time.monotonic() - began


def delta_readback(roots: dict[str, Path]) -> dict[str, Any]:
    """Rows and update ids per table through deltalake (independent of the reader's counting)."""
    from testing.tables import read_delta

    columns = {name: read_delta(root).column(UPDATE_ID).to_pylist() for name, root in roots.items()}
    return {name: {"rows": len(column), "uids": len(set(column))} for name, column in columns.items()}


def run_cell(variant: Variant, workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """Measure one system under one workload; raw records plus timings (see ``analyze``)."""
    names = workload.table_names()
    tag = f"[{workload.name}] {variant.name}"
    record: dict[str, Any] = {"variant": variant.to_json(), "workload": asdict(workload)}
    with contextlib.ExitStack() as stack:
        if args.keep_dir is not None:  # kept for inspection: logs, configs, the tables themselves
            args.keep_dir.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=f"{workload.tables}-{variant.name}-", dir=args.keep_dir))
        if args.keep_dir is None:
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        with systems.running_system(variant, names, workdir, args.ready_timeout) as system:
            record["ready_seconds"] = system.ready_seconds
            log(f"{tag}: ready in {system.ready_seconds:.1f} s; priming")
            proc, out, _ = produce(system, workload, priming(workload), workdir, "prime", lead=0.0)
            systems.wait_exit(proc, args.prime_timeout, "the priming producer", workdir / "prime.log")
            record["priming"] = read_json(out)
            record["prime_seconds"] = wait_primed(system, args.prime_timeout)
            log(f"{tag}: primed in {record['prime_seconds']:.1f} s")

            ready_file, control = workdir / "reader-ready.json", workdir / "reader-control.json"
            reader_spec = {
                "kind": variant.log_kind,
                "tables": {name: str(root) for name, root in system.roots.items()},
                "column": UPDATE_ID,
                "interval": args.poll,
                "control": str(control),
                "ready": str(ready_file),
                "out": str(workdir / "reader-out.json"),
            }
            reader = systems.spawn_module("benchmarks.freshness_at_scale.reader", reader_spec, workdir, "reader")
            producer = None
            try:
                systems.wait_until(ready_file.exists, reader, 120, "the reader did not start", workdir / "reader.log")
                events = schedule(workload)
                producer, produced, start_at = produce(system, workload, events, workdir, "produce", lead=0.5)
                w0, w1 = start_at + workload.warmup, start_at + workload.horizon
                record.update(start_at=start_at, window=[w0, w1])
                log(
                    f"{tag}: {len(events)} updates over {workload.horizon:.0f} s "
                    f"(window {workload.duration:.0f} s after {workload.warmup:.0f} s)"
                )
                _sleep_until(w0)
                record["cpu_w0"], record["metrics_w0"] = group_cpu(system.proc.pid), system.scrape()
                _sleep_until(w1)
                record["cpu_w1"], record["metrics_w1"] = group_cpu(system.proc.pid), system.scrape()
                systems.wait_exit(producer, workload.horizon + 600, "the producer", workdir / "produce.log")
                record["produced"] = read_json(produced)
                expected: dict[str, list[int]] = {name: [] for name in names}
                for source in (record["priming"], record["produced"]):
                    for uid, table, _, arrival, *_ in source["records"]:
                        if arrival is not None:
                            expected[names[table]].append(uid)
                child.write(control, {"expected": expected, "deadline": time.time() + args.drain_timeout})
                log(f"{tag}: last arrival sent; draining")
                systems.wait_exit(reader, args.drain_timeout + 900, "the reader", workdir / "reader.log")
                record["reader"] = read_json(workdir / "reader-out.json")
                record["alive_at_end"] = system.alive()
            finally:
                for helper in (producer, reader):
                    if helper is not None:
                        systems.stop_group(helper, grace=5.0)
        record["peer_status"] = system.peer_status()
        if variant.log_kind == "delta":
            record["deltalake_readback"] = delta_readback(system.roots)
    return record
