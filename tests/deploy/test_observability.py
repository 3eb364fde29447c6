"""The operators' view: Prometheus config and alert rules, Grafana provisioning and dashboard.

Against a real Prometheus (testing/prometheus_server.py) scraping a loader that runs a workload
on loopback, every PromQL expression of the dashboard and of deploy/prometheus/alerts.yml must
return data; promtool must accept the config and the rules, and its rule unit tests show the
alerts fire when they should; the dashboard JSON must be well formed and consistent with the
provisioning. Waiting is polling with deadlines.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from testing.prom import sample_value
from testing.prometheus_server import PrometheusServer, binaries
from testing.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "warehouse-loader.json"
VIEW_DASHBOARD = GRAFANA / "dashboards" / "join-views.json"
#: Every dashboard and the template variables its panels filter by.
DASHBOARDS = {DASHBOARD: ("instance", "table"), VIEW_DASHBOARD: ("instance", "view")}
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "dashboards.yml"
JOB = "warehouse-loader"
TABLES = ("orders", "clicks", "prices")
#: A latest table (docs/latest-tables.md), for the dashboard's key panels.
PRICES = {
    "name": "prices",
    "schema": {
        "columns": [
            {"name": "symbol", "type": "string", "nullable": False},
            {"name": "price", "type": "float64"},
        ]
    },
    "mode": "latest",
    "key": ["symbol"],
}

# Grafana's own variables and the durations they stand for in the live test (scrape interval 1 s).
BUILTINS = {"__rate_interval": "30s", "__interval": "5s", "__range": "5m"}
VARIABLE = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\$(\w+)|\[\[(\w+)(?::[\w]+)?\]\]")
# alerts.yml's convention: `<signal> <op> <number>` at the end, or `absent(<signal>)`.
THRESHOLD = re.compile(r"\s(?:>=|<=|==|!=|>|<)(?:\s+bool)?\s+-?[0-9][0-9.e+-]*\s*$")
ABSENT = re.compile(r"^\s*absent\((.*)\)\s*$", re.S)
LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.S)


# ---------------------------------------------------------------------------- reading the files
def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def all_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every target of every panel."""
    return [
        (f"panel {p['id']} {p['title']!r} target {t.get('refId')}", t.get("expr", ""))
        for p in all_panels(board)
        if p["type"] != "row"
        for t in p.get("targets", [])
    ]


def variable_query(var: dict[str, Any]) -> str:
    query = var.get("query", "")
    return query.get("query", "") if isinstance(query, dict) else query


def variables_used(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in VARIABLE.finditer(text)}


def substitute(text: str, values: dict[str, str]) -> str:
    def value(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        assert name in values, f"no value for ${name} in {text!r}"
        return values[name]

    return VARIABLE.sub(value, text)


def rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]


def signal(expr: str) -> str:
    """The part of an alert expression that always returns data (alerts.yml's convention)."""
    absent = ABSENT.match(expr)
    if absent:
        return absent.group(1)
    m = THRESHOLD.search(expr)
    assert m, f"alert expression does not end in `<op> <number>` nor is absent(...): {expr!r}"
    return expr[: m.start()].strip()


def rule_expressions() -> list[tuple[str, str]]:
    """(where, expr) of every recording rule and every alert's signal."""
    out = []
    for rule in rules():
        if "record" in rule:
            out.append((f"record {rule['record']}", rule["expr"].strip()))
        else:
            out.append((f"alert {rule['alert']} (signal)", signal(rule["expr"].strip())))
    return out


# ---------------------------------------------------------------------------- static checks
def test_every_dashboard_file_is_checked_and_has_its_own_uid() -> None:
    files = sorted(DASHBOARD.parent.glob("*.json"))
    assert files == sorted(DASHBOARDS), "a dashboard the tests do not check (add it to DASHBOARDS)"
    uids = [dashboard(f)["uid"] for f in files]
    assert len(uids) == len(set(uids)), uids


@pytest.mark.parametrize("path", list(DASHBOARDS), ids=lambda p: p.stem)
def test_the_dashboard_is_well_formed_and_uses_the_provisioned_datasource(path: Path) -> None:
    board = dashboard(path)
    required = DASHBOARDS[path]
    assert isinstance(board.get("schemaVersion"), int) and board["schemaVersion"] >= 36
    assert board.get("uid") and board.get("title")
    panels = list(all_panels(board))
    ids = [p.get("id") for p in panels]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), f"panel ids not unique: {ids}"

    [source] = load_yaml(DATASOURCES)["datasources"]
    assert source["type"] == "prometheus"
    expected = {"type": "prometheus", "uid": source["uid"]}
    for p in panels:
        pos = p.get("gridPos", {})
        assert {"h", "w", "x", "y"} <= set(pos), f"panel {p['id']} has no complete gridPos"
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, f"panel {p['id']}: {pos}"
        if p["type"] == "row":
            continue
        assert p.get("title"), f"panel {p['id']} has no title"
        assert p.get("datasource") == expected, f"panel {p['id']} {p['title']!r}: datasource {p.get('datasource')}"
        assert p.get("targets"), f"panel {p['id']} {p['title']!r} has no query"
        refs = [t.get("refId") for t in p["targets"]]
        assert len(refs) == len(set(refs)) and all(refs), f"panel {p['id']}: refIds {refs}"
        for t in p["targets"]:
            assert t.get("datasource", expected) == expected, f"panel {p['id']} target {t['refId']}"
            assert t.get("expr", "").strip(), f"panel {p['id']} {p['title']!r} target {t['refId']} has no expr"
    # No two panels overlap on the grid.
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        pos = p["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {p['id']} overlap at {(x, y)}"
                cells[(x, y)] = p["id"]

    # Every variable an expression, a title or a variable query uses is defined (or Grafana's own).
    defined = {v["name"]: v for v in board["templating"]["list"]}
    assert set(required) <= set(defined)
    texts = [expr for _, expr in queries(board)] + [p.get("title", "") for p in panels]
    texts += [variable_query(v) for v in defined.values()]
    for text in texts:
        unknown = variables_used(text) - set(defined) - set(BUILTINS)
        assert not unknown, f"undefined variables {unknown} in {text!r}"
    for name in required:
        var = defined[name]
        assert var["type"] == "query" and var.get("datasource") == expected, name
        assert LABEL_VALUES.match(variable_query(var)), f"${name}: {variable_query(var)!r}"
        assert any(f'{name}=~"${name}"' in expr for _, expr in queries(board)), f"no panel filters by ${name}"
    assert all(v["type"] != "datasource" for v in defined.values()), "a fixed datasource uid, not a ${DS} variable"


def test_the_grafana_provisioning_points_at_the_dashboard_directory() -> None:
    [provider] = load_yaml(PROVIDERS)["providers"]
    assert provider["type"] == "file"
    # Mounted as docker-compose.yml does: deploy/grafana/dashboards -> /var/lib/grafana/dashboards.
    assert Path(provider["options"]["path"]).name == DASHBOARD.parent.name == "dashboards"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    [source] = load_yaml(DATASOURCES)["datasources"]
    assert source.get("isDefault") and source["access"] == "proxy"
    assert source["jsonData"]["timeInterval"] == load_yaml(PROMETHEUS_CONFIG)["global"]["scrape_interval"]


def test_every_alert_follows_the_signal_threshold_convention() -> None:
    alerts = [r for r in rules() if "alert" in r]
    assert {r["alert"] for r in alerts} >= {
        "LoaderTableStale",
        "LoaderFallingBehind",
        "LoaderStretchHigh",
        "LoaderSpillDiskNearlyFull",
        "LoaderWalFsyncSlow",
        "LoaderTableRefusesWrites",
        "LoaderDown",
        "LoaderAbsent",
    }
    for rule in alerts:
        assert signal(rule["expr"].strip()) != rule["expr"].strip()
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"].get("summary"), rule["alert"]


# ---------------------------------------------------------------------------- promtool
@pytest.fixture(scope="module")
def prometheus_binaries() -> tuple[str, str]:
    return binaries()


def promtool(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_the_rules_and_the_config(prometheus_binaries: tuple[str, str], tmp_path: Path) -> None:
    tool = prometheus_binaries[1]
    result = promtool(tool, "check", "rules", str(ALERTS), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # From another directory: rule_files and credentials_file resolve relative to the config file.
    result = promtool(tool, "check", "config", str(PROMETHEUS_CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout + result.stderr


ALERT_LABELS = 'job="warehouse-loader", instance="loader:8000"'
RULE_TESTS = f"""
evaluation_interval: 1m
tests:
  # Per-table SLO: orders has the 120 s override, clicks the 300 s default. Staleness grows 30 s a minute.
  - interval: 1m
    input_series:
      - series: 'loader_table_staleness_seconds{{{ALERT_LABELS}, table="orders"}}'
        values: '0+30x30'
      - series: 'loader_table_staleness_seconds{{{ALERT_LABELS}, table="clicks"}}'
        values: '0+30x30'
      - series: 'loader_table_pending_updates{{{ALERT_LABELS}, table="orders"}}'
        values: '3x30'
      - series: 'loader_table_pending_updates{{{ALERT_LABELS}, table="clicks"}}'
        values: '0x30'
    promql_expr_test:
      - expr: table:loader_staleness_slo_seconds
        eval_time: 1m
        exp_samples:
          - labels: 'table:loader_staleness_slo_seconds{{{ALERT_LABELS}, table="orders"}}'
            value: 120
          - labels: 'table:loader_staleness_slo_seconds{{{ALERT_LABELS}, table="clicks"}}'
            value: 300
      # orders passes 120 s at 5m (150 s) and has been above it for 5 minutes at 10m; clicks passes 300 s at 11m.
      - expr: ALERTS{{alertname="LoaderTableStale", alertstate="firing"}}
        eval_time: 9m
        exp_samples: []
      - expr: ALERTS{{alertname="LoaderTableStale", alertstate="firing"}}
        eval_time: 10m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderTableStale", alertstate="firing",
            severity="warning", {ALERT_LABELS}, table="orders"}}'
            value: 1
      - expr: count(ALERTS{{alertname="LoaderTableStale", alertstate="firing"}})
        eval_time: 16m
        exp_samples:
          - value: 2
    # The description's template queries the pending updates of the table.
    alert_rule_test:
      - eval_time: 10m
        alertname: LoaderTableStale
        exp_alerts:
          - exp_labels: {{severity: warning, job: warehouse-loader, instance: "loader:8000", table: orders}}
            exp_annotations:
              summary: orders is staler than its SLO
              description: >-
                orders on loader:8000 has been at 250% of its staleness SLO (table:loader_staleness_slo_seconds)
                for 5 minutes. Pending updates: 3; 0 means the feed sent nothing new (a quiet or broken
                producer), more means the loader is behind.

  # Down, then gone.
  - interval: 1m
    input_series:
      - series: 'up{{{ALERT_LABELS}}}'
        values: '1 1 0 0 0 0 0'
    promql_expr_test:
      - expr: ALERTS{{alertname="LoaderDown", alertstate="firing"}}
        eval_time: 3m
        exp_samples: []
      - expr: ALERTS{{alertname="LoaderDown", alertstate="firing"}}
        eval_time: 4m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderDown", alertstate="firing", severity="critical", {ALERT_LABELS}}}'
            value: 1
      - expr: ALERTS{{alertname="LoaderAbsent", alertstate="firing"}}
        eval_time: 5m
        exp_samples: []
  - interval: 1m
    input_series:
      - series: 'up{{job="something-else", instance="x:1"}}'
        values: '1x10'
    promql_expr_test:
      - expr: ALERTS{{alertname="LoaderAbsent", alertstate="firing"}}
        eval_time: 5m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderAbsent", alertstate="firing",
            severity="critical", job="warehouse-loader"}}'
            value: 1

  # Spill disk: 70% for a while (quiet), then 90% for 5 minutes (fires).
  - interval: 1m
    input_series:
      - series: 'loader_pending_spilled_bytes{{{ALERT_LABELS}}}'
        values: '700x5 900x10'
      - series: 'loader_spill_disk_budget_bytes{{{ALERT_LABELS}}}'
        values: '1000x15'
    promql_expr_test:
      - expr: ALERTS{{alertname="LoaderSpillDiskNearlyFull", alertstate="firing"}}
        eval_time: 10m
        exp_samples: []
      - expr: ALERTS{{alertname="LoaderSpillDiskNearlyFull", alertstate="firing"}}
        eval_time: 11m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderSpillDiskNearlyFull", alertstate="firing",
            severity="warning", {ALERT_LABELS}}}'
            value: 1

  # Stretch: updates below 100 only, then one above (bucket counts are cumulative).
  - interval: 1m
    input_series:
      - series: 'loader_update_stretch_bucket{{{ALERT_LABELS}, table="clicks", le="100.0"}}'
        values: '0+5x40'
      - series: 'loader_update_stretch_bucket{{{ALERT_LABELS}, table="clicks", le="+Inf"}}'
        values: '0+5x20 106+5x20'
    promql_expr_test:
      - expr: ALERTS{{alertname="LoaderStretchHigh", alertstate="firing"}}
        eval_time: 20m
        exp_samples: []
      - expr: ALERTS{{alertname="LoaderStretchHigh", alertstate="firing"}}
        eval_time: 21m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderStretchHigh", alertstate="firing",
            severity="warning", {ALERT_LABELS}, table="clicks"}}'
            value: 1
      - expr: ALERTS{{alertname="LoaderStretchHigh", alertstate="firing"}}
        eval_time: 32m
        exp_samples: []

  # Batches: none failed (the signal is 0, not empty), then failures keep coming for 10 minutes.
  - interval: 1m
    input_series:
      - series: 'loader_batches_total{{{ALERT_LABELS}, table="orders", outcome="loaded"}}'
        values: '0+10x40'
      - series: 'loader_batches_total{{{ALERT_LABELS}, table="orders", outcome="failed"}}'
        values: '_x15 0+1x25'
    promql_expr_test:
      - expr: |
          (sum by (job, instance, table) (increase(loader_batches_total{{outcome="failed"}}[5m]))
           or 0 * sum by (job, instance, table) (increase(loader_batches_total[5m])))
        eval_time: 10m
        exp_samples:
          - labels: '{{{ALERT_LABELS}, table="orders"}}'
            value: 0
      - expr: ALERTS{{alertname="LoaderBatchesFailing", alertstate="firing"}}
        eval_time: 25m
        exp_samples: []
      - expr: ALERTS{{alertname="LoaderBatchesFailing", alertstate="firing"}}
        eval_time: 27m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderBatchesFailing", alertstate="firing",
            severity="critical", {ALERT_LABELS}, table="orders"}}'
            value: 1

  # A table refusing writes: no series before (the signal is 0 from the staleness series), then orders is
  # refused (an upsert into an append-only table) from 4m to 9m, then loads again (its series back to 0).
  - interval: 1m
    input_series:
      - series: 'loader_table_staleness_seconds{{{ALERT_LABELS}, table="orders"}}'
        values: '1x20'
      - series: 'loader_table_staleness_seconds{{{ALERT_LABELS}, table="clicks"}}'
        values: '1x20'
      - series: 'loader_table_writes_refused{{{ALERT_LABELS}, table="orders", reason="append_only"}}'
        values: '_x4 1x5 0x10'
    promql_expr_test:
      - expr: |
          (max by (job, instance, table, reason) (loader_table_writes_refused)
           or on (job, instance, table) 0 * group by (job, instance, table) (loader_table_staleness_seconds))
        eval_time: 2m
        exp_samples:
          - labels: '{{{ALERT_LABELS}, table="orders"}}'
            value: 0
          - labels: '{{{ALERT_LABELS}, table="clicks"}}'
            value: 0
      - expr: ALERTS{{alertname="LoaderTableRefusesWrites", alertstate="firing"}}
        eval_time: 4m
        exp_samples: []
      - expr: ALERTS{{alertname="LoaderTableRefusesWrites", alertstate="firing"}}
        eval_time: 5m
        exp_samples:
          - labels: 'ALERTS{{alertname="LoaderTableRefusesWrites", alertstate="firing",
            severity="critical", {ALERT_LABELS}, table="orders", reason="append_only"}}'
            value: 1
      - expr: ALERTS{{alertname="LoaderTableRefusesWrites", alertstate="firing"}}
        eval_time: 12m
        exp_samples: []
    alert_rule_test:
      - eval_time: 5m
        alertname: LoaderTableRefusesWrites
        exp_alerts:
          - exp_labels: {{severity: critical, job: warehouse-loader, instance: "loader:8000", table: orders,
                         reason: append_only}}
            exp_annotations:
              summary: "orders refuses the loader's writes (append_only)"
              description: >-
                Loads of orders on loader:8000 are refused by the Delta table itself
                (reason append_only: append_only, writer_feature or rule_unsupported). Its acknowledged
                updates wait and are retried with back-off; nothing is lost or quarantined. Each failed attempt's
                line in the loader's log ("... refuses the loader's writes: ...") names what the table declares and
                what to do (docs/service.md, "The table's own rules"); loads resume by themselves once the table
                allows them.
"""


def test_promtool_rule_unit_tests_fire_the_alerts_when_they_should(
    prometheus_binaries: tuple[str, str], tmp_path: Path
) -> None:
    spec = yaml.safe_load(RULE_TESTS)
    spec["rule_files"] = [str(ALERTS)]
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    result = promtool(prometheus_binaries[1], "test", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------- the live run
@dataclass
class Workload:
    """A producer posting to both tables, after a burst that spills and fills the spill disk (503) and a few 4xx.

    Prometheus has no value before a labelled counter's first increment, so increase() cannot see
    that increment: the burst waits for Prometheus to have scraped the spill writes and the first
    refusal before making more of them, so the dashboard's rates of both are positive.
    """

    url: str
    prometheus: PrometheusServer
    seed: int = 5
    stop: threading.Event = field(default_factory=threading.Event)
    statuses: Counter[int] = field(default_factory=Counter)
    thread: threading.Thread | None = None
    burst_requests: int = 0
    error: BaseException | None = None

    def _post(self, client: httpx.Client, table: str, rows: list[dict[str, Any]], token: str = PRODUCER) -> int:
        response = client.post(
            f"/v1/tables/{table}/updates", json={"rows": rows}, headers={"Authorization": f"Bearer {token}"}
        )
        self.statuses[response.status_code] += 1
        return response.status_code

    def _burst(self, client: httpx.Client) -> int:
        self.burst_requests += 1
        rows = [{"url": f"https://example.com/burst/{self.burst_requests}/{i}", "n": i} for i in range(200)]
        return self._post(client, "clicks", rows)

    def _scraped(self, expr: str) -> None:
        self.prometheus.wait(lambda: self.prometheus.query(expr), 20.0, f"Prometheus never scraped {expr}")

    def _produce(self) -> None:
        rng = random.Random(self.seed)
        try:
            with httpx.Client(base_url=self.url, timeout=30.0) as client:
                n = 0
                while not self.stop.is_set():
                    n += 1
                    orders = [
                        {"order_id": n * 100 + i, "amount": round(rng.uniform(1, 500), 2), "country": rng.choice("AB")}
                        for i in range(rng.randint(1, 20))
                    ]
                    self._post(client, "orders", orders)
                    clicks = [{"url": f"https://example.com/{rng.randrange(10**6)}", "n": i} for i in range(20)]
                    self._post(client, "clicks", clicks)
                    prices = [{"symbol": rng.choice("ABCDEFGH"), "price": rng.uniform(1, 2)} for _ in range(5)]
                    self._post(client, "prices", prices)
                    self.stop.wait(0.02)  # pacing of the feed, ~40 updates a second
        except BaseException as exc:  # shown by the test that waits for data
            self.error = exc

    def __enter__(self) -> Workload:
        self._scraped(f'up{{job="{JOB}"}} == 1')
        with httpx.Client(base_url=self.url, timeout=30.0) as client:
            operator = {"Authorization": f"Bearer {OPERATOR}"}
            assert client.post("/v1/admin/tables", json=PRICES, headers=operator).status_code == 201
            # 4xx: no token, an unknown table, a token limited to another table.
            self.statuses[client.get("/metrics").status_code] += 1
            assert self._post(client, "no_such_table", [{"x": 1}]) == 404
            assert self._post(client, "clicks", [{"url": "u", "n": 1}], token=ORDERS_ONLY) == 403
            # A burst into a paused table spills, then fills the spill disk budget: 503.
            assert client.post("/v1/admin/tables/clicks/pause", headers=operator).status_code == 200
            while sample_value(client.get("/metrics", headers=operator).text, "loader_spill_operations_total") == 0:
                assert self._burst(client) == 202 and self.burst_requests < 100, "the burst never spilled"
            self._scraped('loader_spill_operations_total{kind="write"}')
            while self._burst(client) != 503:
                assert self.burst_requests < 1000, "the spill disk budget was never reached"
            self._scraped("loader_intake_refused_total")
            assert self._burst(client) == 503  # still full: a second refusal, one Prometheus can count
            assert client.post("/v1/admin/tables/clicks/resume", headers=operator).status_code == 200
        self.thread = threading.Thread(target=self._produce, name="producer", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)


@dataclass
class Live:
    prometheus: PrometheusServer
    instance: str
    workload: Workload | Feed

    def values(self, board: dict[str, Any]) -> dict[str, str]:
        """Values for the dashboard's variables that exist in this run."""
        out = dict(BUILTINS, instance=self.instance, table="|".join(TABLES))
        for var in board["templating"]["list"]:
            if var["type"] in ("custom", "interval", "constant"):
                out[var["name"]] = var["current"]["value"]
        return out

    def missing(self, expressions: list[tuple[str, str]]) -> list[str]:
        """The expressions that return no sample with a finite value now (with what they returned)."""
        missing = []
        for where, expr in expressions:
            result = self.prometheus.query(expr)
            if not any(math.isfinite(float(sample["value"][1])) for sample in result):
                missing.append(f"{where}: {expr}\n    -> {result}")
        return missing

    def wait_for_data(self, expressions: list[tuple[str, str]], timeout: float = 45.0) -> None:
        deadline = time.monotonic() + timeout
        while missing := self.missing(expressions):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(missing)} of {len(expressions)} expressions returned no data within {timeout:.0f} s "
                    f"(requests by status: {dict(self.workload.statuses)}, producer error: {self.workload.error!r}):\n"
                    + "\n".join(missing)
                )
            time.sleep(0.5)


@dataclass
class Feed(ABC):
    """A producer on a thread beside ``scraping``: what it was answered, and what ended it
    (both shown when a panel waits for data in vain)."""

    url: str
    stop: threading.Event = field(default_factory=threading.Event)
    statuses: Counter[int] = field(default_factory=Counter)
    error: BaseException | None = None

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {PRODUCER}"}
        try:
            with httpx.Client(base_url=self.url, headers=headers, timeout=30.0) as client:
                self.feed(client)
        except BaseException as exc:  # shown by the test that waits for data
            self.error = exc

    @abstractmethod
    def feed(self, client: httpx.Client) -> None:
        """Post (``post``) until ``stop`` is set."""

    def post(self, client: httpx.Client, path: str, body: dict[str, Any]) -> None:
        self.statuses[client.post(path, json=body).status_code] += 1


@contextlib.contextmanager
def scraping(tmp: Path, url: str, feed: Feed) -> Iterator[Live]:
    """A real Prometheus scraping the loader at ``url`` (deploy/prometheus's job, every
    second) while ``feed.run`` feeds the loader on a thread; both stop on exit."""
    instance = url.removeprefix("http://")
    config = scrape_config(tmp, instance)
    thread = threading.Thread(target=feed.run, name="feed", daemon=True)
    thread.start()
    try:
        with PrometheusServer(binaries()[0], config, tmp) as prometheus:
            prometheus.wait(lambda: prometheus.query(f'up{{job="{JOB}"}} == 1'), 30.0, "the loader was not scraped")
            yield Live(prometheus, instance, feed)
    finally:
        feed.stop.set()
        thread.join(30)


def scrape_config(tmp: Path, instance: str) -> Path:
    """deploy/prometheus/prometheus.yml (written into ``tmp``) with the loader's job aimed at the
    test's loader, a token it accepts, a 1 s scrape and evaluation interval, and the real alerts.yml."""
    token_file = tmp / "loader-token"
    token_file.write_text(ORDERS_ONLY + "\n", encoding="utf-8")  # any valid token may read /metrics
    path = tmp / "prometheus.yml"
    config = load_yaml(PROMETHEUS_CONFIG)
    assert config["rule_files"] == [ALERTS.name]
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == JOB]
    assert job["static_configs"] == [{"targets": ["loader:8000"]}] and job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert (PROMETHEUS_DIR / job["authorization"]["credentials_file"]).is_file()
    job["static_configs"] = [{"targets": [instance]}]
    job["authorization"]["credentials_file"] = str(token_file)
    config["scrape_configs"] = [job]  # the self-scrape of the deployment does not apply here
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(ALERTS)]
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def live(prometheus_binaries: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("observability")
    budget = 64 << 10
    spill = {"memory_budget_bytes": budget, "disk_budget_bytes": 4 * budget, "retry_after_seconds": 1}
    with serve_in_thread(tmp / "data", spill=spill) as (url, _service):
        instance = url.removeprefix("http://")
        config = scrape_config(tmp, instance)
        with PrometheusServer(prometheus_binaries[0], config, tmp) as prometheus, Workload(url, prometheus) as workload:
            yield Live(prometheus, instance, workload)


def test_every_dashboard_and_alert_expression_returns_data_from_a_live_loader(live: Live) -> None:
    board = dashboard()
    values = live.values(board)
    expressions = [(where, substitute(expr, values)) for where, expr in queries(board)]
    expressions += rule_expressions()
    live.wait_for_data(expressions)
    # What the workload did is in what Prometheus scraped.
    statuses = {s["metric"]["status"] for s in live.prometheus.query(f"loader_http_requests_total{{job={JOB!r}}}")}
    assert {"202", "401", "403", "404", "503"} <= statuses, statuses
    kinds = {s["metric"]["kind"] for s in live.prometheus.query("loader_spill_operations_total")}
    assert "write" in kinds, kinds
    [up] = live.prometheus.query(f'up{{job="{JOB}"}}')
    assert up["metric"]["instance"] == live.instance and up["value"][1] == "1"
    # The panels show the workload's events, not just zeros (counted over the range, 5 minutes here).
    by_title = {p["title"]: p for p in all_panels(board)}
    for title in ("Intake refused (503) over the time range", "Stretch distribution (time range)"):
        result = live.prometheus.query(substitute(by_title[title]["targets"][0]["expr"], values))
        assert max(float(s["value"][1]) for s in result) > 0, (title, result)
    for expr in ('increase(loader_spill_operations_total{kind="write"}[5m])', "loader_table_max_stretch"):
        assert max(float(s["value"][1]) for s in live.prometheus.query(expr)) > 0, expr


def test_the_dashboard_variables_resolve_to_the_scraped_instance_and_tables(live: Live) -> None:
    board = dashboard()
    values = live.values(board)

    def resolved() -> dict[str, set[str]]:
        out = {}
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = LABEL_VALUES.match(variable_query(var))
            assert m, var["name"]
            selector, label = substitute(m.group(1), values), m.group(2)
            out[var["name"]] = set(live.prometheus.api(f"label/{label}/values", **{"match[]": selector}))
        return out

    # The latest table is registered once the loader runs: a scrape after that names it.
    live.prometheus.wait(lambda: resolved()["table"] == set(TABLES), 30.0, f"$table never resolved to {TABLES}")
    assert resolved()["instance"] == {live.instance}


def test_every_rule_loads_and_evaluates_healthy_in_prometheus(live: Live) -> None:
    names = {r.get("record") or r.get("alert") for r in rules()}

    def loaded() -> list[dict[str, Any]]:
        return [r for g in live.prometheus.api("rules")["groups"] for r in g["rules"]]

    def all_evaluated() -> bool:
        found = loaded()
        errors = [f"{r['name']}: {r.get('lastError')}" for r in found if r.get("health") == "err"]
        assert not errors, errors
        return {r["name"] for r in found} == names and all(r.get("health") == "ok" for r in found)

    live.prometheus.wait(all_evaluated, 30.0, "not every rule evaluated healthy")
    assert len(loaded()) == len(rules())


def test_the_per_table_slo_gives_orders_its_override_and_clicks_the_default(live: Live) -> None:
    live.prometheus.wait(
        lambda: len(live.prometheus.query("table:loader_staleness_slo_seconds")) == len(TABLES),
        30.0,
        "the SLO recording rule did not cover every table",
    )
    slo = {
        s["metric"]["table"]: float(s["value"][1]) for s in live.prometheus.query("table:loader_staleness_slo_seconds")
    }
    assert slo == {"orders": 120.0, "clicks": 300.0, "prices": 300.0}
