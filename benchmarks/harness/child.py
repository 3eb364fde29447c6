"""A benchmark's child process (``testing.service_server.run_child``): ``python -m module SPEC.json``
prints its result as one JSON line (and writes it to the spec's ``result_path``, if named)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write(path: str | Path, result: Any) -> None:
    """``result`` as JSON into ``path``, atomically (a reader never sees half of it)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, target)


def rss_mib() -> float:
    """This process's resident memory now, MiB (Linux /proc)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(run: Callable[[dict[str, Any]], Any]) -> int:
    """``run(spec)`` on the spec file named by the first argument ({} if none); its result out."""
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")) if len(sys.argv) > 1 else {}
    result = run(spec)
    if "result_path" in spec:
        write(spec["result_path"], result)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
