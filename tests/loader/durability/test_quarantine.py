"""An update that keeps failing is quarantined, its table's other updates load, and nothing
acknowledged is lost: the operator retries it (loaded exactly once, also across restarts)
or discards it. A batch that keeps failing is bisected down to the update that cannot load
(a poison update holds back only itself). A latest table without order_by holds the keys
of a quarantined update: their later values wait until it is retried or discarded.
Failures of the environment (disk full) are retried, never quarantined.

Spark-free (testing/fakes.py); the Spark path is covered by tests/loader/loading/test_spark_failures.py.
"""

from __future__ import annotations

import errno
import json
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
        # Once the Delta log is past the discarded update, its tombstone and directory go
        # (maintenance prunes with each WAL truncation; called here so that it is not timing).
        store = h.service.quarantine.store
        assert store.get("orders", poison) is not None
        store.prune({"orders": later})
        assert store.get("orders", poison) is None and not store._dir("orders", poison).exists()
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


# -- a poison update holds back only itself ---------------------------------------------------------------


class Bisected(ArrowSink):
    """Fails every batch holding an order with a negative id, naming its row (as a load's error
    may). Optionally answers its first real commit with an error (the answer lost after the
    commit), and once ``stall_after`` loads have returned fails every load with a full disk,
    which is retried without limit: a bisection then stops part-way, as a crash would stop it."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(warehouse)
        self.poison = True
        self.lose_answer_once = False
        self.stall_after: int | None = None
        self.returned = 0
        self.stalls = 0
        self.tried: list[tuple[int, int]] = []

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        self.tried.append((batch.first_seq, batch.last_seq))
        if self.stall_after is not None and self.returned >= self.stall_after:
            self.stalls += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        if self.poison:
            for update in batch.updates:
                for position, row in enumerate(update.rows.to_pylist() if update.rows is not None else []):
                    if row["order_id"] < 0:
                        bad = row["order_id"]
                        raise ValueError(f"row {position} of update {update.seq}: cannot write order id {bad}")
        result = super().load(batch, schema)
        if self.lose_answer_once and not result.skipped:
            self.lose_answer_once = False
            raise ValueError("the answer was lost after the commit")
        self.returned += 1
        return result


def bisected(data: Path) -> Harness:
    return Harness(data, sink=lambda s: Bisected(s.warehouse_path), **FAST_RETRY)


def paused_updates(h: Harness, table: str, bodies: list[list[dict[str, Any]]], keys: bool = False) -> list[int]:
    """Updates that wait together, then load as one batch (the table is resumed)."""
    assert h.post(f"/v1/admin/tables/{table}/pause", token=OPERATOR).status_code == 200
    seqs = []
    for k, rows in enumerate(bodies):
        headers = {"Idempotency-Key": f"feed-{k}"} if keys else {}
        r = h.post(f"/v1/tables/{table}/updates", json={"rows": rows}, headers=headers)
        assert r.status_code == 202, r.text
        seqs.append(r.json()["updates"][0]["sequence"])
    assert h.post(f"/v1/admin/tables/{table}/resume", token=OPERATOR).status_code == 200
    return seqs


def batches(h: Harness, table: str, outcome: str) -> float:
    return sample_value(h.get("/metrics").text, "loader_batches_total", table=table, outcome=outcome)


@pytest.mark.allow_errors(r"cannot write order id -\d+")
def test_one_poison_among_ten_good_updates_holds_back_only_itself(tmp_path: Path) -> None:
    """The user's report: 10 good updates batched beside a bad one were all quarantined."""
    with bisected(tmp_path / "data") as h:
        bodies = [[order(100 + 10 * k + i) for i in range(3)] for k in range(11)]
        bodies[5][2] = order(-1)  # the sixth update's third row cannot be written
        seqs = paused_updates(h, "orders", bodies, keys=True)
        h.wait(lambda: len(quarantined(h)) == 1)
        h.wait_loaded("orders", seqs[-1])

        assert h.sink.tried[0] == (seqs[0], seqs[-1])  # they were one batch
        [entry] = quarantined(h)
        assert entry["first_sequence"] == entry["last_sequence"] == seqs[5] and entry["updates"] == 1
        assert entry["idempotency_key"] == "feed-5" and entry["row"] == 2 and entry["attempts"] == 3
        assert "cannot write order id -1" in entry["error"]
        good = [r["order_id"] for k, rows in enumerate(bodies) if k != 5 for r in rows]
        assert order_ids(h) == sorted(good)  # each once
        status = h.status("orders")
        assert status["quarantined_updates"] == 1 and status["pending_updates"] == 0 and status["failures"] == 0
        # 1..11 failed 3 times, then 1..6 and 4..6 once each, then 6 alone 3 times; 1..3, 4..5, 7..11 loaded.
        assert sample_value(h.get("/metrics").text, "loader_batch_splits_total", table="orders") == 3
        assert batches(h, "orders", "failed") == 8 and batches(h, "orders", "quarantined") == 1
        assert batches(h, "orders", "loaded") == 3

        h.sink.poison = False  # the cause fixed, a retry loads the update once
        r = h.post(f"/v1/admin/quarantine/orders/{seqs[5]}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        h.wait_loaded("orders", r.json()["updates"][0]["sequence"])
        assert order_ids(h) == sorted(good + [150, 151, -1]) and quarantined(h) == []


@pytest.mark.allow_errors(r"cannot write order id -\d+", "No space left on device", "the answer was lost")
def test_two_poisons_a_lost_answer_and_a_restart_mid_bisection_load_every_other_update_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ids = [-k if k in (4, 9) else k for k in range(1, 13)]
    with bisected(data) as h:
        h.sink.lose_answer_once = True  # 1..3 commits, its answer is lost: split, then skipped twice
        h.sink.stall_after = 2  # then 4..6 meets a full disk until the restart
        seqs = paused_updates(h, "orders", [[order(i)] for i in ids])
        h.wait(lambda: h.sink.stalls >= 2)
        assert quarantined(h) == [] and order_ids(h) == [1, 2, 3]
        assert h.service.dispatcher.suspect("orders") == [seqs[5], seqs[11]]
        assert sample_value(h.get("/metrics").text, "loader_batch_splits_total", table="orders") == 3
    with bisected(data) as h:  # the bisection is not kept: the pending updates are one batch again
        h.wait(lambda: len(quarantined(h)) == 2)
        h.wait_loaded("orders", seqs[-1])
        assert [e["first_sequence"] for e in quarantined(h)] == [seqs[3], seqs[8]]
        assert order_ids(h) == sorted(i for i in ids if i > 0)
        assert h.sink.tried[0] == (seqs[3], seqs[-1])
    with bisected(data) as h:  # and once more: nothing replayed, nothing loaded twice
        assert h.status("orders")["pending_updates"] == 0 and len(quarantined(h)) == 2
        assert order_ids(h) == sorted(i for i in ids if i > 0)


# -- a latest table: the quarantined update's keys wait ------------------------------------------------


PRICES = {
    "name": "prices",
    "schema": {"columns": [{"name": "sym", "type": "string", "nullable": False}, {"name": "px", "type": "int64"}]},
    "mode": "latest",
    "key": ["sym"],
}


class PoisonPrices(ArrowSink):
    """Fails every batch holding a negative price; its first load waits for ``proceed``
    (``started`` tells it began), so that values can arrive while a batch is in flight."""

    def __init__(self, warehouse: Path, poison: bool = True) -> None:
        super().__init__(warehouse)
        self.poison = poison
        self.started = threading.Event()
        self.proceed = threading.Event()
        self.proceed.set()

    def load(self, batch: Batch, schema: TableSchema) -> LoadResult:
        self.started.set()
        self.spilled = bool(batch.spilled)  # (the last batch held an update handed over as its spill segment)
        assert self.proceed.wait(20)
        rows = list(batch.row_tables) + [ref.read() for ref in batch.spilled]
        if self.poison and any(r["px"] < 0 for t in rows for r in t.to_pylist()):
            raise ValueError("cannot write a negative price")
        return super().load(batch, schema)


def latest_harness(data: Path, poison: bool = True, **settings: Any) -> Harness:
    return Harness(data, sink=lambda s: PoisonPrices(s.warehouse_path, poison), **FAST_RETRY, **settings)


def px(**values: int) -> list[dict[str, Any]]:
    return [{"sym": sym, "px": value} for sym, value in values.items()]


def prices(h: Harness) -> dict[str, int]:
    return {r["sym"]: r["px"] for r in h.rows("prices")}


def quarantined_prices(h: Harness, table: dict[str, Any] = PRICES) -> tuple[int, int]:
    """A latest table whose second update (a=-1, b=2) cannot load, between a=1,b=1,c=1 and
    a=3,c=3, which arrives while the second is being loaded (waiting beside it, a=3 would
    have overwritten a=-1 in place, and a=-1, superseded, would never load): they are one
    batch from the first retry on, which is bisected."""
    assert h.post("/v1/admin/tables", token=OPERATOR, json=table).status_code == 201
    rows = [px(a=1, b=1, c=1), px(a=-1, b=2), px(a=3, c=3)]
    if table.get("order_by"):
        rows = [[{**r, "t": k} for r in body] for k, body in enumerate(rows)]
    h.wait_loaded("prices", submit(h, "prices", rows[0]))
    sink: PoisonPrices = h.sink  # type: ignore[assignment]
    sink.started.clear()
    sink.proceed.clear()
    poison = submit(h, "prices", rows[1])
    h.wait(sink.started.is_set)
    later = submit(h, "prices", rows[2])
    sink.proceed.set()
    h.wait(lambda: len(quarantined(h)) == 1)
    h.wait_loaded("prices", later)
    return poison, later


@pytest.mark.allow_errors(r"cannot write (order id -\d+|a negative price)")
def test_a_latest_table_without_order_by_holds_the_keys_of_a_quarantined_update_until_a_retry(tmp_path: Path) -> None:
    """Before: later values loaded, and the retry was then refused (409) since its values would
    have overwritten them. Now later values of the quarantined update's keys wait (other keys
    load), and the retry loads the quarantined values and then the ones that waited."""
    with latest_harness(tmp_path / "data") as h:
        poison, _ = quarantined_prices(h)
        [entry] = quarantined(h)
        assert entry["first_sequence"] == poison and (entry["held_keys"], entry["held_values"]) == (2, 1)
        assert prices(h) == {"a": 1, "b": 1, "c": 3}  # c's later value loaded, a's waits
        h.wait_loaded("prices", submit(h, "prices", px(a=4, b=4, c=4)))
        assert prices(h) == {"a": 1, "b": 1, "c": 4}
        assert quarantined(h)[0]["held_values"] == 2  # the newest of a and of b
        h.sink.poison = False
        r = h.post(f"/v1/admin/quarantine/prices/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        h.wait_loaded("prices", r.json()["updates"][0]["sequence"])
        assert prices(h) == {"a": 4, "b": 4, "c": 4}  # as if the quarantined update had loaded in its turn
        assert quarantined(h) == []
        h.wait_loaded("prices", submit(h, "prices", px(a=5)))  # the keys are free again
        assert prices(h) == {"a": 5, "b": 4, "c": 4}


@pytest.mark.allow_errors(r"cannot write a negative price")
def test_discarding_a_latest_tables_quarantined_update_loads_the_values_its_keys_held(tmp_path: Path) -> None:
    with latest_harness(tmp_path / "data") as h:
        poison, _ = quarantined_prices(h)
        r = h.client.delete(f"/v1/admin/quarantine/prices/{poison}", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert r.status_code == 200, r.text
        h.wait(lambda: prices(h) == {"a": 3, "b": 1, "c": 3})  # a's waiting value loads; b=2 is gone
        assert quarantined(h) == [] and h.status("prices")["pending_updates"] == 0
        assert (
            sample_value(
                h.get("/metrics").text, "loader_quarantine_resolved_updates_total", table="prices", action="discarded"
            )
            == 1
        )


@pytest.mark.allow_errors(r"cannot write a negative price")
def test_with_order_by_later_values_load_and_a_retry_loads_only_what_is_still_newest(tmp_path: Path) -> None:
    t = {"name": "t", "type": "int64", "nullable": False}
    ordered = {**PRICES, "order_by": "t", "schema": {"columns": [*PRICES["schema"]["columns"], t]}}
    with latest_harness(tmp_path / "data") as h:
        poison, _ = quarantined_prices(h, ordered)
        assert prices(h) == {"a": 3, "b": 1, "c": 3}  # order_by decides: nothing waits
        assert (quarantined(h)[0]["held_keys"], quarantined(h)[0]["held_values"]) == (0, 0)
        h.sink.poison = False
        r = h.post(f"/v1/admin/quarantine/prices/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        h.wait_loaded("prices", r.json()["updates"][0]["sequence"])
        assert prices(h) == {"a": 3, "b": 2, "c": 3}  # a=-1 is older than a=3 by order_by


@pytest.mark.allow_errors(r"cannot write a negative price")
def test_held_keys_outlive_restarts_and_a_retry_cut_short_by_one_loads_once_after_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with latest_harness(data) as h:
        poison, _ = quarantined_prices(h)
        h.wait_loaded("prices", submit(h, "prices", px(a=4, c=4)))  # a=4 waits, durable beside the entry
    with latest_harness(data) as h:
        assert [(e["first_sequence"], e["held_keys"], e["held_values"]) for e in quarantined(h)] == [(poison, 2, 1)]
        assert prices(h) == {"a": 1, "b": 1, "c": 4}
        h.wait_loaded("prices", submit(h, "prices", px(a=5)))
        assert prices(h) == {"a": 1, "b": 1, "c": 4} and quarantined(h)[0]["held_values"] == 1
        assert h.post("/v1/admin/tables/prices/pause", token=OPERATOR).status_code == 200
        r = h.post(f"/v1/admin/quarantine/prices/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        retried = r.json()["updates"][0]["sequence"]
    # Stopped before the retry loaded: the restart holds the keys until that update arrives again.
    with latest_harness(data, poison=False) as h:
        assert quarantined(h) == [] and h.status("prices")["pending_updates"] == 1
        assert h.post("/v1/admin/tables/prices/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("prices", retried)
        assert prices(h) == {"a": 5, "b": 2, "c": 4}
    with latest_harness(data, poison=False) as h:
        assert h.status("prices")["pending_updates"] == 0 and prices(h) == {"a": 5, "b": 2, "c": 4}
        h.wait_loaded("prices", submit(h, "prices", px(a=6, b=6)))
        assert prices(h) == {"a": 6, "b": 6, "c": 4}


@pytest.mark.allow_errors(r"cannot write a negative price")
def test_an_entry_set_aside_before_keys_were_held_still_refuses_a_retry(tmp_path: Path) -> None:
    """An entry an older version wrote held no keys: their later values loaded, and a retry
    would overwrite them, so it is refused as it was (discard it and send current values)."""
    data = tmp_path / "data"
    with latest_harness(data) as h:
        poison, _ = quarantined_prices(h)
    [meta] = (data / "state" / "quarantine" / "prices").glob("*/entry.json")
    entry = json.loads(meta.read_text())
    for added in ("holds_keys", "held", "release_seq", "row"):
        entry.pop(added)
    meta.write_text(json.dumps(entry))
    with latest_harness(data, poison=False) as h:
        assert (quarantined(h)[0]["held_keys"], quarantined(h)[0]["held_values"]) == (0, 0)
        h.wait_loaded("prices", submit(h, "prices", px(a=9)))
        assert prices(h)["a"] == 9  # nothing holds the key
        refused = h.post(f"/v1/admin/quarantine/prices/{poison}/retry", token=OPERATOR)
        assert refused.status_code == 409 and "did not hold its keys" in refused.json()["message"], refused.text
        r = h.client.delete(f"/v1/admin/quarantine/prices/{poison}", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert r.status_code == 200 and quarantined(h) == [] and prices(h)["a"] == 9


@pytest.mark.allow_errors(r"cannot write a negative price")
def test_a_quarantined_update_handed_over_as_a_spill_segment_holds_its_keys_too(tmp_path: Path) -> None:
    """Its segment is deleted as it leaves the queue: its keys are read from the entry."""
    with latest_harness(tmp_path / "data", spill={"memory_budget_bytes": 1024}) as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=PRICES).status_code == 201
        h.wait_loaded("prices", submit(h, "prices", px(a=1, b=1, c=1)))
        filler = [{"sym": f"f{i:04d}", "px": 0} for i in range(200)]  # 4 KiB: spilled once put back
        poison = submit(h, "prices", px(a=-1, b=2) + filler)
        h.wait(lambda: len(quarantined(h)) == 1)
        assert h.sink.spilled  # type: ignore[attr-defined]
        assert (quarantined(h)[0]["held_keys"], quarantined(h)[0]["held_values"]) == (202, 0)
        h.wait_loaded("prices", submit(h, "prices", px(a=3, c=3)))
        assert prices(h) == {"a": 1, "b": 1, "c": 3} and quarantined(h)[0]["held_values"] == 1
        h.sink.poison = False  # type: ignore[attr-defined]
        r = h.post(f"/v1/admin/quarantine/prices/{poison}/retry", token=OPERATOR)
        assert r.status_code == 202, r.text
        h.wait_loaded("prices", r.json()["updates"][0]["sequence"])
        assert {k: v for k, v in prices(h).items() if not k.startswith("f")} == {"a": 3, "b": 2, "c": 3}
        assert len(prices(h)) == 203
