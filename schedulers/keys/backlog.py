"""A latest table's pending updates as the keys each one holds: the table-level simulator's
key queue (``schedulers.simulator``).

The live pending store (loader/pending/keyed.py) keeps a latest table's queue as its
updates, in sequence order, each holding the values whose *place* it is: a new value of a
key goes where the key policy says (``schedulers.keys.queue.place``: its own update at the
tail, the waiting value's update, the head, or LINECUTTING-BOUNDED's advanced place), and a
batch takes whole updates from the head, as many as hold at most ``max_keys_per_batch``
keys. So how many updates a batch takes, how many keys it loads and how far it moves the
table's freshness all follow from where the policy put each key. This class is that
bookkeeping over key ids alone (no rows, no spilling, no failed batches: the simulator has
none), deciding with the same pure rule and estimates (``place``, ``KeyRates``) as the live
store, so a simulated table's batches are the ones the service would take.

What it reports is what the table-level policies read (``TableState.set_keys``): the keys
waiting, and the updates and keys of the next batch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from schedulers.keys.queue import KeyRates, ResidentIntervals, learned_cost, place


@dataclass(frozen=True, slots=True)
class TakenKey:
    """A key a batch loads: its value's arrival (it reflects every earlier one) and how
    long the key waited in the queue (its queue staleness when taken, section 5.1)."""

    key: Hashable
    arrived: float
    waited: float


class KeyBacklog:
    """One latest table's pending updates (by position, 0, 1, ... in release order) and the
    waiting keys each holds, placed by the table's key policy."""

    __slots__ = (
        "policy",
        "max_keys",
        "rates",
        "cost_per_key",
        "cuts",
        "superseded",
        "_slots",
        "_positions",
        "_virtuals",
        "_head",
        "_next",
        "_index",
        "_first",
        "_arrived",
        "_values",
        "_serving_since",
        "_intervals",
    )

    def __init__(self, policy: str, max_keys: int | None = None) -> None:
        self.policy = policy
        self.max_keys = max_keys
        #: Per-key intervals from the first arrival on (the live store's origin too).
        self.rates: KeyRates | None = None
        #: c of section 5.3, as the live store estimates it: an EWMA of a batch's seconds per key.
        self.cost_per_key = 0.0
        self.cuts = 0
        self.superseded = 0
        #: Each pending update's waiting keys (a dict as an ordered set).
        self._slots: dict[int, dict[Hashable, None]] = {}
        #: Pending positions in queue order from ``_head`` on, and each one's virtual join
        #: time (LINECUTTING-BOUNDED, never below an older update's: sorted, for bisection).
        self._positions: list[int] = []
        self._virtuals: list[float] = []
        self._head = 0
        self._next = 0
        self._index: dict[Hashable, int] = {}
        self._first: dict[Hashable, float] = {}
        self._arrived: dict[Hashable, float] = {}
        self._values = 0
        self._serving_since: float | None = None
        #: linecutting-faster's n (the waiting keys' intervals, sorted); None for other policies.
        self._intervals = ResidentIntervals() if policy == "linecutting-faster" else None

    # -- what the driver calls -----------------------------------------------------
    def arrive(self, keys: Iterable[Hashable], at: float) -> int:
        """The next update arrives at ``at`` with values of ``keys`` (a key twice: its later
        value wins); returns its position. Its values go where the policy says."""
        own = self._next
        self._next += 1
        if self.rates is None:
            self.rates = KeyRates(origin=at)
        rates = self.rates
        rows = list(keys)
        ordered = list(dict.fromkeys(reversed(rows)))[::-1]  # each key once, at its last row
        self.superseded += len(rows) - len(ordered)
        head = self._positions[self._head] if self._head < len(self._positions) else None
        virtual = self._virtuals[-1] if self._head < len(self._virtuals) else -math.inf
        stay: dict[Hashable, None] = {}
        for key in ordered:
            interval = rates.observe(key, at)
            waiting = self._index.get(key)
            if self._intervals is not None:  # section 5.3 read as "the faster updaters in the queue"
                residents = self._intervals.arrive(key, interval)
            else:
                residents = len(self._index) - (waiting is not None)
            where = place(
                self.policy, waiting=waiting is not None, slow=KeyRates.slow(interval, residents, self.cost_per_key)
            )
            target = own
            if where == "front" and head is not None:
                target = head  # section 5.3: a slow key cuts into the oldest waiting update
                self.cuts += 1
            elif where == "keep" and waiting is not None:
                target = waiting  # section 5.2, IN-PLACE: the waiting value's place
            elif where == "advance":
                joined = at - rates.advance(interval)
                ahead = self._advanced(joined)
                if ahead is not None:  # LINECUTTING-BOUNDED: the update it would have joined
                    target = ahead
                    self.cuts += 1
                else:
                    virtual = max(virtual, joined)
            if waiting is not None:  # the waiting value is overwritten
                del self._slots[waiting][key]
                self.superseded += 1
                self._values -= 1
            else:
                self._first[key] = at
            if target == own:
                if where != "advance":
                    virtual = max(virtual, at)
                stay[key] = None
            else:
                self._slots[target][key] = None
            self._index[key] = target
            self._arrived[key] = at
            self._values += 1
        self._slots[own] = stay
        self._positions.append(own)
        self._virtuals.append(virtual)
        return own

    def batch(self) -> tuple[int, int]:
        """(updates, keys) of the next batch: updates from the head holding at most
        ``max_keys`` keys, at least one (an update is never split), as the live store's
        ``LatestQueue.limit``."""
        if self.max_keys is None:
            return len(self._positions) - self._head, self._values
        count = total = 0
        for i in range(self._head, len(self._positions)):
            size = len(self._slots[self._positions[i]])
            if count and total + size > self.max_keys:
                break
            count += 1
            total += size
        return count, total

    def take(self, count: int, at: float) -> list[TakenKey]:
        """The ``count`` updates at the head leave for a batch started at ``at``."""
        taken: list[TakenKey] = []
        rates = self.rates
        if self._serving_since is None:
            self._serving_since = at
        for _ in range(count):
            position = self._positions[self._head]
            self._head += 1
            for key in self._slots.pop(position):
                del self._index[key]
                if self._intervals is not None:
                    self._intervals.discard(key)
                first = self._first.pop(key)
                waited = at - first
                if rates is not None and first >= self._serving_since:  # (LINECUTTING-BOUNDED's W_f)
                    rates.served(key, waited)
                taken.append(TakenKey(key, self._arrived[key], waited))
        self._values -= len(taken)
        if self._head > 64 and self._head * 2 > len(self._positions):
            del self._positions[: self._head]
            del self._virtuals[: self._head]
            self._head = 0
        return taken

    def loaded(self, keys: int, seconds: float) -> None:
        """A batch of ``keys`` keys took ``seconds``: c learns, as in the live store."""
        self.cost_per_key = learned_cost(self.cost_per_key, keys, seconds)

    # -- what readers ask --------------------------------------------------------------
    @property
    def waiting_keys(self) -> int:
        return len(self._index)

    @property
    def pending_updates(self) -> int:
        return len(self._positions) - self._head

    def keys_in(self, position: int) -> list[Hashable]:
        """The keys whose value waits in the update at ``position`` (tests, tools)."""
        return list(self._slots.get(position, ()))

    def _advanced(self, joined: float) -> int | None:
        """LINECUTTING-BOUNDED's place for a key joining as of ``joined``: the oldest pending
        update holding a value that joined after it (None: its own)."""
        i = bisect.bisect_right(self._virtuals, joined, lo=self._head)
        return self._positions[i] if i < len(self._positions) else None
