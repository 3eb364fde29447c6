"""Named crash points, so the crash tests can kill the service at an exact step.

A kill -9 at a random moment rarely lands in the few milliseconds between a Delta commit
and the service noting it, yet that window is where exactly-once is won or lost. The
crash tests therefore start ``loader serve`` with, for example::

    LOADER_FAILPOINTS="load.after-commit=3"

and the process SIGKILLs itself the 3rd time it reaches that point (several points are
separated by commas). Unset, as in production, ``hit`` is one dictionary lookup.

Points (where they are reached):

- ``intake.after-wal``: an update is durable in the WAL, its 202 not yet sent;
- ``load.after-spark-write``: Spark wrote the batch's Parquet files into staging;
- ``load.after-publish``: the files are in the table directory, not yet committed;
- ``load.after-commit``: the Delta commit landed, the service has not recorded it.

Written by hand: fault-injection libraries for Python patch functions from the test
process, which cannot reach into a service running as a subprocess.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "LOADER_FAILPOINTS"
POINTS = frozenset({"intake.after-wal", "load.after-spark-write", "load.after-publish", "load.after-commit"})


def parse(spec: str) -> dict[str, int]:
    """``"a=2,b"`` -> ``{"a": 2, "b": 1}``; unknown names are an error (a typo would never fire)."""
    armed: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, count = part.partition("=")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown failpoint {name!r}; known: {sorted(POINTS)}")
        try:
            armed[name] = int(count) if count else 1
        except ValueError:
            raise ValueError(f"{ENV}: {part!r} is not NAME or NAME=COUNT") from None
        if armed[name] < 1:
            raise ValueError(f"{ENV}: {part!r}: the count must be at least 1")
    return armed


_armed = parse(os.environ.get(ENV, ""))
_hits: dict[str, int] = {}
_lock = threading.Lock()


def hit(name: str) -> None:
    """Count a pass through point ``name``; SIGKILL this process when its count is reached."""
    if name not in _armed:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] == _armed[name]:
            os.kill(os.getpid(), signal.SIGKILL)
