"""The WAL's or the spill directory's disk fills up or turns read-only mid-run: intake fails
closed with 503 and Retry-After, /readyz says why, nothing acknowledged is lost, and intake
reopens by itself once the disk takes writes again (loader/durability/wal.py ``heal``,
``Intake.heal``, run every second by loader/ops/maintenance.py).

The scenarios (real tmpfs mounts, remounts, injected EROFS) are testing/disk_faults.py,
which ``trials/faults.py`` also runs to write RELIABILITY.md.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from loader.durability import wal as wal_module
from testing.disk_faults import rows, spill_fault, wait_ready, wal_full, wal_read_only
from testing.service_harness import Harness


@pytest.mark.allow_errors('WAL (write to .* failed|append failed)')
def test_a_full_wal_disk_closes_intake_and_it_reopens_when_space_returns(tmp_path: Path) -> None:
    wal_full(tmp_path)


@pytest.mark.allow_errors('WAL (write to .* failed|append failed)')
def test_a_read_only_wal_closes_intake_and_it_reopens_when_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal_read_only(tmp_path, monkeypatch)


@pytest.mark.parametrize("kind", ["full", "read-only"])
@pytest.mark.allow_errors(r"could not spill pending updates to disk: \[Errno (28|30)\]")
def test_a_failing_spill_disk_refuses_intake_once_memory_is_full_and_recovers(tmp_path: Path, kind: str) -> None:
    spill_fault(tmp_path, kind)


@pytest.mark.allow_errors('WAL (write to .* failed|append failed)')
def test_copies_of_landing_files_refused_by_a_failing_wal_are_removed_once_it_is_healed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review finding: the service's copy of a landing file whose update the WAL refused
    stayed forever. It must outlive the fault (a crash before the heal may replay the
    record naming it), then go."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with Harness(tmp_path / "data") as h:
        landing = h.settings.landing_path
        landing.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"url": ["/x"], "n": pa.array([1], pa.int32())}), landing / "c.parquet")
        owned = h.service.intake.owned_dir / "clicks"

        def broken(*args: object) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(wal_module, "_write_all", broken)
        monkeypatch.setattr(wal_module.os, "ftruncate", broken)
        r = h.post("/v1/tables/clicks/updates", json={"files": ["c.parquet"]})
        assert r.status_code == 503, r.text
        assert len(list(owned.iterdir())) == 1
        monkeypatch.undo()
        wait_ready(h)
        h.wait(lambda: list(owned.iterdir()) == [])
        r = h.post("/v1/tables/clicks/updates", json={"files": ["c.parquet"]})
        assert r.status_code == 202, r.text
        h.wait_loaded("clicks", r.json()["updates"][0]["sequence"])
        assert [row["url"] for row in h.rows("clicks")] == ["/x"]


@pytest.mark.allow_errors('WAL (write to .* failed|append failed)')
def test_a_wal_failing_again_while_it_is_healed_keeps_intake_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request in flight when the heal runs may append a group that fails after the
    rollback: intake must stay closed, and that group's copies must wait for the next heal
    (copies refused before the heal belong to the rolled-back groups and go)."""
    import asyncio

    from loader.core.errors import WalWriteFailed
    from loader.intake.requests import UpdateRequest
    from loader.service import LoaderService
    from testing.service_harness import make_settings

    async def scenario() -> None:
        async with LoaderService.running(make_settings(tmp_path / "data"), load=False) as service:
            with monkeypatch.context() as patch:
                patch.setattr(wal_module, "_write_all", _broken)
                with pytest.raises(WalWriteFailed):
                    await service.intake.submit(service.intake.validate([UpdateRequest("clicks", rows(0), None, None)]))
            before, during = tmp_path / "before-heal", tmp_path / "during-heal"
            before.touch()
            during.touch()
            service.intake._refused_copies.append(str(before))
            real_heal = service.wal.heal

            def heal_then_fail_again() -> bool:
                healed = real_heal()
                service.intake._refused_copies.append(str(during))  # the in-flight request's copy
                service.wal._error = OSError(errno.EIO, "Input/output error")  # its group failed
                return healed

            service.wal.heal = heal_then_fail_again  # type: ignore[method-assign]
            await service.maintenance.heal_faults()
            assert service.intake.wal_fault is not None, "intake reopened on a WAL that failed again"
            assert not before.exists() and during.exists()
            service.wal.heal = real_heal  # type: ignore[method-assign]
            service.wal._error = None
            await service.maintenance.heal_faults()
            assert service.intake.wal_fault is None and not during.exists()

    asyncio.run(scenario())


def _broken(*args: object) -> None:
    raise OSError(errno.EIO, "Input/output error")
