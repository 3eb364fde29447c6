"""The live driver of a scheduling policy: the simulator's event loop on the wall clock.

Runs on the asyncio loop thread; all table state is touched only there. Spark jobs run
on a pool of P threads (one per worker) and report back with ``call_soon_threadsafe``.
The driver contract of ``schedulers.base.Policy`` is honoured exactly as in
``schedulers.simulator``: notify on every release, start and finish, then offer free
workers to ``choose`` in increasing index, starting each chosen batch before asking
the next worker. Around each batch it asks one ``loader.abc.BatchHandler`` (the service)
to load it, to set it aside, and to hear how it ended.

A poison update holds back only itself. A batch that fails as its own fault
(``loader.loading.failures.batch_at_fault``) is retried whole with back-off, as any
failed load, so a passing fault costs no split; once it has failed ``max_attempts`` times
it is *bisected* rather than quarantined: its first half is loaded as a batch of its own
(the table's next takes are capped at the halves' last sequence numbers, ``_suspect``),
then its second half. A half that loads is done; a half of more than one update that fails
once is split again at once (the range is known to hold a lasting fault); a single update
gets ``max_attempts`` attempts of its own, and only a single update that fails them all
is quarantined. Exactly once holds throughout, because every batch is still a prefix of
its table's queue: a sub-batch commits with its own last sequence number as the Delta
transaction version, so each commit holds exactly the updates between the previous
commit and it but those set aside, which are durable in quarantine (and skipped by
recovery) before any later update commits. The bisection itself is not kept: after a
restart the pending updates are one batch again, and it is bisected again if it fails.

A failure that names the updates to blame (``updates_at_fault``: rows breaking a rule the
table declares, all of the batch's found by one search after its load failed) needs
neither retries nor halving: the fault lasts and the failure said why (``_condemned``).
An append table's batch is retried at once, capped at its last sequence number (new
updates of a busy feed would bring new poison), with the named updates set aside first, each
alone and durable in quarantine, and the others loaded as one batch (``_load_excluding``):
the commit still holds exactly the updates between the previous commit and its own last
sequence number but those set aside, as above. So a batch with k poison updates costs its
failed load and one more, whatever k. A latest table's batch (whose set-aside updates hold
their keys, and whose MERGE must not run ahead of that) is cut around them instead: each
named update is set aside without a load of its own when its turn comes, and the runs of
updates between them load, k + 1 loads. A stream with a poison update every few seconds
would otherwise keep its table bisecting, and fall behind for good.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from bisect import insort
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from loader.abc import BatchHandler, FailedBatch, FinishedBatch, HeldValue, QuarantinedBatch
from loader.core.timeline import TABLE_MARKS, JobTimeline, TableTimes, job_marks
from loader.core.updates import Batch, LoadResult, Update
from loader.loading.estimates import CostEstimate, JobOverheadEstimate
from loader.loading.failures import UpdateAtFault, batch_at_fault, updates_at_fault
from loader.loading.observed import ObservedRecord
from loader.pending.store import PendingStore
from schedulers.base import Policy
from schedulers.freshness import FreshnessLedger, TableAccount, batch_stretches, low_triangle
from schedulers.job_groups import marginal_cost
from schedulers.keys.cost import learned
from schedulers.model import KeyedSpec, TableSpec, TableState

log = logging.getLogger(__name__)


@dataclass
class _Member:
    """One table's batch in a running job."""

    tid: int
    lo: int
    hi: int
    batch: Batch
    #: Predicted marginal cost when the job started (attributes a group's duration).
    marginal: float = 0.0
    #: A latest table's values in the batch (its cost is per key); None for an append table.
    keys: int | None = None
    #: Taken under a bisection's cap: a part of a batch that kept failing.
    capped: bool = False
    #: Values held back from the batch that must be durable before it commits
    #: (``BatchHandler.keep_held``): a latest table's keys held by a quarantined update.
    held: list[HeldValue] = field(default_factory=list)


@dataclass
class _Job:
    """What a worker is running: one table's batch, or several tables' in one Spark job."""

    started: float
    members: list[_Member] = field(default_factory=list)
    #: Its timeline's own marks (wall clock, loader/core/timeline.py): chosen, and when its
    #: worker thread began; CPU seconds of the event loop and of the worker thread for it.
    chosen: float = 0.0
    thread_start: float | None = None
    loop_cpu: float = 0.0
    thread_cpu: float = 0.0
    #: Seconds its worker had been free when it was chosen (None: the worker's first job).
    idle_before: float | None = None


class Dispatcher:
    """Decides, on the wall clock, which table each free worker loads next, and runs it.

    It owns the policy's view (one ``schedulers.model.TableState`` per table), the
    freshness ledger the metrics and the API read, the per-table cost estimates, and a pool
    of P worker threads. A batch is all of a table's pending updates (up to the policy's
    limit), taken from the pending store when a worker starts it; a failed batch goes back
    whole and its table waits with exponential back-off; one that fails ``max_attempts``
    times (0: never) as its own fault is bisected (the module docstring), and an update
    that fails ``max_attempts`` times alone is handed to ``handler.set_aside``
    (quarantine), so the table's other updates load.
    """

    def __init__(
        self,
        policy: Policy,
        workers: int,
        pending: PendingStore,
        handler: BatchHandler,
        *,
        clock: Callable[[], float] = time.time,
        max_retry_delay: float = 60.0,
        retry_base: float = 0.5,
        max_attempts: int = 0,
        observed: ObservedRecord | None = None,
        job_overhead: float = 0.0,
    ) -> None:
        self.states: list[TableState] = []
        self.index: dict[str, int] = {}
        self.estimates: list[CostEstimate] = []
        self.ledger = FreshnessLedger()
        self.pending = pending
        self.workers = workers
        self.policy = policy
        self._handler = handler
        self._clock = clock
        self._max_retry_delay = max_retry_delay
        self._retry_base = retry_base
        self._max_attempts = max_attempts
        self._free = list(range(workers))
        self._running: dict[int, _Job] = {}
        #: When each worker was last freed (wall clock): its idle time before the next job.
        self._freed_at: dict[int, float] = {}
        #: The fixed cost of a Spark job, shared by a multi-table job's tables (measured online).
        self.job_overhead = JobOverheadEstimate(overhead=job_overhead)
        self._user_paused: set[int] = set()
        #: Ids of retired tables and views: tombstones, never chosen again (held for good,
        #: nothing pending) and left out of every listing. Ids are positions in ``states``,
        #: which policies index: a retired one is not reused until a restart renumbers.
        self.retired: set[int] = set()
        self._held: dict[int, int] = {}  # tid -> holders (maintenance, retry back-off)
        self._failures: dict[int, int] = {}  # consecutive failed loads per table
        self._tries: dict[int, int] = {}  # failed loads of the table's current (part of a) batch: its back-off
        self._strikes: dict[int, int] = {}  # of those, the ones that count toward a split or quarantine
        #: A bisection under way: the last sequence numbers of the suspect ranges, ascending;
        #: the table's next take stops at the first.
        self._suspect: dict[int, list[int]] = {}
        #: Updates a failed load named as at fault, with why: set aside, never loaded.
        self._condemned: dict[int, dict[int, str]] = {}
        #: Of those, the ones already durable in quarantine (a failed load puts them back in
        #: the queue with the rest; they are not set aside twice).
        self._aside: dict[int, set[int]] = {}
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loader-worker")
        #: The event loop that owns the tables; the dispatcher is made on it.
        self._loop = asyncio.get_running_loop()
        self._wakeup: asyncio.TimerHandle | None = None
        self._enabled = False
        self._idle = asyncio.Event()
        #: Releases and finished batches as production saw them (``GET /v1/admin/trace``).
        self.observed = observed if observed is not None else ObservedRecord(0, 0)
        self._observe_release = self.observed.release
        policy.attach(self.states, workers)
        policy.observe_job_overhead(self.job_overhead.overhead)

    # -- tables ---------------------------------------------------------------
    def add_table(
        self, spec: TableSpec, origin: float, paused: bool = False, account: TableAccount | None = None
    ) -> int:
        """``origin``: what the table is current up to (r_i0); ``account``: freshness
        accounts to continue (their ``current_upto`` must equal ``origin``)."""
        tid = len(self.states)
        state = TableState(tid, spec, origin=origin)
        self.states.append(state)
        self.index[spec.name] = tid
        # A latest table's model is per key loaded, an append table's per second of data.
        slope = spec.keyed.per_key if spec.keyed is not None else spec.alpha
        self.estimates.append(CostEstimate(alpha=slope, overhead=spec.overhead))
        self.ledger.add_table(spec.name, spec.weight, origin=origin, account=account)
        self.observed.add_table(tid, origin, self._clock())
        self.pending.add_table(spec.name)
        if paused:
            self._user_paused.add(tid)
            state.paused = True
        self.policy.table_added(tid)
        self.policy.notify(tid, self._clock())
        return tid

    def retire(self, table: str) -> None:
        """``table`` leaves: its name is free for a new table (a new id); its id stays a
        tombstone. The caller made sure nothing of it is running; what is still pending (a
        view's input commits: derived, nothing acknowledged) is dropped, so that a new
        table or view of the name starts with an empty queue."""
        if self.pending.count(table):
            self.pending.take(table)
            self.pending.loaded(table)
        tid = self.index.pop(table)
        self.retired.add(tid)
        self._user_paused.discard(tid)
        self._held[tid] = self._held.get(tid, 0) + 1
        self._refresh_pause(tid)

    def live(self) -> list[int]:
        """Ids of the tables and views not retired, in registration order."""
        if not self.retired:
            return list(range(len(self.states)))
        return [tid for tid in range(len(self.states)) if tid not in self.retired]

    def state(self, table: str) -> TableState:
        return self.states[self.index[table]]

    def set_weight(self, table: str, weight: float) -> None:
        tid = self.index[table]
        self.states[tid].weight = weight
        self.ledger.set_weight(tid, weight)
        self._changed(tid)

    def set_paused(self, table: str, paused: bool) -> None:
        tid = self.index[table]
        (self._user_paused.add if paused else self._user_paused.discard)(tid)
        self._refresh_pause(tid)

    def hold(self, table: str) -> None:
        """Keep a table from starting new batches (e.g. during compaction)."""
        tid = self.index[table]
        self._held[tid] = self._held.get(tid, 0) + 1
        self._refresh_pause(tid)

    def release_hold(self, table: str) -> None:
        tid = self.index.get(table)
        if tid is None or tid not in self._held:
            return  # retired meanwhile (a back-off's timer, maintenance): its tombstone stays held
        self._held[tid] -= 1
        if not self._held[tid]:
            del self._held[tid]
        self._refresh_pause(tid)

    def is_running(self, table: str) -> bool:
        return self.states[self.index[table]].running

    def unloaded(self, table: str) -> int:
        """The table's updates not loaded yet: pending, and in a batch being loaded."""
        tid = self.index[table]
        running = sum(len(m.batch.updates) for job in self._running.values() for m in job.members if m.tid == tid)
        return self.states[tid].pending_count + running

    def _refresh_pause(self, tid: int) -> None:
        self.states[tid].paused = tid in self._user_paused or tid in self._held
        self._changed(tid)

    def switch_policy(self, policy: Policy) -> None:
        """Hand the same table states to a new policy; running batches are unaffected."""
        self.policy = policy
        policy.attach(self.states, self.workers)
        policy.observe_job_overhead(self.job_overhead.overhead)
        now = self._clock()
        for tid in range(len(self.states)):
            policy.notify(tid, now)
        self.dispatch()

    # -- events -----------------------------------------------------------------
    def released(self, update: Update) -> None:
        """An update became durable: it is pending from now on."""
        self.released_many([update])

    def released_many(self, updates: Sequence[Update]) -> None:
        """Updates that became durable together (one request's, and any earlier ones of their
        tables they released, in sequence order per table): each table the policy is told of
        once and one dispatch follows, rather than one per update (a 25 µs each)."""
        touched: dict[int, None] = {}
        for update in updates:
            tid = self.index[update.table]
            state = self.states[tid]
            previous = state.releases[-1] if state.releases else state.origin
            self.pending.append(update)
            state.release(update.release)
            self.ledger.note_release(tid, update.release - previous)
            self._observe_release(tid, update.release)
            touched[tid] = None
        if not touched:
            return
        self.sync_resident()  # (tells the policy of every table whose resident bytes changed)
        now = self._clock()
        for tid in touched:
            self._sync_keys(tid)
            self.policy.notify(tid, now)
        self.dispatch()

    def _sync_keys(self, tid: int) -> None:
        """Copy a latest table's next batch by keys into its state (policies read it there)."""
        state = self.states[tid]
        if not state.keyed:
            return
        batch = self.pending.key_batch(state.name)
        if batch is not None:
            state.set_keys(batch.waiting_keys, batch.keys, batch.updates)

    def set_keyed(self, table: str, keyed: KeyedSpec | None) -> None:
        """The table became a latest table or an append one (it was empty), or its key
        policy or batch bound changed: its cost model follows (per key or per second of data)."""
        tid = self.index[table]
        state = self.states[tid]
        if (keyed is not None) != state.keyed:
            state.keyed = keyed is not None
            if keyed is not None:
                state.per_key = keyed.per_key
            slope = state.per_key if keyed is not None else state.alpha
            self.estimates[tid] = CostEstimate(alpha=slope, overhead=state.overhead)
        state.max_keys = keyed.max_keys_per_batch if keyed is not None else None
        if keyed is None:
            state.set_keys(0, 0, None)
        self._sync_keys(tid)
        self._changed(tid)

    def sync_resident(self) -> None:
        """Copy resident bytes of tables the store touched (a spill moves other tables' too)."""
        changed = self.pending.changed
        if not changed:
            return
        now = self._clock()
        for name in changed:
            tid = self.index.get(name)
            if tid is not None:
                self.states[tid].resident_bytes = self.pending.resident_bytes(name)
                self.policy.notify(tid, now)
        changed.clear()

    def _changed(self, tid: int) -> None:
        self.policy.notify(tid, self._clock())
        self.dispatch()

    def start(self) -> None:
        """Begin loading (after recovery and once Spark is up)."""
        self._enabled = True
        self.dispatch()

    def dispatch(self) -> None:
        if not self._enabled:
            return
        now = self._clock()
        policy = self.policy
        idle: list[int] = []
        while self._free:
            worker = heapq.heappop(self._free)
            cpu, chosen = time.thread_time(), time.time()
            group = policy.choose_group(worker, now, len(self._free))
            if not group:
                idle.append(worker)
                if policy.worker_agnostic:
                    break
                continue
            if not self._start(worker, group, now):
                heapq.heappush(self._free, worker)  # offer it again: those tables are on hold now
            elif (job := self._running.get(worker)) is not None:
                job.chosen, job.loop_cpu = chosen, time.thread_time() - cpu
                freed = self._freed_at.get(worker)
                job.idle_before = None if freed is None else max(0.0, chosen - freed)
        for worker in idle:
            heapq.heappush(self._free, worker)
        self._arm_wakeup(now)

    def _arm_wakeup(self, now: float) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        if not self.policy.timed:
            return
        at = self.policy.next_wakeup(now)
        if at is not None:
            self._wakeup = self._loop.call_later(max(0.0, at - now), self.dispatch)

    def _alone(self, tid: int) -> bool:
        """Whether the table's next batch runs in a job of its own: its last load failed, or
        it is being bisected (a failure counts toward a split or quarantine only there)."""
        return tid in self._failures or tid in self._suspect or tid in self._condemned

    def _start(self, worker: int, group: list[int], now: float) -> bool:
        """Start one job on ``worker``: the first table the policy chose, and the others it
        grouped with it, except tables whose last load failed or that are being bisected
        (they run alone until they load, so one bad batch cannot fail its neighbours' loads
        twice, and its failures count where they are surely its own). Such a table chosen
        first runs alone too."""
        job = _Job(started=now)
        overhead = self.job_overhead.overhead
        if len(group) > 1 and self._alone(group[0]):
            for tid in group[1:]:
                self.policy.notify(tid, now)  # back into the policy's index
            group = group[:1]
        for position, tid in enumerate(group):
            state = self.states[tid]
            if not state.available:
                raise RuntimeError(f"policy {self.policy.name} chose table {state.name!r}, which is not available")
            if position > 0 and self._alone(tid):
                self.policy.notify(tid, now)  # back into the policy's index, for a job of its own
                continue
            marginal = marginal_cost(state, overhead)
            suspect = self._suspect.get(tid)
            through = suspect[0] if suspect else None
            updates = self._take(tid, now, through)
            if updates is None:
                continue
            lo = state.dispatched
            hi = lo + len(updates)
            if hi > len(state.releases) or updates[-1].release != state.releases[hi - 1]:
                raise RuntimeError(f"pending store and scheduler state of {state.name!r} disagree")
            state.dispatched = hi
            state.running = True
            keys = self.pending.in_flight_keys(state.name)
            held = self.pending.held_to_save(state.name, updates)
            member = _Member(tid, lo, hi, Batch(state.name, updates), marginal, keys, through is not None, held)
            job.members.append(member)
            self._sync_keys(tid)
            self.policy.notify(tid, now)
        if not job.members:
            return False
        self._running[worker] = job
        self._idle.clear()
        if len(job.members) == 1 and self._condemn(worker, job):
            return True
        if len(job.members) == 1 and self._excludes(job.members[0]):
            member = job.members[0]
            named = dict(self._condemned[member.tid])
            aside = set(self._aside.get(member.tid, ()))
            future = self._loop.run_in_executor(
                self._executor, self._load_excluding, worker, member.batch, member.held, named, aside
            )
            future.add_done_callback(lambda f, w=worker: self._excluding_finished(w, f))
        elif len(job.members) == 1:
            member = job.members[0]
            future = self._loop.run_in_executor(self._executor, self._load_one, worker, job, member.batch, member.held)
            future.add_done_callback(lambda f, w=worker: self._finished(w, f))
        else:
            group_future = self._loop.run_in_executor(self._executor, self._load_group, worker, job)
            group_future.add_done_callback(lambda f, w=worker: self._group_finished(w, f))
        return True

    def _load_one(self, worker: int, job: _Job, batch: Batch, held: list[HeldValue]) -> LoadResult:
        """On the worker thread: the values held back from the batch are durable before it commits."""
        job.thread_start, cpu = time.time(), time.thread_time()
        try:
            if held:
                self._handler.keep_held(batch.table, held)
            return self._handler.load(worker, batch)
        finally:
            job.thread_cpu = time.thread_time() - cpu

    def _excludes(self, member: _Member) -> bool:
        """Whether the batch holds updates a failed load named, to be set aside before the
        rest loads (an append table's; a latest table's are cut around: module docstring)."""
        named = self._condemned.get(member.tid)
        if not named or self.states[member.tid].keyed:
            return False
        return any(u.seq in named for u in member.batch.updates)

    def _load_excluding(
        self, worker: int, batch: Batch, held: list[HeldValue], named: dict[int, str], aside: set[int]
    ) -> tuple[LoadResult | BaseException | None, list[Update]]:
        """On the worker thread: set aside each named update not yet in quarantine (durable
        before anything after it commits), then load the others as one batch with their own
        last sequence number. Returns the load's outcome (None: nothing left to load) and
        the updates set aside now; never raises, so the ones set aside are always told."""
        newly: list[Update] = []
        try:
            if held:
                self._handler.keep_held(batch.table, held)
            for update in batch.updates:
                if update.seq in named and update.seq not in aside:
                    self._handler.set_aside(Batch(batch.table, (update,)), UpdateAtFault(named[update.seq]), 1)
                    newly.append(update)
            rest = tuple(u for u in batch.updates if u.seq not in named)
            if not rest:
                return None, newly
            return self._handler.load(worker, Batch(batch.table, rest)), newly
        except Exception as exc:
            return exc, newly

    def _excluding_finished(
        self, worker: int, future: asyncio.Future[tuple[LoadResult | BaseException | None, list[Update]]]
    ) -> None:
        """A batch loaded without its named updates ended: those set aside are told, then the
        load ends as any single-table job (all of it set aside: as a quarantine)."""
        if future.cancelled():  # queued when shutdown() cancelled it (cancel_futures): it never ran
            return
        job = self._running[worker]
        member = job.members[0]
        tid, table = member.tid, member.batch.table
        named = self._condemned.get(tid, {})
        outcome, newly = future.result()
        for update in newly:
            self._aside.setdefault(tid, set()).add(update.seq)
            why = UpdateAtFault(named.get(update.seq, "named by a failed load"))
            log.error(
                "loading %s (updates %d..%d) was named by a failed load as at fault: %s; quarantined it so the "
                "table's other updates load",
                table,
                update.seq,
                update.seq,
                why,
            )
            self._safe(self._handler.quarantined, QuarantinedBatch(table, Batch(table, (update,)), why, 1))
        if outcome is None:  # every update of the batch was named: all of it is in quarantine
            now = self._clock()
            del self._running[worker]
            self.states[tid].running = False
            heapq.heappush(self._free, worker)
            self._consume(tid, member.lo, member.hi, now)
            self._forget_loaded(tid, last_seq=member.batch.last_seq)
            self._settled([tid], now)
            return
        done: asyncio.Future[LoadResult] = self._loop.create_future()
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)
        self._finished(worker, done, loaded=Batch(table, tuple(u for u in member.batch.updates if u.seq not in named)))

    def _load_group(self, worker: int, job: _Job) -> list[LoadResult | BaseException]:
        job.thread_start, cpu = time.time(), time.thread_time()
        try:
            for member in job.members:
                if member.held:
                    self._handler.keep_held(member.batch.table, member.held)
            return self._handler.load_group(worker, [m.batch for m in job.members])
        finally:
            job.thread_cpu = time.thread_time() - cpu

    def _take(self, tid: int, now: float, through: int | None = None) -> list[Update] | None:
        state = self.states[tid]
        try:
            updates = self.pending.take(state.name, self.policy.batch_limit, now, through)
        except Exception as exc:  # e.g. a spilled head could not be read back: try again later
            log.error("cannot take a batch of %s: %s; retrying in 1s", state.name, exc)
            self._held[tid] = self._held.get(tid, 0) + 1
            state.paused = True
            self.policy.notify(tid, now)
            self._loop.call_later(1.0, self.release_hold, state.name)
            return None
        self.sync_resident()
        return updates

    def _finished(self, worker: int, future: asyncio.Future[LoadResult], loaded: Batch | None = None) -> None:
        """A single-table job ended: the paper's batch; after repeated failures of its own,
        bisected, and an update that fails alone quarantined (the module docstring).
        ``loaded``: what of the batch was loaded, when its named updates were set aside."""
        if future.cancelled():  # queued when shutdown() cancelled it (cancel_futures): it never ran
            return
        cpu = time.thread_time()
        now = self._clock()
        job = self._running.pop(worker)
        member = job.members[0]
        error = future.exception()
        split = soon = False
        cut: list[int] | None = None
        if error is not None:
            tid = member.tid
            self._failures[tid] = self._failures.get(tid, 0) + 1
            self._tries[tid] = self._tries.get(tid, 0) + 1
            if batch_at_fault(error) and self._max_attempts > 0:  # (a full disk or a Spark server that is gone is not)
                strikes = self._strikes[tid] = self._strikes.get(tid, 0) + 1
                alone = len(member.batch.updates) == 1
                held = {u.seq for u in member.batch.updates}
                named = {seq: why for seq, why in updates_at_fault(error).items() if seq in held}
                if named:
                    # The failure names its updates (rows breaking the table's rule): the fault
                    # lasts and where it is is known, so no retry and no halving: the runs of
                    # updates between them load, each of them is set aside unloaded.
                    if alone:
                        self._set_aside(worker, job, error, strikes)
                        return
                    self._condemned.setdefault(tid, {}).update(named)
                    self._strikes.pop(tid, None)
                    if self.states[tid].keyed:
                        split, cut = True, sorted(named)
                    else:
                        # At once, without them (``_load_excluding``), and no further than this
                        # batch: a longer one would hold new poison updates of a busy feed, and
                        # fail again, for as long as the feed runs.
                        soon = True
                        suspect = self._suspect.setdefault(tid, [])
                        if member.batch.last_seq not in suspect:
                            insort(suspect, member.batch.last_seq)
                        log.warning(
                            "%s updates %d..%d failed for update(s) %s (%s): setting them aside and loading the "
                            "others at once",
                            member.batch.table,
                            member.batch.first_seq,
                            member.batch.last_seq,
                            ", ".join(map(str, sorted(named))),
                            error,
                        )
                # A whole batch gets max_attempts (a passing fault then costs no split); a part
                # of one that kept failing is split at its first failure: the fault lasts.
                elif strikes >= (self._max_attempts if alone or not member.capped else 1):
                    if alone:
                        self._set_aside(worker, job, error, strikes)
                        return
                    split = True
        heapq.heappush(self._free, worker)
        if error is None:
            self._observe_job(job, now)
            self._member_loaded(worker, job, member, future.result(), now, now - job.started, loaded)
            self._safe(lambda jobs: self._timed(worker, job, jobs, cpu), [future.result()])
        else:
            self._member_failed(worker, member, error, split, cut, soon)
        self._freed_at[worker] = time.time()
        self._settled([member.tid], now)

    def _group_finished(self, worker: int, future: asyncio.Future[list[LoadResult | BaseException]]) -> None:
        """A multi-table job ended: each table's outcome is its own (its own Delta commit).

        A table that failed is retried alone after its back-off; attempts toward quarantine
        count only in single-table jobs, where the failure is surely the table's own.
        """
        if future.cancelled():  # queued when shutdown() cancelled it (cancel_futures): it never ran
            return
        cpu = time.thread_time()
        now = self._clock()
        job = self._running.pop(worker)
        heapq.heappush(self._free, worker)
        error = future.exception()
        outcomes: list[LoadResult | BaseException]
        if error is not None:
            outcomes = [error] * len(job.members)
        else:
            outcomes = list(future.result())
            if len(outcomes) != len(job.members):
                mismatch = RuntimeError(f"a group load answered {len(outcomes)} outcomes for {len(job.members)} tables")
                outcomes = [mismatch] * len(job.members)
        loaded = [(m, r) for m, r in zip(job.members, outcomes) if isinstance(r, LoadResult)]
        if loaded and len(loaded) == len(job.members):
            self._observe_job(job, now)
        measured = [r.own_seconds if isinstance(r, LoadResult) else None for r in outcomes]
        if all(w is not None for w in measured):
            work = [float(w) for w in measured if w is not None]
        else:  # a sink that cannot tell, or a failed member: split by the prediction
            work = [m.marginal for m in job.members]
        shares = self.job_overhead.attribute(now - job.started, work)
        for member, outcome, share in zip(job.members, outcomes, shares):
            if isinstance(outcome, LoadResult):
                self._member_loaded(worker, job, member, outcome, now, share)
            else:
                self._failures[member.tid] = self._failures.get(member.tid, 0) + 1
                self._tries[member.tid] = self._tries.get(member.tid, 0) + 1
                self._member_failed(worker, member, outcome)
        if loaded:  # (a timeline that cannot be built must not keep the worker from its next job)
            self._safe(lambda jobs: self._timed(worker, job, jobs, cpu), outcomes)
        self._freed_at[worker] = time.time()
        self._settled([m.tid for m in job.members], now)

    def _timed(self, worker: int, job: _Job, outcomes: Sequence[LoadResult | BaseException], cpu: float) -> None:
        """Record the job's timeline (loader/core/timeline.py): the sinks' and the worker
        process's marks, the dispatcher's own, and the service's CPU for it (``cpu``: the
        event loop's thread time when its report began)."""
        results = [o for o in outcomes if isinstance(o, LoadResult)]
        marks = job_marks(r.marks for r in results)
        marks["chosen"] = job.chosen or job.started
        if job.thread_start is not None:
            marks["thread_start"] = job.thread_start
        marks["reported"] = time.time()
        tables = tuple(
            TableTimes(m.batch.table, *(o.marks.get(k) for k in TABLE_MARKS), loaded=True)
            if isinstance(o, LoadResult)
            else TableTimes(m.batch.table, loaded=False)
            for m, o in zip(job.members, outcomes)
        )
        spent = job.loop_cpu + job.thread_cpu + (time.thread_time() - cpu)
        timeline = JobTimeline(worker, marks, tables, spent, job.idle_before)
        self.observed.job(timeline)
        self._safe(self._handler.job_timed, timeline)

    def _observe_job(self, job: _Job, now: float) -> None:
        """Feed the shared-overhead fit with a job every table of which loaded."""
        variable = 0.0
        for member in job.members:
            state = self.states[member.tid]
            if member.keys is not None:
                variable += state.per_key * member.keys + state.rewrite.seconds(member.keys)
                continue
            rel = state.releases
            previous = rel[member.lo - 1] if member.lo else state.origin
            variable += state.alpha * (rel[member.hi - 1] - previous)
        estimate = self.job_overhead
        before = estimate.overhead
        estimate.observe(len(job.members), now - job.started, variable)
        if estimate.overhead != before:
            self.policy.observe_job_overhead(estimate.overhead)

    def _member_loaded(
        self,
        worker: int,
        job: _Job,
        member: _Member,
        result: LoadResult,
        now: float,
        duration: float,
        loaded: Batch | None = None,
    ) -> None:
        tid, lo, hi = member.tid, member.lo, member.hi
        state = self.states[tid]
        state.running = False
        previous = self._consume(tid, lo, hi, now)
        rel = state.releases
        length = rel[hi - 1] - previous
        estimate = self.estimates[tid]
        if member.keys is not None:  # a latest table: seconds per key loaded, and per row its upsert rewrote
            copied = result.details.get("rows_copied", 0.0)
            if "stored_rows" in result.details:
                state.rewrite = learned(
                    state.rewrite,
                    int(result.details["stored_rows"]),
                    result.details.get("file_rows", 0.0),
                    copied,
                    result.details.get("rewrite_seconds"),
                    (result.details.get("rows_updated", 0.0), result.details.get("rows_inserted", 0.0)),
                )
            estimate.observe(member.keys, max(0.0, duration - state.rewrite.per_row * copied), result.rows)
            state.per_key, state.overhead = estimate.alpha, estimate.overhead
        else:
            estimate.observe(length, duration, result.rows)
            state.alpha, state.overhead = estimate.alpha, estimate.overhead
        self.observed.batch(tid, worker, job.started, now, rel[lo], rel[hi - 1], hi - lo)
        finished = FinishedBatch(
            table=state.name,
            worker=worker,
            batch=member.batch if loaded is None else loaded,
            result=result,
            started=job.started,
            finished=now,
            stretches=batch_stretches(now, previous, rel[lo:hi]),
            length=length,
            alpha=state.alpha,
            overhead=state.overhead,
            per_key=state.per_key if state.keyed else None,
            job_tables=len(job.members),
        )
        self._forget_loaded(tid, duration, member.batch.last_seq)
        self._safe(self._handler.loaded, finished)

    def _member_failed(
        self,
        worker: int,
        member: _Member,
        error: BaseException,
        split: bool = False,
        cut: list[int] | None = None,
        soon: bool = False,
    ) -> None:
        self.states[member.tid].running = False
        self._retry_later(worker, member.tid, member.lo, member.batch, error, split, cut, soon)

    def _consume(self, tid: int, lo: int, hi: int, now: float) -> float:
        """Account updates ``lo..hi`` as out of the queue (loaded, or quarantined) at ``now``;
        returns the release the table was current up to before."""
        state = self.states[tid]
        rel = state.releases
        previous = rel[lo - 1] if lo else state.origin
        self.ledger.record_batch(tid, now, rel, lo, hi, previous)
        state.current_upto = rel[hi - 1]
        return previous

    def _forget_loaded(self, tid: int, duration: float = 0.0, last_seq: int | None = None) -> None:
        """The in-flight batch, through ``last_seq``, is out of the queue (loaded or set aside):
        a suspect range it closes is past."""
        state = self.states[tid]
        self._failures.pop(tid, None)
        self._tries.pop(tid, None)
        self._strikes.pop(tid, None)
        suspect = self._suspect.get(tid)
        if suspect is not None and last_seq is not None:
            del suspect[: sum(1 for bound in suspect if bound <= last_seq)]
            if not suspect:
                del self._suspect[tid]
        condemned = self._condemned.get(tid)
        if condemned is not None and last_seq is not None:
            for seq in [q for q in condemned if q <= last_seq]:
                del condemned[seq]
                self._aside.get(tid, set()).discard(seq)
            if not condemned:
                del self._condemned[tid]
                self._aside.pop(tid, None)
        self.pending.loaded(state.name, duration)
        state.forget_loaded()

    def _split(self, tid: int, batch: Batch, error: BaseException, cut: list[int] | None = None) -> None:
        """Bisect a batch that keeps failing: its halves become suspect ranges, each taken as
        a batch of its own, the first half first; each starts its attempts and back-off afresh.
        With ``cut`` (the updates the failure names) the ranges are each of them alone and the
        runs of updates before, between and after them."""
        updates = batch.updates
        seqs = [u.seq for u in updates]
        if cut is None:
            bounds = [seqs[(len(seqs) - 1) // 2], batch.last_seq]
        else:
            bounds = [batch.last_seq]
            for named in cut:
                at = seqs.index(named)
                bounds.extend([*seqs[at - 1 : at], named])
        suspect = self._suspect.setdefault(tid, [])
        for bound in bounds:
            if bound not in suspect:
                insort(suspect, bound)
        self._strikes.pop(tid, None)
        self._tries[tid] = 0  # (the parts' attempts count from 1, their back-off from its first step)
        ranges = []
        first = batch.first_seq
        for bound in sorted(set(bounds)):
            ranges.append(f"{first}..{bound}")
            first = next((q for q in seqs if q > bound), bound)
        log.warning(
            "%s updates %d..%d %s (%s): loading %s as batches of their own, so that only an update that "
            "cannot load is quarantined",
            batch.table,
            batch.first_seq,
            batch.last_seq,
            "keep failing as their own fault"
            if cut is None
            else f"failed for update{'s' if len(cut) > 1 else ''} {', '.join(map(str, cut))}",
            error,
            ", ".join(ranges),
        )

    def _retry_later(
        self,
        worker: int,
        tid: int,
        lo: int,
        batch: Batch,
        error: BaseException,
        split: bool = False,
        cut: list[int] | None = None,
        soon: bool = False,
    ) -> None:
        """Put the batch back exactly as it was (its halves to be tried apart when ``split``);
        back off before trying the table again (its first step only when ``split`` or
        ``soon``: the next attempt is not the same batch)."""
        state = self.states[tid]
        state.dispatched = lo
        self.pending.put_back(state.name)
        self._sync_keys(tid)
        self.sync_resident()
        tries = self._tries.get(tid, 1)
        delay = self._delay(1 if split or soon else tries)
        log.error(
            "loading %s (updates %d..%d) failed (attempt %d): %s; retrying in %.1fs",
            state.name,
            batch.first_seq,
            batch.last_seq,
            tries,
            error,
            delay,
        )
        if split:
            self._split(tid, batch, error, cut)
        self.hold(state.name)
        self._loop.call_later(delay, self.release_hold, state.name)
        self._safe(self._handler.failed, FailedBatch(state.name, worker, batch, error, delay, split))

    def _delay(self, tries: int) -> float:
        return min(self._max_retry_delay, self._retry_base * 2 ** (tries - 1))

    def _settled(self, tids: list[int], now: float) -> None:
        if not self._running:
            self._idle.set()
        for tid in tids:
            self.policy.notify(tid, now)
        self.dispatch()

    def _condemn(self, worker: int, job: _Job) -> bool:
        """Set aside, without loading it, a batch that is one update a failed load named as at
        fault (``_condemned``); False for any other batch."""
        member = job.members[0]
        if len(member.batch.updates) != 1:
            return False
        why = self._condemned.get(member.tid, {}).get(member.batch.first_seq)
        if why is None or member.batch.first_seq in self._aside.get(member.tid, ()):
            return False  # (one set aside already, back in the queue after a failed load: ``_excludes``)
        self._set_aside(worker, job, UpdateAtFault(why), 1, named=True)
        return True

    def _set_aside(self, worker: int, job: _Job, error: BaseException, attempts: int, named: bool = False) -> None:
        """Quarantine an update that keeps failing alone, or that a failed load named
        (loader/durability/quarantine.py): its payload is written aside on the same worker,
        which stays busy until that is durable."""
        self._running[worker] = job
        member = job.members[0]
        batch = member.batch
        log.error(
            "loading %s (updates %d..%d) %s: %s; quarantining it so the table's other updates load",
            batch.table,
            batch.first_seq,
            batch.last_seq,
            "was named by a failed load as at fault" if named else f"failed {attempts} times",
            error,
        )
        future = self._loop.run_in_executor(self._executor, self._set_aside_held, batch, member.held, error, attempts)
        future.add_done_callback(lambda f: self._set_aside_done(worker, error, attempts, f))

    def _set_aside_held(self, batch: Batch, held: list[HeldValue], error: BaseException, attempts: int) -> None:
        """On the worker thread: values held back from the batch leave the queue with it, so
        they are made durable first (recovery skips a quarantined update)."""
        if held:
            self._handler.keep_held(batch.table, held)
        self._handler.set_aside(batch, error, attempts)

    def _set_aside_done(self, worker: int, error: BaseException, attempts: int, future: asyncio.Future[None]) -> None:
        now = self._clock()
        job = self._running.pop(worker)
        member = job.members[0]
        tid, lo, hi, batch = member.tid, member.lo, member.hi, member.batch
        state = self.states[tid]
        state.running = False
        heapq.heappush(self._free, worker)
        failure = future.exception()
        if failure is None:
            self._consume(tid, lo, hi, now)
            self._forget_loaded(tid, last_seq=batch.last_seq)
            self._safe(self._handler.quarantined, QuarantinedBatch(state.name, batch, error, attempts))
        else:
            log.error(
                "could not quarantine %s updates %d..%d: %s", state.name, batch.first_seq, batch.last_seq, failure
            )
            self._retry_later(worker, tid, lo, batch, error)
        self._settled([tid], now)

    @staticmethod
    def _safe(callback: Callable[[object], None], value: object) -> None:
        try:
            callback(value)
        except Exception:  # a metrics or catalog hiccup must not wedge the scheduler
            log.exception("callback %r failed", callback)

    # -- reading ------------------------------------------------------------------
    def loaded_account(self, table: str) -> TableAccount:
        """The table's freshness accounts without its not-yet-loaded updates, which the WAL
        replays (and credits to LOW again) after a restart."""
        tid = self.index[table]
        account = self.ledger.account(tid)
        previous, low, count = account.current_upto, 0.0, 0
        for release in self.states[tid].releases:
            if release > account.current_upto:
                low += low_triangle(release - previous)
                previous = release
                count += 1
        return replace(account, low_bound=max(0.0, account.low_bound - low), updates=account.updates - count)

    @property
    def busy_workers(self) -> int:
        return len(self._running)

    def failures(self, table: str) -> int:
        return self._failures.get(self.index[table], 0)

    def suspect(self, table: str) -> list[int]:
        """A bisection under way: the last sequence numbers of the ranges still to be tried alone."""
        return list(self._suspect.get(self.index[table], ()))

    async def wait_idle(self) -> None:
        if self._running:
            await self._idle.wait()

    async def finish(self) -> None:
        """On the way down: no new job starts, the running ones finish. (Waiting for idle
        while still dispatching let a job start after the wait, which the executor's
        shutdown then cancelled before it ran: an error in its callback on a clean stop.)"""
        self._enabled = False
        if self._wakeup is not None:
            self._wakeup.cancel()
        await self.wait_idle()

    def shutdown(self) -> None:
        self._enabled = False
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)
