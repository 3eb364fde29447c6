"""/metrics at 1,000 tables: every table's series, or the top-k's plus aggregates over all.

A service without Spark (``load=False``): the dispatcher never starts, so released updates
stay pending and each table's staleness is set by when it was registered.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loader.config import load_settings
from loader.core.updates import Update
from loader.service import LoaderService

TABLES = 1000
K = 5
NAMES = [f"t{i:04d}" for i in range(TABLES)]  # registered in this order: t0000 is the stalest
WAITING = ["t0900", "t0901", "t0902", "t0903", "t0904", "t0905", "t0906"]  # released in this order
HELD = "t0500"  # quarantined updates: in trouble, though neither stale nor waiting


def scrape(service: LoaderService) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(generate_latest(service.metrics.registry).decode()):
        for sample in family.samples:
            out[sample.name].append((sample.labels, sample.value))
    return out


def tables_of(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> set[str]:
    return {labels["table"] for labels, _ in samples[name]}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoaderService]:
    data = Path(tmp_path_factory.mktemp("metrics")) / "data"
    declared = [{"name": name, "schema": {"columns": [{"name": "k", "type": "int64"}]}} for name in NAMES]
    settings = load_settings(
        None, data_dir=data, tables=declared, auth_tokens=[{"token": "t" * 20, "role": "operator"}]
    )
    loop = asyncio.new_event_loop()
    running = LoaderService.running(settings, load=False)
    started = loop.run_until_complete(running.__aenter__())
    for seq, name in enumerate(WAITING, start=1):
        started.dispatcher.released(Update(name, 1, time.time() + seq * 1e-3))
    m = started.metrics
    for name in NAMES:
        m.updates_received.labels(name).inc()
        m.stretch.labels(name).observe(1.25)
    m.quarantined.labels(HELD).set(3)
    yield started
    loop.run_until_complete(running.__aexit__(None, None, None))
    loop.close()


def test_every_table_has_its_series_by_default(service: LoaderService) -> None:
    service.metrics.attach(service.dispatcher, top_k=None)
    samples = scrape(service)
    for name in ("loader_table_staleness_seconds", "loader_updates_received_total", "loader_update_stretch_count"):
        assert tables_of(samples, name) == set(NAMES), name
    [(_, exported)] = samples["loader_tables_exported"]
    assert exported == TABLES
    # The aggregates are the sums of the per-table series of the same scrape.
    for total, per_table in (
        ("loader_tables_staleness_seconds_squared_total", "loader_table_staleness_seconds_squared_total"),
        ("loader_tables_low_bound_seconds_squared_total", "loader_table_low_bound_seconds_squared_total"),
        ("loader_tables_total_staleness_seconds", "loader_table_staleness_seconds"),
        ("loader_tables_pending_updates", "loader_table_pending_updates"),
    ):
        [(_, value)] = samples[total]
        assert math.isclose(value, math.fsum(v for _, v in samples[per_table]), rel_tol=1e-9), total


def test_top_k_exports_the_stalest_the_longest_waiting_and_those_in_trouble(service: LoaderService) -> None:
    service.metrics.attach(service.dispatcher, top_k=K)
    samples = scrape(service)
    chosen = set(NAMES[:K]) | set(WAITING[:K]) | {HELD}
    for name in (
        "loader_table_staleness_seconds",
        "loader_table_pending_updates",
        "loader_table_weight",
        "loader_updates_received_total",
        "loader_update_stretch_count",
        "loader_batches_total",
        "loader_table_quarantined_updates",
    ):
        assert tables_of(samples, name) == chosen, name
    [(_, exported)] = samples["loader_tables_exported"]
    assert exported == len(chosen) == 2 * K + 1


def test_top_k_aggregates_still_cover_every_table(service: LoaderService) -> None:
    service.metrics.attach(service.dispatcher, top_k=K)
    samples = scrape(service)

    def one(name: str, **labels: str) -> float:
        [value] = [v for found, v in samples[name] if all(found.get(k) == x for k, x in labels.items())]
        return value

    assert one("loader_tables") == TABLES
    assert one("loader_tables_staleness_bucket", le="+Inf") == TABLES
    assert one("loader_tables_updates_received_total") == TABLES
    assert one("loader_tables_update_stretch_count") == TABLES
    assert one("loader_tables_update_stretch_bucket", le="1.0") == 0
    assert one("loader_tables_update_stretch_bucket", le="1.5") == TABLES
    assert one("loader_tables_pending_updates") == len(WAITING)
    assert one("loader_tables_quarantined_updates") == 3
    stalest = one("loader_tables_staleness_quantile_seconds", quantile="1.0")
    median = one("loader_tables_staleness_quantile_seconds", quantile="0.5")
    assert stalest >= median > 0
    [(labels, value)] = samples["loader_stalest_table_staleness_seconds"]
    assert labels["table"] == "t0000" and value == stalest
    bounds = [(float(labels["le"]), v) for labels, v in samples["loader_tables_staleness_bucket"]]
    assert [v for _, v in sorted(bounds)] == sorted(v for _, v in bounds)  # cumulative


def test_a_top_k_scrape_is_a_small_fraction_of_a_full_one(service: LoaderService) -> None:
    service.metrics.attach(service.dispatcher, top_k=None)
    full = len(generate_latest(service.metrics.registry))
    service.metrics.attach(service.dispatcher, top_k=K)
    small = len(generate_latest(service.metrics.registry))
    assert small * 20 < full


def test_a_selection_answers_with_what_it_names_and_builds_no_other_table_series(service: LoaderService) -> None:
    """GET /metrics?names=...: the page at /ui polls a few aggregates every 2 s, which at
    1,000 tables must not cost a whole scrape (every table's series built, then dropped)."""
    service.metrics.attach(service.dispatcher, top_k=None)
    built: list[list[int]] = []
    tables = service.metrics._tables
    real = tables._per_table

    def counting(chosen, staleness, now):  # type: ignore[no-untyped-def]
        built.append(list(chosen))
        return real(chosen, staleness, now)

    tables._per_table = counting  # type: ignore[method-assign]
    try:
        wanted = {"loader_tables", "loader_tables_batches_total", "loader_workers"}
        text = generate_latest(service.metrics.selected(wanted)).decode()  # type: ignore[arg-type]
        assert built and not any(built), "a selection of aggregates built per-table series"
        samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
        assert set(samples) == wanted  # a sample named: that sample, not its family's _created
        assert samples["loader_tables"].value == TABLES
        named = generate_latest(service.metrics.selected({"loader_table_staleness_seconds"})).decode()  # type: ignore[arg-type]
        per_table = [s for f in text_string_to_metric_families(named) for s in f.samples]
        assert {s.labels["table"] for s in per_table} == set(NAMES)
        assert {s.name for s in per_table} == {"loader_table_staleness_seconds"}
    finally:
        del tables._per_table
    assert tables.per_table, "the next full scrape builds per-table series again"
    assert tables_of(scrape(service), "loader_table_staleness_seconds") == set(NAMES)
