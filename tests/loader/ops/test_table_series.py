"""Per-table families write what prometheus_client's labelled metrics wrote, for the tables chosen."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

from loader.ops.table_series import TableCounter, TableGauge, TableHistogram

BUCKETS = (1.0, 1.5, 2.0, 5.0, 100.0)


class Families(Collector):
    def __init__(self, *families: TableCounter | TableGauge | TableHistogram, tables: list[str] | None = None) -> None:
        self.families = families
        self.tables = tables

    def collect(self):  # type: ignore[no-untyped-def]
        for family in self.families:
            yield from family.collect(self.tables)


def samples(registry: CollectorRegistry, *prefixes: str) -> list[str]:
    """Sample lines of the named families, without prometheus_client's ``_created`` series."""
    lines = generate_latest(registry).decode().splitlines()
    return sorted(
        line
        for line in lines
        if not line.startswith("#") and "_created" not in line and line.split("{")[0].split(" ")[0].startswith(prefixes)
    )


def test_the_exposition_matches_prometheus_clients_for_the_same_events() -> None:
    rng = random.Random(4)
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    h1 = Histogram("x_stretch", "Stretch.", ["table"], buckets=BUCKETS, registry=theirs)
    c1 = Counter("x_batches", "Batches.", ["table", "outcome"], registry=theirs)
    g1 = Gauge("x_version", "Version.", ["table"], registry=theirs)
    h2 = TableHistogram("x_stretch", "Stretch.", BUCKETS, "x_all_stretch", "All.")
    c2 = TableCounter("x_batches", "Batches.", ["outcome"], "x_all_batches", "All.")
    g2 = TableGauge("x_version", "Version.", [], "", "")
    ours.register(Families(h2, c2, g2))
    for _ in range(500):
        table, value = rng.choice("abcd"), rng.choice([0.5, 1.0, 1.2, 1.5, 3.0, 100.0, 250.0])
        for h in (h1, h2):
            h.labels(table).observe(value)
        outcome, amount = rng.choice(["loaded", "failed"]), rng.choice([1, 2.5])
        for c in (c1, c2):
            c.labels(table, outcome).inc(amount)
        for g in (g1, g2):
            g.labels(table).set(value)
    assert samples(ours, "x_stretch", "x_batches", "x_version") == samples(
        theirs, "x_stretch", "x_batches", "x_version"
    )


def test_a_selective_scrape_writes_the_chosen_tables_and_totals_over_all() -> None:
    counter = TableCounter("x_rows", "Rows.", [], "x_all_rows", "Rows, all tables.")
    histogram = TableHistogram("x_seconds", "Seconds.", (1.0, 10.0), "x_all_seconds", "Seconds, all tables.")
    quarantined = TableGauge("x_held", "Held.", [], "x_all_held", "Held, all tables.")
    for k, table in enumerate(["a", "b", "c"]):
        counter.labels(table).inc(k + 1)
        histogram.labels(table).observe(k * 5.0)
        quarantined.labels(table).set(k)
    quarantined.labels("c").set(7)  # a gauge's total follows each change
    registry = CollectorRegistry()
    registry.register(Families(counter, histogram, quarantined, tables=["b"]))
    text = generate_latest(registry).decode()
    assert 'x_rows_total{table="b"} 2.0' in text and 'table="a"' not in text and 'table="c"' not in text
    assert "x_all_rows_total 6.0" in text
    assert 'x_seconds_bucket{le="10.0",table="b"} 1.0' in text
    assert 'x_all_seconds_bucket{le="1.0"} 1.0' in text and 'x_all_seconds_bucket{le="+Inf"} 3.0' in text
    assert "x_all_seconds_sum 15.0" in text and "x_all_held 8.0" in text
    assert quarantined.value("c") == 7.0 and quarantined.value("nope") == 0.0


def test_the_totals_exist_before_any_table_does() -> None:
    registry = CollectorRegistry()
    registry.register(Families(TableCounter("x_rows", "Rows.", [], "x_all_rows", "All.")))
    assert "x_all_rows_total 0.0" in generate_latest(registry).decode()


def test_a_counter_refuses_a_negative_increment_and_a_wrong_label_count() -> None:
    counter = TableCounter("x_batches", "Batches.", ["outcome"], "x_all", "All.")
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("a", "loaded").inc(-1)
    with pytest.raises(ValueError, match="labels"):
        counter.labels("a")


def test_a_removed_table_leaves_its_family_and_only_a_gauge_total_drops_its_part() -> None:
    counter = TableCounter("x_batches", "Batches.", ["outcome"], "x_all_batches", "All.", zeros=[("loaded",)])
    gauge = TableGauge("x_pending", "Pending.", [], "x_all_pending", "All pending.")
    for family in (counter, gauge):
        family.add_table("a")
        family.add_table("b")
    counter.labels("a", "loaded").inc(3)
    counter.labels("b", "loaded").inc(2)
    gauge.labels("a").set(5)
    gauge.labels("b").set(1)
    for family in (counter, gauge):
        family.remove_table("a")
    registry = CollectorRegistry()
    registry.register(Families(counter, gauge))
    lines = samples(registry, "x_")
    assert not [line for line in lines if 'table="a"' in line]
    assert 'x_all_batches_total{outcome="loaded"} 5.0' in lines  # a counter's total never goes down
    assert "x_all_pending 1.0" in lines
    counter.labels("a", "loaded").inc()  # a new table of the name starts from zero
    assert counter.labels("a", "loaded").value == 1
