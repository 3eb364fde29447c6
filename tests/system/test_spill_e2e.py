"""A burst of ten times the memory budget through HTTP into a real ``loader serve``: accepted,
resident memory bounded (measured on the process), every row in Delta exactly once.

The table is paused during the burst, so the pending store has to hold all of it: without
spilling the process would grow by the whole burst. Then loading resumes and one Spark
job reads the spill segments in place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from testing.prom import sample_value
from testing.server_process import ServerProcess, free_port, write_config
from testing.tables import read_delta
from tests.spark_fixtures import ConnectEndpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "spill-test-operator-token-0001"
BUDGET = 8 << 20
ROWS = 2000
NOTE = "x" * 180


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/{pid}/status")


@pytest.fixture
def server(tmp_path: Path, connect_server: ConnectEndpoint) -> Iterator[ServerProcess]:
    config = write_config(
        tmp_path / "loader.toml",
        {
            "port": (port := free_port()),
            "data_dir": str(tmp_path / "data"),
            "workers": 2,
            "spark": {"master": "local[2]", "remote": connect_server.url},
            "spill": {"memory_budget_bytes": BUDGET},
            "maintenance": {"wal_truncate_seconds": 2, "compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": [
                {
                    "name": "burst",
                    "schema": {
                        "columns": [
                            {"name": "id", "type": "int64", "nullable": False},
                            {"name": "note", "type": "string"},
                        ]
                    },
                }
            ],
        },
    )
    proc = ServerProcess(tmp_path, config, port, TOKEN)
    proc.start()
    yield proc
    if proc.alive:
        proc.kill()


def test_a_burst_of_ten_budgets_is_accepted_in_bounded_memory_and_lands_once(server: ServerProcess) -> None:
    assert server.wait_ready()
    assert server.proc is not None
    pid = server.proc.pid
    arrow_bytes_per_request = pa.table(
        {"id": pa.array(range(ROWS), pa.int64()), "note": [NOTE] * ROWS}
    ).get_total_buffer_size()
    requests = -(-12 * BUDGET // arrow_bytes_per_request)  # at least 12 budgets of payload
    with server.client(timeout=120) as http:
        assert http.post("/v1/admin/tables/burst/pause").status_code == 200

        def send(k: int) -> None:
            body = json.dumps({"rows": [{"id": k * ROWS + i, "note": NOTE} for i in range(ROWS)]})
            r = http.post("/v1/tables/burst/updates", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 202, r.text

        for k in range(3):  # warm up the parsers and allocator before taking the baseline
            send(k)
        baseline = rss_bytes(pid)
        peak = baseline
        for k in range(3, requests):
            send(k)
            peak = max(peak, rss_bytes(pid))
        pending = http.get("/v1/admin/pending").json()
        burst = requests * arrow_bytes_per_request
        assert burst >= 10 * BUDGET
        assert pending["spilled_bytes"] >= burst - 2 * BUDGET  # the store kept at most about M in memory
        assert pending["peak_resident_bytes"] <= BUDGET + pending["chunk_bytes"]
        growth = peak - baseline
        print(f"burst {burst >> 20} MiB, budget {BUDGET >> 20} MiB, RSS {baseline >> 20} -> {peak >> 20} MiB")
        # Without spilling the process would grow by the whole burst; allow M, a chunk, the
        # request being parsed, and the allocator's slack.
        assert growth < burst / 3, f"RSS grew by {growth >> 20} MiB for a {burst >> 20} MiB burst"

    # A crash now: the restart replays the whole backlog from the WAL, one record at a
    # time into the pending store, which spills again; it must not need the burst's memory.
    server.kill()
    server.start()
    assert server.wait_ready()
    assert server.proc is not None
    restart_peak = rss_bytes(server.proc.pid, "VmHWM")
    print(f"restart peak RSS {restart_peak >> 20} MiB")
    assert restart_peak - baseline < burst / 3, f"the restart peaked at {restart_peak >> 20} MiB"
    with server.client(timeout=120) as http:
        assert http.get("/v1/admin/pending").json()["spilled_bytes"] >= burst - 2 * BUDGET
        assert http.post("/v1/admin/tables/burst/resume").status_code == 200
        last = http.get("/v1/tables/burst").json()["last_sequence"]
        deadline = time.monotonic() + 300
        while http.get("/v1/tables/burst").json()["last_loaded_sequence"] < last:
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.2)
        text = http.get("/metrics").text
        assert sample_value(text, "loader_spill_operations_total", kind="write") > 0
        assert sample_value(text, "loader_spill_operations_total", kind="read_in_place") > 0
        after = http.get("/v1/admin/pending").json()
        assert sample_value(text, "loader_spill_bytes_total", kind="write") == after["bytes_written"] > 0

    ids = read_delta(server.workdir / "data" / "warehouse" / "burst").column("id").to_pylist()
    assert len(ids) == requests * ROWS and sorted(ids) == list(range(requests * ROWS))
    assert not list((server.workdir / "data" / "spill").rglob("*.parquet"))
