"""One Spark session for the whole test run: a JVM start costs ~10 s, a test should not.

Built like the service builds it (loader.spark.build_spark_session), with two FAIR pools
as for two workers. Java 17 is a prerequisite of the suite (scripts/setup checks it), so
a missing Java is an error here, not a skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from loader.spark import build_spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_spark_session(
        master="local[2]", app_name="warehouse-loader-tests", fair_pools=2
    )
    yield session
    session.stop()
