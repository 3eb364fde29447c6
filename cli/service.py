"""The service's commands: ``serve`` and ``demo`` (the service with a demo producer: what
``scripts/run`` starts)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.console import ConfigOption, console, err_console, fail, settings_or_fail
from loader.config import ConfigError, Role, Settings

if TYPE_CHECKING:
    from cli.demo import DemoProducer

commands = typer.Typer()


def _serve(settings: Settings, demo: bool) -> None:
    from api.app import create_app
    from api.auth import tokens_file
    from cli.foreground import Foreground
    from loader.loading.java import JavaError, check_runtime

    try:
        check_runtime()
    except JavaError as exc:
        raise fail(str(exc)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Classic mode: loads talk to Spark through py4j from this process, giving up the GIL at
    # every round trip and waiting up to the switch interval to win it back from a busy
    # request handler. At 1 ms (default 5 ms) a load under intake pressure ran ~3x faster
    # for ~9% of the handler's throughput: BENCHMARKS.md, "A load beside a busy request
    # handler". In connect mode loads run in worker processes: the default stands.
    if settings.spark.mode == "classic":
        sys.setswitchinterval(0.001)
    for chatty in ("apscheduler", "httpx", "py4j"):  # a line per job run / request otherwise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        app_ = create_app(settings)
    except (ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    producer: DemoProducer | None = None

    def serving(base: str) -> None:
        nonlocal producer
        if not settings.auth_tokens:
            err_console.print(f"tokens: {tokens_file(settings)} (generated; operator and producer)")
        err_console.print(f"serving on {base}; data in {settings.data_dir}; API docs at {base}/docs", soft_wrap=True)
        where = f"the operator token in {tokens_file(settings)}" if not settings.auth_tokens else "an operator token"
        err_console.print(f"open {base}/ui in a browser to watch the tables ({where})", soft_wrap=True)
        if demo:
            from cli.client import LoaderClient, token_for
            from cli.demo import DemoProducer

            producer = DemoProducer(LoaderClient(base, token_for(settings, Role.operator)), console=console)
            producer.start()

    def before_stop() -> None:
        """The demo producer stops first, so that what it sent last is acknowledged."""
        if producer is not None:
            producer.stop()
            producer.join(timeout=10)

    start_error: list[str] = []
    foreground = Foreground(
        app_, settings, before_stop=before_stop, on_serving=serving, on_start_error=start_error.append
    )
    try:
        status = foreground.run()
    except Exception:  # a stop that failed half-way: not anticipated, its stack helps
        logging.getLogger("loader.serve").exception("the service did not stop cleanly")
        raise typer.Exit(code=1) from None
    finally:
        before_stop()
    if start_error:
        raise fail(start_error[0])
    if status:
        raise typer.Exit(code=status)


@commands.command("serve")
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
    _serve(settings_or_fail(config, host=host, port=port, data_dir=data_dir, workers=workers, policy=policy), demo)


@commands.command("demo")
def demo_command(
    config: ConfigOption = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8000).")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Default ./data.")] = None,
) -> None:
    """Run the service with a demo producer: watch tables fill and staleness move."""
    _serve(settings_or_fail(config, port=port, data_dir=data_dir), demo=True)


@commands.command("spark-connect")
def spark_connect_command(
    config: ConfigOption = None,
    master: Annotated[str | None, typer.Option(help="Cluster master URL (default: spark.master).")] = None,
    host: Annotated[str, typer.Option(help="gRPC listen address.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="gRPC port (what spark.remote of the loaders names).")] = 15002,
) -> None:
    """Run a Spark Connect server with the loader's Spark settings, in the foreground.

    For a cluster: run it where it can reach the master, and point loaders at it with
    spark.remote = "sc://<host>:<port>". The server needs the loader's session settings
    (timestamps as Delta stores them, UTC, the lean changes), which this command applies
    from the same configuration file the loaders read.
    """
    import os

    from loader.loading.connect_server import ConnectServer
    from loader.loading.java import JavaError, check_runtime
    from loader.loading.spark import session_settings

    settings = settings_or_fail(config)
    try:
        check_runtime()
    except JavaError as exc:
        raise fail(str(exc)) from None
    s = settings.spark
    chosen = master or s.master
    server = ConnectServer(
        chosen,
        session_settings(chosen, s.conf, 0, s.lean),
        settings.data_dir / "spark-connect.log",
        host=host,
        port=port,
        app_name=s.app_name,
    )
    command = server.command()
    err_console.print(f"Spark Connect server for {chosen} on sc://{host}:{port}")
    os.execvpe(command[0], command, server.environment())
