"""The loader against a real Spark cluster (issue 15, part 4).

A standalone Spark master and worker run as JVMs of their own (``spark-class`` from the
pyspark package, testing/spark_cluster.py), a Spark Connect server is submitted to that
master by ``loader spark-connect`` (with the loader's Spark settings, from the same
configuration file) as the driver of an application whose executors the worker starts,
and ``loader serve`` points its load worker processes at it with ``[spark] remote``,
starting no Spark of its own. Loader and executors share a directory, as a cluster's nodes would share a
filesystem. Every acknowledged row is in its Delta table exactly once, and the jobs ran
on the cluster's executors.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loader.loading.connect_server import port_open
from testing.prom import sample_value
from testing.server_process import SPARK_SERVER_LINE, ServerProcess, free_port, write_config
from testing.spark_cluster import StandaloneCluster
from testing.tables import read_delta
from tests.system.test_connect_mode import TABLES as CONNECT_TABLES
from tests.system.test_connect_mode import TOKEN, _load, _worker_pids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

APP = "loader-cluster-test"
TABLES = [t["name"] for t in CONNECT_TABLES]


@pytest.fixture
def standalone() -> Iterator[StandaloneCluster]:
    with StandaloneCluster(cores=2, memory="1g") as cluster:
        yield cluster


def _config(tmp_path: Path, port: int, remote: str) -> Path:
    return write_config(
        tmp_path / "loader.toml",
        {
            "port": port,
            "data_dir": str(tmp_path / "shared" / "data"),  # the directory loader and executors share
            "workers": 2,
            "spark": {
                "mode": "connect",
                "remote": remote,
                "app_name": APP,
                "conf": {
                    "spark.executor.memory": "512m",
                    "spark.cores.max": "2",
                    "spark.default.parallelism": "2",
                    # The executor's JVM as the suite's others (tests/conftest.py).
                    "spark.executor.extraJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", ""),
                },
            },
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": CONNECT_TABLES,
        },
    )


@pytest.fixture
def connect_server(standalone: StandaloneCluster, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """``loader spark-connect`` submitted to the standalone master: (the loader's config file,
    which names it as ``remote``; the loader's HTTP port)."""
    grpc = free_port()
    config = _config(tmp_path, free_port(), f"sc://127.0.0.1:{grpc}")  # (its port: below)
    command = [sys.executable, "-m", "cli", "spark-connect", "--config", str(config)]
    command += ["--master", standalone.master_url, "--host", "127.0.0.1", "--port", str(grpc)]
    log = tmp_path / "spark-connect.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        )
    try:
        deadline = time.monotonic() + 240
        while not port_open("127.0.0.1", grpc):
            assert server.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the Spark Connect server did not answer"
            time.sleep(0.25)
        # The loader's port once the server is up: its driver and block manager take ephemeral
        # ports as they start, and one of them once took a port chosen before (a red run).
        port = free_port()
        config = _config(tmp_path, port, f"sc://127.0.0.1:{grpc}")
        yield config, port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_the_loader_loads_exactly_once_through_a_spark_cluster(
    standalone: StandaloneCluster, connect_server: tuple[Path, int], tmp_path: Path
) -> None:
    config, port = connect_server
    loader = ServerProcess(tmp_path, config, port, TOKEN)
    loader.start()
    try:
        assert loader.wait_ready(240), loader.log_tail()
        assert len(_worker_pids(loader)) == 2
        assert not SPARK_SERVER_LINE.search(loader.log_text()), "with remote set the loader starts no Spark of its own"
        _load(loader, 0, 20)  # several tables due at once: multi-table jobs run on the executors too
        with loader.client() as http:
            metrics = http.get("/metrics").text
            assert sample_value(metrics, "loader_spark_reachable") == 1
            assert sample_value(metrics, "loader_tables_quarantined_updates") == 0
        assert loader.terminate() == 0
    finally:
        if loader.alive:
            loader.kill()
    for table in TABLES:
        ids = read_delta(tmp_path / "shared" / "data" / "warehouse" / table).column("id").to_pylist()
        assert sorted(ids) == list(range(200)), table

    state = standalone.state()
    assert state is not None
    apps = [a for a in state.get("activeapps", []) if a.get("name") == APP]
    assert apps and apps[0].get("cores", 0) >= 1, f"the Connect server's application holds no executors: {state}"
