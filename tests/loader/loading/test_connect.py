"""Loads over Spark Connect, against a local Spark Connect server started from the pyspark
package as the loader starts it (loader/loading/connect_server.py).

What matters: a table loaded over Connect reads back exactly as one loaded in process
(single-table and multi-table jobs); a server whose start fails is explained. (The server's
life under the service, its scheduling policy, its death and restart:
tests/system/test_connect_mode.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from loader.core.updates import LoadResult
from loader.durability.transactions import app_id
from loader.loading.connect_server import ConnectServer, ConnectServerError
from loader.loading.sinks.delta_rs import DeltaRsSink
from loader.loading.spark import is_connect
from testing.tables import read_delta
from tests.loader.loading.test_group_job import _batches
from tests.loader.loading.test_sinks import by_id

pytestmark = [pytest.mark.slow, pytest.mark.system]  # (every test here starts or uses a JVM)


def test_loads_over_connect_read_back_as_in_process_loads(spark, connect_spark, tmp_path: Path) -> None:
    assert is_connect(connect_spark) and not is_connect(spark)
    remote = DeltaRsSink(tmp_path / "connect", connect_spark)
    local = DeltaRsSink(tmp_path / "local", spark)
    batches, schemas = _batches(tmp_path)
    for sink in (remote, local):
        for batch, schema in zip(batches, schemas):
            sink.ensure_table(batch.table, schema)

    # Over Connect: one multi-table job (the partitioned table in a job of its own) and a
    # single-table load; in process: single-table loads, the oracle.
    grouped = remote.load_group(batches[:-1], schemas[:-1])
    alone = remote.load(batches[-1], schemas[-1])
    assert all(isinstance(o, LoadResult) and not o.skipped for o in [*grouped, alone]), grouped
    for batch, schema in zip(batches, schemas):
        local.load(batch, schema)

    for batch in batches:
        got, want = read_delta(remote.table_path(batch.table)), read_delta(local.table_path(batch.table))
        assert got.schema == want.schema
        assert by_id(got) == by_id(want)
        assert DeltaTable(str(remote.table_path(batch.table))).transaction_version(app_id(batch.table)) == (
            batch.last_seq
        )
    # A replay after a crash loads nothing twice, over Connect as in process.
    again = remote.load_group(batches[:-1], schemas[:-1])
    assert all(isinstance(o, LoadResult) and o.skipped for o in again)


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    server = ConnectServer("no-such-master", {}, tmp_path / "server.log")
    with pytest.raises(ConnectServerError, match="exited .* before it answered") as caught:
        server.start(timeout=120)
    assert "Master must" in str(caught.value)  # Spark's own explanation, quoted from the log
    assert not server.alive()
