"""One Spark session for the whole test run: a JVM start costs ~10 s, a test should not.
The same JVM serves Spark Connect for the load workers and services the tests start.

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
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from pyspark.sql import SparkSession

from loader.loading.connect_server import ADDRESS_SETTING, PORT_SETTING, free_port, port_open
from loader.loading.spark import build_spark_session, connect_session

#: Spark's own plugin that runs a Spark Connect server inside a driver (spark-connect jar of pyspark).
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


@dataclass(frozen=True)
class ConnectEndpoint:
    """Where the test process's Spark answers Spark Connect clients (``sc://host:port``)."""

    url: str


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The in-process session, which also serves Spark Connect (Spark's SparkConnectPlugin in
    the same driver): the load workers, services and Connect clients the tests start share
    this JVM and its warm code. A second JVM for them cost a test process ~17 s (its start
    and a second warm-up of Spark's planner; measured on four of the files that use both)."""
    session = build_spark_session(
        master="local[2]",
        app_name="warehouse-loader-tests",
        fair_pools=2,
        conf={
            "spark.plugins": CONNECT_PLUGIN,
            PORT_SETTING: str(free_port()),
            ADDRESS_SETTING: "127.0.0.1",
            **json.loads(os.environ.get("LOADER_TEST_SPARK_CONF", "{}")),
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(spark: SparkSession) -> ConnectEndpoint:
    """The Spark Connect server of the test process: its own Spark's (``spark``), configured
    as the service configures its own server. The service's ConnectServer, a JVM of its own
    started, restarted and stopped by the loader, is tested where it is the subject
    (tests/system/test_connect_mode.py, tests/cli/test_foreground.py, test_connect.py)."""
    port = int(spark.conf.get(PORT_SETTING))
    deadline = time.monotonic() + 60
    while not port_open("127.0.0.1", port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the test Spark's Connect plugin does not answer on port {port}")
        time.sleep(0.1)
    return ConnectEndpoint(f"sc://127.0.0.1:{port}")


@pytest.fixture(scope="session")
def connect_spark(connect_server: ConnectEndpoint) -> Iterator[SparkSession]:
    """A Spark Connect client session of ``connect_server``, stopped before the server is."""
    session = connect_session(connect_server.url)
    yield session
    session.stop()
