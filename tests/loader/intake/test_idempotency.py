"""Idempotency keys: a retry gets the first answer, a reused key with another request is a
409, keys expire after the TTL, concurrent retries wait for the first request, and the
store survives restarts through its snapshot plus WAL replay."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from loader.core.errors import Conflict
from loader.core.updates import Update, WalRecord
from loader.durability.wal import WriteAheadLog
from loader.intake.idempotency import IdempotencyConflict, IdempotencyStore, request_hash


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


ANSWER = {"table": "orders", "seq": 3, "status": "accepted"}


def test_lookup_answers_a_retry_and_refuses_a_reused_key() -> None:
    store = IdempotencyStore(clock=Clock())
    assert store.lookup("k", "h1") is None
    assert store.add("k", "h1", ANSWER) is True
    assert store.lookup("k", "h1") == ANSWER
    with pytest.raises(IdempotencyConflict) as info:
        store.lookup("k", "h2")
    assert isinstance(info.value, Conflict) and info.value.status == 409
    assert info.value.body()["error"] == "idempotency_conflict" and info.value.body()["idempotency_key"] == "k"
    assert store.add("k", "h1", {"other": 1}) is False  # the first answer stays
    assert store.lookup("k", "h1") == ANSWER
    with pytest.raises(IdempotencyConflict):
        store.add("k", "h2", ANSWER)


def test_request_hash_separates_parts() -> None:
    assert request_hash("POST", "/t", b"{}") == request_hash(b"POST", "/t", "{}")
    assert request_hash("ab", "c") != request_hash("a", "bc")
    assert len(request_hash(b"")) == 64


def test_keys_expire_after_the_ttl() -> None:
    clock = Clock()
    store = IdempotencyStore(ttl_seconds=100, clock=clock)
    store.add("old", "h", ANSWER)
    clock.now += 50
    store.add("young", "h", ANSWER)
    clock.now += 50  # "old" is exactly 100 s old: gone
    assert store.lookup("old", "h") is None and store.lookup("young", "h") == ANSWER
    assert "old" in store and len(store) == 2  # until expire() sweeps
    assert store.expire() == 1 and len(store) == 1
    # An expired key may be reused for a new request.
    with pytest.raises(IdempotencyConflict):  # still live at that time
        store.add("young", "other", {"new": True}, created_at=clock.now + 49)
    assert store.add("young", "other", {"new": True}, created_at=clock.now + 50) is True
    assert store.lookup("young", "other", now=clock.now + 51) == {"new": True}
    assert store.expire(now=clock.now + 1000) == 1 and len(store) == 0


def test_snapshot_round_trips_atomically(tmp_path: Path) -> None:
    clock = Clock()
    store = IdempotencyStore(ttl_seconds=100, clock=clock)
    store.add("a", "ha", {"n": 1, "ü": [1.5, None]})
    store.add("b", "hb", ANSWER, created_at=clock.now - 99)
    store.add("dead", "hd", ANSWER, created_at=clock.now - 500)
    path = tmp_path / "state" / "idempotency.json"
    assert store.save(path) == 2  # expired entries are not written
    assert [p.name for p in path.parent.iterdir()] == ["idempotency.json"]  # no temp file left
    clock.now += 0.5
    loaded = IdempotencyStore.load(path, ttl_seconds=100, clock=clock)
    assert len(loaded) == 2
    assert loaded.lookup("a", "ha") == {"n": 1, "ü": [1.5, None]}
    assert loaded.get("b") is not None and loaded.get("b").created_at == clock.now - 99.5  # type: ignore[union-attr]
    clock.now += 1
    assert IdempotencyStore(ttl_seconds=100, clock=clock).merge(path) == 1  # "b" expired meanwhile
    assert IdempotencyStore().merge(tmp_path / "missing.json") == 0
    assert len(IdempotencyStore.load(tmp_path / "missing.json")) == 0
    assert store.save(path) == 1  # overwrite in place


def test_a_damaged_snapshot_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "idempotency.json"
    for content in (
        b"{not json",
        json.dumps({"version": 9, "entries": []}).encode(),
        json.dumps({"version": 1, "entries": [{"key": "k"}]}).encode(),
    ):
        path.write_bytes(content)
        with pytest.raises(ValueError, match=str(path)):
            IdempotencyStore.load(path)


def test_store_is_rebuilt_from_snapshot_and_wal_in_either_order(tmp_path: Path) -> None:
    clock = Clock(1_700_000_000.0)
    records = [
        WalRecord(Update("t", 0, 0.0), "k0", "h0", {"seq": 0}, clock.now - 10),
        WalRecord(Update("t", 1, 0.0)),  # no key
        WalRecord(Update("t", 2, 0.0), "k2", "h2", {"seq": 2}, clock.now - 5),
    ]
    with WriteAheadLog(tmp_path / "wal") as wal:
        wal.append_sync(records)
    live = IdempotencyStore(clock=clock)
    live.add("k0", "h0", {"seq": 0}, clock.now - 10)
    live.add("snap-only", "hs", {"seq": -1}, clock.now - 20)
    live.save(tmp_path / "idem.json")

    with WriteAheadLog(tmp_path / "wal") as wal:
        replayed = list(wal.replay())
    first = IdempotencyStore.load(tmp_path / "idem.json", clock=clock)
    assert [first.add_record(r) for r in replayed] == [False, False, True]
    second = IdempotencyStore(clock=clock)
    for r in replayed:
        second.add_record(r)
    assert second.merge(tmp_path / "idem.json") == 1  # only "snap-only" is new
    for store in (first, second):
        assert len(store) == 3
        assert store.lookup("k2", "h2") == {"seq": 2} and store.lookup("snap-only", "hs") == {"seq": -1}
        with pytest.raises(IdempotencyConflict):
            store.lookup("k0", "h-other")
    with pytest.raises(ValueError, match="lacks hash or response"):
        first.add_record(WalRecord(Update("t", 3, 0.0), "k3", None, None))


def test_truncate_hook_saves_the_store_before_segments_with_keys_go(tmp_path: Path) -> None:
    store = IdempotencyStore()
    snapshot = tmp_path / "idem.json"

    def save_if_keys(segments: list) -> None:
        if any(s.keys for s in segments):
            store.save(snapshot)

    with WriteAheadLog(tmp_path / "wal", segment_bytes=1) as wal:  # one record per segment
        for seq in range(3):
            response = {"seq": seq}
            wal.append_sync([WalRecord(Update("t", seq, 0.0), f"k{seq}", f"h{seq}", response)])
            store.add(f"k{seq}", f"h{seq}", response)
        assert wal.truncate({"t": 2}, before_delete=save_if_keys) == 3
    restored = IdempotencyStore.load(snapshot)
    with WriteAheadLog(tmp_path / "wal") as wal:
        assert list(wal.replay()) == []
    assert [restored.lookup(f"k{i}", f"h{i}") for i in range(3)] == [{"seq": 0}, {"seq": 1}, {"seq": 2}]


# ---------------------------------------------------------------------------- reserve


def test_a_concurrent_retry_waits_for_the_first_request_and_gets_its_answer() -> None:
    store = IdempotencyStore()
    work: list[str] = []
    first_inside = asyncio.Event()
    release_first = asyncio.Event()

    async def handler(name: str, body: str) -> dict:
        async with store.reserve("k", request_hash(body)) as slot:
            if slot.replayed:
                assert slot.response is not None
                return slot.response
            work.append(name)
            if name == "first":
                first_inside.set()
                await release_first.wait()
            slot.complete({"by": name})
            return {"by": name}

    async def run() -> list[dict]:
        first = asyncio.create_task(handler("first", "body"))
        await first_inside.wait()
        retries = [asyncio.create_task(handler(f"retry{i}", "body")) for i in range(5)]
        other = asyncio.create_task(handler("other", "different body"))
        await asyncio.sleep(0)
        with pytest.raises(IdempotencyConflict):
            await other  # a different request with the key conflicts at once, in flight or not
        assert not any(r.done() for r in retries)
        release_first.set()
        return await asyncio.gather(first, *retries)

    answers = asyncio.run(run())
    assert work == ["first"] and answers == [{"by": "first"}] * 6


def test_if_the_first_request_fails_a_waiting_retry_takes_over() -> None:
    store = IdempotencyStore()
    work: list[str] = []
    first_inside = asyncio.Event()
    fail_first = asyncio.Event()

    async def handler(name: str) -> dict:
        async with store.reserve("k", "h") as slot:
            if slot.replayed:
                return {"replayed": slot.response}
            work.append(name)
            if name == "first":
                first_inside.set()
                await fail_first.wait()
                raise RuntimeError("WAL append failed")
            slot.complete({"by": name})
            return {"by": name}

    async def run() -> list[object]:
        first = asyncio.create_task(handler("first"))
        await first_inside.wait()
        retries = [asyncio.create_task(handler(f"retry{i}")) for i in range(3)]
        await asyncio.sleep(0)
        fail_first.set()
        return await asyncio.gather(first, *retries, return_exceptions=True)

    results = asyncio.run(run())
    assert isinstance(results[0], RuntimeError)
    assert work == ["first", "retry0"]
    assert results[1:] == [{"by": "retry0"}, {"replayed": {"by": "retry0"}}, {"replayed": {"by": "retry0"}}]


def test_a_cancelled_waiter_does_not_disturb_the_request_in_flight() -> None:
    store = IdempotencyStore()
    inside = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        async with store.reserve("k", "h") as slot:
            inside.set()
            await release.wait()
            slot.complete(ANSWER)

    async def waiter() -> None:
        async with store.reserve("k", "h"):
            pass

    async def run() -> None:
        holder = asyncio.create_task(first())
        await inside.wait()
        impatient = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        impatient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await impatient
        release.set()
        await holder
        async with store.reserve("k", "h") as slot:
            assert slot.replayed and slot.response == ANSWER
            with pytest.raises(RuntimeError):
                slot.complete({"again": True})

    asyncio.run(run())


def test_a_request_cancelled_during_its_wal_write_still_stores_its_answer(tmp_path: Path) -> None:
    """Review finding: a request cancelled (client gone) while its WAL append ran had its
    updates written and loaded, but its answer was never stored under its key: the
    producer's retry with that key submitted the updates a second time."""
    from loader.intake.requests import UpdateRequest
    from loader.service import LoaderService
    from testing.service_harness import make_settings

    async def scenario() -> None:
        async with LoaderService.running(make_settings(tmp_path / "data"), load=False) as service:
            gate, entered = asyncio.Event(), asyncio.Event()
            real_append = service.wal.append_future

            async def held(records: object) -> None:
                await gate.wait()
                await real_append(records)  # type: ignore[arg-type]

            def slow_append(records: object) -> asyncio.Future[None]:
                entered.set()
                return asyncio.ensure_future(held(records))

            service.wal.append_future = slow_append  # type: ignore[method-assign]
            rows = [{"url": "/a", "n": 1}]

            def valid() -> list:
                return service.intake.validate([UpdateRequest("clicks", rows, None, None)])

            first = asyncio.ensure_future(service.intake.submit_once("key-1", "hash-1", valid))
            await entered.wait()
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            gate.set()
            response, replayed = await service.intake.submit_once("key-1", "hash-1", valid)
            assert replayed, "the retry was submitted again instead of getting the first answer"
            assert [u["sequence"] for u in response["updates"]] == [1]
            assert service.intake.tables["clicks"].next_seq == 2  # one update, numbered once

    asyncio.run(scenario())
