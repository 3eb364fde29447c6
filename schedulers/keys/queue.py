"""Update queues of a keyed latest-state table: which waiting key loads next.

UpStream (Moga, Botan, Tatbul; ../shared/seeds/001_*) section 5: for a table where only the
newest value per key matters, a new value overwrites the one still waiting for its key,
and the order in which keys leave the queue decides staleness. The paper's three policies,
named as in the paper, and a variant of the third:

- ``fifo-uq`` (section 5.2, FIFO update queue): the overwritten key moves to the tail;
- ``in-place`` (section 5.2, IN-PLACE): the key keeps its place and its first-enqueue
  time; optimal when every key updates at the same rate (the section's proof);
- ``linecutting`` (section 5.3, LINECUTTING): an arriving key whose update rate u_k
  satisfies u_k < 1 / (c * n) cuts to the front, else IN-PLACE applies; c is the cost of
  loading one key, n the keys waiting when k updated;
- ``linecutting-faster`` (section 5.3, another reading of n): as ``linecutting``, with n
  the waiting keys that update *faster* than k, as the section's prose has it ("all other
  more faster updaters that are in the queue"), not every waiting key. When every key
  updates at one rate no key is faster than another, n = 0, no key cuts, and the policy is
  IN-PLACE, as the paper says both must then be (docs/latest-tables.md, "What the papers
  leave open");
- ``linecutting-bounded`` (ours, after section 5.3): a key joining the queue cuts only
  part of the line, as far as its update interval makes it worth it and never more than
  a round; see "LINECUTTING-BOUNDED" below.

Pure (no I/O, no clock: every call says what time it is), so the simulator and the live
pending store run the same object. Whatever the policy, a key's queue staleness starts at
its *first* enqueue (section 5.1): FIFO-UQ moves the key back, it does not forgive it the
time already waited.

How LINECUTTING's inputs are estimated online (docs/latest-tables.md says the same):

- u_k: 1 / (EWMA of the key's inter-arrival times), gain 1/8 as the table period's
  estimate (schedulers/model.py). A key's first arrival has no interval yet; it counts
  the time since the queue's origin as one, so a key never seen in a long run is slow,
  which is what the paper's "immediately identify the slow updaters when they arrive"
  needs. The rule compares intervals, not rates: 1/u_k > c * n, with no division.
- c: given by the caller and kept current with ``set_cost``. The simulator knows it; the
  live service passes its measured seconds per key of the table's loads (a batch's
  duration over its keys, so a batch's fixed cost is spread over the keys it carries).
  Until c is known (0), LINECUTTING behaves as IN-PLACE rather than letting every key cut.

LINECUTTING-BOUNDED, and where it departs from section 5.3. The paper's test is per key:
k is slow if the n keys waiting could all be loaded before k updates again. Three things
go wrong with it (BENCHMARKS.md, section "keys"). It does not count the other slow keys,
which cut too: once their own arrivals approach the loader's rate every slow arrival
cuts, and the fast keys wait behind a stream of cutters (0.44x IN-PLACE at 8 slow keys
of 10). A cut is all or nothing, to the very front, ahead of keys that may have waited a
whole round. And c * n is a poor measure of the round: in a short queue (below load 1)
nearly every key passes the test and the newest key is served first; with batches n
drops by a batch at each take, and c, a batch's duration over its keys, jumps when
batches are small.

The variant asks how long each key *should* wait. Take section 5.1's sawtooth for a key
that, once stale, waits W_k to be loaded and then stays fresh I_k = 1/u_k on average: its
queue staleness is (W_k^2 / 2) / (I_k + W_k). Minimising the sum over keys while the
loader is busy (sum of c / (I_k + W_k) = 1) gives, by Lagrange, W_k^2 / 2 + W_k I_k = K,
one K for all keys. Keys that update faster than they are served (they coalesce) all
wait about the same, W_f = sqrt(2 K), so

    W_k = sqrt(I_k^2 + W_f^2) - I_k,

and a key joining the queue at t should be served A_k = W_f - W_k before a fast key
joining at t: it is placed as if it had joined at t - A_k (``KeyRates.advance``; ties in
the order of joining), and a waiting key keeps its place when a new value arrives
(IN-PLACE). A_k = W_f + I_k - sqrt(I_k^2 + W_f^2) is below both W_f and I_k: about I_k
for a fast key, about W_f - W_f^2 / (2 I_k) for a slow one: a slow key cuts nearly a
whole round, never more. With one rate for all keys every A_k is about the same and the order
is about IN-PLACE's.

W_f is measured rather than taken as c * n: an EWMA (gain 1/8) of the waits of keys
taken after waiting longer than their own interval estimate (``KeyRates.served``; the
owner reports them, ``take(at=...)`` here). Until one is, W_f is 0 and the policy is
IN-PLACE. So the variant needs neither c nor n: with c * n in W_f's place it did as well
in the paper's setting, but lost up to a fifth to IN-PLACE over the first 5,000 arrivals
of the benchmark's batched one (1,000 keys, 20 to 50 keys a batch).

The bound. k lands ahead of a waiting key j only if k joined less than A_k after j (then
t_k - A_k < t_j - A_j), so k never passes a j that has waited min(W_f, I_k). And since
A_k < I_k, a key passes j only if it joins within less than its own update interval of
j: about once per other key. A key therefore waits about two rounds at most (the keys
ahead of it when it joined, then each other key once) however many keys cut, where
LINECUTTING can postpone a fast key for as long as slow keys keep arriving.

Same per-key estimate u_k as LINECUTTING; O(log n) for a key joining (a heap of virtual
join times), O(1) for a key already waiting and per key taken. The live pending store
places values into updates, not keys into a heap: ``place`` tells it "advance" for a key
joining under this policy; a store that does not place by advance leaves such a value in
its own update, which is IN-PLACE.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, get_args

from sortedcontainers import SortedList

#: The update-queue policies of a latest table: the paper's three, then our LINECUTTING variant.
KeyPolicy = Literal["fifo-uq", "in-place", "linecutting", "linecutting-faster", "linecutting-bounded"]
#: The readings of section 5.3's rule that cut to the front (the slowness test decides).
FRONT_CUTTERS = ("linecutting", "linecutting-faster")
KEY_POLICIES: tuple[str, ...] = get_args(KeyPolicy)
DEFAULT_KEY_POLICY: KeyPolicy = "in-place"
#: Smoothing of the per-key inter-arrival estimate (as PERIOD_EWMA_GAIN for tables).
RATE_EWMA_GAIN = 0.125

V = TypeVar("V")

#: Where a key's new value goes: its own place at the tail, the place its waiting value
#: holds, the front of the queue, or (LINECUTTING-BOUNDED, a key joining) the place it
#: would hold had it joined ``KeyRates.advance`` seconds earlier.
Place = Literal["tail", "keep", "front", "advance"]


def place(policy: str, *, waiting: bool, slow: bool) -> Place:
    """The policies' one decision, shared by :class:`KeyQueue` and the live pending store
    (loader/pending/keyed.py): where a new value of a key goes."""
    if policy in FRONT_CUTTERS and slow:
        return "front"  # section 5.3: a slow updater cuts into the front
    if waiting and policy != "fifo-uq":
        return "keep"  # section 5.2, IN-PLACE (and both LINECUTTINGs otherwise): the old value's place
    if policy == "linecutting-bounded":
        return "advance"  # ours: a joining key cuts part of the line (module docstring)
    return "tail"  # a key not waiting; FIFO-UQ's overwritten key (section 5.2)


def learned_cost(cost_per_key: float, keys: int, seconds: float) -> float:
    """c of section 5.3 after a batch of ``keys`` keys took ``seconds``: an EWMA (gain 1/8)
    of a batch's seconds per key, its first sample taken whole; unchanged by a batch that
    reports no keys or no duration (one set aside). The one rule of the live store and both
    simulators."""
    if not (keys and seconds > 0.0):
        return cost_per_key
    sample = seconds / keys
    return sample if cost_per_key == 0.0 else cost_per_key + RATE_EWMA_GAIN * (sample - cost_per_key)


class KeyRates:
    """Each key's estimated time between updates (1 / u_k) and section 5.3's slowness test;
    and LINECUTTING-BOUNDED's round W_f and advance.

    The estimates are described in the module docstring; one entry per key ever seen.
    """

    __slots__ = ("origin", "_last", "_interval", "fast_wait", "known")

    def __init__(self, origin: float = 0.0, known: Mapping[Hashable, float] | None = None) -> None:
        self.origin = origin
        self._last: dict[Hashable, float] = {}
        self._interval: dict[Hashable, float] = {}
        #: Each key's true mean interval, when the caller knows it (a simulated workload's
        #: rates: section 5.3 as the paper states it, with u_k given); estimated otherwise.
        self.known = known
        #: W_f: how long keys that update faster than they are served wait, an EWMA of
        #: the waits ``served`` reports; 0 until the first.
        self.fast_wait = 0.0

    def observe(self, key: Hashable, at: float) -> float:
        """An update of ``key`` at ``at``; its interval estimate after it."""
        last = self._last.get(key)
        length = max(0.0, at - (self.origin if last is None else last))
        self._last[key] = at
        if self.known is not None and key in self.known:
            self._interval[key] = self.known[key]
            return self.known[key]
        estimate = self._interval.get(key)
        estimate = length if estimate is None else estimate + RATE_EWMA_GAIN * (length - estimate)
        self._interval[key] = estimate
        return estimate

    def interval(self, key: Hashable) -> float | None:
        return self._interval.get(key)

    def served(self, key: Hashable, waited: float) -> None:
        """``key`` was taken for loading after waiting ``waited`` seconds (its queue
        staleness then). A key that waited longer than its own interval estimate is a
        fast one, and its wait a sample of W_f."""
        interval = self._interval.get(key)
        if interval is not None and waited > interval:
            w = self.fast_wait
            self.fast_wait = waited if w == 0.0 else w + RATE_EWMA_GAIN * (waited - w)

    def advance(self, interval: float) -> float:
        """LINECUTTING-BOUNDED: how much earlier than its arrival a key joining the queue
        is placed, A = W_f - W with W = sqrt(I^2 + W_f^2) - I for its interval I (module
        docstring). Below both W_f and I; 0 until W_f is known. Written
        W_f - W_f^2 / (I + sqrt(I^2 + W_f^2)), without the cancellation for a key not seen
        in a long time."""
        w = self.fast_wait
        if not w > 0.0:
            return 0.0
        return min(interval, max(0.0, w - w * w / (interval + math.hypot(interval, w))))  # (rounding)

    @staticmethod
    def slow(interval: float, residents: int, cost_per_key: float) -> bool:
        """Section 5.3's test u_k < 1 / (c * n), as 1/u_k > c * n; never before c is known."""
        return cost_per_key > 0.0 and residents > 0 and interval > cost_per_key * residents


class ResidentIntervals:
    """The waiting keys' update interval estimates, sorted: ``linecutting-faster``'s n (how
    many waiting keys update faster than k) in O(log n). The owner says when a key starts or
    stops waiting and when its estimate changes; a count slightly off only moves a cut."""

    __slots__ = ("_sorted", "_of", "_ids")

    def __init__(self) -> None:
        self._sorted: SortedList = SortedList()
        self._of: dict[Hashable, tuple[float, int]] = {}
        self._ids = itertools.count()

    def set(self, key: Hashable, interval: float | None) -> None:
        self.discard(key)
        if interval is not None:
            entry = (interval, next(self._ids))
            self._of[key] = entry
            self._sorted.add(entry)

    def discard(self, key: Hashable) -> None:
        entry = self._of.pop(key, None)
        if entry is not None:
            self._sorted.remove(entry)

    def faster(self, key: Hashable, interval: float) -> int:
        """Waiting keys other than ``key`` whose interval is shorter than ``interval``."""
        count = self._sorted.bisect_left((interval, -1))
        own = self._of.get(key)
        return count - (1 if own is not None and own[0] < interval else 0)

    def arrive(self, key: Hashable, interval: float) -> int:
        """``key`` updated with ``interval``: its n (the waiting keys faster than it), and
        its estimate recorded, as every queue of a latest table does on an arrival."""
        count = self.faster(key, interval)
        self.set(key, interval)
        return count

    def __len__(self) -> int:
        return len(self._of)


@dataclass(slots=True)
class Waiting(Generic[V]):
    """A key in the queue: its newest value and when it started waiting."""

    key: Hashable
    value: V
    #: Arrival time of the first value the loaded table does not reflect yet: queue
    #: staleness runs from here until the key is taken (section 5.1).
    first_enqueued: float
    #: Arrival time of ``value``.
    arrived: float
    #: Values this key's newest one overwrote while waiting (dropped by design).
    superseded: int = 0
    #: Tells this residency from an earlier one of the same key (the oldest-key heap).
    token: int = 0


class KeyQueue(Generic[V]):
    """The waiting keys of one latest table in the order the policy serves them."""

    __slots__ = (
        "policy",
        "cost_per_key",
        "rates",
        "_waiting",
        "_oldest",
        "_tokens",
        "cuts",
        "_joined",
        "_last_joined",
        "_intervals",
    )

    def __init__(
        self,
        policy: str = DEFAULT_KEY_POLICY,
        *,
        cost_per_key: float = 0.0,
        origin: float = 0.0,
        known_intervals: Mapping[Hashable, float] | None = None,
    ) -> None:
        if policy not in KEY_POLICIES:
            raise ValueError(f"unknown key policy {policy!r}; choose one of {', '.join(KEY_POLICIES)}")
        self.policy = policy
        self.cost_per_key = cost_per_key
        self.rates = KeyRates(origin, known_intervals)
        self._waiting: OrderedDict[Hashable, Waiting[V]] = OrderedDict()
        #: (first_enqueued, key) of every key that became resident; stale entries are
        #: skipped lazily, so the oldest waiting key is found in O(log n) for any policy.
        self._oldest: list[tuple[float, int, Hashable]] = []
        self._tokens = 0
        #: Arrivals that cut to the front (LINECUTTING) or ahead of at least one waiting key
        #: (LINECUTTING-BOUNDED), for the figures.
        self.cuts = 0
        #: LINECUTTING-BOUNDED's order: (virtual join time, token, key) of every waiting
        #: key, one entry per residency (pushed when the key joins, popped when it is
        #: taken); the ``_waiting`` dict's order is not used for this policy.
        self._joined: list[tuple[float, int, Hashable]] = []
        #: The latest virtual join time among waiting keys: its key is taken last, so it
        #: leaves only when the queue empties, and a key joining before it passes someone.
        self._last_joined = -math.inf
        #: linecutting-faster's n; None for the other policies (not kept).
        self._intervals = ResidentIntervals() if policy == "linecutting-faster" else None

    # -- what the owner calls --------------------------------------------------
    def offer(self, key: Hashable, value: V, at: float) -> V | None:
        """Queue ``value`` for ``key`` arriving at ``at``; the value it overwrote, if any."""
        interval = self.rates.observe(key, at)
        entry = self._waiting.get(key)
        if self._intervals is not None:  # section 5.3 read as "the faster updaters in the queue"
            residents = self._intervals.arrive(key, interval)
        else:
            residents = len(self._waiting) - (1 if entry is not None else 0)
        where = place(
            self.policy, waiting=entry is not None, slow=KeyRates.slow(interval, residents, self.cost_per_key)
        )
        replaced: V | None = None
        if entry is None:
            self._tokens += 1
            entry = Waiting(key=key, value=value, first_enqueued=at, arrived=at, token=self._tokens)
            self._waiting[key] = entry  # at the tail
            heapq.heappush(self._oldest, (at, entry.token, key))
            if where == "advance":
                joined = at - self.rates.advance(interval)
                heapq.heappush(self._joined, (joined, entry.token, key))
                if joined < self._last_joined:
                    self.cuts += 1  # ahead of the key that joined last, at least
                else:
                    self._last_joined = joined
        else:
            replaced = entry.value
            entry.value = value
            entry.arrived = at
            entry.superseded += 1
            if where == "tail":  # FIFO-UQ
                self._waiting.move_to_end(key)
        if where == "front":
            self._waiting.move_to_end(key, last=False)
            self.cuts += 1
        return replaced

    def take(self, max_keys: int | None = None, *, at: float | None = None) -> list[Waiting[V]]:
        """Up to ``max_keys`` keys (all when None) from the head, in the policy's order.
        With ``at``, the time they are taken, their waits go to ``rates.served``
        (LINECUTTING-BOUNDED's W_f; without them that policy stays IN-PLACE)."""
        count = len(self._waiting) if max_keys is None else min(max_keys, len(self._waiting))
        if self.policy != "linecutting-bounded":
            taken = [self._waiting.popitem(last=False)[1] for _ in range(count)]
        else:
            taken = [self._waiting.pop(heapq.heappop(self._joined)[2]) for _ in range(count)]
            if not self._waiting:
                self._last_joined = -math.inf
        if self._intervals is not None:
            for w in taken:
                self._intervals.discard(w.key)
        if at is not None:
            for w in taken:
                self.rates.served(w.key, at - w.first_enqueued)
        return taken

    def set_cost(self, cost_per_key: float) -> None:
        self.cost_per_key = cost_per_key

    # -- what readers ask ------------------------------------------------------
    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[Waiting[V]]:
        """The waiting keys in the order they would be taken."""
        if self.policy == "linecutting-bounded":
            return (self._waiting[key] for _, _, key in sorted(self._joined))
        return iter(self._waiting.values())

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def oldest_enqueued(self) -> float | None:
        """Earliest first-enqueue time among waiting keys (the largest queue staleness)."""
        heap = self._oldest
        while heap:
            at, token, key = heap[0]
            entry = self._waiting.get(key)
            if entry is not None and entry.token == token:
                return at
            heapq.heappop(heap)
        return None

    def update_interval(self, key: Hashable) -> float | None:
        """The key's estimated time between updates (1 / u_k), None before its first."""
        return self.rates.interval(key)
