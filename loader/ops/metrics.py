"""Prometheus metrics of the service (names follow the Prometheus naming conventions).

Freshness figures (current-up-to timestamp, staleness now, staleness integral, LOW,
max stretch, pending) are computed at scrape time by a custom collector from the same
``FreshnessLedger`` the simulator uses, so every scrape is exact rather than sampled by
a periodic job; the staleness integral includes the open segment since the last load
and is therefore a true monotone counter. A dashboard computes the ratio to the lower
bound over any window as increase(staleness) / increase(low).

Series per table (``loader_table_*`` and the counters and histograms with a ``table``
label) are about 60 per table; ``[metrics] per_table_series = "top-k"`` exports them
only for the stalest tables, while the ``loader_tables_*`` aggregates (counts, the
distribution of staleness across tables, sums of the counters) always cover every table
(docs/scaling.md).
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from loader.loading.dispatcher import Dispatcher
from loader.loading.views.registry import JoinViews
from loader.ops.table_series import TableCounter, TableGauge, TableHistogram
from loader.pending.spill.model import DiskOp
from loader.pending.store import PendingStore

#: Outcomes of a batch (loader_batches_total) and how an operator resolves quarantined updates.
OUTCOMES = ("loaded", "skipped", "failed", "quarantined")
RESOLUTIONS = ("retried", "discarded")
STRETCH_BUCKETS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1000.0)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
JOB_TABLES_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)
#: A job stage's seconds: from the event loop's sub-millisecond steps to a slow Spark job.
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


#: Upper bounds (seconds) of ``loader_tables_staleness_bucket``: how many tables are at most that stale.
TABLE_STALENESS_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0)
#: Quantiles of staleness across tables (exact, this instance); 1 is the stalest table.
TABLE_STALENESS_QUANTILES = (0.5, 0.9, 0.99, 1.0)


class TablesCollector(Collector):
    """Every per-table family for the tables chosen at this scrape, and aggregates over all.

    Freshness is computed here, at scrape time, from the dispatcher's ledger. With
    ``top_k`` the per-table series are those of the ``top_k`` stalest tables (quiet feeds
    among them: their tables are stale too), of the ``top_k`` whose oldest pending update
    waits longest (the loader's backlog), and of up to ``top_k`` tables in trouble
    (quarantined updates first, then failed loads), so that an alert on a table that
    fails but is not stale still fires. The ``loader_tables_*`` aggregates always cover
    every table, so instance-wide panels stay exact.
    """

    def __init__(self, metrics: Metrics, clock: Callable[[], float] = time.time) -> None:
        self._metrics = metrics
        self._clock = clock
        #: Where freshness comes from; until a service attaches one, only the families' own series.
        self.dispatcher: Dispatcher | None = None
        #: None: every table's series; k: the k stalest (and up to k in trouble).
        self.top_k: int | None = None
        #: False while a selection that names no per-table family is collected (``Metrics.selected``).
        self.per_table = True

    def _chosen(self, tids: list[int], staleness: list[float]) -> list[int]:
        """Positions in ``tids`` (the live tables' ids) of the tables to export."""
        d, k = self.dispatcher, self.top_k
        assert d is not None
        n = len(staleness)
        if k is None or n <= k:
            return list(range(n))
        stalest = heapq.nlargest(k, range(n), key=staleness.__getitem__)
        live = [(at, d.states[tid]) for at, tid in enumerate(tids)]
        waiting = heapq.nsmallest(
            k,
            (at for at, state in live if state.pending_count),
            key=lambda at: live[at][1].oldest_pending,
        )
        quarantined = self._metrics.quarantined
        trouble = []
        for at, state in live:
            held, failures = quarantined.value(state.name), d.failures(state.name)
            if held or failures:
                trouble.append(((held, failures, staleness[at]), at))
        worst = heapq.nlargest(k, trouble)
        return sorted(set(stalest).union(waiting, (at for _, at in worst)))

    def collect(self) -> Iterator[Metric]:
        d = self.dispatcher
        if d is None:
            for family in self._metrics.table_families:
                yield from family.collect(None)
            return
        now = self._clock()
        ledger = d.ledger
        states = d.states
        tids = d.live()  # (retired tables' ids are tombstones: not exported)
        staleness = [ledger.staleness_at(tid, now) for tid in tids]
        chosen = self._chosen(tids, staleness) if self.per_table else []
        yield from self._per_table([tids[at] for at in chosen], [staleness[at] for at in chosen], now)
        yield from self._aggregates(tids, staleness, len(chosen), now)
        names = None if len(chosen) == len(states) else [states[tids[at]].name for at in chosen]
        for family in self._metrics.table_families:
            yield from family.collect(names)

    def _per_table(self, chosen: list[int], staleness: list[float], now: float) -> Iterator[Metric]:
        d = self.dispatcher
        assert d is not None
        upto = GaugeMetricFamily(
            "loader_table_current_upto_timestamp_seconds",
            "Release time (Unix seconds) of the newest update loaded into the table.",
            labels=["table"],
        )
        stale = GaugeMetricFamily("loader_table_staleness_seconds", "Staleness of the table now.", labels=["table"])
        integral = CounterMetricFamily(
            "loader_table_staleness_seconds_squared",
            "Integral of staleness over time since the service started (seconds^2).",
            labels=["table"],
        )
        low = CounterMetricFamily(
            "loader_table_low_bound_seconds_squared",
            "LOW, the lower bound on the staleness integral of any schedule (1/2 sum of update lengths^2).",
            labels=["table"],
        )
        stretch = GaugeMetricFamily(
            "loader_table_max_stretch", "Largest stretch of any loaded update.", labels=["table"]
        )
        pending = GaugeMetricFamily(
            "loader_table_pending_updates", "Acknowledged updates not yet loaded.", labels=["table"]
        )
        pending_bytes = GaugeMetricFamily(
            "loader_table_pending_bytes", "Payload bytes of pending updates.", labels=["table"]
        )
        resident = GaugeMetricFamily(
            "loader_table_pending_resident_bytes", "Payload bytes of pending updates held in memory.", labels=["table"]
        )
        spilled = GaugeMetricFamily(
            "loader_table_pending_spilled_bytes", "Payload bytes of pending updates on disk.", labels=["table"]
        )
        alpha = GaugeMetricFamily(
            "loader_table_alpha", "Estimated load seconds per second of data (processing-time model).", labels=["table"]
        )
        overhead = GaugeMetricFamily(
            "loader_table_overhead_seconds",
            "Estimated fixed seconds per batch (processing-time model).",
            labels=["table"],
        )
        weight = GaugeMetricFamily("loader_table_weight", "Priority weight of the table.", labels=["table"])
        # Latest tables' keys (UpStream section 5.1), aggregated over keys: never a series per key.
        waiting_keys = GaugeMetricFamily(
            "loader_table_waiting_keys", "Latest tables: keys with a value waiting to be loaded.", labels=["table"]
        )
        batch_keys = GaugeMetricFamily(
            "loader_table_next_batch_keys",
            "Latest tables: keys the next batch would load (max_keys_per_batch bounds it).",
            labels=["table"],
        )
        per_key = GaugeMetricFamily(
            "loader_table_seconds_per_key",
            "Latest tables: estimated load seconds per key (their processing-time model is per key, not alpha).",
            labels=["table"],
        )
        queue_staleness = GaugeMetricFamily(
            "loader_table_key_queue_staleness_seconds",
            "Latest tables: queue staleness of waiting keys (now minus first enqueue), mean, p99 and max over keys.",
            labels=["table", "stat"],
        )
        app_staleness = GaugeMetricFamily(
            "loader_table_key_application_staleness_seconds",
            "Latest tables: application staleness of keys whose newest value is not loaded (now minus its first "
            "unloaded arrival), mean, p99 and max over keys.",
            labels=["table", "stat"],
        )
        ledger = d.ledger
        for tid, staleness_now in zip(chosen, staleness, strict=True):
            state = d.states[tid]
            labels = [state.name]
            upto.add_metric(labels, ledger.current_upto(tid))
            stale.add_metric(labels, staleness_now)
            integral.add_metric(labels, ledger.staleness_integral_at(tid, now))
            low.add_metric(labels, ledger.low_bound(tid))
            stretch.add_metric(labels, ledger.max_stretch(tid))
            pending.add_metric(labels, state.pending_count)
            pending_bytes.add_metric(labels, d.pending.bytes(state.name))
            resident.add_metric(labels, d.pending.resident_bytes(state.name))
            spilled.add_metric(labels, d.pending.spilled_bytes(state.name))
            alpha.add_metric(labels, state.alpha)
            overhead.add_metric(labels, state.overhead)
            weight.add_metric(labels, state.weight)
            keys = d.pending.key_figures(state.name, now)
            if keys is not None:
                waiting_keys.add_metric(labels, keys.waiting_keys)
                batch_keys.add_metric(labels, state.batch_keys)
                per_key.add_metric(labels, state.per_key)
                for stat, q, a in zip(("mean", "p99", "max"), keys.queue, keys.application, strict=True):
                    queue_staleness.add_metric([state.name, stat], q)
                    app_staleness.add_metric([state.name, stat], a)
        yield from (upto, stale, integral, low, stretch, pending, pending_bytes, resident, spilled)
        yield from (alpha, overhead, weight, waiting_keys, batch_keys, per_key, queue_staleness, app_staleness)

    def _aggregates(self, tids: list[int], staleness: list[float], exported: int, now: float) -> Iterator[Metric]:
        """Freshness over every table: counts, the distribution of staleness, sums of the accounts."""
        d = self.dispatcher
        assert d is not None
        ledger = d.ledger
        n = len(staleness)
        yield GaugeMetricFamily("loader_tables", "Registered tables.", value=n)
        yield GaugeMetricFamily(
            "loader_tables_exported",
            "Tables whose per-table series (loader_table_*) this scrape carries ([metrics] per_table_series).",
            value=exported,
        )
        ordered = sorted(staleness)
        buckets = GaugeMetricFamily(
            "loader_tables_staleness_bucket",
            "Tables whose staleness now is at most le seconds (cumulative; histogram_quantile() applies as is).",
            labels=["le"],
        )
        for bound in TABLE_STALENESS_BUCKETS:
            buckets.add_metric([floatToGoString(bound)], bisect_right(ordered, bound))
        buckets.add_metric(["+Inf"], n)
        yield buckets
        yield GaugeMetricFamily(
            "loader_tables_total_staleness_seconds",
            "Sum of every table's staleness now (divide by loader_tables for the mean).",
            value=math.fsum(ordered),
        )
        quantiles = GaugeMetricFamily(
            "loader_tables_staleness_quantile_seconds",
            "Staleness now across this instance's tables, exact (nearest rank); quantile 1 is the stalest table.",
            labels=["quantile"],
        )
        stalest = GaugeMetricFamily(
            "loader_stalest_table_staleness_seconds", "The stalest table now and its staleness.", labels=["table"]
        )
        if n:
            for q in TABLE_STALENESS_QUANTILES:
                quantiles.add_metric([floatToGoString(q)], ordered[max(0, math.ceil(q * n) - 1)])
            top = max(range(n), key=staleness.__getitem__)
            stalest.add_metric([d.states[tids[top]].name], staleness[top])
        yield from (quantiles, stalest)
        yield CounterMetricFamily(
            "loader_tables_staleness_seconds_squared",
            "Sum over tables of loader_table_staleness_seconds_squared_total (every table, whatever is exported).",
            value=math.fsum(ledger.staleness_integral_at(tid, now) for tid in tids),
        )
        yield CounterMetricFamily(
            "loader_tables_low_bound_seconds_squared",
            "Sum over tables of loader_table_low_bound_seconds_squared_total (every table).",
            value=math.fsum(ledger.low_bound(tid) for tid in tids),
        )
        yield GaugeMetricFamily(
            "loader_tables_pending_updates",
            "Acknowledged updates not yet loaded, all tables.",
            value=sum(d.states[tid].pending_count for tid in tids),
        )
        yield GaugeMetricFamily(
            "loader_tables_max_stretch",
            "Largest stretch of any loaded update of any table.",
            value=max((ledger.max_stretch(tid) for tid in tids), default=0.0),
        )


#: What a sample's name adds to its family's (counters, histograms, summaries).
SAMPLE_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")


class Selection:
    """Some of a registry's families and samples (``Metrics.selected``), for ``generate_latest``.

    prometheus_client's own ``restricted_registry`` finds a collector by the names it
    describes; the collector of per-table series describes none (what it exports depends
    on the tables), so it would be left out, or, asked anyway, build every table's series
    only for most of them to be dropped. Here it builds them only when one is named.
    """

    def __init__(
        self, registry: CollectorRegistry, tables: TablesCollector, per_table: frozenset[str], names: set[str]
    ) -> None:
        self._registry = registry
        self._tables = tables
        self._per_table = per_table
        self._names = names

    def _family_of(self, name: str) -> str:
        for suffix in SAMPLE_SUFFIXES:
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    def collect(self) -> Iterator[Metric]:
        names, per_table, tables = self._names, self._per_table, self._tables
        tables.per_table = any(n in per_table or self._family_of(n) in per_table for n in names)
        try:
            for family in self._registry.collect():
                if family.name in names:
                    yield family
                    continue
                samples = [sample for sample in family.samples if sample.name in names]
                if samples:
                    kept = Metric(family.name, family.documentation, family.type, family.unit)
                    kept.samples = samples
                    yield kept
        finally:
            tables.per_table = True


#: A view candidate cache's states (section 4.5), exported as a state set.
CACHE_STATES = ("profiled", "used", "unused")


class ViewCachesCollector(Collector):
    """A-Caching's figures of every join view, as ``GET /v1/admin/views/{v}`` shows them: per
    candidate cache its state, estimated benefit and cost (per update processed, in the
    executor's seconds) and memory, per cache in use its entries, tuples, bytes, probes,
    hits and evictions. Read at scrape time from each view's figures as of its last load
    (never from an executor a load is changing); a view being rebuilt exports none."""

    def __init__(self) -> None:
        self.views: JoinViews | None = None

    def collect(self) -> Iterator[Metric]:
        labels = ["view", "cache"]
        state = GaugeMetricFamily(
            "loader_view_cache_state", "Candidate cache state (1 for the current one).", labels=[*labels, "state"]
        )
        scope = InfoMetricFamily(
            "loader_view_cache_candidate",
            "Candidate caches: their pipeline and scope (prefix: Definition 3.2; global: section 6).",
            labels=labels,
        )
        benefit = GaugeMetricFamily(
            "loader_view_cache_benefit", "Estimated benefit per update processed (seconds).", labels=labels
        )
        cost = GaugeMetricFamily(
            "loader_view_cache_cost", "Estimated maintenance cost per update processed (seconds).", labels=labels
        )
        estimated = GaugeMetricFamily(
            "loader_view_cache_estimated_bytes", "Memory the candidate is expected to need.", labels=labels
        )
        granted = GaugeMetricFamily("loader_view_cache_granted_bytes", "Memory granted (section 5).", labels=labels)
        figures: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            name: GaugeMetricFamily(f"loader_view_cache_{name}", text, labels=labels)
            for name, text in (
                ("entries", "Keys a cache in use holds."),
                ("tuples", "Join subresult tuples a cache in use holds."),
                ("bytes", "Memory of a cache in use (section 3.3's layout)."),
            )
        }
        figures |= {
            name: CounterMetricFamily(f"loader_view_cache_{name}", text, labels=labels)
            for name, text in (
                ("probes", "Probes of a cache in use since it was created (a new cache starts at 0)."),
                ("hits", "Hits of a cache in use since it was created."),
                ("evictions", "Entries evicted since the cache was created (section 6)."),
            )
        }
        probes = CounterMetricFamily(
            "loader_view_probes", "Cache probes of a view's executor since it was built.", labels=["view"]
        )
        hits = CounterMetricFamily(
            "loader_view_hits", "Cache hits of a view's executor since it was built.", labels=["view"]
        )
        for view in self.views.names() if self.views is not None else ():
            executor = self.views.maintainers[view].describe().get("executor")  # type: ignore[union-attr]
            if not isinstance(executor, dict):
                continue
            probes.add_metric([view], executor["cache_probes"])
            hits.add_metric([view], executor["cache_hits"])
            for c in executor["candidates"]:
                key = [view, c["name"]]
                for value in CACHE_STATES:
                    state.add_metric([*key, value], float(c["state"] == value))
                scope.add_metric(key, {"pipeline": c["pipeline"], "scope": c["scope"]})
                for family, field in ((benefit, "benefit"), (cost, "cost"), (estimated, "memory_bytes")):
                    if c[field] is not None:
                        family.add_metric(key, c[field])
                granted.add_metric(key, c["granted_bytes"] or 0.0)
            for cache in executor["caches"]:
                for name, family in figures.items():
                    family.add_metric([view, cache["name"]], cache[name])
        yield from (state, scope, benefit, cost, estimated, granted, *figures.values(), probes, hits)


class Metrics:
    """All metric objects of one service instance, on its own registry (tests stay isolated).

    The stages report events through the ``on_*`` hooks (the ports ``IntakeMetrics`` and
    ``QuarantineMetrics`` of loader/abc.py, the WAL's fsync hook, the spill store's disk
    operations); freshness and the pending store are read at scrape time once ``attach``
    has been given the dispatcher.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # Per table (loader/ops/table_series.py: exported for the tables a scrape chooses), each
        # with its sum over all tables under loader_tables_*, always exported.
        self.stretch = TableHistogram(
            "loader_update_stretch",
            "Stretch of each loaded update.",
            STRETCH_BUCKETS,
            "loader_tables_update_stretch",
            "Stretch of each loaded update, all tables.",
        )
        self.batches = TableCounter(
            "loader_batches",
            "Batches attempted, by outcome.",
            ["outcome"],
            "loader_tables_batches",
            "Batches attempted, by outcome, all tables.",
            zeros=[(outcome,) for outcome in OUTCOMES],
        )
        self.rows_loaded = TableCounter(
            "loader_rows_loaded",
            "Rows appended to Delta.",
            [],
            "loader_tables_rows_loaded",
            "Rows appended, all tables.",
        )
        self.superseded_rows = TableCounter(
            "loader_superseded_rows",
            "Rows of latest tables dropped by design: a newer value of their key was loaded or already stored.",
            [],
            "loader_tables_superseded_rows",
            "Superseded rows of latest tables, all tables.",
        )
        self.updates_loaded = TableCounter(
            "loader_updates_loaded",
            "Updates loaded into Delta.",
            [],
            "loader_tables_updates_loaded",
            "Updates loaded, all tables.",
        )
        self.batch_duration = TableHistogram(
            "loader_batch_duration_seconds",
            "Wall time of a batch, Spark job and commit.",
            DURATION_BUCKETS,
            "loader_tables_batch_duration_seconds",
            "Wall time of a batch, all tables.",
        )
        self.delta_version = TableGauge("loader_table_delta_version", "Delta version of the last commit.", [], "", "")
        self.updates_received = TableCounter(
            "loader_updates_received",
            "Updates acknowledged.",
            [],
            "loader_tables_updates_received",
            "Updates acknowledged, all tables.",
        )
        self.job_tables = Histogram(
            "loader_batch_job_tables",
            "Tables of the Spark job each loaded batch ran in (1: a single-table job).",
            buckets=JOB_TABLES_BUCKETS,
            registry=r,
        )
        self.job_stage = Histogram(
            "loader_job_stage_seconds",
            "Seconds a load job spent in each stage (docs/service.md, 'A job's life'): dispatch, handoff, "
            "transport, prepare, spark, commits, reply; idle: its worker free before it was chosen.",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.job_service_cpu = Histogram(
            "loader_job_service_cpu_seconds_per_table",
            "CPU seconds of the service process per table of a load job (choosing, taking, hand-off, recording).",
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.job_overhead = Gauge(
            "loader_job_overhead_seconds",
            "Estimated fixed cost of a Spark job, shared by the tables of a multi-table job.",
            registry=r,
        )
        self.quarantined = TableGauge(
            "loader_table_quarantined_updates",
            "Acknowledged updates set aside after their batch kept failing, waiting for an operator.",
            [],
            "loader_tables_quarantined_updates",
            "Quarantined updates, all tables.",
        )
        self.quarantine_resolved = TableCounter(
            "loader_quarantine_resolved_updates",
            "Quarantined updates an operator retried or discarded.",
            ["action"],
            "loader_tables_quarantine_resolved_updates",
            "Quarantined updates an operator retried or discarded, all tables.",
            zeros=[(action,) for action in RESOLUTIONS],
        )
        # 1 while the table refuses the loader's writes (loader/loading/failures.py
        # TableRefusesWrites), by reason; back to 0 at its next load. No zero per reason:
        # the alert completes the signal with the table's other series.
        self.writes_refused = TableGauge(
            "loader_table_writes_refused",
            "1 while the Delta table refuses the loader's writes (append-only for an upsert, a writer feature the "
            "loader does not honour, a rule it cannot evaluate); its loads retry with back-off, none is quarantined.",
            ["reason"],
            "loader_tables_writes_refused",
            "Tables whose writes are refused now, by reason.",
            zeros=[],
        )
        self.table_families = (
            self.stretch,
            self.batches,
            self.rows_loaded,
            self.superseded_rows,
            self.updates_loaded,
            self.batch_duration,
            self.delta_version,
            self.updates_received,
            self.quarantined,
            self.quarantine_resolved,
            self.writes_refused,
        )
        # Batches split because they kept failing as their own fault (loader/loading/dispatcher.py:
        # bisection down to the update that cannot load, which alone is quarantined).
        self.batch_splits = TableCounter(
            "loader_batch_splits",
            "Batches split in halves after failing as their own fault, so that only an update that cannot load is "
            "quarantined.",
            [],
            "loader_tables_batch_splits",
            "Batch splits, all tables.",
        )
        self.table_families += (self.batch_splits,)
        self._tables = TablesCollector(self)
        r.register(self._tables)
        self._per_table_names: frozenset[str] | None = None
        self._views = ViewCachesCollector()
        r.register(self._views)
        self.requests = Counter(
            "loader_http_requests", "HTTP requests by route and status.", ["route", "status"], registry=r
        )
        self.request_duration = Histogram(
            "loader_http_request_duration_seconds",
            "HTTP request latency by route and status.",
            ["route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.wal_fsync = Histogram(
            "loader_wal_fsync_duration_seconds",
            "Duration of one WAL group-commit flush.",
            buckets=FSYNC_BUCKETS,
            registry=r,
        )
        self.wal_records_per_fsync = Histogram(
            "loader_wal_records_per_fsync",
            "Records made durable by one flush (group-commit size).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024),
            registry=r,
        )
        self.wal_bytes = Gauge("loader_wal_size_bytes", "Bytes in WAL segments on disk.", registry=r)
        self.workers = Gauge("loader_workers", "Size of the worker pool.", registry=r)
        self.workers_busy = Gauge("loader_workers_busy", "Workers running a batch now.", registry=r)
        self.policy = Gauge("loader_policy_info", "Scheduling policy in force (value 1).", ["policy"], registry=r)
        self.ready = Gauge("loader_ready", "1 once recovery finished and Spark is up.", registry=r)
        self.spill_ops = Counter(
            "loader_spill_operations",
            "Spill disk operations (one contiguous run of one table's queue): write, read_back (into memory), "
            "read_in_place (by the load job).",
            ["kind"],
            registry=r,
        )
        self.spill_bytes = Counter("loader_spill_bytes", "Bytes moved by spill operations.", ["kind"], registry=r)
        self.intake_refused = Counter(
            "loader_intake_refused", "Requests refused with 503, by reason.", ["reason"], registry=r
        )
        self.pending_resident = Gauge(
            "loader_pending_resident_bytes", "Payload bytes of pending updates in memory (all tables).", registry=r
        )
        self.pending_spilled = Gauge(
            "loader_pending_spilled_bytes", "Payload bytes of pending updates in spill segments.", registry=r
        )
        self.pending_in_flight = Gauge(
            "loader_pending_in_flight_bytes", "In-memory payload bytes of batches being loaded.", registry=r
        )
        self.memory_budget = Gauge(
            "loader_pending_memory_budget_bytes", "M: the memory budget of pending payloads.", registry=r
        )
        self.spill_disk_budget = Gauge(
            "loader_spill_disk_budget_bytes", "Spilled bytes at which intake answers 503.", registry=r
        )
        self.pressure_mode = Gauge(
            "loader_pressure_mode", "1 while the Chain memory-pressure mode chooses the batches.", registry=r
        )
        self.spark_reachable = Gauge(
            "loader_spark_reachable",
            "0 while the Spark Connect server cannot be reached (loads back off and resume; intake stays open).",
            registry=r,
        )
        self.spark_reachable.set(1)
        self.load_processes = Gauge(
            "loader_load_processes",
            "Load worker processes running ([spark] mode = connect); below loader_workers while one is replaced.",
            registry=r,
        )
        self.load_process_deaths = Counter(
            "loader_load_process_deaths",
            "Load worker processes that ended mid-batch (killed, out of memory); each was replaced, its batch retried.",
            registry=r,
        )
        self.delta_log_files_removed = Counter(
            "loader_delta_log_files_removed",
            "Expired Delta log files removed by the log-keeping job ([maintenance] log_keeping_seconds).",
            registry=r,
        )
        self.delta_log_problems = Gauge(
            "loader_delta_log_problems",
            "Tables whose newest checkpoint could not be read at the last log-keeping run (their logs are "
            "left as they are; the log names each).",
            registry=r,
        )
        self.acceptor_requests = Counter(
            "loader_acceptor_requests",
            "Requests the acceptor processes handed the service (intake.acceptors): way=checked, rows checked "
            "by the acceptor; way=passed_on, the request as it came (other routes, refusals, new fields, files).",
            ["way"],
            registry=r,
        )
        self.acceptor_restarts = Counter(
            "loader_acceptor_restarts",
            "Acceptor processes that ended while the service ran; each was started again.",
            registry=r,
        )
        self.spark_server_restarts = Counter(
            "loader_spark_server_restarts",
            "Restarts of the loader's own Spark Connect server after it died.",
            registry=r,
        )
        self.intake_fault = Gauge(
            "loader_intake_fault",
            "1 while intake is closed by a fault of the WAL's disk (full, read-only); it reopens by itself.",
            registry=r,
        )
        self._policy_name: str | None = None
        # Every known label value from the start, so a dashboard shows 0 rather than "no
        # data" and increase() counts the first event.
        for kind in ("write", "read_back", "read_in_place"):
            self.spill_ops.labels(kind)
            self.spill_bytes.labels(kind)
        for reason in ("spill_full", "wal_fault"):
            self.intake_refused.labels(reason)

    def selected(self, names: Collection[str]) -> Selection:
        """The families named in ``names`` (whole) and the samples named there
        (``GET /metrics?names=``): a page polling a few aggregates every few seconds gets
        them without every table's series being built for it."""
        return Selection(self.registry, self._tables, self.per_table_names(), set(names))

    def per_table_names(self) -> frozenset[str]:
        """Names of the families with a series per table (the expensive part of a scrape)."""
        if self._per_table_names is not None:
            return self._per_table_names
        names = frozenset(family.name for family in self.table_families)
        if self._tables.dispatcher is None:  # the freshness families exist once attached
            return names
        built = self._tables._per_table([], [], 0.0)
        self._per_table_names = names | {family.name for family in built}
        return self._per_table_names

    def attach(self, dispatcher: Dispatcher, top_k: int | None = None) -> None:
        """Read freshness, workers and the pending store from ``dispatcher`` at scrape time
        (from now on: a service started again with these metrics replaces the one before).
        ``top_k``: export per-table series of the k stalest tables only (``[metrics]``)."""
        self._tables.dispatcher = dispatcher
        self._tables.top_k = top_k
        self.workers_busy.set_function(lambda: dispatcher.busy_workers)
        pending: PendingStore = dispatcher.pending
        self.pending_resident.set_function(lambda: pending.resident)
        self.pending_spilled.set_function(lambda: pending.spilled)
        self.pending_in_flight.set_function(lambda: pending.inflight_bytes)
        self.memory_budget.set_function(lambda: pending.cache.budget)
        self.spill_disk_budget.set_function(lambda: pending.disk_budget or 0)
        self.pressure_mode.set_function(lambda: float(getattr(dispatcher.policy, "pressure", False)))

    def attach_views(self, views: JoinViews) -> None:
        """Export the join views' caches (``ViewCachesCollector``) from now on."""
        self._views.views = views

    def on_spill_op(self, op: DiskOp) -> None:
        kind = "write" if op.kind == "write" else ("read_in_place" if op.reader == "loader" else "read_back")
        self.spill_ops.labels(kind).inc()
        self.spill_bytes.labels(kind).inc(op.nbytes)

    def table_added(self, table: str) -> None:
        """The table's series exist from now on, at zero (see ``__init__``)."""
        for family in self.table_families:
            if family is not self.delta_version:  # (written once there is a version)
                family.add_table(table)

    def table_removed(self, table: str) -> None:
        """A retired table's (or view's) series go (``_Family.remove_table``; the freshness
        series follow the dispatcher's tombstone)."""
        for family in self.table_families:
            family.remove_table(table)

    def watch_wal(self, size: Callable[[], float]) -> None:
        """WAL bytes on disk, read at scrape time rather than after each truncation."""
        self.wal_bytes.set_function(size)

    def set_policy(self, name: str) -> None:
        if self._policy_name is not None:
            self.policy.remove(self._policy_name)
        self.policy.labels(name).set(1)
        self._policy_name = name

    def on_fsync(self, seconds: float, records: int, nbytes: int) -> None:
        self.wal_fsync.observe(seconds)
        self.wal_records_per_fsync.observe(records)

    # -- intake (loader.abc.IntakeMetrics) ------------------------------------------------------
    def on_received(self, table: str, updates: int = 1) -> None:
        self.updates_received.labels(table).inc(updates)

    def on_refused(self, reason: str) -> None:
        self.intake_refused.labels(reason).inc()

    def on_intake_fault(self, closed: bool) -> None:
        self.intake_fault.set(1 if closed else 0)

    # -- quarantine (loader.abc.QuarantineMetrics) ----------------------------------------------
    def on_quarantine_resolved(self, table: str, action: str, updates: int) -> None:
        self.quarantine_resolved.labels(table, action).inc(updates)

    def on_quarantined_now(self, table: str, updates: int) -> None:
        self.quarantined.labels(table).set(updates)

    # -- tables refusing writes (loader.loading.failures.TableRefusesWrites) --------------------
    def on_writes_refused(self, table: str, reason: str | None) -> None:
        """The table's load was refused for ``reason`` (1 there, 0 for any other reason it
        was refused for before), or loaded (``None``: every reason back to 0)."""
        family = self.writes_refused
        for key, child in list(family.selected([table])):
            if child is not None and key[1] != reason:
                child.set(0)  # type: ignore[attr-defined]
        if reason is not None:
            family.labels(table, reason).set(1)
