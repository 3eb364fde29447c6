"""The producer client against a real ``loader serve`` (docs/producers.md): while a stream of
rows of three tables goes through a proxy that holds every fifth answer past the producer's
timeout (the service committed it), intake answers 503 (a paused table fills the spill
budget), and the service is killed with SIGKILL and started again, every row lands in
Delta exactly once, and each table's updates take their sequence numbers in send order.
Then a durable producer process is killed twice mid-stream and started again: it resumes
at its journaled checkpoint and loads every row exactly once. Last, sends coalesced into an
update beyond what the service can ever hold (413) are split and all land, and a send too
big alone fails with the service's budget. (One service, started twice: a start costs Spark's.)"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from producer import LoaderProducer, RequestRefused
from testing.answer_dropper import answer_dropper
from testing.server_process import ServerProcess, free_port, write_config
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OPERATOR = "producer-test-operator-token-01"
PRODUCER = "producer-test-producer-token-01"
TABLES = ("a", "b", "c")
SCHEMA = {"columns": [{"name": "n", "type": "int64", "nullable": False}, {"name": "pad", "type": "string"}]}


def wait(condition: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def loaded(server: ServerProcess, table: str) -> list[int]:
    path = server.workdir / "data" / "warehouse" / table
    return sorted(read_delta(path).column("n").to_pylist()) if (path / "_delta_log").is_dir() else []


def test_every_row_lands_once_in_order_through_lost_answers_503s_and_a_killed_service(
    tmp_path: Path, connect_server: ConnectEndpoint
) -> None:
    port = free_port()
    budget = 64 << 10
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": port,
            "data_dir": str(tmp_path / "data"),
            "workers": 2,
            "spark": {"master": "local[2]", "mode": "connect", "remote": connect_server.url},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "spill": {"memory_budget_bytes": budget, "disk_budget_bytes": 4 * budget, "retry_after_seconds": 1},
            "auth_tokens": [
                {"name": "ops", "token": OPERATOR, "role": "operator"},
                {"name": "feeds", "token": PRODUCER, "role": "producer"},
            ],
            "tables": [{"name": t, "schema": SCHEMA} for t in (*TABLES, "d")],
        },
    )
    server = ServerProcess(tmp_path, config, port, OPERATOR)
    server.start()
    assert server.wait_ready(), server.log_tail()
    try:
        with answer_dropper(server.base, every=4, hold=2.0) as (url, proxy):
            sent = {t: 0 for t in TABLES}
            acks: dict[str, list[tuple[int, int]]] = {t: [] for t in TABLES}
            errors: list[BaseException] = []
            pad = "x" * 300

            def acked(table: str, n: int, future: Any) -> None:
                if future.exception() is not None:
                    errors.append(future.exception())
                else:
                    acks[table].append((n, future.result().sequence))

            with LoaderProducer(
                url=url,
                token=PRODUCER,
                linger=0.01,
                request_timeout=1.0,
                retry_backoff_max=1.0,
                delivery_timeout=None,
                max_in_flight=3,
            ) as producer:

                def stream(rounds: int) -> None:
                    for _ in range(rounds):
                        for table in TABLES:
                            first = sent[table]
                            rows = [{"n": first + i, "pad": pad} for i in range(20)]
                            producer.send(table, rows).add_done_callback(lambda f, t=table, n=first: acked(t, n, f))
                            sent[table] += 20
                        time.sleep(0.01)

                stream(15)  # answers lost on the way back
                with server.client() as http:  # a paused table fills the spill budget: intake answers 503
                    assert http.post("/v1/admin/tables/d/pause").status_code == 200
                    refused = 0
                    for k in range(300):
                        answer = http.post("/v1/tables/d/updates", json={"rows": [{"n": k, "pad": pad * 10}] * 20})
                        if answer.status_code == 503:
                            refused += 1
                            break
                    assert refused, "the spill budget was never reached"
                    stream(10)  # retried after Retry-After while intake refuses
                    assert http.post("/v1/admin/tables/d/resume").status_code == 200
                stream(10)
                server.kill()  # a crash mid-stream: requests fail until it is back
                stream(10)
                server.start()
                assert server.wait_ready(), server.log_tail()
                stream(10)
                producer.flush(timeout=180)
                metrics = producer.metrics()
            assert not errors, errors[:3]
            assert proxy.dropped >= 3 and metrics.replayed >= 1 and metrics.retried >= proxy.dropped
        for table in TABLES:
            with server.client() as http:
                last = http.get(f"/v1/tables/{table}").json()["last_sequence"]
                wait(lambda t=table, s=last: http.get(f"/v1/tables/{t}").json()["last_loaded_sequence"] >= s, table)
            assert loaded(server, table) == list(range(sent[table])), table  # every row, once
            in_send_order = [seq for _, seq in sorted(acks[table])]
            assert in_send_order == sorted(in_send_order), table  # sequences follow the send order

        # A durable producer killed mid-stream, twice, then left to finish: exactly once.
        state = tmp_path / "producer-state"
        count = 4_000
        command = [sys.executable, "-m", "testing.producer_run", server.base, PRODUCER, str(state), "a", str(count)]
        for life in range(3):
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if life < 2:
                threading.Event().wait(1.0 + 0.5 * life)
                assert process.poll() is None, "the producer finished before it could be killed"
                process.kill()
                process.wait(30)
            else:
                output, _ = process.communicate(timeout=300)
                assert process.returncode == 0 and b"done" in output, output[-2000:]
        with server.client() as http:
            last = http.get("/v1/tables/a").json()["last_sequence"]
            wait(lambda: http.get("/v1/tables/a").json()["last_loaded_sequence"] >= last, "a")
        rows = loaded(server, "a")
        assert rows == sorted(list(range(sent["a"])) + list(range(count)))  # the first part's rows, and these once

        # Twenty sends that each fit the service, coalesced into one update it can never hold
        # (413 BeyondCapacity): split into the sends, every row lands once. A send too big on
        # its own fails, and says what the service can hold (its 413 answer's budget).
        with LoaderProducer(url=server.base, token=PRODUCER, linger=30.0, delivery_timeout=None) as producer:
            chunks = [[{"n": 10_000 + 100 * k + i, "pad": pad} for i in range(100)] for k in range(20)]
            futures = [producer.send("d", chunk) for chunk in chunks]
            producer.flush(timeout=300)
            assert [f.result().key.rsplit("/", 1)[1] for f in futures] == [f"0.{k}" for k in range(20)]
            huge = producer.send("d", [{"n": -1 - i, "pad": pad} for i in range(1_500)])
            producer.flush(timeout=300)
            with pytest.raises(RequestRefused) as refused:
                huge.result()
        error = refused.value
        assert error.status == 413 and error.body["capacity_bytes"] == 5 * budget, error.body
        assert "this send (1500 rows) alone is more than the service can ever hold at once" in str(error)
        assert f"holds {5 * budget:,} bytes ({budget:,} in memory, {4 * budget:,} on its spill disk)" in str(error)
        with server.client() as http:
            last = http.get("/v1/tables/d").json()["last_sequence"]
            wait(lambda: http.get("/v1/tables/d").json()["last_loaded_sequence"] >= last, "d")
        numbers = [n for n in loaded(server, "d") if n >= 10_000 or n < 0]
        assert numbers == list(range(10_000, 12_000))  # each send's rows once, the huge send's none
    finally:
        if server.alive:
            server.kill()
