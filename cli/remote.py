"""Commands against a running service: ``submit`` (a producer's update) and ``export-trace``
(what the service saw, for the simulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.console import ConfigOption, err_console, fail, settings_or_fail
from loader.config import Role

commands = typer.Typer()


@commands.command("submit")
def submit_command(
    table: Annotated[str, typer.Argument(help="Table to submit to.")],
    file: Annotated[
        Path,
        typer.Argument(
            help="NDJSON rows or an Arrow IPC file/stream (.arrow, .arrows: sent in the body as columns), "
            "or a .parquet/.csv in the landing directory."
        ),
    ],
    url: Annotated[str, typer.Option(help="Service URL.")] = "http://127.0.0.1:8000",
    token: Annotated[
        str | None, typer.Option(envvar="LOADER_TOKEN", help="Bearer token (default: the generated producer token).")
    ] = None,
    config: ConfigOption = None,
    key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Your own key for this file: the same command again loads it once."),
    ] = None,
    producer_id: Annotated[
        str | None, typer.Option(help="A durable producer's id (with --state-dir): keys survive its restarts.")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="Where a durable producer journals what it sent until acknowledged.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to get an acknowledgement, retries included.")] = 120.0,
) -> None:
    """Submit one file as an update through the producer client (docs/producers.md: retried with
    its Idempotency-Key until acknowledged) and print the acknowledgement."""
    import json

    from cli.client import token_for
    from producer import DeliveryTimeout, LoaderProducer, ProducerSettings, RequestRefused

    if not file.is_file():
        raise fail(f"{file} is not a file")
    try:
        token = token or token_for(settings_or_fail(config), Role.producer)
        settings = ProducerSettings(
            url=url, token=token, producer_id=producer_id, state_dir=state_dir, linger=0.0, delivery_timeout=timeout
        )
    except (RuntimeError, ValueError) as exc:
        raise fail(str(exc)) from None
    columns = _arrow_file(file) if file.suffix.lower() in ARROW_SUFFIXES else None
    with LoaderProducer(settings) as producer:
        try:
            if columns is not None:
                ack = producer.send(table, columns, key=key).result()
            else:
                ack = producer.send(table, file=file, key=key).result()
        except RequestRefused as exc:
            raise fail(f"HTTP {exc.status}: {exc.message}") from None
        except DeliveryTimeout as exc:
            raise fail(
                f"cannot reach {url} or no acknowledgement within {timeout:g} s ({exc.last}); "
                "is `loader serve` running there?"
            ) from None
        except (ValueError, OSError) as exc:
            raise fail(str(exc)) from None
    answer = {"table": ack.table, "sequence": ack.sequence, "release_time": ack.release_time, "key": ack.key}
    print(json.dumps({"updates": [answer | {"replayed": ack.replayed}]}))


#: Files ``submit`` reads as Arrow IPC (the file format, or a stream) and sends as columns.
ARROW_SUFFIXES = (".arrow", ".arrows", ".ipc", ".feather")


def _arrow_file(path: Path) -> object:
    """The table an Arrow IPC file or stream holds (Feather v2 is the IPC file format)."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            try:
                return pa.ipc.open_file(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                return pa.ipc.open_stream(source).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise fail(
            f"{path} is not an Arrow IPC file or stream ({exc}); write it with pyarrow.ipc, or send NDJSON"
        ) from None


@commands.command("export-trace")
def export_trace_command(
    out: Annotated[Path, typer.Option("--out", help="Trace file to write (JSON Lines, the simulator's format).")],
    schedule_out: Annotated[
        Path | None, typer.Option("--schedule-out", help="Also write the recorded batches here (schedule format).")
    ] = None,
    jobs_out: Annotated[
        Path | None,
        typer.Option("--jobs-out", help="Also write the newest jobs' timelines here (loader simulate/compare --jobs)."),
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

    for target in (out, schedule_out, jobs_out):
        if target is not None and not target.parent.is_dir():
            raise fail(f"cannot write {target}: directory {target.parent} does not exist; create it first")
    if since is not None and since <= 0:
        raise fail("--since must be a positive number of seconds")
    try:
        token = token or token_for(settings_or_fail(config), Role.operator)
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
        if jobs_out is not None:
            done = client.download("/v1/admin/jobs", {"since": since}, jobs_out)
            err_console.print(f"wrote {jobs_out}: {int(done.get('x-jobs-lines', '0')):,} jobs", soft_wrap=True)
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
    staged = f" --jobs {jobs_out}" if jobs_out is not None else ""
    err_console.print(
        f"the service runs {policy} on {workers} workers; next: "
        f"loader compare --trace {out} --workers {workers}{staged}, "
        f"loader report --trace {out} {report} --out-dir plots",
        soft_wrap=True,
    )
