"""What operators and Prometheus read at N tables: a /metrics scrape and GET /v1/tables pages.

A service of N configured tables without Spark (``load=False``: nothing loaded, no Delta
table made) behind FastAPI's TestClient: each figure is the route's work on the event
loop (a pause of intake), JSON or text included, without a network. Every table has the
metric children of one load, one in ten a pending update, so the top-k choice and the
staleness order have work. /metrics with every table's series and with the top-k (k =
100); pages of GET /v1/tables: the default (1,000), 100 by name, the next 100 (cursor),
100 stalest first, every table (limit 10,000).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from benchmarks.harness.spark import timed
from loader.config import load_settings
from loader.core.updates import Update
from testing.report import log
from testing.service_harness import OPERATOR

TOP_K = 100


def _get(client: TestClient, path: str, repeats: int, **params: Any) -> tuple[Any, dict[str, Any]]:
    """The last answer, and the median and every wall time of ``repeats`` GETs, the answer's bytes."""
    times = []
    for _ in range(repeats):
        answer, seconds = timed(lambda: client.get(path, params=params))
        times.append(seconds)
    assert answer.status_code == 200, answer.text[:300]
    return answer, {"median_s": statistics.median(times), "all_s": times, "bytes": len(answer.content)}


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
    log(f"reads: {tables:,} tables")
    declared = [{"name": f"t{i:05d}", "schema": {"columns": [{"name": "k", "type": "int64"}]}} for i in range(tables)]
    out: dict[str, Any] = {"tables": tables, "metrics": {}, "pages": {}}
    with tempfile.TemporaryDirectory(prefix="control-plane-reads-") as tmp:
        settings = load_settings(
            None,
            data_dir=Path(tmp) / "data",
            tables=declared,
            auth_tokens=[{"token": OPERATOR, "role": "operator"}],
            maintenance={"wal_truncate_seconds": 3600, "compact_seconds": 0, "vacuum_seconds": 0},
        )
        with TestClient(create_app(settings, load=False), headers={"Authorization": f"Bearer {OPERATOR}"}) as client:
            service = client.app.state.service  # type: ignore[attr-defined]
            client.portal.call(_populate, service)  # type: ignore[union-attr]
            for mode, top_k in (("all", None), ("top-k", TOP_K)):
                client.portal.call(service.metrics.attach, service.dispatcher, top_k)  # type: ignore[union-attr]
                answer, figures = _get(client, "/metrics", repeats)
                out["metrics"][mode] = figures | {"lines": answer.content.count(b"\n"), "top_k": top_k}
            cursor = client.get("/v1/tables", params={"limit": 100}).json()["next_cursor"]
            asks = {
                "default page (limit 1,000)": {},
                "100 by name": {"limit": 100},
                "the next 100 (cursor)": {"limit": 100, "cursor": cursor},
                "100 stalest first": {"limit": 100, "sort": "staleness"},
                "every table (limit 10,000)": {"limit": 10_000},
            }
            for label, params in asks.items():
                answer, figures = _get(client, "/v1/tables", repeats, **params)
                out["pages"][label] = figures | {"tables": len(answer.json()["tables"])}
    return out
