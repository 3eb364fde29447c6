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

Pure: the executor says what time it is (``now``, in the interval's unit) and how many
distinct keys a candidate would hold; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from schedulers.views.memory import Grant, MemoryClaim, allocate
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
    #: Check used caches' net benefit every this many updates (refinement a).
    check_every: int = 100


@dataclass
class Reoptimizer:
    candidates: tuple[Candidate, ...]
    profiler: Profiler
    settings: ReoptimizerSettings = field(default_factory=ReoptimizerSettings)
    #: Stays "no caches" forever: the best-MJoin baseline, profiled all the same.
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
        self._since_check = 0
        self.reoptimizations = 0
        self.drops = 0
        #: (now, used candidates) at every change, for timelines (Fig. 12).
        self.history: list[tuple[float, tuple[Candidate, ...]]] = []

    # --- what the executor asks -------------------------------------------------------

    @property
    def used(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if self.states[c] == "used" and c.group in self.grants)

    def capacity(self, group: Hashable) -> int | None:
        return self.grants[group].entries

    def observing(self) -> tuple[Candidate, ...]:
        """Candidates whose probe stream the executor hashes into Bloom filters: the
        profiled ones (an unused cache is "neither being profiled nor chosen", section 4.5)."""
        return tuple(c for c in self.candidates if self.states[c] == "profiled")

    # --- what the executor tells ------------------------------------------------------

    def tick(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        """Called after each update; True when the set of used caches or their memory changed."""
        if self.frozen:
            return False
        if self._phase_started is None:
            self._phase_started = now  # the first profiling phase starts with the first update
        self._since_check += 1
        if self._profiling:
            # Within a phase observations only accumulate, so a candidate once ready stays
            # ready: only the ones still waiting are asked again.
            self._unready = [c for c in self._unready if not self.profiler.ready(c)]
            # Step 2 waits for W observations of every profiled candidate; one whose
            # pipeline sees no tuples would stall it, so past the interval the ready ones
            # are enough, and past ten intervals none need be.
            elapsed = now - self._phase_started
            some_ready = len(self._unready) < self._profiled_count
            overdue = (elapsed >= self.settings.interval and some_ready) or elapsed >= 10 * self.settings.interval
            if not self._unready or overdue:
                return self._reoptimize(now, distinct_keys)
            return False
        if now - self._phase_started >= self.settings.interval:
            self._start_profiling(now)
            return self._changed(now)
        if self._since_check >= self.settings.check_every:
            self._since_check = 0
            return self._drop_losers(now, distinct_keys)
        return False

    def force(self, used: Iterable[Candidate], now: float = 0.0) -> None:
        """A static plan (the paper's "we force the one candidate cache to be used")."""
        chosen = set(used)
        self.frozen = True
        self._profiling = False
        for c in self.candidates:
            self.states[c] = "used" if c in chosen else "unused"
        self.grants = {c.group: Grant(None, 0.0) for c in chosen}
        self.history.append((now, self.used))

    def drop(self, group: Hashable, now: float) -> None:
        """An operator's or a test's drop: the group's caches become unused until the next selection."""
        for c in self.candidates:
            if c.group == group and self.states[c] == "used":
                self.states[c] = "unused"
                self.profiler.forget_miss(c)
        self.grants.pop(group, None)
        self.drops += 1
        self.history.append((now, self.used))

    # --- steps ------------------------------------------------------------------------

    def _start_profiling(self, now: float) -> None:
        self._phase_started = now
        self._profiling = True
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
        self._profiling = False
        self._phase_started = now
        self._since_check = 0
        self._estimate_all(distinct_keys)
        considered = [c for c in self.candidates if self.states[c] == "used" or self.profiler.ready(c)]
        if self._selected_on and not self._moved(considered):
            for c in self.candidates:  # refinement (c): nothing moved; keep the plan
                if self.states[c] == "profiled":
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
        self.grants = allocate(self._claims(chosen), self.settings.memory_budget)
        for c in self.candidates:
            self.states[c] = "used" if c in chosen and c.group in self.grants else "unused"
        self._selected_on = {c: self.estimates[c] for c in considered}
        self._chosen = frozenset(c for c in chosen if c.group in self.grants)
        return self._changed(now)

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

    def _drop_losers(self, now: float, distinct_keys: Callable[[Candidate], float]) -> bool:
        """Refinement (a): a used cache (group) whose benefit no longer pays its cost goes."""
        changed = False
        groups: dict[Hashable, list[Candidate]] = {}
        for c in self.used:
            groups.setdefault(c.group, []).append(c)
        for group, members in groups.items():
            estimates = [self.profiler.estimate(c, distinct_keys(c)) for c in members]
            for c, e in zip(members, estimates, strict=True):
                self.estimates[c] = e
            if sum(e.benefit for e in estimates) - estimates[0].cost < 0:
                self.drop(group, now)
                changed = True
        return changed

    def _changed(self, now: float) -> bool:
        """Record the plan if it changed; True either way (memory grants may have moved)."""
        used = self.used
        if not self.history or self.history[-1][1] != used:
            self.history.append((now, used))
        return True
