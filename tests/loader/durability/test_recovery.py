"""Recovery and exactly-once edge cases, each once a real defect (Spark-free sink).

A load that committed but then failed, a lost catalog, restarts and the exported
counters, refused updates naming files, concurrent operator requests.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from loader.core.schema import TableSchema
from loader.core.updates import Update, WalRecord
from loader.durability.catalog import Catalog
from loader.durability.recovery import CommittedSeqs, plan_recovery
from loader.durability.wal import WriteAheadLog
from loader.service import LoaderService
from testing.fakes import ArrowSink
from testing.service_harness import CLICKS, OPERATOR, PRODUCER, Harness, make_settings
from testing.tables import read_delta

EVENTS = {"name": "events", "schema": {"columns": [{"name": "a", "type": "int64"}]}}
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
AS_PRODUCER = {"Authorization": f"Bearer {PRODUCER}"}


class CommitThenFail(ArrowSink):
    """The commit lands, then the worker fails (e.g. reading the new version back), once;
    while it 'runs', a newer update of the same table arrives."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(warehouse)
        self.armed = True
        self.newer_arrived = threading.Event()

    def load(self, batch, schema):  # type: ignore[no-untyped-def]
        result = super().load(batch, schema)
        if self.armed and not result.skipped:
            self.armed = False
            assert self.newer_arrived.wait(10)
            raise OSError("failed after the commit")
        return result


@pytest.mark.allow_errors("failed after the commit")
def test_a_retry_after_a_commit_that_landed_loads_only_the_newer_updates(tmp_path: Path) -> None:
    sink: list[CommitThenFail] = []

    def make(settings):  # type: ignore[no-untyped-def]
        sink.append(CommitThenFail(settings.warehouse_path))
        return sink[0]

    with Harness(tmp_path / "data", sink=make) as h:
        assert h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "/a"}]}).status_code == 202
        h.wait(lambda: h.service.dispatcher.is_running("clicks"))
        assert h.post("/v1/tables/clicks/updates", json={"rows": [{"url": "/b"}]}).status_code == 202
        sink[0].newer_arrived.set()
        h.wait_loaded("clicks", 2)
        assert [r["url"] for r in h.rows("clicks")] == ["/a", "/b"]  # not /a twice


@pytest.mark.allow_errors("injected failure")
def test_a_lost_catalog_keeps_logged_updates_and_numbering_continues(tmp_path: Path) -> None:
    data = tmp_path / "data"
    fail = threading.Event()
    with Harness(data) as h:
        assert h.post("/v1/admin/tables", token=OPERATOR, json=EVENTS).status_code == 201
        for a in range(3):
            h.post("/v1/tables/events/updates", json={"rows": [{"a": a}]})
        h.wait_loaded("events", 3)
        fail.set()
    with Harness(data, fail) as h:  # two more, acknowledged but not loaded
        for a in (3, 4):
            assert h.post("/v1/tables/events/updates", json={"rows": [{"a": a}]}).status_code == 202
    (data / "state" / "catalog.json").unlink()  # an operator follows the 'catalog unreadable' advice
    with Harness(data) as h:
        assert h.service.recovered_updates == 0 and "events" in h.service._orphans
        assert h.post("/v1/admin/tables", token=OPERATOR, json=EVENTS).status_code == 201
        ack = h.post("/v1/tables/events/updates", json={"rows": [{"a": 5}]}).json()["updates"][0]
        assert ack["sequence"] == 6  # above everything Delta and the WAL hold
        h.wait_loaded("events", 6)
        assert sorted(r["a"] for r in h.rows("events")) == [0, 1, 2, 3, 4, 5]


def _counter(text: str, name: str, table: str) -> float:
    match = re.search(rf'{name}\{{table="{table}"\}} (\S+)', text)
    assert match, name
    return float(match.group(1))


def test_staleness_counters_continue_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Harness(data) as h:
        h.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}]})
        h.wait_loaded("clicks", 1)
        before = h.get("/metrics").text
    with Harness(data) as h:
        after = h.get("/metrics").text
        for name in ("loader_table_staleness_seconds_squared_total", "loader_table_low_bound_seconds_squared_total"):
            assert _counter(after, name, "clicks") >= _counter(before, name, "clicks") > 0, name
        assert _counter(after, "loader_table_low_bound_seconds_squared_total", "clicks") == _counter(
            before, "loader_table_low_bound_seconds_squared_total", "clicks"
        )  # nothing counted twice
        # and the integral did not jump by the whole time since the table's registration
        grew = _counter(after, "loader_table_staleness_seconds_squared_total", "clicks") - _counter(
            before, "loader_table_staleness_seconds_squared_total", "clicks"
        )
        assert grew < 60.0


def test_a_future_data_until_within_the_skew_never_makes_staleness_negative(harness: Harness) -> None:
    r = harness.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}], "data_until": time.time() + 4})
    assert r.status_code == 202
    assert r.json()["updates"][0]["release_time"] <= time.time()
    harness.wait_loaded("clicks", 1)
    first = harness.get("/metrics").text
    assert _counter(first, "loader_table_staleness_seconds", "clicks") >= 0
    second = harness.get("/metrics").text
    assert (
        _counter(second, "loader_table_staleness_seconds_squared_total", "clicks")
        >= _counter(first, "loader_table_staleness_seconds_squared_total", "clicks")
        >= 0
    )


def test_a_refused_update_leaves_no_copied_file_behind(harness: Harness) -> None:
    landing = harness.settings.landing_path
    pq.write_table(pa.table({"n": pa.array([1], pa.int32())}), landing / "f.parquet")
    for _ in range(3):
        r = harness.post("/v1/tables/clicks/updates", json={"files": ["f.parquet"], "data_until": 1000})
        assert r.status_code == 422
    owned = harness.service.intake.owned_dir
    assert not owned.exists() or not any(owned.rglob("*.parquet"))


@pytest.mark.allow_errors("injected failure")
def test_rewriting_a_landing_file_after_the_ack_does_not_change_what_is_loaded(tmp_path: Path) -> None:
    gate = threading.Event()
    with Harness(tmp_path / "data", gate) as h:  # loading fails until the file was rewritten
        gate.set()
        path = h.settings.landing_path / "feed.csv"
        path.write_text("url,n\n/acked,1\n", encoding="utf-8")
        assert h.post("/v1/tables/clicks/updates", json={"files": ["feed.csv"]}).status_code == 202
        with open(path, "w", encoding="utf-8") as handle:  # rewritten in place, same inode
            handle.write("url,n\n/next,2\n")
        gate.clear()
        h.wait_loaded("clicks", 1)
        assert [r["url"] for r in h.rows("clicks")] == ["/acked"]


def test_concurrent_registrations_and_weight_changes_keep_one_table_and_a_readable_catalog(harness: Harness) -> None:
    statuses: list[int] = []

    def register() -> None:
        statuses.append(harness.client.post("/v1/admin/tables", json=EVENTS, headers=AS_OPERATOR).status_code)

    def reweigh(k: int) -> None:
        r = harness.client.put("/v1/admin/tables/clicks/weight", json={"weight": 1 + k}, headers=AS_OPERATOR)
        statuses.append(r.status_code)

    threads = [threading.Thread(target=register) for _ in range(3)]
    threads += [threading.Thread(target=reweigh, args=(k,)) for k in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(statuses) <= {200, 201}, statuses
    assert [s.name for s in harness.service.dispatcher.states].count("events") == 1
    catalog = Catalog.open(harness.settings.state_path / "catalog.json")
    assert "events" in catalog and catalog["clicks"].weight == harness.status("clicks")["weight"]


def test_registering_over_a_delta_table_of_another_schema_is_a_conflict(harness: Harness) -> None:
    other = {"name": "orders2", "schema": {"columns": [{"name": "x", "type": "string"}]}}
    assert harness.post("/v1/admin/tables", token=OPERATOR, json=other).status_code == 201
    catalog = harness.settings.state_path / "catalog.json"
    document = json.loads(catalog.read_text())
    document["tables"] = [t for t in document["tables"] if t["name"] != "orders2"]
    del harness.service.catalog.entries["orders2"]  # as if the catalog had lost it
    catalog.write_text(json.dumps(document))
    clash = {"name": "orders2", "schema": {"columns": [{"name": "x", "type": "int64"}]}}
    r = harness.post("/v1/admin/tables", token=OPERATOR, json=clash)
    assert r.status_code == 409 and "another schema" in r.json()["message"]


def test_recovery_plan_sorts_records_into_loaded_pending_and_kept(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path / "wal") as wal:
        wal.append_sync([WalRecord(Update("a", seq, float(seq))) for seq in (1, 2, 3)])
        wal.append_sync([WalRecord(Update("gone", 1, 1.0))])
    with WriteAheadLog(tmp_path / "wal") as wal:
        records = list(wal.replay())
    plan, pending = plan_recovery(records, ["a"], tmp_path / "warehouse")  # no Delta table: nothing committed
    assert plan.committed == {"a": 0} and plan.pending_count == 3
    assert [u.seq for u in pending["a"]] == [1, 2, 3]
    assert [u.seq for u in plan.orphans["gone"]] == [1]
    assert plan.last_seq == {"a": 3, "gone": 1} and plan.last_release["a"] == 3.0


def test_a_multi_update_refused_on_its_second_file_keeps_no_copy_of_the_first(harness: Harness) -> None:
    landing = harness.settings.landing_path
    pq.write_table(pa.table({"n": pa.array([1], pa.int32())}), landing / "good.parquet")
    (landing / "bad.csv").write_text("order_id\nnot-a-number\n", encoding="utf-8")
    body = {"updates": [{"table": "clicks", "files": ["good.parquet"]}, {"table": "orders", "files": ["bad.csv"]}]}
    assert harness.post("/v1/updates", json=body).status_code == 422
    owned = harness.service.intake.owned_dir
    assert not owned.exists() or not [p for p in owned.rglob("*") if p.is_file()]


class SlowStateReads:
    """``loader.service._read_states`` one table a chunk, 0.1 s each, recording the order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import loader.service as service

        self.order: list[str] = []
        real = service._read_states

        def slow(committed, names):  # type: ignore[no-untyped-def]
            time.sleep(0.1)
            self.order.extend(names)
            return real(committed, names)

        monkeypatch.setattr(service, "STATE_CHUNK", 1)
        monkeypatch.setattr(service, "_read_states", slow)


IDLE = [{"name": f"idle{i}", "schema": {"columns": [{"name": "a", "type": "int64"}]}} for i in range(6)]


def test_a_restart_opens_intake_before_idle_tables_are_read_and_numbers_above_delta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38, part 5: a table the WAL does not name is read after intake opens; its
    updates wait for its own read (requested ones first), and are numbered above what Delta
    holds even when the catalog is an old backup that says less (its WAL segments truncated)."""
    data = tmp_path / "data"
    tables = [*IDLE, CLICKS]
    with Harness(data, tables=tables) as h:
        old_catalog = (data / "state" / "catalog.json").read_bytes()  # before any load
        for n in range(3):
            assert h.post("/v1/tables/clicks/updates", json={"rows": [{"n": n}]}).status_code == 202
        h.wait_loaded("clicks", 3)
    for segment in (data / "wal").iterdir():  # every record is in Delta: as after truncation
        if segment.name != "wal.lock":
            segment.unlink()
    (data / "state" / "catalog.json").write_bytes(old_catalog)
    reads = SlowStateReads(monkeypatch)
    settings = make_settings(data, tables=tables)
    caplog.set_level(logging.INFO, logger="loader.service")
    with TestClient(create_app(settings, sink_factory=lambda s: ArrowSink(s.warehouse_path))) as client:
        service: LoaderService = client.app.state.service  # type: ignore[attr-defined]
        assert service.reading is not None  # intake opened with tables still to read
        r = client.post("/v1/tables/clicks/updates", json={"rows": [{"n": 3}]}, headers=AS_PRODUCER)
        assert r.status_code == 202, r.text
        assert r.json()["updates"][0]["sequence"] == 4  # above Delta's 3, not the old catalog's 0
        assert reads.order.index("clicks") < len(tables) - 1  # read before the idle ones after it
        Harness.wait(lambda: service.ready)
        assert sorted(reads.order) == sorted(t["name"] for t in tables)
        Harness.wait(lambda: client.get("/v1/tables/clicks", headers=AS_OPERATOR).json()["last_loaded_sequence"] == 4)
    assert sorted(read_delta(settings.warehouse_path / "clicks").column("n").to_pylist()) == [0, 1, 2, 3]
    assert "read the Delta logs of 7 more tables" in caplog.text


@pytest.mark.allow_errors("cannot read the Delta log of table 'clicks'")
def test_a_table_whose_delta_log_cannot_be_read_at_start_refuses_its_updates_and_the_others_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    with Harness(data, tables=[*IDLE, CLICKS]):
        pass
    real = CommittedSeqs._from_delta

    def unreadable(self: CommittedSeqs, name: str) -> int:
        if name == "clicks":
            raise OSError("injected: the log's disk answers EIO")
        return real(self, name)

    monkeypatch.setattr(CommittedSeqs, "_from_delta", unreadable)
    settings = make_settings(data, tables=[*IDLE, CLICKS])
    with TestClient(create_app(settings, sink_factory=lambda s: ArrowSink(s.warehouse_path))) as client:
        service: LoaderService = client.app.state.service  # type: ignore[attr-defined]
        r = client.post("/v1/tables/clicks/updates", json={"rows": [{"n": 1}]}, headers=AS_PRODUCER)
        assert r.status_code == 503 and "Delta log could not be read" in r.json()["message"], r.text
        assert (
            client.post("/v1/tables/idle0/updates", json={"rows": [{"a": 1}]}, headers=AS_PRODUCER).status_code == 202
        )
        Harness.wait(lambda: client.get("/v1/tables/idle0", headers=AS_OPERATOR).json()["last_loaded_sequence"] == 1)
        Harness.wait(lambda: service.failure is not None)
        assert "'clicks'" in service.failure and not service.ready  # type: ignore[operator]
        assert client.get("/readyz", headers=AS_OPERATOR).status_code == 503
        retire = client.delete("/v1/admin/tables/clicks", headers=AS_OPERATOR)  # drained? cannot be known
        assert retire.status_code == 503 and "cannot be retired" in retire.json()["message"], retire.text
        r = client.post("/v1/tables/clicks/updates", json={"rows": [{"n": 2}]}, headers=AS_PRODUCER)
        assert r.status_code == 503 and not service.intake.wanted  # refused again, not asked again


def test_committed_seqs_reads_each_table_once_and_only_when_asked(tmp_path: Path) -> None:
    sink = ArrowSink(tmp_path)
    schema = TableSchema.model_validate({"columns": [{"name": "a", "type": "int64"}]})
    for name in ("a", "b"):
        sink.ensure_table(name, schema)
    committed = CommittedSeqs(tmp_path, {"a": None, "b": None}, floors={"gone": 7, "b": 2})
    assert not committed.is_read("a") and "gone" in committed and "other" not in committed
    assert committed["a"] == 0 and committed.is_read("a") and not committed.is_read("b")
    assert committed["b"] == 2 and committed["gone"] == 7  # a retired table's floor counts
    assert committed.read_all(["a", "b", "gone"]) == {"a": 0, "b": 2, "gone": 7}
    with pytest.raises(KeyError):
        committed["other"]
