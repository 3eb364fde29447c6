"""The join views dashboard against a live loader: a real Prometheus scraping a loader (the
Spark-free sink) with two three-way views over sales -> clients -> regions, one choosing its
caches adaptively (A-Caching, its estimates made quickly) and one with section 6's
globally-consistent cache forced, while a producer feeds sales and clients. Through
Prometheus's query API every panel of ``join-views.json`` returns data, the cache panels
show the forced cache at work, and the dashboard's variables resolve to the two views.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testing.service_harness import OPERATOR, serve_in_thread
from tests.deploy.test_observability import (
    BUILTINS,
    LABEL_VALUES,
    VIEW_DASHBOARD,
    Feed,
    Live,
    dashboard,
    queries,
    scraping,
    substitute,
    variable_query,
)

TABLES = {
    "regions": {"rid": "int64", "rname": "string"},
    "clients": {"cid": "int64", "rid": "int64"},
    "sales": {"sid": "int64", "cid": "int64", "amt": "float64"},
}
CLIENTS, REGIONS = 20, 4


def view(name: str, caching: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": [
            {"table": "sales", "alias": "s", "window": {"rows": 50}},
            {"table": "clients", "alias": "c"},
            {"table": "regions"},
        ],
        "on": ["s.cid = c.cid", "c.rid = regions.rid"],
        "select": ["s.sid", "regions.rname"],
        "caching": caching,
    }


VIEWS = (
    # The clients-regions cache in the sales pipeline, forced: probes, hits, bytes, evictions.
    view("geo", {"mode": "static", "caches": ["s:[c regions]*"]}),
    # A-Caching with estimates after a few updates: benefit and cost per candidate.
    view("geo_adaptive", {"interval": 20, "observations": 2, "profile_probability": 1.0}),
)


class SalesFeed(Feed):
    """Regions and clients once, then sales (5 rows) every 50 ms and a client moving now and then."""

    def feed(self, client: httpx.Client) -> None:
        rng = random.Random(17)

        def post(table: str, rows: list[dict[str, Any]]) -> None:
            self.post(client, f"/v1/tables/{table}/updates", {"rows": rows})

        post("regions", [{"rid": r, "rname": f"region-{r}"} for r in range(REGIONS)])
        post("clients", [{"cid": c, "rid": c % REGIONS} for c in range(CLIENTS)])
        n = 0
        while not self.stop.is_set():
            n += 1
            post("sales", [{"sid": n * 10 + i, "cid": rng.randrange(CLIENTS), "amt": 1.0} for i in range(5)])
            if n % 5 == 0:
                post("clients", [{"cid": rng.randrange(CLIENTS), "rid": rng.randrange(REGIONS)}])
            self.stop.wait(0.05)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("view-dashboard")
    with serve_in_thread(tmp / "data") as (url, _service):
        operator = {"Authorization": f"Bearer {OPERATOR}"}
        for name, columns in TABLES.items():
            schema = {"columns": [{"name": c, "type": t} for c, t in columns.items()]}
            answer = httpx.post(f"{url}/v1/admin/tables", json={"name": name, "schema": schema}, headers=operator)
            assert answer.status_code == 201, answer.text
        for declaration in VIEWS:
            answer = httpx.post(f"{url}/v1/admin/views", json=declaration, headers=operator)
            assert answer.status_code == 201, answer.text
        with scraping(tmp, url, SalesFeed(url)) as live:
            yield live


def _values(live: Live) -> dict[str, str]:
    return dict(BUILTINS, instance=live.instance, view=".+")  # "All", as Grafana sends it


def test_every_panel_returns_data_from_a_live_loader(live: Live) -> None:
    board = dashboard(VIEW_DASHBOARD)
    values = _values(live)
    live.wait_for_data([(where, substitute(expr, values)) for where, expr in queries(board)], timeout=120.0)
    by_title = {title: expr for where, expr in queries(board) for title in [where.split("'")[1]]}
    # The forced cache is hit (most sales find their client's regions cached) and holds bytes.
    # (geo_adaptive may have chosen a cache by now too: only the forced one is certain.)
    ratios = live.prometheus.query(substitute(by_title["Cache hit ratio per view"], values))
    ratio = {r["metric"]["view"]: float(r["value"][1]) for r in ratios}
    assert 0.5 < ratio["geo"] <= 1.0, ratios
    states = live.prometheus.query(substitute(by_title["Candidate caches by state"], values))
    assert {s["metric"]["state"]: float(s["value"][1]) for s in states}["used"] >= 1, states
    rows = live.prometheus.query(substitute(by_title["Candidates: pipeline, scope and state"], values))
    shown = {(r["metric"]["view"], r["metric"]["cache"]): (r["metric"]["scope"], r["metric"]["state"]) for r in rows}
    assert shown[("geo", "s:[c regions]*")] == ("global", "used"), shown
    assert {view for view, _ in shown} == {"geo", "geo_adaptive"}


def test_the_view_variable_resolves_to_the_views(live: Live) -> None:
    board = dashboard(VIEW_DASHBOARD)
    values = _values(live)
    resolved: dict[str, set[str]] = {}
    for var in board["templating"]["list"]:
        m = LABEL_VALUES.match(variable_query(var))
        assert m, var["name"]
        selector, label = substitute(m.group(1), values), m.group(2)
        resolved[var["name"]] = set(live.prometheus.api(f"label/{label}/values", **{"match[]": selector}))
    assert resolved == {"instance": {live.instance}, "view": {"geo", "geo_adaptive"}}


def test_the_two_dashboards_link_to_each_other_by_tag() -> None:
    for board in (dashboard(VIEW_DASHBOARD), dashboard()):
        [link] = board["links"]
        assert link["type"] == "dashboards" and link["tags"] == ["warehouse-loader"], link
        assert "warehouse-loader" in board["tags"]
