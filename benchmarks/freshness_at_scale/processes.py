"""The freshness benchmark's own processes: ``python -m benchmarks.freshness_at_scale.processes
ROLE SPEC.json``, ROLE one of ``producer``, ``reader`` and ``peer`` (each function says what it does).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.freshness_at_scale.systems import SCHEMA
from benchmarks.harness import child
from loader.core.schema import TableSchema
from testing.commit_logs import CommitLogFollower, ObservedCommit, follower, value_counts
from testing.loadgen import Connection, Stats
from testing.observed_staleness import percentile

ARROW_SCHEMA = TableSchema.model_validate(SCHEMA).arrow()
#: Seconds of file reading per round while the reader drains.
READ_BUDGET = 0.05


# -- the producer ------------------------------------------------------------------------
def rows_json(uid: int, rows: int) -> list[dict[str, Any]]:
    return [{"u": uid, "r": r, "v": uid + r / 1000.0, "s": f"u{uid:08d}-r{r:03d}"} for r in range(rows)]


def rows_arrow(uid: int, rows: int) -> pa.Table:
    """The same rows as an Arrow table (the peer's landing files)."""
    return pa.Table.from_pylist(rows_json(uid, rows), schema=ARROW_SCHEMA)


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
    head = f"Host: {http['host']}:{http['port']}\r\nAuthorization: Bearer {http['token']}\r\n"
    heads = [f"POST /v1/tables/{name}/updates HTTP/1.1\r\n{head}Content-Type: application/json\r\n" for name in tables]

    async def send(offset: float, table: int, uid: int) -> None:
        body = json.dumps({"rows": rows_json(uid, int(spec["rows"]))}, separators=(",", ":")).encode()
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


def producer(spec: dict[str, Any]) -> None:
    """The producer, fed the schedule: once set up it fixes ``start_at`` = now + ``lead`` and writes
    it to the ``ready`` file (a slow start delays the schedule instead of bunching its first updates),
    sends each update at ``start_at + offset`` and records its *arrival*, the instant the system
    accepted it: ``http`` (the loader): the 202 of ``POST /v1/tables/{t}/updates`` was read (the
    update is durable in the WAL), over ``testing.loadgen``'s raw keep-alive connections, never
    resent, one table's updates one after the other (its sequence numbers follow its arrivals);
    ``files`` (the peer): a Parquet file written aside was renamed into the table's landing
    directory (atomic). Each record: ``[uid, table, scheduled, arrival or None, sequence or None,
    status, release_time or None]`` (Unix seconds; the loader's release of the update).
    """
    cpu0, stats = time.process_time(), Stats()
    if spec["mode"] == "http":
        import uvloop  # comes with uvicorn[standard]

        uvloop.install()
        asyncio.run(run_http(spec, stats))
    else:
        run_files(spec, stats)
    out = {"records": stats.records, "errors": stats.errors, "first_error": stats.first_error}
    child.write(spec["out"], out | {"cpu_seconds": time.process_time() - cpu0})


# -- the outside reader -------------------------------------------------------------------
class Reader:
    def __init__(self, kind: str, tables: dict[str, str], column: str) -> None:
        self.followers: dict[str, CommitLogFollower] = {
            name: follower(kind, Path(root), time.time) for name, root in tables.items()
        }
        self.column = column
        self.commits: dict[str, list[ObservedCommit]] = defaultdict(list)
        self.unread: list[tuple[str, int, str]] = []  # (table, version, path)
        #: Per table: uid -> versions holding it; removed files; rows per uid of each file read.
        self.versions: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.removed: dict[str, set[str]] = defaultdict(set)
        self.file_counts: dict[str, dict[str, Counter[int]]] = defaultdict(dict)
        self.round_seconds: list[float] = []

    def poll(self) -> None:
        began = time.perf_counter()
        for name, log in self.followers.items():
            for commit in log.poll():
                self.commits[name].append(commit)
                self.unread.extend((name, commit.version, path) for path in commit.added)
                self.removed[name].update(commit.removed)
        self.round_seconds.append(time.perf_counter() - began)

    def read(self, budget: float | None) -> None:
        """Read the update ids of committed files, for at most ``budget`` seconds (None: all)."""
        began = time.perf_counter()
        while self.unread and (budget is None or time.perf_counter() - began < budget):
            name, version, path = self.unread.pop()
            self.file_counts[name][path] = counts = value_counts(path, self.column)
            for uid in counts:
                self.versions[name][uid].append(version)

    def result(self) -> dict[str, Any]:
        tables: dict[str, Any] = {}
        for name in self.followers:
            rows: Counter[int] = Counter()
            for path, counts in self.file_counts[name].items():
                if path not in self.removed[name]:
                    rows.update(counts)
            commits = [[c.version, c.seen, c.previous_check, len(c.added), len(c.removed)] for c in self.commits[name]]
            by_uid = sorted(self.versions[name].items())
            updates = [[uid, rows.get(uid, 0), min(versions), len(set(versions))] for uid, versions in by_uid]
            tables[name] = {"commits": commits, "updates": updates, "rows": sum(rows.values())}
        return {"tables": tables}


def reader(spec: dict[str, Any]) -> None:
    """The outside reader: polls every table's commit log (``testing.commit_logs``) every
    ``interval`` seconds and records when it first saw each commit and which files it added,
    reading no data file meanwhile (a few stat-like calls per table and round). Once the control
    file names every expected update id it drains: it reads the committed files' update ids (a
    bounded time per round, so the polling resolution holds) until every one is visible or the
    deadline passes, then writes per table its commits and, per update id, its rows, first
    commit and commits.
    """
    interval, control = float(spec["interval"]), Path(spec["control"])
    reader = Reader(spec["kind"], spec["tables"], spec["column"])
    cpu0 = time.process_time()
    reader.poll()  # what is already there (the priming commits)
    child.write(spec["ready"], {"started": time.time()})
    expected: dict[str, set[int]] | None = None
    deadline = drain_started = drained_at = None
    measured_rounds, cpu_measuring = 0, 0.0
    while True:
        tick = time.time()
        reader.poll()
        if expected is None:
            if control.exists():
                order = json.loads(control.read_text(encoding="utf-8"))
                expected = {name: set(uids) for name, uids in order["expected"].items()}
                deadline = float(order["deadline"])
                drain_started = time.time()
                measured_rounds = len(reader.round_seconds)
                cpu_measuring = time.process_time() - cpu0
        else:
            reader.read(READ_BUDGET)
            if not reader.unread and all(uids <= reader.versions[name].keys() for name, uids in expected.items()):
                drained_at = time.time()
                break
            if time.time() > deadline:  # type: ignore[operator]
                break
        time.sleep(max(0.0, tick + interval - time.time()))
    measuring = reader.round_seconds[:measured_rounds]
    reader.read(None)
    rounds = {"p50_seconds": percentile(measuring, 0.5), "p99_seconds": percentile(measuring, 0.99)}
    drain = (drained_at or time.time()) - drain_started if drain_started else None
    out = {"interval": interval, "poll_rounds": rounds, "drained": drained_at is not None, "drain_seconds": drain}
    child.write(spec["out"], reader.result() | out | {"cpu_seconds_before_drain": cpu_measuring})


# -- the Structured Streaming peer -------------------------------------------------------
DEFAULT_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
DEFAULT_CONF["spark.sql.session.timeZone"] = "UTC"
DEFAULT_CONF |= {"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"}
DEFAULT_CONF |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def peer(spec: dict[str, Any]) -> None:
    """The Structured Streaming peer, what a team without the loader would run: a SparkSession
    (``local[2]``, like the loader's) with, per table, ``readStream.parquet(<landing>/<t>)`` into
    ``writeStream.format("parquet")`` (own checkpoint, 1-second trigger, no ``maxFilesPerTrigger``);
    a micro-batch's files become visible to readers in the sink's ``_spark_metadata`` log. A
    Parquet sink because the Delta jars are not available here. The ``status`` file (replaced
    atomically) says ``running`` with the start-up times and, every 5 s, the active queries; at
    the end, each failed one's error. SIGTERM stops the queries and the session.
    """
    status_path = Path(spec["status"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    began = time.time()
    builder = SparkSession.builder.master(spec["master"]).appName("structured-streaming-peer")
    spark = builder.config(map={**DEFAULT_CONF, **spec.get("conf", {})}).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    status: dict[str, Any] = {"session_seconds": time.time() - began, "started": 0}
    queries = []
    began = time.time()
    for name, landing, checkpoint, out in spec["tables"]:
        if stop.is_set():
            break
        stream = spark.readStream.schema("u BIGINT NOT NULL, r INT NOT NULL, v DOUBLE, s STRING").parquet(landing)
        writer = stream.writeStream.format("parquet").queryName(name).option("checkpointLocation", checkpoint)
        queries.append(writer.trigger(processingTime=spec["trigger"]).start(out))
        status.update(started=len(queries), start_seconds=time.time() - began)
        if len(queries) % 50 == 0:
            print(f"peer: {len(queries)} queries started in {status['start_seconds']:.1f} s", file=sys.stderr)
    status.update(phase="running", active=len(queries))
    while True:
        child.write(status_path, status)
        if stop.wait(5.0):
            break
        status["active"] = len(spark.streams.active)
    errors = {query.name: query.exception() for query in queries if not query.isActive}
    status["failed"] = {name: str(error)[:500] if error is not None else "stopped" for name, error in errors.items()}
    for query in queries:
        query.stop()
    spark.stop()
    child.write(status_path, status | {"phase": "stopped"})


if __name__ == "__main__":
    role, spec = sys.argv[1], json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
    {"producer": producer, "reader": reader, "peer": peer}[role](spec)
