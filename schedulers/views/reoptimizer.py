"""A-Caching's Re-optimizer: which candidate caches are used, profiled or unused.

Section 4.5 of Babu et al. (../shared/seeds/004_*), with its three refinements:

1. Every candidate starts *profiled*.
2. Once each profiled candidate has W observations of every statistic (the Profiler),
   the offline selection of section 4.4 (``selection.select``) picks the caches to use;
   section 5 (``memory.allocate``) gives them memory; the rest become *unused*. A used
   cache starts empty and fills as join processing goes (never a blocking rebuild).
3. Every re-optimization interval I (updates or seconds) the candidates go back to
   *profiled* and step 2 repeats. Refinement (b): a used cache stays in use unless it
   hides the probe stream of a smaller candidate inside it, which needs the full stream
   to estimate its miss probability. Refinement (c): the selection is re-run only when
   a used or profiled candidate's benefit or cost moved by more than ``change`` (20%).
4. Refinement (a): between re-optimizations a used cache whose benefit minus cost turns
   negative (summed over a shared group, whose cost is paid once) is dropped at once.

Monitoring at its cost (ours; the paper says only that it "can be done with little
overhead"): nothing here runs per update but two comparisons. Readiness (step 2) is
asked again only when the Profiler has a new observation, and refinement (a) re-estimates
the used caches once ``check_after`` new observations have arrived (by default W: an
estimate's window has turned over), not every so many updates.

Pure: the executor says what time it is (``now``, in the interval's unit) and how many
distinct keys a candidate would hold; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from schedulers.views.memory import DEFAULT_BUCKETS_PER_KEY, Grant, MemoryClaim, allocate, buckets
from schedulers.views.pipelines import Candidate
from schedulers.views.profiler import ENTRY_BYTES, REFERENCE_BYTES, CacheEstimate, Profiler
from schedulers.views.selection import Instance, SelectionMethod, select

CacheState = Literal["profiled", "used", "unused"]
IntervalUnit = Literal["updates", "seconds"]

#: Section 4.5 (c): "p = 20% is very effective".
DEFAULT_CHANGE = 0.2


@dataclass(frozen=True, slots=True)
class ReoptimizerSettings:
    #: Re-optimization interval I (section 7.1: 2 seconds; Fig. 12: 10,000 tuples).
    interval: float = 10_000
    unit: IntervalUnit = "updates"
    change: float = DEFAULT_CHANGE
    method: SelectionMethod = "auto"
    #: Bytes for all of the view's caches (None: unlimited).
    memory_budget: float | None = None
    #: Without a budget, buckets per expected key of a cache (section 3.3's direct-mapped
    #: table, for A-Caching and forced plans alike); None: unbounded, every key kept.
    buckets_per_key: float | None = DEFAULT_BUCKETS_PER_KEY
    #: Refinement (a) checks the used caches' net benefit after this many new observations
    #: (None: the Profiler's window W).
    check_after: int | None = None


@dataclass
class Reoptimizer:
    candidates: tuple[Candidate, ...]
    profiler: Profiler
    settings: ReoptimizerSettings = field(default_factory=ReoptimizerSettings)
    #: A forced plan (``force``): the caches never change, only their sizing.
    frozen: bool = False

    def __post_init__(self) -> None:
        self.states: dict[Candidate, CacheState] = {c: "profiled" for c in self.candidates}
        self.grants: dict[Hashable, Grant] = {}
        self.estimates: dict[Candidate, CacheEstimate] = {}
        self._selected_on: dict[Candidate, CacheEstimate] = {}
        self._chosen: frozenset[Candidate] = frozenset()
        self._phase_started: float | None = None
        #: This phase's profiled candidates, and those of them without W observations yet.
        self._profiled_count = len(self.candidates)
        self._unready: list[Candidate] = list(self.candidates)
        self._profiling = True
        #: The Profiler's observation count when readiness, and refinement (a), last looked.
        self._observed = -1
        self._checked = 0
        self._check_after = self.settings.check_after or self.profiler.window
        #: A forced plan's caches are sized by ``buckets`` (False: an XJoin's, complete).
        self._sized = False
        self._sized_at: float | None = None
        #: A forced plan that watches its caches as refinement (a) does, without acting
        #: (to measure what monitoring costs, benchmarks/view_tuning.py).
        self._watching = False
        self.reoptimizations = 0
        self.drops = 0
        #: Time (in the interval's unit) spent profiling, first phase included: section 4.5
        #: assumes it a small part of each interval I.
        self.profiling_spent = 0.0
        #: (now, used candidates) at every change, for timelines (Fig. 12).
        self.history: list[tuple[float, tuple[Candidate, ...]]] = []
        #: The executor need not call ``tick`` before this time unless the Profiler's
        #: observation count reaches ``wake``.
        self.deadline = -math.inf
        self.wake = 0

    # --- what the executor asks -------------------------------------------------------

    @property
    def used(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if self.states[c] == "used" and c.group in self.grants)

    def capacity(self, group: Hashable) -> int | None:
        return self.grants[group].entries

    def observing(self) -> tuple[Candidate, ...]:
        """Candidates whose probe stream the executor hashes into Bloom filters: the
        profiled ones (an unused cache is "neither being profiled nor chosen", section 4.5)
        still short of their W observations in this phase. Ours: one that has them stops
        hashing while the others catch up; only its W most recent windows would count, so
        it is estimated from this phase's first W instead of its last W."""
        return tuple(self._unready) if self._profiling else ()

    # --- what the executor tells ------------------------------------------------------

    def tick(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        """Called after an update; True when the set of used caches or their memory changed.

        Between calls nothing is lost as long as the executor calls after every update at
        or past ``deadline`` and every update that brings the Profiler's observation count
        to ``wake`` or beyond."""
        changed = self._tick(now, distinct_keys)
        self.deadline = self._next_deadline(now)
        self.wake = self._next_wake()
        return changed

    def _next_wake(self) -> int:
        """The observation count at which ``tick`` has something to look at again."""
        if self.frozen:
            return self._checked + self._check_after if self._watching else 2**62
        if self._profiling:
            # Readiness, on any new observation; none to wait for: the next update selects.
            return self.profiler.observations + 1 if self._unready else 0
        return self._checked + self._check_after  # refinement (a)

    def _next_deadline(self, now: float) -> float:
        interval = self.settings.interval
        if self.frozen:
            if not self._sized:
                return math.inf
            return -math.inf if self._sized_at is None else self._sized_at + interval / 10
        start = self._phase_started if self._phase_started is not None else now
        if self._profiling and now - start >= interval:
            return start + 10 * interval  # overdue with none ready: only an observation helps
        return start + interval

    def _tick(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        if self._phase_started is None:
            self._phase_started = now  # the first profiling phase starts with the first update
        if self.frozen:
            return self._forced_tick(now, distinct_keys)
        observed = self.profiler.observations
        if self._profiling:
            fewer = False
            if observed != self._observed:
                # Within a phase observations only accumulate, so a candidate once ready stays
                # ready: only the ones still waiting are asked again, and only when something
                # was observed.
                self._observed = observed
                waiting = len(self._unready)
                self._unready = [c for c in self._unready if not self.profiler.ready(c)]
                fewer = len(self._unready) < waiting  # the executor stops observing them
            if not self._unready:
                return self._reoptimize(now, distinct_keys)
            # Step 2 waits for W observations of every profiled candidate; one whose
            # pipeline sees no tuples would stall it, so past the interval the ready ones
            # are enough, and past ten intervals none need be.
            elapsed = now - self._phase_started
            if elapsed >= self.settings.interval:
                some_ready = len(self._unready) < self._profiled_count
                if some_ready or elapsed >= 10 * self.settings.interval:
                    return self._reoptimize(now, distinct_keys)
            return fewer
        if now - self._phase_started >= self.settings.interval:
            self._start_profiling(now)
            return self._changed(now)
        if observed - self._checked >= self._check_after:
            self._checked = observed
            return self._drop_losers(now, distinct_keys)
        return False

    def force(self, used: Iterable[Candidate], now: float = 0.0, *, sized: bool = True, watch: bool = False) -> None:
        """A static plan (the paper's "we force the one candidate cache to be used").

        ``sized``: its caches get buckets as A-Caching's would without a budget, from the
        same distinct-key counts, re-sized when that rule moves by a quarter (checked every
        tenth of an interval; False: unbounded, an XJoin's complete subresults). ``watch``:
        refinement (a)'s estimates are kept up, never acted on."""
        chosen = set(used)
        self.frozen = True
        self._profiling = False
        self._sized = sized and self.settings.buckets_per_key is not None
        self._watching = watch
        for c in self.candidates:
            self.states[c] = "used" if c in chosen else "unused"
        self.grants = {c.group: Grant(None, 0.0) for c in chosen}
        self.history.append((now, self.used))
        self.deadline = -math.inf if self._sized else math.inf
        self.wake = self._next_wake()

    def _forced_tick(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        if self._watching and self.profiler.observations - self._checked >= self._check_after:
            self._checked = self.profiler.observations
            self._losers(distinct_keys)
        if not self._sized or (self._sized_at is not None and now - self._sized_at < self.settings.interval / 10):
            return False
        # Sized at the first update, then checked every tenth of an interval: re-sized when
        # the rule's buckets moved by more than a quarter (a cache starts before its input
        # fills; A sizes its caches at each selection, with its input warm).
        self._sized_at = now
        keys: dict[Hashable, float] = {}
        for c in self.used:
            keys[c.group] = max(keys.get(c.group, 0.0), distinct_keys(c))
        changed = False
        for group, count in keys.items():
            want, have = buckets(count, self.settings.buckets_per_key), self.grants[group].entries
            if have is None or want is None or abs(want - have) > have / 4:
                self.grants[group] = Grant(want, 0.0)
                changed = True
        return changed

    def drop(self, group: Hashable, now: float) -> None:
        """An operator's or a test's drop: the group's caches become unused until the next selection."""
        for c in self.candidates:
            if c.group == group and self.states[c] == "used":
                self.states[c] = "unused"
                self.profiler.forget_miss(c)
        self.deadline, self.wake = -math.inf, 0  # ask again at the next update
        self.grants.pop(group, None)
        # Refinement (c) keeps the last selection when no estimate moved: with a cache gone
        # from it, that would keep the plan without the cache for good, though the estimates
        # that chose it hold again. A drop is a change; the next re-optimization selects.
        self._selected_on = {}
        self.drops += 1
        self.history.append((now, self.used))

    # --- steps ------------------------------------------------------------------------

    def _start_profiling(self, now: float) -> None:
        self._phase_started = now
        self._profiling = True
        self._observed = -1  # readiness is asked at the next tick, observed or not
        for c in self.candidates:
            if self.states[c] == "used":
                # Refinement (b): keep it unless a smaller candidate needs its probe stream.
                hides = any(o is not c and c.covers(o) and o.start > c.start for o in self.candidates)
                if not hides:
                    continue
            self.states[c] = "profiled"
            self.profiler.forget_miss(c)  # W fresh observations (step 2), not last phase's
        self._unready = [c for c in self.candidates if self.states[c] == "profiled"]
        self._profiled_count = len(self._unready)

    def _estimate_all(self, distinct_keys: Callable[[Candidate], float]) -> None:
        self.estimates = {c: self.profiler.estimate(c, distinct_keys(c)) for c in self.candidates}

    def _reoptimize(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        self.profiling_spent += now - (now if self._phase_started is None else self._phase_started)
        self._profiling = False
        self._phase_started = now
        self._checked = self.profiler.observations
        self._estimate_all(distinct_keys)
        considered = [c for c in self.candidates if self.states[c] == "used" or self.profiler.ready(c)]
        if self._selected_on and not self._moved(considered):
            # Refinement (c): nothing moved, so the selection stands; memory is handed out
            # again (section 5), so the caches' sizes follow their keys.
            self.grants = self._steady(allocate(self._claims(self._chosen), *self._sizing))
            for c in self.candidates:
                self.states[c] = "used" if c in self._chosen and c.group in self.grants else "unused"
            return self._changed(now)
        instance = Instance(
            candidates=tuple(considered),
            benefit={c: self.estimates[c].benefit for c in considered},
            cost={c.group: self.estimates[c].cost for c in considered},
            op_cost={
                (i, p): self.profiler.op_cost(i, p) for i in range(self.profiler.n) for p in range(self.profiler.n - 1)
            },
        )
        chosen = select(instance, self.settings.method)
        self.reoptimizations += 1
        self.grants = self._steady(allocate(self._claims(chosen), *self._sizing))
        for c in self.candidates:
            self.states[c] = "used" if c in chosen and c.group in self.grants else "unused"
        self._selected_on = {c: self.estimates[c] for c in considered}
        self._chosen = frozenset(c for c in chosen if c.group in self.grants)
        return self._changed(now)

    @property
    def _sizing(self) -> tuple[float | None, float | None]:
        return self.settings.memory_budget, self.settings.buckets_per_key

    def _steady(self, grants: dict[Hashable, Grant]) -> dict[Hashable, Grant]:
        """Without a budget, a cache keeps its buckets unless the rule moved them by more
        than a quarter, as a forced plan's (``_forced_tick``): re-sizing a direct-mapped
        store re-places its entries and drops those that now collide."""
        if self.settings.memory_budget is not None:
            return grants
        for group, grant in grants.items():
            old = self.grants.get(group)
            if (
                old is not None
                and old.entries
                and grant.entries
                and abs(grant.entries - old.entries) <= old.entries / 4
            ):
                grants[group] = old
        return grants

    def _claims(self, chosen: Iterable[Candidate]) -> list[MemoryClaim]:
        groups: dict[Hashable, list[Candidate]] = {}
        for c in chosen:
            groups.setdefault(c.group, []).append(c)
        claims = []
        for group, members in groups.items():
            estimates = [self.estimates[c] for c in members]
            net = sum(e.benefit for e in estimates) - estimates[0].cost
            need = max(e.memory for e in estimates)
            entry = ENTRY_BYTES + REFERENCE_BYTES * max(e.entry_tuples for e in estimates)
            claims.append(MemoryClaim(group, net, need, entry))
        return claims

    def _moved(self, considered: Iterable[Candidate]) -> bool:
        for c in considered:
            old, new = self._selected_on.get(c), self.estimates[c]
            if old is None:
                return True
            for before, after in ((old.benefit, new.benefit), (old.cost, new.cost)):
                if abs(after - before) > self.settings.change * max(abs(before), 1e-12):
                    return True
        return False

    def _losers(self, distinct_keys: Callable[[Candidate], float]) -> list[Hashable]:
        """Used groups whose benefit no longer pays their cost (a shared group's cost once)."""
        groups: dict[Hashable, list[Candidate]] = {}
        for c in self.used:
            groups.setdefault(c.group, []).append(c)
        losers = []
        for group, members in groups.items():
            estimates = [self.profiler.estimate(c, distinct_keys(c)) for c in members]
            for c, e in zip(members, estimates, strict=True):
                self.estimates[c] = e
            if sum(e.benefit for e in estimates) - estimates[0].cost < 0:
                losers.append(group)
        return losers

    def _drop_losers(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        """Refinement (a): a used cache (group) whose benefit no longer pays its cost goes."""
        losers = self._losers(distinct_keys)
        for group in losers:
            self.drop(group, now)
        return bool(losers)

    def _changed(self, now: float) -> bool:
        """Record the plan if it changed; True either way (memory grants may have moved)."""
        used = self.used
        if not self.history or self.history[-1][1] != used:
            self.history.append((now, used))
        return True
