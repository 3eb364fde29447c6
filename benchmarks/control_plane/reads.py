"""What operators and Prometheus read at N tables: a /metrics scrape and GET /v1/tables pages.

A service of N configured tables without Spark (``load=False``: nothing is loaded, no
Delta table is made) behind FastAPI's TestClient, so each figure is the route's work on
the event loop, JSON or text included, without a network. Every table has the metric
children a loaded table has (one batch, one stretch, rows, received updates), and one
table in ten has a pending update, so the top-k choice and the staleness order have work.

- ``/metrics``: every table's series (``per_table_series = "all"``) against the top-k
  (``"top-k"``, k = 100): wall time of GET /metrics, bytes and lines. The scrape runs on
  the event loop: its time is a pause of intake.
- ``GET /v1/tables``: the default page (1,000 tables), a page of 100 by name, the page
  after it (cursor), a page of 100 stalest first, and every table in one page (limit
  10,000).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from loader.config import load_settings
from loader.core.updates import Update

OPERATOR = "operator-token-0123456789"
TOP_K = 100


def _timed(call: Callable[[], Any], repeats: int) -> tuple[Any, list[float]]:
    times, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - began)
    return result, times


def _populate(service: Any) -> None:
    """On the event loop: metric children as after one load of each table, pending updates."""
    m, now = service.metrics, time.time()
    for k, name in enumerate(service.catalog.entries):
        m.batches.labels(name, "loaded").inc()
        m.rows_loaded.labels(name).inc(100)
        m.updates_loaded.labels(name).inc()
        m.updates_received.labels(name).inc(2)
        m.batch_duration.labels(name).observe(0.2)
        m.stretch.labels(name).observe(1.3)
        m.delta_version.labels(name).set(1)
        if k % 10 == 0:
            service.dispatcher.released(Update(name, 1, now + k * 1e-6))


def measure(tables: int, repeats: int) -> dict[str, Any]:
    declared = [{"name": f"t{i:05d}", "schema": {"columns": [{"name": "k", "type": "int64"}]}} for i in range(tables)]
    with tempfile.TemporaryDirectory(prefix="control-plane-reads-") as tmp:
        settings = load_settings(
            None,
            data_dir=Path(tmp) / "data",
            tables=declared,
            auth_tokens=[{"token": OPERATOR, "role": "operator"}],
            maintenance={"wal_truncate_seconds": 3600, "compact_seconds": 0, "vacuum_seconds": 0},
        )
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        out: dict[str, Any] = {"tables": tables, "metrics": {}, "pages": {}}
        with TestClient(create_app(settings, load=False)) as client:
            service = client.app.state.service  # type: ignore[attr-defined]
            client.portal.call(_populate, service)  # type: ignore[union-attr]
            for mode, top_k in (("all", None), ("top-k", TOP_K)):
                client.portal.call(service.metrics.attach, service.dispatcher, top_k)  # type: ignore[union-attr]
                answer, times = _timed(lambda: client.get("/metrics", headers=headers), repeats)
                assert answer.status_code == 200
                out["metrics"][mode] = {
                    "median_s": statistics.median(times),
                    "all_s": times,
                    "bytes": len(answer.content),
                    "lines": answer.content.count(b"\n"),
                    "top_k": top_k,
                }
            first_100 = client.get("/v1/tables", params={"limit": 100}, headers=headers).json()
            asks = {
                "default page (limit 1,000)": {},
                "100 by name": {"limit": 100},
                "the next 100 (cursor)": {"limit": 100, "cursor": first_100["next_cursor"]},
                "100 stalest first": {"limit": 100, "sort": "staleness"},
                "every table (limit 10,000)": {"limit": 10_000},
            }
            for label, params in asks.items():
                answer, times = _timed(lambda p=params: client.get("/v1/tables", params=p, headers=headers), repeats)
                assert answer.status_code == 200, answer.text[:300]
                out["pages"][label] = {
                    "median_s": statistics.median(times),
                    "all_s": times,
                    "bytes": len(answer.content),
                    "tables": len(answer.json()["tables"]),
                }
        return out
