"""Spark jobs that fail, with the real writer: a job killed mid-run is retried with back-off
and lands once; a batch whose data file went bad keeps failing, is quarantined with its
error visible in the API and metrics, while the other table and the table's later updates
keep loading; after the operator repairs the file, a retry loads it exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loader.config import Settings
from loader.loading.sinks import make_sink
from testing.service_harness import Harness
from testing.spark_failures import RETRY, JobKiller, bad_file, killed_job

pytestmark = pytest.mark.slow


@pytest.fixture
def live(spark, tmp_path: Path) -> Iterator[Harness]:  # type: ignore[no-untyped-def]
    def sink(settings: Settings) -> JobKiller:
        return JobKiller(make_sink("delta-rs", settings.warehouse_path, spark), spark)

    with Harness(tmp_path / "data", sink=sink, **RETRY) as harness:
        yield harness


@pytest.mark.allow_errors(r"loading orders \(updates 1..1\) failed \(attempt 1\)")
def test_a_killed_job_is_retried_and_lands_once(live: Harness) -> None:
    killed_job(live)


@pytest.mark.allow_errors(r"Parquet file size is \d+ bytes, smaller than the size reported")
def test_a_bad_data_file_is_quarantined_other_loads_go_on_and_a_retry_lands_it_once(live: Harness) -> None:
    bad_file(live)
