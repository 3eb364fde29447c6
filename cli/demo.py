"""A demo producer: registers a few tables and feeds them synthetic traffic through the
producer client (``producer``: batched, keyed, retried).

Rates differ by table (a fast click stream, slower orders and payments, a rare
inventory snapshot) so a newcomer watching ``GET /v1/tables`` or Grafana sees the
scheduler batch the fast feed and keep the slow ones fresh.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from cli.client import ClientError, LoaderClient
from cli.figures import milliseconds, significant
from producer import LoaderProducer, ProducerError


@dataclass(frozen=True)
class DemoTable:
    name: str
    period: float
    rows: int
    columns: tuple[tuple[str, str], ...]
    weight: float = 1.0


DEMO_TABLES = (
    DemoTable("clicks", 0.2, 20, (("event_time", "timestamp"), ("user_id", "int64"), ("url", "string"))),
    DemoTable(
        "orders",
        1.0,
        5,
        (("order_time", "timestamp"), ("order_id", "int64"), ("amount", "float64"), ("country", "string")),
        5.0,
    ),
    DemoTable("payments", 2.0, 3, (("paid_at", "timestamp"), ("order_id", "int64"), ("amount", "float64")), 3.0),
    DemoTable("inventory", 10.0, 50, (("sku", "string"), ("on_hand", "int32"), ("day", "date"))),
)


def _value(kind: str, rng: random.Random, now: float) -> Any:
    if kind == "timestamp":
        return now
    if kind in ("int64", "int32"):
        return rng.randrange(1, 100_000)
    if kind == "float64":
        return round(rng.uniform(1, 500), 2)
    if kind == "date":
        return time.strftime("%Y-%m-%d", time.gmtime(now))
    return rng.choice(["/", "/cart", "/checkout", "/search", "DE", "FR", "US", "sku-17", "sku-42"])


def definition(table: DemoTable) -> dict[str, Any]:
    return {
        "name": table.name,
        "schema": {"columns": [{"name": n, "type": t} for n, t in table.columns]},
        "weight": table.weight,
        "period_hint": table.period,
    }


class DemoProducer(threading.Thread):
    def __init__(
        self, client: LoaderClient, *, seed: int = 7, report_every: float = 5.0, console: Console | None = None
    ) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self.client = client
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.report_every = report_every
        self.console = console or Console()
        self.sent = 0
        self.producer: LoaderProducer | None = None

    def run(self) -> None:
        try:
            self.client.wait_ready()
            for table in DEMO_TABLES:
                self.client.register_table(definition(table))
        except (ClientError, TimeoutError, OSError, httpx.TransportError) as exc:
            self.console.print(f"[red]demo producer could not start:[/red] {exc}")
            return
        self.producer = LoaderProducer(url=self.client.base_url, token=self.client.token, producer_id="demo")
        next_send = {t.name: time.monotonic() for t in DEMO_TABLES}
        next_report = time.monotonic() + self.report_every
        while not self.stop_event.is_set():
            now = time.monotonic()
            for table in DEMO_TABLES:
                if next_send[table.name] <= now:
                    self._send(table)
                    next_send[table.name] = now + self.rng.expovariate(1.0 / table.period)
            if now >= next_report:
                self._report()
                next_report = now + self.report_every
            wait = min(min(next_send.values()), next_report) - time.monotonic()
            self.stop_event.wait(max(0.0, wait))
        try:
            self.producer.close(timeout=5.0)  # what is left unacknowledged then fails its futures
        except TimeoutError:
            self.console.print("[yellow]demo: stopped before every update was acknowledged[/yellow]")

    def _send(self, table: DemoTable) -> None:
        wall = time.time()
        rows = [{name: _value(kind, self.rng, wall) for name, kind in table.columns} for _ in range(table.rows)]
        assert self.producer is not None
        try:
            future = self.producer.send(table.name, rows)
        except ProducerError as exc:
            self.console.print(f"[yellow]demo: {table.name}: {exc}[/yellow]")
            return
        future.add_done_callback(lambda f, name=table.name: self._sent(name, f.exception()))

    def _sent(self, table: str, error: BaseException | None) -> None:
        if error is None:
            self.sent += 1
        else:
            self.console.print(f"[yellow]demo: {table}: {error}[/yellow]")

    def _report(self) -> None:
        try:
            tables = self.client.tables()
        except (ClientError, OSError, httpx.TransportError):
            return
        view = Table(title=f"demo: {self.sent} updates sent", title_justify="left")
        columns = ("table", "staleness s", "pending", "loaded seq", "delta version", "ms/1k rows", "overhead ms")
        for column in (*columns, "max stretch"):
            view.add_column(column, justify="left" if column == "table" else "right")
        for t in tables:
            view.add_row(
                t["name"],
                significant(t["staleness_seconds"]),
                f"{t['pending_updates']:,}",
                f"{t['last_loaded_sequence']:,}",
                "–" if t["delta_version"] is None else f"{t['delta_version']:,}",
                significant(t.get("ms_per_1k_rows")),
                milliseconds(t["overhead_seconds"]),
                significant(t["max_stretch"]),
            )
        self.console.print(view)

    def stop(self) -> None:
        self.stop_event.set()
