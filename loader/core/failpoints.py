"""Named crash points, so the crash tests can kill the service at an exact step.

A kill -9 at a random moment rarely lands in the few milliseconds between a Delta commit
and the service noting it, yet that window is where exactly-once is won or lost. The
crash tests therefore start ``loader serve`` with, for example::

    LOADER_FAILPOINTS="load.after-commit=3"

and the process SIGKILLs itself the 3rd time it reaches that point (several points are
separated by commas). Unset, as in production, ``hit`` and ``tear`` are one dictionary
lookup.

Points (where they are reached; the count N of ``NAME=N`` counts passes in one process):

- ``intake.after-wal``: an update is durable in the WAL, its 202 not yet sent;
- ``wal.after-write``: the WAL writer wrote a group with ``write()``, not yet fsynced (the
  records survive a process kill in the page cache: durable, never acknowledged);
- ``wal.torn-write``: the WAL writer writes only the first half (plus one byte) of the
  next append() call's frames and dies, so the restart meets a torn tail ending inside
  a record (``tear``);
- ``recovery.after-spill-reset``: start-up emptied the spill directory, the WAL is not
  replayed yet;
- ``recovery.replay``: start-up replayed the N-th WAL record into the pending store
  (committed records count too), intake still closed;
- ``spill.write``: a spill segment file was written, its updates not yet marked spilled;
- ``load.after-spark-write``: Spark wrote the batch's Parquet files into staging;
- ``load.after-publish``: the files are in the table directory, not yet committed;
- ``load.after-commit``: the Delta commit landed, the service has not recorded it (with
  loads in worker processes, in the service: a worker's reply says it committed);
- ``load.group.between-commits``: in a multi-table job, the first table's Delta commit was
  made (or failed) and the others' have not been (loader/loading/sinks/delta_rs.py
  ``load_group``; once a job);
- ``load.upsert.before-merge``: a latest table's load (loader/loading/sinks/upsert.py) has
  the newest value per key from Spark, its MERGE not yet started;
- ``load.upsert.mid-merge``: the MERGE is running; with ``NAME=N@SECONDS`` the process is
  SIGKILLed that many seconds after the N-th MERGE began, wherever it is by then (writing
  the rewritten files, committing, or just past the commit: the library's MERGE is one
  native call with no step of its own to stop at);
- ``load.upsert.after-merge``: the MERGE committed and the catalog has not recorded it
  (with loads in worker processes also reached in the service, as ``load.after-commit``);
- ``retire.before-save``: ``DELETE /v1/admin/tables/{t}`` (or ``/views/{v}``) decided the
  retirement in memory, the catalog is not saved, the DELETE not answered;
- ``retire.after-save``: a drained retiring table left the catalog and the catalog is saved;
  with ``?purge=true`` its Delta table and files are not removed yet;
- ``schema.after-catalog``: a table's new schema is saved in the catalog, its Delta table
  not yet changed (loader/service.py ``change_schema``);
- ``log.cleanup.delete``: an expired Delta log file was deleted and the next not yet (the
  log-keeping job, the loader's own checkpoints: loader/loading/sinks/log_cleanup.py);
- ``load.upsert.dv-before-commit``: a deletion-vector upsert (loader/loading/sinks/upsert_dv.py)
  wrote its data and deletion vector files, its commit not yet;
- ``compact.latest.before-commit``, ``compact.latest.after-commit``: the compaction of a
  deletion-vector latest table (loader/loading/sinks/dv_compaction.py) wrote its files and
  has not committed them / committed them (the maintenance job, in the service).

``NAME=N@SECONDS`` works for every point but ``wal.torn-write`` (a torn write is at the
write): the kill comes that many seconds after the N-th pass instead of at it.

With loads in worker processes (``[spark] mode = "connect"``) the ``load.*`` points are
passed in a worker process, where ``LOADER_WORKER_FAILPOINTS="load.after-publish=2"``
arms them: the first worker process the service starts SIGKILLs itself there (its
replacement is not armed). ``load.after-commit`` is also reached in the service.

The crash trial (``testing/crash_trial.py``, ``trials/crash.py``) arms one point
per life of the server and also kills it, or a worker process, from outside at random moments.

Written by hand: fault-injection libraries for Python patch functions from the test
process, which cannot reach into a service running as a subprocess.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

ENV = "LOADER_FAILPOINTS"
#: Failpoints of the service's first load worker process (loader/loading/workers/pool.py),
#: read by the service and handed to that process as its own ``LOADER_FAILPOINTS``.
WORKER_ENV = "LOADER_WORKER_FAILPOINTS"
POINTS = frozenset(
    {
        "intake.after-wal",
        "wal.after-write",
        "wal.torn-write",
        "recovery.after-spill-reset",
        "recovery.replay",
        "spill.write",
        "load.after-spark-write",
        "load.after-publish",
        "load.after-commit",
        "load.group.between-commits",
        "load.upsert.before-merge",
        "load.upsert.mid-merge",
        "retire.before-save",
        "retire.after-save",
        "load.upsert.after-merge",
        "view.before-commit",
        "view.after-commit",
        "schema.after-catalog",
        "log.cleanup.delete",
        "load.upsert.dv-before-commit",
        "compact.latest.before-commit",
        "compact.latest.after-commit",
    }
)


@dataclass(frozen=True)
class Armed:
    """When a point kills: at its ``count``-th pass, ``delay`` seconds later."""

    count: int = 1
    delay: float = 0.0


def parse(spec: str) -> dict[str, Armed]:
    """``"a=2,b,c=1@0.05"`` -> a at its 2nd pass, b at its 1st, c 50 ms after its 1st;
    unknown names are an error (a typo would never fire)."""
    armed: dict[str, Armed] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, when = part.partition("=")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown failpoint {name!r}; known: {sorted(POINTS)}")
        count, _, delay = when.partition("@")
        try:
            armed[name] = Armed(int(count) if count else 1, float(delay) if delay else 0.0)
        except ValueError:
            raise ValueError(f"{ENV}: {part!r} is not NAME, NAME=COUNT or NAME=COUNT@SECONDS") from None
        if armed[name].count < 1 or not 0 <= armed[name].delay <= threading.TIMEOUT_MAX:
            raise ValueError(
                f"{ENV}: {part!r}: the count must be at least 1 and the delay a finite, not negative number"
            )
        if armed[name].delay and name == "wal.torn-write":
            raise ValueError(f"{ENV}: {part!r}: a torn write happens at the write; it takes no delay")
    return armed


_armed = parse(os.environ.get(ENV, ""))
_hits: dict[str, int] = {}
_lock = threading.Lock()


def _reached(name: str) -> bool:
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        return _hits[name] == _armed[name].count


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def hit(name: str) -> None:
    """Count a pass through point ``name``; SIGKILL this process when its count is reached
    (or, armed with a delay, start the clock on a kill and carry on)."""
    if name not in _armed:
        return
    if _reached(name):
        delay = _armed[name].delay
        if not delay:
            _die()
            return
        killer = threading.Timer(delay, _die)
        killer.daemon = True
        killer.start()


def tear(name: str, fd: int, data: bytes) -> None:
    """Before ``data`` is written to ``fd``: when point ``name``'s count is reached, write a
    prefix that ends inside a frame instead and SIGKILL this process (a torn write)."""
    if name not in _armed:
        return
    if _reached(name):
        os.write(fd, data[: len(data) // 2 + 1] if len(data) > 1 else b"")
        _die()


def worker_spec() -> str:
    """``LOADER_WORKER_FAILPOINTS`` checked (a typo is an error here, in the service, not a
    worker that silently never dies); "" when unset."""
    spec = os.environ.get(WORKER_ENV, "")
    parse(spec)
    return spec
