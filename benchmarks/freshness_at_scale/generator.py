"""The producer of the freshness benchmark, run as its own process (``python -m ... SPEC.json``).

Once set up it fixes ``start_at`` = now + ``lead`` and writes it to the ``ready`` file (a
slow start delays the schedule instead of bunching its first updates), sends each update
at ``start_at + offset`` and records its *arrival*, the instant the system accepted it:
``http`` (the loader): the 202 of ``POST /v1/tables/{t}/updates`` was read (the update is
durable in the WAL), over ``testing.loadgen``'s raw keep-alive connections, never resent,
one table's updates one after the other (its sequence numbers follow its arrivals);
``files`` (the peer): a Parquet file written aside was renamed into the table's landing
directory (atomic). Each record: ``[uid, table, scheduled, arrival or None, sequence or
None, status, release_time or None]`` (Unix seconds; the loader's release of the update).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.freshness_at_scale.workload import rows_arrow, update_body
from benchmarks.harness import child
from testing.loadgen import Connection, Stats


def announce_start(spec: dict[str, Any]) -> float:
    """Fix the schedule's start now that everything is set up, and tell the harness."""
    start = time.time() + float(spec["lead"])
    child.write(spec["ready"], {"start_at": start})
    return start


async def run_http(spec: dict[str, Any], stats: Stats) -> None:
    http = spec["http"]
    tables: list[str] = spec["tables"]
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

    async def send(offset: float, table: int, uid: int) -> None:
        body = update_body(uid, int(spec["rows"]))
        raw = (heads[table] + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        async with locks[table]:
            conn = await pool.get()
            try:
                status, answer, _ = await conn.request(raw)
                done = time.time()
            except Exception as exc:  # noqa: BLE001 - reported, never resent
                stats.error(type(exc).__name__, repr(exc))
                stats.records.append([uid, table, start + offset, None, None, 0, None])
                return
            finally:
                pool.put_nowait(conn)
        if status != 202:
            stats.error(str(status), f"HTTP {status}: {answer[:300]!r}")
            stats.records.append([uid, table, start + offset, None, None, status, None])
            return
        ack = json.loads(answer)["updates"][0]
        stats.records.append([uid, table, start + offset, done, ack["sequence"], status, ack["release_time"]])

    tasks = []
    for offset, table, uid in spec["events"]:
        if (wait := start + offset - time.time()) > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(send(offset, table, uid)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        await pool.get_nowait().close()


def run_files(spec: dict[str, Any], stats: Stats) -> None:
    landing = [Path(p) for p in spec["files"]["landing"]]
    staging = Path(spec["files"]["staging"])
    staging.mkdir(parents=True, exist_ok=True)
    rows = int(spec["rows"])
    # The first Parquet write of a process pays pyarrow's lazy set-up: not an update's cost.
    warm = staging / ".warm-up.parquet"
    pq.write_table(rows_arrow(-1, rows), warm)
    warm.unlink()
    start = announce_start(spec)
    for offset, table, uid in spec["events"]:
        time.sleep(max(0.0, start + offset - time.time()))
        name = f"u{uid:010d}.parquet"
        try:
            pq.write_table(rows_arrow(uid, rows), staging / name)
            os.rename(staging / name, landing[table] / name)
        except OSError as exc:
            stats.error(type(exc).__name__, repr(exc))
            stats.records.append([uid, table, start + offset, None, None, 0, None])
        else:
            stats.records.append([uid, table, start + offset, time.time(), None, 0, None])


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    cpu0, stats = time.process_time(), Stats()
    if spec["mode"] == "http":
        import uvloop  # comes with uvicorn[standard]

        uvloop.install()
        asyncio.run(run_http(spec, stats))
    else:
        run_files(spec, stats)
    out = {"records": stats.records, "errors": stats.errors, "first_error": stats.first_error}
    child.write(spec["out"], out | {"cpu_seconds": time.process_time() - cpu0})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
