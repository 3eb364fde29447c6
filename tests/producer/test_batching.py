"""Batching and key derivation (producer/batching.py), for any sequence of sends: every row
lands in exactly one update, in send order per table, within the size limits; sequences are
consecutive per table; keys and bodies are the same when the same sends are made again;
a request takes at most one in-flight slot per table and keeps each table's order."""

from __future__ import annotations

import json
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from producer.batching import Accumulator, Batch, Send, plan, request_for, row_json

TABLES = ["a", "b", "c"]
SETTINGS = settings(max_examples=200, derandomize=True, deadline=None)


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
    script: list[tuple[str, list[dict], float]], max_rows: int, max_bytes: int, linger: float
) -> tuple[Accumulator, list[Batch]]:
    """Make the sends (numbering each table's rows), closing what is due as time passes."""
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
        acc.add_rows(table, numbered, None, now, Send(None))
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
