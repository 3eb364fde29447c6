"""The producer against an in-memory service (tests/producer/fake_service.py): batching into
few requests, retries with the same key and body (503 with Retry-After, 429, 5xx, lost
answers), typed refusals never retried, a refused multi-table request split so the good
updates still land, the delivery timeout, back-pressure, the synchronous wrapper, and a
durable producer that crashed delivering exactly what it had accepted after a restart.
A coalesced update refused for a bad row (422) or its size (413) split into its sends, so
only the bad send fails, counting rows as it did, also across a crash mid-split; and
leaving a durable producer's block bounded by ``close_timeout``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from producer import (
    AsyncLoaderProducer,
    BufferFull,
    ClosedWithPending,
    DeliveryTimeout,
    LoaderProducer,
    ProducerClosed,
    ProducerSettings,
    RequestRefused,
)
from tests.producer.fake_service import FakeService, held


class Sleeps:
    """A sleep that only records how long it was asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


def producer(service: FakeService, sleeps: Sleeps | None = None, **settings: Any) -> AsyncLoaderProducer:
    return AsyncLoaderProducer(
        ProducerSettings(url="http://loader", seed=1, **settings),
        transport=httpx.MockTransport(service),
        sleep=sleeps or Sleeps(),
    )


def rows(table: str, first: int, count: int) -> list[dict[str, Any]]:
    return [{"table": table, "n": k} for k in range(first, first + count)]


def numbers(service: FakeService, table: str) -> list[int]:
    return [r["n"] for r in service.rows(table)]


def test_rows_of_several_sends_and_tables_go_out_together() -> None:
    service = FakeService()

    async def main() -> list[Any]:
        async with producer(service, linger=10.0) as p:
            futures = [await p.send(t, rows(t, 10 * k, 10)) for k in range(3) for t in ("a", "b", "c")]
            await p.flush()
            assert p.metrics().buffered_bytes == 0
            return [await f for f in futures]

    acks = asyncio.run(main())
    assert [numbers(service, t) for t in "abc"] == [list(range(30))] * 3
    assert len(service.seen) == 1 and service.seen[0][0] == "/v1/updates"  # 9 sends, one request
    assert {a.table for a in acks} == {"a", "b", "c"} and all(not a.replayed for a in acks)
    assert acks[0].key.endswith("/a/0") and acks[0].sequence == 1


def test_a_503_with_retry_after_is_retried_with_the_same_key_and_body() -> None:
    service, sleeps = FakeService(), Sleeps()
    service.fault = lambda r: ("status", 503, 2) if len(service.seen) <= 2 else None

    async def main() -> None:
        async with producer(service, sleeps, linger=0.0) as p:
            await (await p.send("a", rows("a", 0, 5)))
            m = p.metrics()
            assert (m.attempts, m.retried, m.acknowledged) == (3, 2, 1)

    asyncio.run(main())
    assert len({(path, key, body) for path, key, body in service.seen}) == 1  # three times the same request
    assert all(wait >= 2.0 for wait in sleeps.waits) and len(sleeps.waits) == 2
    assert numbers(service, "a") == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("status", [429, 500, 502, 504])
def test_throttling_and_server_errors_are_retried(status: int) -> None:
    service = FakeService()
    service.fault = lambda r: ("status", status, None) if len(service.seen) == 1 else None

    async def main() -> None:
        async with producer(service, linger=0.0) as p:
            await (await p.send("a", rows("a", 0, 1)))

    asyncio.run(main())
    assert len(service.seen) == 2 and numbers(service, "a") == [0]


def test_a_lost_answer_is_retried_and_loaded_once() -> None:
    service = FakeService()
    attempted: set[str | None] = set()

    def drop_first(request: httpx.Request) -> Any:
        key = request.headers.get("idempotency-key")
        if key in attempted:
            return None
        attempted.add(key)
        return "drop"

    service.fault = drop_first

    async def main() -> None:
        async with producer(service, linger=0.001) as p:
            futures = [await p.send(t, rows(t, k, 1)) for k in range(20) for t in ("a", "b")]
            await p.flush()
            assert all([(await f).replayed for f in futures[-2:]])
            assert p.metrics().replayed == p.metrics().acknowledged

    asyncio.run(main())
    assert numbers(service, "a") == numbers(service, "b") == list(range(20))  # once each, in order


def test_a_refused_update_is_not_retried_and_the_others_still_land() -> None:
    service = FakeService()

    async def main() -> None:
        async with producer(service, linger=10.0) as p:
            good = await p.send("a", rows("a", 0, 3))
            bad = await p.send("b", [{"n": 0, "bad": True}])
            other = await p.send("c", rows("c", 0, 2))
            await p.flush()
            with pytest.raises(RequestRefused) as refused:
                await bad
            assert refused.value.status == 422 and "row 0 of this send to table 'b'" in refused.value.message
            assert refused.value.key.endswith("/b/0") and refused.value.table == "b"
            await good
            await other
            assert p.metrics().refused == 1

    asyncio.run(main())
    # The multi-table request was refused whole; each update then went alone, once.
    paths = [path for path, _, _ in service.seen]
    assert paths[0] == "/v1/updates" and sorted(paths[1:]) == [f"/v1/tables/{t}/updates" for t in "abc"]
    assert numbers(service, "a") == [0, 1, 2] and numbers(service, "c") == [0, 1] and not service.rows("b")


def test_delivery_gives_up_after_its_timeout_and_names_the_key() -> None:
    service, sleeps = FakeService(), Sleeps()
    service.fault = lambda r: ("status", 503, 5)
    clock = [0.0]

    async def advance(seconds: float) -> None:
        clock[0] += seconds
        await sleeps(seconds)

    async def main() -> None:
        p = AsyncLoaderProducer(
            ProducerSettings(url="http://loader", linger=0.0, delivery_timeout=30.0, seed=1),
            transport=httpx.MockTransport(service),
            sleep=advance,
            clock=lambda: clock[0],
        )
        async with p:
            future = await p.send("a", rows("a", 0, 1))
            with pytest.raises(DeliveryTimeout) as timed_out:
                await future
            assert timed_out.value.key.endswith("/a/0") and "HTTP 503" in timed_out.value.last
            assert p.metrics().timed_out == 1 and p.metrics().buffered_bytes == 0

    asyncio.run(main())
    assert sum(sleeps.waits) <= 30.0 and len(service.seen) == len(sleeps.waits) + 1


def test_a_full_buffer_blocks_send_then_raises() -> None:
    release = asyncio.Event()
    service = FakeService()

    async def main() -> None:
        p = AsyncLoaderProducer(
            ProducerSettings(url="http://loader", linger=0.0, max_buffer_bytes=150, max_block=0.2),
            transport=held(service, release),
        )
        async with p:
            try:
                first = await p.send("a", rows("a", 0, 5))  # 100 bytes: fits
                with pytest.raises(BufferFull, match="nothing was buffered"):
                    await p.send("a", rows("a", 5, 5))  # 100 more do not
                assert p.metrics().sends == 1 and p.metrics().buffered_bytes == 100
            finally:
                release.set()
            await first
            await (await p.send("a", rows("a", 5, 5)))  # room again

    asyncio.run(main())
    assert numbers(service, "a") == list(range(10))


def test_the_synchronous_producer_and_files(tmp_path: Path) -> None:
    service = FakeService()
    lines = tmp_path / "rows.ndjson"
    lines.write_text("\n".join(json.dumps({"n": k}) for k in range(4)) + "\n")
    with LoaderProducer(ProducerSettings(url="http://loader", linger=0.0), transport=httpx.MockTransport(service)) as p:
        ack = p.send("a", file=lines).result(10)
        assert ack.table == "a" and ack.key.startswith(p.prefix)
        p.send("b", file=tmp_path / "drop.parquet").result(10)  # a landing file: the service reads it
        bad = tmp_path / "bad.ndjson"
        bad.write_text('{"n": 1}\nnot json\n')
        with pytest.raises(ValueError, match="line 2 is not JSON"):
            p.send("a", file=bad)
        assert p.metrics().sends == 2
    assert numbers(service, "a") == [0, 1, 2, 3]
    assert service.rows("b") == [{"file": str((tmp_path / "drop.parquet").resolve())}]
    with pytest.raises(ProducerClosed):
        p.send("a", rows("a", 0, 1))


def test_a_durable_producer_delivers_after_a_crash_exactly_what_it_accepted(tmp_path: Path) -> None:
    """The first run's answers are all lost (the service loaded its first request, the rest
    never left); it stops without an acknowledgement. The second run sends the same request
    again (the service answers from its idempotency store), then the rest, then its own."""
    service = FakeService()
    service.fault = lambda r: "drop"
    state = tmp_path / "state"

    async def first_run() -> None:
        p = producer(service, producer_id="feed-1", state_dir=state, linger=10.0, max_batch_rows=4)
        futures = []
        for k in range(2):
            for t in ("a", "b"):
                futures.append(await p.send(t, rows(t, 10 * k, 6), checkpoint=f"{k}{t}"))
        assert p.checkpoint == "1b" and p.prefix.startswith("feed-1.")
        prefixes.append(p.prefix)
        with pytest.raises(TimeoutError):
            await p.close(timeout=0.3)  # (a crash: no answer came; what it accepted is journaled)
        for f in futures:
            with pytest.raises(ProducerClosed, match="journal"):
                await f

    prefixes: list[str] = []
    asyncio.run(first_run())
    first_prefix = prefixes[0]
    assert service.seen and service.rows("a")  # the first request landed; its answer was lost
    first_keys = {key for _, key, _ in service.seen}
    service.fault = lambda r: None

    async def second_run() -> None:
        async with producer(service, producer_id="feed-1", state_dir=state) as p:
            assert p.metrics().recovered == 6  # 2 x 2 sends of 6 rows in updates of 4
            assert p.checkpoint == "1b"  # journaled with the last send's rows: where to resume
            await p.flush()
            future = await p.send("a", rows("a", 100, 2))
            ack = await future
            assert ack.key == f"{p.prefix}/a/3"  # sequences go on where the first run left them (0-2)
            assert p.prefix == first_prefix  # the journal's epoch: the same keys as before the crash
            assert p.metrics().replayed >= 1

    asyncio.run(second_run())
    assert numbers(service, "a") == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 100, 101]
    assert numbers(service, "b") == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
    assert first_keys <= {key for _, key, _ in service.seen}

    async def third_run() -> None:  # nothing left over: a clean start, the checkpoint kept
        async with producer(service, producer_id="feed-1", state_dir=state) as p:
            assert p.metrics().recovered == 0 and p.checkpoint == "1b" and p.prefix == first_prefix

    asyncio.run(third_run())

    async def elsewhere() -> None:  # the same id in a new state_dir: new keys, nothing refused
        async with producer(service, producer_id="feed-1", state_dir=tmp_path / "new") as p:
            assert p.prefix != first_prefix
            await (await p.send("a", rows("a", 200, 1)))

    asyncio.run(elsewhere())


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="producer_id"):
        ProducerSettings(producer_id="has space")
    with pytest.raises(ValueError):
        ProducerSettings(max_batch_rows=0)
    a, b = (AsyncLoaderProducer(ProducerSettings(producer_id="x")) for _ in range(2))
    assert a.prefix != b.prefix and a.prefix.startswith("x.")  # not durable: a new prefix each run


# -- found by a review ------------------------------------------------------------------------


def test_a_sends_rows_and_checkpoint_are_one_journal_write(tmp_path: Path) -> None:
    """A send spanning two updates is one journal line: torn by a crash, neither its rows nor
    its checkpoint survive (the caller sends it again, once)."""
    from producer.journal import Journal

    service = FakeService()
    service.fault = lambda r: "drop"
    state = tmp_path / "state"

    async def crash() -> None:
        p = producer(service, producer_id="f", state_dir=state, linger=10.0, max_batch_rows=4)
        futures = [
            await p.send("a", rows("a", 0, 3), checkpoint="one"),
            await p.send("a", rows("a", 3, 3), checkpoint="two"),  # rows 3 (update 0) and 4-5 (update 1)
        ]
        with pytest.raises(TimeoutError):
            await p.close(timeout=0.05)
        for future in futures:  # (read: a failed future nobody reads is an ERROR line of asyncio's)
            with pytest.raises(ProducerClosed):
                await future

    asyncio.run(crash())
    journal = state / "journal.ndjson"
    lines = journal.read_text().splitlines()
    last = json.loads(lines[-1]) if json.loads(lines[-1])["op"] == "add" else json.loads(lines[-2])
    assert [(part["s"], len(part["r"])) for part in last["p"]] == [(0, 1), (1, 2)] and last["c"] == "two"
    adds = [n for n, line in enumerate(lines) if json.loads(line)["op"] == "add"]
    journal.write_text("\n".join(lines[: adds[-1]] + [lines[adds[-1]][:-7]]) + "\n")  # torn mid-line
    recovered = Journal(state).recover()
    assert recovered.checkpoint == "one"
    assert sum(len(b.rows) for b in recovered.waiting) + sum(len(b.rows) for _, r in recovered.requests for b in r) == 3


def test_a_timed_out_multi_table_request_names_its_own_key_and_body() -> None:
    service = FakeService()
    service.fault = lambda r: ("status", 503, None)
    clock = [0.0]

    async def advance(seconds: float) -> None:
        clock[0] += seconds
        await asyncio.sleep(0)

    async def main() -> None:
        p = AsyncLoaderProducer(
            ProducerSettings(url="http://loader", linger=10.0, delivery_timeout=5.0, seed=1),
            transport=httpx.MockTransport(service),
            sleep=advance,
            clock=lambda: clock[0],
        )
        async with p:
            a, b = await p.send("a", rows("a", 0, 1)), await p.send("b", rows("b", 0, 1))
            await p.flush()
            for future in (a, b):
                with pytest.raises(DeliveryTimeout) as late:
                    await future
                assert late.value.key.startswith(f"{p.prefix}/m/") and late.value.path == "/v1/updates"
                assert late.value.body == service.seen[-1][2] and not late.value.retrying

    asyncio.run(main())


def test_a_durable_producer_keeps_delivering_after_its_futures_timed_out(tmp_path: Path) -> None:
    service = FakeService()
    down = [True]
    service.fault = lambda r: ("status", 503, None) if down[0] else None
    clock = [0.0]

    async def advance(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] > 60:
            down[0] = False
        await asyncio.sleep(0)

    async def main() -> None:
        p = AsyncLoaderProducer(
            ProducerSettings(
                url="http://loader", linger=0.0, delivery_timeout=5.0, producer_id="d", state_dir=tmp_path
            ),
            transport=httpx.MockTransport(service),
            sleep=advance,
            clock=lambda: clock[0],
        )
        async with p:
            future = await p.send("a", rows("a", 0, 2))
            with pytest.raises(DeliveryTimeout) as late:
                await future
            assert late.value.retrying and "journal keeps it" in str(late.value)
            await p.flush()  # and then it landed
            assert p.metrics().acknowledged == 1

    asyncio.run(main())
    assert numbers(service, "a") == [0, 1]


@pytest.mark.allow_errors(r"a bug in planning")
def test_bad_sends_change_nothing_and_a_failed_background_task_does_not_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    from producer import aio

    service = FakeService()

    async def main() -> None:
        p = producer(service, linger=0.0)
        with pytest.raises(ValueError, match="data_until"):
            await p.send("a", rows("a", 0, 1), data_until="2026-01-01")  # type: ignore[arg-type]
        assert p.metrics().sends == 0 and p.metrics().buffered_bytes == 0
        ack = await (await p.send("a", rows("a", 0, 1), data_until=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
        assert ack.sequence == 1

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug in planning")

        monkeypatch.setattr(aio, "plan", broken)
        future = await p.send("a", rows("a", 1, 1))
        with pytest.raises(Exception, match="background task failed"):
            await p.flush(timeout=5)
        with pytest.raises(Exception, match="background task failed"):
            await future
        with pytest.raises(Exception, match="background task failed"):
            await p.close()  # it says so once more, and stops

    asyncio.run(main())
    assert json.loads(service.seen[0][2])["data_until"] == 1767225600.0


def test_waiting_sends_never_overfill_the_buffer() -> None:
    release = asyncio.Event()
    service = FakeService()

    async def main() -> None:
        p = AsyncLoaderProducer(
            ProducerSettings(url="http://loader", linger=0.0, max_buffer_bytes=100, max_block=5.0),
            transport=held(service, release),
        )
        async with p:
            first = await p.send("a", rows("a", 0, 3))  # 60 bytes
            waiting = [asyncio.ensure_future(p.send("b", rows("b", 10 * k, 3))) for k in range(2)]  # 60 each
            await asyncio.sleep(0.05)
            assert p.metrics().buffered_bytes == 60
            release.set()
            await first
            for future in waiting:
                await (await future)
                assert p.metrics().buffered_bytes <= 100

    asyncio.run(main())


def test_ndjson_lines_keep_their_unicode(tmp_path: Path) -> None:
    service = FakeService()
    lines = tmp_path / "rows.ndjson"
    lines.write_text('{"s": "a\u2028b", "n": 1}\n{"s": "\u00e9t\u00e9", "n": 2}\n', encoding="utf-8")

    async def main() -> None:
        async with producer(service, linger=0.0) as p:
            await (await p.send("u", file=lines))

    asyncio.run(main())
    assert [r["s"] for r in service.rows("u")] == ["a\u2028b", "\u00e9t\u00e9"]


# -- refusals name the send (a coalesced update split into its sends) ---------------------------


def test_one_bad_row_fails_only_its_own_send_and_is_counted_as_that_send_counts() -> None:
    """Five good rows and a bad one in two sends (and a good one after) coalesce into one
    update; the service refuses it naming "row 5". Split into its sends, the good ones land,
    and the bad one's error is about row 0 of its own send, under a key of its own (not the
    coalesced one)."""
    service = FakeService()

    async def main() -> None:
        async with producer(service, linger=10.0) as p:
            good = await p.send("ta", [{"id": k} for k in range(5)])
            bad = await p.send("ta", [{"id": "six"}], checkpoint="input-2")
            after = await p.send("ta", [{"id": 8}])
            await p.flush()
            assert (await good).key == f"{p.prefix}/ta/0.0" and (await after).key == f"{p.prefix}/ta/0.2"
            with pytest.raises(RequestRefused) as refused:
                await bad
            error = refused.value
            assert error.status == 422 and error.row == 0 and error.rows == (0, 1) and error.checkpoint == "input-2"
            assert error.key == f"{p.prefix}/ta/0.1" and error.body["row"] == 0  # the part's own answer
            assert "row 0 of this send (checkpoint 'input-2') to table 'ta': column 'id'" in str(error)
            assert "nothing of this send was accepted: fix it and send it again" in str(error)
            assert "row 5" not in str(error) and "whole update" not in str(error)
            assert p.metrics().refused == 1 and p.metrics().buffered_bytes == 0

    asyncio.run(main())
    assert [r["id"] for r in service.rows("ta")] == [0, 1, 2, 3, 4, 8]  # in send order, once each
    keys = [key for _, key, _ in service.seen]
    assert keys[0].endswith("/ta/0") and [k.rsplit("/", 1)[1] for k in keys[1:]] == ["0.0", "0.1", "0.2"]
    coalesced = json.loads(service.seen[0][2])
    assert coalesced["rows"][5] == {"id": "six"}  # the service named row 5 of the update; the send heard row 0


def test_a_send_larger_than_an_update_names_its_own_rows_when_one_of_its_updates_is_refused() -> None:
    service = FakeService()

    async def main() -> None:
        async with producer(service, linger=10.0, max_batch_rows=4) as p:
            first = await p.send("t", [{"id": 0}, {"id": 1}])  # update 0: rows 0-1 of this send ...
            long = await p.send("t", [{"id": k} for k in range(10, 15)] + [{"id": "x"}])  # ... then 2+4 of this
            await p.flush()
            await first
            with pytest.raises(RequestRefused) as refused:
                await long
            error = refused.value
            assert error.row == 5 and error.rows == (2, 6) and error.key == f"{p.prefix}/t/1"
            assert "row 5 of this send to table 't'" in str(error)
            assert "rows 2 to 5 of this send were not accepted" in str(error)

    asyncio.run(main())
    assert [r["id"] for r in service.rows("t")] == [0, 1, 10, 11]  # update 0 split: both of its sends landed


def test_coalesced_sends_too_big_together_are_split_and_a_send_too_big_alone_names_the_budget() -> None:
    """Twenty sends that each fit the service, coalesced into one update that cannot (413,
    BeyondCapacity), all land; a send that alone is more than the service can hold fails
    with the service's budget, not "send smaller requests"."""
    service = FakeService(capacity=4_000)
    rows_of = [[{"n": 100 * k + i, "pad": "x" * 10} for i in range(10)] for k in range(20)]  # ~300 bytes each

    async def main() -> None:
        async with producer(service, linger=10.0) as p:
            futures = [await p.send("big", chunk) for chunk in rows_of]
            huge = await p.send("big", [{"n": -1, "pad": "x" * 5_000}])
            await p.flush()
            acks = [await f for f in futures]
            assert [a.key.rsplit("/", 1)[1] for a in acks] == [f"0.{k}" for k in range(20)]
            with pytest.raises(RequestRefused) as refused:
                await huge
            error = refused.value
            assert error.status == 413 and error.key == f"{p.prefix}/big/0.20"
            assert "this send (1 row) alone is more than the service can ever hold at once" in str(error)
            assert "holds 4,000 bytes (1,000 in memory, 3,000 on its spill disk)" in str(error)
            assert "send fewer rows at a time" in str(error) and "smaller requests" not in str(error)

    asyncio.run(main())
    assert numbers(service, "big") == [n for chunk in rows_of for n in (r["n"] for r in chunk)]


def test_refusals_not_about_the_rows_are_not_split() -> None:
    service = FakeService()
    service.fault = lambda r: ("status", 403, None)

    async def main() -> None:
        async with producer(service, linger=10.0) as p:
            futures = [await p.send("t", rows("t", k, 1)) for k in range(3)]
            await p.flush()
            for future in futures:
                with pytest.raises(RequestRefused, match="HTTP 403"):
                    await future

    asyncio.run(main())
    assert len(service.seen) == 1  # a 403 would refuse each send alike: asked once


def test_a_durable_producer_killed_mid_split_delivers_each_send_exactly_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The coalesced update is refused and split; the first part lands but its answer is lost,
    and the producer dies. The restart sends that part again under its key (answered from the
    service's idempotency store), never the whole update again, then the other parts: the bad
    send is refused (said in the log, with its checkpoint), the others land once each."""
    from producer.journal import Journal

    service = FakeService()
    service.fault = lambda r: "drop"  # answers lost (a 422 still comes back: it is no answer to lose)
    state = tmp_path / "state"

    async def first_run() -> str:
        p = producer(service, producer_id="split", state_dir=state, linger=10.0)
        futures = [
            await p.send("ta", [{"id": 0}, {"id": 1}], checkpoint="a"),
            await p.send("ta", [{"id": "six"}], checkpoint="b"),
            await p.send("ta", [{"id": 2}], checkpoint="c"),
        ]
        with pytest.raises(ClosedWithPending) as pending:
            await p.close(timeout=0.3)  # (a crash: part 0 landed, no answer came)
        assert pending.value.pending == 3 and "remain journaled" in str(pending.value)
        for f in futures:
            with pytest.raises(ProducerClosed, match="journal"):
                await f
        return p.prefix

    prefix = asyncio.run(first_run())
    coalesced, first_part = f"{prefix}/ta/0", f"{prefix}/ta/0.0"
    assert [key for _, key, _ in service.seen][0] == coalesced and first_part in {k for _, k, _ in service.seen}
    assert [r["id"] for r in service.rows("ta")] == [0, 1]
    records = [json.loads(line) for line in (state / "journal.ndjson").read_text().splitlines()]
    assert [r["op"] for r in records].count("divide") == 1  # journaled before the first part went out
    divide = next(k for k, r in enumerate(records) if r["op"] == "divide")
    first_request = next(k for k, r in enumerate(records) if r["op"] == "req" and r["k"] == first_part)
    assert divide < first_request
    seen_before = len(service.seen)
    service.fault = lambda r: None

    async def second_run() -> None:
        async with producer(service, producer_id="split", state_dir=state) as p:
            assert p.metrics().recovered == 3 and p.checkpoint == "c"
            await p.flush()
            assert p.metrics().replayed == 1 and p.metrics().refused == 1 and p.metrics().acknowledged == 2

    with caplog.at_level("WARNING", logger="producer"):
        asyncio.run(second_run())
    assert [r["id"] for r in service.rows("ta")] == [0, 1, 2]  # each good send once, in order
    again = [key for _, key, _ in service.seen[seen_before:]]
    assert again == [first_part, f"{prefix}/ta/0.1", f"{prefix}/ta/0.2"]  # never the coalesced key again
    assert any("row 0 of this send (checkpoint 'b')" in r.getMessage() for r in caplog.records)
    assert Journal(state).recover().batches == 0  # nothing left over


def test_a_split_survives_a_kill_before_its_first_part_and_a_compaction(tmp_path: Path) -> None:
    """Killed right after the split was journaled (before any part's request), the restart
    takes the parts over, each alone under its own key, with the sends' data intervals; and
    a compacted journal (one record per send) splits the same way."""
    from producer.batching import Accumulator, Send
    from producer.journal import Journal

    journal = Journal(tmp_path)
    journal.recover()
    acc = Accumulator(100, 1 << 20, 10.0)
    sends = [([{"id": 0}, {"id": 1}], 10.0), ([{"id": "six"}], 30.0), ([{"id": 2}], 20.0)]
    for k, (values, until) in enumerate(sends):
        texts = [json.dumps(v) for v in values]
        parts = acc.add_rows("ta", texts, until, 0.0, Send(None), checkpoint=str(k))
        journal.add([(b, texts[a:e]) for b, a, e in parts], until, str(k))
    acc.close_all()
    batch = acc.ready["ta"][0]
    journal.request("p/ta/0", [batch])
    journal.divide("p/ta/0", batch, batch.split())
    journal.close()  # killed here: no part has gone out yet

    for _ in range(2):  # the first recovery compacts the journal; the second reads the compacted one
        recovered = Journal(tmp_path).recover()
        assert recovered.requests == []  # the coalesced request is never sent again
        parts = recovered.waiting
        assert [b.key("p") for b in parts] == ["p/ta/0.0", "p/ta/0.1", "p/ta/0.2"] and all(b.solo for b in parts)
        assert [[json.loads(r) for r in b.rows] for b in parts] == [values for values, _ in sends]
        assert [b.data_until for b in parts] == [10.0, 30.0, 20.0]
        assert [b.segments[0].checkpoint for b in parts] == ["0", "1", "2"] and recovered.checkpoint == "2"


def test_leaving_a_durable_producers_block_is_bounded_and_says_what_stays_journaled(tmp_path: Path) -> None:
    """With the service unreachable, a durable producer never gives an update up; leaving its
    ``with`` block waits ``close_timeout``, then says how many updates stay journaled and that
    the next start sends them, which it does, once."""
    import time

    service = FakeService()
    service.fault = lambda r: ("status", 503, None)
    settings = ProducerSettings(
        url="http://loader", producer_id="exit", state_dir=tmp_path, linger=0.0, close_timeout=0.3, retry_backoff=0.01
    )
    started = time.monotonic()
    with pytest.raises(ClosedWithPending) as pending:
        with LoaderProducer(settings, transport=httpx.MockTransport(service)) as p:
            futures = [p.send(t, rows(t, 0, 2)) for t in ("a", "b")]
    assert time.monotonic() - started < 10.0  # bounded: not as long as the service is down
    error = pending.value
    assert error.pending == 2 and error.journal == tmp_path and isinstance(error, TimeoutError)
    assert "2 update(s) not acknowledged by the service after 0.3 s remain journaled in" in str(error)
    assert "the next start with producer_id 'exit' and this state_dir sends them first" in str(error)
    for future in futures:
        with pytest.raises(ProducerClosed):
            future.result(5)

    with pytest.raises(KeyError) as mine:  # the block's own error stays the one raised, with a note
        with LoaderProducer(settings, transport=httpx.MockTransport(service)) as p:
            raise KeyError("the caller's own")
    assert any("2 update(s)" in note for note in mine.value.__notes__)

    service.fault = lambda r: None
    with LoaderProducer(settings, transport=httpx.MockTransport(service)) as p:
        assert p.metrics().recovered == 2
    assert numbers(service, "a") == numbers(service, "b") == [0, 1]


def test_leaving_a_producers_block_without_a_journal_waits_for_each_outcome() -> None:
    """Without a journal what is not delivered is lost when it closes: leaving the block waits
    until each update is acknowledged or failed (delivery_timeout), and raises nothing; the
    futures tell."""
    service = FakeService()
    service.fault = lambda r: ("status", 503, None)
    settings = ProducerSettings(
        url="http://loader", linger=0.0, close_timeout=0.01, delivery_timeout=0.5, retry_backoff=0.01
    )
    with LoaderProducer(settings, transport=httpx.MockTransport(service)) as p:
        future = p.send("a", rows("a", 0, 1))
    with pytest.raises(DeliveryTimeout):
        future.result(0)  # done when the block was left
