"""A latest table's pending store (loader/pending/keyed.py): the key policies' places, and
for any interleaving of arrivals, spills, batches, failures and loads, the loaded table
holds the newest value of every key, memory is accounted exactly, and the WAL replays into
one value per key."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update, arrival
from loader.loading.sinks.upsert import ORDER_COLUMN, ordered_rows
from loader.pending.keyed import KeySpec
from loader.pending.spill.registry import make_spill_policy
from loader.pending.spill.segments import SegmentFiles
from loader.pending.store import PendingStore
from testing.depth import examples

SCHEMA = TableSchema.model_validate(
    {
        "columns": [
            {"name": "k", "type": "int64", "nullable": False},
            {"name": "o", "type": "int64", "nullable": False},
            {"name": "v", "type": "int64"},
        ],
        "key": ["k"],
        "order_by": "o",
    }
)


def make_store(directory: Path, budget: int, spec: KeySpec) -> PendingStore:
    segments = SegmentFiles(directory / "spill", lambda _: SCHEMA.arrow())
    segments.reset()
    store = PendingStore(make_spill_policy("buffered-head", budget), budget, segments)
    store.add_table("t")
    store.set_keys("t", spec)
    return store


def update(seq: int, rows: list[tuple[int, int, int]], at: float | None = None) -> Update:
    data = pa.table({"k": [r[0] for r in rows], "o": [r[1] for r in rows], "v": [r[2] for r in rows]}, SCHEMA.arrow())
    return Update("t", seq, float(seq) if at is None else at, rows=data)


def held(store: PendingStore) -> list[list[int]]:
    """Each waiting update's keys, in queue order (memory or disk)."""
    out = []
    for item in store.cache.queues["t"].items():
        u = item.value
        data = u.rows if u.rows is not None else u.spilled.read() if u.spilled is not None else None
        out.append([] if data is None else data.column("k").to_pylist())
    return out


@pytest.mark.parametrize(
    ("policy", "places"),
    [
        ("in-place", [[1, 2], [3]]),  # key 1's new value takes the old one's place
        ("fifo-uq", [[2], [1, 3]]),  # ... or goes to the tail
    ],
)
def test_a_new_value_goes_where_the_policy_puts_it(tmp_path: Path, policy: str, places: list[list[int]]) -> None:
    spec = KeySpec(("k",), policy, order_by="o")
    store = make_store(tmp_path, 1 << 20, spec)
    store.append(update(1, [(1, 0, 10), (2, 0, 11)]))
    store.append(update(2, [(3, 0, 12), (1, 1, 13)]))
    assert [sorted(keys) for keys in held(store)] == places  # (an update's rows are unordered)
    assert store.drain_superseded("t") == 1
    taken = store.take("t")
    newest = ordered_rows(Batch("t", taken), SCHEMA).to_pylist()
    assert sorted((r["k"], r["v"]) for r in newest) == [(1, 13), (2, 11), (3, 12)]


def test_an_older_order_by_never_replaces_the_waiting_value(tmp_path: Path) -> None:
    store = make_store(tmp_path, 1 << 20, KeySpec(("k",), "in-place", order_by="o"))
    store.append(update(1, [(1, 5, 10)]))
    store.append(update(2, [(1, 4, 11), (1, 6, 12), (1, 6, 13)]))  # 13: newest of the update (ties: later)
    store.append(update(3, [(1, 5, 14)]))  # older than the waiting 13
    assert held(store) == [[1], [], []] and store.drain_superseded("t") == 4
    assert ordered_rows(Batch("t", store.take("t")), SCHEMA).column("v").to_pylist() == [13]


def test_a_slow_key_cuts_to_the_front_once_the_cost_of_a_key_is_known(tmp_path: Path) -> None:
    store = make_store(tmp_path, 1 << 20, KeySpec(("k",), "linecutting", max_keys_per_batch=2))
    for seq in range(1, 5):  # keys 1-3 update every second
        store.append(update(seq, [(1, 0, seq), (2, 0, seq), (3, 0, seq)], at=float(seq)))
    assert held(store)[0] == [1, 2, 3]
    first = store.take("t")  # max 2 keys: the one update holding 3 keys is never split
    assert [u.seq for u in first] == [1]
    store.loaded("t", seconds=3.0)  # one second per key: c = 1
    store.append(update(5, [(1, 0, 5)], at=5.0))
    store.append(update(6, [(9, 0, 6)], at=60.0))  # never seen in 59 s > c * n = 1: cuts
    # The head is update 2 (its values went into update 1's place, in place): key 9 cuts
    # into it, ahead of key 1 in update 5.
    assert held(store) == [[9], [], [], [1], []]
    second = store.take("t")
    assert [u.seq for u in second] == [2, 3, 4, 5, 6]  # 2 keys (update 6's value is in update 2)
    assert ordered_rows(Batch("t", second), SCHEMA).column("k").to_pylist() == [9, 1]


def newest_of(values: list[tuple[int, int, int]], ordered: bool = True) -> dict[int, tuple[int, int]]:
    """The table an upsert of every value, in arrival order, leaves: key -> (o, v); the
    larger ``o`` wins when ``ordered`` (the table's ``order_by``), else the later arrival."""
    table: dict[int, tuple[int, int]] = {}
    for k, o, v in values:
        if not ordered or k not in table or o >= table[k][0]:
            table[k] = (o, v)
    return table


def load(
    table: dict[int, tuple[int, int]], batch: Batch, committed: list[int] | None = None, ordered: bool = True
) -> set[int]:
    """The sinks' rule: newest per key in the batch by (o, arrival), merged if not older
    (without ``ordered``, no ``order_by``: by arrival, merged always). ``committed`` (one
    number, the table's transaction version) skips updates a commit already holds, as
    ``unloaded_part`` does, and is advanced."""
    if committed is not None:
        rest = tuple(u for u in batch.updates if u.seq > committed[0])
        committed[0] = max(committed[0], batch.last_seq)
        if not rest:
            return set()
        batch = Batch(batch.table, rest)
    best: dict[int, dict] = {}
    for row in ordered_rows(batch, SCHEMA).to_pylist():
        mine = best.get(row["k"])
        rank = (row["o"] if ordered else 0, row[ORDER_COLUMN])
        if mine is None or rank >= (mine["o"] if ordered else 0, mine[ORDER_COLUMN]):
            best[row["k"]] = row
    for k, row in best.items():
        if not ordered or k not in table or row["o"] >= table[k][0]:
            table[k] = (row["o"], row["v"])
    return set(best)


def accounted(store: PendingStore) -> None:
    queue = store.cache.queues["t"]
    in_memory = [i for run in queue.runs if not run.on_disk for i in run.items]
    # Items never spilled: their size is their rows' (a read-back one keeps its first size,
    # as every queue's does: its rows are a slice of the segment it was read from).
    assert all(i.size == i.value.resident_bytes for i in in_memory if not i.written)
    assert queue.mem_bytes == sum(i.size for i in in_memory) == sum(r.nbytes for r in queue.runs if not r.on_disk)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), max_size=5)),
        st.tuples(st.just("take"), st.just([])),
        st.tuples(st.just("fail"), st.just([])),
        st.tuples(st.just("landed"), st.just([])),  # the commit landed, then the load failed
        st.tuples(st.just("load"), st.just([])),
    ),
    max_size=40,
)


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(
    script=steps,
    policy=st.sampled_from(["fifo-uq", "in-place", "linecutting", "linecutting-bounded"]),
    max_keys=st.sampled_from([None, 1, 3]),
    budget=st.sampled_from([120, 1 << 20]),
    ordered=st.booleans(),
)
def test_any_interleaving_loads_the_newest_value_of_every_key(script, policy, max_keys, budget, ordered) -> None:
    spec = KeySpec(("k",), policy, max_keys, order_by="o" if ordered else None)
    with tempfile.TemporaryDirectory() as directory:
        store = make_store(Path(directory), budget, spec)
        sent: list[tuple[int, int, int]] = []
        updates: list[Update] = []
        table: dict[int, tuple[int, int]] = {}
        committed = [0]
        batch: tuple[Update, ...] | None = None
        seq = 0

        def settle() -> None:
            nonlocal batch
            if batch is not None:
                keys = load(table, Batch("t", batch), committed, ordered)
                assert max_keys is None or len(batch) == 1 or len(keys) <= max_keys
                store.loaded("t", seconds=0.01 * max(1, len(keys)))
                batch = None

        for op, rows in script:
            if op == "send":
                seq += 1
                values = [(k, o, len(sent) + i) for i, (k, o) in enumerate(rows)]
                sent.extend(values)
                u = update(seq, values, at=float(seq))
                updates.append(u)
                store.append(u)
            elif op == "take" and batch is None and len(store.cache.queues["t"]):
                batch = store.take("t", now=seq + 0.5)  # (the keys' waits: LINECUTTING-BOUNDED's round)
            elif op == "fail" and batch is not None:
                store.put_back("t")
                batch = None
            elif op == "landed" and batch is not None:
                load(table, Batch("t", batch), committed, ordered)
                store.put_back("t")
                batch = None
            elif op == "load":
                settle()
            accounted(store)
        settle()
        while len(store.cache.queues["t"]):
            batch = store.take("t", now=seq + 0.5)
            settle()
        event(f"segments written: {store.cache.counts.writes > 0}")
        event(f"cuts: {store._latest['t'].cuts > 0}")
        assert table == newest_of(sent, ordered)
        assert not store._latest["t"].index and not store._latest["t"].in_flight

    with tempfile.TemporaryDirectory() as directory:  # the WAL replayed into a fresh store
        again = make_store(Path(directory), 1 << 20, spec)
        for u in updates:
            again.append(u)
        waiting = [k for keys in held(again) for k in keys]
        assert sorted(waiting) == sorted(newest_of(sent, ordered))  # one value per key ...
        replayed: dict[int, tuple[int, int]] = {}
        while len(again.cache.queues["t"]):
            load(replayed, Batch("t", again.take("t")), ordered=ordered)
            again.loaded("t")
        assert replayed == newest_of(sent, ordered)  # ... the newest


@pytest.mark.parametrize("policy", ["fifo-uq", "in-place", "linecutting", "linecutting-bounded"])
def test_values_in_spilled_updates_are_left_alone_and_the_load_keeps_the_newest(tmp_path: Path, policy: str) -> None:
    store = make_store(tmp_path, 1_500, KeySpec(("k",), policy, 4, order_by="o"))
    sent: list[tuple[int, int, int]] = []
    table: dict[int, tuple[int, int]] = {}
    for seq in range(1, 61):
        values = [((seq * 7 + i) % 97, seq % 3, len(sent) + i) for i in range(6)]
        sent.extend(values)
        store.append(update(seq, values, at=float(seq)))
        accounted(store)
        if seq % 10 == 0:  # a batch now and then, one of them failing
            batch = store.take("t", now=seq + 0.5)
            if seq == 40:
                store.put_back("t")
            else:
                load(table, Batch("t", batch))
                store.loaded("t", seconds=0.05)
    assert store.cache.counts.writes > 0
    if policy != "linecutting-bounded":  # (its keys wait less than they update here: W_f stays 0, no cut)
        assert (store._latest["t"].cuts > 0) == (policy == "linecutting")
    while len(store.cache.queues["t"]):
        load(table, Batch("t", store.take("t")))
        store.loaded("t", seconds=0.05)
        accounted(store)
    assert table == newest_of(sent)


def test_an_update_without_rows_at_the_head_is_not_a_place_to_cut_into(tmp_path: Path) -> None:
    store = make_store(tmp_path, 1 << 20, KeySpec(("k",), "linecutting"))
    store.append(update(1, [(1, 0, 1)], at=1.0))
    store.take("t")
    store.loaded("t", seconds=1.0)  # c = 1
    store.append(Update("t", 2, 2.0))  # data_until only: no rows
    store.append(update(3, [(2, 0, 2)], at=3.0))
    store.append(update(4, [(9, 0, 3)], at=90.0))  # slow: would cut, but the head holds no rows
    assert held(store) == [[], [2], [9]]
    assert ordered_rows(Batch("t", store.take("t")), SCHEMA).column("k").to_pylist() == [2, 9]


@pytest.mark.parametrize("policy", ["in-place", "linecutting", "linecutting-bounded"])
def test_no_value_moves_into_a_failed_batch_whose_commit_may_have_landed(tmp_path: Path, policy: str) -> None:
    """A load that committed and then failed (a worker's reply lost) is put back; its retry
    skips what the commit holds, so a newer value moved into it would never load."""
    store = make_store(tmp_path, 1 << 20, KeySpec(("k",), policy, order_by="o"))
    store.append(update(1, [(1, 0, 10)], at=1.0))
    table: dict[int, tuple[int, int]] = {}
    committed = [0]
    load(table, Batch("t", store.take("t")), committed)  # landed ...
    store.put_back("t")  # ... and reported failed
    store.append(update(2, [(1, 0, 11)], at=50.0))  # for IN-PLACE the waiting place is update 1
    load(table, Batch("t", store.take("t")), committed)  # the retry skips update 1
    store.loaded("t", seconds=0.1)
    assert table == {1: (0, 11)}


def test_linecutting_bounded_moves_a_joining_slow_key_part_of_the_line_once_it_knows_a_round(
    tmp_path: Path,
) -> None:
    """The live store runs schedulers/keys/queue.py's LINECUTTING-BOUNDED: a key joining is
    placed into the update it would have joined ``KeyRates.advance`` seconds earlier; that
    needs W_f, learned from the waits of fast keys the batches took."""
    store = make_store(tmp_path, 1 << 20, KeySpec(("k",), "linecutting-bounded"))
    latest = store._latest["t"]
    seq = 0
    for t in range(1, 41):  # five fast keys, one a second; a batch every ten seconds
        seq += 1
        store.append(update(seq, [(t % 5, 0, t)], at=float(t)))
        if t % 10 == 0:
            store.take("t", now=t + 0.5)
            store.loaded("t", seconds=0.1)
    assert latest.rates is not None and latest.rates.fast_wait > 0.0  # W_f: a round, learned
    assert latest.cuts == 0  # fast keys advance alike: each joins behind the others
    for t in range(41, 47):
        seq += 1
        store.append(update(seq, [(t % 5, 0, t)], at=float(t)))
    seq += 1
    store.append(update(seq, [(99, 0, 99)], at=47.0))  # never seen: slow, it cuts
    advance = latest.rates.advance(latest.rates.interval((99,)))
    assert 0.0 < advance < latest.rates.fast_wait
    queue = held(store)
    assert latest.cuts == 1 and queue[-1] == []  # it left its own update ...
    # ... into the oldest update holding a value that joined (virtually) after it: no further.
    seqs = [item.key for item in store.cache.queues["t"].items()]
    into = next(i for i, keys in enumerate(queue) if 99 in keys)
    assert 0 < into < len(queue) - 1
    assert latest.virtual[seqs[into]] > 47.0 - advance >= latest.virtual[seqs[into - 1]]
    assert [latest.virtual[s] for s in seqs] == sorted(latest.virtual[s] for s in seqs)


# -- keys held by a quarantined update (a table without order_by) ---------------------------------------------

ARRIVAL_ONLY = TableSchema.model_validate(
    {
        "columns": [
            {"name": "k", "type": "int64", "nullable": False},
            {"name": "o", "type": "int64", "nullable": False},
            {"name": "v", "type": "int64"},
        ],
        "key": ["k"],
    }
)


def newest(updates: tuple[Update, ...]) -> dict[int, int]:
    """What a load of ``updates`` leaves per key (the upsert's rule, arrival order alone)."""
    rows = ordered_rows(Batch("t", updates), ARRIVAL_ONLY).to_pylist()
    out: dict[int, tuple[int, int]] = {}
    for row in rows:
        if row["k"] not in out or row[ORDER_COLUMN] >= out[row["k"]][0]:
            out[row["k"]] = (row[ORDER_COLUMN], row["v"])
    return {k: v for k, (_, v) in sorted(out.items())}


@pytest.mark.parametrize("budget", [1 << 20, 40], ids=["in-memory", "spilled"])
def test_held_keys_wait_from_the_queue_and_on_arrival_and_join_the_update_that_releases_them(
    tmp_path: Path, budget: int
) -> None:
    store = make_store(tmp_path, budget, KeySpec(("k",), "fifo-uq"))
    store.append(update(1, [(1, 0, 10), (2, 0, 20)]))
    store.append(update(2, [(1, 0, 11), (3, 0, 30)]))  # queued before the hold: excluded from its update
    assert (store.spilled > 0) == (budget == 40)
    # Update 0 of the table (its values k=1 -> 9, k=4 -> 40) was quarantined: its keys wait.
    store.hold_keys("t", 0, update(0, [(1, 0, 9), (4, 0, 40)]).rows)
    assert store.held_counts("t", 0) == (2, 1)
    store.append(update(3, [(1, 0, 12), (2, 0, 21), (4, 0, 41)]))  # on arrival: k=1 and k=4 held
    assert store.held_counts("t", 0) == (2, 2)  # the newest of each: 12 (11 superseded) and 41
    batch = store.take("t")
    assert newest(batch) == {2: 21, 3: 30}  # the other keys load; held values are not in the batch
    held = store.held_to_save("t", batch)
    assert sorted((v.key, v.seq) for v in held) == [((1,), 3), ((4,), 3)]  # durable before it commits
    store.loaded("t")
    assert store.held_to_save("t", batch) == []
    store.append(update(4, [(1, 0, 13)]))
    # The retry: the entry's values as one update, numbered 5, release the keys when it arrives.
    store.release_keys_at("t", 0, 5)
    store.append(update(5, [(1, 0, 9), (4, 0, 40)]))
    assert store.held_counts("t", 0) is None
    store.append(update(6, [(4, 0, 42)]))  # after the release: loads as any value
    assert newest(store.take("t")) == {1: 13, 4: 42}  # the quarantined values first, then the held ones


def test_held_values_restored_after_a_restart_are_not_held_twice(tmp_path: Path) -> None:
    """After a restart the values made durable before come from the entry, and the WAL
    replays some of them again: the newest per key waits once."""
    from loader.durability.quarantine import HELD_ARRIVAL, HELD_SEQ

    store = make_store(tmp_path, 1 << 20, KeySpec(("k",), "in-place"))
    saved = update(3, [(1, 0, 12)]).rows
    saved = saved.append_column(HELD_ARRIVAL, pa.array([arrival(3, 0)], pa.int64()))
    saved = saved.append_column(HELD_SEQ, pa.array([3], pa.int64()))
    store.hold_keys("t", 0, update(0, [(1, 0, 9)]).rows, saved=saved)
    store.append(update(3, [(1, 0, 12), (2, 0, 20)]))  # replayed: the same value again
    assert store.held_counts("t", 0) == (1, 1)
    batch = store.take("t")
    assert store.held_to_save("t", batch) == []  # durable already
    assert newest(batch) == {2: 20}


held_steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=5)),
        st.tuples(
            st.sampled_from(
                [
                    "take",
                    "take-one",  # a bisection's part: the head update alone
                    "fail",
                    "landed",
                    "load",
                    "quarantine",  # the head update alone kept failing: set aside
                    "retry",
                ]
            ),
            st.just([]),
        ),
    ),
    min_size=10,
    max_size=50,
)


# (300: fewer examples never reach LINECUTTING-BOUNDED's search across two in-memory runs)
@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(
    script=held_steps,
    policy=st.sampled_from(["fifo-uq", "in-place", "linecutting", "linecutting-bounded"]),
    max_keys=st.sampled_from([None, 1, 3]),
    budget=st.sampled_from([120, 1 << 20]),
)
def test_quarantined_updates_hold_their_keys_so_a_retry_leaves_the_newest_value_of_every_key(
    script, policy, max_keys, budget
) -> None:
    """A table without order_by: an update set aside holds its keys (later values wait, the
    others load), and its retry, a new update, releases them, so the table ends as if every
    value had loaded in the order it arrived."""
    spec = KeySpec(("k",), policy, max_keys)
    with tempfile.TemporaryDirectory() as directory:
        store = make_store(Path(directory), budget, spec)
        sent: list[tuple[int, int, int]] = []
        table: dict[int, tuple[int, int]] = {}
        committed = [0]
        batch: tuple[Update, ...] | None = None
        landed = False
        entries: list[tuple[int, pa.Table]] = []
        seq = 0
        set_aside = held_values = 0

        def send(rows: pa.Table) -> None:
            nonlocal seq
            seq += 1
            store.append(Update("t", seq, float(seq), rows=rows))

        def take(limit: int | None = None) -> None:
            nonlocal batch, landed
            batch = store.take("t", limit, now=seq + 0.5)
            landed = False
            store.held_to_save("t", batch)  # (made durable before it commits: nothing to do here)

        def retry() -> None:
            nonlocal held_values
            first, rows = entries.pop(0)
            held_values += (store.held_counts("t", first) or (0, 0))[1]
            store.release_keys_at("t", first, seq + 1)  # as the desk does, as intake numbers it
            send(rows)

        for op, rows in script:
            if op == "send":
                values = [(k, o, len(sent) + i) for i, (k, o) in enumerate(rows)]
                sent.extend(values)
                send(update(0, values).rows)
            elif op in ("take", "take-one") and batch is None and len(store.cache.queues["t"]):
                take(1 if op == "take-one" else None)
            elif op == "fail" and batch is not None:
                store.put_back("t")
                batch = None
            elif op == "landed" and batch is not None:
                load(table, Batch("t", batch), committed, ordered=False)
                store.put_back("t")
                batch = None
            elif op == "load" and batch is not None:
                load(table, Batch("t", batch), committed, ordered=False)
                store.loaded("t")
                batch = None
            elif op == "quarantine" and (batch is not None or len(store.cache.queues["t"])):
                if batch is None or len(batch) > 1:  # bisected down to the head update (the rest goes back)
                    if batch is not None:
                        store.put_back("t")
                    take(1)
                assert batch is not None
                (q,) = batch
                if q.seq <= committed[0]:  # (its commit landed: its next attempt is skipped, never set aside)
                    continue
                data = q.rows if q.rows is not None else q.spilled.read()  # type: ignore[union-attr]
                arrivals = q.arrived or tuple(arrival(q.seq, i) for i in range(data.num_rows))
                order = sorted(range(data.num_rows), key=arrivals.__getitem__)
                entries.append((q.seq, data.take(pa.array(order, pa.int64()))))
                store.loaded("t")  # set aside: out of the queue
                store.hold_keys("t", q.seq, data)
                batch = None
                set_aside += 1
            elif op == "retry" and entries:
                retry()
            accounted(store)
        if batch is not None:
            load(table, Batch("t", batch), committed, ordered=False)
            store.loaded("t")
        while entries or len(store.cache.queues["t"]):
            if entries:
                retry()
            take()
            assert batch is not None
            load(table, Batch("t", batch), committed, ordered=False)
            store.loaded("t")
        event(f"set aside: {min(set_aside, 2)}; values held until a retry: {min(held_values, 2)}")
        assert table == newest_of(sent, ordered=False)
        latest = store._latest["t"]
        assert not latest.holds and not latest.held_by and not latest.index and not latest.in_flight
