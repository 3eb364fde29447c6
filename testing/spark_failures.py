"""Spark-failure scenarios with the real writer, each returning its figures: a job killed
mid-run is retried with back-off and lands once; a batch whose data file went bad is
quarantined while the rest loads, and a retry after the repair lands it once. Shared by
tests/loader/loading/test_spark_failures.py and ``python -m trials.faults``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.loading.sinks.base import Sink
from testing.prom import sample_value
from testing.service_harness import OPERATOR, Harness

RETRY = {"loading": {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2, "max_attempts": 3}}


class JobKiller:
    """Wraps the real sink; the first ``kills`` loads have their Spark job cancelled while it runs."""

    def __init__(self, sink: Sink, spark: Any, kills: int = 0) -> None:
        self.sink, self.spark, self.kills, self.killed = sink, spark, kills, 0
        self.name = sink.name

    def ensure_table(self, table: str, schema: TableSchema) -> None:
        self.sink.ensure_table(table, schema)

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        if self.killed < self.kills:
            stop = threading.Event()
            watcher = threading.Thread(target=self._cancel_first_job, args=(stop,), daemon=True)
            watcher.start()
            try:
                return self.sink.load(batch, schema)
            finally:
                stop.set()
                watcher.join()
        return self.sink.load(batch, schema)

    def _cancel_first_job(self, stop: threading.Event) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not stop.is_set():
            if tracker.getActiveJobsIds():
                self.spark.sparkContext.cancelAllJobs()
                self.killed += 1
                return
            time.sleep(0.002)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sink, name)


def orders(ids: range) -> list[dict[str, Any]]:
    return [{"order_id": i, "amount": float(i), "country": "NL"} for i in ids]


def submit(h: Harness, table: str, body: dict[str, Any]) -> int:
    r = h.post(f"/v1/tables/{table}/updates", json=body)
    assert r.status_code == 202, r.text
    return r.json()["updates"][0]["sequence"]


def exactly_once(live: Harness, table: str, key: str, expected: list[int]) -> dict[str, int]:
    """Lost and duplicated rows of ``table`` against ``expected`` (asserted zero by the callers)."""
    ids = [r[key] for r in live.rows(table)]
    return {"rows": len(ids), "lost": len(set(expected) - set(ids)), "duplicated": len(ids) - len(set(ids))}


def killed_job(live: Harness) -> dict[str, Any]:
    """A batch's Spark job is cancelled while it runs: retried with back-off, lands once."""
    live.sink.kills = 1
    began = time.monotonic()
    seq = submit(live, "orders", {"rows": orders(range(500))})
    live.wait_loaded("orders", seq, timeout=120)
    landed = time.monotonic() - began
    assert live.sink.killed == 1, "the job was not killed mid-run"
    figures = exactly_once(live, "orders", "order_id", list(range(500)))
    assert figures == {"rows": 500, "lost": 0, "duplicated": 0}, figures
    metrics = live.get("/metrics").text
    failed = sample_value(metrics, "loader_batches_total", table="orders", outcome="failed")
    quarantined = sample_value(metrics, "loader_batches_total", table="orders", outcome="quarantined")
    assert failed == 1 and quarantined == 0
    assert not list((live.settings.warehouse_path / "orders").glob(".staging-*"))
    return {
        "jobs killed": live.sink.killed,
        "failed attempts": int(failed),
        "quarantined": int(quarantined),
        "landed after (s)": round(landed, 2),
        **figures,
    }


def bad_file(live: Harness) -> dict[str, Any]:
    """A batch's data file is corrupted after intake: quarantined, the rest loads, a retry lands it once."""
    landing = live.settings.landing_path
    pq.write_table(pa.Table.from_pylist(orders(range(100, 110))), landing / "feed.parquet")
    assert live.post("/v1/admin/tables/orders/pause", token=OPERATOR).status_code == 200
    bad = submit(live, "orders", {"files": ["feed.parquet"]})
    [owned] = (live.settings.data_dir / "landed" / "orders").iterdir()
    good_bytes = owned.read_bytes()
    owned.write_bytes(b"PAR1 this is not parquet any more PAR1")  # the disk or a tool broke it
    assert live.post("/v1/admin/tables/orders/resume", token=OPERATOR).status_code == 200

    def entries() -> list[dict[str, Any]]:
        return live.get("/v1/admin/quarantine").json()["batches"]

    began = time.monotonic()
    live.wait(lambda: len(entries()) == 1, timeout=120)
    quarantined_after = time.monotonic() - began
    [entry] = entries()
    assert entry["first_sequence"] == bad and entry["attempts"] == 3 and entry["files"] == 1
    assert entry["error"], entry
    clicks = submit(live, "clicks", {"rows": [{"url": "/x", "n": 1}]})
    later = submit(live, "orders", {"rows": orders(range(3))})
    live.wait_loaded("clicks", clicks, timeout=120)
    live.wait_loaded("orders", later, timeout=120)
    assert sorted(r["order_id"] for r in live.rows("orders")) == [0, 1, 2]
    metrics = live.get("/metrics").text
    assert sample_value(metrics, "loader_table_quarantined_updates", table="orders") == 1
    assert live.status("orders")["quarantined_updates"] == 1

    owned.write_bytes(good_bytes)  # the operator restores the file, then retries
    r = live.post(f"/v1/admin/quarantine/orders/{bad}/retry", token=OPERATOR)
    assert r.status_code == 202, r.text
    live.wait_loaded("orders", r.json()["updates"][0]["sequence"], timeout=120)
    figures = exactly_once(live, "orders", "order_id", [0, 1, 2, *range(100, 110)])
    assert figures == {"rows": 13, "lost": 0, "duplicated": 0}, figures
    assert entries() == []
    assert not owned.exists(), "the quarantined original of the file outlived the retry"
    return {
        "failed attempts": entry["attempts"],
        "quarantined": 1,
        "quarantined after (s)": round(quarantined_after, 2),
        **figures,
    }
