"""Registering N tables: from the configuration file at start-up, and in one admin call.

Each measurement runs in a process of its own, so its memory figure is that process's alone.
Real Delta tables (the Spark-free sink of ``testing/fakes.py``); no Spark.

config: the TOML file with N ``[[tables]]`` parsed and validated, the service started
(intake open = recovery done; ready = every Delta table created), stopped, and started
again on the same data (recovery reads N Delta logs). bulk: a service under uvicorn
(``testing.service_harness.serve_in_thread``) gets one ``POST /v1/admin/tables:bulk``
with N declarations, the same call again, then N + 1 with one invalid (422); catalog
writes are counted, and a thread times how long the event loop took to run a no-op
meanwhile (what intake would wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import child
from benchmarks.harness.spark import timed

COLUMNS = [{"name": "k", "type": "int64"}, {"name": "v", "type": "string"}]
OPERATOR = "operator-token-0123456789"  # testing.service_harness.OPERATOR (imported late: see run_config)


def declarations(count: int, columns: int = 2) -> list[dict[str, Any]]:
    return [{"name": f"t{i:05d}", "schema": {"columns": COLUMNS[:columns]}} for i in range(count)]


def configuration(workdir: Path, tables: int, columns: int = 2) -> dict[str, Any]:
    """A service of N tables (``columns`` each) in ``workdir``: the operator's token, no maintenance."""
    maintenance = {"wal_truncate_seconds": 3600, "compact_seconds": 0, "vacuum_seconds": 0}
    auth = [{"token": OPERATOR, "role": "operator"}]
    out = {"data_dir": str(workdir / "data"), "maintenance": maintenance, "auth_tokens": auth}
    return out | {"tables": declarations(tables, columns)}


async def _start_and_stop(settings: Any) -> dict[str, float]:
    from loader.service import LoaderService
    from testing.fakes import ArrowSink

    began = time.perf_counter()
    async with contextlib.AsyncExitStack() as stack:
        service = await LoaderService.start(settings, stack, sink_factory=lambda s: ArrowSink(s.warehouse_path))
        opened = time.perf_counter() - began
        while not service.ready:
            assert service.failure is None, service.failure
            await asyncio.sleep(0.01)
        ready = time.perf_counter() - began
        memory = child.rss_mib()
    return {"intake_open_s": opened, "ready_s": ready, "rss_mb": memory}


def run_config(tables: int, workdir: Path) -> dict[str, Any]:
    import loader.service  # noqa: F401  (imported before the baseline: its modules are not the tables')
    import testing.fakes  # noqa: F401
    from loader.config import load_settings
    from testing.server_process import write_config

    baseline = child.rss_mib()
    config = write_config(workdir / "loader.toml", configuration(workdir, tables))
    settings, parsed = timed(load_settings, config)
    first = asyncio.run(_start_and_stop(settings))
    gc.collect()
    restart = asyncio.run(_start_and_stop(settings))
    out = {"config_bytes": config.stat().st_size, "parse_validate_s": parsed, "first": first, "restart": restart}
    return out | {"catalog_bytes": (settings.state_path / "catalog.json").stat().st_size, "baseline_rss_mb": baseline}


@contextlib.contextmanager
def loop_lag(loop: asyncio.AbstractEventLoop) -> Iterator[dict[str, float]]:
    """Asks ``loop`` to run a no-op every 5 ms, from a thread; ``max_ms``: the longest it waited."""
    lag, stop = {"max_ms": 0.0}, threading.Event()

    def probe() -> None:
        while not stop.wait(0.005):
            began = time.perf_counter()
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result()
            lag["max_ms"] = max(lag["max_ms"], (time.perf_counter() - began) * 1e3)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield lag
    finally:
        stop.set()
        thread.join()


def run_bulk(tables: int, workdir: Path) -> dict[str, Any]:
    import httpx

    from loader.durability.catalog import Catalog
    from testing.service_harness import serve_in_thread

    saves: list[float] = []
    save = Catalog.save

    def counted(self: Catalog, data: bytes | None = None) -> None:
        saves.append(time.perf_counter())
        save(self, data)

    Catalog.save = counted  # type: ignore[method-assign]
    body = {"tables": declarations(tables)}
    bad = {"tables": [*declarations(tables), {"name": "bad name", "schema": {"columns": COLUMNS}}]}
    out: dict[str, Any] = {"body_bytes": len(json.dumps(body))}
    with serve_in_thread(workdir / "data") as (url, service):
        loop = service.dispatcher._loop  # the service's event loop (benchmark only)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=1800) as client:
            for name, document, expected in (("bulk", body, 200), ("again", body, 200), ("invalid", bad, 422)):
                before = len(saves)
                with loop_lag(loop) as lag:
                    answer, wall = timed(client.post, "/v1/admin/tables:bulk", json=document)
                assert answer.status_code == expected, answer.text[:500]
                out[name] = {"wall_s": wall, "catalog_saves": len(saves) - before, "loop_lag": lag}
        out["rss_mb"] = child.rss_mib()
    Catalog.save = save  # type: ignore[method-assign]
    return out


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement: ``spec``: ``mode`` (config or bulk), ``tables``."""
    with tempfile.TemporaryDirectory(prefix="control-plane-") as tmp:
        return (run_config if spec["mode"] == "config" else run_bulk)(spec["tables"], Path(tmp))


if __name__ == "__main__":
    raise SystemExit(child.main(run))
