"""Update queues of a keyed latest-state table: which waiting key loads next.

UpStream (Moga, Botan, Tatbul; ../shared/seeds/001_*) section 5: for a table where only the
newest value per key matters, a new value overwrites the one still waiting for its key,
and the order in which keys leave the queue decides staleness. Three policies, named as
in the paper:

- ``fifo-uq`` (section 5.2, FIFO update queue): the overwritten key moves to the tail;
- ``in-place`` (section 5.2, IN-PLACE): the key keeps its place and its first-enqueue
  time; optimal when every key updates at the same rate (the section's proof);
- ``linecutting`` (section 5.3, LINECUTTING): an arriving key whose update rate u_k
  satisfies u_k < 1 / (c * n) cuts to the front, else IN-PLACE applies; c is the cost of
  loading one key, n the keys waiting when k updated.

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
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

#: The update-queue policies of a latest table, named as in the paper.
KEY_POLICIES: tuple[str, ...] = ("fifo-uq", "in-place", "linecutting")
DEFAULT_KEY_POLICY = "in-place"
#: Smoothing of the per-key inter-arrival estimate (as PERIOD_EWMA_GAIN for tables).
RATE_EWMA_GAIN = 0.125

V = TypeVar("V")

#: Where a key's new value goes: its own place at the tail, the place its waiting value
#: holds, or the front of the queue.
Place = Literal["tail", "keep", "front"]


def place(policy: str, *, waiting: bool, slow: bool) -> Place:
    """The policies' one decision, shared by :class:`KeyQueue` and the live pending store
    (loader/pending/keyed.py): where a new value of a key goes."""
    if policy == "linecutting" and slow:
        return "front"  # section 5.3: a slow updater cuts into the front
    if waiting and policy != "fifo-uq":
        return "keep"  # section 5.2, IN-PLACE (and LINECUTTING otherwise): the old value's place
    return "tail"  # a key not waiting; FIFO-UQ's overwritten key (section 5.2)


class KeyRates:
    """Each key's estimated time between updates (1 / u_k) and section 5.3's slowness test.

    The estimates are described in the module docstring; one entry per key ever seen.
    """

    __slots__ = ("origin", "_last", "_interval")

    def __init__(self, origin: float = 0.0) -> None:
        self.origin = origin
        self._last: dict[Hashable, float] = {}
        self._interval: dict[Hashable, float] = {}

    def observe(self, key: Hashable, at: float) -> float:
        """An update of ``key`` at ``at``; its interval estimate after it."""
        last = self._last.get(key)
        length = max(0.0, at - (self.origin if last is None else last))
        self._last[key] = at
        estimate = self._interval.get(key)
        estimate = length if estimate is None else estimate + RATE_EWMA_GAIN * (length - estimate)
        self._interval[key] = estimate
        return estimate

    def interval(self, key: Hashable) -> float | None:
        return self._interval.get(key)

    @staticmethod
    def slow(interval: float, residents: int, cost_per_key: float) -> bool:
        """Section 5.3's test u_k < 1 / (c * n), as 1/u_k > c * n; never before c is known."""
        return cost_per_key > 0.0 and residents > 0 and interval > cost_per_key * residents


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

    __slots__ = ("policy", "cost_per_key", "rates", "_waiting", "_oldest", "_tokens", "cuts")

    def __init__(self, policy: str = DEFAULT_KEY_POLICY, *, cost_per_key: float = 0.0, origin: float = 0.0) -> None:
        if policy not in KEY_POLICIES:
            raise ValueError(f"unknown key policy {policy!r}; choose one of {', '.join(KEY_POLICIES)}")
        self.policy = policy
        self.cost_per_key = cost_per_key
        self.rates = KeyRates(origin)
        self._waiting: OrderedDict[Hashable, Waiting[V]] = OrderedDict()
        #: (first_enqueued, key) of every key that became resident; stale entries are
        #: skipped lazily, so the oldest waiting key is found in O(log n) for any policy.
        self._oldest: list[tuple[float, int, Hashable]] = []
        self._tokens = 0
        #: Arrivals that cut to the front (LINECUTTING), for the figures.
        self.cuts = 0

    # -- what the owner calls --------------------------------------------------
    def offer(self, key: Hashable, value: V, at: float) -> V | None:
        """Queue ``value`` for ``key`` arriving at ``at``; the value it overwrote, if any."""
        interval = self.rates.observe(key, at)
        entry = self._waiting.get(key)
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

    def take(self, max_keys: int | None = None) -> list[Waiting[V]]:
        """Up to ``max_keys`` keys (all when None) from the head, in the policy's order."""
        count = len(self._waiting) if max_keys is None else min(max_keys, len(self._waiting))
        return [self._waiting.popitem(last=False)[1] for _ in range(count)]

    def set_cost(self, cost_per_key: float) -> None:
        self.cost_per_key = cost_per_key

    # -- what readers ask ------------------------------------------------------
    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[Waiting[V]]:
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
