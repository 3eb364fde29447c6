"""Spilling pending updates: policies against the offline optimum, segment I/O against the disk, Chain mode.

    python -m benchmarks.spill                # ~2-3 min; rewrites the spill section of BENCHMARKS.md
    python -m benchmarks.spill --quick        # ~10 s smoke run, prints only
    python -m benchmarks.spill --repeats 5    # I/O runs (default 3; quick 1)
    python -m benchmarks.spill --rerender     # re-judge saved results, rewrite the report

Part 1 (``_spill_model.py``): Half, BufferedHead, GreedyChunk, hybrid and LRU in the pure
queue-caching model (Motwani and Thomas, SODA 2004) on bursty on/off traffic and on the
paper's adversarial inputs (Theorems 2.2 and 4.3), against the exact offline optimum
(``loader.pending.spill.offline``) on small instances, in the unit and the extended cost model,
and against its window lower bound on larger ones.

Part 2 (``_spill_io.py``): write and read-back throughput of the live Parquet segment
files through ``PendingStore``, against this disk's raw sequential bandwidth measured in
the same run, like with like (with and without fsync; reads evicted from the page cache).

Part 3 (``_spill_chain.py``): peak pending bytes and staleness with and without the Chain
memory-pressure mode (``schedulers.chain``), simulated on bursty traces with
heterogeneous payload sizes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.spill import report as report
from testing.report import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    source_fingerprint,
    write_json,
    write_section,
)

MODULE = "benchmarks.spill"
SECTION = "spill"
PARTS = ("model", "io", "chain")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: fewer seeds and instances, 128 MiB of I/O, 1 repeat; writes results/spill-quick.json and "
        "leaves BENCHMARKS.md alone unless --markdown",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed I/O runs (default 3; quick 1)")
    parser.add_argument("--seeds", type=int, default=None, help="traces per load in part 3 (default 20; quick 2)")
    parser.add_argument("--io-mib", type=int, default=None, help="MiB spilled and written raw per run (512; quick 128)")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to measure (default: /tmp)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: model, io, chain")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help=f"file whose '{SECTION}' section to rewrite (default {BENCHMARKS_MD.name}; quick: none)",
    )
    parser.add_argument("--rerender", action="store_true", help="measure nothing: re-judge --json, rewrite the report")
    parser.add_argument(
        "--json", type=Path, default=None, help="raw results (default results/spill.json; quick: spill-quick.json)"
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.seeds is None:
        args.seeds = 2 if args.quick else 20
    if args.repeats < 1 or args.seeds < 1:
        parser.error("--repeats and --seeds must be >= 1")
    args.skip_parts = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.skip_parts - set(PARTS):
        parser.error(f"--skip takes {', '.join(PARTS)}; got {args.skip}")
    if args.json is None:
        args.json = RESULTS_DIR / ("spill-quick.json" if args.quick else "spill.json")
    if args.markdown is None and not args.quick:
        args.markdown = BENCHMARKS_MD
    return args


def publish(results: dict[str, Any], args: argparse.Namespace) -> None:
    results["targets"] = report.evaluate(results)
    write_json(args.json, results)
    log(f"raw results: {args.json}")
    if args.markdown is not None:
        write_section(SECTION, report.render_markdown(results), args.markdown)
        log(f"wrote section '{SECTION}' of {args.markdown}")
    report.print_console(results)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        results = json.loads(args.json.read_text())
        publish(results, args)
        return 0
    started = time.perf_counter()
    machine = machine_info("loader")
    machine["schedulers_sha256"] = source_fingerprint("schedulers")
    meta: dict[str, Any] = {
        "command": command_line(MODULE, argv),
        "quick": args.quick,
        "repeats": args.repeats,
        "seeds": args.seeds,
        "machine": machine,
    }
    results: dict[str, Any] = {"meta": meta}
    with LoadMonitor() as monitor:
        if "model" not in args.skip_parts:
            from benchmarks.spill.model import run_competitive

            began = time.perf_counter()
            results["model"] = run_competitive(args.quick, log)
            log(f"[model] done in {fmt_duration(time.perf_counter() - began)}")
        if "io" not in args.skip_parts:
            from benchmarks.spill.disk import run_io

            began = time.perf_counter()
            results["io"] = run_io(args.quick, args.repeats, args.dir, log, args.io_mib)
            log(f"[io] done in {fmt_duration(time.perf_counter() - began)}")
        if "chain" not in args.skip_parts:
            from benchmarks.spill.chain import run_chain

            began = time.perf_counter()
            results["chain"] = run_chain(args.quick, args.seeds, log)
            log(f"[chain] done in {fmt_duration(time.perf_counter() - began)}")
    meta["run_seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
    meta["schedulers_unchanged_during_run"] = source_fingerprint("schedulers") == machine["schedulers_sha256"]
    publish(results, args)
    log(f"done in {fmt_duration(meta['run_seconds'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
