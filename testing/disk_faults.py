"""Disk-fault scenarios: the WAL's or the spill directory's disk fills up or turns read-only
mid-run, and each scenario returns its figures. Shared by tests/system/test_disk_faults.py
and the trial that writes RELIABILITY.md (``python -m trials.faults``).

Full disks are real: a size-limited tmpfs mounted under the test's directory (needs root,
as the test machines and CI run; skipped otherwise). A read-only spill directory is a real
``remount,ro``; the WAL keeps its segment open for writing, which Linux refuses to remount
read-only (EBUSY), so its read-only case injects EROFS into the WAL's writes instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loader.durability import wal as wal_module
from testing.service_harness import OPERATOR, Harness

ROWS = 100


def rows(start: int) -> list[dict[str, object]]:
    return [{"url": f"https://example.com/{i}", "n": i % 1000} for i in range(start, start + ROWS)]


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real small file system at ``path``, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True)


def fill(directory: Path) -> Path:
    """Write a filler file until the file system is full; returns it (delete it to free the space)."""
    filler = directory / "filler"
    with open(filler, "wb") as handle:
        with contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
    return filler


class Producer:
    """Submits numbered rows to ``clicks``; keeps what was acknowledged and what was refused."""

    def __init__(self, h: Harness) -> None:
        self.h, self.next, self.acked, self.refused = h, 0, [], []

    def submit(self) -> Any:
        r = self.h.post("/v1/tables/clicks/updates", json={"rows": rows(self.next * ROWS)})
        if r.status_code == 202:
            self.acked.append(self.next)
        else:
            assert r.status_code == 503, r.text
            assert int(r.headers["Retry-After"]) >= 1
            self.refused.append(r.json()["message"])
        self.next += 1
        return r

    def expected(self) -> list[int]:
        return sorted(i for k in self.acked for i in range(k * ROWS, k * ROWS + ROWS))


def readyz(h: Harness) -> tuple[int, dict[str, Any]]:
    r = h.get("/readyz")
    return r.status_code, r.json()


def verify(h: Harness, producer: Producer) -> dict[str, int]:
    """Every acknowledged row in Delta exactly once; the counts for the report."""
    h.wait_loaded("clicks", h.status("clicks")["last_sequence"], timeout=60)
    ids = sorted(int(r["url"].rsplit("/", 1)[1]) for r in h.rows("clicks"))
    expected = producer.expected()
    lost = len(set(expected) - set(ids))
    duplicated = len(ids) - len(set(ids))
    assert lost == 0 and duplicated == 0 and sorted(set(ids)) == expected
    return {
        "acknowledged": len(producer.acked),
        "refused": len(producer.refused),
        "lost": lost,
        "duplicated": duplicated,
    }


def wait_ready(h: Harness, timeout: float = 30.0) -> float:
    began = time.monotonic()
    h.wait(lambda: readyz(h)[0] == 200, timeout)
    return time.monotonic() - began


def wal_full(tmp_path: Path) -> dict[str, Any]:
    with tmpfs(tmp_path / "walfs", "2m") as walfs:
        data = tmp_path / "data"
        settings = {"wal": {"dir": walfs / "wal", "segment_bytes": 65536}}
        with Harness(data, **settings) as h:
            producer = Producer(h)
            for _ in range(5):
                assert producer.submit().status_code == 202
            filler = fill(walfs)
            first = producer.submit()
            assert first.status_code == 503 and "write-ahead log" in first.json()["message"], first.text
            second = producer.submit()
            assert second.status_code == 503 and "intake is closed" in second.json()["message"], second.text
            code, body = readyz(h)
            assert code == 503 and "wal" in body["faults"] and not body["ready"], body
            assert h.get("/healthz").status_code == 200, "a full disk is no reason to restart the service"
            h.wait_loaded("clicks", 5)  # the five acknowledged updates still load
            filler.unlink()
            resumed = wait_ready(h)
            for _ in range(5):
                assert producer.submit().status_code == 202
            figures = verify(h, producer)
        with Harness(data, **settings) as h:  # the rolled-back log replays cleanly
            assert h.status("clicks")["pending_updates"] == 0
            figures = verify(h, producer)
    return {**figures, "resumed_after_s": round(resumed, 2)}


def wal_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    data = tmp_path / "data"
    with Harness(data) as h:
        producer = Producer(h)
        for _ in range(3):
            assert producer.submit().status_code == 202

        def read_only(*args: object) -> None:
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(wal_module, "_write_all", read_only)
        monkeypatch.setattr(wal_module.os, "ftruncate", read_only)  # healing cannot truncate either
        assert producer.submit().status_code == 503
        assert producer.submit().status_code == 503
        code, body = readyz(h)
        assert code == 503 and "Read-only" in body["faults"]["wal"], body
        monkeypatch.undo()
        resumed = wait_ready(h)
        for _ in range(3):
            assert producer.submit().status_code == 202
        figures = verify(h, producer)
    with Harness(data) as h:
        figures = verify(h, producer)
    return {**figures, "resumed_after_s": round(resumed, 2)}


def spill_fault(tmp_path: Path, kind: str) -> dict[str, Any]:
    """``kind`` "full" or "read-only": the spill directory's disk refuses while loading is paused."""
    with tmpfs(tmp_path / "spillfs", "4m") as spillfs:
        budget = 64 << 10
        spill = {"dir": spillfs / "spill", "memory_budget_bytes": budget, "disk_budget_bytes": 1 << 30}
        with Harness(tmp_path / "data", spill=spill) as h:
            assert h.post("/v1/admin/tables/clicks/pause", token=OPERATOR).status_code == 200
            producer = Producer(h)
            for _ in range(40):  # some of it spills while the disk is fine
                assert producer.submit().status_code == 202
            assert h.get("/v1/admin/pending").json()["spilled_bytes"] > 0
            filler = fill(spillfs) if kind == "full" else None
            if kind == "read-only":
                remount(spillfs, "ro")
            for _ in range(200):
                if producer.submit().status_code == 503:
                    break
            assert producer.refused and "spill" in producer.refused[-1], producer.refused
            code, body = readyz(h)
            assert code == 200 and "spill" in body["faults"], body  # degraded: intake refuses only when memory is full
            if filler is not None:
                filler.unlink()
            else:
                remount(spillfs, "rw")
            began = time.monotonic()
            h.wait(lambda: "spill" not in readyz(h)[1]["faults"], 30)
            resumed = time.monotonic() - began
            assert producer.submit().status_code == 202
            assert h.post("/v1/admin/tables/clicks/resume", token=OPERATOR).status_code == 200
            figures = verify(h, producer)
    return {**figures, "resumed_after_s": round(resumed, 2)}
