"""The loader service: wires intake, the WAL, the pending store, the dispatcher and the sink.

Start-up order matters for correctness and for first-run speed:

1. catalog, WAL replay and the Delta transaction versions are read (no Spark needed), so
   recovery knows which logged updates are already in Delta and which are pending;
2. intake opens (new updates get sequence numbers after everything recovered);
3. Spark starts in the background (~5 s); once it is up and every table exists in
   Delta, loading begins and /readyz turns ready.

All mutable state is touched on the event-loop thread only; Spark jobs run on worker
threads and report back through the dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from loader.config import ConfigError, Settings
from loader.core import failpoints
from loader.core.errors import Conflict, Invalid, NotFound, Unavailable, WalWriteFailed
from loader.core.tables import TableConfig
from loader.core.updates import Batch, LoadResult, Update, WalRecord
from loader.durability.catalog import Catalog, CatalogEntry
from loader.durability.quarantine import QuarantineEntry, QuarantineStore
from loader.durability.recovery import RecoveryPlan
from loader.durability.transactions import committed_seq
from loader.durability.wal import WriteAheadLog
from loader.intake.idempotency import IdempotencyStore
from loader.intake.landing import accept_files
from loader.intake.requests import TableSequence, UpdateRequest, ValidUpdate, iso, plan_updates
from loader.intake.rows import rows_to_arrow
from loader.loading.dispatcher import Dispatcher, FailedBatch, FinishedBatch, QuarantinedBatch
from loader.loading.observed import ObservedRecord
from loader.loading.sinks.base import Sink
from loader.ops.metrics import Metrics
from loader.ops.status import table_status
from loader.pending.setup import build_pending_store
from loader.pending.store import SpillFull
from schedulers.base import Policy
from schedulers.chain import with_pressure
from schedulers.model import TableSpec
from schedulers.registry import make_policy

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often a failed WAL is tried again (loader/ops/maintenance.py), and the Retry-After of
#: requests refused meanwhile.
WAL_HEAL_SECONDS = 1.0


@dataclass
class Ack:
    table: str
    sequence: int
    release: float

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "sequence": self.sequence,
            "release_time": self.release,
            "release_time_iso": iso(self.release),
        }


class LoaderService:
    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        sink_factory: Callable[[Settings], Sink] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._sink_factory = sink_factory
        self.sink: Sink | None = None
        self.catalog: Catalog | None = None
        self.dispatcher: Dispatcher | None = None
        self.wal: WriteAheadLog | None = None
        self.idempotency = IdempotencyStore(settings.maintenance.idempotency_ttl_seconds)
        self.tables: dict[str, TableSequence] = {}
        self.accepting = False
        self.ready = False
        self.failure: str | None = None
        #: Why intake is closed by the WAL's disk (full, read-only); ``heal_faults`` reopens it.
        self.wal_fault: str | None = None
        #: Landing-file copies of requests the WAL refused, removed once it is healed.
        self._refused_copies: list[str] = []
        self.quarantine: QuarantineStore | None = None
        self._quarantine_lock = asyncio.Lock()  # one operator action on the quarantine at a time
        self.recovered_updates = 0
        self._catalog_dirty = False
        self._catalog_lock = asyncio.Lock()  # one catalog write at a time
        self._admin_lock = asyncio.Lock()  # operator changes of the table set, one at a time
        self._orphans: dict[str, list[Update]] = {}
        self._startup: asyncio.Task[None] | None = None
        self.metrics.attach(lambda: self.dispatcher)
        self.metrics.workers.set(settings.workers)

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def owned_files_dir(self) -> Path:
        return self.settings.data_dir / "landed"

    async def start(self, *, load: bool = True) -> None:
        """Recover and open intake; start Spark and loading in the background when ``load``."""
        s = self.settings
        for directory in (s.data_dir, s.warehouse_path, s.landing_path, s.state_path):
            directory.mkdir(parents=True, exist_ok=True)
        self.catalog = Catalog.open(s.state_path / "catalog.json")
        self._register_configured_tables()
        policy_name = self.catalog.policy or s.policy
        params = self.catalog.policy_params if self.catalog.policy else s.policy_params
        policy = self._make_policy(policy_name, params)
        self.metrics.set_policy(policy_name)
        self.idempotency = IdempotencyStore.load(
            s.state_path / "idempotency.json", s.maintenance.idempotency_ttl_seconds
        )
        self.wal = WriteAheadLog(
            s.wal_path, durability=s.durability, segment_bytes=s.wal_segment_bytes, on_fsync=self.metrics.on_fsync
        )
        # The WAL's lock first: a second instance on the same data must fail before it
        # touches anything (the spill directory is emptied next).
        await asyncio.to_thread(self.wal.open)
        wal = self.wal
        self.metrics.watch_wal(lambda: wal.size_bytes)
        pending = await asyncio.to_thread(
            build_pending_store, s, lambda table: self.catalog.entries[table].schema.arrow(), self.metrics.on_spill_op
        )
        failpoints.hit("recovery.after-spill-reset")
        self.quarantine = await asyncio.to_thread(QuarantineStore.open, s.state_path / "quarantine")
        self.dispatcher = Dispatcher(
            policy,
            s.workers,
            pending,
            self._load_batch,
            on_finished=self._finished,
            on_failed=self._failed,
            retry_base=s.loading.retry_base_seconds,
            max_retry_delay=s.loading.retry_max_seconds,
            max_attempts=s.loading.max_attempts,
            quarantine=self._quarantine_batch,
            on_quarantined=self._quarantined,
            observed=ObservedRecord(s.observed_trace_max_updates, s.observed_schedule_max_batches),
        )
        names = list(self.catalog.entries)
        committed = await asyncio.to_thread(lambda: {n: committed_seq(s.warehouse_path / n, n) for n in names})
        for entry in self.catalog.entries.values():
            self._add_table(entry)
        plan = RecoveryPlan(committed=committed, quarantined=self.quarantine.seqs())
        # One record at a time, off the event loop (nothing else runs yet): pending updates
        # go straight into the pending store, which spills, so a restart after a burst needs
        # no more memory than the burst did.
        await asyncio.to_thread(self._replay_wal, plan)
        for entry in self.catalog.entries.values():
            name = entry.name
            self.tables[name] = self._sequence(
                entry, committed[name], plan.last_seq.get(name, 0), plan.last_release.get(name)
            )
        self.recovered_updates = plan.pending_count
        self._orphans = dict(plan.orphans)
        for name, updates in self._orphans.items():
            log.warning(
                "the WAL holds %d acknowledged updates of table %r, which the catalog does not know; they are kept "
                "and loaded once the table is registered again (POST /v1/admin/tables)",
                len(updates),
                name,
            )
        await asyncio.to_thread(_remove_files, plan.stale_files)
        await self._settle_quarantine()
        await asyncio.to_thread(self._sweep_owned_files, plan.live_files)
        self.accepting = True
        log.info(
            "recovered %d pending updates from the WAL; intake open (durability=%s)",
            self.recovered_updates,
            s.durability.value,
        )
        if load:
            self._startup = asyncio.create_task(self._start_loading())

    async def _start_loading(self) -> None:
        try:
            self.sink = await asyncio.to_thread(self._make_sink)
            for entry in list(self.catalog.entries.values()):
                await asyncio.to_thread(self.sink.ensure_table, entry.name, entry.schema)
        except Exception as exc:  # surfaced on /readyz and in the log
            self.failure = f"could not start loading: {exc}"
            log.exception("could not start loading")
            return
        self.dispatcher.start()
        self.ready = True
        self.metrics.ready.set(1)
        log.info(
            "loading with %s writer, policy %s, %d workers",
            self.sink.name,
            self.dispatcher.policy.name,
            self.settings.workers,
        )

    def _make_sink(self) -> Sink:
        if self._sink_factory is not None:
            return self._sink_factory(self.settings)
        from loader.loading.sinks import make_sink
        from loader.loading.spark import build_spark_session, renice_driver_jvm

        s = self.settings
        spark = build_spark_session(
            master=s.spark.master, conf=s.spark.conf, app_name=s.spark.app_name, fair_pools=s.workers
        )
        if s.spark.driver_nice:
            renice_driver_jvm(spark, s.spark.driver_nice)
        return make_sink(s.writer, s.warehouse_path, spark)

    async def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            if self.failure:
                raise RuntimeError(self.failure)
            if time.monotonic() > deadline:
                raise TimeoutError("service did not become ready in time")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.accepting = False
        if self._startup is not None and not self._startup.done():
            await asyncio.wait({self._startup}, timeout=60)
        if self.dispatcher is not None:
            await self.dispatcher.wait_idle()
            await asyncio.to_thread(self.dispatcher.shutdown)
        await self.save_catalog()
        if self.wal is not None:
            await asyncio.to_thread(self.wal.close)
        self.ready = False
        self.metrics.ready.set(0)
        log.info("stopped cleanly: running batches finished, WAL closed, catalog saved")

    # -- tables ----------------------------------------------------------------------------
    def _register_configured_tables(self) -> None:
        assert self.catalog is not None
        changed = False
        for table in self.settings.tables:
            existing = self.catalog.entries.get(table.name)
            if existing is None:
                self.catalog.add(CatalogEntry.from_config(table, time.time()))
                changed = True
            elif existing.schema != table.schema_:
                raise ConfigError(
                    f"table {table.name!r} is configured with a schema that differs from the one it was registered "
                    "with; schema changes are not supported: use a new table name"
                )
        if changed:
            self.catalog.save()

    def _add_table(self, entry: CatalogEntry) -> None:
        """The table's scheduler state: current up to where its freshness account (or its
        last load, or its registration) says."""
        assert self.dispatcher is not None
        account = entry.account()
        if account is not None:
            origin = account.current_upto
        else:
            origin = entry.last_release if entry.last_release is not None else entry.created_at
        spec = TableSpec(
            name=entry.name, alpha=entry.alpha, overhead=entry.overhead, weight=entry.weight, period=entry.period_hint
        )
        self.dispatcher.add_table(spec, origin=origin, paused=entry.paused, account=account)
        self.metrics.table_added(entry.name)

    def _sequence(
        self, entry: CatalogEntry, committed: int, logged_seq: int = 0, logged_release: float | None = None
    ) -> TableSequence:
        """The table's sequence counter: numbering resumes above every sequence number
        Delta, the catalog or the WAL has seen."""
        origin = self.dispatcher.state(entry.name).origin if self.dispatcher is not None else entry.created_at
        start = max(committed, entry.last_seq, logged_seq)
        last_release = origin if logged_release is None else max(origin, logged_release)
        return TableSequence(
            next_seq=start + 1, last_release=last_release, committed_seq=committed, next_to_release=start + 1
        )

    def _replay_wal(self, plan: RecoveryPlan) -> None:
        assert self.wal is not None and self.dispatcher is not None
        for record in self.wal.replay():
            self.idempotency.add_record(record)
            update = plan.add(record)
            if update is not None:
                self.dispatcher.released(update)
            failpoints.hit("recovery.replay")

    async def register_table(self, table: TableConfig) -> CatalogEntry:
        """Register a table (idempotent for the same schema); adopts WAL updates kept for it."""
        assert self.catalog is not None and self.dispatcher is not None
        async with self._admin_lock:
            existing = self.catalog.entries.get(table.name)
            if existing is not None:
                if existing.schema == table.schema_:
                    return existing
                raise Conflict(f"table {table.name!r} already exists with another schema; choose a new name")
            path = self.settings.warehouse_path / table.name
            committed = await asyncio.to_thread(committed_seq, path, table.name)
            kept = self._orphans.get(table.name, [])
            arrow = table.schema_.arrow()
            if any(u.rows is not None and not u.rows.schema.equals(arrow) for u in kept):
                raise Conflict(
                    f"the WAL holds acknowledged updates of table {table.name!r} written with another schema; "
                    "register the table with the schema it had"
                )
            if self.sink is not None:
                try:
                    await asyncio.to_thread(self.sink.ensure_table, table.name, table.schema_)
                except ValueError as exc:  # a Delta table of that name with another schema
                    raise Conflict(f"{exc}; register it with the table's schema or choose a new name") from None
            now = time.time()
            entry = CatalogEntry.from_config(table, now)
            if kept:
                # The data interval start of the first kept update is not recorded: 1 s assumed.
                entry.created_at = min(now, kept[0].release - 1.0)
            self.catalog.add(entry)
            logged = max((u.seq for u in kept), default=0)
            self._add_table(entry)
            self.tables[entry.name] = self._sequence(
                entry, committed, logged, max((u.release for u in kept), default=None)
            )
            for update in kept:
                if update.seq > committed:
                    self.dispatcher.released(update)
            self._orphans.pop(table.name, None)
            self._catalog_dirty = True
        await self.save_catalog()
        return entry

    def entry(self, table: str) -> CatalogEntry:
        assert self.catalog is not None
        entry = self.catalog.entries.get(table)
        if entry is None:
            raise NotFound(f"table {table!r} does not exist; register it with POST /v1/admin/tables", table=table)
        return entry

    async def set_weight(self, table: str, weight: float) -> None:
        entry = self.entry(table)
        entry.weight = weight
        self.dispatcher.set_weight(table, weight)
        self._catalog_dirty = True
        await self.save_catalog()

    async def set_paused(self, table: str, paused: bool) -> None:
        entry = self.entry(table)
        entry.paused = paused
        self.dispatcher.set_paused(table, paused)
        self._catalog_dirty = True
        await self.save_catalog()

    def _make_policy(self, name: str, params: dict[str, Any]) -> Policy:
        p, budget = self.settings.pressure, self.settings.spill.memory_budget_bytes
        policy = make_policy(name, **params)
        return with_pressure(policy, p.enabled, budget, p.high_watermark, p.low_watermark, p.staleness_cap_seconds)

    async def set_policy(self, name: str, params: dict[str, Any]) -> None:
        try:
            policy = self._make_policy(name, params)
        except (KeyError, TypeError, ValueError) as exc:
            raise Invalid(f"cannot use policy {name!r} with {params}: {exc}") from None
        self.dispatcher.switch_policy(policy)
        self.catalog.policy = name
        self.catalog.policy_params = dict(params)
        self.metrics.set_policy(name)
        self._catalog_dirty = True
        await self.save_catalog()

    # -- intake ----------------------------------------------------------------------------
    def validate(self, requests: list[UpdateRequest]) -> list[ValidUpdate]:
        """Check every update of a request against its table (no side effects)."""
        valid: list[ValidUpdate] = []
        for request in requests:
            entry = self.entry(request.table)
            if request.rows is not None:
                valid.append(
                    ValidUpdate(
                        request.table, request.data_until, rows=rows_to_arrow(request.rows, entry.schema, entry.name)
                    )
                )
            else:
                valid.append(ValidUpdate(request.table, request.data_until, files=tuple(request.files or ())))
        return valid

    async def _take_files_shielded(self, valid: list[ValidUpdate]) -> list[str]:
        """``_take_files`` on a thread; when the request is cancelled meanwhile (client gone),
        the copies it still makes are removed once it is done, not left behind."""
        work = asyncio.ensure_future(asyncio.to_thread(self._take_files, valid))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(lambda w: w.cancelled() or w.exception() or _remove_files(w.result()))
            raise

    def _take_files(self, valid: list[ValidUpdate]) -> list[str]:
        """Validate landing files and copy them into service storage (worker thread); returns
        the copies. A refused file of a later update removes the earlier updates' copies."""
        taken: list[str] = []
        seen: set[tuple[int, int, str]] = set()  # a file named twice for a table is refused
        try:
            for item in valid:
                if item.files:
                    entry = self.entry(item.table)
                    item.files = accept_files(
                        list(item.files),
                        self.settings.landing_path,
                        self.owned_files_dir / item.table,
                        entry.schema,
                        item.table,
                        seen,
                        self.settings.max_landing_file_bytes,
                    )
                    taken.extend(f.path for f in item.files)
        except BaseException:
            _remove_files(taken)
            raise
        return taken

    async def submit(
        self,
        valid: list[ValidUpdate],
        *,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        owned_files: bool = False,
    ) -> list[Ack]:
        """``owned_files``: the updates' files are already the service's (a quarantine retry),
        not landing files to take."""
        if self.wal_fault is not None:
            self.metrics.intake_refused.labels("wal_fault").inc()
            raise Unavailable(
                f"intake is closed: {self.wal_fault}; it reopens by itself once the write-ahead log's disk is "
                "writable again (GET /readyz shows the fault); retry later",
                retry_after=WAL_HEAL_SECONDS,
            )
        if not self.accepting:
            raise Unavailable("the service is not accepting updates (starting up or shutting down); retry shortly")
        pending = self.dispatcher.pending
        admitted = sum(item.resident_bytes for item in valid)
        try:
            pending.admit(admitted)  # counted as coming until _appended has queued it
        except SpillFull as exc:
            self.metrics.intake_refused.labels("spill_full").inc()
            raise Unavailable(
                f"pending updates fill memory and the spill disk: {exc}; retry after the loader catches up",
                retry_after=self.settings.spill.retry_after_seconds,
            ) from None
        try:
            has_files = not owned_files and any(item.files for item in valid)
            taken = await self._take_files_shielded(valid) if has_files else []
            try:
                updates, planned = plan_updates(valid, self.tables, time.time(), self.settings.max_clock_skew_seconds)
            except BaseException:
                await asyncio.to_thread(_remove_files, taken)  # refused: nothing of it is kept
                raise
        except BaseException:
            pending.release(admitted)
            raise
        acks = [Ack(u.table, u.seq, u.release) for u in updates]
        response = _acks_body(acks)
        records = [
            WalRecord(
                update=u,
                idempotency_key=idempotency_key if k == 0 else None,
                request_hash=request_hash,
                response=response if k == 0 else None,
            )
            for k, u in enumerate(updates)
        ]
        append = asyncio.ensure_future(self.wal.append(records))
        append.add_done_callback(lambda done: self._appended(updates, planned, done, admitted))
        try:
            # Shielded: a request cancelled mid-append (client gone) still has its updates
            # written, and ``_appended`` still queues them for loading.
            await asyncio.shield(append)
        except Exception:  # (a cancellation is a BaseException and passes through)
            # A crash before the log is healed may still replay these records: their copies
            # stay until heal() has rolled the group back for certain.
            self._refused_copies.extend(taken)
            raise WalWriteFailed(
                "the write-ahead log could not be written; the update was not accepted (should the service crash "
                "before the log is repaired, it may still be loaded): retry it with the same Idempotency-Key once "
                "GET /readyz answers 200",
                retry_after=WAL_HEAL_SECONDS,
            ) from None
        failpoints.hit("intake.after-wal")
        return acks

    def _appended(self, updates: list[Update], tables: set[str], done: asyncio.Future[None], admitted: int = 0) -> None:
        """After the WAL append: queue the updates for loading, or leave gaps if it failed."""
        failed = done.cancelled() or done.exception() is not None
        try:
            for u in updates:
                self.tables[u.table].reorder[u.seq] = None if failed else u
                if not failed:
                    self.metrics.updates_received.labels(u.table).inc()
            for table in tables:
                self._drain(table)
        finally:
            self.dispatcher.pending.release(admitted)  # in the store now (or refused): never leaked
        if failed and not done.cancelled() and self.wal_fault is None:
            self.wal_fault = f"the write-ahead log cannot be written ({done.exception()})"
            self.metrics.intake_fault.set(1)
            log.error("WAL append failed (%s); intake closed until the log can be written again", done.exception())

    def faults(self) -> dict[str, str]:
        """Disk faults being ridden out, for /readyz."""
        found = {}
        if self.wal_fault is not None:
            found["wal"] = self.wal_fault
        spill_error = self.dispatcher.pending.spill_error if self.dispatcher is not None else None
        if spill_error is not None:
            found["spill"] = (
                f"spilling pending updates to disk failed ({spill_error}); intake refuses once memory is full"
            )
        return found

    async def heal_faults(self) -> None:
        """Called every second (loader/ops/maintenance.py): reopen intake once the WAL's disk takes
        writes again (the failed group is rolled back first: loader/durability/wal.py ``heal``), and
        spill what an earlier failed spill left in memory over the budget."""
        if self.wal_fault is not None and self.wal is not None:
            # Copies refused before the heal belong to groups it rolls back; a request still
            # in flight may yet add a group that fails after it, whose copies wait for the next.
            copies, self._refused_copies = self._refused_copies, []
            if not await asyncio.to_thread(self.wal.heal):
                self._refused_copies[:0] = copies
            else:
                await asyncio.to_thread(_remove_files, copies)
                if self.wal.failed is None:  # (not failed again meanwhile: then the next call heals)
                    self.wal_fault = None
                    self.metrics.intake_fault.set(0)
                    log.warning("intake reopened: the write-ahead log can be written again")
        if self.dispatcher is not None and self.dispatcher.pending.spill_error is not None:
            self.dispatcher.pending.retry_spill()
            self.dispatcher.sync_resident()

    async def submit_once(
        self,
        key: str | None,
        request_hash: str,
        valid_thunk: Callable[[], list[ValidUpdate]],
        *,
        owned_files: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Submit under an Idempotency-Key: a retry gets the first answer (and True), not a second load.

        A retry that arrives while the first attempt is still in flight waits for it
        (``IdempotencyStore.reserve``); validation runs only when the work is really done.
        The work runs to its end even when the request is cancelled (client gone): an
        append under way must still store its answer under the key, or the producer's
        retry with that key would submit the updates a second time.
        """
        return await _shielded(self._submit_once(key, request_hash, valid_thunk, owned_files))

    async def _submit_once(
        self,
        key: str | None,
        request_hash: str,
        valid_thunk: Callable[[], list[ValidUpdate]],
        owned_files: bool,
    ) -> tuple[dict[str, Any], bool]:
        if key is None:
            return _acks_body(await self.submit(valid_thunk(), owned_files=owned_files)), False
        async with self.idempotency.reserve(key, request_hash) as slot:
            if slot.response is not None:
                return slot.response, True
            response = _acks_body(
                await self.submit(
                    valid_thunk(), idempotency_key=key, request_hash=request_hash, owned_files=owned_files
                )
            )
            slot.complete(response)
            return response, False

    def _drain(self, table: str) -> None:
        """Hand durable updates to the dispatcher strictly in sequence order."""
        runtime = self.tables[table]
        while runtime.next_to_release in runtime.reorder:
            update = runtime.reorder.pop(runtime.next_to_release)
            runtime.next_to_release += 1
            if update is not None:
                self.dispatcher.released(update)

    # -- loading (worker threads) --------------------------------------------------------------
    def _load_batch(self, worker: int, batch: Batch) -> LoadResult:
        assert self.sink is not None and self.catalog is not None
        pool = getattr(self.sink, "use_pool", None)
        if pool is not None:
            pool(f"worker-{worker}")
        schema = self.catalog.entries[batch.table].schema
        result = self.sink.load(batch, schema)
        _remove_files([f.path for f in batch.files])
        return result

    def _finished(self, done: FinishedBatch) -> None:
        runtime = self.tables[done.table]
        runtime.committed_seq = max(runtime.committed_seq, done.batch.last_seq)
        entry = self.catalog.entries[done.table]
        entry.last_seq = runtime.committed_seq
        entry.last_release = done.batch.updates[-1].release
        if done.result.delta_version is not None:
            entry.delta_version = done.result.delta_version
            self.metrics.delta_version.labels(done.table).set(done.result.delta_version)
        state = self.dispatcher.state(done.table)
        entry.alpha, entry.overhead = state.alpha, state.overhead
        self._catalog_dirty = True
        if done.result.skipped:
            log.info(
                "%s updates %d..%d were already in Delta (committed before a restart); not loaded again",
                done.table,
                done.batch.first_seq,
                done.batch.last_seq,
            )
        m = self.metrics
        m.batches.labels(done.table, "skipped" if done.result.skipped else "loaded").inc()
        m.rows_loaded.labels(done.table).inc(done.result.rows)
        m.updates_loaded.labels(done.table).inc(len(done.batch.updates))
        m.batch_duration.labels(done.table).observe(done.finished - done.started)
        hist = m.stretch.labels(done.table)
        for value in done.stretches:
            hist.observe(value)

    def _failed(self, failed: FailedBatch) -> None:
        self.metrics.batches.labels(failed.table, "failed").inc()

    # -- quarantine (loader/durability/quarantine.py) -------------------------------------------------------
    def _quarantine_batch(self, batch: Batch, error: BaseException, attempts: int) -> None:
        """On the failed batch's worker thread: its payload durable aside, or an exception."""
        assert self.quarantine is not None
        self.quarantine.add(batch, error, attempts)

    def _quarantined(self, q: QuarantinedBatch) -> None:
        self.metrics.batches.labels(q.table, "failed").inc()
        self.metrics.batches.labels(q.table, "quarantined").inc()
        self._count_quarantined(q.table)

    def _count_quarantined(self, table: str) -> None:
        assert self.quarantine is not None
        self.metrics.quarantined.labels(table).set(sum(len(e.updates) for e in self.quarantine.active(table)))

    def _sweep_owned_files(self, live: set[str]) -> int:
        """Remove copies of landing files that no update refers to: left by a crash between
        the copy and the WAL append, or before a failed WAL group was healed, or by a
        quarantine retry cut short. Runs before intake opens, so no copy is being made."""
        assert self.quarantine is not None
        keep = {os.path.realpath(path) for path in live}
        for entry in self.quarantine.active():
            keep.update(os.path.realpath(f.path) for update in entry.updates for f in update.file_refs())
        removed = 0
        for table_dir in self.owned_files_dir.glob("*/"):
            for path in table_dir.iterdir():
                if path.is_file() and os.path.realpath(path) not in keep:
                    path.unlink(missing_ok=True)
                    removed += 1
        if removed:
            log.warning("removed %d copies of landing files that no update refers to (left by a crash)", removed)
        return removed

    async def _settle_quarantine(self) -> None:
        """After WAL replay: an entry whose retry reached the WAL before a crash is resolved."""
        assert self.quarantine is not None
        for entry in self.quarantine.active():
            if self.idempotency.get(entry.requeue_key) is not None:
                await asyncio.to_thread(self.quarantine.resolve, entry, "retried")
                log.info(
                    "quarantined %s updates %d..%d were retried before a restart",
                    entry.table,
                    entry.first_seq,
                    entry.last_seq,
                )
        for table in self.catalog.entries:
            self._count_quarantined(table)

    def quarantine_entry(self, table: str, first_seq: int) -> QuarantineEntry:
        assert self.quarantine is not None
        entry = self.quarantine.get(table, first_seq)
        if entry is None or entry.resolved is not None:
            raise NotFound(
                f"no quarantined batch of table {table!r} starts at update {first_seq}; "
                "GET /v1/admin/quarantine lists them"
            )
        return entry

    async def retry_quarantined(self, table: str, first_seq: int) -> dict[str, Any]:
        """Submit the entry's updates again (new sequence numbers, one Idempotency-Key); runs
        to its end even when the request is cancelled (the links it makes, the submission
        and the tombstone belong together)."""
        return await _shielded(self._retry_quarantined(table, first_seq))

    async def _retry_quarantined(self, table: str, first_seq: int) -> dict[str, Any]:
        assert self.quarantine is not None
        async with self._quarantine_lock:
            entry = self.quarantine_entry(table, first_seq)
            schema = self.entry(table).schema.arrow()
            try:
                valid, links = await asyncio.to_thread(self._requeue_payload, entry, schema)
            except (OSError, pa.ArrowException) as exc:
                raise Conflict(
                    f"the quarantined batch of {table!r} from update {first_seq} cannot be read back ({exc}); "
                    "restore its files under the quarantine directory or discard it",
                    table=table,
                ) from None
            try:
                response, replayed = await self.submit_once(
                    entry.requeue_key, entry.requeue_key, lambda: valid, owned_files=True
                )
            except WalWriteFailed:
                # A crash before heal() may still replay the records: their links stay until
                # the failed group is rolled back for certain (then heal_faults removes them).
                self._refused_copies.extend(links)
                raise
            except Exception:  # (cancelled only at shutdown: the restart's sweep takes the links)
                await asyncio.to_thread(_remove_files, links)
                raise
            if replayed:
                await asyncio.to_thread(_remove_files, links)
            try:
                await asyncio.to_thread(self.quarantine.resolve, entry, "retried")
            except OSError as exc:  # the updates are in the WAL: a second retry is answered from the key
                log.error(
                    "quarantined %s updates %d..%d were submitted again but stay listed: %s",
                    table,
                    first_seq,
                    entry.last_seq,
                    exc,
                )
            self.metrics.quarantine_resolved.labels(table, "retried").inc(len(entry.updates))
            self._count_quarantined(table)
            log.warning(
                "quarantined %s updates %d..%d submitted again by an operator", table, entry.first_seq, entry.last_seq
            )
            return response

    def _requeue_payload(self, entry: QuarantineEntry, schema: Any) -> tuple[list[ValidUpdate], list[str]]:
        """The entry's updates as new ones; landing files get new hard links (the originals
        go with the tombstone, and a restart may still delete them as the old updates')."""
        assert self.quarantine is not None
        valid: list[ValidUpdate] = []
        links: list[str] = []
        try:
            for update in entry.updates:
                rows = self.quarantine.read_rows(entry, update)
                files = []
                for ref in update.file_refs():
                    old = Path(ref.path)
                    new = old.with_name(f"requeued-{os.urandom(6).hex()}-{old.name}")
                    os.link(old, new)
                    links.append(str(new))
                    files.append(type(ref)(str(new), ref.format, ref.size))
                valid.append(
                    ValidUpdate(
                        entry.table, None, rows=rows.cast(schema) if rows is not None else None, files=tuple(files)
                    )
                )
        except BaseException:
            _remove_files(links)
            raise
        return valid, links

    async def discard_quarantined(self, table: str, first_seq: int) -> dict[str, Any]:
        """Drop the entry's updates for good: the one way acknowledged data leaves unloaded."""
        assert self.quarantine is not None
        async with self._quarantine_lock:
            entry = self.quarantine_entry(table, first_seq)
            await asyncio.to_thread(self.quarantine.resolve, entry, "discarded")
            self.metrics.quarantine_resolved.labels(table, "discarded").inc(len(entry.updates))
            self._count_quarantined(table)
            log.warning(
                "quarantined %s updates %d..%d discarded by an operator (%s)",
                table,
                entry.first_seq,
                entry.last_seq,
                entry.error,
            )
            return {**entry.summary(), "resolved": "discarded"}

    # -- periodic work (called by the maintenance scheduler) ------------------------------------
    async def save_catalog(self) -> None:
        """Persist the catalog if something changed; one write at a time, snapshot taken here.

        The bytes are built on the event loop (which owns the entries), written on a
        thread; a failed write leaves the catalog dirty, so the next call tries again.
        """
        if self.catalog is None:
            return
        async with self._catalog_lock:
            if not self._catalog_dirty:
                return
            self._catalog_dirty = False
            if self.dispatcher is not None:
                for name, entry in self.catalog.entries.items():
                    if name in self.tables:
                        entry.freshness = asdict(self.dispatcher.loaded_account(name))
            data = self.catalog.encode()
            try:
                await asyncio.to_thread(self.catalog.save, data)
            except BaseException:
                self._catalog_dirty = True
                raise

    async def truncate_wal(self) -> int:
        """Delete WAL segments whose updates are all in Delta (keys first saved elsewhere)."""
        if self.wal is None:
            return 0
        self.idempotency.expire()
        path = self.settings.state_path / "idempotency.json"
        committed = {name: runtime.committed_seq for name, runtime in self.tables.items()}
        # The catalog first: once segments are gone it is what remembers the newest releases.
        await self.save_catalog()
        await asyncio.to_thread(self.idempotency.save, path)
        if self.quarantine is not None:
            await asyncio.to_thread(self.quarantine.prune, committed)
        return await asyncio.to_thread(self.wal.truncate, committed)

    # -- reading -------------------------------------------------------------------------------
    def table_status(self, table: str) -> dict[str, Any]:
        return table_status(self, table)


def _acks_body(acks: list[Ack]) -> dict[str, Any]:
    """The 202 body; also stored with the Idempotency-Key and sent again to a retry."""
    return {"updates": [a.as_json() for a in acks]}


async def _shielded(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` as its own task, which the caller's cancellation does not cancel (the
    caller still sees its CancelledError; the work's outcome is then only logged)."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_note_abandoned)
    return await asyncio.shield(task)


def _note_abandoned(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:  # (also marks it retrieved)
        log.debug("work whose caller had gone ended in %r", task.exception())


def _remove_files(paths: list[str]) -> None:
    """Best effort: a file left behind wastes space; failing a committed load would not."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s", path, exc)
