"""Batching and key derivation (producer/batching.py), for any sequence of sends: every row
lands in exactly one update, in send order per table, within the size limits; sequences are
consecutive per table; keys and bodies are the same when the same sends are made again;
a request takes at most one in-flight slot per table and keeps each table's order. An
update's segments name each send's rows in it, so a refused update splits into its sends:
the parts hold its rows in order, one send each, under keys no other update or part has,
the same keys every time; requeued, they keep the table's order."""

from __future__ import annotations

import json
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from producer.batching import Accumulator, Batch, Send, plan, request_for, row_json
from testing.depth import examples

TABLES = ["a", "b", "c"]
SETTINGS = settings(max_examples=examples(80), derandomize=True, deadline=None)


@st.composite
def sends(draw: st.DrawFn) -> list[tuple[str, list[dict], float]]:
    out = []
    for _ in range(draw(st.integers(1, 25))):
        table = draw(st.sampled_from(TABLES))
        count = draw(st.integers(1, 12))
        width = draw(st.integers(0, 40))
        out.append(
            (table, [{"n": 0, "pad": "x" * width} for _ in range(count)], draw(st.sampled_from([0.0, 0.01, 0.2])))
        )
    return out


def run(
    script: list[tuple[str, list[dict], float]], max_rows: int, max_bytes: int, linger: float, sends: list | None = None
) -> tuple[Accumulator, list[Batch]]:
    """Make the sends (numbering each table's rows), closing what is due as time passes;
    ``sends`` collects each send with its rows."""
    acc = Accumulator(max_rows, max_bytes, linger)
    counters = dict.fromkeys(TABLES, 0)
    now = 0.0
    for table, rows, step in script:
        now += step
        acc.close_due(now)
        numbered = []
        for row in rows:
            numbered.append(row_json({**row, "n": counters[table]}))
            counters[table] += 1
        send = Send(None)
        acc.add_rows(table, numbered, now, now, send)
        if sends is not None:
            sends.append((send, numbered, now))
    acc.close_all()
    return acc, [b for t in TABLES for b in acc.ready.get(t, ())]


@SETTINGS
@given(sends(), st.integers(1, 8), st.integers(20, 400), st.sampled_from([0.0, 0.05, 1.0]))
def test_every_row_once_in_order_within_limits(script: list, max_rows: int, max_bytes: int, linger: float) -> None:
    acc, batches = run(script, max_rows, max_bytes, linger)
    for table in TABLES:
        mine = [b for b in batches if b.table == table]
        assert [b.seq for b in mine] == list(range(len(mine)))  # consecutive sequences from 0
        numbers = [json.loads(r)["n"] for b in mine for r in b.rows]
        assert numbers == list(range(sum(len(r) for t, r, _ in script if t == table)))
        for b in mine:
            assert 1 <= len(b.rows) <= max_rows
            assert b.nbytes == sum(len(r) + 1 for r in b.rows)
            assert b.nbytes <= max_bytes or len(b.rows) == 1  # only a row larger than the limit stands alone
    again, batches_again = run(script, max_rows, max_bytes, linger)
    assert [request_for([b], "p").key for b in batches] == [request_for([b], "p").key for b in batches_again]
    assert [request_for([b], "p").body for b in batches] == [request_for([b], "p").body for b in batches_again]


@SETTINGS
@given(sends(), st.integers(1, 4), st.booleans(), st.integers(50, 2000))
def test_requests_keep_each_tables_order_and_one_slot_per_table(
    script: list, slots: int, multi: bool, max_request_bytes: int
) -> None:
    acc, batches = run(script, 5, 200, 0.05)
    ready = {t: deque(q) for t, q in acc.ready.items()}
    keys: set[str] = set()
    delivered: dict[str, list[int]] = {t: [] for t in TABLES}
    while any(ready.values()):
        busy: set[str] = set()
        requests = plan(ready, busy, slots, "p", multi, max_request_bytes)
        assert 1 <= len(requests) <= slots
        seen_tables: set[str] = set()
        for request in requests:
            tables = request.tables
            assert not seen_tables & set(tables), "two requests in flight for one table"
            seen_tables |= set(tables)
            assert request.key not in keys and len(request.key) <= 200
            keys.add(request.key)
            body = json.loads(request.body)
            if len(request.batches) == 1:
                assert request.path == f"/v1/tables/{request.batches[0].table}/updates"
                assert request.key == request.batches[0].key("p")
                assert len(body["rows"]) == len(request.batches[0].rows)
            else:
                assert multi and request.path == "/v1/updates"
                assert [u["table"] for u in body["updates"]] == [b.table for b in request.batches]
                assert request.nbytes <= max_request_bytes or len(request.batches) == 1
            for batch in request.batches:
                delivered[batch.table].append(batch.seq)
    for table in TABLES:
        assert delivered[table] == list(range(len(delivered[table])))


@SETTINGS
@given(sends(), st.integers(1, 8), st.integers(20, 400), st.sampled_from([0.0, 0.05, 1.0]))
def test_segments_name_each_sends_rows_and_an_update_splits_into_its_sends(
    script: list, max_rows: int, max_bytes: int, linger: float
) -> None:
    made: list[tuple[Send, list[str], float]] = []
    _, batches = run(script, max_rows, max_bytes, linger, made)
    held: dict[int, list[str]] = {id(send): [] for send, _, _ in made}
    for batch in batches:
        assert sum(s.count for s in batch.segments) == len(batch.rows)
        assert len({id(s.send) for s in batch.segments}) == len(batch.segments)  # a send once in an update
        start = 0
        for segment in batch.segments:
            assert segment.first == len(held[id(segment.send)])  # the send's rows, in its order
            held[id(segment.send)].extend(batch.rows[start : start + segment.count])
            start += segment.count
    for send, rows, _ in made:
        assert held[id(send)] == rows and send.updates == sum(
            1 for b in batches for s in b.segments if s.send is send
        )

    keys = {b.key("p") for b in batches}
    again = run(script, max_rows, max_bytes, linger)[1]
    for batch, same in zip(batches, again, strict=True):
        if len(batch.segments) < 2:
            continue
        parts = batch.split()
        assert [r for part in parts for r in part.rows] == batch.rows
        assert all(len(part.segments) == 1 and part.solo and part.nbytes == sum(len(r) + 1 for r in part.rows)
                   for part in parts)
        assert [part.data_until for part in parts] == [s.data_until for s in batch.segments]  # each its send's
        part_keys = [request_for([part], "p").key for part in parts]
        assert len(set(part_keys)) == len(parts) and not set(part_keys) & keys  # never another update's key
        keys |= set(part_keys)
        assert part_keys == [request_for([part], "p").key for part in same.split()]  # the same keys every time
        assert [request_for([part], "p").body for part in parts] == [
            request_for([part], "p").body for part in same.split()
        ]


@SETTINGS
@given(sends(), st.integers(1, 3), st.booleans(), st.lists(st.booleans(), min_size=1, max_size=30))
def test_split_parts_keep_each_tables_order(script: list, slots: int, multi: bool, refusals: list[bool]) -> None:
    """Requests whose update the service refuses (for the drawn ones) split and requeue: the
    rows still reach the service in send order per table, one request in flight per table."""
    acc, _ = run(script, 6, 400, 0.05)
    ready = acc.ready
    refused = iter(refusals * 1000)
    delivered: dict[str, list[int]] = {t: [] for t in TABLES}
    keys: list[str] = []
    while any(ready.values()):
        busy: set[str] = set()
        requests = plan(ready, busy, slots, "p", multi, 10_000)
        for request in requests:
            keys.append(request.key)
            batch = request.batches[0]
            if len(request.batches) > 1 and next(refused):
                acc.requeue(request.batches)  # a refused multi-table request: each update alone
                continue
            if len(request.batches) == 1 and len(batch.segments) > 1 and next(refused):
                acc.requeue(batch.split())  # a refused coalesced update: each send alone
                continue
            for b in request.batches:
                delivered[b.table].extend(json.loads(r)["n"] for r in b.rows)
    for table in TABLES:
        assert delivered[table] == list(range(sum(len(r) for t, r, _ in script if t == table)))
    assert len(keys) == len(set(keys))  # a key never names two different requests


def test_a_send_larger_than_an_update_fills_several_in_order() -> None:
    acc = Accumulator(max_rows=3, max_bytes=10_000, linger=1.0)
    send = Send(None)
    parts = acc.add_rows("t", [row_json({"n": k}) for k in range(8)], 5.0, 0.0, send)
    assert [(b.seq, start, end) for b, start, end in parts] == [(0, 0, 3), (1, 3, 6), (2, 6, 8)]
    assert send.updates == 3 and [b.seq for b in acc.ready["t"]] == [0, 1] and acc.open["t"].seq == 2
    assert all(b.data_until == 5.0 for b, _, _ in parts)
    files = acc.add_alone("t", None, 0.5, Send(None), files=["/landing/x.parquet"])
    assert files.seq == 3 and [b.seq for b in acc.ready["t"]] == [0, 1, 2, 3]  # the open update closed first
    assert json.loads(request_for([files], "p").body) == {"files": ["/landing/x.parquet"]}


def test_row_json_refuses_what_json_cannot_carry() -> None:
    import datetime as dt
    import decimal

    import pytest

    assert row_json({"t": dt.datetime(2026, 1, 2, 3, 4, 5), "d": decimal.Decimal("1.50")}) == (
        '{"t":"2026-01-02T03:04:05","d":"1.50"}'
    )
    with pytest.raises(ValueError, match="null"):
        row_json({"x": float("nan")})
    with pytest.raises(TypeError, match="convert it first"):
        row_json({"x": object()})
    with pytest.raises(TypeError, match="dict"):
        row_json([1, 2])  # type: ignore[arg-type]
