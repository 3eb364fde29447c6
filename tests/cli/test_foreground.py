"""``loader serve`` and ``loader demo`` as a newcomer, a terminal and a supervisor see them
(cli/foreground.py): no failed load on the demo's own configuration run from anywhere, a
clean stop with status 0 on SIGINT or SIGTERM sent to the process group or to the process
alone, and an error it anticipates at start told in one message, with no stack trace.

Every service log here is read by the suite's guard (testing/log_guard.py): an ERROR line,
a failed load attempt among them, fails the test unless it is allowed by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from loader.durability.wal import WriteAheadLog
from producer import LoaderProducer
from testing.server_process import SPARK_SERVER_LINE, WORKER_LINE, ServerProcess, free_port, until_gone, write_config
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

OPERATOR = "operator-token-0123456789"
PRODUCER = "producer-token-0123456789"
ORDERS = {
    "name": "orders",
    "schema": {"columns": [{"name": "order_id", "type": "int64"}, {"name": "amount", "type": "float64"}]},
}


def all_loaded(http: httpx.Client) -> bool:
    tables = http.get("/v1/tables").json()["tables"]
    return len(tables) == 4 and all(t["last_loaded_sequence"] >= 1 for t in tables)


def wait_for_optional(check: Callable[[], object], seconds: float) -> bool:
    """Poll ``check`` for at most ``seconds``; whether it came true (nothing fails either way)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if check():
                return True
        time.sleep(0.2)
    return False


def wait_for(
    what: str, check: Callable[[], object], server: ServerProcess, timeout: float = 240.0, poll: float = 0.2
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive:
            raise AssertionError(f"the service ended while waiting for {what}:\n{server.log_tail()}")
        try:
            found = check()
        except httpx.TransportError:
            found = None
        if found:
            return found
        time.sleep(poll)
    raise AssertionError(f"no {what} within {timeout:.0f} s:\n{server.log_tail()}")


def stop(server: ServerProcess, sig: signal.Signals, to_group: bool) -> int:
    """A terminal's Ctrl-C reaches the whole foreground process group; ``kill -INT <pid>``,
    ``timeout -s INT``, a supervisor or an IDE's stop button reach the process alone."""
    assert server.proc is not None
    if to_group:
        os.killpg(server.proc.pid, sig)
    else:
        server.proc.send_signal(sig)
    return server.wait_exit(180)


def assert_clean_stop(server: ServerProcess, code: int, sig: signal.Signals) -> None:
    text = server.log_text()
    assert code == 0, text[-4000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-4000:]
    assert text.count(f"{sig.name} received: stopping (running loads finish first)") == 1, text[-4000:]
    assert text.rstrip().splitlines()[-1].endswith(
        "stopped cleanly: running batches finished, WAL closed, catalog saved"
    ), text[-4000:]


def multi_table_jobs(http: httpx.Client) -> float:
    """Batches loaded in Spark jobs of more than one table (a group job), from /metrics."""
    text = http.get("/metrics").text
    count = float(re.search(r"^loader_batch_job_tables_count (\S+)", text, re.M).group(1))  # type: ignore[union-attr]
    alone = float(re.search(r'^loader_batch_job_tables_bucket\{le="1.0"\} (\S+)', text, re.M).group(1))  # type: ignore[union-attr]
    return count - alone


@pytest.mark.slow
def test_the_demo_run_from_another_directory_loads_with_no_failed_attempt_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """The demo's own configuration (relative ``data_dir``, connect mode, group jobs), from a
    working directory that is not the repository's: a relative hand-off path used to fail
    each group job's first attempt in the Spark Connect server's processes."""
    port = free_port()
    demo = ServerProcess(tmp_path, None, port, OPERATOR, args=["demo", "--port", str(port)])
    demo.start()
    try:
        tokens = tmp_path / "data" / "tokens.json"
        wait_for("generated tokens", tokens.exists, demo)
        operator = next(t["token"] for t in json.loads(tokens.read_text()) if t["role"] == "operator")
        with httpx.Client(base_url=demo.base, headers={"Authorization": f"Bearer {operator}"}, timeout=10) as http:
            # Every table loaded; and, when the policy grouped tables (it does not always: on a
            # slow machine a load's per-row cost can outweigh a job's overhead), group jobs too,
            # the path the relative hand-off directory once failed.
            wait_for("every table loaded", lambda: all_loaded(http), demo)
            wait_for_optional(lambda: multi_table_jobs(http) >= 1, seconds=60)
            loaded = {t["name"]: t["last_loaded_sequence"] for t in http.get("/v1/tables").json()["tables"]}
        assert set(loaded) == {"clicks", "orders", "payments", "inventory"} and all(loaded.values()), loaded
        code = stop(demo, signal.SIGINT, to_group=True)
    finally:
        if demo.alive:
            demo.kill()
    assert_clean_stop(demo, code, signal.SIGINT)
    text = demo.log_text()
    assert f"serving on http://127.0.0.1:{port}; data in {tmp_path / 'data'}" in text
    assert "failed (attempt" not in text
    # Its Spark Connect server and load workers have process groups of their own (Ctrl-C does
    # not reach them): the service stopped them.
    started = SPARK_SERVER_LINE.search(text)
    workers = [int(m.group(2)) for m in WORKER_LINE.finditer(text)]
    assert started and workers, text[-4000:]
    until_gone(int(started.group(2)), 30)
    for pid in workers:
        until_gone(pid, 30, "a load worker")


def _serve(tmp_path: Path, spark_remote: str = "", **extra: object) -> ServerProcess:
    port = free_port()
    settings = {
        "port": port,
        "data_dir": "data",  # relative: anchored at the working directory (tmp_path)
        "workers": 1,
        "spark": {"master": "local[1]", **({"remote": spark_remote} if spark_remote else {})},
        "auth_tokens": [
            {"token": OPERATOR, "role": "operator", "name": "ops"},
            {"token": PRODUCER, "role": "producer", "name": "feed"},
        ],
        "tables": [ORDERS],
        **extra,
    }
    return ServerProcess(tmp_path, write_config(tmp_path / "loader.toml", settings), port, OPERATOR)


@pytest.fixture
def feeding(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, list[int]]]:
    """A ``loader serve`` that has loaded three updates and acknowledged a fourth just now
    (its load likely running when the signal comes); yields it and the acknowledged sequences.
    Param "own": the service starts its own Spark Connect server (and must stop it); "remote":
    it uses the test process's (tests/spark_fixtures.py), a JVM start less per start."""
    remote = request.getfixturevalue("connect_server").url if request.param == "remote" else ""
    server = _serve(tmp_path, spark_remote=remote)
    server.start()
    acknowledged: list[int] = []
    try:
        assert server.wait_ready(), server.log_tail()
        with LoaderProducer(url=server.base, token=PRODUCER, linger=0.0) as producer, server.client() as http:

            def loaded() -> bool:
                rows = [{"order_id": len(acknowledged), "amount": 1.5}]
                acknowledged.append(producer.send("orders", rows).result(timeout=60).sequence)
                return http.get("/v1/tables/orders").json()["last_loaded_sequence"] >= 3

            wait_for("three updates loaded", loaded, server)
            rows = [{"order_id": n, "amount": 2.5} for n in range(10_000)]
            acknowledged.append(producer.send("orders", rows).result(timeout=60).sequence)
        yield server, acknowledged
    finally:
        if server.alive:
            server.kill()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "to_group", "feeding"),
    # All over the test process's Spark server: that a stop signal takes the service's own
    # server along is the demo's test above (Ctrl-C) and test_connect_mode's (SIGTERM).
    [(signal.SIGTERM, False, "remote"), (signal.SIGINT, False, "remote"), (signal.SIGTERM, True, "remote")],
    ids=["SIGTERM-to-the-process", "SIGINT-to-the-process", "SIGTERM-to-the-group"],
    indirect=["feeding"],
)
def test_a_stop_signal_either_way_stops_serve_cleanly_with_status_0(
    feeding: tuple[ServerProcess, list[int]], sig: signal.Signals, to_group: bool, connect_server: ConnectEndpoint
) -> None:
    """(SIGINT to the group, a terminal's Ctrl-C, is the demo's test above.) Running loads
    finish first; what was acknowledged and not yet loaded stays in the WAL and loads at the
    next start, once."""
    server, acknowledged = feeding
    code = stop(server, sig, to_group)
    assert_clean_stop(server, code, sig)
    # The restart is about the WAL, not the Spark server: over the test process's (a JVM start less).
    server, first = _serve(server.workdir, spark_remote=connect_server.url), server
    server.starts = first.starts  # (its log is the next one, not the first's again)
    server.start()
    try:
        with server.client() as http:
            wait_for(
                "the acknowledged updates loaded after a restart",
                lambda: http.get("/v1/tables/orders").json()["last_loaded_sequence"] == max(acknowledged),
                server,
            )
    finally:
        server.terminate()
    table = read_delta(server.workdir / "data" / "warehouse" / "orders")
    assert len(table) == len(acknowledged) - 1 + 10_000


@pytest.mark.slow
def test_a_signal_during_start_up_stops_the_service_once_it_has_started(
    tmp_path: Path, connect_server: ConnectEndpoint
) -> None:
    """Over the test process's Spark server: intake opens before loading has started (the
    load workers start and connect), and the signal comes in between."""
    server = _serve(tmp_path, spark_remote=connect_server.url)
    server.start()
    try:
        wait_for("intake open", lambda: "serving on" in server.log_text(), server, poll=0.01)
        code = stop(server, signal.SIGINT, to_group=False)  # loading is still starting
    finally:
        if server.alive:
            server.kill()
    assert_clean_stop(server, code, signal.SIGINT)
    text = server.log_text()
    # The signal came while loading was still starting (else this test tests a plain stop).
    ready = text.find("loading with ")
    assert ready == -1 or text.find("SIGINT received") < ready, text[-4000:]


def _java_missing(tmp_path: Path) -> dict[str, str | None]:
    """JAVA_HOME naming a directory without Java, and a PATH without java (the service
    runs as ``sys.executable -m cli``: it needs no PATH)."""
    (tmp_path / "empty").mkdir()
    return {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": str(tmp_path / "empty")}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wal-locked", r"WAL directory .*/data/wal is in use by another writer \(pid \d+.*\); stop it or point"),
        ("port-in-use", r"cannot listen on 127\.0\.0\.1:\d+ \(Address already in use\); stop what uses it"),
        ("bad-config", r"config file .*loader\.toml is invalid: workers: Input should be greater than or equal to 1"),
        ("no-java", r"Java not found: Spark needs Java 17 or newer"),
    ],
)
def test_an_error_anticipated_at_start_is_one_message_and_a_non_zero_status(
    tmp_path: Path, case: str, expected: str
) -> None:
    server = _serve(tmp_path, **({"workers": 0} if case == "bad-config" else {}))
    if case == "no-java":
        server.extra_env = _java_missing(tmp_path)
    held: list[object] = []
    if case == "wal-locked":
        wal = WriteAheadLog(tmp_path / "data" / "wal")
        wal.open()
        held.append(wal)
    if case == "port-in-use":
        taken = socket.socket()
        taken.bind(("127.0.0.1", int(server.base.rsplit(":", 1)[1])))
        taken.listen()
        held.append(taken)
    try:
        server.start()
        code = server.wait_exit(120)
    finally:
        for thing in held:
            thing.close()  # type: ignore[attr-defined]
    text = server.log_text()
    assert code == 2, text
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.search(expected, errors[0]), text


@pytest.mark.slow
@pytest.mark.allow_errors(r"could not start loading: the Spark Connect server exited \(code 1\)")
def test_a_spark_server_that_cannot_start_stops_the_service_with_its_reason(tmp_path: Path) -> None:
    """Intake opens before Spark is up; a Spark Connect server that cannot start at all (a
    bad setting here) stops the service with what its log says, instead of a service that
    acknowledges and never loads."""
    server = _serve(tmp_path, spark={"master": "local[1]", "conf": {"spark.driver.memory": "abc"}})
    server.start()
    code = server.wait_exit(180)
    text = server.log_text()
    assert code == 1, text
    assert "Traceback" not in text, text
    [line] = [line for line in text.splitlines() if " ERROR " in line]
    assert "fix what its log" in line and "spark-connect.log" in line, text
    assert "Invalid maximum heap size: -Xmxabc" in text


def test_every_connection_the_service_accepts_sends_its_answers_without_waiting_for_acks() -> None:
    """TCP_NODELAY on the listening socket, inherited by each accepted connection: with Nagle's
    algorithm on, an answer written in two parts waited 40 ms for the client's delayed ACK."""
    from cli.foreground import bind

    sock = bind("127.0.0.1", 0)
    try:
        sock.listen()
        with socket.create_connection(sock.getsockname()[:2]):
            accepted, _ = sock.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()
