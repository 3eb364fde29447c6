"""Kill -9 under load, at the steps where exactly-once is decided, and restart.

One data directory lives through several crashes of ``loader serve`` (a subprocess on
loopback, Spark included). Each life is ended by SIGKILL at a different point: a
failpoint (loader/failpoints.py) inside a load or between the WAL fsync and the 202, and
finally a kill from outside at whatever moment the producers have reached. Producers
send every update with an Idempotency-Key and retry the ones left without an answer,
as a real producer does. In the end each table holds every update exactly once.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable

from loader.sinks.base import app_id
from tests.server_process import ServerProcess, free_port, write_config
from tests.tables import read_delta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TOKEN = "crash-test-operator-token-0001"
TABLES = ("alpha", "beta")
SCHEMA = {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "note", "type": "string"}]}

#: The lives of the server: the failpoint that ends each (None: killed from outside).
LIVES = (
    "load.after-commit=3",  # committed to Delta, not yet noted: the replay must be skipped
    "load.after-publish=2",  # files in the table directory, no commit: must be redone
    "load.after-spark-write=2",  # staging written: must be redone, staging cleaned
    "intake.after-wal=25",  # durable but unanswered: the retry must get the first answer
    None,  # SIGKILL of the whole process group after some more acknowledgements
)


@dataclass
class Submission:
    key: str
    table: str
    ids: list[int]


class Producers:
    """Threads submitting numbered rows; a submission without an answer is retried later."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.lock = threading.Lock()
        self.acked: dict[str, tuple[str, int]] = {}
        self.unsure: list[Submission] = []
        self.sent: list[Submission] = []
        self.replayed = 0
        self._ids = itertools.count()

    def _submit(self, http: httpx.Client, sub: Submission) -> bool:
        body = {"rows": [{"id": i, "note": f"row {i}"} for i in sub.ids]}
        try:
            r = http.post(f"/v1/tables/{sub.table}/updates", json=body, headers={"Idempotency-Key": sub.key})
        except httpx.TransportError:
            return False
        if r.status_code == 503:  # shutting down or not started: not accepted, retry later
            return False
        assert r.status_code == 202, r.text
        ack = r.json()["updates"][0]
        with self.lock:
            if sub.key in self.acked:
                assert self.acked[sub.key] == (ack["table"], ack["sequence"])
            self.acked[sub.key] = (ack["table"], ack["sequence"])
            self.replayed += r.headers.get("Idempotent-Replayed") == "true"
        return True

    def retry_unsure(self) -> None:
        with self.server.client() as http:
            while self.unsure:
                sub = self.unsure[0]
                assert self._submit(http, sub), f"retry of {sub.key} failed:\n{self.server.log_tail()}"
                self.unsure.pop(0)

    def _loop(self, stop: threading.Event) -> None:
        with self.server.client() as http:
            while not stop.is_set():
                with self.lock:
                    n = next(self._ids)
                    sub = Submission(f"sub-{n}", TABLES[n % 2], [n * 10 + k for k in range(1 + n % 4)])
                    self.sent.append(sub)
                if not self._submit(http, sub):
                    with self.lock:
                        self.unsure.append(sub)
                    return

    def run(self, threads: int = 2) -> tuple[threading.Event, list[threading.Thread]]:
        stop = threading.Event()
        workers = [threading.Thread(target=self._loop, args=(stop,), daemon=True) for _ in range(threads)]
        for worker in workers:
            worker.start()
        return stop, workers


def wait_for(predicate, timeout: float, what: str, server: ServerProcess) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout}s:\n{server.log_tail()}")
        time.sleep(0.05)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": 2,
            "policy": "myopic",
            "spark": {"master": "local[2]"},
            # truncate the WAL often, so crashes also meet truncated and rolled segments
            "maintenance": {"wal_truncate_seconds": 1, "compact_seconds": 0, "vacuum_seconds": 0},
            # a tiny memory budget, so pending updates spill and crashes meet spill files too
            "spill": {"memory_budget_bytes": 65536},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": [{"name": name, "schema": SCHEMA} for name in TABLES],
        },
    )
    proc = ServerProcess(tmp_path, config, port, TOKEN)
    yield proc
    if proc.alive:
        proc.kill()


def test_sigkill_at_every_step_loses_and_duplicates_nothing(server: ServerProcess) -> None:
    producers = Producers(server)
    expect_replay = False
    for failpoint in (*LIVES, "end"):
        server.start(failpoint if failpoint not in (None, "end") else "")
        if not server.wait_ready():
            assert failpoint and failpoint.startswith("load."), server.log_tail()
            continue  # the recovered backlog alone reached the failpoint
        replayed = producers.replayed
        producers.retry_unsure()
        if expect_replay:  # the update killed between fsync and 202 was durable: same answer
            assert producers.replayed > replayed, "the unanswered durable update was not replayed"
            expect_replay = False
        if failpoint == "end":
            break
        acked_before = len(producers.acked)
        stop, threads = producers.run()
        if failpoint is None:
            wait_for(lambda n=acked_before + 60: len(producers.acked) >= n, 120, "60 more acks", server)
            server.kill()
        else:
            wait_for(lambda: not server.alive, 120, f"failpoint {failpoint}", server)
            server.wait_exit()
        stop.set()
        for thread in threads:
            thread.join(60)
        if failpoint and failpoint.startswith("intake."):
            assert producers.unsure, "the kill between fsync and answer left no request unanswered"
            expect_replay = True

    with server.client() as http:
        last = {t: max(seq for table, seq in producers.acked.values() if table == t) for t in TABLES}
        wait_for(
            lambda: all(http.get(f"/v1/tables/{t}").json()["last_loaded_sequence"] >= last[t] for t in TABLES),
            180,
            "every acknowledged update loaded",
            server,
        )
        status = {t: http.get(f"/v1/tables/{t}").json() for t in TABLES}
    server.terminate()  # uvicorn re-raises SIGTERM after its graceful shutdown
    assert "stopped cleanly" in server.log_tail(), server.log_tail()

    assert len(producers.acked) == len(producers.sent) >= 150
    for table in TABLES:
        mine = [s for s in producers.sent if s.table == table]
        seqs = sorted(producers.acked[s.key][1] for s in mine)
        assert seqs == sorted(set(seqs)), f"{table}: one sequence number acknowledged twice"
        expected = sorted(i for s in mine for i in s.ids)
        path = server.workdir / "data" / "warehouse" / table
        loaded = sorted(r["id"] for r in read_delta(path).to_pylist())
        assert loaded == expected, f"{table}: {len(loaded)} rows loaded, {len(expected)} acknowledged"
        assert DeltaTable(str(path)).transaction_version(app_id(table)) == last[table] == status[table]["last_sequence"]
        assert not list(path.glob(".staging-*")), "a staging directory outlived the restart"
    logs = [p.read_text(errors="replace") for p in server.workdir.glob("server-*.log")]
    assert any("spill files of an earlier run" in text for text in logs), "no restart met spill files"
