"""Overload: intake driven far above what the workers load, then relieved (the short version
of ``trials/overload/``, engine in ``testing/overload.py``), and the admission race it found.

The trial runs ``loader serve`` with real Spark, an open-loop load generator of numbered
updates, a small memory budget and a disk budget the overload reaches in seconds. What it
asserts is behaviour, not speed: 503 + Retry-After once the disk budget is reached, pending
payload in memory never above the budget, spill segments never above the disk budget (one
chunk of tolerance: an admitted update may trigger a whole chunk's write), intake accepting
again after the load drops, no 5xx other than 503, every acknowledged row in Delta exactly
once and no refused one. tests/system/test_backpressure.py covers one paused table through the
in-process API; tests/system/test_spill_e2e.py a single burst's RSS and its replay after a kill.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loader.core.errors import ServiceError, Unavailable
from loader.intake.requests import UpdateRequest
from loader.service import LoaderService
from testing.service_harness import make_settings
from tests.spark_fixtures import ConnectEndpoint

ROWS_PER_UPDATE = 200


def rows(start: int) -> list[dict[str, object]]:
    return [{"url": f"https://example.com/{i}", "n": i % 1000} for i in range(start, start + ROWS_PER_UPDATE)]


async def _gated_burst(data_dir: Path, requests: int) -> dict[str, Any]:
    """``requests`` concurrent submissions while the WAL holds every write (as a slow fsync
    does under load); then the WAL lets them through."""
    budget = 64 << 10
    settings = make_settings(
        data_dir, spill={"memory_budget_bytes": budget, "disk_budget_bytes": 4 * budget, "retry_after_seconds": 3}
    )
    async with LoaderService.running(
        settings, load=False
    ) as service:  # nothing is loaded: every accepted byte stays pending
        gate, waiting = asyncio.Event(), []
        real_append = service.wal.append_future

        async def held(records: Any) -> None:
            await gate.wait()
            await real_append(records)

        def slow_append(records: Any) -> asyncio.Future[None]:
            waiting.append(records)
            return asyncio.ensure_future(held(records))

        service.wal.append_future = slow_append  # type: ignore[method-assign]
        tasks = [
            asyncio.ensure_future(
                service.intake.submit(
                    service.intake.validate([UpdateRequest("clicks", rows(k * ROWS_PER_UPDATE), None, None)])
                )
            )
            for k in range(requests)
        ]
        while len(waiting) + sum(t.done() for t in tasks) < requests:  # each reached the WAL or was refused
            await asyncio.sleep(0)
        gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        pending = service.pending
        return {
            "outcomes": outcomes,
            "spilled": pending.spilled,
            "resident": pending.resident,
            "admitted": pending.admitted,
            "chunk": pending.policy.chunk,
            "disk_budget": 4 * budget,
            "count": pending.count("clicks"),
        }


def test_requests_admitted_during_one_slow_wal_write_cannot_overrun_the_disk_budget(tmp_path: Path) -> None:
    """Regression: admission weighed each request against the store as it was before the
    WAL write, so every request arriving during one slow fsync passed on the same totals
    and the spill disk budget was overrun by all of them (50 % over in the overload trial)."""
    out = _run(_gated_burst(tmp_path / "data", requests=80))
    accepted = [o for o in out["outcomes"] if isinstance(o, list)]
    refused = [o for o in out["outcomes"] if isinstance(o, Unavailable)]
    assert len(accepted) + len(refused) == 80, [o for o in out["outcomes"] if isinstance(o, BaseException)]
    assert refused and all(r.retry_after == 3 for r in refused)
    assert out["spilled"] <= out["disk_budget"] + out["chunk"]
    assert out["count"] == len(accepted)  # every acknowledged update is pending
    assert out["admitted"] == 0  # nothing stays reserved once the writes are done


def test_an_admitted_request_refused_later_releases_its_reservation(tmp_path: Path) -> None:
    async def scenario() -> int:
        settings = make_settings(tmp_path / "data", spill={"memory_budget_bytes": 64 << 10})
        async with LoaderService.running(settings, load=False) as service:
            far_future = 4102444800.0  # 2100: beyond the clock skew allowed, refused after admission
            with pytest.raises(ServiceError):
                await service.intake.submit(
                    service.intake.validate([UpdateRequest("clicks", rows(0), None, far_future)])
                )
            return service.pending.admitted

    assert _run(scenario()) == 0


@pytest.mark.allow_errors(r"Exception in callback Intake\._submit")
def test_a_failure_while_queueing_an_appended_update_still_releases_its_reservation(tmp_path: Path) -> None:
    """Review finding: ``_appended`` released the admission only on its happy path, so an
    error while queueing left bytes reserved for good and intake refused more and more."""

    async def scenario() -> int:
        settings = make_settings(tmp_path / "data")
        async with LoaderService.running(settings, load=False) as service:
            drain = service.intake._drain
            failures: list[str] = []

            def failing(table: str, durable: list) -> None:
                failures.append(table)
                raise RuntimeError("injected")

            service.intake._drain = failing  # type: ignore[method-assign]
            await service.intake.submit(service.intake.validate([UpdateRequest("clicks", rows(0), None, None)]))
            await asyncio.sleep(0)  # the append's done-callback has run
            service.intake._drain = drain  # type: ignore[method-assign]
            assert failures == ["clicks"]
            return service.pending.admitted

    assert _run(scenario()) == 0


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_overload_answers_503_within_the_budgets_recovers_and_loses_nothing(connect_server: ConnectEndpoint) -> None:
    from testing import overload
    from testing.overload import ci_plan, run_trial

    plan = ci_plan(connect_server.url)
    trial = run_trial(plan)
    out = overload.analyse(trial)
    f, promises = out["figures"], out["promises"]
    tail = trial["log_tail"]
    # Backpressure: the disk budget was reached and intake answered 503 with Retry-After.
    assert f["refused_503"] > 0, tail
    assert f["refused_with_configured_retry_after"] == f["refused_503"]
    assert f["refused_metric"] == f["refused_503"]
    # Memory: waiting payload never above M (sampled from GET /v1/admin/pending and /metrics).
    assert f["peak_resident_sampled"] <= plan.memory_budget
    assert f["peak_resident_metric"] <= plan.memory_budget
    assert f["peak_in_memory"] <= f["in_memory_bound"]
    # Disk: segments, those being loaded included, within the budget and one spill chunk.
    assert f["peak_disk_accounted"] <= plan.disk_budget + f["chunk_bytes"]
    # After the load drops, intake accepts again: the last seconds' requests are all 202.
    last = [r for r in trial["records"] if r[overload.SCHEDULED] >= plan.total_seconds - 3.0]
    assert last and all(r[overload.STATUS] == 202 for r in last), [r[overload.STATUS] for r in last]
    assert trial["drained"], tail
    # No 5xx but the 503s, no 4xx, every request answered.
    assert not f["other_5xx"] and not f["4xx"] and f["unanswered"] == 0
    # Every acknowledged row in Delta exactly once; no refused one.
    acct = f["account"]
    assert acct["acknowledged"] > 0
    assert acct["lost_rows"] == 0 and acct["duplicated_rows"] == 0 and acct["duplicate_acks"] == 0
    assert acct.get("refused_but_loaded", 0) == 0 and acct["phantom_rows"] == 0
    assert acct["delta_rows"] == acct["acknowledged"] * plan.rows
    assert promises["backpressure: every 503 carries Retry-After"]


def test_a_request_cancelled_while_its_files_are_taken_leaves_no_copy(tmp_path: Path) -> None:
    """A client that disconnects while its landing files are being copied in leaves nothing behind."""
    import threading

    import pyarrow as pa
    import pyarrow.parquet as pq

    async def scenario() -> list[Path]:
        settings = make_settings(tmp_path / "data")
        async with LoaderService.running(settings, load=False) as service:
            pq.write_table(
                pa.table({"url": ["/a"], "n": pa.array([1], pa.int32())}), settings.landing_path / "f.parquet"
            )
            gate, entered, copied = threading.Event(), threading.Event(), threading.Event()
            take = service.intake._take_files

            def slow_take(valid: Any) -> list[str]:
                entered.set()
                gate.wait(30)
                try:
                    return take(valid)
                finally:
                    copied.set()

            service.intake._take_files = slow_take  # type: ignore[method-assign]
            valid = service.intake.validate([UpdateRequest("clicks", None, ["f.parquet"], None)])
            request = asyncio.ensure_future(service.intake.submit(valid))
            await asyncio.to_thread(entered.wait, 30)
            request.cancel()  # the client went away mid-copy
            with pytest.raises(asyncio.CancelledError):
                await request
            gate.set()
            await asyncio.to_thread(copied.wait, 30)
            owned = service.intake.owned_dir
            deadline = asyncio.get_running_loop().time() + 30
            while any(p.is_file() for p in owned.rglob("*")):  # the clean-up runs on the loop, just after
                assert asyncio.get_running_loop().time() < deadline, list(owned.rglob("*"))
                await asyncio.sleep(0.01)
            assert service.pending.admitted == 0
            assert service.intake.tables["clicks"].next_seq == 1, "a cancelled request must not take a sequence number"
            return [p for p in owned.rglob("*") if p.is_file()]

    assert _run(scenario()) == []
