"""One Spark session for the whole test run: a JVM start costs ~10 s, a test should not.

Built like the service builds it (loader.loading.spark.build_spark_session), with two FAIR pools
as for two workers. Java 17 is a prerequisite of the suite (scripts/setup checks it), so
a missing Java is an error here, not a skip.

``LOADER_TEST_SPARK_CONF`` (a JSON object) adds Spark settings; where Maven is reachable,
``{"spark.jars.packages": "io.delta:delta-spark_4.2_2.13:4.4.1"}`` puts Delta's JVM
classes on the classpath and the native-writer tests run too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from loader.loading.connect_server import ConnectServer
from loader.loading.spark import DEFAULT_LEAN, build_spark_session, connect_session, session_settings


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_spark_session(
        master="local[2]",
        app_name="warehouse-loader-tests",
        fair_pools=2,
        conf=json.loads(os.environ.get("LOADER_TEST_SPARK_CONF", "{}")),
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One local Spark Connect server for the run (a second JVM, started only by tests that
    ask for it), configured as the service configures its own."""
    directory = tmp_path_factory.mktemp("connect-server")
    server = ConnectServer(
        "local[2]", session_settings("local[2]", {}, fair_pools=2, lean=DEFAULT_LEAN), directory / "server.log"
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect_spark(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect client session of ``connect_server``, stopped before the server is."""
    session = connect_session(connect_server.url)
    yield session
    session.stop()
