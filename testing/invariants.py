"""Schedule checkers for the scheduling core (Bateni et al., sections 2-4).

Every ``check_*`` function takes ``(trace, schedule, workers, policy_name)`` and raises
``AssertionError`` with a message naming the policy, the table and the offending batch
when the schedule breaks the model; ``check_schedule`` runs all that apply to a policy.

The model checked (``docs/scheduling.md``):

- table i gets updates at r_i1 < r_i2 < ...; update j covers (r_i,j-1, r_ij], r_i0 = 0;
- a worker starting table i at s loads one batch: every pending update of i released at or
  before s (``no-batching``: exactly one update, the oldest pending); at most one batch per
  table runs at a time; no preemption; duration = overhead_i + alpha_i * batch length;
- event order at one instant: finishes, then releases, then free workers choose in
  increasing worker index.

Instant semantics used throughout: a batch *runs* at time t when start <= t < finish, so a
batch finishing at t has freed its worker and table before anything starts at t, and a
zero-length batch (start == finish) never counts as running. Within one instant the
schedule's list order is taken as dispatch order (the simulator appends batches as it
starts them). A zero-length batch started at t only retires once the free workers of that
instant have all been asked; its worker and table may then be used again at the same t.
So the batches started at t fall into *rounds*: maximal runs, in list order, of strictly
increasing processor index. In each round the free workers are asked in increasing index.

Checks: (a) ``check_coverage``, (b) ``check_full_batches``, (c) ``check_table_exclusion``,
(d) ``check_processors``, (e) ``check_durations``, (f) ``check_freshness``, (g)
``check_eager``, (h) ``check_myopic_rule`` and ``check_lowest_free_workers``. Beyond those:
``check_fifo_rule`` and ``check_max_benefit_rule`` (each policy's documented order) and,
for faithful GroupAndRun with a fixed partition (``static_partition``), the per-group
versions of (g) and (h) plus ``check_group_binding``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from schedulers.freshness import FreshnessSummary, evaluate_schedule
from schedulers.model import BatchRecord, Trace

#: Policies that never leave a worker idle while a table is available (paper section 3).
EAGER_POLICIES = frozenset({"fifo", "myopic", "max-benefit", "group-and-run-wc", "no-batching"})
#: Policies whose batches hold exactly one update (breaking the batching rule on purpose).
UNBATCHED_POLICIES = frozenset({"no-batching"})
#: Policies that load the available table whose oldest pending release is earliest.
MYOPIC_ORDER_POLICIES = frozenset({"myopic", "no-batching"})
#: Policies that bind workers to groups (checked per group, given the groups).
GROUPED_POLICIES = frozenset({"group-and-run"})

#: Relative tolerance for figures that are computed two ways.
REL_TOL = 1e-9


# -- helpers ------------------------------------------------------------------------------


def _fmt(batch: BatchRecord) -> str:
    return (
        f"{batch.table}@P{batch.processor} [{batch.start!r}, {batch.finish!r}) "
        f"releases {batch.first_release!r}..{batch.last_release!r} ({batch.n_updates} upd)"
    )


def _close(a: float, b: float, rel: float = REL_TOL) -> bool:
    if a == b:
        return True
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return False
    return abs(a - b) <= rel * max(abs(a), abs(b))


def _fail(policy_name: str, invariant: str, message: str) -> None:
    raise AssertionError(f"[{policy_name}] invariant {invariant} violated: {message}")


def _releases(trace: Trace) -> dict[str, list[float]]:
    names = [spec.name for spec in trace.tables]
    return dict(zip(names, trace.releases_by_table(), strict=True))


def _per_table(trace: Trace, schedule: Sequence[BatchRecord], policy_name: str) -> dict[str, list[BatchRecord]]:
    """Batches of each table in execution order: by start, zero-length first, then by data
    (several zero-length batches of one table at one instant: oldest updates first)."""
    known = {spec.name for spec in trace.tables}
    by_table: dict[str, list[tuple[float, float, float, int, BatchRecord]]] = defaultdict(list)
    for k, batch in enumerate(schedule):
        if batch.table not in known:
            _fail(policy_name, "(a)", f"batch #{k} {_fmt(batch)} names a table not in the trace")
        by_table[batch.table].append((batch.start, batch.finish, batch.first_release, k, batch))
    return {name: [b for *_, b in sorted(items, key=lambda x: x[:4])] for name, items in by_table.items()}


def _start_of_data(releases: Sequence[float], first_release: float) -> float:
    """r_i,j-1 for the update released at first_release (0 for the first update)."""
    j = bisect_right(releases, first_release) - 1
    return releases[j - 1] if j > 0 else 0.0


def _dispatch_order(schedule: Sequence[BatchRecord]) -> list[int]:
    return sorted(range(len(schedule)), key=lambda k: (schedule[k].start, k))


def _instants(schedule: Sequence[BatchRecord]) -> list[tuple[float, list[int]]]:
    """Batch indices grouped by start time, ascending, list (dispatch) order inside."""
    out: list[tuple[float, list[int]]] = []
    for k in _dispatch_order(schedule):
        t = schedule[k].start
        if out and out[-1][0] == t:
            out[-1][1].append(k)
        else:
            out.append((t, [k]))
    return out


def _rounds(schedule: Sequence[BatchRecord], indices: list[int]) -> list[list[int]]:
    """Split one instant's batches into rounds: maximal runs of increasing processor index."""
    rounds: list[list[int]] = []
    for k in indices:
        if rounds and schedule[k].processor > schedule[rounds[-1][-1]].processor:
            rounds[-1].append(k)
        else:
            rounds.append([k])
    return rounds


class Groups:
    """A fixed assignment of tables and workers to groups (GroupAndRun's partition)."""

    def __init__(self, table_group: Mapping[str, int], worker_group: Mapping[int, int]) -> None:
        self.table_group = dict(table_group)
        self.worker_group = dict(worker_group)
        self.sizes: dict[int, int] = defaultdict(int)
        for k in self.worker_group.values():
            self.sizes[k] += 1

    @classmethod
    def from_summary(cls, groups: Iterable[Mapping[str, Any]]) -> Groups:
        """From ``SimulationResult.summary()["groups"]`` (tables by name, worker ids)."""
        table_group: dict[str, int] = {}
        worker_group: dict[int, int] = {}
        for k, group in enumerate(groups):
            for name in group["tables"]:
                table_group[name] = k
            for worker in group["workers"]:
                worker_group[worker] = k
        return cls(table_group, worker_group)


def static_partition(trace: Trace, result: Any) -> Groups | None:
    """GroupAndRun's groups if they provably never changed during the run, else None.

    The partition is fixed when every table has a period hint (periods never move), no
    group was merged to meet p >= 2g (so each table sits inside its group's [lo, 2 lo]
    window and is never moved) and the policy formed its groups once. Otherwise tables
    may have moved and worker shares been re-derived mid-run, and the final groups say
    nothing about earlier batches.
    """
    groups = result.policy_state.get("groups")
    if groups is None or result.policy_state.get("regroups") != 1:
        return None
    if any(spec.period is None for spec in trace.tables):
        return None
    if any(group["period_range"][1] > 2.0 * group["period_range"][0] for group in groups):
        return None
    return Groups.from_summary(groups)


# -- (a) every update loaded exactly once, in order ----------------------------------------


def check_coverage(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """(a) The batches of each table cover its releases contiguously and in order."""
    releases = _releases(trace)
    by_table = _per_table(trace, schedule, policy_name)
    for name, rel in releases.items():
        cursor = 0
        for batch in by_table.get(name, []):
            if batch.n_updates < 1:
                _fail(policy_name, "(a)", f"{_fmt(batch)} holds no update")
            hi = cursor + batch.n_updates
            if hi > len(rel):
                _fail(
                    policy_name,
                    "(a)",
                    f"{_fmt(batch)} loads past the last of the {len(rel)} updates of {name}",
                )
            if rel[cursor] != batch.first_release or rel[hi - 1] != batch.last_release:
                _fail(
                    policy_name,
                    "(a)",
                    f"{_fmt(batch)} is not the next run of updates of {name}: expected releases "
                    f"{rel[cursor]!r}..{rel[hi - 1]!r} (updates #{cursor}..#{hi - 1})",
                )
            cursor = hi
        if cursor != len(rel):
            _fail(
                policy_name,
                "(a)",
                f"table {name}: {len(rel) - cursor} of {len(rel)} updates never loaded "
                f"(first missing release {rel[cursor]!r})",
            )


# -- (b) a batch holds all pending updates of its table -------------------------------------


def check_full_batches(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """(b) Each batch holds every pending update of its table at its start (no-batching: one)."""
    releases = _releases(trace)
    by_table = _per_table(trace, schedule, policy_name)
    unbatched = policy_name in UNBATCHED_POLICIES
    for name, batches in by_table.items():
        rel = releases[name]
        cursor = 0
        for batch in batches:
            if cursor >= len(rel) or batch.first_release != rel[cursor]:
                _fail(
                    policy_name,
                    "(b)",
                    f"{_fmt(batch)} does not begin at the oldest update of {name} "
                    "not loaded before it "
                    f"({rel[cursor]!r})"
                    if cursor < len(rel)
                    else f"{_fmt(batch)}: {name} has nothing left",
                )
            if unbatched:
                if batch.n_updates != 1:
                    _fail(
                        policy_name,
                        "(b)",
                        f"{_fmt(batch)} holds {batch.n_updates} updates; no-batching loads one",
                    )
            else:
                released = bisect_right(rel, batch.start)
                if released == 0 or batch.last_release != rel[released - 1]:
                    newest = rel[released - 1] if released else None
                    _fail(
                        policy_name,
                        "(b)",
                        f"{_fmt(batch)} does not hold every pending update of {name}: the newest "
                        f"release at or before its start is {newest!r}",
                    )
            cursor += batch.n_updates


# -- (c) one batch per table at a time, never before its data -------------------------------


def check_table_exclusion(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """(c) Batches of one table never overlap in time, and none starts before its last release."""
    for name, batches in _per_table(trace, schedule, policy_name).items():
        previous: BatchRecord | None = None
        for batch in batches:
            if not batch.finish >= batch.start:
                _fail(policy_name, "(c)", f"{_fmt(batch)} finishes before it starts")
            if batch.start < batch.last_release:
                _fail(
                    policy_name,
                    "(c)",
                    f"{_fmt(batch)} starts before its update released at {batch.last_release!r}",
                )
            if previous is not None and batch.start < previous.finish:
                _fail(
                    policy_name,
                    "(c)",
                    f"batches of {name} overlap: {_fmt(previous)} and {_fmt(batch)}",
                )
            previous = batch


# -- (d) at most P batches at once, one per processor --------------------------------------


def check_processors(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """(d) Processor ids in [0, P); no two overlapping batches on one processor; <= P running."""
    per_proc: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for k, batch in enumerate(schedule):
        if not isinstance(batch.processor, int) or not 0 <= batch.processor < workers:
            _fail(
                policy_name,
                "(d)",
                f"{_fmt(batch)} runs on processor {batch.processor!r}, not in [0, {workers})",
            )
        per_proc[batch.processor].append((batch.start, batch.finish, k))
    for proc, items in per_proc.items():
        items.sort()
        for (_s0, f0, k0), (s1, _f1, k1) in zip(items, items[1:], strict=False):
            if s1 < f0:
                _fail(
                    policy_name,
                    "(d)",
                    f"processor {proc} runs two batches at once: {_fmt(schedule[k0])} and {_fmt(schedule[k1])}",
                )
    # Sweep: ends before starts at equal times (a batch finishing at t frees its worker).
    events = sorted(
        [(b.finish, 0) for b in schedule if b.finish > b.start] + [(b.start, 1) for b in schedule if b.finish > b.start]
    )
    running = 0
    for t, kind in events:
        running += 1 if kind else -1
        if running > workers:
            _fail(
                policy_name,
                "(d)",
                f"{running} batches run at time {t!r} with only {workers} workers",
            )


# -- (e) processing time --------------------------------------------------------------------


def check_durations(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """(e) finish - start == overhead + alpha * (last_release - start of data of first update)."""
    specs = {spec.name: spec for spec in trace.tables}
    releases = _releases(trace)
    for batch in schedule:
        spec = specs[batch.table]
        length = batch.last_release - _start_of_data(releases[batch.table], batch.first_release)
        expected = spec.overhead + spec.alpha * length
        took = batch.finish - batch.start
        tolerance = 1e-9 * max(1.0, abs(batch.finish), expected)
        if not abs(took - expected) <= tolerance:
            _fail(
                policy_name,
                "(e)",
                f"{_fmt(batch)} took {took!r}s; overhead {spec.overhead!r} "
                f"+ alpha {spec.alpha!r} x length "
                f"{length!r} = {expected!r}s",
            )


# -- (f) freshness figures ------------------------------------------------------------------


def recompute_freshness(trace: Trace, schedule: Sequence[BatchRecord]) -> dict[str, float]:
    """Total staleness, LOW and max stretch straight from the definitions (section 2.1)."""
    releases = _releases(trace)
    by_table: dict[str, list[BatchRecord]] = defaultdict(list)
    for batch in schedule:
        by_table[batch.table].append(batch)
    staleness = low = 0.0
    max_stretch = 0.0
    for name, rel in releases.items():
        previous = 0.0
        for r in rel:
            low += 0.5 * (r - previous) ** 2
            previous = r
        upto = 0.0  # S_i(tau) = tau - upto between finishes
        last = 0.0
        for batch in sorted(by_table.get(name, []), key=lambda b: (b.finish, b.start)):
            staleness += (batch.finish - last) * ((last - upto) + (batch.finish - upto)) / 2.0
            lo = bisect_right(rel, batch.first_release) - 1
            start_of_data = rel[lo - 1] if lo > 0 else 0.0
            for r in rel[lo : lo + batch.n_updates]:
                max_stretch = max(max_stretch, (batch.finish - start_of_data) / (r - start_of_data))
                start_of_data = r
            upto = batch.last_release
            last = batch.finish
    return {"total_staleness": staleness, "low_bound": low, "max_stretch": max_stretch}


_SUMMARY_FIELDS = (
    "updates",
    "batches",
    "total_staleness",
    "low_bound",
    "staleness_ratio",
    "max_stretch",
    "weighted_staleness",
    "weighted_low_bound",
    "weighted_ratio",
)


def check_freshness(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    policy_name: str,
    result: Any = None,
) -> FreshnessSummary:
    """(f) Staleness >= LOW; evaluate_schedule agrees with the definitions and the simulator."""
    evaluated = evaluate_schedule(trace, schedule)
    if not evaluated.total_staleness >= evaluated.low_bound * (1.0 - 1e-12) - 1e-12:
        _fail(
            policy_name,
            "(f)",
            f"total staleness {evaluated.total_staleness!r} is below LOW {evaluated.low_bound!r}",
        )
    if not evaluated.staleness_ratio >= 1.0 - 1e-12:
        _fail(policy_name, "(f)", f"staleness ratio {evaluated.staleness_ratio!r} < 1")
    for table in evaluated.tables:  # LOW bounds every table on its own (section 2.2)
        if not table.staleness >= table.low_bound * (1.0 - 1e-12) - 1e-12:
            _fail(
                policy_name,
                "(f)",
                f"table {table.name}: staleness {table.staleness!r} < its LOW {table.low_bound!r}",
            )
    if evaluated.updates and not evaluated.max_stretch >= 1.0 - 1e-12:  # finish >= release
        _fail(policy_name, "(f)", f"max stretch {evaluated.max_stretch!r} < 1")
    direct = recompute_freshness(trace, schedule)
    for key, value in direct.items():
        if not _close(getattr(evaluated, key), value):
            _fail(
                policy_name,
                "(f)",
                f"evaluate_schedule {key} = {getattr(evaluated, key)!r}, definition gives {value!r}",
            )
    if evaluated.updates != trace.n_updates or evaluated.batches != len(schedule):
        _fail(
            policy_name,
            "(f)",
            f"evaluate_schedule counts {evaluated.updates} updates / {evaluated.batches} batches; "
            f"trace has {trace.n_updates}, schedule {len(schedule)}",
        )
    if result is not None:
        simulated: FreshnessSummary = result.freshness
        for key in _SUMMARY_FIELDS:
            a, b = getattr(simulated, key), getattr(evaluated, key)
            if not _close(float(a), float(b)):
                _fail(policy_name, "(f)", f"simulator {key} = {a!r} but evaluate_schedule gives {b!r}")
        for ts, te in zip(simulated.tables, evaluated.tables, strict=True):
            for key in (
                "name",
                "updates",
                "batches",
                "staleness",
                "low_bound",
                "max_stretch",
                "weight",
            ):
                a, b = getattr(ts, key), getattr(te, key)
                if not (a == b if isinstance(a, str) else _close(float(a), float(b))):
                    _fail(
                        policy_name,
                        "(f)",
                        f"table {ts.name}: simulator {key} = {a!r}, evaluate_schedule {b!r}",
                    )
        makespan = max((b.finish for b in schedule), default=0.0)
        if result.makespan != makespan:
            _fail(policy_name, "(f)", f"makespan {result.makespan!r} != last finish {makespan!r}")
    return evaluated


# -- (g) eagerness --------------------------------------------------------------------------


def check_eager(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    policy_name: str,
    groups: Groups | None = None,
) -> None:
    """(g) Never a worker idle while a table is available.

    Checked just after the dispatch at every event time (every release, start and finish):
    if fewer than P batches run (start <= t < finish), no table may be available (some
    update released at or before t not in a batch started at or before t, and no batch of
    the table running). Availability and the running set change only at those instants, so
    this covers every moment. With ``groups`` the check is per group: if fewer than the
    group's worker count run on its workers, no table of the group may be available.
    """
    names = [spec.name for spec in trace.tables]
    tid_of = {name: tid for tid, name in enumerate(names)}
    n = len(names)
    table_group = [groups.table_group.get(name) if groups else 0 for name in names]
    capacity: dict[int | None, int] = dict(groups.sizes) if groups else {0: workers}

    # Events: (time, kind, payload). kind 0 release, 1 start, 2 finish; order inside an
    # instant is irrelevant because only the state after the whole instant is checked.
    events: list[tuple[float, int, int]] = []
    for tid, r in zip(trace.update_tables, trace.update_releases, strict=True):
        events.append((r, 0, tid))
    for k, b in enumerate(schedule):
        events.append((b.start, 1, k))
        events.append((b.finish, 2, k))
    events.sort(key=lambda e: e[0])

    pending = [0] * n
    running_of_table = [0] * n
    running_in_group: dict[int | None, int] = defaultdict(int)
    available: dict[int | None, set[int]] = defaultdict(set)

    def group_of_batch(b: BatchRecord) -> int | None:
        return groups.worker_group.get(b.processor) if groups else 0

    i = 0
    while i < len(events):
        t = events[i][0]
        touched: set[int] = set()
        while i < len(events) and events[i][0] == t:
            _, kind, payload = events[i]
            i += 1
            if kind == 0:
                pending[payload] += 1
                touched.add(payload)
                continue
            b = schedule[payload]
            tid = tid_of[b.table]
            touched.add(tid)
            if kind == 1:
                pending[tid] -= b.n_updates
            if b.finish > b.start:  # zero-length batches never run
                delta = 1 if kind == 1 else -1
                running_of_table[tid] += delta
                running_in_group[group_of_batch(b)] += delta
        for tid in touched:
            group = table_group[tid]
            if pending[tid] > 0 and running_of_table[tid] == 0:
                available[group].add(tid)
            else:
                available[group].discard(tid)
        for group, cap in capacity.items():
            if running_in_group[group] < cap and available[group]:
                tid = min(available[group])
                running = [_fmt(b) for b in schedule if b.start <= t < b.finish]
                where = f" of group {group}" if groups else ""
                _fail(
                    policy_name,
                    "(g)",
                    f"at t={t!r} only {running_in_group[group]} of {cap} workers{where} are busy "
                    f"but table {names[tid]} is available "
                    f"({pending[tid]} pending update(s), none running); "
                    f"running: {running}",
                )


# -- (h) dispatch order: lowest free workers first, MYOPIC's choice -------------------------


class ReplayState:
    """What a policy could see at one dispatch during a replay (see ``_replay``)."""

    def __init__(self, trace: Trace) -> None:
        self.names = [spec.name for spec in trace.tables]
        self.specs = list(trace.tables)
        self.rel = trace.releases_by_table()
        self.cursor = [0] * len(self.names)  # updates of each table loaded so far
        self.last_finish = [-math.inf] * len(self.names)  # latest finish of a started batch
        self.t = 0.0
        self.in_round: set[int] = set()  # tables started in this round (zero-length ones too)

    def released(self, tid: int) -> int:
        return bisect_right(self.rel[tid], self.t)

    def available(self, tid: int) -> bool:
        """Some update released and not loaded, and no batch of the table running."""
        return self.released(tid) > self.cursor[tid] and self.last_finish[tid] <= self.t and tid not in self.in_round

    def oldest_pending(self, tid: int) -> float:
        return self.rel[tid][self.cursor[tid]]

    def pending_length(self, tid: int) -> float:
        """Length of the batch a worker would start now: newest release - r_i,j-1."""
        c = self.cursor[tid]
        return self.rel[tid][self.released(tid) - 1] - (self.rel[tid][c - 1] if c else 0.0)

    def became_available(self, tid: int) -> float:
        """When the table last became available: its oldest pending release, or the finish
        of its previous batch if that came later."""
        return max(self.oldest_pending(tid), self.last_finish[tid])


def _replay(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    on_round: Callable[[float, list[int], list[int]], None] | None = None,
    on_start: Callable[[ReplayState, int], None] | None = None,
) -> None:
    """Replay the schedule instant by instant, round by round, in dispatch order.

    ``on_round(t, round_indices, free_workers)`` is called at the start of each round with
    the workers free at that moment (ascending). ``on_start(state, k)`` is called just
    before batch k is applied, with the state as the policy saw it when choosing.
    """
    state = ReplayState(trace)
    tid_of = {name: tid for tid, name in enumerate(state.names)}
    proc_busy_until = [-math.inf] * workers
    for t, indices in _instants(schedule):
        state.t = t
        for rnd in _rounds(schedule, indices):
            state.in_round = set()
            if on_round is not None:
                on_round(t, rnd, [w for w in range(workers) if proc_busy_until[w] <= t])
            for k in rnd:
                b = schedule[k]
                tid = tid_of[b.table]
                if on_start is not None:
                    on_start(state, k)
                state.cursor[tid] += b.n_updates
                state.in_round.add(tid)
                state.last_finish[tid] = max(state.last_finish[tid], b.finish)
                if 0 <= b.processor < workers:
                    proc_busy_until[b.processor] = max(proc_busy_until[b.processor], b.finish)


def check_lowest_free_workers(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    policy_name: str,
    groups: Groups | None = None,
) -> None:
    """(h, second part) Free workers choose in increasing index.

    In each round of an instant (see the module doc) the batches started go to the
    lowest-index workers free at that moment, in increasing order; with ``groups``, the
    batches on a group's workers go to that group's lowest-index free workers.
    """

    def on_round(t: float, rnd: list[int], free: list[int]) -> None:
        used = [schedule[k].processor for k in rnd]
        if groups is None:
            expected = free[: len(used)]
            if used != expected:
                _fail(
                    policy_name,
                    "(h)",
                    f"at t={t!r} batches started on workers {used} "
                    f"but the lowest free workers were {expected} "
                    f"(free: {free}); batches: {[_fmt(schedule[k]) for k in rnd]}",
                )
            return
        by_group: dict[int | None, list[int]] = defaultdict(list)
        for w in used:
            by_group[groups.worker_group.get(w)].append(w)
        for group, ws in by_group.items():
            free_k = [w for w in free if groups.worker_group.get(w) == group]
            if group is None or ws != free_k[: len(ws)]:
                _fail(
                    policy_name,
                    "(h)",
                    f"at t={t!r} group {group} started batches on workers {ws}, "
                    "but its lowest free workers "
                    f"were {free_k[: len(ws)]}; batches: {[_fmt(schedule[k]) for k in rnd]}",
                )

    _replay(trace, schedule, workers, on_round, None)


def check_priority_rule(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    policy_name: str,
    key: Callable[[ReplayState, int], Any],
    rule: str,
    groups: Groups | None = None,
) -> None:
    """Each start picks an available table with the smallest ``key`` among the tables
    available at that moment (after the starts already made at the same instant by
    lower-index workers); with ``groups``, among the tables of its own group. Ties pass."""
    names = [spec.name for spec in trace.tables]
    tid_of = {name: tid for tid, name in enumerate(names)}

    def on_start(state: ReplayState, k: int) -> None:
        b = schedule[k]
        tid = tid_of[b.table]
        if not state.available(tid):
            _fail(
                policy_name,
                "(h)",
                f"{_fmt(b)} starts table {b.table}, which is not available at t={state.t!r}",
            )
        group = groups.table_group.get(b.table) if groups else None
        mine = key(state, tid)
        for u in range(len(names)):
            if u == tid or not state.available(u):
                continue
            if groups is not None and groups.table_group.get(names[u]) != group:
                continue
            theirs = key(state, u)
            if theirs < mine:
                _fail(
                    policy_name,
                    "(h)",
                    f"{rule}: at t={state.t!r} {_fmt(b)} was chosen with key {mine!r}, but table "
                    f"{names[u]} was available with a better key {theirs!r}",
                )

    _replay(trace, schedule, workers, on_start=on_start)


def myopic_key(state: ReplayState, tid: int) -> float:
    """MYOPIC (section 4): the release of the table's oldest pending update."""
    return state.oldest_pending(tid)


def fifo_key(state: ReplayState, tid: int) -> float:
    """FIFO: the time the table became available."""
    return state.became_available(tid)


def max_benefit_key(state: ReplayState, tid: int) -> tuple[float, float]:
    """Max-benefit: largest weight * L / (overhead + alpha * L) first, then oldest pending."""
    spec = state.specs[tid]
    length = state.pending_length(tid)
    cost = spec.overhead + spec.alpha * length
    rate = spec.weight * length / cost if cost > 0.0 else math.inf
    return (-rate, state.oldest_pending(tid))


def check_myopic_rule(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    policy_name: str,
    groups: Groups | None = None,
) -> None:
    """(h) MYOPIC: each start picks an available table whose oldest pending release is
    earliest among all tables available at that moment (after the starts already made at
    the same instant by lower-index workers). With ``groups``, among its group's tables.
    """
    check_priority_rule(trace, schedule, workers, policy_name, myopic_key, "MYOPIC (oldest pending release)", groups)


def check_fifo_rule(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """FIFO: tables are loaded in the order they became available (same-instant ties pass)."""
    check_priority_rule(trace, schedule, workers, policy_name, fifo_key, "FIFO (earliest to become available)")


def check_max_benefit_rule(trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str) -> None:
    """Max-benefit: the available table with the largest w L / (overhead + alpha L)."""
    check_priority_rule(trace, schedule, workers, policy_name, max_benefit_key, "max-benefit (largest benefit rate)")


def check_group_binding(
    trace: Trace, schedule: Sequence[BatchRecord], workers: int, policy_name: str, groups: Groups
) -> None:
    """Faithful GroupAndRun: a batch of a table of group k runs only on a worker of group k."""
    for batch in schedule:
        k_table = groups.table_group.get(batch.table)
        k_worker = groups.worker_group.get(batch.processor)
        if k_table is None or k_table != k_worker:
            _fail(
                policy_name,
                "(groups)",
                f"{_fmt(batch)}: table is in group {k_table} but worker {batch.processor} is in group {k_worker}",
            )


# -- everything -----------------------------------------------------------------------------

ALWAYS = (
    check_coverage,
    check_full_batches,
    check_table_exclusion,
    check_processors,
    check_durations,
)


def check_schedule(
    trace: Trace,
    schedule: Sequence[BatchRecord],
    workers: int,
    policy_name: str,
    result: Any = None,
    groups: Groups | None = None,
) -> FreshnessSummary:
    """Run every invariant that applies to ``policy_name``; returns evaluate_schedule's figures."""
    for check in ALWAYS:
        check(trace, schedule, workers, policy_name)
    summary = check_freshness(trace, schedule, workers, policy_name, result=result)
    if policy_name in EAGER_POLICIES:
        check_eager(trace, schedule, workers, policy_name)
    if policy_name in GROUPED_POLICIES:
        if groups is not None:
            check_group_binding(trace, schedule, workers, policy_name, groups)
            check_eager(trace, schedule, workers, policy_name, groups=groups)
            check_lowest_free_workers(trace, schedule, workers, policy_name, groups=groups)
            check_myopic_rule(trace, schedule, workers, policy_name, groups=groups)
    else:
        check_lowest_free_workers(trace, schedule, workers, policy_name)
    if policy_name in MYOPIC_ORDER_POLICIES:
        check_myopic_rule(trace, schedule, workers, policy_name)
    if policy_name == "fifo":
        check_fifo_rule(trace, schedule, workers, policy_name)
    if policy_name == "max-benefit":
        check_max_benefit_rule(trace, schedule, workers, policy_name)
    return summary
