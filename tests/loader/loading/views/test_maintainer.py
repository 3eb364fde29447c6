"""A view's maintainer against its inputs' Delta tables (deltalake only, no Spark): for any
interleaving of input commits (appends, latest upserts, windows sliding), view loads,
restarts and view commits that fail before or after they land, the view table equals the
join recomputed from scratch over the inputs at the versions the view holds."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.core.schema import TableSchema
from loader.core.views import COUNT_COLUMN, ViewConfig, resolve
from loader.durability.transactions import load_commit
from loader.loading.sinks.delta_table import create_table
from loader.loading.sinks.upsert_dv import KeyIndex, commit_with_deletion_vectors
from loader.loading.sinks.view_delta import ViewTable
from loader.loading.views.commits import HistoryGone, read_commit
from loader.loading.views.maintainer import InputChange, ViewMaintainer
from testing.depth import examples

SALES = TableSchema.model_validate(
    {
        "columns": [
            {"name": "sid", "type": "int64"},
            {"name": "cid", "type": "int64"},
            {"name": "amt", "type": "float64"},
        ]
    }
)
CUSTOMERS = TableSchema.model_validate(
    {"columns": [{"name": "cid", "type": "int64", "nullable": False}, {"name": "rid", "type": "int64"}], "key": ["cid"]}
)
REGIONS = TableSchema.model_validate(
    {"columns": [{"name": "rid", "type": "int64"}, {"name": "rname", "type": "string"}]}
)
SCHEMAS = {"sales": SALES, "customers": CUSTOMERS, "regions": REGIONS}
WINDOWS: list[dict[str, Any] | None] = [None, {"rows": 3}, {"seconds": 2.5}]


class Inputs:
    """The input tables as a test writes them, and the join they define."""

    def __init__(self, warehouse: Path, window: dict[str, Any] | None, upsert: str = "merge") -> None:
        self.warehouse, self.window = warehouse, window
        #: customers, the latest input, upserted by deltalake's MERGE or with deletion vectors
        #: (loader/loading/sinks/upsert_dv.py: re-added files carry deletion vectors, add no rows).
        self.index: KeyIndex | None = None
        if upsert == "deletion-vectors":
            (warehouse / "customers").mkdir()
            create_table(warehouse / "customers", CUSTOMERS.arrow(), [], "customers", {}, ("deletionVectors",))
            self.index = KeyIndex(warehouse / "customers", CUSTOMERS)
        self.sales: list[tuple[float, list[tuple]]] = []  # per commit: data_until, rows
        self.customers: dict[int, tuple] = {}
        self.regions: list[tuple] = []
        self.seq = {t: 0 for t in SCHEMAS}
        for table in SCHEMAS:
            self.write(table, [], 0.0)

    def write(self, table: str, rows: list[tuple], data_until: float) -> None:
        schema = SCHEMAS[table]
        self.seq[table] += 1
        data = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema.arrow())
        path = str(self.warehouse / table)
        commit = load_commit(table, self.seq[table], data_until)
        if table == "customers" and self.index is not None:
            latest = {r[0]: r for r in rows}
            source = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in latest.values()], schema=schema.arrow())
            version = DeltaTable(path).version()
            commit_with_deletion_vectors(self.index, version, source, table, self.seq[table], data_until)
            self.customers.update(latest)
            return
        if table == "customers" and rows:
            latest = {r[0]: r for r in rows}
            source = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in latest.values()], schema=schema.arrow())
            DeltaTable(path).merge(
                source, "t.cid = s.cid", source_alias="s", target_alias="t", commit_properties=commit
            ).when_matched_update_all().when_not_matched_insert_all().execute()
            self.customers.update(latest)
            return
        write_deltalake(path, data, mode="append", commit_properties=commit)
        if table == "sales" and rows:
            self.sales.append((data_until, rows))
        elif table == "regions":
            self.regions += rows

    def sales_in_view(self) -> list[tuple]:
        if self.window is None:
            return [r for _, rows in self.sales for r in rows]
        if "rows" in self.window:
            return [r for _, rows in self.sales for r in rows][-self.window["rows"] :] if self.sales else []
        newest = self.sales[-1][0] if self.sales else 0.0
        return [r for du, rows in self.sales if du > newest - self.window["seconds"] for r in rows]

    def join(self) -> Counter:
        names = Counter(self.regions)
        out: Counter = Counter()
        for sid, cid, amt in self.sales_in_view():
            customer = self.customers.get(cid)
            if customer is None:
                continue
            for (rid, rname), n in names.items():
                if rid == customer[1]:
                    out[(sid, amt, rname)] += n
        return out


def write_random(inputs: Inputs, rng: random.Random, clock: float, k: int) -> None:
    """One commit of ``k`` random rows to a random input (few keys: joins and upserts meet)."""
    table = rng.choice(list(SCHEMAS))
    if table == "sales":
        rows = [(rng.randint(0, 9), rng.randint(0, 4), float(rng.randint(0, 2))) for _ in range(k)]
    elif table == "customers":
        rows = [(rng.randint(0, 4), rng.randint(0, 2)) for _ in range(k)]
    else:
        rows = [(rng.randint(0, 2), rng.choice("xyz")) for _ in range(k)]
    inputs.write(table, rows, clock)


def view_rows(warehouse: Path) -> Counter:
    rows = DeltaTable(str(warehouse / "v")).to_pyarrow_table().to_pylist()
    assert all(r[COUNT_COLUMN] > 0 for r in rows)
    return Counter({(r["sid"], r["amt"], r["rname"]): r[COUNT_COLUMN] for r in rows})


def declare(window: dict[str, Any] | None, mode: str) -> Any:
    config = ViewConfig.model_validate(
        {
            "name": "v",
            "inputs": [
                {"table": "sales", "alias": "s", "window": window},
                {"table": "customers", "alias": "c"},
                {"table": "regions", "alias": "r"},
            ],
            "on": ["s.cid = c.cid", "c.rid = r.rid"],
            "select": ["s.sid", "s.amt", "r.rname"],
            "caching": {"mode": mode, "interval": 20, "observations": 4, "profile_probability": 0.5}
            | ({"caches": ["r:[c s]"]} if mode in ("static", "xjoin") else {}),
        }
    )
    return resolve(config, SCHEMAS)


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31),
    window=st.sampled_from(WINDOWS),
    mode=st.sampled_from(["adaptive", "mjoin", "static", "xjoin"]),
    upsert=st.sampled_from(["merge", "deletion-vectors"]),
)
def test_the_view_equals_the_join_recomputed_from_scratch(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    window: Any,
    mode: str,
    upsert: str,
) -> None:
    warehouse = tmp_path_factory.mktemp("warehouse")
    rng = random.Random(seed)
    inputs = Inputs(warehouse, window, upsert)
    view = declare(window, mode)
    maintainer = ViewMaintainer(view, warehouse, seed=seed)
    maintainer.open()
    everything = [InputChange(t, None) for t in SCHEMAS]
    maintainer.load(everything)
    clock = 0.0
    real = ViewTable.commit
    for _ in range(rng.randint(6, 14)):
        step = rng.random()
        if step < 0.55:
            clock += rng.choice([0.5, 1.0, 2.0])
            write_random(inputs, rng, clock, rng.randint(0, 3))
            continue
        if step < 0.65:  # a restart: the executor rebuilt from Delta
            maintainer = ViewMaintainer(view, warehouse, seed=seed)
            maintainer.open()
        elif step < 0.75:  # a view commit fails before or after it lands; the next load settles it
            landed = rng.random() < 0.5

            def failing(self: Any, *args: Any, landed: bool = landed, **kwargs: Any) -> Any:
                if landed:
                    real(self, *args, **kwargs)
                raise OSError("injected")

            clock += 1.0
            inputs.write("regions", [(rng.randint(0, 2), "w")], clock)  # something for the view to commit
            monkeypatch.setattr(ViewTable, "commit", failing)
            try:
                with pytest.raises(OSError):
                    maintainer.load(everything)
            finally:
                monkeypatch.setattr(ViewTable, "commit", real)
            assert maintainer.engine is None
        maintainer.load(rng.sample(everything, len(everything)))
        assert view_rows(warehouse) == inputs.join()
    maintainer.load(everything)
    assert view_rows(warehouse) == inputs.join()


def test_history_a_view_needs_that_was_cleaned_up_is_named(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "t"), pa.table({"sid": [1], "cid": [1], "amt": [1.0]}))
    (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").rename(tmp_path / "gone.json")
    with pytest.raises(HistoryGone, match="log retention"):
        read_commit(tmp_path / "t", 0, SALES)
