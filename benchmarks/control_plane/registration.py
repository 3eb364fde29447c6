"""Registering N tables: from the configuration file at start-up, and in one admin call.

Each measurement runs in a process of its own (``python -m benchmarks.control_plane.registration``,
started by ``__main__``), so its memory figure is that process's and no earlier run's
garbage or caches count. The Delta tables are real (created with ``deltalake`` by the
Spark-free sink of ``testing/fakes.py``, as the delta-rs writer creates them); Spark is
not started, since its ~5 s start does not depend on the number of tables.

config: the TOML file with N ``[[tables]]`` is parsed and validated, the service started
(intake open = recovery done; ready = every Delta table created), stopped, and started
again on the same data (recovery reads N Delta logs; every Delta table is checked).

bulk: a running service (uvicorn on loopback) gets one ``POST /v1/admin/tables:bulk``
with N declarations, then the same call again (idempotent), then N + 1 declarations with
one invalid (422). The catalog writes are counted, and a thread measures how long the
event loop was kept from running a no-op while the calls ran (what intake would wait).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

COLUMNS = [{"name": "k", "type": "int64"}, {"name": "v", "type": "string"}]
OPERATOR = "operator-token-0123456789"
QUIET = {"wal_truncate_seconds": 3600, "compact_seconds": 0, "vacuum_seconds": 0}


def declarations(count: int) -> list[dict[str, Any]]:
    return [{"name": f"t{i:05d}", "schema": {"columns": COLUMNS}} for i in range(count)]


def rss_mb() -> float:
    """Resident memory of this process now (Linux /proc)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_config(path: Path, data_dir: Path, tables: int) -> None:
    lines = [
        f'data_dir = "{data_dir}"',
        "[maintenance]",
        *(f"{key} = {value}" for key, value in QUIET.items()),
        "[[auth_tokens]]",
        f'token = "{OPERATOR}"',
        'role = "operator"',
    ]
    for table in declarations(tables):
        lines += ["[[tables]]", f'name = "{table["name"]}"']
        lines.append(
            "schema.columns = [" + ", ".join(f'{{name = "{c["name"]}", type = "{c["type"]}"}}' for c in COLUMNS) + "]"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


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
        memory = rss_mb()
        stopping = time.perf_counter()
    return {"intake_open_s": opened, "ready_s": ready, "stop_s": time.perf_counter() - stopping, "rss_mb": memory}


def run_config(tables: int, workdir: Path) -> dict[str, Any]:
    import loader.service  # noqa: F401  (imported before the baseline: its modules are not the tables')
    import testing.fakes  # noqa: F401
    from loader.config import load_settings

    baseline = rss_mb()
    config = workdir / "loader.toml"
    write_config(config, workdir / "data", tables)
    began = time.perf_counter()
    settings = load_settings(config)
    parsed = time.perf_counter() - began
    first = asyncio.run(_start_and_stop(settings))
    gc.collect()
    restart = asyncio.run(_start_and_stop(settings))
    return {
        "tables": tables,
        "config_bytes": config.stat().st_size,
        "parse_validate_s": parsed,
        "first": first,
        "restart": restart,
        "catalog_bytes": (settings.state_path / "catalog.json").stat().st_size,
        "baseline_rss_mb": baseline,
    }


class LoopLag:
    """Asks the event loop to run a no-op every 5 ms and keeps how long each took to run."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lags: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _noop(self) -> None:
        return None

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            began = time.perf_counter()
            asyncio.run_coroutine_threadsafe(self._noop(), self.loop).result()
            self.lags.append(time.perf_counter() - began)

    def __enter__(self) -> LoopLag:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        lags = sorted(self.lags) or [float("nan")]
        return {"max_ms": lags[-1] * 1e3, "p99_ms": lags[int(0.99 * (len(lags) - 1))] * 1e3}


@contextlib.contextmanager
def served(data_dir: Path) -> Iterator[tuple[str, Any]]:
    """The app under uvicorn in a thread, no tables, the Spark-free sink."""
    import uvicorn

    from api.app import create_app
    from loader.config import load_settings
    from testing.fakes import ArrowSink
    from testing.server_process import free_port

    settings = load_settings(
        None, data_dir=data_dir, auth_tokens=[{"token": OPERATOR, "role": "operator"}], maintenance=QUIET
    )
    app = create_app(settings, sink_factory=lambda s: ArrowSink(s.warehouse_path))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not (server.started and getattr(app.state, "service", None) is not None and app.state.service.ready):
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app.state.service
    finally:
        server.should_exit = True
        thread.join(60)


def run_bulk(tables: int, workdir: Path) -> dict[str, Any]:
    import httpx

    from loader.durability.catalog import Catalog

    saves: list[float] = []
    save = Catalog.save

    def counted(self: Catalog, data: bytes | None = None) -> None:
        saves.append(time.perf_counter())
        save(self, data)

    Catalog.save = counted  # type: ignore[method-assign]
    body = {"tables": declarations(tables)}
    bad = {"tables": [*declarations(tables), {"name": "bad name", "schema": {"columns": COLUMNS}}]}
    out: dict[str, Any] = {"tables": tables, "body_bytes": len(json.dumps(body))}
    with served(workdir / "data") as (url, service):
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        loop = service.dispatcher._loop  # the service's event loop (benchmark only)
        with httpx.Client(base_url=url, headers=headers, timeout=1800) as client:
            for name, document, expected in (("bulk", body, 200), ("again", body, 200), ("invalid", bad, 422)):
                before = len(saves)
                with LoopLag(loop) as lag:
                    began = time.perf_counter()
                    answer = client.post("/v1/admin/tables:bulk", json=document)
                    wall = time.perf_counter() - began
                assert answer.status_code == expected, answer.text[:500]
                out[name] = {"wall_s": wall, "catalog_saves": len(saves) - before, "loop_lag": lag.summary()}
            registered = client.get("/v1/tables", params={"limit": 1}).json()["total"]
        out["registered"] = registered
        out["rss_mb"] = rss_mb()
    Catalog.save = save  # type: ignore[method-assign]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One registration measurement; prints JSON.")
    parser.add_argument("mode", choices=("config", "bulk"))
    parser.add_argument("--tables", type=int, required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="control-plane-") as tmp:
        run = run_config if args.mode == "config" else run_bulk
        result = run(args.tables, Path(tmp))
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
