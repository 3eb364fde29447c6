"""The dashboard with 1,000 tables: a real Prometheus scraping a loader that exports top-k series.

One loader (Spark-free sink) with 1,002 tables, registered in one bulk call, ``[metrics]
per_table_series = "top-k"``; a producer posts to forty of them. Through
Prometheus's query API: every dashboard expression returns data, none returns more series
than a panel can show, the ``loader_tables_*`` aggregates count every table while the
per-table series are only the chosen ones, and a scrape carries a few thousand samples
rather than about 50,000. Waiting is polling with deadlines.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import httpx
import pytest

from testing.service_harness import OPERATOR, serve_in_thread
from tests.deploy.test_observability import BUILTINS, JOB, Feed, Live, dashboard, queries, scraping, substitute

TABLES = 1000
TOP_K = 20
#: Most series one panel query may return to stay readable (the panels ask for topk 10 or 20).
MOST_SERIES = 20
#: Latest tables (one row per k), so that whichever tables top-k exports, the key panels
#: have series too; freshness and the rest are as for append tables.
BULK = [
    {
        "name": f"t{i:04d}",
        "schema": {"columns": [{"name": "k", "type": "int64", "nullable": False}, {"name": "v", "type": "string"}]},
        "mode": "latest",
        "key": ["k"],
    }
    for i in range(TABLES)
]


class BulkFeed(Feed):
    """Updates to 40 of the tables, all 40 in each request, about 10 requests a second.

    Few enough that the tables chosen for their waiting updates are often the same from one
    scrape to the next: a per-table stretch histogram's ``increase`` needs two scrapes of one
    table with a load between them. Spread over 200 tables, that took 20 s of scrapes."""

    def feed(self, client: httpx.Client) -> None:
        rng = random.Random(11)
        fed = [row["name"] for row in BULK[:40]]
        while not self.stop.is_set():
            updates = [{"table": t, "rows": [{"k": rng.randrange(10**6), "v": "x"}]} for t in fed]
            self.post(client, "/v1/updates", {"updates": updates})
            self.stop.wait(0.1)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("dashboard-at-scale")
    metrics = {"per_table_series": "top-k", "top_k": TOP_K}
    with serve_in_thread(tmp / "data", metrics=metrics) as (url, _service):
        registered = httpx.post(
            f"{url}/v1/admin/tables:bulk",
            json={"tables": BULK},
            headers={"Authorization": f"Bearer {OPERATOR}"},
            timeout=300,
        )
        assert registered.status_code == 200, registered.text
        assert len(registered.json()["created"]) == TABLES
        with scraping(tmp, url, BulkFeed(url)) as live:
            yield live


def _values(live: Live) -> dict[str, str]:
    board = dashboard()
    out = dict(BUILTINS, instance=live.instance, table=".+")  # "All", as Grafana sends it
    for var in board["templating"]["list"]:
        if var["type"] in ("custom", "interval", "constant"):
            out[var["name"]] = var["current"]["value"]
    return out


def test_every_panel_returns_data_and_no_more_series_than_it_can_show(live: Live) -> None:
    values = _values(live)
    expressions = [(where, substitute(expr, values)) for where, expr in queries(dashboard())]
    live.wait_for_data(expressions, timeout=180.0)  # a deadline: busy cores slow the first loads
    crowded = {where: n for where, expr in expressions if (n := len(live.prometheus.query(expr))) > MOST_SERIES}
    assert not crowded, f"panels that would draw more than {MOST_SERIES} series: {crowded}"


def test_the_aggregates_count_every_table_while_only_the_chosen_tables_have_series(live: Live) -> None:
    prometheus = live.prometheus
    everyone = TABLES + 2  # and the harness's orders and clicks
    prometheus.wait(lambda: prometheus.query("loader_tables"), 30.0, "no loader_tables")
    [tables] = prometheus.query("loader_tables")
    assert float(tables["value"][1]) == everyone
    [counted] = prometheus.query('loader_tables_staleness_bucket{le="+Inf"}')
    assert float(counted["value"][1]) == everyone
    [exported] = prometheus.query("loader_tables_exported")
    assert TOP_K <= float(exported["value"][1]) <= 3 * TOP_K  # stalest, waiting longest, in trouble
    per_table = prometheus.query("loader_table_staleness_seconds")
    assert TOP_K <= len(per_table) <= 3 * TOP_K
    # The stalest table is among the exported ones (one scrape's samples compared).
    same = 'max(loader_table_staleness_seconds) == scalar(loader_tables_staleness_quantile_seconds{quantile="1.0"})'
    prometheus.wait(lambda: prometheus.query(same), 30.0, "the stalest table was not exported")
    [quantile] = prometheus.query("histogram_quantile(0.9, loader_tables_staleness_bucket)")
    assert float(quantile["value"][1]) > 0
    named = "loader_stalest_table_staleness_seconds and on (table) loader_table_staleness_seconds"
    prometheus.wait(lambda: prometheus.query(named), 30.0, "the stalest table is not named among the exported")


def test_a_scrape_carries_a_few_thousand_samples_not_one_set_per_table(live: Live) -> None:
    """About 50 samples a table would be ~50,000 at 1,002 tables; top-k keeps a scrape near
    the chosen tables' share plus the instance-wide series."""
    live.prometheus.wait(
        lambda: live.prometheus.query(f'scrape_samples_scraped{{job="{JOB}"}}'), 30.0, "no scrape recorded"
    )
    [samples] = live.prometheus.query(f'scrape_samples_scraped{{job="{JOB}"}}')
    assert float(samples["value"][1]) < 6000, samples
