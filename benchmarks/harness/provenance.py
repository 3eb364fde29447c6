"""The ``meta`` block of a run: what was run, on what, with which code, under what load.

Its section's first lines (``testing.report.machine_markdown``) are rendered from it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from testing.report import LoadMonitor, command_line, load_average, machine_info, source_fingerprint


def start(
    module: str, argv: Sequence[str] | None, package: str, fingerprints: Sequence[str] = (), **extra: Any
) -> dict:
    """Command, machine, the fingerprint of ``package`` (and of ``fingerprints``), load at start."""
    machine = machine_info(package)
    machine.update({f"{p}_sha256": source_fingerprint(p) for p in fingerprints})
    return {"command": command_line(module, argv), **extra, "machine": machine}


def finish(meta: dict[str, Any], began: float, monitor: LoadMonitor, packages: Sequence[str]) -> dict[str, Any]:
    """Wall time since ``began`` (perf_counter), load at the end and at its peak, and whether
    each of ``packages`` changed meanwhile."""
    meta["run_seconds"] = time.perf_counter() - began
    meta["loadavg_end"] = load_average()
    meta["loadavg_peak"] = monitor.peak
    for p in packages:
        meta[f"{p}_unchanged_during_run"] = source_fingerprint(p) == meta["machine"][f"{p}_sha256"]
    return meta
