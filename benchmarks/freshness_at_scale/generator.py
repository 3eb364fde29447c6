"""The producer of the freshness benchmark, run as its own process.

    python -m benchmarks.freshness_at_scale.generator SPEC.json     # writes spec["out"]

Once set up (imports, connections) it fixes ``start_at`` = now + ``lead`` and writes it to
the ``ready`` file, so a slow start on a busy machine delays the schedule instead of
bunching its first updates. It sends each scheduled update at ``start_at + offset`` and
records its *arrival*, the instant the system accepted it:

- ``http`` (the loader): ``POST /v1/tables/{t}/updates`` with the update's rows as JSON;
  arrival = when the 202 was read (the update is durable in the WAL then). Raw HTTP/1.1
  keep-alive connections from ``testing.loadgen`` (never resent: a request that got no
  answer is reported, not repeated). One table's updates are sent one after the other, so
  its sequence numbers follow its arrivals; different tables' run concurrently.
- ``files`` (the Structured Streaming peer): the rows are written as a Parquet file in a
  staging directory and renamed into the table's landing directory (the same
  filesystem: atomic); arrival = when the rename returned.

Each record: ``[uid, table, scheduled, arrival or None, sequence or None, status,
release_time or None]`` (Unix seconds; ``release_time`` is the loader's own release of
the update, from its acknowledgement).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.freshness_at_scale.workload import rows_arrow, update_body
from benchmarks.harness import child
from testing.loadgen import Connection, Stats


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def announce_start(spec: dict[str, Any]) -> float:
    """Fix the schedule's start now that everything is set up, and tell the harness."""
    start = time.time() + float(spec["lead"])
    ready = Path(spec["ready"])
    tmp = ready.with_name(ready.name + ".tmp")
    tmp.write_text(json.dumps({"start_at": start}), encoding="utf-8")
    os.replace(tmp, ready)
    return start


async def run_http(spec: dict[str, Any]) -> dict[str, Any]:
    http = spec["http"]
    tables: list[str] = spec["tables"]
    rows = int(spec["rows"])
    stats = Stats()
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(int(http["connections"])):
        conn = Connection(http["host"], int(http["port"]), stats, resend=False)
        await conn.connect()
        pool.put_nowait(conn)
    start = announce_start(spec)
    locks = [asyncio.Lock() for _ in tables]
    heads = [
        (
            f"POST /v1/tables/{name}/updates HTTP/1.1\r\nHost: {http['host']}:{http['port']}\r\nAuthorization: Bearer "
            f"{http['token']}\r\nContent-Type: application/json\r\n"
        )
        for name in tables
    ]
    records: list[list[Any]] = []

    async def send(offset: float, table: int, uid: int) -> None:
        body = update_body(uid, rows)
        raw = (heads[table] + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        async with locks[table]:
            conn = await pool.get()
            try:
                status, answer, _ = await conn.request(raw)
                done = time.time()
            except Exception as exc:  # noqa: BLE001 - reported, never resent
                stats.error(type(exc).__name__, repr(exc))
                records.append([uid, table, start + offset, None, None, 0, None])
                return
            finally:
                pool.put_nowait(conn)
        if status != 202:
            stats.error(str(status), f"HTTP {status}: {answer[:300]!r}")
            records.append([uid, table, start + offset, None, None, status, None])
            return
        ack = json.loads(answer)["updates"][0]
        records.append([uid, table, start + offset, done, ack["sequence"], status, ack["release_time"]])

    tasks = []
    for offset, table, uid in spec["events"]:
        wait = start + offset - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(send(offset, table, uid)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        await pool.get_nowait().close()
    return {"records": records, "errors": stats.errors, "first_error": stats.first_error}


def run_files(spec: dict[str, Any]) -> dict[str, Any]:
    landing = [Path(p) for p in spec["files"]["landing"]]
    staging = Path(spec["files"]["staging"])
    staging.mkdir(parents=True, exist_ok=True)
    rows = int(spec["rows"])
    # The first Parquet write of a process pays pyarrow's lazy set-up: not an update's cost.
    warm = staging / ".warm-up.parquet"
    pq.write_table(rows_arrow(-1, rows), warm)
    warm.unlink()
    start = announce_start(spec)
    records: list[list[Any]] = []
    errors: dict[str, int] = {}
    first_error = None
    for offset, table, uid in spec["events"]:
        wait = start + offset - time.time()
        if wait > 0:
            time.sleep(wait)
        name = f"u{uid:010d}.parquet"
        try:
            pq.write_table(rows_arrow(uid, rows), staging / name)
            os.rename(staging / name, landing[table] / name)
        except OSError as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            first_error = first_error or repr(exc)
            records.append([uid, table, start + offset, None, None, 0, None])
            continue
        records.append([uid, table, start + offset, time.time(), None, 0, None])
    return {"records": records, "errors": errors, "first_error": first_error}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    cpu0 = _cpu_seconds()
    if spec["mode"] == "http":
        try:
            import uvloop

            uvloop.install()
        except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
            pass
        out = asyncio.run(run_http(spec))
    elif spec["mode"] == "files":
        out = run_files(spec)
    else:
        raise SystemExit(f"unknown mode {spec['mode']!r}: http or files")
    out["cpu_seconds"] = _cpu_seconds() - cpu0
    child.write(spec["out"], out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
