"""The service's registry of views (stub catalog and dispatcher, real Delta inputs): an input
commit noted while a view is being opened is not lost; a view that cannot be rebuilt at
start-up does not stop the others and is retried by its loads; the admin view is read from
the last load's figures, never from an executor a load is changing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from loader.core.schema import TableSchema
from loader.core.updates import Batch, Update
from loader.core.views import ViewConfig
from loader.durability.catalog import ViewEntry
from loader.durability.transactions import load_commit
from loader.loading.views import maintainer as maintainer_module
from loader.loading.views import registry as registry_module
from loader.loading.views.registry import JoinViews

SALES = TableSchema.model_validate({"columns": [{"name": "sid", "type": "int64"}, {"name": "cid", "type": "int64"}]})
CUSTOMERS = TableSchema.model_validate(
    {"columns": [{"name": "cid", "type": "int64", "nullable": False}, {"name": "cname", "type": "string"}]}
)
CONFIG = ViewConfig.model_validate(
    {
        "name": "v",
        "inputs": [{"table": "sales", "alias": "s"}, {"table": "customers", "alias": "c"}],
        "on": ["s.cid = c.cid"],
        "select": ["s.sid", "c.cname"],
    }
)


class Dispatcher:
    """What the registry asks of the dispatcher: a unit per view, its released updates."""

    def __init__(self) -> None:
        self.released_updates: list[Update] = []
        self.index: dict[str, int] = {}

    def add_table(self, spec: Any, origin: float, account: Any) -> None:
        self.index[spec.name] = len(self.index)

    def released(self, update: Update) -> None:
        self.released_updates.append(update)


def write(warehouse: Path, table: str, schema: TableSchema, rows: list[dict[str, Any]], seq: int) -> None:
    data = pa.Table.from_pylist(rows, schema=schema.arrow())
    write_deltalake(str(warehouse / table), data, mode="append", commit_properties=load_commit(table, seq, float(seq)))


def make(tmp_path: Path) -> tuple[JoinViews, Dispatcher]:
    write(tmp_path, "sales", SALES, [{"sid": 1, "cid": 1}], 1)
    write(tmp_path, "customers", CUSTOMERS, [{"cid": 1, "cname": "ann"}], 1)
    entries = {"sales": SimpleNamespace(schema=SALES), "customers": SimpleNamespace(schema=CUSTOMERS)}
    catalog = SimpleNamespace(entries=entries, views={}, changed=lambda *a: None)
    dispatcher = Dispatcher()
    return JoinViews(catalog, dispatcher, tmp_path), dispatcher  # type: ignore[arg-type]


def load_all(views: JoinViews, dispatcher: Dispatcher) -> None:
    updates = [u for u in dispatcher.released_updates if u.table == "v"]
    batch = Batch(table="v", updates=updates)
    views.load(batch)


def view_rows(tmp_path: Path) -> set[tuple]:
    from deltalake import DeltaTable

    return {(r["sid"], r["cname"]) for r in DeltaTable(str(tmp_path / "v")).to_pyarrow_table().to_pylist()}


def test_an_input_commit_noted_while_the_view_opens_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    views, dispatcher = make(tmp_path)
    real_version = registry_module.current_version
    opened, go_on = threading.Event(), threading.Event()

    def slow_version(path: Path) -> int:
        """The view's state is read (sales at version 0); the next commit lands after."""
        version = real_version(path)
        if path.name == "sales":
            opened.set()
            assert go_on.wait(10)
        return version

    monkeypatch.setattr(registry_module, "current_version", slow_version)

    async def scenario() -> None:
        registering = asyncio.create_task(views.register(CONFIG))
        assert await asyncio.to_thread(opened.wait, 10)
        # A sales load commits (version 1) and is noted while the view reads its Delta state.
        write(tmp_path, "sales", SALES, [{"sid": 2, "cid": 1}], 2)
        views.input_committed("sales", 1, 2.0)
        go_on.set()
        await registering

    asyncio.run(scenario())
    load_all(views, dispatcher)
    assert view_rows(tmp_path) == {(1, "ann"), (2, "ann")}
    releases = [u.release for u in dispatcher.released_updates]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)


@pytest.mark.allow_errors('could not be rebuilt at start-up: the disk said no', "view 'gone' is not maintained")
def test_a_view_that_cannot_be_rebuilt_at_start_up_is_retried_by_its_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views, dispatcher = make(tmp_path)
    views.catalog.views["v"] = ViewEntry(config=CONFIG, created_at=0.0)
    broken = ViewConfig.model_validate({**CONFIG.model_dump(), "name": "gone", "on": ["s.cid = c.nope"]})
    views.catalog.views["gone"] = ViewEntry(config=broken, created_at=0.0)
    real_rebuild = maintainer_module.ViewMaintainer._rebuild
    failures = {"left": 1}

    def failing_rebuild(self: Any) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("the disk said no")
        real_rebuild(self)

    monkeypatch.setattr(maintainer_module.ViewMaintainer, "_rebuild", failing_rebuild)
    asyncio.run(views.open_all())  # neither the failed rebuild nor the invalid view stops it
    assert views.names() == ["v"] and "nope" in views.broken["gone"]
    assert views.maintainers["v"].describe()["executor"] is None
    with pytest.raises(Exception, match="not maintained"):
        views.describe("gone")
    load_all(views, dispatcher)  # the load rebuilds first
    assert view_rows(tmp_path) == {(1, "ann")}
    assert views.maintainers["v"].describe()["executor"] is not None
