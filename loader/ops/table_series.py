"""Metric families with a ``table`` label whose export can be limited to chosen tables.

prometheus_client's labelled metrics export every child on every scrape: about 45 lines
per table for the counters and histograms below, so 450,000 lines at 10,000 tables, built
on the event loop. These families keep each table's values in plain objects and write a
scrape's samples only for the tables chosen for it (``Metrics`` chooses: every table, or
the stalest ones), while an aggregate over all tables, kept up to date on every change,
is always exported whole. Call sites keep prometheus_client's interface
(``family.labels(table, ...).inc()``, ``.observe()``, ``.set()``).

All changes happen on the event loop's thread (where every table's state lives), and so
does the scrape: there are no locks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Collection, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

INF = float("inf")


class _Family(ABC):
    """Children by (table, *extra labels), indexed by table for a selective scrape.

    A table the family was told about (``add_table``) is written with zeros for each label
    combination of ``zeros`` it has no child for yet, so a dashboard shows 0 rather than
    "no data" and increase() counts the first event, without an object per table and
    combination until something happens.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        extra_labels: Sequence[str],
        total_name: str,
        total_documentation: str,
        zeros: Sequence[Sequence[str]] | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = ["table", *extra_labels]
        self.total_name = total_name
        self.total_documentation = total_documentation
        self._zeros = [tuple(z) for z in zeros] if zeros is not None else ([] if extra_labels else [()])
        self._children: dict[tuple[str, ...], object] = {}
        self._by_table: dict[str, list[tuple[tuple[str, ...], object]]] = {}
        self._totals: dict[tuple[str, ...], object] = {}
        for extra in self._zeros:  # the aggregate exists (at zero) before the first event
            self._totals[extra] = self._new(None)

    def add_table(self, table: str) -> None:
        """Write this table's ``zeros`` from now on."""
        self._by_table.setdefault(table, [])

    def remove_table(self, table: str) -> None:
        """A retired table's series go. A counter's or histogram's aggregate keeps what the
        table added (an aggregate counter that went down would read as a reset); a gauge's
        aggregate, an amount now, loses the table's part."""
        for key, child in self._by_table.pop(table, []):
            del self._children[key]
            if isinstance(child, _GaugeChild):
                child.set(0.0)

    def _child(self, table: str, extra: tuple[str, ...]) -> object:
        key = (table, *extra)
        child = self._children.get(key)
        if child is None:
            if len(key) != len(self.label_names):
                raise ValueError(f"{self.name} takes labels {self.label_names}, got {list(key)}")
            total = self._totals.get(extra)
            if total is None:
                total = self._totals[extra] = self._new(None)
            child = self._children[key] = self._new(total)
            self._by_table.setdefault(table, []).append((key, child))
        return child

    @abstractmethod
    def _new(self, total: object | None) -> object:
        """A child series of this family's kind (its total for the aggregate, or None)."""

    def tables(self) -> Collection[str]:
        return self._by_table.keys()

    def selected(self, tables: Collection[str] | None) -> Iterator[tuple[tuple[str, ...], object | None]]:
        """(labels, child) of ``tables`` (None: every table), in the order given; None for a zero."""
        for table in self._by_table if tables is None else tables:
            found = self._by_table.get(table)
            if found is None:
                continue
            yield from found
            if self._zeros:
                have = {key[1:] for key, _ in found}
                for extra in self._zeros:
                    if extra not in have:
                        yield (table, *extra), None


class _CounterChild:
    __slots__ = ("value", "_total")

    def __init__(self, total: _CounterChild | None) -> None:
        self.value = 0.0
        self._total = total

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount
        if self._total is not None:
            self._total.value += amount


class TableCounter(_Family):
    """A counter per table (and extra labels), and its sum over tables under ``total_name``."""

    def labels(self, table: str, *extra: str) -> _CounterChild:
        return self._child(table, extra)  # type: ignore[return-value]

    def _new(self, total: object | None) -> _CounterChild:
        return _CounterChild(total)  # type: ignore[arg-type]

    def collect(self, tables: Collection[str] | None) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.label_names)
        for key, child in self.selected(tables):
            family.add_metric(key, 0.0 if child is None else child.value)  # type: ignore[attr-defined]
        total = CounterMetricFamily(self.total_name, self.total_documentation, labels=self.label_names[1:])
        for extra, child in self._totals.items():
            total.add_metric(extra, child.value)  # type: ignore[attr-defined]
        yield from (family, total)


class _GaugeChild:
    __slots__ = ("value", "_total")

    def __init__(self, total: _GaugeChild | None) -> None:
        self.value = 0.0
        self._total = total

    def set(self, value: float) -> None:
        if self._total is not None:
            self._total.value += value - self.value
        self.value = float(value)


class TableGauge(_Family):
    """A gauge per table; the total is the sum over tables (meaningful for amounts)."""

    def labels(self, table: str, *extra: str) -> _GaugeChild:
        return self._child(table, extra)  # type: ignore[return-value]

    def _new(self, total: object | None) -> _GaugeChild:
        return _GaugeChild(total)  # type: ignore[arg-type]

    def collect(self, tables: Collection[str] | None) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.label_names)
        for key, child in self.selected(tables):
            family.add_metric(key, 0.0 if child is None else child.value)  # type: ignore[attr-defined]
        yield family
        if self.total_name:
            total = GaugeMetricFamily(self.total_name, self.total_documentation, labels=self.label_names[1:])
            for extra, child in self._totals.items():
                total.add_metric(extra, child.value)  # type: ignore[attr-defined]
            yield total

    def value(self, table: str, *extra: str) -> float:
        child = self._children.get((table, *extra))
        return 0.0 if child is None else child.value  # type: ignore[attr-defined]


class _HistogramChild:
    __slots__ = ("bounds", "counts", "sum", "_total")

    def __init__(self, bounds: tuple[float, ...], total: _HistogramChild | None) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self._total = total

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bucket whose bound is >= value
        self.sum += value
        if self._total is not None:
            self._total.observe(value)

    def buckets(self, les: Sequence[str]) -> list[tuple[str, float]]:
        out, running = [], 0
        for le, count in zip(les, self.counts):
            running += count
            out.append((le, running))
        return out


class TableHistogram(_Family):
    """A histogram per table, and the histogram of every table's observations together."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        total_name: str,
        total_documentation: str,
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets))
        self.bounds = bounds if bounds and bounds[-1] == INF else (*bounds, INF)
        self._les = [floatToGoString(b) for b in self.bounds]  # as prometheus_client writes them: "1.0", "+Inf"
        super().__init__(name, documentation, (), total_name, total_documentation)

    def labels(self, table: str) -> _HistogramChild:
        return self._child(table, ())  # type: ignore[return-value]

    def _new(self, total: object | None) -> _HistogramChild:
        return _HistogramChild(self.bounds, total)  # type: ignore[arg-type]

    def collect(self, tables: Collection[str] | None) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.label_names)
        empty = [(le, 0.0) for le in self._les]
        for key, child in self.selected(tables):
            if child is None:
                family.add_metric(key, empty, 0.0)
            else:
                family.add_metric(key, child.buckets(self._les), child.sum)  # type: ignore[attr-defined]
        yield family
        total = HistogramMetricFamily(self.total_name, self.total_documentation, labels=[])
        for child in self._totals.values():
            total.add_metric([], child.buckets(self._les), child.sum)  # type: ignore[attr-defined]
        yield total
