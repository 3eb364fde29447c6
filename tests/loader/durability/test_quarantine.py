"""A batch that keeps failing is quarantined, its table's later updates load, and nothing
acknowledged is lost: the operator retries it (loaded exactly once, also across restarts)
or discards it. Failures of the environment (disk full) are retried, never quarantined.

Spark-free (testing/fakes.py); the Spark path is covered by tests/loader/loading/test_spark_failures.py.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loader.core.schema import TableSchema
from loader.core.updates import Batch, LoadResult
from loader.durability import quarantine as quarantine_module
from loader.durability import wal as wal_module
from testing.fakes import ArrowSink
from testing.prom import sample_value
from testing.service_harness import OPERATOR, PRODUCER, Harness

FAST_RETRY = {"loading": {"retry_base_seconds": 0.01, "retry_max_seconds": 0.05, "max_attempts": 3}}


class PoisonSink(ArrowSink):
    """Fails every batch holding an order with a negative id (a row Spark cannot write),
    or every batch at all with ENOSPC while ``disk_full`` is set."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(warehouse)
        self.poison = True
        self.poison_files = False  # also fail every batch naming landing files
        self.disk_full = threading.Event()
        self.attempts = 0

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        self.attempts += 1
        if self.disk_full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        if self.poison_files and any(u.files for u in batch.updates):
            raise ValueError("cannot read the landing file")
        if self.poison and batch.table == "orders":
            ids = [r["order_id"] for t in batch.row_tables for r in t.to_pylist()]
            if any(i < 0 for i in ids):
                raise ValueError(f"cannot write order id {min(ids)}")
        return super().load(batch, schema)


def order(i: int) -> dict[str, Any]:
    return {"order_id": i, "amount": 1.0, "country": "NL"}


def submit(h: Harness, table: str, rows: list[dict[str, Any]]) -> int:
    r = h.post(f"/v1/tables/{table}/updates", json={"rows": rows})
    assert r.status_code == 202, r.text
    return r.json()["updates"][0]["sequence"]


def quarantined(h: Harness) -> list[dict[str, Any]]:
    r = h.get("/v1/admin/quarantine")
    assert r.status_code == 200, r.text
    return r.json()["batches"]


def order_ids(h: Harness) -> list[int]:
    return sorted(r["order_id"] for r in h.rows("orders"))


def harness(data: Path, **extra: Any) -> Harness:
    return Harness(data, sink=lambda s: PoisonSink(s.warehouse_path), **{**FAST_RETRY, **extra})


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_a_poison_batch_is_quarantined_and_later_updates_load(tmp_path: Path) -> None:
    # A 1 KiB memory budget: the poison update's rows are spilled, so quarantine reads them back.
    with harness(tmp_path / "data", spill={"memory_budget_bytes": 1024}) as h:
        poison = submit(h, "orders", [order(-1)] + [order(1000 + k) for k in range(40)])
        h.wait(lambda: len(quarantined(h)) == 1)
        later = submit(h, "orders", [order(1), order(2)])
        clicks = submit(h, "clicks", [{"url": "/a", "n": 1}])
        h.wait_loaded("orders", later)
        h.wait_loaded("clicks", clicks)

        [entry] = quarantined(h)
        assert entry["first_sequence"] == entry["last_sequence"] == poison
        assert entry["attempts"] == 3 and entry["rows"] == 41 and entry["updates"] == 1
        assert "cannot write order id -1" in entry["error"]
        status = h.status("orders")
        assert status["quarantined_updates"] == 1 and status["pending_updates"] == 0 and status["failures"] == 0
        assert order_ids(h) == [1, 2]
        metrics = h.get("/metrics").text
        assert sample_value(metrics, "loader_table_quarantined_updates", table="orders") == 1
        assert sample_value(metrics, "loader_batches_total", table="orders", outcome="quarantined") == 1
        assert sample_value(metrics, "loader_batches_total", table="orders", outcome="failed") == 3


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_retry_loads_a_quarantined_batch_exactly_once_also_after_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with harness(data) as h:
        poison = submit(h, "orders", [order(-5), order(7)])
        h.wait(lambda: len(quarantined(h)) == 1)
    # The quarantine outlives a restart; its updates are not pending again.
    with harness(data) as h:
        assert [e["first_sequence"] for e in quarantined(h)] == [poison]
        assert h.status("orders")["pending_updates"] == 0
        h.sink.poison = False  # the operator fixed what made the batch fail
        r = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        [ack] = r.json()["updates"]
        assert ack["sequence"] > poison
        h.wait_loaded("orders", ack["sequence"])
        assert order_ids(h) == [-5, 7]
        assert quarantined(h) == [] and h.status("orders")["quarantined_updates"] == 0
        again = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert again.status_code == 404, again.text
        assert (
            sample_value(
                h.get("/metrics").text, "loader_quarantine_resolved_updates_total", table="orders", action="retried"
            )
            == 1
        )
    # The WAL still holds the original records: the tombstone keeps a restart from loading them.
    with harness(data) as h:
        assert h.status("orders")["pending_updates"] == 0
        later = submit(h, "orders", [order(8)])
        h.wait_loaded("orders", later)
        assert order_ids(h) == [-5, 7, 8]


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)", 'injected: cannot note the retry')
def test_a_retry_cut_off_before_it_was_noted_is_not_loaded_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    with harness(data) as h:
        poison = submit(h, "orders", [order(-9)])
        h.wait(lambda: len(quarantined(h)) == 1)
        h.sink.poison = False
        # The retry reaches the WAL, then noting it fails (as a crash there would leave it).
        monkeypatch.setattr(h.service.quarantine.store, "resolve", _raise_oserror)
        r = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        first = r.json()
        assert len(quarantined(h)) == 1  # still listed
        again = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert again.json() == first, "a second retry must get the first answer, not a second load"
        h.wait_loaded("orders", first["updates"][0]["sequence"])
    monkeypatch.undo()
    with harness(data) as h:
        assert quarantined(h) == [], "the restart must see that the retry reached the WAL"
        assert order_ids(h) == [-9]


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_discard_drops_the_batch_for_good(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with harness(data) as h:
        poison = submit(h, "orders", [order(-2)])
        h.wait(lambda: len(quarantined(h)) == 1)
        r = h.client.delete(f"/v1/admin/quarantine/orders/{poison}", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert r.status_code == 200, r.text
        assert r.json()["resolved"] == "discarded" and r.json()["updates"] == 1
        assert quarantined(h) == []
        assert (
            sample_value(
                h.get("/metrics").text, "loader_quarantine_resolved_updates_total", table="orders", action="discarded"
            )
            == 1
        )
        later = submit(h, "orders", [order(3)])
        h.wait_loaded("orders", later)
    with harness(data) as h:
        assert quarantined(h) == [] and h.status("orders")["pending_updates"] == 0
        assert order_ids(h) == [3]


@pytest.mark.allow_errors('No space left on device')
def test_a_full_disk_is_retried_without_limit_never_quarantined(tmp_path: Path) -> None:
    with harness(tmp_path / "data") as h:
        h.sink.poison = False
        h.sink.disk_full.set()
        seq = submit(h, "orders", [order(4)])
        h.wait(lambda: h.status("orders")["failures"] >= 6)  # twice max_attempts
        assert quarantined(h) == []
        h.sink.disk_full.clear()
        h.wait_loaded("orders", seq)
        assert order_ids(h) == [4] and h.status("orders")["failures"] == 0


@pytest.mark.allow_errors('No space left on device', r"cannot write (order id -\d+|a negative price)")
def test_failures_of_the_disk_do_not_count_toward_quarantine(tmp_path: Path) -> None:
    with harness(tmp_path / "data") as h:
        h.sink.disk_full.set()
        submit(h, "orders", [order(-3)])
        h.wait(lambda: h.status("orders")["failures"] >= 4)  # more than max_attempts, all the disk's
        assert quarantined(h) == []
        h.sink.disk_full.clear()  # now the batch's own failure: three more attempts before quarantine
        h.wait(lambda: len(quarantined(h)) == 1)
        [entry] = quarantined(h)
        assert entry["attempts"] == 3 and h.sink.attempts >= 4 + 3


def test_quarantine_endpoints_refuse_what_does_not_exist(harness_default: Harness) -> None:
    h = harness_default
    assert h.post("/v1/admin/quarantine/orders/1/retry", token=OPERATOR).status_code == 404
    assert (
        h.client.delete("/v1/admin/quarantine/nosuch/1", headers={"Authorization": f"Bearer {OPERATOR}"}).status_code
        == 404
    )
    assert h.post("/v1/admin/quarantine/orders/1/retry", token=PRODUCER).status_code == 403


@pytest.fixture
def harness_default(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Harness(tmp_path / "data") as h:
        yield h


def _raise_oserror(*args: object) -> None:
    raise OSError(errno.EIO, "injected: cannot note the retry")


def owned_copies(h: Harness) -> list[str]:
    where = h.service.intake.owned_dir / "orders"
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


@pytest.mark.allow_errors('cannot read the landing file', 'WAL (write to .* failed|append failed)')
def test_a_retry_whose_wal_write_fails_stays_listed_and_keeps_its_files_until_healed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review finding: the retry's new links to the landing files were deleted although a
    crash before the WAL was healed could still replay the records naming them."""
    with harness(tmp_path / "data") as h:
        landing = h.settings.landing_path
        landing.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"order_id": pa.array([11, 12], pa.int64())}), landing / "o.parquet")
        h.sink.poison_files = True
        submit_files = h.post("/v1/tables/orders/updates", json={"files": ["o.parquet"]})
        assert submit_files.status_code == 202, submit_files.text
        poison = submit_files.json()["updates"][0]["sequence"]
        h.wait(lambda: len(quarantined(h)) == 1)
        original = owned_copies(h)
        assert len(original) == 1
        h.sink.poison_files = False

        def broken(*args: object) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(wal_module, "_write_all", broken)
        monkeypatch.setattr(wal_module.os, "ftruncate", broken)
        r = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert r.status_code == 503 and "Retry-After" in r.headers, r.text
        assert len(quarantined(h)) == 1, "a retry that did not reach the WAL leaves the batch quarantined"
        assert len(owned_copies(h)) == 2, "the link a replay could need must stay until the log is healed"
        monkeypatch.undo()
        h.wait(lambda: h.get("/readyz").status_code == 200)
        h.wait(lambda: owned_copies(h) == original)  # the rolled-back retry's link is removed
        r = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        h.wait_loaded("orders", r.json()["updates"][0]["sequence"])
        assert order_ids(h) == [11, 12] and quarantined(h) == []


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_an_unreadable_quarantined_batch_answers_409_and_stays_listed(tmp_path: Path) -> None:
    with harness(tmp_path / "data") as h:
        poison = submit(h, "orders", [order(-4)])
        h.wait(lambda: len(quarantined(h)) == 1)
        h.sink.poison = False
        for rows_file in (h.service.quarantine.store.directory / "orders").rglob("*.parquet"):
            rows_file.write_bytes(b"not parquet")
        r = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert r.status_code == 409 and "cannot be read back" in r.json()["message"], r.text
        assert len(quarantined(h)) == 1 and order_ids(h) == []
        assert (
            h.client.delete(
                f"/v1/admin/quarantine/orders/{poison}", headers={"Authorization": f"Bearer {OPERATOR}"}
            ).status_code
            == 200
        )


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)", 'injected: cannot note the retry')
def test_a_failed_add_leaves_no_half_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry directory left by a failed ``add`` would come back as quarantined after a
    restart, although its batch went back to the queue and loaded."""
    with harness(tmp_path / "data") as h:
        store = h.service.quarantine.store
        monkeypatch.setattr(quarantine_module, "write_atomic", _raise_oserror)
        seq = submit(h, "orders", [order(-6)])
        h.wait(lambda: h.sink.attempts >= 4)  # quarantining failed at least once
        h.sink.poison = False  # the batch loads on its next attempt
        h.wait_loaded("orders", seq)
        assert store.active() == [] and not any((store.directory / "orders").glob("*"))
    monkeypatch.undo()
    with harness(tmp_path / "data") as h:
        assert quarantined(h) == [] and order_ids(h) == [-6]


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_a_resolve_that_cannot_be_saved_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with harness(tmp_path / "data") as h:
        poison = submit(h, "orders", [order(-7)])
        h.wait(lambda: len(quarantined(h)) == 1)
        monkeypatch.setattr(quarantine_module, "write_atomic", _raise_oserror)
        with pytest.raises(OSError):
            h.service.quarantine.store.resolve(h.service.quarantine.store.get("orders", poison), "discarded")
        [entry] = quarantined(h)
        assert entry["resolved"] is None
        monkeypatch.undo()
        r = h.client.delete(f"/v1/admin/quarantine/orders/{poison}", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert r.status_code == 200 and quarantined(h) == []


@pytest.mark.allow_errors('cannot read the landing file')
def test_a_restart_removes_only_copies_no_update_refers_to(tmp_path: Path) -> None:
    """Copies left by a crash (between the copy and the WAL append, before a failed WAL group
    was healed, a retry cut short) are swept at start; a pending update's copy and a
    quarantined batch's copy are kept and load."""
    data = tmp_path / "data"
    with harness(data) as h:
        landing = h.settings.landing_path
        landing.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"order_id": pa.array([21], pa.int64())}), landing / "o.parquet")
        pq.write_table(pa.table({"url": ["/p"], "n": pa.array([5], pa.int32())}), landing / "c.parquet")
        h.sink.poison_files = True
        r = h.post("/v1/tables/orders/updates", json={"files": ["o.parquet"]})
        assert r.status_code == 202, r.text
        poison = r.json()["updates"][0]["sequence"]
        h.wait(lambda: len(quarantined(h)) == 1)
        assert h.post("/v1/admin/tables/clicks/pause", token=OPERATOR).status_code == 200
        r = h.post("/v1/tables/clicks/updates", json={"files": ["c.parquet"]})
        assert r.status_code == 202, r.text
        clicks_seq = r.json()["updates"][0]["sequence"]
        stray = h.service.intake.owned_dir / "clicks" / "left-by-a-crash.parquet"
        stray.write_bytes(b"a copy whose update never reached the WAL")
    with harness(data) as h:
        assert not stray.exists()
        assert h.post("/v1/admin/tables/clicks/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("clicks", clicks_seq)
        assert [row["url"] for row in h.rows("clicks")] == ["/p"]
        r = h.post(f"/v1/admin/quarantine/orders/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        h.wait_loaded("orders", r.json()["updates"][0]["sequence"])
        assert order_ids(h) == [21]


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_a_latest_table_without_order_by_refuses_a_retry_that_would_overwrite_newer_values(tmp_path: Path) -> None:
    latest = {
        "name": "prices",
        "schema": {"columns": [{"name": "sym", "type": "string", "nullable": False}, {"name": "px", "type": "int64"}]},
        "mode": "latest",
        "key": ["sym"],
    }

    class PoisonPrices(ArrowSink):
        def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
            if any(r["px"] < 0 for t in batch.row_tables for r in t.to_pylist()):
                raise ValueError("cannot write a negative price")
            return super().load(batch, schema)

    with Harness(tmp_path / "data", sink=lambda s: PoisonPrices(s.warehouse_path), **FAST_RETRY) as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=latest).status_code == 201
        poison = submit(h, "prices", [{"sym": "a", "px": -1}])
        h.wait(lambda: len(quarantined(h)) == 1)
        h.wait_loaded("prices", submit(h, "prices", [{"sym": "a", "px": 2}]))
        refused = h.post(f"/v1/admin/quarantine/prices/{poison}/retry", token=OPERATOR)
        assert refused.status_code == 409 and "without order_by" in refused.json()["message"]
        assert [r["px"] for r in h.rows("prices")] == [2] and len(quarantined(h)) == 1
