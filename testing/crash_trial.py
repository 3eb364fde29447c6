"""The crash-consistency trial: producers, kills at chosen and at random moments, the verdict.

One data directory lives through many lives of ``loader serve`` (a subprocess on loopback,
Spark included). Each life is ended by SIGKILL: either a failpoint armed for that life
(``loader/core/failpoints.py``: inside the WAL's group commit, during recovery, in a spill
write, around a Delta commit) or a kill of the whole process group from outside at a
random moment (seeded), before ``/readyz`` turns ready (WAL replay, Spark start-up) or
while loads run. With loads in worker processes (the default, ``[spark] mode =
"connect"``) the points around a Delta commit are reached in a worker: the ``worker:``
kinds kill the first worker process there (or, ``worker:external``, a worker from
outside), the life goes on until the service has replaced it, and then ends by a kill of
the service as well. Producer threads submit numbered rows all along, each request with an
Idempotency-Key, and retry a request left without an answer until it gets one, as a
real producer does; a kill thus lands mid-burst.

One of the tables is a latest table (keyed, loads are MERGEs; docs/latest-tables.md):
its ``load.upsert.*`` points kill before a MERGE, inside one (a delayed kill, seeded)
and between a MERGE's commit and the catalog's record of it.

Poison and an outside alteration: once a life is ready, another tool (deltalake, from
outside the service) adds a CHECK constraint ``id >= 0`` to ``alpha`` while the loader
writes to it, and from then on about one request in fifty is a poison update of ``alpha``
(a negative id), one in five of them in a landing file: acknowledged, but no load can
commit it. Each must end in quarantine alone, and every other update load exactly once
around it: the failed load's search names them (rows, spilled rows and landing files
alike), and they are set aside while the rest of the batch loads.

At the end the service is restarted without failpoints, the producers finish, every
acknowledged update is loaded, and each Delta table is read back with independent
readers (the ``deltalake`` package, and DuckDB on the files the Delta log lists). The
verdict counts rather than asserts (the report needs the numbers): rows lost, rows
duplicated, rows nobody acknowledged, sequence numbers given twice, Delta transaction
versions that do not match the last acknowledged sequence, staging directories left;
for the latest table, "lost" is a key not holding its newest acknowledged value and a
superseded value left in the table is counted on its own.

Used by ``tests/system/test_crash.py`` (every kind of kill once) and
``trials/crash.py`` (50+ kills of seeded random kinds).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import random
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from loader.core.failpoints import POINTS
from loader.durability.quarantine import QuarantineStore
from loader.durability.transactions import app_id, view_app_id
from loader.durability.wal_format import parse_segment_name, scan_segment
from loader.loading.sinks.delta_rs import STAGING_PREFIX
from testing.prom import sample_value
from testing.server_process import WORKER_LINE, ServerProcess, free_port, gone_within, write_config
from testing.tables import read_delta, read_duckdb

TOKEN = "crash-test-operator-token-0001"
#: Three append tables on two workers: a free worker meets two due tables and loads them in
#: one job.
APPEND_TABLES = ("alpha", "beta", "gamma")
#: ``k = id % KEYS``: the join column of the view below.
SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "note", "type": "string"},
        {"name": "k", "type": "int64", "nullable": False},
    ]
}
#: A latest table (docs/latest-tables.md) keyed by ``k = id % KEYS``, without ``order_by``:
#: the last value to arrive wins, so the replay after a kill must keep arrival order. At
#: most a few keys per load, so values wait behind a cut and loads split a backlog. Its
#: upsert writes deletion vectors (upsert_dv.py; the MERGE's crashes are
#: tests/system/test_latest_crash.py's), and the service compacts it every 5 s
#: (dv_compaction.py: the ``compact.latest.*`` points).
LATEST = "quotes"
KEYS = 40
LATEST_TABLE = {
    "name": LATEST,
    "schema": {
        "columns": [
            {"name": "k", "type": "int64", "nullable": False},
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "note", "type": "string"},
        ]
    },
    "mode": "latest",
    "key": ["k"],
    "key_policy": "linecutting-bounded",
    "max_keys_per_batch": 8,
    "upsert": "deletion-vectors",
}
TABLES = (*APPEND_TABLES, LATEST)
#: A join view (docs/join-views.md) over an append and the latest table: each alpha row with
#: its key's current quote. It lives through every kill (its points view.before-commit and
#: view.after-commit among them) and must equal the join recomputed from the two tables.
VIEW = "alpha_quotes"
VIEW_DECLARATION = {
    "name": VIEW,
    "inputs": [{"table": "alpha", "alias": "a"}, {"table": LATEST, "alias": "q"}],
    "on": ["a.k = q.k"],
    "select": ["a.id", "q.id AS quote_id"],
}
#: Makes rows big enough that the 64 KiB memory budget overflows and updates spill.
PAD = "x" * 96
#: The table another tool alters while the loader writes to it, and the rule it adds: a
#: poison update (negative ids) is acknowledged and can never be committed.
POISONED = "alpha"
CONSTRAINT = {"no_negative_ids": "id >= 0"}
#: Of the requests once the constraint is in place, how many are a poison update.
POISON_RATE = 0.02
#: Of the poison updates, how many name a landing file: the failed load's search must read
#: the file again to name its update (``ordered_rows(read_files=True)``).
POISON_FILE_RATE = 0.2

#: Kill from outside at a random delay after the start, before /readyz is expected to answer.
EXTERNAL_RECOVERY = "external:recovery"
#: Kill from outside at a random delay after /readyz turned ready, producers mid-burst.
EXTERNAL_SERVING = "external:serving"
#: Points passed only where a load runs: in a worker process in connect mode.
LOAD_POINTS = tuple(sorted(p for p in POINTS if p.startswith("load.")))
#: Reached in the service as well (a worker's reply says it committed).
SERVICE_LOAD_POINTS = {"load.after-commit", "load.upsert.after-merge"}
MID_MERGE = "load.upsert.mid-merge"
#: Seconds into a MERGE at which ``load.upsert.mid-merge`` kills: a small MERGE of this
#: trial's table takes some tens of milliseconds (armed as ``NAME=N@SECONDS``).
MID_MERGE_DELAY = (0.0, 0.06)
#: ``worker:<point>``: the first worker process dies at the point; ``worker:external``: a
#: worker process is killed from outside at a random moment while the service serves.
WORKER = "worker:"
WORKER_EXTERNAL = "worker:external"
WORKER_KINDS = (*(WORKER + p for p in LOAD_POINTS), WORKER_EXTERNAL)
#: The kinds of each Spark mode. Connect: the service still reaches load.after-commit (a
#: worker's reply says it committed); the other load points are the workers'.
#: The trial retires no table and changes no schema: the ``retire.*`` points are
#: tests/system/test_retirement_crash.py's, the ``schema.*`` ones tests/api/test_schema_changes.py's.
#: Nor ``log.cleanup.delete``: the log-keeping job runs hourly, so a life armed there waits its
#: four minutes for nothing; tests/loader/ops/test_delta_log.py kills a process there.
TRIAL_POINTS = frozenset(p for p in POINTS if not p.startswith(("retire.", "schema.", "log.")))
CLASSIC_KINDS = (*sorted(TRIAL_POINTS), EXTERNAL_RECOVERY, EXTERNAL_SERVING)
KINDS = (
    *sorted(TRIAL_POINTS - set(LOAD_POINTS) | SERVICE_LOAD_POINTS),
    EXTERNAL_RECOVERY,
    EXTERNAL_SERVING,
    *WORKER_KINDS,
)

#: Log lines that tell how far a start got (loader/service.py, loader/pending/setup.py).
RECOVERED_LINE = "pending updates from the WAL; intake open"
SPILL_RESET_LINE = "spill files of an earlier run"
#: Logged after the WAL was opened and before its replay ends (when there is something to say).
REPLAYING_LINES = (SPILL_RESET_LINE, "WAL: cut a torn tail")
CLEAN_STOP_LINE = "stopped cleanly"


#: The long trial's memory budget of pending payloads: a backlog of about a hundred updates spills.
MEMORY_BUDGET = 65536


def crash_config(
    workdir: Path,
    port: int,
    mode: str = "connect",
    spark_remote: str = "",
    memory_budget: int = MEMORY_BUDGET,
    acceptors: int = 0,
    upsert: str = "deletion-vectors",
) -> Path:
    """The service under trial (the latest table's ``upsert`` as given): 2 workers, a tiny
    memory budget (spills), small WAL segments truncated every second (crashes meet rolled
    and deleted segments), tables compacted every 5 s (kills from outside may land in a
    compaction). ``spark_remote``: a running
    Spark Connect server to use (the suite's: each life then skips a JVM start) instead of
    the service's own, which each kill takes down with it. ``acceptors``: HTTP served by that
    many acceptor processes (api/acceptors/), which each kill of the service takes along."""
    return write_config(
        workdir / "loader.toml",
        {
            "port": port,
            "data_dir": str(workdir / "data"),
            "workers": 2,
            "policy": "myopic",
            "wal": {"segment_bytes": 1 << 18},
            "spark": {"master": "local[2]", "mode": mode, **({"remote": spark_remote} if spark_remote else {})},
            "maintenance": {"wal_truncate_seconds": 1, "compact_seconds": 5, "vacuum_seconds": 0},
            "spill": {"memory_budget_bytes": memory_budget},
            "intake": {"acceptors": acceptors},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": [
                *({"name": name, "schema": SCHEMA} for name in APPEND_TABLES),
                LATEST_TABLE | {"upsert": upsert},
            ],
            "views": [VIEW_DECLARATION],
        },
    )


def wal_records(wal_dir: Path) -> int:
    """Complete records in the WAL: what the next start replays (``recovery.replay`` needs
    a count it will reach)."""
    if not wal_dir.is_dir():
        return 0
    total = 0
    for path in wal_dir.iterdir():
        if parse_segment_name(path.name) is not None:
            with contextlib.suppress(Exception):  # a damaged segment is the service's business
                total += scan_segment(path).records
    return total


# -- producers --------------------------------------------------------------------------------
@dataclass
class Part:
    table: str
    ids: list[int]


@dataclass
class Submission:
    """One request, sent with the same key and the same bytes until it is answered."""

    key: str
    parts: list[Part]
    path: str
    body: bytes
    #: The rows travel in a landing file the request names (not in the body).
    file: bool = False
    #: (table, sequence) per part, from the 202; None while unanswered.
    acks: list[tuple[str, int]] | None = None
    attempts: int = 0
    replayed: bool = False
    #: A poison update: rows the table's constraint refuses (quarantined, never loaded).
    poison: bool = False
    #: The body's media type: JSON, or an Arrow IPC stream of the rows (issue 36).
    content_type: str = "application/json"

    @classmethod
    def build(cls, key: str, parts: list[Part], landing: Path | None = None, arrow: bool = False) -> Submission:
        """``landing``: write the (single) part's rows to a Parquet file there and name it;
        ``arrow``: send the (single) part's rows as an Arrow IPC stream."""

        def rows(part: Part) -> list[dict[str, Any]]:
            if part.table == LATEST:
                return [{"k": i % KEYS, "id": i, "note": f"row {i} {PAD}"} for i in part.ids]
            return [{"id": i, "note": f"row {i} {PAD}", "k": i % KEYS} for i in part.ids]

        if landing is not None and len(parts) == 1:
            name = f"{key}.parquet"
            ids = pa.array(parts[0].ids, pa.int64())
            table = pa.table({"id": ids, "note": [r["note"] for r in rows(parts[0])], "k": pc.remainder(ids, KEYS)})
            landing.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, landing / f".{name}.tmp")
            os.replace(landing / f".{name}.tmp", landing / name)  # complete before it is named
            body = json.dumps({"files": [name]}).encode()
            return cls(key, parts, f"/v1/tables/{parts[0].table}/updates", body, file=True)
        if arrow and len(parts) == 1:
            made = rows(parts[0])
            table = pa.table({name: [r[name] for r in made] for name in made[0]})
            table = table.cast(pa.schema([(n, pa.string() if n == "note" else pa.int64()) for n in made[0]]))
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            path, body = f"/v1/tables/{parts[0].table}/updates", sink.getvalue()
            return cls(key, parts, path, body, content_type="application/vnd.apache.arrow.stream")
        if len(parts) == 1:
            path, payload = f"/v1/tables/{parts[0].table}/updates", {"rows": rows(parts[0])}
        else:
            path, payload = "/v1/updates", {"updates": [{"table": p.table, "rows": rows(p)} for p in parts]}
        return cls(key, parts, path, json.dumps(payload).encode())


@dataclass
class ProducerStats:
    attempts: int = 0
    transport_errors: int = 0
    unavailable: int = 0  # 503: starting, stopping, spill disk full
    server_errors: int = 0  # any other 5xx
    replayed: int = 0  # a retry answered with the first answer (Idempotent-Replayed)
    refused: list[str] = field(default_factory=list)  # 4xx: a request the harness got wrong, or a defect


class Producers:
    """Threads submitting numbered rows; one in every four requests carries 2-4 updates of
    several tables, sometimes two of one table (one WAL group of several records). A
    request without an answer (connection refused or reset, 503, 5xx) is sent again, same
    key and bytes, after a short back-off."""

    def __init__(
        self,
        base_url: str,
        token: str,
        seed: int,
        threads: int = 2,
        pace: float = 0.02,
        landing: Path | None = None,
    ) -> None:
        self.base_url = base_url
        #: Where one in five single-update requests puts its rows as a Parquet file.
        self.landing = landing
        self.token = token
        self.seed = seed
        self.threads = threads
        #: Seconds each thread rests between requests: enough traffic to keep every kill
        #: mid-burst without starving the service and Spark of the machine's two cores.
        self.pace = pace
        self.lock = threading.Lock()
        self.submissions: list[Submission] = []
        self.stats = ProducerStats()
        self._ids = itertools.count()
        self._keys = itertools.count()
        self._stop = threading.Event()  # finish the request in hand, then leave
        self._abandon = threading.Event()  # leave now (teardown)
        #: Set once ``alpha`` refuses negative ids: poison updates may be sent from then on.
        self.poison = threading.Event()
        self._poison_ids = itertools.count(1)
        self._workers: list[threading.Thread] = []

    @property
    def started(self) -> bool:
        return bool(self._workers)

    def acked(self) -> list[Submission]:
        with self.lock:
            return [s for s in self.submissions if s.acks is not None]

    def acked_count(self) -> int:
        with self.lock:
            return sum(s.acks is not None for s in self.submissions)

    def start(self) -> None:
        self._workers = [
            threading.Thread(target=self._run, args=(k,), name=f"producer-{k}", daemon=True)
            for k in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()

    def stop(self, timeout: float) -> bool:
        """Let each thread get its request in hand answered, then end; False if one did not."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        return not any(w.is_alive() for w in self._workers)

    def abandon(self) -> None:
        self._abandon.set()
        self._stop.set()
        for worker in self._workers:
            worker.join(30)

    def _new(self, rng: random.Random) -> Submission:
        if self.poison.is_set() and rng.random() < POISON_RATE:
            with self.lock:
                ids = [-next(self._poison_ids) for _ in range(rng.randint(1, 3))]
                landing = self.landing if rng.random() < POISON_FILE_RATE else None
                sub = Submission.build(f"sub-{next(self._keys)}", [Part(POISONED, ids)], landing)
                sub.poison = True
                self.submissions.append(sub)
            return sub
        tables = list(TABLES)
        rng.shuffle(tables)
        count = 1 if rng.random() < 0.75 else rng.randint(2, 4)
        with self.lock:
            # The first parts on distinct tables, then any: a request may hold two updates
            # of one table (one WAL group, two records, two sequence numbers).
            parts = [
                Part(tables[k] if k < 2 else rng.choice(TABLES), [next(self._ids) for _ in range(rng.randint(1, 4))])
                for k in range(count)
            ]
            # (A latest table takes rows in requests only: docs/latest-tables.md.)
            as_file = self.landing is not None and count == 1 and parts[0].table != LATEST and rng.random() < 0.2
            arrow = not as_file and count == 1 and rng.random() < 0.25
            sub = Submission.build(f"sub-{next(self._keys)}", parts, self.landing if as_file else None, arrow)
            self.submissions.append(sub)
        return sub

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1009 + index)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=httpx.Timeout(30.0, connect=2.0)) as http:
            while not self._stop.is_set():
                sub = self._new(rng)
                backoff = 0.02
                while not self.send(http, sub):
                    if self._abandon.wait(backoff):
                        return
                    backoff = min(backoff * 2, 0.4)
                if self._abandon.wait(self.pace):
                    return

    def send(self, http: httpx.Client, sub: Submission) -> bool:
        """One attempt; True once the submission is settled (202, or refused for good)."""
        with self.lock:
            sub.attempts += 1
            self.stats.attempts += 1
        try:
            r = http.post(
                sub.path, content=sub.body, headers={"Idempotency-Key": sub.key, "Content-Type": sub.content_type}
            )
        except httpx.TransportError:
            with self.lock:
                self.stats.transport_errors += 1
            return False
        with self.lock:
            if r.status_code == 503:
                self.stats.unavailable += 1
                return False
            if r.status_code >= 500:
                self.stats.server_errors += 1
                return False
            if r.status_code != 202:
                self.stats.refused.append(f"{sub.key}: {r.status_code} {r.text[:300]}")
                return True
            acks = [(u["table"], u["sequence"]) for u in r.json()["updates"]]
            if [t for t, _ in acks] != [p.table for p in sub.parts]:
                self.stats.refused.append(f"{sub.key}: 202 names tables {acks} for parts {sub.parts}")
                return True
            sub.acks = acks
            sub.replayed = r.headers.get("Idempotent-Replayed") == "true"
            self.stats.replayed += sub.replayed
        return True


# -- one life ---------------------------------------------------------------------------------
@dataclass
class Life:
    """One start of the server and how it ended."""

    index: int
    #: What was planned: a failpoint name, EXTERNAL_RECOVERY, EXTERNAL_SERVING or a worker kind.
    plan: str
    #: LOADER_FAILPOINTS of this start ("" for an external kill).
    spec: str
    #: LOADER_WORKER_FAILPOINTS of this start (``worker:<point>`` kinds).
    worker_spec: str
    #: External kills: what the delay is timed from ("start", "replay": the replay's first
    #: log line, "recovered": intake open, "ready": /readyz 200), and the delay in seconds.
    anchor: str
    delay: float | None
    #: What ended it: the failpoint, or the state an external kill met (``kill: ...``).
    hit: str
    seconds: float
    #: Complete WAL records the start had to replay.
    backlog_records: int
    #: Seconds from start to /readyz 200, if seen.
    ready_after: float | None
    #: Seconds from start to intake open (WAL replayed), if seen.
    recovered_after: float | None
    #: Seconds from start to the first log line of the WAL replay (spill reset, torn tail cut),
    #: when both it and the intake opening were seen.
    replay_seen_after: float | None
    acked_during: int
    met_spill_files: bool
    failure: str | None = None


class CrashTrial:
    """A data directory, a server, producers, and the lives they go through."""

    def __init__(
        self,
        workdir: Path,
        seed: int,
        *,
        producers: int = 2,
        mode: str = "connect",
        spark_remote: str = "",
        final_spark_remote: str = "",
        pace: float = 0.02,
        memory_budget: int = MEMORY_BUDGET,
        acceptors: int = 0,
        upsert: str = "deletion-vectors",
        log: Callable[[str], None] | None = None,
    ):
        """``final_spark_remote``: the final, clean start runs in connect mode over this
        Spark Connect server, whatever ``mode`` the killed lives ran in (a classic trial then
        starts no JVM of its own for the verdict's loads; what it proves is about the kills)."""
        self.workdir = workdir
        self.memory_budget = memory_budget
        self.final_spark_remote = final_spark_remote
        self.port = free_port()
        self.seed = seed
        self.rng = random.Random(seed)
        self.log = log or (lambda message: None)
        self.kinds = KINDS if mode == "connect" else CLASSIC_KINDS
        config = crash_config(workdir, self.port, mode, spark_remote, memory_budget, acceptors, upsert)
        self.server = ServerProcess(workdir, config, self.port, TOKEN)
        self.producers = Producers(
            self.server.base, TOKEN, seed, producers, pace=pace, landing=workdir / "data" / "landing"
        )
        self.lives: list[Life] = []
        self.failures: list[str] = []
        self.reask_mismatches: list[str] = []
        self.reasked = 0
        #: The final, clean start: WAL records it replayed and seconds until /readyz.
        self.final_backlog = 0
        self.final_ready_after: float | None = None
        #: (table, sequence) of every update in quarantine after the final load.
        self.quarantined: list[tuple[str, int]] = []
        self.started = time.monotonic()

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    def close(self) -> None:
        """Teardown on any path: producers gone, no server or JVM left running."""
        self.producers.abandon()
        if self.server.proc is not None:
            self.server.kill()
            self.server.wait_exit()

    # -- planning ---------------------------------------------------------------------------
    def _arm(self, kind: str, backlog: int) -> tuple[str, str, float]:
        """For this life (seeded): LOADER_FAILPOINTS (of the service, or for ``worker:``
        kinds of its first worker), and for an external kill the moment it is timed from
        ("start", "replay": the WAL replay began, "ready", "replaced": a worker was started
        in place of one that died) and the delay."""
        rng = self.rng
        if kind not in self.kinds:
            raise ValueError(f"unknown kill kind {kind!r}; known: {self.kinds}")
        if kind == WORKER_EXTERNAL:
            return "", "ready", rng.uniform(0.0, 4.0)  # then a worker is killed, and the life goes on
        if kind.startswith(WORKER):
            point = kind.removeprefix(WORKER)
            count = rng.randint(1, 2)
            return f"{point}={count}{self._delay(point)}", "replaced", rng.uniform(0.0, 2.0)
        if kind == EXTERNAL_RECOVERY:
            if rng.random() < 0.5:  # inside the replay of the backlog, as long as the last ones took
                took = [
                    x.recovered_after - x.replay_seen_after
                    for x in self.lives
                    if x.recovered_after is not None and x.replay_seen_after is not None
                ]
                return "", "replay", rng.uniform(0.0, statistics.median(took[-5:] or [1.0]))
            ready = statistics.median([x.ready_after for x in self.lives if x.ready_after] or [8.0])
            return "", "start", rng.uniform(0.2, ready)  # anywhere before /readyz, mostly Spark's start
        if kind == EXTERNAL_SERVING:
            return "", "ready", rng.uniform(0.0, 4.0)
        count = {
            "intake.after-wal": lambda: rng.randint(1, 60),
            "wal.after-write": lambda: rng.randint(1, 60),
            "wal.torn-write": lambda: rng.randint(1, 60),
            "recovery.replay": lambda: rng.randint(1, max(1, backlog)),
            "recovery.after-spill-reset": lambda: 1,
            "spill.write": lambda: rng.randint(1, 3),
        }.get(kind, lambda: rng.randint(1, 2))()
        return f"{kind}={count}{self._delay(kind)}", "", 0.0

    def _delay(self, point: str) -> str:
        """``@SECONDS`` for a point armed with a delay (seeded), else ""."""
        return f"@{self.rng.uniform(*MID_MERGE_DELAY):.3f}" if point == MID_MERGE else ""

    # -- running ----------------------------------------------------------------------------
    @staticmethod
    def _ready(probe: httpx.Client) -> bool:
        try:
            return probe.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def _state(self, probe: httpx.Client) -> str:
        """What the server is doing, named for the report just before an external kill."""
        if self._ready(probe):
            with contextlib.suppress(httpx.HTTPError):
                busy = sample_value(probe.get("/metrics").text, "loader_workers_busy")
                return "kill: serving, load running" if busy else "kill: serving, no load running"
            return "kill: serving"
        text = self.server.log_text()
        if RECOVERED_LINE in text:
            return "kill: recovered, Spark starting"
        if any(line in text for line in REPLAYING_LINES):
            return "kill: start-up, WAL replay"
        return "kill: start-up, intake not open yet"  # imports, WAL open, or a replay not logged

    def life(self, kind: str, failpoint_timeout: float = 240.0, ready_timeout: float = 240.0) -> Life:
        """Start the server armed for ``kind``, let the producers at it, and end it by SIGKILL.
        ``failpoint_timeout`` counts from the start: on 2 busy cores the Connect server and the
        workers alone took 57 s of a life, and a worker's failpoint must then still be met."""
        backlog = wal_records(self.data / "wal")
        spec, anchor, delay = self._arm(kind, backlog)
        worker_spec = ""
        if kind.startswith(WORKER):
            spec, worker_spec = "", spec
        acked_before = self.producers.acked_count()
        self.server.start(spec, worker_failpoints=worker_spec)
        began = time.monotonic()
        if not self.producers.started:
            self.producers.start()
        seen = {"start": 0.0}  # and "replay", "recovered", "ready" -> seconds after the start
        failure: str | None = None
        hit = ""
        deadline = began + (ready_timeout if anchor == "ready" else failpoint_timeout)
        next_probe = began
        with self.server.client(timeout=2.0) as probe:
            while True:
                now = time.monotonic()
                if not self.server.alive:
                    code = self.server.returncode
                    if spec and code == -9:
                        hit = kind
                    else:
                        failure = f"life {len(self.lives) + 1} ({kind}): the server exited by itself with code {code}"
                        hit = f"exit {code}"
                    break
                self._watch_log(seen, now - began)
                if anchor == "replay" and "replay" not in seen and "recovered" in seen:
                    anchor = "recovered"  # nothing was logged before the replay ended: time from its end
                if anchor == "replaced" and "replaced" not in seen and self._replaced():
                    seen["replaced"] = now - began
                if anchor and anchor in seen and now >= began + seen[anchor] + delay:
                    if kind == WORKER_EXTERNAL and anchor == "ready":
                        self._kill_a_worker()
                        anchor, delay = "replaced", self.rng.uniform(0.0, 2.0)
                        continue
                    hit = kind if anchor == "replaced" else self._state(probe)
                    self.server.kill()
                    break
                if now > deadline:
                    hit = self._state(probe)
                    if anchor == "ready":
                        failure = f"life {len(self.lives) + 1}: not ready after {ready_timeout:.0f} s (stuck recovery?)"
                    else:
                        hit += f" ({kind} not reached)"
                    self.server.kill()
                    break
                if "ready" not in seen and now >= next_probe:
                    next_probe = now + 0.2
                    if self._ready(probe):
                        seen["ready"] = time.monotonic() - began
                        if kind.startswith("recovery."):
                            deadline = now  # recovery is over: its failpoint can no longer fire
                        if not self.producers.poison.is_set():
                            self._alter_from_outside()
                time.sleep(0.02)
        self.server.wait_exit()
        text = self.server.log_text()
        # Its load workers have process groups of their own: the kill reaches them through
        # PR_SET_PDEATHSIG alone (a survivor would hold its Spark session past the crash).
        outlived = [pid for _, pid in self._workers_started() if not gone_within(pid, 10.0)]
        if outlived and failure is None:
            failure = f"life {len(self.lives) + 1} ({kind}): load workers {outlived} outlived the killed service"
        if failure is not None:
            failure += ":\n" + self.server.log_tail()
            self.failures.append(failure)
        life = Life(
            index=len(self.lives) + 1,
            plan=kind,
            spec=spec,
            worker_spec=worker_spec,
            anchor=anchor,
            delay=None if spec else delay,
            hit=hit,
            seconds=time.monotonic() - began,
            backlog_records=backlog,
            ready_after=seen.get("ready"),
            recovered_after=seen.get("recovered"),
            replay_seen_after=seen.get("replay") if "recovered" in seen else None,
            acked_during=self.producers.acked_count() - acked_before,
            met_spill_files=SPILL_RESET_LINE in text,
            failure=failure,
        )
        self.lives.append(life)
        timing = spec or (f"{worker_spec} " if worker_spec else "") + f"{delay:.2f} s after {anchor}"
        opened = f" (intake open at {life.recovered_after:.1f} s)" if life.recovered_after is not None else ""
        self.log(
            f"life {life.index:3d}: {life.plan:28s} {timing:34s} -> {life.hit:40s} "
            f"{life.seconds:5.1f} s, backlog {backlog}{opened}, +{life.acked_during} acks"
        )
        return life

    def _alter_from_outside(self) -> None:
        """Another tool adds ``CONSTRAINT`` to ``POISONED`` while the loader writes to it
        (a commit of its own, retried when it meets one of the loader's), then poison
        updates start."""
        path = str(self.data / "warehouse" / POISONED)
        for attempt in itertools.count(1):
            try:
                DeltaTable(path).alter.add_constraint(CONSTRAINT)
                break
            except Exception as exc:  # a concurrent commit of the loader's: read the table again
                if attempt >= 50:
                    self.failures.append(f"could not add {CONSTRAINT} to {POISONED} from outside: {exc}")
                    return
                time.sleep(0.05)
        self.log(f"outside alteration: {POISONED} now has CHECK {CONSTRAINT}; poison updates from here on")
        self.producers.poison.set()

    def _workers_started(self) -> list[tuple[int, int]]:
        """(slot, pid) of every load worker process this life started, in order."""
        return [(int(m.group(1)), int(m.group(2))) for m in WORKER_LINE.finditer(self.server.log_text())]

    def _replaced(self) -> bool:
        """A worker process was started in a slot that had one already (the first ones are
        started together; a dead one is replaced when its slot is next used)."""
        slots = [slot for slot, _ in self._workers_started()]
        return len(slots) > len(set(slots))

    def _kill_a_worker(self) -> None:
        """SIGKILL the newest worker process of a random slot (mid-batch or idle)."""
        newest = dict(self._workers_started())
        if not newest:
            return
        slot = self.rng.choice(sorted(newest))
        with contextlib.suppress(ProcessLookupError):
            os.kill(newest[slot], signal.SIGKILL)

    def _watch_log(self, seen: dict[str, float], elapsed: float) -> None:
        """Note when the start logged that the WAL replay began, and that it ended."""
        if "recovered" in seen:
            return
        text = self.server.log_text()
        if "replay" not in seen and any(line in text for line in REPLAYING_LINES):
            seen["replay"] = elapsed
        if RECOVERED_LINE in text:
            seen["recovered"] = elapsed

    def run(self, kinds: Sequence[str]) -> None:
        """One life per kind; stops at the first restart that fails (later ones would too)."""
        for kind in kinds:
            self.life(kind)
            if self.failures:
                return

    # -- the end ----------------------------------------------------------------------------
    def _reask(self, http: httpx.Client, sample: int = 20) -> None:
        """Send acknowledged requests again: each must get its first answer back, unchanged."""
        acked = self.producers.acked()
        for sub in random.Random(self.seed).sample(acked, min(sample, len(acked))):
            r = http.post(
                sub.path,
                content=sub.body,
                headers={"Idempotency-Key": sub.key, "Content-Type": sub.content_type},
            )
            self.reasked += 1
            answer = [(u["table"], u["sequence"]) for u in r.json().get("updates", [])] if r.status_code == 202 else []
            if r.status_code != 202 or answer != sub.acks or r.headers.get("Idempotent-Replayed") != "true":
                self.reask_mismatches.append(f"{sub.key}: {r.status_code} {answer} (first answer {sub.acks})")

    def finish(self, timeout: float = 300.0) -> Verdict:
        """Restart without failpoints, let producers finish, load everything, stop cleanly, verify."""
        if self.failures:
            self.producers.abandon()
            return self.verify({})
        backlog = wal_records(self.data / "wal")
        if self.final_spark_remote:
            crash_config(self.workdir, self.port, "connect", self.final_spark_remote, self.memory_budget)
        self.server.start("")
        began = time.monotonic()
        try:
            self.server.wait_ready(timeout)
        except TimeoutError as exc:
            self.failures.append(f"final start: {exc}")
        if not self.server.alive:
            self.failures.append(f"final start: exited with {self.server.returncode}:\n{self.server.log_tail()}")
        if self.failures:
            self.producers.abandon()
            return self.verify({})
        self.final_backlog, self.final_ready_after = backlog, time.monotonic() - began
        self.log(f"final start: ready after {self.final_ready_after:.1f} s, backlog {backlog} records")
        if not self.producers.stop(timeout):
            self.failures.append("producers could not get their last requests answered")
        status: dict[str, dict[str, Any]] = {}
        with self.server.client() as http:
            self._reask(http)
            last = self.last_acked_seq(loadable=True)
            deadline = time.monotonic() + timeout
            while True:
                status = {t: http.get(f"/v1/tables/{t}").json() for t in TABLES}
                settled = all(status[t]["pending_updates"] == 0 and not status[t]["running"] for t in TABLES)
                if settled and all(status[t]["last_loaded_sequence"] >= last.get(t, 0) for t in TABLES):
                    view = http.get(f"/v1/tables/{VIEW}").json()
                    if view["pending_updates"] == 0 and not view["running"]:
                        break
                if time.monotonic() > deadline:
                    view = http.get(f"/v1/tables/{VIEW}").json()
                    self.failures.append(
                        f"acknowledged updates (or the view's input commits) not loaded after {timeout:.0f} s: "
                        f"{status}; view: {view}"
                    )
                    break
                time.sleep(0.1)
            self.quarantined = [
                (entry["table"], seq)
                for entry in http.get("/v1/admin/quarantine").json()["batches"]
                for seq in range(entry["first_sequence"], entry["last_sequence"] + 1)
            ]
        code = self.server.terminate()
        if CLEAN_STOP_LINE not in self.server.log_text():
            self.failures.append(f"the last stop was not clean:\n{self.server.log_tail()}")
        if code != 0:  # service managers read anything else as a failure
            self.failures.append(f"a clean stop on SIGTERM exited with status {code}, not 0")
        return self.verify(status)

    def last_acked_seq(self, loadable: bool = False) -> dict[str, int]:
        """Per table the last acknowledged sequence (``loadable``: of updates that can load,
        which the Delta transaction version reaches; a poison update is quarantined)."""
        last: dict[str, int] = {}
        for sub in self.producers.acked():
            if loadable and sub.poison:
                continue
            for table, seq in sub.acks or ():
                last[table] = max(last.get(table, 0), seq)
        return last

    def verify(self, status: dict[str, dict[str, Any]]) -> Verdict:
        """Every table read back independently and compared with what was acknowledged."""
        everything = self.producers.acked()
        acked = [s for s in everything if not s.poison]
        poison = [s for s in everything if s.poison]
        acked_keys = {s.key for s in everything}
        owners: dict[tuple[str, int], set[str]] = {}
        for sub in everything:
            for table, seq in sub.acks or ():
                owners.setdefault((table, seq), set()).add(sub.key)
        last, last_any = self.last_acked_seq(loadable=True), self.last_acked_seq()
        poison_ids = {i for s in poison for p in s.parts for i in p.ids}
        poison_seqs = {ack for s in poison for ack in s.acks or ()}
        quarantined = set(self.quarantined)
        checks = []
        for table in TABLES:
            expected = Counter(i for s in acked for p in s.parts if p.table == table for i in p.ids)
            acked_rows = sum(expected.values())
            superseded: set[int] = set()
            if table == LATEST:  # one row per key: its value in the latest acknowledged update
                expected = Counter(newest_per_key(acked))
                superseded = {i for s in acked for p in s.parts if p.table == table for i in p.ids} - set(expected)
            unacked = Counter(
                i
                for s in self.producers.submissions
                if s.key not in acked_keys
                for p in s.parts
                if p.table == table
                for i in p.ids
            )
            path = self.data / "warehouse" / table
            loaded: Counter[int] = Counter()
            txn: int | None = None
            duck: int | None = None
            if (path / "_delta_log").is_dir():
                loaded = Counter(read_delta(path).column("id").to_pylist())
                txn = DeltaTable(str(path)).transaction_version(app_id(table))
                duck = duckdb_rows(path)
            checks.append(
                TableCheck(
                    table=table,
                    acked_updates=sum(1 for s in acked for p in s.parts if p.table == table),
                    acked_rows=acked_rows,
                    loaded_rows=sum(loaded.values()),
                    lost=sum(max(0, n - loaded[i]) for i, n in expected.items()),
                    duplicated=sum(max(0, n - expected[i]) for i, n in loaded.items() if i in expected),
                    phantom=sum(
                        n
                        for i, n in loaded.items()
                        if i not in expected and i not in unacked and i not in superseded and i not in poison_ids
                    ),
                    poison_loaded=sum(n for i, n in loaded.items() if i in poison_ids and table == POISONED),
                    superseded_loaded=sum(n for i, n in loaded.items() if i in superseded),
                    unacked_loaded=sum(n for i, n in loaded.items() if i in unacked and i not in expected),
                    txn_version=txn,
                    last_acked_seq=last.get(table, 0),
                    last_acked_any_seq=last_any.get(table, 0),
                    last_sequence=status.get(table, {}).get("last_sequence"),
                    staging_dirs=len(list(path.glob(f"{STAGING_PREFIX}*"))) if path.is_dir() else 0,
                    duckdb_rows=duck,
                )
            )
        logs = sorted(self.workdir.glob("server-*.log"))
        # A quarantined update keeps its copy of a landing file (for a retry): not a leak.
        quarantine = QuarantineStore.open(self.data / "state" / "quarantine")
        kept_aside = {f.path for entry in quarantine.active() for u in entry.updates for f in u.file_refs()}
        return Verdict(
            tables=checks,
            view=view_check(self.data / "warehouse"),
            lives=list(self.lives),
            acked_requests=len(everything),
            sequence_reused=sum(1 for keys in owners.values() if len(keys) > 1),
            producer=self.producers.stats,
            reasked=self.reasked,
            reask_mismatches=list(self.reask_mismatches),
            restarts_met_spill_files=sum(SPILL_RESET_LINE in p.read_text(errors="replace") for p in logs),
            failures=list(self.failures),
            poison_updates=len(poison_seqs),
            poison_not_quarantined=len(poison_seqs - quarantined),
            good_quarantined=len(quarantined - poison_seqs),
            acked_file_updates=sum(1 for s in acked if s.file),
            acked_arrow_updates=sum(1 for s in acked if s.content_type != "application/json"),
            copies_left=sum(
                1 for path in (self.data / "landed").glob("*/*") if path.is_file() and str(path) not in kept_aside
            ),
            final_backlog_records=self.final_backlog,
            final_ready_after=self.final_ready_after,
            seconds=time.monotonic() - self.started,
        )


# -- the verdict ------------------------------------------------------------------------------
def newest_per_key(acked: Sequence[Submission]) -> list[int]:
    """The ids the latest table must hold: per key, the value of the acknowledged update with
    the largest sequence number, the last of its rows (arrival order; no ``order_by``)."""
    newest: dict[int, tuple[int, int, int]] = {}
    for sub in acked:
        for part, (_, seq) in zip(sub.parts, sub.acks or ()):
            if part.table != LATEST:
                continue
            for position, i in enumerate(part.ids):
                if i % KEYS not in newest or (seq, position) > newest[i % KEYS][:2]:
                    newest[i % KEYS] = (seq, position, i)
    return [i for _, _, i in newest.values()]


def duckdb_rows(path: Path) -> int | None:
    """Rows DuckDB reads from the Parquet files the Delta log lists, each file's deleted rows
    (its deletion vector) left out (a second reader: testing.tables.read_duckdb)."""
    return read_duckdb(path).num_rows


def view_check(warehouse: Path) -> ViewCheck:
    """The view read back, against the join recomputed from its inputs' Delta tables."""
    path = warehouse / VIEW
    inputs = ("alpha", LATEST)
    present = {t: (warehouse / t / "_delta_log").is_dir() for t in inputs}
    rows = {t: read_delta(warehouse / t).to_pylist() if present[t] else [] for t in inputs}
    quotes = {r["k"]: r["id"] for r in rows[LATEST]}
    expected = Counter((r["id"], quotes[r["k"]]) for r in rows["alpha"] if r["k"] in quotes)
    held: Counter[tuple[int, int]] = Counter()
    versions: dict[str, int | None] = {t: None for t in inputs}
    if (path / "_delta_log").is_dir():
        for r in read_delta(path).to_pylist():
            held[(r["id"], r["quote_id"])] += r["__loader_count"]
        table = DeltaTable(str(path))
        versions = {t: table.transaction_version(view_app_id(VIEW, t)) for t in inputs}
    current = {t: DeltaTable(str(warehouse / t)).version() for t in inputs if present[t]}
    return ViewCheck(
        VIEW,
        expected_rows=sum(expected.values()),
        view_rows=sum(held.values()),
        missing=sum((expected - held).values()),
        extra=sum((held - expected).values()),
        versions_held=versions,
        input_versions=current,
    )


@dataclass
class ViewCheck:
    """The join view after the last load: it must equal the join of its inputs as they are."""

    view: str
    expected_rows: int
    view_rows: int
    #: Rows of the recomputed join the view lacks, and rows it holds beyond it (multiset).
    missing: int
    extra: int
    #: Per input: the version the view's application transaction holds, and the input's own.
    versions_held: dict[str, int | None]
    input_versions: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """(An input's version may be past the one held: compaction commits change no data.)"""
        return (
            self.missing == self.extra == 0
            and bool(self.versions_held)
            and all(v is not None and v <= self.input_versions.get(t, -1) for t, v in self.versions_held.items())
        )


@dataclass
class TableCheck:
    table: str
    acked_updates: int
    acked_rows: int
    loaded_rows: int
    #: Acknowledged rows missing from the table (counted with multiplicity; a latest
    #: table: keys not holding their newest acknowledged value).
    lost: int
    #: Extra copies of acknowledged rows.
    duplicated: int
    #: Rows no producer ever sent.
    phantom: int
    #: Rows of requests that never got a 202 (allowed: durable before the kill; cannot
    #: happen here since every request is retried until answered).
    unacked_loaded: int
    txn_version: int | None
    #: The last acknowledged sequence of an update that can load (what the transaction
    #: version reaches), and of any update (poison included: what intake numbered last).
    last_acked_seq: int
    last_acked_any_seq: int
    last_sequence: int | None
    staging_dirs: int
    duckdb_rows: int | None
    #: A latest table's rows holding a value a later acknowledged one replaced (a key's
    #: older value left behind, or loaded after its newer one).
    superseded_loaded: int = 0
    #: Rows of poison updates in the table (the table's own constraint refuses them).
    poison_loaded: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.lost == self.duplicated == self.phantom == self.unacked_loaded == self.staging_dirs == 0
            and self.poison_loaded == 0
            and self.superseded_loaded == 0
            and self.txn_version == self.last_acked_seq
            and self.last_sequence in (None, self.last_acked_any_seq)
            and self.duckdb_rows in (None, self.loaded_rows)
        )


@dataclass
class Verdict:
    tables: list[TableCheck]
    view: ViewCheck
    lives: list[Life]
    acked_requests: int
    sequence_reused: int
    producer: ProducerStats
    reasked: int
    reask_mismatches: list[str]
    restarts_met_spill_files: int
    failures: list[str]
    #: Poison updates acknowledged; of them not in quarantine at the end (loaded, or lost
    #: from sight); good updates in quarantine (held back by a poison beside them).
    poison_updates: int
    poison_not_quarantined: int
    good_quarantined: int
    #: Acknowledged updates whose rows came in a landing file.
    acked_file_updates: int
    #: Acknowledged updates sent as Arrow IPC streams.
    acked_arrow_updates: int
    #: The service's copies of landing files still on disk after everything loaded (a leak:
    #: copies of loaded updates are deleted, copies nobody refers to are swept at start).
    copies_left: int
    final_backlog_records: int
    final_ready_after: float | None
    seconds: float

    @property
    def kills(self) -> int:
        return len(self.lives)

    @property
    def acked_updates(self) -> int:
        return sum(t.acked_updates for t in self.tables)

    @property
    def acked_rows(self) -> int:
        return sum(t.acked_rows for t in self.tables)

    @property
    def lost(self) -> int:
        return sum(t.lost for t in self.tables)

    @property
    def duplicated(self) -> int:
        return sum(t.duplicated for t in self.tables)

    def hits(self) -> Counter[str]:
        return Counter(life.hit for life in self.lives)

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and all(t.ok for t in self.tables)
            and self.view.ok
            and self.sequence_reused == 0
            and not self.reask_mismatches
            and not self.producer.refused
            and self.producer.server_errors == 0
            and self.copies_left == 0
            and self.poison_not_quarantined == self.good_quarantined == 0
        )

    def problems(self) -> list[str]:
        """Everything that is wrong, in words (empty when ``ok``)."""
        out = list(self.failures)
        for t in self.tables:
            if not t.ok:
                out.append(f"table {t.table}: {t}")
        if not self.view.ok:
            out.append(f"view {self.view.view}: {self.view}")
        if self.sequence_reused:
            out.append(f"{self.sequence_reused} sequence numbers acknowledged to two requests")
        out += [f"re-sent request answered differently: {m}" for m in self.reask_mismatches]
        out += [f"request refused: {m}" for m in self.producer.refused]
        if self.producer.server_errors:
            out.append(f"{self.producer.server_errors} answers were 5xx other than 503")
        if self.copies_left:
            out.append(f"{self.copies_left} copies of landing files left after everything loaded")
        if self.poison_not_quarantined:
            out.append(f"{self.poison_not_quarantined} of {self.poison_updates} poison updates are not in quarantine")
        if self.good_quarantined:
            out.append(f"{self.good_quarantined} good updates were quarantined beside a poison one")
        return out
