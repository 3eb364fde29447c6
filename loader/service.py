"""The loader service: wires the stages of the data path and owns their start and stop order.

    HTTP -> intake -> WAL -> pending store -> dispatcher -> sink (Spark job + Delta commit)
                                                   \\-> freshness ledger -> metrics, status

Start-up order matters for correctness and for first-run speed:

1. durable state, read without Spark: the WAL (its lock first: a second instance on the
   same data must fail before it writes anything), the catalog, the Idempotency-Key
   snapshot, the pending store (its spill directory emptied: the WAL rebuilds it), the
   quarantine;
2. recovery: the WAL replayed one record at a time into the pending store (which spills),
   so a restart after a burst needs no more memory than the burst did; each table the WAL
   (or the quarantine, or a retirement) names has its Delta transaction version read as
   the replay meets it (from the commit files after the catalog's last known version where
   they tell, by deltalake otherwise: ``loader.durability.recovery.CommittedSeqs``);
3. Spark starts in the background (~5 s; with ``[spark] mode = "connect"`` the local Spark
   Connect server, unless ``remote`` names one, and the P load worker processes), intake
   opens (new updates get sequence numbers after everything recovered) and the maintenance
   jobs start; the other tables' Delta logs are read in the background, a table's updates
   waiting for its own read (``_read_table_states``: requested tables first); once Spark is
   up, loading begins, each table once its Delta table is checked or created (tables with
   pending updates first), and /readyz turns ready when every table's is, and every log read.

Each step puts its undoing on the caller's exit stack (the pattern of APScheduler 4's
``start(exit_stack, ...)``), so a shutdown, or a start that fails half-way, runs them in
reverse: maintenance stops, intake closes, the start of loading is waited for, running
batches finish and the catalog is saved, the WAL is closed.

All mutable state is touched on the event-loop thread only; loads run on worker threads
(classic mode: Spark jobs on them; connect mode: each hands its batch to a worker process,
loader/loading/workers/) and report back through the dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from pydantic import ValidationError

from loader.abc import FailedBatch, FinishedBatch, HeldValue, QuarantinedBatch
from loader.config import ConfigError, Settings
from loader.core import failpoints
from loader.core.durable_files import remove_files
from loader.core.errors import Conflict, Invalid, NotFound, StartError, Unavailable, caused_by, unknown_table
from loader.core.evolution import SchemaChange, plan_change
from loader.core.schema import Column, TableSchema, check_limits
from loader.core.tables import NAMED_IN_MESSAGE, TableConfig
from loader.core.timeline import JobTimeline
from loader.core.updates import Batch, LoadResult, Update
from loader.core.views import ViewConfig, resolve
from loader.durability.catalog import Catalog, CatalogEntry, RetiredTable, ViewEntry
from loader.durability.quarantine import QuarantineStore
from loader.durability.quarantine_desk import QuarantineDesk
from loader.durability.recovery import CommittedSeqs, RecoveryPlan
from loader.durability.transactions import committed_seqs
from loader.durability.wal import WriteAheadLog
from loader.intake.idempotency import IdempotencyStore
from loader.intake.inference import grown_columns
from loader.intake.landing import sweep_copies
from loader.intake.sequencing import TableSequence
from loader.intake.submission import Intake
from loader.loading.dispatcher import Dispatcher
from loader.loading.failures import table_refusal
from loader.loading.observed import ObservedRecord
from loader.loading.sinks.base import Sink
from loader.loading.sinks.delta_table import DeltaTables
from loader.loading.sinks.log_cleanup import RETENTION, retention_value
from loader.loading.sinks.view_join import ViewJob
from loader.loading.spark import spark_unreachable
from loader.loading.views.registry import JoinViews
from loader.ops.heap import collection_paused
from loader.ops.maintenance import Maintenance, Schedule
from loader.ops.metrics import Metrics
from loader.ops.status import TableStatuses
from loader.pending.keyed import KeySpec
from loader.pending.setup import build_pending_store
from loader.pending.spill.disk_cost import DiskCost
from loader.pending.store import PendingStore
from schedulers.base import Policy
from schedulers.chain import with_pressure
from schedulers.job_groups import with_groups
from schedulers.model import KeyedSpec, TableSpec
from schedulers.registry import GROUPABLE, make_policy

if TYPE_CHECKING:
    from loader.loading.connect_server import ConnectServer
    from loader.loading.workers.pool import ProcessSink

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Seconds a reconnect to a Spark Connect server that is back may take before the load
#: fails (and is retried with back-off).
RECONNECT_SECONDS = 15.0
#: Seconds between checks that the loader's own Spark Connect server still runs.
SERVER_WATCH_SECONDS = 2.0

SinkFactory = Callable[[Settings], Sink]
#: The Idempotency-Key snapshot under the state directory (loader/intake/idempotency.py).
IDEMPOTENCY_FILE = "idempotency.json"
#: Tables whose Delta tables are checked or created per worker-thread call at start-up.
ENSURE_CHUNK = 256
#: Tables whose Delta logs are read per worker-thread call after intake opened (a request
#: for one of them waits at most about one chunk: ~0.1 s).
STATE_CHUNK = 256


class LoaderService:
    """A running loader: every stage whole and wired; made by ``start`` (or ``running``).

    Holds the stages in data-path order (``intake``, ``wal``, ``pending``, ``dispatcher``,
    the ``sink`` once Spark is up) and what operators reach through the API (``status``,
    ``quarantine``, the table and policy settings). It is the dispatcher's
    ``loader.abc.BatchHandler``: it runs each batch through the sink and records the
    outcome in the catalog, intake's counters and the metrics.
    """

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        sink_factory: SinkFactory | None,
        *,
        catalog: Catalog,
        idempotency: IdempotencyStore,
        wal: WriteAheadLog,
        pending: PendingStore,
        quarantine: QuarantineStore,
        policy: Policy,
    ) -> None:
        """The stages that need no I/O of their own, wired to those ``start`` opened."""
        s = settings
        self.settings = settings
        self.metrics = metrics
        self._sink_factory = sink_factory
        self.catalog = catalog
        self.idempotency = idempotency
        self.wal = wal
        self.pending = pending
        self.dispatcher = Dispatcher(
            policy,
            s.workers,
            pending,
            self,
            retry_base=s.loading.retry_base_seconds,
            max_retry_delay=s.loading.retry_max_seconds,
            max_attempts=s.loading.max_attempts,
            observed=ObservedRecord(s.observed_trace_max_updates, s.observed_schedule_max_batches, s.observed_jobs_max),
            job_overhead=s.loading.job_overhead_seconds,
        )
        self.intake = Intake(
            log=wal,
            admission=pending,
            queue=self.dispatcher,
            metrics=metrics,
            idempotency=idempotency,
            landing_dir=s.landing_path,
            owned_dir=s.data_dir / "landed",
            max_body_bytes=s.intake.max_body_bytes,
            max_file_bytes=s.intake.max_landing_file_bytes,
            max_clock_skew=s.intake.max_clock_skew_seconds,
            spill_retry_after=s.spill.retry_after_seconds,
        )
        self.intake.add_columns = self.add_columns_from_feed
        self.intake.max_depth = s.intake.max_nesting_depth  # what an inferred value may nest
        self.quarantine = QuarantineDesk(quarantine, self.intake, metrics, pending)
        #: Join views (docs/join-views.md): scheduled beside the tables, loaded on the driver.
        self.views = JoinViews(catalog, self.dispatcher, s.warehouse_path, table_properties(s))
        metrics.attach_views(self.views)
        self.status = TableStatuses(catalog, self.intake, self.dispatcher, quarantine, self.views)
        m = s.maintenance
        self.maintenance = Maintenance(
            Schedule(
                m.wal_truncate_seconds,
                m.compact_seconds,
                m.vacuum_seconds,
                m.vacuum_retention_hours,
                m.log_keeping_seconds,
            ),
            save_catalog=self._every_second,
            intake=self.intake,
            dispatcher=self.dispatcher,
            wal=wal,
            idempotency=idempotency,
            idempotency_path=s.state_path / IDEMPOTENCY_FILE,
            quarantine=quarantine,
            warehouse=s.warehouse_path,
            ready=lambda: self.ready,
            metrics=metrics,
            views=self.views.names,
        )
        #: The Delta writer, once Spark is up (``ready``); None while Spark starts.
        self.sink: Sink | None = None
        #: Spark Connect mode: the local server when the loader runs one, and the worker processes.
        self._connect_server: ConnectServer | None = None
        self._processes: ProcessSink | None = None
        #: Set when a load found Spark unreachable: the next load first restarts the local
        #: server if it died (the workers then reconnect); None while Spark answers.
        self._spark_outage: str | None = None
        self._reconnect_lock = threading.Lock()
        self.ready = False
        #: Why loading could not start (``/healthz`` and ``/readyz`` report it).
        self.failure: str | None = None
        #: Why loading could not start at all (Spark, its server, the writer), once known;
        #: ``loader serve`` stops on it. (``failure`` also tells of tables left held.)
        self.start_error: Exception | None = None
        #: The start of loading (Spark, then each table's check), once begun.
        self.loading: asyncio.Task[None] | None = None
        #: Tables' states read after intake opened (``_read_table_states``), while it runs.
        self.reading: asyncio.Task[None] | None = None
        self._unread_states: CommittedSeqs | None = None
        #: The WAL's highest sequence number and release per table, for those read late.
        self._logged: tuple[dict[str, int], dict[str, float]] = ({}, {})
        self.recovered_updates = 0
        #: WAL updates of tables the catalog does not know, kept until they are registered again.
        self._orphans: dict[str, list[Update]] = {}
        self._admin_lock = asyncio.Lock()  # operator changes of the table set, one at a time
        self._feed_lock = asyncio.Lock()  # columns added from feeds: each decided against the last
        self._stopping = False
        metrics.attach(self.dispatcher, top_k=s.metrics.top_k if s.metrics.per_table_series == "top-k" else None)
        metrics.workers.set(s.workers)

    # -- lifecycle --------------------------------------------------------------------------
    @classmethod
    async def start(
        cls,
        settings: Settings,
        exit_stack: AsyncExitStack,
        *,
        load: bool = True,
        metrics: Metrics | None = None,
        sink_factory: SinkFactory | None = None,
    ) -> LoaderService:
        """Recover and open intake; start Spark and loading in the background when ``load``.

        Everything started is stopped by ``exit_stack`` in reverse order.
        """
        s = settings
        metrics = metrics or Metrics()
        started = False

        def stopped(error_type: type[BaseException] | None, *_: object) -> None:
            """Last on the way down, and only when every undoing succeeded: the crash trials
            take this line as the proof of a clean stop."""
            if started and error_type is None:
                log.info("stopped cleanly: running batches finished, WAL closed, catalog saved")

        exit_stack.push(stopped)
        with collection_paused():  # (loader/ops/heap.py: start-up's state is long-lived)
            service = await cls._recovered(s, exit_stack, metrics, sink_factory)
        if service.intake.unread:  # (runs once intake is open: no await before that)
            service.reading = asyncio.create_task(service._read_table_states())
        if load:
            service.loading = asyncio.create_task(service._start_loading())
            exit_stack.push_async_callback(service._wait_started, service.loading)
        if service.reading is not None:  # (stopped first on the way down: loading waits for it)
            exit_stack.push_async_callback(service._stop_reading)
        service.intake.open()
        exit_stack.callback(service.intake.close)
        log.info(
            "recovered %d pending updates from the WAL; intake open (durability=%s)",
            service.recovered_updates,
            s.wal.durability.value,
        )
        service.maintenance.start()
        exit_stack.push_async_callback(service.maintenance.stop)
        started = True
        return service

    @classmethod
    async def _recovered(
        cls, s: Settings, exit_stack: AsyncExitStack, metrics: Metrics, sink_factory: SinkFactory | None
    ) -> LoaderService:
        """The service as ``start`` opens it: its WAL, catalog, stores, and their recovery."""
        for directory in (s.data_dir, s.warehouse_path, s.landing_path, s.state_path):
            directory.mkdir(parents=True, exist_ok=True)
        wal = WriteAheadLog(
            s.wal_path,
            durability=s.wal.durability,
            segment_bytes=s.wal.segment_bytes,
            max_delay_seconds=s.wal.group_delay_seconds,
            siblings=1,  # (the delay only while appends arrive together)
            on_fsync=metrics.on_fsync,
        )
        # The WAL's lock first: a second instance on the same data must fail before it
        # writes anything (the catalog may be written next, the spill directory emptied).
        await asyncio.to_thread(wal.open)
        exit_stack.push_async_callback(asyncio.to_thread, wal.close)
        metrics.watch_wal(lambda: wal.size_bytes)
        catalog = Catalog.open(s.state_path / "catalog.json")
        _register_configured(catalog, s.tables)
        _declare_configured_views(catalog, s.views)
        policy_name = catalog.policy or s.policy
        policy = configured_policy(s, policy_name, catalog.policy_params if catalog.policy else s.policy_params)
        metrics.set_policy(policy_name)
        idempotency = IdempotencyStore.load(s.state_path / IDEMPOTENCY_FILE, s.maintenance.idempotency_ttl_seconds)
        sp = s.spill
        configured = sp.c0_seconds is not None and sp.c1_seconds_per_byte is not None
        costs = DiskCost(sp.c0_seconds, sp.c1_seconds_per_byte) if configured else None  # type: ignore[arg-type]
        pending = await asyncio.to_thread(
            build_pending_store,
            s.spill_path,
            lambda table: catalog.entries[table].schema.arrow(),
            policy=sp.policy,
            memory_budget=sp.memory_budget_bytes,
            disk_budget=sp.disk_budget_bytes,
            cost=costs,
            on_op=metrics.on_spill_op,
        )
        failpoints.hit("recovery.after-spill-reset")
        quarantine = await asyncio.to_thread(QuarantineStore.open, s.state_path / "quarantine")
        service = cls(
            s,
            metrics,
            sink_factory,
            catalog=catalog,
            idempotency=idempotency,
            wal=wal,
            pending=pending,
            quarantine=quarantine,
            policy=policy,
        )
        exit_stack.push_async_callback(service._stop_loading)
        await service._recover()
        return service

    @classmethod
    @asynccontextmanager
    async def running(cls, settings: Settings, **options: Any) -> AsyncIterator[LoaderService]:
        """``start`` on an exit stack of its own: stopped when the block ends."""
        async with AsyncExitStack() as exit_stack:
            yield await cls.start(settings, exit_stack, **options)

    async def _recover(self) -> None:
        """Which logged updates Delta holds, which are pending again; sequence counters above both."""
        s = self.settings
        # A purge the last run decided but did not finish (a crash after the catalog's save).
        for record in list(self.catalog.retired.values()):
            if record.purge and not record.purged and self.catalog.gone(record.name) is not None:
                await self._purge(record)
        known = {name: entry.delta_version for name, entry in self.catalog.entries.items()}
        # Every sequence number up to a retired table's last is done, whatever Delta says
        # (a purged table has no log; a name registered again starts above it).
        floors = {name: record.last_seq for name, record in self.catalog.retired.items()}
        # Read as recovery meets each table (loader/durability/recovery.py): the WAL's, the
        # quarantine's and the retiring ones now, the others once intake is open.
        committed = CommittedSeqs(s.warehouse_path, known, floors)
        for entry in self.catalog.entries.values():
            self._schedule_table(entry)
        plan = RecoveryPlan(committed=committed, quarantined=self.quarantine.store.seqs())
        # Latest tables' keys held by quarantined updates wait again, before the WAL replays their values.
        releasing = await self.quarantine.restore_holds(committed)
        # One record at a time, off the event loop (nothing else runs yet): pending updates
        # go straight into the pending store, which spills.
        await asyncio.to_thread(self._replay_wal, plan, releasing)
        # Read now too: a retiring table drains (``_drained``), an operator's retry or discard
        # of a quarantined update is numbered as its payload is built (quarantine_desk.py).
        eager = {entry.name for entry in self.catalog.entries.values() if entry.retiring}
        eager |= {e.table for e in self.quarantine.store.active() if e.table in self.catalog.entries}
        _, unreadable = await asyncio.to_thread(_read_states, committed, sorted(eager))
        self._unread_states = committed
        self._logged = (plan.last_seq, plan.last_release)  # (a table unread may have WAL records: quarantined ones)
        for entry in self.catalog.entries.values():
            name = entry.name
            if committed.is_read(name):
                sequence = self._sequence(
                    entry, committed[name], plan.last_seq.get(name, 0), plan.last_release.get(name)
                )
                self.intake.add_table(name, entry.schema, sequence, entry.on_new_fields)
            else:  # (no WAL record: its updates wait for its own read, ``_read_table_states``)
                self.intake.defer_table(name, entry.schema, entry.on_new_fields)
                if name in unreadable:
                    self._unreadable(name, unreadable[name])
            if entry.retiring:  # resumed: it loads what it holds, then leaves
                self.intake.retired[name] = "retiring"
        for name, record in self.catalog.retired.items():
            if self.catalog.gone(name) is not None and record.kind == "table":
                self.intake.retired[name] = "retired"
                self.intake.retired_floor[name] = record.last_seq
        self.recovered_updates = plan.pending_count
        self._orphans = dict(plan.orphans)
        for name, updates in self._orphans.items():
            log.warning(
                "the WAL holds %d acknowledged updates of table %r, which the catalog does not know; they are kept "
                "and loaded once the table is registered again (POST /v1/admin/tables)",
                len(updates),
                name,
            )
        await asyncio.to_thread(remove_files, plan.stale_files)
        await self.views.open_all()
        for name in self.views.names():
            self.metrics.table_added(name)
        await self.quarantine.settle(self.idempotency, list(self.catalog.entries))
        keep = plan.live_files | self.quarantine.live_files()
        removed = await asyncio.to_thread(sweep_copies, self.intake.owned_dir, keep)
        if removed:
            log.warning("removed %d copies of landing files that no update refers to (left by a crash)", removed)

    async def _read_table_states(self) -> None:
        """The committed sequence number of each table recovery did not need (no WAL record,
        quarantine entry or retirement named it), read after intake opened: a chunk at a
        time, tables a request waits for first; each table's updates are numbered once its own
        is read (``Intake.tables_read``). Its catalog's ``last_seq`` is almost always the
        answer; the read is what makes a catalog restored from an old backup safe."""
        committed, intake = self._unread_states, self.intake
        last_seq, last_release = self._logged
        assert committed is not None
        began, count = time.perf_counter(), len(intake.unread)
        order = list(intake.unread)
        order.reverse()  # (popped from the end: catalog order)
        try:
            while True:
                readable = [name for name in intake.wanted if name not in intake.unreadable]
                chunk = list(dict.fromkeys(name for name in readable if name in intake.unread))
                intake.wanted.clear()
                while order and len(chunk) < STATE_CHUNK:
                    name = order.pop()
                    if name in intake.unread and name not in chunk and name not in intake.unreadable:
                        chunk.append(name)
                if not chunk:
                    break  # (every table read, or refused: unreadable)
                read, failed = await asyncio.to_thread(_read_states, committed, chunk)
                for name, seq in read.items():
                    entry = self.catalog.entries.get(name)
                    if entry is not None and name in intake.unread:
                        sequence = self._sequence(entry, seq, last_seq.get(name, 0), last_release.get(name))
                        intake.add_table(name, entry.schema, sequence, entry.on_new_fields)
                for name, why in failed.items():
                    self._unreadable(name, why)
        except BaseException as exc:  # (no request may wait for a read that will not come)
            why = "the service is stopping" if isinstance(exc, asyncio.CancelledError) else f"{exc!r}"
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("reading the tables' Delta logs failed")
            for name in [name for name in intake.unread if name not in intake.unreadable]:
                intake.unreadable_table(name, why)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._unread_states, self._logged = None, ({}, {})
        log.info(
            "read the Delta logs of %d more tables in %.2f s after intake opened", count, time.perf_counter() - began
        )

    def _unreadable(self, name: str, why: str) -> None:
        log.error(
            "cannot read the Delta log of table %r (%s): its updates are refused until a restart reads it", name, why
        )
        self.intake.unreadable_table(name, why)

    async def _stop_reading(self) -> None:
        reading = self.reading
        if reading is not None and not reading.done():
            reading.cancel()
            await asyncio.wait({reading})

    async def _tables_read(self) -> None:
        """Every table's counters are in intake (an operator's change of the table set first
        waits for start-up's reading, about a second at 10,000 tables)."""
        reading = self.reading
        if reading is not None and not reading.done():
            await asyncio.wait({reading})

    def _replay_wal(self, plan: RecoveryPlan, releasing: dict[str, tuple[str, int]]) -> None:
        """``releasing``: Idempotency-Keys of updates an operator's retry or discard submits to
        release a quarantined update's held keys; one the WAL holds releases them here again
        (or, in Delta already or set aside itself, took their values with it)."""
        for record in self.wal.replay():
            self.idempotency.add_record(record)
            update = plan.add(record)
            held = releasing.get(record.idempotency_key) if record.idempotency_key is not None else None
            if held is not None:
                if update is None:
                    self.pending.drop_hold(*held)
                else:
                    self.pending.release_keys_at(*held, update.seq)
            if update is not None:
                self.dispatcher.released(update)
            failpoints.hit("recovery.replay")

    async def _start_loading(self) -> None:
        try:
            self.sink = await asyncio.to_thread(self._make_sink)
            if isinstance(self.sink, DeltaTables):
                self.sink.table_properties = table_properties(self.settings)
        except Exception as exc:  # surfaced on /readyz and in the log
            self.failure = f"could not start loading: {exc}"
            self.start_error = exc
            if caused_by(exc, lambda e: isinstance(e, StartError)):
                log.error("%s", self.failure)  # its message says what to do: no stack
            else:
                log.exception("could not start loading")
            return
        # Each table's Delta table is checked (or created) before its first load: ~2 ms of
        # deltalake calls a table, 20 s at 10,000 tables. Loading starts at once, each table
        # held until its check, tables with pending updates first; ready once all are done.
        # (Under the admin lock: a registration that began while Spark was starting, and so
        # created no Delta tables, has added all its tables before this list is made.)
        async with self._admin_lock:
            entries = sorted(self.catalog.entries.values(), key=lambda e: -self.dispatcher.state(e.name).pending_count)
            for entry in entries:
                self.dispatcher.hold(entry.name)
        self.dispatcher.start()
        failed: dict[str, Exception] = {}
        warehouse = DeltaTables(self.settings.warehouse_path)
        for first in range(0, len(entries), ENSURE_CHUNK):
            if self._stopping:
                return
            # (A table retired meanwhile is left out: a purged one's Delta table is not made again.)
            chunk = [
                (entry.name, entry.schema)
                for entry in entries[first : first + ENSURE_CHUNK]
                if self.catalog.entries.get(entry.name) is entry
            ]
            failed_now = await asyncio.to_thread(_ensure_tables, self.sink, chunk, warehouse)
            for name, _ in chunk:
                if name not in failed_now:
                    self.dispatcher.release_hold(name)
            failed.update(failed_now)
        if failed:  # those tables stay held; the others load
            name, exc = next(iter(failed.items()))
            more = (
                f" (and {len(failed) - 1} more tables: {sorted(failed)[:NAMED_IN_MESSAGE]})" if len(failed) > 1 else ""
            )
            self.failure = f"could not start loading: {exc}{more}"
            log.error("could not start loading %d tables, the first %r: %s", len(failed), name, exc)
            return
        await self._tables_read()
        if self._stopping:
            return
        if self.intake.unreadable:  # /readyz stays not ready, and says which
            self.failure = f"cannot read the Delta logs of tables {sorted(self.intake.unreadable)[:NAMED_IN_MESSAGE]}"
            return
        self.ready = True
        self.metrics.ready.set(1)
        log.info(
            "loading with %s writer, policy %s, %d workers",
            self.sink.name,
            self.dispatcher.policy.name,
            self.settings.workers,
        )

    async def _wait_started(self, loading: asyncio.Task[None]) -> None:
        """On the way down: a start of Spark under way is let finish (at most a minute); the
        check of the tables stops at the next chunk."""
        self._stopping = True
        if not loading.done():
            await asyncio.wait({loading}, timeout=60)

    def _make_sink(self) -> Sink:
        if self._sink_factory is not None:
            return self._sink_factory(self.settings)
        s = self.settings
        if s.spark.mode == "connect":
            return self._start_workers()
        from loader.loading.sinks import make_sink
        from loader.loading.spark import build_spark_session, renice_driver_jvm

        spark = build_spark_session(
            master=s.spark.master,
            conf=s.spark.conf,
            app_name=s.spark.app_name,
            fair_pools=s.workers,
            lean=s.spark.lean,
        )
        if s.spark.driver_nice:
            renice_driver_jvm(spark, s.spark.driver_nice)
        return make_sink(s.writer, s.warehouse_path, spark, lean=s.spark.lean)

    def _start_workers(self) -> Sink:
        """Connect mode: the local Spark Connect server (unless ``[spark] remote`` names one)
        under supervision, then the P load worker processes, each a client of it."""
        from loader.loading.connect_server import ConnectServer
        from loader.loading.spark import java_version_ok, session_settings
        from loader.loading.workers.pool import ProcessSink, WorkerOptions

        s = self.settings
        sp = s.spark
        if not sp.remote:
            java_version_ok()  # a clear message before a JVM fails to start
            server = ConnectServer(
                sp.master,
                session_settings(sp.master, sp.conf, 0, sp.lean),  # (FAIR pools are per driver thread)
                s.data_dir / "spark-connect.log",
                app_name=sp.app_name,
                nice=sp.driver_nice,
                idle=sp.driver_idle,
            )
            self._connect_server = server
            server.start(timeout=sp.connect_start_timeout_seconds)
            restarted = self.metrics.spark_server_restarts.inc
            server.supervise(SERVER_WATCH_SECONDS, sp.connect_start_timeout_seconds, restarted)
        options = WorkerOptions(
            warehouse=s.warehouse_path,
            writer=s.writer,
            lean=sp.lean,
            connect_timeout=sp.connect_start_timeout_seconds,
            reconnect_timeout=RECONNECT_SECONDS,
            nice=sp.driver_nice,
            idle=sp.driver_idle,
            handoff_dir=s.data_dir / "handoff",
            failpoints=failpoints.worker_spec(),
            log_level=logging.getLogger("loader").getEffectiveLevel(),
            job_timeout=s.loading.job_timeout_seconds or None,
        )
        processes = ProcessSink(s.workers, options, self._spark_url, on_death=self._worker_died)
        self._processes = processes
        processes.start()
        self.metrics.load_processes.set(processes.live())
        return processes

    def _spark_url(self) -> str:
        server = self._connect_server
        return server.url if server is not None else self.settings.spark.remote

    def _worker_died(self) -> None:
        self.metrics.load_process_deaths.inc()
        if self._processes is not None:
            self.metrics.load_processes.set(self._processes.live())

    def _spark_call(self, call: Callable[[], T]) -> T:
        """Run a sink call; after Spark Connect was found unreachable, the loader's own server
        is first started again if it died (the worker processes reconnect by themselves). The
        call's error still reaches the dispatcher, which retries with back-off and never
        quarantines for it. The outage ends only when a call gets through: another worker
        thread's call merely starting proves nothing (it made /readyz forget an outage at once)."""
        try:
            if self._spark_outage is not None:
                self._restart_own_server()  # a failure here (SparkUnreachable) is the outage going on
            result = call()
        except Exception as exc:
            self._spark_failed(exc)
            raise
        finally:
            if self._processes is not None:
                self.metrics.load_processes.set(self._processes.live())
        outcomes = result if isinstance(result, list) else [result]
        if any(not isinstance(o, BaseException) for o in outcomes):  # a load, or a view's job
            self._spark_answered()
        else:
            for o in outcomes:
                if isinstance(o, Exception):
                    self._spark_failed(o)
        return result

    def _spark_failed(self, exc: BaseException) -> None:
        if self.settings.spark.mode == "connect" and spark_unreachable(exc):
            self._spark_outage = f"Spark Connect is unreachable ({type(exc).__name__}); loads back off and retry"
            self.metrics.spark_reachable.set(0)

    def _restart_own_server(self) -> None:
        with self._reconnect_lock:
            server = self._connect_server
            if server is not None and server.ensure_running(self.settings.spark.connect_start_timeout_seconds):
                self.metrics.spark_server_restarts.inc()

    def _spark_answered(self) -> None:
        with self._reconnect_lock:
            if self._spark_outage is None:
                return  # another worker thread saw Spark back first
            self._spark_outage = None
            self.metrics.spark_reachable.set(1)
            log.info("Spark Connect at %s answers again; loads resume", self._spark_url())

    def _stop_spark(self) -> None:
        """The worker processes first (each stops its Connect session: at exit an open client
        would ask a gone server to clean up, for minutes), then the local server. An
        in-process driver ends with the process."""
        processes, self._processes = self._processes, None
        if processes is not None:
            processes.stop()
            self.metrics.load_processes.set(0)
        server, self._connect_server = self._connect_server, None
        if server is not None:
            server.stop()

    async def _stop_loading(self) -> None:
        await self.dispatcher.finish()
        await asyncio.to_thread(self.dispatcher.shutdown)
        await asyncio.to_thread(self._stop_spark)
        await self.save_catalog()
        self.ready = False
        self.metrics.ready.set(0)

    def faults(self) -> dict[str, str]:
        """Disk faults being ridden out, for /readyz."""
        found = {}
        if self.intake.wal_fault is not None:
            found["wal"] = self.intake.wal_fault
        if self._spark_outage is not None:
            found["spark"] = self._spark_outage
        if self.pending.spill_error is not None:
            found["spill"] = (
                f"spilling pending updates to disk failed ({self.pending.spill_error}); "
                "intake refuses once memory is full"
            )
        return found

    # -- tables and policy (operators) --------------------------------------------------------
    def _schedule_table(self, entry: CatalogEntry) -> None:
        """The table's scheduler state: current up to where its freshness account (or its
        last load, or its registration) says."""
        account = entry.account()
        if account is not None:
            origin = account.current_upto
        else:
            origin = entry.last_release if entry.last_release is not None else entry.created_at
        spec = TableSpec(
            name=entry.name,
            alpha=entry.alpha,
            overhead=entry.overhead,
            weight=entry.weight,
            period=entry.period_hint,
            keyed=_keyed(entry),
        )
        self.dispatcher.add_table(spec, origin=origin, paused=entry.paused, account=account)
        self.pending.set_keys(entry.name, _key_spec(entry))
        self.metrics.table_added(entry.name)

    def _sequence(
        self, entry: CatalogEntry, committed: int, logged_seq: int = 0, logged_release: float | None = None
    ) -> TableSequence:
        """The table's sequence counter: numbering resumes above every sequence number
        Delta, the catalog or the WAL has seen."""
        origin = self.dispatcher.state(entry.name).origin
        start = max(committed, entry.last_seq, logged_seq)
        last_release = origin if logged_release is None else max(origin, logged_release)
        return TableSequence(
            next_seq=start + 1, last_release=last_release, committed_seq=committed, next_to_release=start + 1
        )

    def _within_limits(self, table: str, schema: TableSchema) -> None:
        """A 422 when the schema nests deeper or holds more fields than the intake settings allow."""
        if not schema.nested and len(schema.columns) <= self.settings.intake.max_schema_fields:
            return
        try:
            check_limits(schema, self.settings.intake.max_nesting_depth, self.settings.intake.max_schema_fields)
        except ValueError as exc:
            raise Invalid(f"table {table!r}: {exc}", table=table) from None

    async def register_table(self, table: TableConfig) -> CatalogEntry:
        """Register a table (idempotent for the same schema); adopts WAL updates kept for it."""
        await self.register_tables([table])
        return self.catalog.entries[table.name]

    async def register_tables(self, tables: list[TableConfig]) -> Registered:
        """Register tables all or nothing (idempotent for the same schema), one catalog save.

        Every declaration is checked against the catalog, the WAL's kept updates and Delta
        before any is registered; a conflict anywhere registers none and names them all.
        Delta tables created before a conflict was found stay, empty and unregistered (a
        later registration with their schema adopts them).
        """
        repeated = sorted(name for name, n in Counter(t.name for t in tables).items() if n > 1)
        if repeated:
            raise Invalid(f"tables declared more than once: {repeated[:NAMED_IN_MESSAGE]}; declare each once")
        for table in tables:
            self._within_limits(table.name, table.schema_)
        async with self._admin_lock:
            await self._tables_read()  # (start-up's reading of the tables' Delta logs done)
            new, unchanged, rekeyed, conflicts, viewed = [], [], [], [], []
            for table in tables:
                existing = self.catalog.entries.get(table.name)
                if existing is None:
                    new.append(table)
                elif existing.schema == table.schema_ and _key_settings(existing) == _key_settings(table):
                    unchanged.append(table.name)
                elif existing.schema == table.schema_:
                    rekeyed.append(table)  # key policy, batch bound or on_new_fields: from now on
                elif self.views.over(table.name):
                    viewed.append(table.name)  # a view's executor treats the input by its mode
                elif _same_columns(existing.schema, table.schema_) and self._never_written(table.name):
                    rekeyed.append(table)  # mode, key or order_by of a table that holds nothing yet
                else:
                    conflicts.append(table.name)
            if viewed:
                raise Conflict(
                    f"tables {viewed[:NAMED_IN_MESSAGE]} are read by join views "
                    f"{sorted({v for t in viewed for v in self.views.over(t)})[:NAMED_IN_MESSAGE]}; their schema, "
                    "mode or key cannot change: choose a new table name",
                    tables=viewed[:NAMED_IN_MESSAGE],
                )
            if conflicts:
                raise _conflict(
                    conflicts,
                    "table {} already exists with another schema, mode or key, and has received updates; "
                    "choose a new name",
                    "tables {} already exist with other schemas, modes or keys, and have received updates; "
                    "choose new names",
                )
            for table in rekeyed:
                entry = self.catalog.entries[table.name]
                entry.schema = table.schema_
                entry.key_policy, entry.max_keys_per_batch = table.key_policy, table.max_keys_per_batch
                entry.on_new_fields = table.on_new_fields
                self.intake.new_fields[table.name] = table.on_new_fields
                if table.schema_.latest and "seconds_per_key" in table.model_fields_set:
                    entry.seconds_per_key = table.seconds_per_key
                self.intake.schemas[table.name] = table.schema_
                self.pending.set_keys(table.name, _key_spec(entry))
                self.dispatcher.set_keyed(table.name, _keyed(entry))
                self.catalog.changed(table.name)
            for table in new:
                arrow, kept = table.schema_.arrow(), self._orphans.get(table.name, [])
                if any(u.rows is not None and not u.rows.schema.equals(arrow) for u in kept):
                    conflicts.append(table.name)
            if conflicts:
                raise _conflict(
                    conflicts,
                    "the WAL holds acknowledged updates of table {} written with another schema; register the "
                    "table with the schema it had",
                    "the WAL holds acknowledged updates of tables {} written with other schemas; register each "
                    "with the schema it had",
                )
            names = [table.name for table in new]
            unpurged = [n for n in names if (r := self.catalog.retired.get(n)) is not None and r.purge and not r.purged]
            if unpurged:
                raise _conflict(
                    unpurged,
                    "table {} was retired with ?purge=true and its files could not all be removed yet (the log "
                    "says why); repeat DELETE /v1/admin/tables/{{name}}?purge=true, then register it",
                    "tables {} were retired with ?purge=true and their files could not all be removed yet (the "
                    "log says why); repeat each DELETE with ?purge=true, then register them",
                )
            committed = await asyncio.to_thread(committed_seqs, self.settings.warehouse_path, names)
            for name in names:
                record = self.catalog.retired.get(name)
                if record is not None:  # a retired name: the new table numbers above the old one
                    committed[name] = max(committed[name], record.last_seq)
            if self.sink is not None:
                failed = await asyncio.to_thread(_ensure_tables, self.sink, [(t.name, t.schema_) for t in new])
                for error in failed.values():
                    if not isinstance(error, ValueError):  # not a schema conflict: the disk, the storage
                        raise error
                if failed:  # a Delta table of that name with another schema
                    first = next(iter(failed.values()))
                    raise _conflict(
                        list(failed),
                        "table {} cannot use the Delta table of its name: " + f"{first}; register the table with the "
                        "Delta table's schema or choose a new name",
                        "tables {} cannot use the Delta tables of their names, the first: " + f"{first}; register "
                        "each with its Delta table's schema or choose new names",
                    )
            now = time.time()
            for k, table in enumerate(new, start=1):
                self._add_table(table, committed[table.name], now)
                if k % ENSURE_CHUNK == 0:
                    await asyncio.sleep(0)  # intake runs between chunks (each table is whole when added)
            if new:
                self.catalog.changed(*names)
        await self.save_catalog()
        return Registered(created=names, unchanged=unchanged, changed=[t.name for t in rekeyed])

    def _never_written(self, table: str) -> bool:
        """No update of ``table`` was ever acknowledged: its Delta table is empty, the WAL holds none."""
        sequence = self.intake.tables.get(table)
        return sequence is not None and sequence.next_seq <= 1 and sequence.committed_seq == 0

    def _add_table(self, table: TableConfig, committed: int, now: float) -> None:
        """A checked table into the catalog, the dispatcher and intake; WAL updates kept for it are pending again."""
        kept = self._orphans.pop(table.name, [])
        entry = CatalogEntry.from_config(table, now)
        if kept:
            # The data interval start of the first kept update is not recorded: 1 s assumed.
            entry.created_at = min(now, kept[0].release - 1.0)
        self.catalog.add(entry)
        logged = max((u.seq for u in kept), default=0)
        self._schedule_table(entry)
        self.intake.add_table(
            entry.name,
            entry.schema,
            self._sequence(entry, committed, logged, max((u.release for u in kept), default=None)),
            entry.on_new_fields,
        )
        for update in kept:
            if update.seq > committed:
                self.dispatcher.released(update)

    async def set_weight(self, table: str, weight: float) -> None:
        entry = self.catalog.entry(table)
        entry.weight = weight
        self.dispatcher.set_weight(table, weight)
        self.catalog.changed(table)
        await self.save_catalog()

    async def set_paused(self, table: str, paused: bool) -> None:
        entry = self.catalog.entry(table)
        entry.paused = paused
        self.dispatcher.set_paused(table, paused)
        self.catalog.changed(table)
        await self.save_catalog()

    async def change_columns(self, table: str, columns: Sequence[Column]) -> SchemaChange:
        """``change_schema`` with the table's columns replaced by ``columns`` (its partitioning,
        key and order_by as registered)."""
        entry = self.catalog.entry(table)
        try:
            schema = TableSchema.model_validate({**entry.schema.model_dump(), "columns": list(columns)})
        except ValidationError as exc:
            problems = "; ".join(e["msg"] for e in exc.errors())
            raise Invalid(f"table {table!r}: the new columns do not make a valid schema: {problems}") from None
        return await self.change_schema(table, schema)

    async def add_columns_from_feed(self, table: str, columns: list[Column]) -> SchemaChange | None:
        """Columns a table of ``on_new_fields = "add"`` takes from its rows (loader/intake/inference.py):
        the operator's change (``change_schema``), for the columns it still lacks once the
        changes before it are done; a column another request added meanwhile stays as that
        one made it (the first wins; validation then judges this request's values by it)."""
        async with self._feed_lock:
            entry = self.catalog.entries.get(table)
            if entry is None:
                return None
            before = list(entry.schema.columns)
            now = grown_columns(before, columns)
            grown = [c.name for c in now if c not in before]
            if not grown:
                return None
            change = await self.change_columns(table, now)
            log.info("table %r: columns %s added or widened from its feed (on_new_fields add)", table, grown)
            return change

    async def change_schema(self, table: str, schema: TableSchema) -> SchemaChange:
        """Evolve a table's schema while it runs (docs/tables.md, "Changing a table's schema").

        The new schema is saved in the catalog before the Delta table changes and before
        intake takes rows of it: once saved it is the table's, and a start that finds the Delta
        table behind brings it up to it (``_ensure_tables``). The table's loads wait meanwhile:
        a load that read the old metadata would meet the new at its commit, and none writes
        rows while the Delta table is between the two. Updates acknowledged under the old
        schema load into the new one, new columns null (``conform_rows``).
        """
        self._within_limits(table, schema)
        async with self._admin_lock:
            await self._tables_read()  # (start-up's reading of the tables' Delta logs done)
            entry = self.catalog.entry(table)
            views = {v: self.catalog.views[v].config.join_columns(table) for v in self.views.over(table)}
            change = plan_change(table, entry.schema, schema, widening=False, view_columns=views)
            self.dispatcher.set_paused(table, True)
            saved = evolved = False
            try:
                if not change.empty:
                    wait = self.settings.loading.job_timeout_seconds or 600.0
                    deadline = time.monotonic() + wait
                    while self.dispatcher.is_running(table):
                        if time.monotonic() > deadline:
                            raise Unavailable(f"table {table!r} is still loading a batch; send the change again soon")
                        await asyncio.sleep(0.01)
                    entry.schema = schema
                    self.catalog.changed(table)
                    await self.save_catalog()
                    saved = True
                    self.intake.schemas[table] = schema
                    failpoints.hit("schema.after-catalog")
                # Also when the catalog holds the schema already: completes a change whose
                # Delta commit failed (the table's loads stay paused until it has landed).
                try:
                    await asyncio.to_thread(DeltaTables(self.settings.warehouse_path).evolve_table, table, schema)
                except Exception as exc:
                    log.error("could not change the Delta table of %r to its new schema: %s", table, exc)
                    raise Unavailable(
                        f"table {table!r}: the new schema is saved, but its Delta table could not take it ({exc}); "
                        "the table's loads wait until it has: send the change again, or restart the loader"
                    ) from exc
                evolved = True
            finally:
                if evolved or not saved:
                    self.dispatcher.set_paused(table, entry.paused)
        if not change.empty:
            added = [c.name for c in change.added]
            log.info(
                "table %r: schema changed: columns %s added, %s made nullable, nested fields %s added",
                table,
                added,
                change.relaxed,
                change.fields_added,
            )
        return change

    async def set_policy(self, name: str, params: dict[str, Any]) -> None:
        try:
            policy = configured_policy(self.settings, name, params)
        except (KeyError, TypeError, ValueError) as exc:
            raise Invalid(f"cannot use policy {name!r} with {params}: {exc}") from None
        self.dispatcher.switch_policy(policy)
        self.catalog.policy = name
        self.catalog.policy_params = dict(params)
        self.metrics.set_policy(name)
        self.catalog.changed()
        await self.save_catalog()

    async def save_catalog(self) -> None:
        """Persist the catalog if something changed, with each table's freshness accounts."""
        await self.catalog.save_changes(self._note_accounts)

    def _note_accounts(self, tables: Collection[str]) -> None:
        """The freshness accounts of ``tables`` (those changed: an account changes only when a
        batch of the table is loaded or set aside)."""
        entries = self.catalog.entries
        for name in tables:
            if name in self.intake.tables:
                entries[name].freshness = asdict(self.dispatcher.loaded_account(name))
        for name, view in self.catalog.views.items():
            if name in self.views:
                view.freshness = asdict(self.dispatcher.loaded_account(name))

    # -- retiring tables and views (operators; docs/tables.md) ---------------------------------
    async def retire_table(self, name: str, purge: bool = False) -> dict[str, Any]:
        """Retire a table: a state saved before the answer, so that a crash resumes it.

        While ``retiring`` the table takes no updates (410) but loads everything it
        acknowledged; once drained it leaves (``_finish_retirement``). Refused (409) while a
        view reads it, or while it has quarantined updates: those are acknowledged data
        that only an operator's retry or discard may settle, and a retirement that dropped
        them silently would lose data nobody chose to lose. Repeating it is harmless; a
        repeat with ``purge`` adds the purge.
        """
        async with self._admin_lock:
            await self._tables_read()  # (start-up's reading of the tables' Delta logs done)
            entry = self.catalog.entries.get(name)
            if entry is None:
                record = self.catalog.gone(name)
                if record is None or record.kind != "table":
                    raise unknown_table(name)
                await self._purge_later(record, purge)
                return self._retirement(record)
            why = self.intake.unreadable.get(name)
            if why is not None:
                raise Unavailable(
                    f"table {name!r} cannot be retired: its Delta log could not be read at start-up ({why}), so "
                    "whether it is drained cannot be known; repair its _delta_log, restart the loader, then retire it"
                )
            readers = self.views.over(name)
            if readers:
                raise Conflict(
                    f"table {name!r} is read by join views {readers[:NAMED_IN_MESSAGE]}; retire them first "
                    "(DELETE /v1/admin/views/{view}), then the table",
                    table=name,
                    views=readers[:NAMED_IN_MESSAGE],
                )
            if not entry.retiring:
                held = sum(len(e.updates) for e in self.quarantine.store.active(name))
                if held:
                    raise Conflict(
                        f"table {name!r} has {held} quarantined updates (acknowledged, not loaded); retry or "
                        "discard them first (GET /v1/admin/quarantine lists them), then retire the table",
                        table=name,
                        quarantined_updates=held,
                    )
                entry.retiring, entry.purge = True, purge
                if entry.paused:  # retiring means loading what it holds: a pause would never end
                    entry.paused = False
                    self.dispatcher.set_paused(name, False)
                self.intake.retired[name] = "retiring"  # (no await since the checks: none is numbered after)
                self.catalog.changed(name)
                failpoints.hit("retire.before-save")
                await self.save_catalog()  # durable before the answer
                log.info(
                    "table %s is retiring%s: it loads what it acknowledged, then leaves",
                    name,
                    " (its files go then)" if purge else "",
                )
            elif purge and not entry.purge:
                entry.purge = True
                self.catalog.changed(name)
                await self.save_catalog()
            if await self._finish_retirement(name):
                return self._retirement(self.catalog.retired[name])
            return self._retirement_in_progress(entry)

    async def retire_view(self, name: str, purge: bool = False) -> dict[str, Any]:
        """Retire a join view: at once, once a load of it that runs has finished. A view
        holds no acknowledged data (its updates are its inputs' commits, durable in their
        Delta logs), so there is nothing to drain; what it had pending is dropped."""
        async with self._admin_lock:
            if name not in self.catalog.views:
                record = self.catalog.gone(name)
                if record is None or record.kind != "view":
                    raise NotFound(f"view {name!r} does not exist; GET /v1/admin/views lists the views", view=name)
                await self._purge_later(record, purge)
                return self._retirement(record)
            maintained = name in self.dispatcher.index
            if maintained:
                self.dispatcher.hold(name)  # no new load of it; one running finishes
                while self.dispatcher.is_running(name):
                    await asyncio.sleep(0.05)
            self.views.remove(name)
            if maintained:
                self.dispatcher.retire(name)
            self.metrics.table_removed(name)
            self.status.forget()
            del self.catalog.views[name]
            record = RetiredTable(name, 0, time.time(), kind="view", purge=purge)
            self.catalog.retired[name] = record
            self.catalog.changed()
            failpoints.hit("retire.before-save")
            await self.save_catalog()
            log.info("view %s retired", name)
            if purge:
                await self._purge(record)
            return self._retirement(record)

    def _drained(self, name: str) -> bool:
        """Nothing the table acknowledged is left to load: none pending, running, on its way
        from the WAL to the queue, or quarantined."""
        sequence = self.intake.tables.get(name)
        if sequence is None:  # (its Delta log could not be read at start-up: it cannot drain)
            return False
        return (
            not self.dispatcher.is_running(name)
            and self.dispatcher.state(name).pending_count == 0
            and self.pending.count(name) == 0
            and sequence.next_to_release >= sequence.next_seq
            and not sequence.reorder
            and not self.quarantine.store.active(name)
        )

    async def _finish_retirement(self, name: str) -> bool:
        """A drained retiring table leaves (under the admin lock). The catalog's save that
        drops it is the commit point: before it, a restart resumes the retirement (and
        finds the table drained again); after it, the name is retired. A purge follows the
        save, never precedes it: a purged table that a restart still thought live would
        replay its WAL records into a new, empty Delta table."""
        entry = self.catalog.entries.get(name)
        if entry is None or not entry.retiring or not self._drained(name):
            return False
        sequence = self.intake.tables[name]
        last_seq = max(sequence.next_seq - 1, sequence.committed_seq, entry.last_seq)
        record = RetiredTable(name, last_seq, time.time(), purge=entry.purge)
        self.dispatcher.retire(name)
        self.intake.remove_table(name, last_seq)
        self.metrics.table_removed(name)
        self.status.forget()
        self.catalog.remove(name, record)
        await self.save_catalog()
        failpoints.hit("retire.after-save")
        log.info("table %s retired: every update it acknowledged is loaded (up to %d)", name, last_seq)
        if record.purge:
            await self._purge(record)
        return True

    async def _finish_retirements(self) -> None:
        """Every retiring table that has drained leaves (each second, and at the DELETE)."""
        retiring = [name for name, entry in self.catalog.entries.items() if entry.retiring]
        if not retiring:
            return
        async with self._admin_lock:
            for name in retiring:
                await self._finish_retirement(name)

    async def _every_second(self) -> None:
        await self._finish_retirements()
        await self.save_catalog()

    async def _purge_later(self, record: RetiredTable, purge: bool) -> None:
        """A repeated DELETE of a retired name: with ``purge``, its files go now if kept."""
        if purge and not record.purged:
            record.purge = True
            self.catalog.changed()
            await self.save_catalog()
            await self._purge(record)

    async def _purge(self, record: RetiredTable) -> None:
        """The retired table's Delta table and its own files (landing copies; its spill
        segments and quarantine entries are gone already: drained, settled) go; then the
        record says so. A failure is logged and left for a repeated DELETE or the next start."""
        s = self.settings
        paths = [s.warehouse_path / record.name, self.intake.owned_dir / record.name]
        await self.maintenance.finished_with(record.name)  # (a checkpoint being written into its log)
        try:
            await asyncio.to_thread(_remove_trees, paths)
        except OSError as exc:
            log.error(
                "could not remove the files of retired %s %s: %s; DELETE it again with ?purge=true",
                record.kind,
                record.name,
                exc,
            )
            return
        record.purged = True
        self.catalog.changed()
        await self.save_catalog()
        log.info("retired %s %s purged: its Delta table and files are removed", record.kind, record.name)

    def _retirement(self, record: RetiredTable) -> dict[str, Any]:
        kind = record.kind
        return {
            "name": record.name,
            "kind": kind,
            "state": "retired",
            "purge": record.purge,
            "purged": record.purged,
            "pending_updates": 0,
            "quarantined_updates": 0,
            "message": f"{kind} {record.name!r} is retired"
            + (" and its Delta table removed" if record.purged else "")
            + f"; POST /v1/admin/{kind}s registers the name again as a new {kind}",
        }

    def _retirement_in_progress(self, entry: CatalogEntry) -> dict[str, Any]:
        name = entry.name
        pending = self.dispatcher.unloaded(name)
        held = sum(len(e.updates) for e in self.quarantine.store.active(name))
        waiting = f"; {held} quarantined updates wait for a retry or discard" if held else ""
        return {
            "name": name,
            "kind": "table",
            "state": "retiring",
            "purge": entry.purge,
            "purged": False,
            "pending_updates": pending,
            "quarantined_updates": held,
            "message": f"table {name!r} is retiring: it takes no more updates and leaves once the {pending} "
            f"acknowledged updates still pending are loaded{waiting}; repeat the DELETE to see its state",
        }

    async def register_view(self, config: ViewConfig) -> tuple[ViewEntry, bool]:
        """Declare a join view (idempotent for the same declaration): checked against the
        catalog, its Delta table created, its inputs' current contents pending for it."""
        async with self._admin_lock:
            await self._tables_read()  # (start-up's reading of the tables' Delta logs done)
            entry, created = await self.views.register(config)
            if created:
                self.metrics.table_added(config.name)
        await self.save_catalog()
        return entry, created

    # -- around each batch (loader.abc.BatchHandler) ------------------------------------------
    def load(self, worker: int, batch: Batch) -> LoadResult:
        if batch.table in self.views:  # on this thread; a spark view's job where loads run
            return self.views.load(batch, lambda job: self._join_view(worker, job))
        sink = self.sink
        if sink is None:  # the dispatcher starts only once the sink is there
            raise RuntimeError("a batch was dispatched before Spark was up")
        pool = getattr(sink, "use_pool", None)
        if pool is not None:
            pool(f"worker-{worker}")
        schema = self.catalog.entries[batch.table].schema
        result = self._spark_call(lambda: sink.load(batch, schema))
        remove_files([f.path for f in batch.files])
        return result

    def load_group(self, worker: int, batches: list[Batch]) -> list[LoadResult | BaseException]:
        if any(b.table in self.views for b in batches):  # views apart, the tables as one job
            tables = [b for b in batches if b.table not in self.views]
            loaded = iter(self.load_group(worker, tables) if tables else [])
            return [self._view_outcome(worker, b) if b.table in self.views else next(loaded) for b in batches]
        sink = self.sink
        if sink is None:
            raise RuntimeError("a batch was dispatched before Spark was up")
        pool = getattr(sink, "use_pool", None)
        if pool is not None:
            pool(f"worker-{worker}")
        schemas = [self.catalog.entries[b.table].schema for b in batches]
        outcomes = self._spark_call(lambda: sink.load_group(batches, schemas))
        remove_files([f.path for b, o in zip(batches, outcomes) if isinstance(o, LoadResult) for f in b.files])
        return outcomes

    def _view_outcome(self, worker: int, batch: Batch) -> LoadResult | BaseException:
        try:
            return self.views.load(batch, lambda job: self._join_view(worker, job))
        except Exception as exc:
            return exc

    def _join_view(self, worker: int, job: ViewJob) -> pa.Table:
        """A view's Spark job (engine ``spark``), run where the tables' loads run."""
        sink = self.sink
        if sink is None:
            raise RuntimeError(f"view {job.view!r} was dispatched before Spark was up")
        pool = getattr(sink, "use_pool", None)
        if pool is not None:
            pool(f"worker-{worker}")
        return self._spark_call(lambda: sink.join_view(job))

    def set_aside(self, batch: Batch, error: BaseException, attempts: int) -> None:
        if batch.table in self.views:
            # Its input commits are durable in the inputs' Delta logs: nothing to set aside,
            # the load is retried with back-off until what fails it is fixed.
            raise RuntimeError(f"view {batch.table!r} is not quarantined; its load retries: {error}")
        self.quarantine.set_aside(batch, error, attempts)

    def keep_held(self, table: str, values: Sequence[HeldValue]) -> None:
        self.quarantine.keep_held(table, values)

    def loaded(self, done: FinishedBatch) -> None:
        self.metrics.on_writes_refused(done.table, None)  # a table that refused writes takes them again
        if done.table in self.views:
            self._view_loaded(done)
            return
        entry = self.catalog.entries[done.table]
        entry.last_seq = self.intake.loaded(done.table, done.batch.last_seq)
        entry.last_release = done.batch.updates[-1].release
        if done.result.delta_version is not None:
            entry.delta_version = done.result.delta_version
            self.metrics.delta_version.labels(done.table).set(done.result.delta_version)
        entry.alpha, entry.overhead = done.alpha, done.overhead
        if done.per_key is not None:
            entry.seconds_per_key = done.per_key
        self.catalog.changed(done.table)
        if done.result.skipped:
            log.info(
                "%s updates %d..%d were already in Delta (committed by an attempt that did not report back: a crash); "
                "not loaded again",
                done.table,
                done.batch.first_seq,
                done.batch.last_seq,
            )
        m = self.metrics
        m.batches.labels(done.table, "skipped" if done.result.skipped else "loaded").inc()
        m.rows_loaded.labels(done.table).inc(done.result.rows)
        # Latest tables: values overwritten while waiting (counted as the load after them
        # commits, so a WAL replay does not count them twice) and by the load itself.
        superseded = int(done.result.details.get("superseded_rows", 0)) + self.pending.drain_superseded(done.table)
        if superseded:
            m.superseded_rows.labels(done.table).inc(superseded)
            entry.superseded_rows += superseded
        m.updates_loaded.labels(done.table).inc(len(done.batch.updates))
        m.batch_duration.labels(done.table).observe(done.finished - done.started)
        m.job_tables.observe(done.job_tables)
        m.job_overhead.set(self.dispatcher.job_overhead.overhead)
        hist = m.stretch.labels(done.table)
        for value in done.stretches:
            hist.observe(value)
        # Views over the table: a skipped load may be a commit whose answer was lost, which
        # their last note missed, so every load notes the table's newest version.
        version = None if done.result.skipped else done.result.delta_version
        self.views.input_committed(done.table, version, done.finished)

    def _view_loaded(self, done: FinishedBatch) -> None:
        self.views.loaded(done.batch, done.result, done.alpha, done.overhead)
        m = self.metrics
        m.batches.labels(done.table, "skipped" if done.result.skipped else "loaded").inc()
        m.rows_loaded.labels(done.table).inc(done.result.rows)
        m.updates_loaded.labels(done.table).inc(len(done.batch.updates))
        m.batch_duration.labels(done.table).observe(done.finished - done.started)
        if done.result.delta_version is not None:
            m.delta_version.labels(done.table).set(done.result.delta_version)
        hist = m.stretch.labels(done.table)
        for value in done.stretches:
            hist.observe(value)

    def failed(self, failed: FailedBatch) -> None:
        self.metrics.batches.labels(failed.table, "failed").inc()
        if failed.split:
            self.metrics.batch_splits.labels(failed.table).inc()
        refusal = table_refusal(failed.error)  # the table's fault: retried, never quarantined
        if refusal is not None:
            self.metrics.on_writes_refused(failed.table, refusal.reason)

    def job_timed(self, timeline: JobTimeline) -> None:
        m = self.metrics
        for stage, seconds in timeline.stages().items():
            m.job_stage.labels(stage).observe(seconds)
        if timeline.idle_before is not None:
            m.job_stage.labels("idle").observe(timeline.idle_before)
        m.job_service_cpu.observe(timeline.service_cpu / max(1, len(timeline.tables)))

    def quarantined(self, batch: QuarantinedBatch) -> None:
        self.quarantine.quarantined(batch.batch)  # (a latest table's keys it holds wait from now on)
        self.catalog.changed(batch.table)  # its freshness accounts moved on
        self.metrics.batches.labels(batch.table, "failed").inc()
        self.metrics.batches.labels(batch.table, "quarantined").inc()
        self.quarantine.count(batch.table)


@dataclass(frozen=True)
class Registered:
    """What a registration did: tables created, and tables that already existed with that schema."""

    created: list[str]
    unchanged: list[str]
    #: Registered before, never written to, now with another mode, key or order_by.
    changed: list[str] = field(default_factory=list)


def _key_spec(entry: CatalogEntry) -> KeySpec | None:
    """What the pending store needs of a latest table (None: an append table)."""
    if not entry.schema.latest:
        return None
    return KeySpec(entry.schema.key, entry.key_policy, entry.max_keys_per_batch, entry.schema.order_by)


def _keyed(entry: CatalogEntry) -> KeyedSpec | None:
    """What the scheduler needs of a latest table: its batches cost per key (None: append)."""
    if not entry.schema.latest:
        return None
    return KeyedSpec(
        policy=entry.key_policy,  # type: ignore[arg-type]
        max_keys_per_batch=entry.max_keys_per_batch,
        per_key=entry.seconds_per_key,
    )


def _key_settings(table: CatalogEntry | TableConfig) -> tuple[str, int | None, str]:
    """What a registration of the same schema may change: a latest table's key policy and
    batch bound, and what new fields in rows do."""
    return table.key_policy, table.max_keys_per_batch, table.on_new_fields


def _same_columns(a: TableSchema, b: TableSchema) -> bool:
    """Equal but for the latest-table fields (key, order_by): what an empty table may change."""
    return a.columns == b.columns and a.partition_by == b.partition_by


def _conflict(names: list[str], one: str, many: str) -> Conflict:
    """The 409 of a registration: ``one`` or ``many`` with the table names in its ``{}``."""
    if len(names) == 1:
        return Conflict(one.replace("{}", repr(names[0]), 1), table=names[0])
    shown = ", ".join(repr(n) for n in names[:NAMED_IN_MESSAGE])
    more = f" and {len(names) - NAMED_IN_MESSAGE} more" if len(names) > NAMED_IN_MESSAGE else ""
    return Conflict(many.replace("{}", shown + more, 1) + "; none was registered", tables=names)


def table_properties(settings: Settings) -> dict[str, str]:
    """Delta table properties of the tables the loader creates: its checkpoint interval and
    log retention (docs/tuning.md, "Tables that age"); unset ones leave Delta's defaults."""
    properties = {}
    if settings.loading.checkpoint_interval:
        properties["delta.checkpointInterval"] = str(settings.loading.checkpoint_interval)
    if settings.maintenance.log_retention_hours:
        properties[RETENTION] = retention_value(settings.maintenance.log_retention_hours)
    return properties


def _remove_trees(paths: list[Path]) -> None:
    """Remove each directory tree that exists (a worker thread)."""
    for path in paths:
        if path.exists():
            shutil.rmtree(path)


def _read_states(committed: CommittedSeqs, names: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    """``names`` read together, and, when that fails, one by one: what each read failed with."""
    try:
        return committed.read_all(names), {}
    except Exception:  # (which table: read alone)
        read, failed = {}, {}
        for name in names:
            try:
                read[name] = committed[name]
            except Exception as exc:
                failed[name] = str(exc) or type(exc).__name__
        return read, failed


def _ensure_tables(
    sink: Sink, tables: list[tuple[str, TableSchema]], evolve: DeltaTables | None = None
) -> dict[str, Exception]:
    """Check or create each table's Delta table (a worker thread); the ones that failed, with why.

    ``evolve`` (at start): a Delta table behind its catalog schema by a change the catalog
    saved before a crash (``LoaderService.change_schema``) is brought up to it."""
    failed: dict[str, Exception] = {}
    for name, schema in tables:
        try:
            try:
                sink.ensure_table(name, schema)
            except ValueError as refused:  # the sink's words, unless the table is only behind
                try:
                    evolved = evolve is not None and evolve.evolve_table(name, schema)
                except ValueError:
                    evolved = False
                if not evolved:
                    raise refused from None
                sink.ensure_table(name, schema)
        except Exception as exc:  # e.g. a Delta table of that name with another schema
            failed[name] = exc
    return failed


def configured_policy(settings: Settings, name: str, params: dict[str, Any]) -> Policy:
    """The named policy, wrapped in the Chain pressure mode when ``[pressure]`` enables it, and
    offered multi-table jobs (``[loading] max_tables_per_job``) when it is one that can be."""
    p, budget = settings.pressure, settings.spill.memory_budget_bytes
    policy = make_policy(name, **params)
    policy = with_pressure(policy, p.enabled, budget, p.high_watermark, p.low_watermark, p.staleness_cap_seconds)
    loading = settings.loading
    groups = loading.max_tables_per_job if name in GROUPABLE else 1
    return with_groups(policy, groups, loading.job_overhead_seconds, loading.group_rule)


def _declare_configured_views(catalog: Catalog, views: list[ViewConfig]) -> None:
    """Views of the configuration file enter the catalog once, checked against its tables;
    a declaration may not change under the same name."""
    schemas = {name: entry.schema for name, entry in catalog.entries.items()}
    changed = False
    for view in views:
        if catalog.gone(view.name) is not None:
            log.warning(
                "view %r is configured but was retired (DELETE /v1/admin/views/%s); it stays retired: remove it from "
                "the configuration, or declare it again with POST /v1/admin/views",
                view.name,
                view.name,
            )
            continue
        existing = catalog.views.get(view.name)
        if existing is not None:
            if existing.config != view:
                raise ConfigError(
                    f"view {view.name!r} is configured with a declaration that differs from the one it was "
                    "registered with; such changes are not supported: use a new view name"
                )
            continue
        try:
            resolve(view, schemas)
        except Invalid as exc:
            raise ConfigError(f"[[views]] {exc.message}") from None
        catalog.views[view.name] = ViewEntry(config=view, created_at=time.time())
        changed = True
    if changed:
        catalog.changed()
        catalog.save()


def _configured_schema(catalog: Catalog, entry: CatalogEntry, schema: TableSchema) -> bool:
    """A configured schema other than the catalog's: a change the loader makes (the same rules
    as ``change_schema``; the start brings the Delta table up to it, ``_ensure_tables``), or
    the schema before a change made through the API (the catalog's stays, with a warning), or
    an error that names what cannot change."""
    views = {name: view.config.join_columns(entry.name) for name, view in catalog.views.items()}
    try:
        change = plan_change(entry.name, entry.schema, schema, widening=False, view_columns=views)
    except Conflict as refused:
        try:
            plan_change(entry.name, schema, entry.schema, widening=False)
        except Conflict:
            raise ConfigError(f"the configuration changes the schema of {refused.message}") from None
        log.warning(
            "table %r: the configuration has the schema it had before a change through the API (PATCH "
            "/v1/admin/tables/%s/schema); the table keeps its schema: put it in the configuration",
            entry.name,
            entry.name,
        )
        return False
    entry.schema = schema
    catalog.changed(entry.name)
    log.info(
        "table %r: the configuration changes its schema: columns %s added, %s made nullable",
        entry.name,
        [c.name for c in change.added],
        list(change.relaxed),
    )
    return True


def _register_configured(catalog: Catalog, tables: list[TableConfig]) -> None:
    """Tables of the configuration file enter the catalog once; their schema (mode, key, order_by
    included) may not change, a latest table's key policy and batch bound may."""
    changed = False
    for table in tables:
        if catalog.gone(table.name) is not None:
            log.warning(
                "table %r is configured but was retired (DELETE /v1/admin/tables/%s); it stays retired: remove it "
                "from the configuration, or register it again with POST /v1/admin/tables",
                table.name,
                table.name,
            )
            continue
        existing = catalog.entries.get(table.name)
        if existing is None:
            catalog.add(CatalogEntry.from_config(table, time.time()))
            changed = True
        elif existing.schema != table.schema_:
            changed |= _configured_schema(catalog, existing, table.schema_)
        elif _key_settings(existing) != _key_settings(table):  # a latest table's key policy or batch bound
            existing.key_policy, existing.max_keys_per_batch = table.key_policy, table.max_keys_per_batch
            catalog.changed(table.name)
            changed = True
    if changed:
        catalog.save()
