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

from loader.loading.spark import build_spark_session


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
