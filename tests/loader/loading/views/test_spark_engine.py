"""A view whose engine is ``spark`` (loader/loading/sinks/view_join.py): each view load one
Spark job over the inputs' files, in the delta rule's pipelines. Over random input commits
(appends, latest upserts, a seconds window sliding), restarts and failed jobs and commits,
the view table equals the join recomputed from scratch, as the driver engine's does
(tests/loader/loading/views/test_maintainer.py, whose inputs and oracle this reuses)."""

from __future__ import annotations

import decimal
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from loader.core.errors import Invalid
from loader.core.views import ViewConfig, resolve
from loader.loading.sinks.view_delta import ViewTable
from loader.loading.sinks.view_join import run_view_job
from loader.loading.views.maintainer import InputChange, ViewMaintainer
from tests.loader.loading.views.test_maintainer import SCHEMAS, Inputs, view_rows, write_random

pytestmark = pytest.mark.slow


def declare(window: dict[str, Any] | None, **extra: Any) -> Any:
    config = ViewConfig.model_validate(
        {
            "name": "v",
            "engine": "spark",
            "inputs": [
                {"table": "sales", "alias": "s", "window": window},
                {"table": "customers", "alias": "c"},
                {"table": "regions", "alias": "r"},
            ],
            "on": ["s.cid = c.cid", "c.rid = r.rid"],
            "select": ["s.sid", "s.amt", "r.rname"],
            **extra,
        }
    )
    return resolve(config, SCHEMAS)


def test_a_spark_view_equals_the_join_recomputed_from_scratch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sales in a seconds window, the latest customers and the regions as whole inputs."""
    window = {"seconds": 2.5}
    rng = random.Random(17)
    inputs = Inputs(tmp_path, window)
    view = declare(window)
    jobs: list[int] = []

    def joiner(job: Any) -> Any:
        jobs.append(len(job.inputs))
        return run_view_job(spark, job)

    maintainer = ViewMaintainer(view, tmp_path)
    maintainer.open()
    everything = [InputChange(t, None) for t in SCHEMAS]
    clock = 0.0
    for step in range(6):
        for _ in range(rng.randint(1, 3)):  # a few input commits between view loads
            clock += rng.choice([0.5, 1.0, 2.0])
            write_random(inputs, rng, clock, rng.randint(1, 4))
        if step == 3:  # a restart: the versions held and the window's versions read back
            maintainer = ViewMaintainer(view, tmp_path)
            maintainer.open()
        if step == 4:  # the job fails, then a commit lands but its answer is lost
            with pytest.raises(RuntimeError, match="lost executors"):
                maintainer.load(everything, lambda job: (_ for _ in ()).throw(RuntimeError("lost executors")))
            real = ViewTable.commit

            def landed_then_failed(self: Any, *args: Any, real: Any = real, **kwargs: Any) -> Any:
                real(self, *args, **kwargs)
                raise OSError("the answer of the view commit was lost")

            monkeypatch.setattr(ViewTable, "commit", landed_then_failed)
            with pytest.raises(OSError):
                maintainer.load(everything, joiner)
            monkeypatch.setattr(ViewTable, "commit", real)
            assert not maintainer.ready
        done = maintainer.load(rng.sample(everything, len(everything)), joiner)
        assert view_rows(tmp_path) == inputs.join(), step
    assert done.versions or done.skipped
    executor = maintainer.describe()["executor"]
    assert executor["mode"] == "spark" and executor["jobs"] >= 1 and executor["candidates"] == []
    assert jobs and set(jobs) == {3}


def test_what_the_spark_engine_does_not_keep_is_refused() -> None:
    with pytest.raises(Invalid, match="rows window"):
        declare({"rows": 3})
    with pytest.raises(Invalid, match="caching"):
        declare(None, caching={"mode": "mjoin"})


def test_a_spark_view_carries_nested_columns_exactly(spark: SparkSession, tmp_path: Path) -> None:
    """A payload of nested columns (a struct with a NOT NULL field, null in a row; a map) comes
    out of the spark engine's job exactly, grouped on as any output is."""
    from deltalake import write_deltalake

    from loader.core.schema import TableSchema
    from loader.durability.transactions import load_commit
    from loader.loading.sinks.delta_table import create_table

    shelf = {"type": "struct", "fields": [{"name": "aisle", "type": "short", "nullable": False, "metadata": {}}]}
    labels = {"type": "map", "keyType": "string", "valueType": "decimal(5,2)", "valueContainsNull": False}
    schemas = {
        "products": TableSchema.model_validate(
            {
                "columns": [
                    {"name": "pid", "type": "long", "nullable": False},
                    {"name": "shelf", "type": shelf},
                    {"name": "labels", "type": labels},
                ]
            }
        ),
        "picks": TableSchema.model_validate(
            {"columns": [{"name": "kid", "type": "long"}, {"name": "pid", "type": "long"}]}
        ),
    }
    rows = {
        "products": [
            {"pid": 1, "shelf": {"aisle": 3}, "labels": [("a", decimal.Decimal("1.50"))]},
            {"pid": 2, "shelf": None, "labels": None},
        ],
        "picks": [{"kid": 10, "pid": 1}, {"kid": 11, "pid": 2}, {"kid": 12, "pid": 1}],
    }
    for table, schema in schemas.items():
        create_table(tmp_path / table, schema.arrow())
        data = pa.Table.from_pylist(rows[table], schema=schema.arrow())
        write_deltalake(str(tmp_path / table), data, mode="append", commit_properties=load_commit(table, 1, 1.0))
    config = ViewConfig.model_validate(
        {
            "name": "v",
            "engine": "spark",
            "inputs": [{"table": "picks", "alias": "k"}, {"table": "products", "alias": "p"}],
            "on": ["k.pid = p.pid"],
            "select": ["k.kid", "p.shelf", "p.labels"],
        }
    )
    maintainer = ViewMaintainer(resolve(config, schemas), tmp_path)
    maintainer.open()
    maintainer.load([InputChange(t, None) for t in schemas], lambda job: run_view_job(spark, job))
    held = DeltaTable(str(tmp_path / "v")).to_pyarrow_table().select(["kid", "shelf", "labels"]).to_pylist()
    assert sorted(held, key=lambda r: r["kid"]) == [
        {"kid": 10, "shelf": {"aisle": 3}, "labels": [("a", decimal.Decimal("1.50"))]},
        {"kid": 11, "shelf": None, "labels": None},
        {"kid": 12, "shelf": {"aisle": 3}, "labels": [("a", decimal.Decimal("1.50"))]},
    ]
