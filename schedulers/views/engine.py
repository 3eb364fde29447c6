"""The MJoin executor of a join view, with A-Caching's caches in its pipelines.

Section 3 of Babu et al. (../shared/seeds/004_*): every input's update is joined with
the other inputs in its pipeline's order (hash indexes on each input, section 7.1), to
completion, before the next update; then the input itself changes. The view's delta is
what comes out of the pipelines: +1 for a row an insertion creates, -1 for one a
deletion removes. A cache (section 3.2) sits before its segment's first operator: a
probe *hit* returns the segment's joined tuples for the key at once; a *miss* runs the
segment and stores the result (``create``). Each cache is kept consistent by CacheUpdate
at the prefix-invariant point of every segment input's pipeline (Definition 3.2), so a
cache never needs a blocking rebuild: it is created empty and fills as probes miss.

Caches are hash tables probed on the cache key; with a memory grant they are
direct-mapped (section 3.3: a new key landing in a taken bucket replaces its entry),
so a smaller grant means more misses, never a wrong answer. Shared caches (Definition
4.1) are one store used by several pipelines.

Section 6's globally-consistent caches (``EngineSettings.global_caches`` = m) join the
candidates when fewer than m satisfy the prefix invariant. Their CacheUpdate point in a
segment input's pipeline follows joins with inputs outside the segment, so the stream
there is projected on the segment's inputs (each segment tuple once, its multiplicity
from the relations), and a tuple that dies at a watched operator before the point evicts
the entry it would have changed (``pipelines.global_candidates`` says why ours evicts).

``mode`` picks the plan: ``adaptive`` (A-Caching: the Profiler and Re-optimizer choose
caches as conditions change), ``mjoin`` (no caches, no profiling: the paper's M),
``static`` (the caches given, forced, as in the paper's Figs. 6 and 8) and ``xjoin``
(the given segments fully materialised, as an XJoin's subresults: a probe never misses,
every update maintains them).

Pure: the optional ``timer`` is how the executor measures cost (seconds, for
benchmarks and the live service); without one, cost is counted in work units (a tuple
into or out of an operator or a cache), so tests and the simulator are exact.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from schedulers.views.declaration import JoinGraph, ViewSpec
from schedulers.views.pipelines import (
    DEFAULT_GLOBAL_LIMIT,
    Candidate,
    Orders,
    candidates,
    check_orders,
    conflicts,
    default_orders,
    global_candidates,
)
from schedulers.views.profiler import (
    DEFAULT_BLOOM_TUPLES,
    DEFAULT_CLIP,
    DEFAULT_WINDOW,
    ENTRY_BYTES,
    REFERENCE_BYTES,
    Profiler,
)
from schedulers.views.reoptimizer import Reoptimizer, ReoptimizerSettings

Mode = Literal["adaptive", "mjoin", "static", "xjoin"]
#: What of A-Caching's monitoring a forced plan pays too (``EngineSettings.monitor``).
Monitoring = Literal["rates", "profiled", "bloom"]
Row = tuple
#: A composite tuple: input i's row at index i, None where not joined yet.
Parts = tuple
#: A view delta: output rows with their change of multiplicity (+ inserted, - deleted).
Delta = list[tuple[Row, int]]


@dataclass(frozen=True, slots=True)
class InputShape:
    """How an input's rows look to the executor."""

    columns: tuple[str, ...]
    #: A latest table's key columns: an upsert of a key deletes its previous row.
    key: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EngineSettings:
    mode: Mode = "adaptive"
    #: Candidates forced in ``static`` mode or materialised in ``xjoin`` mode, by name
    #: (``Candidate.name``: ``"t:[s r]"``).
    caches: tuple[str, ...] = ()
    #: Appendix A: the fraction p_i of updates profiled in each pipeline (no value given).
    #: A profiled update runs without the pipeline's caches, paying every join they skip;
    #: at 0.02 a pipeline with a seventh of the updates (Fig. 12's R) gets its W = 10
    #: profiled updates every 3,500 updates, about a third of I (BENCHMARKS.md, "view-tuning").
    profile_probability: float = 0.02
    #: ``alias.column``s without a hash index: joins on them scan the input (Fig. 10).
    no_index: tuple[str, ...] = ()
    window: int = DEFAULT_WINDOW
    bloom_tuples: int = DEFAULT_BLOOM_TUPLES
    #: Timed probe and cache-update costs clipped at this many times their window's median
    #: (``profiler.DEFAULT_CLIP``, ours); None: the paper's plain average.
    cost_clip: float | None = DEFAULT_CLIP
    #: Section 6's m: globally-consistent candidates fill the candidates up to m when fewer
    #: satisfy the prefix invariant; 0 keeps to the prefix invariant (section 4's plans).
    global_caches: int = DEFAULT_GLOBAL_LIMIT
    reoptimizer: ReoptimizerSettings = field(default_factory=ReoptimizerSettings)
    seed: int = 0
    #: Measurement only, for a ``static`` plan: the parts of A-Caching's monitoring it pays
    #: as if adaptive, so A's overhead splits into its parts (benchmarks/view_tuning.py).
    #: ``rates``: the rate counter and refinement (a)'s estimates of the used caches (never
    #: acted on); ``profiled``: p of the updates processed without caches and recorded;
    #: ``bloom``: every unused candidate's probe stream hashed into Bloom filters, as A does
    #: while it re-profiles.
    monitor: tuple[Monitoring, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheFigures:
    """One cache store as the admin view and the benchmarks show it."""

    name: str
    pipelines: tuple[str, ...]
    entries: int
    tuples: int
    capacity: int | None
    probes: int
    hits: int
    #: Entries evicted because an update could not be applied to them (section 6).
    evictions: int = 0
    #: Memory as section 3.3 lays a cache out: an entry (key, bucket) per key and a
    #: reference per cached tuple's part (tuples themselves are not copied).
    bytes: float = 0.0


#: Entries holding nothing that an unbounded cache keeps (``CacheStore.create``).
EMPTY_KEPT = 4096


class CacheStore:
    """Key -> the segment's joined tuples for that key (a multiset of partial tuples)."""

    __slots__ = ("complete", "capacity", "table", "probes", "hits", "tuples", "evictions", "_empty")

    def __init__(self, capacity: int | None, complete: bool = False) -> None:
        if complete and capacity is not None:
            raise ValueError("a materialised (XJoin) subresult cannot be bounded: an evicted key would read as empty")
        self.complete = complete
        self.capacity = capacity
        # Direct-mapped (capacity): bucket -> (key, value); unbounded: key -> value.
        self.table: dict[Hashable, tuple[Hashable, dict[Parts, int]]] = {}
        self.probes = 0
        self.hits = 0
        self.tuples = 0
        self.evictions = 0
        #: Keys of entries created empty, oldest first (an unbounded store keeps EMPTY_KEPT).
        self._empty: deque[Hashable] = deque()

    def _slot(self, key: Hashable) -> Hashable:
        return key if self.capacity is None else hash(key) % self.capacity

    def probe(self, key: Hashable) -> dict[Parts, int] | None:
        self.probes += 1
        found = self.table.get(self._slot(key))
        if found is not None and found[0] == key:
            self.hits += 1
            return found[1]
        if self.complete:
            self.hits += 1
            return {}
        return None

    def create(self, key: Hashable, value: dict[Parts, int]) -> None:
        if not value and self.capacity is None:
            # Ours: an unbounded cache keeps its latest EMPTY_KEPT "joins nothing" entries. They
            # save a miss as well as any (section 3.2 stores the result "which could be empty"),
            # but over sliding windows the keys probed in vain are new all the time and no
            # deletion ever removes their entries: kept all, they would grow with the stream.
            self._empty.append(key)
            while len(self._empty) > EMPTY_KEPT:
                old = self._empty.popleft()
                found = self.table.get(old)
                if found is not None and not found[1]:
                    del self.table[old]
        slot = self._slot(key)
        old = self.table.get(slot)
        if old is not None:
            self.tuples -= sum(old[1].values())
        self.table[slot] = (key, value)
        self.tuples += sum(value.values())

    def change(self, key: Hashable, partial: Parts, count: int) -> bool:
        """insert (count > 0) or delete (< 0) a segment tuple; ignored when the key is absent."""
        slot = self._slot(key)
        found = self.table.get(slot)
        if found is None or found[0] != key:
            if not self.complete or count < 0:
                return False
            found = (key, {})
            self.table[slot] = found
        value = found[1]
        left = value.get(partial, 0) + count
        if left > 0:
            value[partial] = left
        else:
            value.pop(partial, None)
            if not value:
                # Ours: an entry emptied by deletions goes (a later probe misses and finds
                # nothing again). Over sliding windows every key dies in turn, and keeping its
                # empty entry would grow an unbounded cache with the stream, not the window.
                del self.table[slot]
        self.tuples += count
        return True

    def evict(self, key: Hashable) -> None:
        """Forget the entry of ``key`` (section 6: an update it could not be kept exact for)."""
        slot = self._slot(key)
        found = self.table.get(slot)
        if found is not None and found[0] == key:
            del self.table[slot]
            self.tuples -= sum(found[1].values())
            self.evictions += 1

    def clear(self) -> None:
        self.evictions += len(self.table)
        self.table.clear()
        self._empty.clear()
        self.tuples = 0

    def resize(self, capacity: int | None) -> None:
        """Keep what fits: entries whose key lands in the same bucket keep the last one."""
        if capacity == self.capacity:
            return
        entries = list(self.table.values())
        self.capacity, self.table, self.tuples = capacity, {}, 0
        self._empty.clear()
        for key, value in entries:
            self.create(key, value)


def store_bytes(store: CacheStore, members: int) -> float:
    """Section 3.3's layout: ``ENTRY_BYTES`` per entry, a reference per tuple of each member."""
    return len(store.table) * ENTRY_BYTES + store.tuples * REFERENCE_BYTES * members


class _Operator:
    """Joins a pipeline's stream with one input on every attribute it shares with the prefix."""

    __slots__ = ("input", "index", "prefix_columns", "columns")

    def __init__(
        self,
        input_: int,
        index: dict[Hashable, dict[Row, int]] | None,
        prefix_columns: tuple,
        columns: tuple[int, ...],
    ) -> None:
        self.input = input_
        #: None: no index on these columns (a nested-loop join scans the input, Fig. 10).
        self.index = index
        #: For each shared attribute: (input in the prefix, column position) to read it.
        self.prefix_columns = prefix_columns
        #: The joined input's columns for those attributes.
        self.columns = columns


class MJoinEngine:
    """One view's relations, pipelines and caches."""

    def __init__(
        self,
        spec: ViewSpec,
        graph: JoinGraph,
        shapes: Sequence[InputShape],
        orders: Orders | Sequence[Sequence[int]] | None = None,
        settings: EngineSettings | None = None,
        timer: Callable[[], float] | None = None,
    ) -> None:
        self.spec, self.graph = spec, graph
        self.settings = settings or EngineSettings()
        self.n = graph.n
        self.shapes = tuple(shapes)
        self.orders: Orders = check_orders(graph, orders) if orders is not None else default_orders(graph)
        self._timer = timer
        if self.settings.reoptimizer.unit == "seconds" and timer is None:
            raise ValueError("a re-optimization interval in seconds needs a timer; without one, give it in updates")
        self._random = random.Random(self.settings.seed)
        self.work = 0
        self.updates = 0
        # Relations: row -> multiplicity; a latest input also key -> its row.
        self.rows: list[dict[Row, int]] = [{} for _ in range(self.n)]
        self._latest: list[dict[Hashable, Row] | None] = [{} if s.key else None for s in self.shapes]
        self._key_columns = [tuple(s.columns.index(c) for c in s.key) for s in self.shapes]
        self._windows: list[deque[tuple[float, Row]]] = [deque() for _ in range(self.n)]
        self._indexes: dict[tuple[int, tuple[int, ...]], dict[Hashable, dict[Row, int]]] = {}
        self._ops = [self._pipeline(i) for i in range(self.n)]
        self._input_indexes = [
            [(columns, index) for (m, columns), index in self._indexes.items() if m == i] for i in range(self.n)
        ]
        self._outputs = tuple(self._output_column(o.source.input, o.source.column) for o in spec.outputs)
        prefix = candidates(graph, self.orders)
        extra = global_candidates(graph, self.orders, prefix, self.settings.global_caches)
        # An XJoin materialises prefix-invariant subresults only; an MJoin has no caches.
        self.candidates = prefix + (extra if self.settings.mode in ("adaptive", "static") else ())
        self.by_name = {c.name(spec.aliases): c for c in self.candidates}
        self.profiler = Profiler(
            self.n,
            self.candidates,
            window=self.settings.window,
            bloom_tuples=self.settings.bloom_tuples,
            clip=self.settings.cost_clip,
        )
        self.reoptimizer = Reoptimizer(self.candidates, self.profiler, self.settings.reoptimizer)
        self.stores: dict[Hashable, CacheStore] = {}
        self._lookup: list[dict[int, tuple[Candidate, CacheStore, tuple]]] = [{} for _ in range(self.n)]
        #: Pipeline -> position -> CacheUpdate there: (store, key reader, None for a prefix
        #: cache's exact stream, or a globally-consistent cache's (segment inputs, others)).
        self._maintain: list[dict[int, list[tuple[CacheStore, tuple, tuple | None]]]] = [{} for _ in range(self.n)]
        #: Pipeline -> position -> (store, key reader over what is joined there, or None).
        self._watch: list[dict[int, list[tuple[CacheStore, tuple | None]]]] = [{} for _ in range(self.n)]
        self._observe: list[dict[int, list[tuple[Candidate, tuple]]]] = [{} for _ in range(self.n)]
        #: Over the executor's life, every cache together (stores come and go).
        self.cache_probes = 0
        self.cache_hits = 0
        mode = self.settings.mode
        if mode in ("static", "xjoin"):
            unknown = [name for name in self.settings.caches if name not in self.by_name]
            if unknown:
                raise ValueError(
                    f"caches {unknown} are not candidates of these pipelines; candidates: {sorted(self.by_name)}"
                )
            forced = [self.by_name[name] for name in self.settings.caches]
            clashing = [(a, b) for k, a in enumerate(forced) for b in forced[k + 1 :] if conflicts(a, b)]
            if clashing:
                a, b = clashing[0]
                raise ValueError(
                    f"caches {a.name(spec.aliases)} and {b.name(spec.aliases)} cannot be used together "
                    "(they overlap, or one's lookup skips where the other is maintained)"
                )
            self.reoptimizer.force(forced, sized=mode == "static", watch="rates" in self.settings.monitor)
        elif mode == "mjoin":
            self.reoptimizer.force([], sized=False)
        if self.settings.monitor and mode != "static":
            raise ValueError("monitor measures a forced plan's share of A-Caching's monitoring: mode must be static")
        self._adaptive = mode == "adaptive"
        self._by_updates = self.settings.reoptimizer.unit == "updates"
        self._rates = self._adaptive or "rates" in self.settings.monitor
        self._profiles = self._adaptive or "profiled" in self.settings.monitor
        self._arrivals = self.profiler.arrivals
        self._roll_at = self.profiler.rate_window
        # Entries a cache would hold (section 5's memory, a forced plan's buckets): the
        # distinct keys of each candidate's first segment input, from its hash index or,
        # without one, from counts kept as the input changes (never a scan of the input).
        self._key_counts: list[list[tuple[tuple[int, ...], dict[Hashable, int]]]] = [[] for _ in range(self.n)]
        self._keys_of: dict[Candidate, Mapping[Hashable, object]] = {}
        if mode in ("adaptive", "static"):
            for c in self.candidates:
                first = c.segment[0]
                columns = tuple(self._column(first, a) for a in c.key if a in self.graph.of_input[first])
                found = self._indexes.get((first, columns))
                if found is None:
                    found = next((d for cols, d in self._key_counts[first] if cols == columns), None)
                if found is None:
                    found = {}
                    self._key_counts[first].append((columns, found))
                self._keys_of[c] = found
        self._sync()

    # --- structure ------------------------------------------------------------------

    def _output_column(self, alias: str, column: str) -> tuple[int, int]:
        i = self.spec.input_index(alias)
        return i, self.shapes[i].columns.index(column)

    def _column(self, i: int, attribute: int) -> int:
        return self.shapes[i].columns.index(self.graph.of_input[i][attribute])

    def _index(self, i: int, attributes: tuple[int, ...]) -> dict[Hashable, dict[Row, int]]:
        key = (i, tuple(self._column(i, a) for a in attributes))
        if key not in self._indexes:
            self._indexes[key] = {}
        return self._indexes[key]

    def _reader(self, members: Iterable[int], attributes: tuple[int, ...]) -> tuple:
        """Where to read each attribute in a composite holding ``members``."""
        found = self._reader_or_none(members, attributes)
        assert found is not None, (members, attributes)
        return found

    def _reader_or_none(self, members: Iterable[int], attributes: tuple[int, ...]) -> tuple | None:
        members = sorted(members)
        readers = []
        for a in attributes:
            holder = next((m for m in members if a in self.graph.of_input[m]), None)
            if holder is None:
                return None
            readers.append((holder, self._column(holder, a)))
        return tuple(readers)

    def _pipeline(self, i: int) -> list[_Operator]:
        ops, joined = [], {i}
        for m in self.orders[i]:
            attributes = self.graph.shared(joined, {m})
            names = {f"{self.spec.aliases[m]}.{self.graph.of_input[m][a]}" for a in attributes}
            index = None if names & set(self.settings.no_index) else self._index(m, attributes)
            columns = tuple(self._column(m, a) for a in attributes)
            ops.append(_Operator(m, index, self._reader(joined, attributes), columns))
            joined.add(m)
        return ops

    @staticmethod
    def _key(parts: Parts, reader: tuple) -> Hashable:
        if len(reader) == 1:  # the common one-attribute key, without a generator's cost
            ((holder, column),) = reader
            return (parts[holder][column],)
        return tuple(parts[holder][column] for holder, column in reader)

    def _sync(self) -> None:
        """Make the stores, lookups and maintenance points match the Re-optimizer's plan."""
        used = self.reoptimizer.used
        groups = {c.group for c in used}
        complete = self.settings.mode == "xjoin"
        for group in list(self.stores):
            if group not in groups:
                del self.stores[group]  # dropped: its memory goes, it is never trusted again
        for c in used:
            capacity = self.reoptimizer.capacity(c.group)
            if c.group not in self.stores:
                self.stores[c.group] = CacheStore(capacity, complete)
                if complete:
                    self._materialise(c, self.stores[c.group])
            else:
                self.stores[c.group].resize(capacity)
        self._lookup = [{} for _ in range(self.n)]
        self._maintain = [{} for _ in range(self.n)]
        self._watch = [{} for _ in range(self.n)]
        for c in used:
            store = self.stores[c.group]
            projection = None
            if c.scope == "global":
                projection = (tuple(sorted(c.members)), tuple(k for k in range(self.n) if k not in c.members))
            for m, position in c.update_points.items():
                point = self._maintain[m].setdefault(position, [])
                if all(s is not store for s, _, _ in point):
                    point.append((store, self._reader(c.members, c.key), projection))
            for m, (first, q) in c.watched.items():
                for pos in range(first, q):
                    joined = {m, *self.orders[m][:pos]}
                    watch = self._watch[m].setdefault(pos, [])
                    if all(s is not store for s, _ in watch):
                        watch.append((store, self._reader_or_none(joined, c.key)))
        for c in used:
            # No used cache spans another's CacheUpdate point or watched operator: impossible
            # between prefix-invariant candidates (tests/schedulers/views/test_pipelines.py
            # proves it on random views), and selection keeps section 6's caches apart
            # (pipelines.conflicts); a lookup there would skip tuples that cache must see.
            assert not any(c.start < q <= c.end for q in self._maintain[c.pipeline]), c
            assert not any(c.start <= q <= c.end for q in self._watch[c.pipeline]), c
            store = self.stores[c.group]
            prefix = {c.pipeline, *self.orders[c.pipeline][: c.start]}
            self._lookup[c.pipeline][c.start] = (c, store, self._reader(prefix, c.key))
        self._observe = [{} for _ in range(self.n)]
        observing = self.reoptimizer.observing()
        if "bloom" in self.settings.monitor:
            observing = tuple(c for c in self.candidates if c not in used)
        for c in observing:
            prefix = {c.pipeline, *self.orders[c.pipeline][: c.start]}
            self._observe[c.pipeline].setdefault(c.start, []).append((c, self._reader(prefix, c.key)))

    def _materialise(self, c: Candidate, store: CacheStore) -> None:
        """An XJoin's subresult, computed whole when the plan starts."""
        first = min(c.members)
        width = c.length - 1
        reader = self._reader(c.members, c.key)
        for row, count in self.rows[first].items():
            base = tuple(row if k == first else None for k in range(self.n))
            for parts, times in self._run(first, [(base, count)], 0, width, profile=None, quiet=True):
                store.change(self._key(parts, reader), self._partial(parts, c.members), times)

    @staticmethod
    def _partial(parts: Parts, members: frozenset[int]) -> Parts:
        return tuple(parts[m] if m in members else None for m in range(len(parts)))

    # --- processing -----------------------------------------------------------------

    def _clock(self) -> float:
        return self._timer() if self._timer is not None else float(self.work)

    def _join(
        self, op: _Operator, stream: list[tuple[Parts, int]], dead: list[Parts] | None = None
    ) -> list[tuple[Parts, int]]:
        """``dead``: where to list the tuples that join nothing (a watched operator, section 6)."""
        out = []
        index, m, reader = op.index, op.input, op.prefix_columns
        if index is None:
            return self._scan(op, stream, dead)
        for parts, count in stream:
            matches = index.get(tuple(parts[h][c] for h, c in reader))
            if matches:
                for row, times in matches.items():
                    joined = list(parts)
                    joined[m] = row
                    out.append((tuple(joined), count * times))
            elif dead is not None:
                dead.append(parts)
        self.work += len(stream) + len(out)
        return out

    def _scan(
        self, op: _Operator, stream: list[tuple[Parts, int]], dead: list[Parts] | None = None
    ) -> list[tuple[Parts, int]]:
        """A nested-loop join: every row of the input is compared (cost grows with its size)."""
        out = []
        rows, m, columns = self.rows[op.input], op.input, op.columns
        for parts, count in stream:
            key = tuple(parts[h][c] for h, c in op.prefix_columns)
            found = len(out)
            for row, times in rows.items():
                if tuple(row[c] for c in columns) == key:
                    joined = list(parts)
                    joined[m] = row
                    out.append((tuple(joined), count * times))
            if dead is not None and len(out) == found:
                dead.append(parts)
        self.work += len(stream) * (1 + len(rows)) + len(out)
        return out

    def _run(
        self,
        i: int,
        stream: list[tuple[Parts, int]],
        start: int,
        stop: int,
        profile: tuple[list[int], list[float]] | None,
        lookups: bool = False,
        sign: int = 1,
        quiet: bool = False,
    ) -> list[tuple[Parts, int]]:
        """Operators ``start`` .. ``stop - 1`` of pipeline i over ``stream``.

        ``quiet``: a cache's miss being computed, or an XJoin subresult being built: no
        cache is maintained or observed on the way (the caller already did at ``start``).
        """
        ops = self._ops[i]
        pos = start
        while pos < stop and stream:
            if not quiet:
                maintain = self._maintain[i].get(pos)
                if maintain:
                    self._cache_update(i, maintain, stream, sign)
                observe = self._observe[i].get(pos)
                if observe:
                    for c, reader in observe:
                        for parts, _ in stream:
                            self.profiler.probe_key(c, self._key(parts, reader))
            cache = self._lookup[i].get(pos) if lookups else None
            if cache is not None:
                stream = self._through_cache(cache, stream)
                pos = cache[0].end + 1
                continue
            watch = None if quiet else self._watch[i].get(pos)
            dead: list[Parts] | None = [] if watch else None
            if profile is not None:
                before = self._clock()
                profile[0][pos] += len(stream)
                stream = self._join(ops[pos], stream, dead)
                profile[1][pos] += self._clock() - before
            else:
                stream = self._join(ops[pos], stream, dead)
            if dead:
                self._evict(watch, dead)
            pos += 1
        if pos == stop == self.n - 1:
            if profile is not None:
                profile[0][self.n - 1] += len(stream)
            maintain = None if quiet else self._maintain[i].get(pos)
            if maintain and stream:  # section 6: a CacheUpdate point at the pipeline's output
                self._cache_update(i, maintain, stream, sign)
        return stream

    def _through_cache(
        self, cache: tuple[Candidate, CacheStore, tuple], stream: list[tuple[Parts, int]]
    ) -> list[tuple[Parts, int]]:
        c, store, reader = cache
        segment = c.segment
        sampled = self._random.random() < self.settings.profile_probability
        out = []
        for parts, count in stream:
            key = self._key(parts, reader)
            before = self._clock() if sampled else 0.0
            value = store.probe(key)
            if sampled:  # miss_prob observed on the sampled probes: unbiased, and cheap
                self.profiler.probe_outcome(c, value is not None)
            self.cache_probes += 1
            self.cache_hits += value is not None
            hit = value is not None
            if value is None:
                computed = self._run(c.pipeline, [(parts, 1)], c.start, c.end + 1, profile=None, quiet=True)
                value = {}
                for joined, times in computed:
                    partial = self._partial(joined, c.members)
                    value[partial] = value.get(partial, 0) + times
                before = self._clock() if sampled else 0.0
                store.create(key, value)
                self.work += 1 + len(value)
                if sampled:
                    self.profiler.update_cost_sample(self._clock() - before, 1 + len(value))
            else:
                self.work += 1 + len(value)
            for partial, times in value.items():
                joined = list(parts)
                for m in segment:
                    joined[m] = partial[m]
                out.append((tuple(joined), count * times))
            if sampled and hit:
                # A hit's cost includes handing on its tuples, as an operator's c_ij does.
                self.profiler.probe_cost_sample(self._clock() - before, 1 + len(value))
        return out

    def _cache_update(
        self,
        i: int,
        maintain: list[tuple[CacheStore, tuple, tuple | None]],
        stream: list[tuple[Parts, int]],
        sign: int,
    ) -> None:
        """CacheUpdate U_l (section 3.2) in pipeline i: the stream here is the cached segment's delta."""
        for store, reader, projection in maintain:
            # update_cost is measured here on a sample, where the upkeep that cost(C) charges
            # is spent.
            sampled = self._timer is not None and self._random.random() < self.settings.profile_probability
            before = self._clock() if sampled else 0.0
            if projection is None:
                # The stream holds exactly the segment's inputs (the prefix invariant), so
                # each composite is the partial tuple the store keeps.
                for parts, count in stream:
                    store.change(self._key(parts, reader), parts, sign * count)
            else:
                # Section 6: inputs outside the segment joined first, so a segment tuple comes
                # once per partner it found there; each is applied once, with its own
                # multiplicity (the updated row counts once, the others as their relations hold
                # them).
                members, others = projection
                seen = set()
                for parts, _ in stream:
                    partial = tuple(None if k in others else parts[k] for k in range(self.n))
                    if partial in seen:
                        continue
                    seen.add(partial)
                    count = 1
                    for k in members:
                        if k != i:
                            count *= self.rows[k][partial[k]]
                    store.change(self._key(parts, reader), partial, sign * count)
            self.work += len(stream)
            if sampled:
                self.profiler.update_cost_sample(self._clock() - before, len(stream))

    def _evict(self, watch: list[tuple[CacheStore, tuple | None]], dead: list[Parts]) -> None:
        """Section 6 (ours): tuples that died at a watched operator took segment tuples with
        them that the CacheUpdate point will not see; their entries go (every entry, where
        the key is not bound yet)."""
        for store, reader in watch:
            if reader is None:
                store.clear()
                continue
            for parts in dead:
                store.evict(self._key(parts, reader))
        self.work += len(dead)

    def _process(self, i: int, row: Row, sign: int) -> Delta:
        """One update through its pipeline, then into its relation."""
        self.updates += 1
        if self._rates:  # the Profiler's rate counter, inline (``Profiler.note_update``)
            self._arrivals[i] += 1
            if self.updates >= self._roll_at:
                self.profiler.roll()
                self._roll_at += self.profiler.rate_window
        base = tuple(row if k == i else None for k in range(self.n))
        profiled = self._profiles and self._random.random() < self.settings.profile_probability
        profile = ([0] * self.n, [0.0] * (self.n - 1)) if profiled else None
        out = self._run(i, [(base, 1)], 0, self.n - 1, profile, lookups=not profiled, sign=sign)
        if profile is not None:
            self.profiler.record_profiled(i, *profile)
        self._store(i, row, sign)
        delta = [(tuple(parts[h][c] for h, c in self._outputs), sign * count) for parts, count in out]
        # The Re-optimizer is asked only when enough was observed or its deadline came
        # (``Reoptimizer.tick``): most updates cost it two comparisons.
        now = self.updates if self._by_updates else self._clock()
        reoptimizer = self.reoptimizer
        if now >= reoptimizer.deadline or self.profiler.observations >= reoptimizer.wake:
            if reoptimizer.tick(now, self._distinct_keys):
                self._sync()
        return delta

    def _store(self, i: int, row: Row, sign: int) -> None:
        rows = self.rows[i]
        left = rows.get(row, 0) + sign
        if left < 0:
            raise ValueError(f"{self.spec.aliases[i]}: deleting a row it does not hold: {row!r}")
        if left:
            rows[row] = left
        else:
            del rows[row]
        for columns, index in self._input_indexes[i]:
            key = tuple(row[c] for c in columns)
            bucket = index.setdefault(key, {})
            count = bucket.get(row, 0) + sign
            if count:
                bucket[row] = count
            else:
                del bucket[row]
                if not bucket:
                    del index[key]
        for columns, counts in self._key_counts[i]:
            key = tuple(row[c] for c in columns)
            count = counts.get(key, 0) + sign
            if count:
                counts[key] = count
            else:
                del counts[key]
        self.work += 1

    def _distinct_keys(self, c: Candidate) -> float:
        """Entries a cache would hold, for section 5's memory requirement: the distinct key
        values its first segment input has (ours; the paper counts distinct probe keys with
        its Bloom filter). A probed key joining nothing also takes an entry, so this is an
        estimate, not a bound."""
        return float(len(self._keys_of[c]))

    # --- the input side -------------------------------------------------------------

    def apply(
        self,
        input_: int | str,
        inserts: Iterable[Row] = (),
        deletes: Iterable[Row] = (),
        data_until: float | None = None,
    ) -> Delta:
        """A committed batch of one input, in order: deletes, inserts (a latest input's
        insert of a held key replaces its row), then the window's expiries."""
        i = input_ if isinstance(input_, int) else self.spec.input_index(input_)
        deletes = [tuple(row) for row in deletes]
        inserts = [tuple(row) for row in inserts]
        self._check_batch(i, inserts, deletes)
        delta: Delta = []
        for row in deletes:
            if self._latest[i] is not None:
                del self._latest[i][self._latest_key(i, row)]
            delta += self._process(i, row, -1)
        window = self.spec.inputs[i].window
        for row in inserts:
            latest = self._latest[i]
            if latest is not None:
                key = self._latest_key(i, row)
                old = latest.get(key)
                if old == row:
                    continue
                if old is not None:
                    delta += self._process(i, old, -1)
                latest[key] = row
            delta += self._process(i, row, +1)
            if window is not None:
                self._windows[i].append((data_until if data_until is not None else 0.0, row))
                if window.kind == "rows":
                    while len(self._windows[i]) > window.size:
                        delta += self._process(i, self._windows[i].popleft()[1], -1)
        if window is not None and window.kind == "seconds" and data_until is not None:
            delta += self.expire(i, data_until)
        return delta

    def restore(self, input_: int | str, rows: Iterable[Row], data_until: float | None = None) -> None:
        """Rows an input held before this executor started (its committed state at the
        version the view absorbed, read back after a restart), in arrival order: they join
        the relations and windows without producing a view delta, which the view already
        holds. Only before the first ``apply``: a cache must never see a change it was not
        maintained for, so complete (XJoin) subresults are computed again afterwards."""
        if self.updates:
            raise RuntimeError("restore is for the state before the first update; apply changes it afterwards")
        i = input_ if isinstance(input_, int) else self.spec.input_index(input_)
        rows = [tuple(row) for row in rows]
        self._check_batch(i, rows, [])
        window, latest = self.spec.inputs[i].window, self._latest[i]
        for row in rows:
            if latest is not None:
                key = self._latest_key(i, row)
                old = latest.get(key)
                if old == row:
                    continue
                if old is not None:
                    self._store(i, old, -1)
                latest[key] = row
            self._store(i, row, +1)
            if window is not None:
                self._windows[i].append((data_until if data_until is not None else 0.0, row))
                if window.kind == "rows" and len(self._windows[i]) > window.size:
                    self._store(i, self._windows[i].popleft()[1], -1)
        if window is not None and window.kind == "seconds" and data_until is not None:
            queue = self._windows[i]
            while queue and queue[0][0] <= data_until - window.size:
                self._store(i, queue.popleft()[1], -1)
        if self.settings.mode == "xjoin":
            self.stores.clear()
            self._sync()
        self.work = 0

    def _check_batch(self, i: int, inserts: list[Row], deletes: list[Row]) -> None:
        """Refuse a batch that would fail half-way, before anything changes: a window's rows
        leave only by expiring, and a delete must name a row the input holds (for a latest
        input, the key's current row)."""
        alias, width = self.spec.aliases[i], len(self.shapes[i].columns)
        for row in (*inserts, *deletes):
            if len(row) != width:
                raise ValueError(f"{alias}: a row has {len(row)} values, the input has {width} columns")
        if deletes and self.spec.inputs[i].window is not None:
            raise ValueError(f"{alias}: rows leave a window by expiring; a windowed input takes no deletes")
        wanted: dict[Row, int] = {}
        for row in deletes:
            wanted[row] = wanted.get(row, 0) + 1
        for row, count in wanted.items():
            latest = self._latest[i]
            held = self.rows[i].get(row, 0) if latest is None else int(latest.get(self._latest_key(i, row)) == row)
            if count > held:
                raise ValueError(f"{alias}: deleting a row it does not hold: {row!r}")

    def expire(self, input_: int | str, data_until: float) -> Delta:
        """Rows of a seconds window older than ``data_until - size`` leave the join."""
        i = input_ if isinstance(input_, int) else self.spec.input_index(input_)
        window = self.spec.inputs[i].window
        delta: Delta = []
        if window is None or window.kind != "seconds":
            return delta
        queue = self._windows[i]
        while queue and queue[0][0] <= data_until - window.size:
            delta += self._process(i, queue.popleft()[1], -1)
        return delta

    def _latest_key(self, i: int, row: Row) -> Hashable:
        return tuple(row[c] for c in self._key_columns[i])

    # --- what operators and tests read ---------------------------------------------

    def drop_cache(self, name: str) -> None:
        """Drop a used cache now (its group's store goes); in adaptive mode the next
        selection may bring it back, a forced plan (static, xjoin) loses it for good."""
        c = self.by_name[name]
        self.reoptimizer.drop(c.group, self.updates)
        self._sync()

    def cache_figures(self) -> list[CacheFigures]:
        aliases = self.spec.aliases
        figures = []
        for group, store in self.stores.items():
            users = [c for c in self.reoptimizer.used if c.group == group]
            # Named after every candidate of its group, used or not: a shared store keeps its
            # name (and its metric series) whichever of them use it now.
            named = sorted(c.name(aliases) for c in self.candidates if c.group == group)
            figures.append(
                CacheFigures(
                    name=" + ".join(named),
                    pipelines=tuple(aliases[c.pipeline] for c in users),
                    entries=len(store.table),
                    tuples=store.tuples,
                    capacity=store.capacity,
                    probes=store.probes,
                    hits=store.hits,
                    evictions=store.evictions,
                    bytes=store_bytes(store, len(group[0])),
                )
            )
        return figures

    def relation(self, input_: int | str) -> Mapping[Row, int]:
        i = input_ if isinstance(input_, int) else self.spec.input_index(input_)
        return self.rows[i]
