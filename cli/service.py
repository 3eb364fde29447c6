"""CLI commands of the live service: serve, demo (serve + demo producer), submit, export-trace."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from cli.simulation import app, console, err_console, fail
from loader.config import ConfigError, Role, Settings, load_settings

ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="TOML configuration file (see deploy/loader.example.toml).")
]


def _settings(config: Path | None, **overrides: object) -> Settings:
    try:
        return load_settings(config, **overrides)
    except ConfigError as exc:
        raise fail(str(exc)) from None


def _serve(settings: Settings, demo: bool) -> None:
    import uvicorn

    from api.app import create_app
    from api.auth import tokens_file
    from loader.loading.java import JavaError, check_java

    try:
        check_java()
    except JavaError as exc:
        raise fail(str(exc)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Loads talk to Spark through py4j, giving up the GIL at every round trip and waiting
    # up to the switch interval to win it back from a busy request handler. At 1 ms
    # (default 5 ms) a load under intake pressure ran ~3x faster for ~9% of the handler's
    # throughput: BENCHMARKS.md, "A load beside a busy request handler".
    sys.setswitchinterval(0.001)
    for chatty in ("apscheduler", "httpx", "py4j"):  # a line per job run / request otherwise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        app_ = create_app(settings)
    except (ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    base = f"http://{settings.host}:{settings.port}"
    if not settings.auth_tokens:
        err_console.print(f"tokens: {tokens_file(settings)} (generated; operator and producer)")
    err_console.print(f"serving on {base}; data in {settings.data_dir.resolve()}; docs at {base}/docs")
    producer = None
    if demo:
        from cli.client import LoaderClient, token_for
        from cli.demo import DemoProducer

        producer = DemoProducer(LoaderClient(base, token_for(settings, Role.operator)), console=console)
        producer.start()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if producer is not None:  # stop producing before the service shuts down
                producer.stop()
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app_, host=settings.host, port=settings.port, log_level="warning"))
    try:
        server.run()
    finally:
        if producer is not None:
            producer.stop()


@app.command("serve")
def serve_command(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8000).")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="WAL, warehouse, state (default ./data).")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Worker pool size P.")] = None,
    policy: Annotated[str | None, typer.Option(help="Scheduling policy.")] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Also run a demo producer feeding synthetic traffic.")] = False,
) -> None:
    """Run the loader service (embedded defaults: local Spark, ./data, port 8000)."""
    _serve(_settings(config, host=host, port=port, data_dir=data_dir, workers=workers, policy=policy), demo)


@app.command("demo")
def demo_command(
    config: ConfigOption = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8000).")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Default ./data.")] = None,
) -> None:
    """Run the service with a demo producer: watch tables fill and staleness move."""
    _serve(_settings(config, port=port, data_dir=data_dir), demo=True)


@app.command("submit")
def submit_command(
    table: Annotated[str, typer.Argument(help="Table to submit to.")],
    file: Annotated[
        Path, typer.Argument(help="NDJSON rows (sent in the body), or a .parquet/.csv in the landing directory.")
    ],
    url: Annotated[str, typer.Option(help="Service URL.")] = "http://127.0.0.1:8000",
    token: Annotated[
        str | None, typer.Option(envvar="LOADER_TOKEN", help="Bearer token (default: the generated producer token).")
    ] = None,
    config: ConfigOption = None,
    key: Annotated[str | None, typer.Option("--idempotency-key", help="Makes a retried submission safe.")] = None,
) -> None:
    """Submit one update to a running service and print its acknowledgement."""
    import json

    import httpx

    from cli.client import ClientError, LoaderClient, token_for

    if not file.is_file():
        raise fail(f"{file} is not a file")
    try:
        token = token or token_for(_settings(config), Role.producer)
    except RuntimeError as exc:
        raise fail(str(exc)) from None
    client = LoaderClient(url, token)
    try:
        print(json.dumps(client.submit_file(table, file, key=key)))
    except ClientError as exc:
        raise fail(str(exc)) from None
    except (OSError, httpx.TransportError) as exc:
        raise fail(f"cannot reach {url}: {exc}; is `loader serve` running there?") from None
    finally:
        client.close()


@app.command("export-trace")
def export_trace_command(
    out: Annotated[Path, typer.Option("--out", help="Trace file to write (JSON Lines, the simulator's format).")],
    schedule_out: Annotated[
        Path | None, typer.Option("--schedule-out", help="Also write the recorded batches here (schedule format).")
    ] = None,
    url: Annotated[str, typer.Option(help="Service URL.")] = "http://127.0.0.1:8000",
    token: Annotated[
        str | None, typer.Option(envvar="LOADER_TOKEN", help="Bearer token (default: the generated operator token).")
    ] = None,
    config: ConfigOption = None,
    since: Annotated[float | None, typer.Option("--since", min=0.0, help="Only the last this many seconds.")] = None,
    tables: Annotated[str | None, typer.Option("--tables", help="Comma-separated table names (default: all).")] = None,
) -> None:
    """Export what a running service observed (arrivals, measured alpha/overhead, batches) for
    `loader simulate`, `loader compare` and `loader report`."""
    import datetime as dt

    import httpx

    from cli.client import ClientError, LoaderClient, token_for

    for target in (out, schedule_out):
        if target is not None and not target.parent.is_dir():
            raise fail(f"cannot write {target}: directory {target.parent} does not exist; create it first")
    if since is not None and since <= 0:
        raise fail("--since must be a positive number of seconds")
    try:
        token = token or token_for(_settings(config), Role.operator)
    except RuntimeError as exc:
        raise fail(str(exc)) from None
    client = LoaderClient(url, token)
    params: dict[str, object] = {"since": since, "tables": tables}
    try:
        trace = client.download("/v1/admin/trace", params, out)
        origin = trace.get("x-trace-origin")
        when = dt.datetime.fromtimestamp(float(origin), tz=dt.UTC).isoformat(timespec="seconds") if origin else "?"
        dropped = int(trace.get("x-trace-dropped", "0"))
        err_console.print(
            f"wrote {out}: {int(trace.get('x-trace-updates', '0')):,} updates; time 0 is {when} "
            f"(Unix {origin})" + (f"; {dropped:,} older releases were dropped by the ring" if dropped else ""),
            soft_wrap=True,
        )
        if schedule_out is not None:
            schedule = client.download("/v1/admin/schedule", {**params, "origin": origin}, schedule_out)
            lost = int(schedule.get("x-schedule-dropped", "0"))
            err_console.print(
                f"wrote {schedule_out}: {int(schedule.get('x-schedule-batches', '0')):,} batches"
                + (f"; {lost:,} older batches were dropped by the ring" if lost else ""),
                soft_wrap=True,
            )
    except ClientError as exc:
        raise fail(str(exc)) from None
    except httpx.TransportError as exc:
        raise fail(f"cannot reach {url}: {exc}; is `loader serve` running there?") from None
    except OSError as exc:
        raise fail(f"cannot write the export: {exc}") from None
    finally:
        client.close()
    policy, workers = trace.get("x-loader-policy", "myopic"), trace.get("x-loader-workers", "2")
    policy = policy.split("+")[0]  # "myopic+chain": the Chain mode wraps the policy
    report = f"--schedule {schedule_out}" if schedule_out is not None else f"--policy {policy} --workers {workers}"
    err_console.print(
        f"the service runs {policy} on {workers} workers; next: loader compare --trace {out} --workers {workers}, "
        f"loader report --trace {out} {report} --out-dir plots",
        soft_wrap=True,
    )
