"""A latest table's pending updates as an update queue (UpStream section 5).

The pending store keeps every table's acknowledged updates in sequence order (the WAL,
the application transaction and the freshness ledger all count updates). For a latest
table this module turns that FIFO into an update queue without breaking the order: each
waiting key has one value, in one update (its *place*), and a new value of the key is put
where the table's key policy says (``schedulers.keys.queue.place``, the same rule the
simulator runs):

- ``tail``: the new value stays in its own update, the newest (a key not waiting; FIFO-UQ);
- ``keep``: it moves into the place of the waiting value, which it overwrites (IN-PLACE);
- ``front``: it moves into the oldest waiting update, the head (LINECUTTING's slow keys);
- ``advance``: a key joining moves into the oldest update holding a value that joined
  after it, each value as of its arrival less its advance (LINECUTTING-BOUNDED,
  ``KeyRates.advance``): part of the line.

An overwritten value is *superseded*: dropped and counted. A batch takes updates from the
head, so a key's place decides when it loads, and ``max_keys_per_batch`` bounds a batch
by the keys its updates hold (an update is never split: its sequence number is the unit
of the application transaction).

Why this is still exactly once: a value moved into an older update is loaded with it, and
its own update may be committed later or not at all before a crash; the WAL then replays
the value again, and loading it again leaves the table as it was (an upsert of the same
value). The load keeps the newest value per key by arrival (``Update.arrived``), not by
the update it sits in, so a duplicate left by a spill or a failed batch is harmless too.
What the WAL replays coalesces by the same rules, into one value per key, the newest.

Values in a spilled update are not touched (rewriting segments would cost a disk write
per arrival): a new value of such a key stays in its own update and the spilled one is
dropped when the load keeps the newest (counted by the sink then).

Keys held by a quarantined update (a table without ``order_by``, ``hold``): loaded after
it, a later value of such a key would be overwritten once the quarantined value is retried
(a retry is a new arrival), so until an operator retries or discards the entry those
values wait, and the table's other keys keep loading. A held value leaves the queue: on
arrival it is taken out of its update, and values already queued when the update was
quarantined are excluded from theirs (``without_held`` filters them out of a batch; their
updates are closed, no value moves into or out of them). The newest value per held key
waits in memory, and is made durable beside the entry (``unsaved_of``, then
``BatchHandler.keep_held``) before a commit passes the update it came in, from when on
the WAL would not replay it. The operator's retry or discard submits one update (the
entry's values, or none); when that update arrives, the held values join it after its own
rows (``release_at``), so they load once, in arrival order, after the quarantined ones.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from loader.abc import HeldValue
from loader.core.evolution import conform_rows
from loader.core.updates import Update, arrival
from loader.durability.quarantine import HELD_ARRIVAL, HELD_SEQ
from loader.pending.spill.model import Item, QueueCache
from schedulers.keys.queue import DEFAULT_KEY_POLICY, KeyRates, ResidentIntervals, learned_cost, place
from schedulers.keys.staleness import StalenessFigures

log = logging.getLogger(__name__)

Key = tuple[Hashable, ...]


@dataclass(frozen=True)
class KeySpec:
    """What the pending store needs to know of a latest table."""

    key: tuple[str, ...]
    policy: str = DEFAULT_KEY_POLICY
    max_keys_per_batch: int | None = None
    #: The column whose larger value is newer (else the later arrival is).
    order_by: str | None = None


@dataclass(frozen=True)
class KeyBatch:
    """What the table-level policies read of a latest table's queue (``TableState.set_keys``)."""

    waiting_keys: int
    #: Values the next batch loads (one per key but for a rare second copy, below), and
    #: the updates at the head it takes (None: all, no ``max_keys_per_batch``).
    keys: int
    updates: int | None


@dataclass(frozen=True)
class KeyFigures:
    """A latest table's keys now (UpStream section 5.1), aggregated over keys."""

    waiting_keys: int
    loading_keys: int
    #: Queue staleness of waiting keys (now minus first enqueue): mean, p99, max.
    queue: tuple[float, float, float]
    #: Application staleness of keys whose newest value is not loaded yet: mean, p99, max.
    application: tuple[float, float, float]
    cuts: int
    cost_per_key: float


@dataclass
class KeyHold:
    """The keys one quarantined update holds, and the newest waiting value of each."""

    entry: int
    keys: frozenset[Key]
    #: The sequence number of the update that releases them (an operator's retry or discard);
    #: None until then. Values arriving in updates numbered below it are still held.
    release: int | None = None
    parked: dict[Key, HeldValue] = field(default_factory=dict)


def _stats(values: list[float]) -> tuple[float, float, float]:
    figures = StalenessFigures.over(values)  # the simulator's figures over keys
    return (figures.mean, figures.p99, figures.max)


class LatestQueue:
    """The keyed view of one latest table's queue in the pending store's ``QueueCache``."""

    def __init__(self, table: str, spec: KeySpec, cache: QueueCache) -> None:
        self.table = table
        self.spec = spec
        self.cache = cache
        #: Each waiting key's place: the sequence number of the update holding its value.
        self.index: dict[Key, int] = {}
        #: When each waiting key was first enqueued (its queue staleness starts there).
        self.first_enqueued: dict[Key, float] = {}
        #: The keys of each update in the queue, row by row (in memory or spilled).
        self.slot_keys: dict[int, list[Key]] = {}
        #: Values in the queue: the sum of ``slot_keys``' lengths, kept as they change.
        self.values = 0
        self.items: dict[int, Item] = {}
        #: Updates in a running batch: their keys, and the keys' first unloaded arrival.
        self.in_flight: dict[int, list[Key]] = {}
        self.loading_since: dict[Key, float] = {}
        #: With ``order_by``: the order value of each key's newest value here (waiting or loading).
        self.order_of: dict[Key, object] = {}
        self.rates: KeyRates | None = None
        #: linecutting-faster's n (the waiting keys' intervals, sorted); None for other policies.
        self.intervals = ResidentIntervals() if self.spec.policy == "linecutting-faster" else None
        #: c of section 5.3: seconds to load one key, an EWMA of a batch's seconds per key.
        self.cost_per_key = 0.0
        self.superseded = 0
        #: How many queued updates hold a value of each key: more than one after a spill
        #: or a failed batch (values on disk are not removed). A key with another copy never
        #: cuts to the front, or an older copy behind it could load after it.
        self.copies: Counter[Key] = Counter()
        #: Updates of failed batches, back in the queue: no value moves into or out of them.
        self.closed: set[int] = set()
        self.cuts = 0
        #: LINECUTTING-BOUNDED: each queued update's virtual join time, the latest of the
        #: values in it (a value's arrival less its advance, ``KeyRates.advance``), never
        #: below an older update's, so the queue is sorted by it. A joining key goes into the
        #: oldest update holding a value that joined after it: behind every value that
        #: joined before it, as ``KeyQueue`` orders keys.
        self.virtual: dict[int, float] = {}
        self._virtual_pending = -math.inf
        #: The first batch's time: W_f learns from keys that joined after it only.
        self.serving_since: float | None = None
        #: Keys held by quarantined updates (``hold``), by entry and by key.
        self.holds: dict[int, KeyHold] = {}
        self.held_by: dict[Key, KeyHold] = {}
        #: Held values not durable yet, by the update they were held back from, then arrival.
        self.unsaved: dict[int, dict[int, HeldValue]] = {}
        #: Queued updates' values held after they were queued (by arrival): left out of batches.
        self.excluded: dict[int, set[int]] = {}

    def respec(self, spec: KeySpec) -> None:
        """A new policy or batch bound for the keys already waiting (their places stay)."""
        self.spec = spec
        if spec.policy != "linecutting-faster":
            self.intervals = None
        elif self.intervals is None:
            self.intervals = ResidentIntervals()
            for key in self.index:
                self.intervals.set(key, self.rates.interval(key) if self.rates is not None else None)

    # -- arrivals ------------------------------------------------------------------------

    def arrive(self, update: Update) -> tuple[Update, list[Key]]:
        """Place ``update``'s values: the update to enqueue (its rows that stay in it) and
        their keys. Values moved elsewhere are in their new places when this returns.

        All or nothing: the new tables are built before anything changes, and should that
        fail (memory, an Arrow limit) the update is queued whole at the tail, which is
        always correct (the load keeps the newest value of a key by arrival)."""
        if self.holds:
            update = self._held_back(self._released(update))
        rows = update.rows
        if rows is None or rows.num_rows == 0:
            return update, []
        at = update.release
        if self.rates is None:
            self.rates = KeyRates(origin=at)
        keys = self.keys_of(rows)
        orders = rows.column(self.spec.order_by).to_pylist() if self.spec.order_by else None
        last: dict[Key, int] = {}
        for position, key in enumerate(keys):
            held = last.get(key)
            if held is None or orders is None or orders[position] >= orders[held]:
                last[key] = position  # the newest row of the key in this update (ties: the later)
        superseded = len(keys) - len(last)
        stay: list[int] = []
        moves: dict[int, list[int]] = {}  # place (seq) -> positions of this update moving there
        removed: dict[int, set[Key]] = {}  # place (seq) -> keys whose waiting value goes
        placed: list[tuple[Key, int, bool]] = []  # (key, place, its waiting value overwritten)
        cuts = 0
        head = self._head(update.seq)
        #: LINECUTTING-BOUNDED: the latest virtual join time of the values that stay (below).
        virtual = self._tail_virtual()
        #: Keys of this update placed so far that were not waiting: residents for the keys after
        #: them, as in the simulator's queue (schedulers/keys/backlog.py), where each joins in turn.
        newcomers = 0
        for key, position in sorted(last.items(), key=lambda kv: kv[1]):
            interval = self.rates.observe(key, at)
            waiting = self.index.get(key)
            if orders is not None and waiting is not None:
                held_order = self.order_of.get(key)
                if held_order is not None and orders[position] < held_order:  # type: ignore[operator]
                    superseded += 1  # the waiting value is the newer: this one is dropped
                    continue
            if self.intervals is not None:  # section 5.3 read as "the faster updaters in the queue"
                residents = self.intervals.arrive(key, interval)
            else:
                residents = len(self.index) - (waiting is not None) + newcomers
            newcomers += waiting is None
            where = place(
                self.spec.policy,
                waiting=waiting is not None,
                slow=KeyRates.slow(interval, residents, self.cost_per_key),
            )
            open_place = waiting is not None and self._open(waiting)
            target = update.seq
            if where == "front" and head is not None and self.copies[key] == (1 if open_place else 0):
                target = head  # (a key with another copy never cuts: that copy would load after it)
                cuts += 1
            elif where == "keep" and open_place:
                target = waiting  # type: ignore[assignment]
            elif where == "advance":
                joined = at - self.rates.advance(interval)
                ahead = self._advanced(joined, update.seq) if self.copies[key] == 0 else None
                if ahead is not None:  # LINECUTTING-BOUNDED: into the update it would have joined
                    target = ahead
                    cuts += 1
                else:
                    virtual = max(virtual, joined)
            if open_place:  # the waiting value is overwritten (its place may be the target)
                removed.setdefault(waiting, set()).add(key)  # type: ignore[arg-type]
                superseded += 1
            if target == update.seq:
                if where != "advance":
                    virtual = max(virtual, at)
                stay.append(position)
            else:
                moves.setdefault(target, []).append(position)
            placed.append((key, target, open_place))
        try:
            built = {
                seq: self._built(seq, removed.get(seq, set()), rows, update.seq, moves.get(seq, []), keys)
                for seq in sorted(set(moves) | set(removed))
            }
            own = [keys[p] for p in stay]
            if len(stay) == len(keys):
                result = update
            else:
                kept = rows.take(pa.array(stay, pa.int64())) if stay else rows.schema.empty_table()
                result = dataclasses.replace(update, rows=kept, arrived=tuple(arrival(update.seq, p) for p in stay))
        except Exception:
            log.exception("could not place the values of %s update %d by key; queuing it whole", self.table, update.seq)
            for key in keys:
                if key not in self.index:
                    self.first_enqueued[key] = at
                self.index[key] = update.seq
                self.copies[key] += 1
                if orders is not None:
                    self.order_of[key] = orders[last[key]]  # the key's newest in the update
            self._virtual_pending = max(self._tail_virtual(), at)
            return update, keys
        for seq, (value, new_keys) in built.items():
            item = self.items[seq]
            item.value = value
            self.values += len(new_keys) - len(self.slot_keys[seq])
            self.slot_keys[seq] = new_keys
            self.cache.resize(self.table, item, value.resident_bytes, rebalance=False)
        for key, target, overwritten in placed:
            if key not in self.index:
                self.first_enqueued[key] = at
            if overwritten:
                self.copies[key] -= 1
            self.copies[key] += 1
            self.index[key] = target
            if orders is not None:
                self.order_of[key] = orders[last[key]]
        self.superseded += superseded
        self.cuts += cuts
        self._virtual_pending = virtual
        return result, own

    def added(self, item: Item, keys: list[Key]) -> None:
        """The update ``arrive`` returned is in the queue as ``item``."""
        self.items[item.key] = item
        self.slot_keys[item.key] = keys
        self.values += len(keys)
        self.virtual[item.key] = self._virtual_pending

    def _tail_virtual(self) -> float:
        runs = self.cache.queues[self.table].runs
        return self.virtual.get(runs[-1].items[-1].key, -math.inf) if runs else -math.inf

    def keys_of(self, rows: pa.Table) -> list[Key]:
        return list(zip(*(rows.column(name).to_pylist() for name in self.spec.key), strict=True))

    def _head(self, own: int) -> int | None:
        """The oldest waiting update, if it is in memory (LINECUTTING's front)."""
        runs = self.cache.queues[self.table].runs
        if not runs or runs[0].on_disk:
            return None
        seq = runs[0].items[0].key
        return seq if seq != own and self._open(seq) else None

    def _advanced(self, joined: float, own: int) -> int | None:
        """LINECUTTING-BOUNDED's place for a key joining as of ``joined``: the oldest open
        update holding a value that joined after it (``virtual``), within the queue's
        in-memory tail (a spilled update ends the search: the cut is then shorter, never
        wrong). None: its own update."""
        found: int | None = None
        virtual = self.virtual
        for run in reversed(self.cache.queues[self.table].runs):
            if run.on_disk:
                break
            items = run.items
            start = bisect.bisect_right(items, joined, key=lambda item: virtual.get(item.key, -math.inf))
            # (by index: islice would walk the deque from its head)
            found = next((items[i].key for i in range(start, len(items)) if self._open(items[i].key)), found)
            if start > 0:
                break
        return found if found is not None and found != own else None

    def _open(self, seq: int) -> bool:
        """Whether values may move into or out of update ``seq``: in memory, and not an update
        of a batch that failed (its commit may have landed before the failure, and
        then the retry skips it whole: a value moved in would never load)."""
        item = self.items.get(seq)
        return item is not None and item.value.rows is not None and seq not in self.closed

    def _built(
        self, seq: int, removed: set[Key], rows: pa.Table, from_seq: int, positions: list[int], keys: list[Key]
    ) -> tuple[Update, list[Key]]:
        """Update ``seq`` as it will be: without the ``removed`` keys' values, plus
        ``positions`` of the arriving update (nothing changes here)."""
        held: Update = self.items[seq].value
        assert held.rows is not None
        had = self.slot_keys[seq]
        keep = [i for i, key in enumerate(had) if key not in removed]
        order = held.arrived or tuple(arrival(held.seq, i) for i in range(len(had)))
        parts = [held.rows if len(keep) == len(had) else held.rows.take(pa.array(keep, pa.int64()))]
        new_order = [order[i] for i in keep]
        new_keys = [had[i] for i in keep]
        if positions:
            parts.append(rows.take(pa.array(positions, pa.int64())))
            new_order += [arrival(from_seq, p) for p in positions]
            new_keys += [keys[p] for p in positions]
        # One compact table: a part read back from a spill segment is a slice of it, and its
        # buffers would be counted whole. Values of a later schema (a change while they wait)
        # bring its columns: the held ones read them as null.
        data = (pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]).combine_chunks()
        return dataclasses.replace(held, rows=data, arrived=tuple(new_order)), new_keys

    # -- batches -------------------------------------------------------------------------
    def batch(self) -> KeyBatch:
        """The next batch: the updates from the head that hold at most ``max_keys_per_batch``
        keys (at least one update: it is never split), and the values in them. O(the
        batch's updates), as ``schedulers.keys.backlog.KeyBacklog.batch`` (the simulator's)."""
        most = self.spec.max_keys_per_batch
        if most is None:
            return KeyBatch(len(self.index), self.values, None)
        count = total = 0
        for item in self.cache.queues[self.table].items():
            size = len(self.slot_keys.get(item.key, ()))
            if count and total + size > most:
                break
            count += 1
            total += size
        return KeyBatch(len(self.index), total, count)

    def in_flight_values(self) -> int:
        """Values in the running batch (what it costs, per key)."""
        return sum(len(keys) for keys in self.in_flight.values())

    def taken(self, updates: Iterable[Update], now: float | None = None) -> None:
        """``updates`` left the queue for a batch (at ``now``: the waits of its keys teach
        LINECUTTING-BOUNDED how long a round is, ``KeyRates.served``)."""
        for update in updates:
            keys = self.slot_keys.pop(update.seq, [])
            self.values -= len(keys)
            self.items.pop(update.seq, None)
            self.virtual.pop(update.seq, None)
            self.closed.discard(update.seq)
            self.in_flight[update.seq] = keys
            self.copies.subtract(keys)
            for key in keys:
                if self.copies[key] <= 0:
                    del self.copies[key]
                if self.index.get(key) == update.seq:
                    del self.index[key]
                    if self.intervals is not None:
                        self.intervals.discard(key)
                    since = self.first_enqueued.pop(key, update.release)
                    if now is not None and self.rates is not None:
                        if self.serving_since is None:
                            self.serving_since = now
                        if since >= self.serving_since:  # (not the backlog of a restart: its waits hold the downtime)
                            self.rates.served(key, now - since)
                    self.loading_since[key] = min(since, self.loading_since.get(key, since))

    def put_back(self, items: Iterable[Item]) -> None:
        """A failed batch's updates are at the head again; a key that has a newer value
        waiting keeps it (the load drops the older one)."""
        for item in items:
            keys = self.in_flight.pop(item.key, [])
            self.items[item.key] = item
            self.slot_keys[item.key] = keys
            self.values += len(keys)
            self.closed.add(item.key)
            self.copies.update(keys)
            for key in keys:
                since = self.loading_since.pop(key, item.value.release)
                if key not in self.index:
                    self.index[key] = item.key
                    self.first_enqueued[key] = since
                    if self.intervals is not None and self.rates is not None:
                        self.intervals.set(key, self.rates.interval(key))
                else:
                    self.first_enqueued[key] = min(since, self.first_enqueued[key])

    def loaded(self, seqs: Iterable[int], seconds: float) -> None:
        """A batch of these updates committed (or was set aside) in ``seconds``: its keys are
        current, and c learns. Values held back from them were made durable first."""
        keys = 0
        for seq in seqs:
            self.unsaved.pop(seq, None)
            self.excluded.pop(seq, None)
            for key in self.in_flight.pop(seq, []):
                self.loading_since.pop(key, None)
                if key not in self.index:
                    self.order_of.pop(key, None)
                keys += 1
        self.cost_per_key = learned_cost(self.cost_per_key, keys, seconds)  # (a batch set aside: no duration)

    # -- keys held by quarantined updates ---------------------------------------------------
    def hold(self, entry: int, rows: pa.Table, *, saved: pa.Table | None = None, release: int | None = None) -> None:
        """Hold the keys of ``rows`` (a quarantined update's values) for entry ``entry``: their
        queued values leave the queue now, later ones on arrival. ``saved``: values held before
        a restart (their rows, with ``HELD_ARRIVAL`` and ``HELD_SEQ``); ``release``: the sequence
        number of the update an operator submitted to release them, when known.

        A key another entry holds already stays with that one (a key's values after a held
        one are never loaded, so no later update holding it can be quarantined meanwhile)."""
        if entry in self.holds:
            return
        keys = frozenset(k for k in self.keys_of(rows) if k not in self.held_by)
        hold = KeyHold(entry, keys, release)
        self.holds[entry] = hold
        for key in keys:
            self.held_by[key] = hold
        if saved is not None and saved.num_rows:
            arrivals = saved.column(HELD_ARRIVAL).to_pylist()
            seqs = saved.column(HELD_SEQ).to_pylist()
            values = saved.drop_columns([HELD_ARRIVAL, HELD_SEQ])
            for position, key in enumerate(self.keys_of(values)):
                if key in keys:
                    value = HeldValue(entry, key, arrivals[position], seqs[position], values.slice(position, 1))
                    self._park(hold, value, durable=True)
        self._exclude_queued(hold)

    def release_at(self, entry: int, seq: int | None) -> None:
        hold = self.holds.get(entry)
        if hold is not None:
            hold.release = seq

    def drop_hold(self, entry: int) -> None:
        """The releasing update is in Delta already: the held values went with it."""
        hold = self.holds.pop(entry, None)
        if hold is None:
            return
        for key in hold.keys:
            self.held_by.pop(key, None)
        for value in hold.parked.values():
            self._forget_unsaved(value)

    def held_counts(self, entry: int) -> tuple[int, int] | None:
        hold = self.holds.get(entry)
        return None if hold is None else (len(hold.keys), len(hold.parked))

    def unsaved_of(self, seqs: Iterable[int]) -> list[HeldValue]:
        unsaved = self.unsaved
        return [value for seq in seqs if seq in unsaved for value in unsaved[seq].values()]

    def without_held(self, updates: tuple[Update, ...]) -> tuple[Update, ...]:
        """A batch's updates without the values excluded from them after they were queued
        (a spilled one is read back for that: rare, a hold placed on queued values)."""
        if not self.excluded:
            return updates
        out = []
        for update in updates:
            gone = self.excluded.get(update.seq)
            if not gone:
                out.append(update)
                continue
            rows = _rows_of(update)
            arrivals = update.arrived or tuple(arrival(update.seq, i) for i in range(rows.num_rows))
            keep = [i for i, at in enumerate(arrivals) if at not in gone]
            out.append(
                dataclasses.replace(
                    update,
                    rows=rows.take(pa.array(keep, pa.int64())),
                    spilled=None,
                    arrived=tuple(arrivals[i] for i in keep),
                )
            )
        return tuple(out)

    def _released(self, update: Update) -> Update:
        """``update`` releases holds (its number is at or past theirs): their held values join
        it after its own rows, in arrival order, so they load after the quarantined values it
        carries and before any later value of their keys. (Its rows keep their arrival as
        (sequence, position), so the joined ones come last.)"""
        due = [hold for hold in self.holds.values() if hold.release is not None and update.seq >= hold.release]
        if not due:
            return update
        for hold in due:
            del self.holds[hold.entry]
            for key in hold.keys:
                self.held_by.pop(key, None)
        values = sorted((v for hold in due for v in hold.parked.values()), key=lambda v: v.arrival)
        if not values or update.rows is None:
            return update
        base = update.rows.num_rows
        schema = update.rows.schema
        rows = pa.concat_tables([update.rows, *(conform_rows(v.row, schema) for v in values)])
        joined = tuple(arrival(update.seq, base + i) for i in range(len(values)))
        arrived = update.arrived + joined if update.arrived else ()
        return dataclasses.replace(update, rows=rows.combine_chunks(), arrived=arrived)

    def _held_back(self, update: Update) -> Update:
        """``update`` without its values of held keys, which wait with their holds."""
        rows = update.rows
        if not self.held_by or rows is None or rows.num_rows == 0:
            return update
        keys = self.keys_of(rows)
        held_by = self.held_by
        if not any(key in held_by for key in keys):
            return update
        arrivals = update.arrived or tuple(arrival(update.seq, i) for i in range(len(keys)))
        keep = [position for position, key in enumerate(keys) if key not in held_by]
        held = [position for position, key in enumerate(keys) if key in held_by]
        values = rows.take(pa.array(held, pa.int64()))  # (a copy: a slice would keep the whole update alive)
        for k, position in enumerate(held):
            hold = held_by[keys[position]]
            self._park(hold, HeldValue(hold.entry, keys[position], arrivals[position], update.seq, values.slice(k, 1)))
        # The rows that stay keep their order; numbered afresh, they still sort as they arrived.
        return dataclasses.replace(
            update,
            rows=rows.take(pa.array(keep, pa.int64())),
            arrived=tuple(arrivals[i] for i in keep) if update.arrived else (),
        )

    def _park(self, hold: KeyHold, value: HeldValue, durable: bool = False) -> None:
        """Keep ``value`` as its key's held value if it is the newest (the others are superseded)."""
        current = hold.parked.get(value.key)
        if current is not None and current.arrival >= value.arrival:
            if current.arrival > value.arrival:
                self.superseded += 1
            return  # (the same value again: replayed from the WAL after it was made durable)
        if current is not None:
            self.superseded += 1
            self._forget_unsaved(current)
        hold.parked[value.key] = value
        if not durable:
            self.unsaved.setdefault(value.seq, {})[value.arrival] = value

    def _forget_unsaved(self, value: HeldValue) -> None:
        """A superseded held value need not be made durable: the newer one is, or the WAL
        replays it (its update is the same or later, so not committed before)."""
        waiting = self.unsaved.get(value.seq)
        if waiting is not None:
            waiting.pop(value.arrival, None)
            if not waiting:
                del self.unsaved[value.seq]

    def _exclude_queued(self, hold: KeyHold) -> None:
        """Take the hold's keys' queued values out of the queue (they arrived after the
        quarantined update, before it was set aside): excluded from their updates, which
        are closed, and held."""
        if not hold.keys:
            return
        for item in self.cache.queues[self.table].items():
            queued = self.slot_keys.get(item.key)
            if not queued or not any(key in hold.keys for key in queued):
                continue
            update: Update = item.value
            rows = _rows_of(update)
            arrivals = update.arrived or tuple(arrival(update.seq, i) for i in range(rows.num_rows))
            gone = self.excluded.setdefault(item.key, set())
            keys = self.keys_of(rows)
            held = [p for p, key in enumerate(keys) if key in hold.keys and arrivals[p] not in gone]
            values = rows.take(pa.array(held, pa.int64()))  # (a copy, as on arrival)
            for k, position in enumerate(held):
                key = keys[position]
                gone.add(arrivals[position])
                self._park(hold, HeldValue(hold.entry, key, arrivals[position], item.key, values.slice(k, 1)))
                if key in queued:
                    queued.remove(key)
                    self.values -= 1
            self.closed.add(item.key)  # (its rows and keys no longer line up: no value moves)
        for key in hold.keys:
            self.index.pop(key, None)
            if self.intervals is not None:
                self.intervals.discard(key)
            self.first_enqueued.pop(key, None)
            self.copies.pop(key, None)
            self.order_of.pop(key, None)

    # -- figures ---------------------------------------------------------------------------
    def figures(self, now: float) -> KeyFigures:
        waiting = [now - at for at in self.first_enqueued.values()]
        stale = dict(self.first_enqueued)
        for key, since in self.loading_since.items():
            stale[key] = min(since, stale.get(key, since))
        return KeyFigures(
            waiting_keys=len(self.index),
            loading_keys=sum(len(k) for k in self.in_flight.values()),
            queue=_stats(waiting),
            application=_stats([now - at for at in stale.values()]),
            cuts=self.cuts,
            cost_per_key=self.cost_per_key,
        )


def _rows_of(update: Update) -> pa.Table:
    """An update's rows, read back from its spill segment when it is on disk."""
    if update.rows is not None:
        return update.rows
    if update.spilled is not None:
        return update.spilled.read()
    raise ValueError(f"update {update.seq} of {update.table!r} has no rows")
