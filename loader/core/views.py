"""What a join view is, as an operator declares it (``[[views]]`` in the config file or
``POST /v1/admin/views``), and the Delta table it becomes.

The declaration names registered tables and how they join; ``resolve`` checks it against
the catalog's schemas with ``schedulers.views.declaration.check`` (equi-joins, alpha-
acyclic, types that match) and gives the pure spec the engine runs. A view is a Delta
table the loader writes and nobody else does (docs/join-views.md): the output columns,
and two of the loader's own. The join is a multiset (two orders of one customer with the
same amount are two rows), kept as one row per distinct output with its number of
copies, so a deletion of one copy is one MERGE by a key and never a scan:

- ``__loader_row``: a digest of the output values, the MERGE's key;
- ``__loader_count``: how many copies of the row the join holds (at least 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loader.core.errors import Invalid
from loader.core.schema import RESERVED_PREFIX, Column, TableSchema, check_name
from schedulers.views.declaration import JoinGraph, ViewError, ViewInput, ViewSpec, Window, check, declared
from schedulers.views.engine import EngineSettings, InputShape, MJoinEngine
from schedulers.views.memory import DEFAULT_BUCKETS_PER_KEY
from schedulers.views.profiler import DEFAULT_BLOOM_TUPLES, DEFAULT_WINDOW
from schedulers.views.reoptimizer import ReoptimizerSettings

#: The view table's own columns (module docstring).
ROW_COLUMN = f"{RESERVED_PREFIX}row"
COUNT_COLUMN = f"{RESERVED_PREFIX}count"


class WindowConfig(BaseModel):
    """A sliding window over an append input: its last ``rows`` rows, or the rows whose
    update's ``data_until`` lies within ``seconds`` of the newest one's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int | None = Field(default=None, ge=1)
    seconds: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one(self) -> WindowConfig:
        if (self.rows is None) == (self.seconds is None):
            raise ValueError('a window is {"rows": N} or {"seconds": S}, one of the two')
        return self

    def window(self) -> Window:
        if self.rows is not None:
            return Window("rows", float(self.rows))
        return Window("seconds", float(self.seconds or 0.0))


class ViewInputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    #: How predicates and outputs name the input (default: the table's name); a table
    #: joined with itself needs two aliases.
    alias: str | None = None
    window: WindowConfig | None = None

    @property
    def name(self) -> str:
        return self.alias or self.table


class CachingConfig(BaseModel):
    """A-Caching's knobs (docs/join-views.md, "Tuning"): the paper's where it gives them,
    measured where it leaves them open (BENCHMARKS.md, "view-tuning")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: adaptive (A-Caching), mjoin (no caches), static (``caches`` forced), xjoin
    #: (``caches`` fully materialised).
    mode: Literal["adaptive", "mjoin", "static", "xjoin"] = "adaptive"
    caches: tuple[str, ...] = ()
    #: Re-optimization interval I, in ``interval_unit`` (section 4.5).
    interval: float = Field(default=10_000, gt=0.0, allow_inf_nan=False)
    interval_unit: Literal["updates", "seconds"] = "updates"
    #: W: observations each estimate is averaged over (section 4.3; section 7.1's 10).
    observations: int = Field(default=DEFAULT_WINDOW, ge=2)
    #: W_d: probes per Bloom-filter observation of a miss probability (Appendix A).
    probe_window: int = Field(default=DEFAULT_BLOOM_TUPLES, ge=1)
    #: p: the fraction of updates profiled (Appendix A).
    profile_probability: float = Field(default=EngineSettings().profile_probability, ge=0.0, le=1.0)
    #: Bytes for the view's caches together (section 5); None: unbounded.
    memory_budget_bytes: int | None = Field(default=None, ge=0)
    #: Without a budget, a cache's buckets per key its input holds (section 3.3's
    #: direct-mapped table); "unbounded": a dictionary keeping every key.
    buckets_per_key: float | Literal["unbounded"] = Field(
        default=DEFAULT_BUCKETS_PER_KEY or "unbounded", union_mode="left_to_right"
    )

    @field_validator("buckets_per_key")
    @classmethod
    def _positive_buckets(cls, value: float | str) -> float | str:
        if isinstance(value, float) and not (0 < value < float("inf")):
            raise ValueError('buckets_per_key must be a positive number, or "unbounded"')
        return value

    #: Section 6's m: globally-consistent caches are candidates too while fewer than m
    #: satisfy the prefix invariant; 0 keeps to the prefix invariant.
    global_caches: int = Field(default=6, ge=0, le=12)

    def engine(self, seed: int) -> EngineSettings:
        return EngineSettings(
            mode=self.mode,
            caches=self.caches,
            profile_probability=self.profile_probability,
            window=self.observations,
            bloom_tuples=self.probe_window,
            global_caches=self.global_caches,
            reoptimizer=ReoptimizerSettings(
                interval=self.interval,
                unit=self.interval_unit,
                memory_budget=float(self.memory_budget_bytes) if self.memory_budget_bytes is not None else None,
                buckets_per_key=None if self.buckets_per_key == "unbounded" else float(self.buckets_per_key),
            ),
            seed=seed,
        )


class ViewConfig(BaseModel):
    """A join view as an operator declares it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    inputs: tuple[ViewInputConfig, ...]
    #: Equalities ``alias.column = alias.column``.
    on: tuple[str, ...]
    #: ``alias.column`` or ``alias.column AS name``.
    select: tuple[str, ...] = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    #: Where the join runs (docs/join-views.md, "Where the work runs"): ``driver``, the MJoin
    #: executor with A-Caching in the loader process (inputs held in its memory); ``spark``,
    #: each view load's delta as one Spark job over the inputs' files (cluster-ready, no
    #: caches, a job's fixed cost per load).
    engine: Literal["driver", "spark"] = "driver"
    caching: CachingConfig = Field(default_factory=CachingConfig)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value, "view name")

    def join_columns(self, table: str) -> list[str]:
        """The columns of input ``table`` that the view joins on (its ``on`` equalities name
        them ``alias.column``): their type and nullability are the view's to keep."""
        aliases = {i.name for i in self.inputs if i.table == table}
        found = []
        for equality in self.on:
            for side in equality.split("="):
                alias, _, column = side.strip().partition(".")
                if alias in aliases and column and column not in found:
                    found.append(column)
        return found

    def spec(self, kinds: Mapping[str, str]) -> ViewSpec:
        """The pure spec (``kinds``: each table's mode, append or latest); ``ViewError`` when
        a predicate or output does not parse."""
        inputs = [
            ViewInput(
                alias=item.name,
                table=item.table,
                kind="latest" if kinds.get(item.table) == "latest" else "append",
                window=item.window.window() if item.window is not None else None,
            )
            for item in self.inputs
        ]
        return declared(self.name, inputs, self.on, self.select)


class ResolvedView:
    """A declaration checked against the catalog: its spec, join graph, each input's shape
    for the executor, and the view table's schema."""

    def __init__(self, config: ViewConfig, schemas: Mapping[str, TableSchema]) -> None:
        self.config = config
        if config.name in schemas:
            raise Invalid(f"view {config.name!r}: a table has that name; choose another name for the view")
        kinds = {name: ("latest" if schema.latest else "append") for name, schema in schemas.items()}
        typed = {name: {c.name: c.type.value for c in schema.columns} for name, schema in schemas.items()}
        nested = [
            f"{item.table}.{column}"
            for item in config.inputs
            if item.table in schemas
            for column in config.join_columns(item.table)
            for c in schemas[item.table].columns
            if c.name == column and not c.type.primitive
        ]
        if nested:
            raise Invalid(
                f"view {config.name!r} joins on {sorted(set(nested))}, of nested (struct, array or map) types; a "
                "view joins on columns of primitive types (nested columns may be among its outputs)"
            )
        try:
            self.spec: ViewSpec = config.spec(kinds)
            self.graph: JoinGraph = check(self.spec, typed)
        except ViewError as exc:
            raise Invalid(f"view {config.name!r} cannot be maintained: {exc}") from None
        if config.engine == "spark":
            rows = [item.alias for item in self.spec.inputs if item.window is not None and item.window.kind == "rows"]
            if rows:
                raise Invalid(
                    f"view {config.name!r}: engine 'spark' keeps whole inputs and seconds windows; the rows "
                    f"window of {rows} cuts versions row by row, which only engine 'driver' does: use a "
                    "seconds window or engine 'driver'"
                )
            if "caching" in config.model_fields_set:
                raise Invalid(
                    f"view {config.name!r}: 'caching' configures engine 'driver''s caches; engine 'spark' "
                    "runs each load as one Spark job without them: drop 'caching' or use engine 'driver'"
                )
        reserved = [o.name for o in self.spec.outputs if o.name.lower().startswith(RESERVED_PREFIX)]
        if reserved:
            raise Invalid(f"view {config.name!r}: output names {reserved} start {RESERVED_PREFIX!r}, the loader's")
        self.inputs: dict[str, TableSchema] = {item.table: schemas[item.table] for item in self.spec.inputs}
        self.shapes = tuple(
            InputShape(tuple(schemas[item.table].names), tuple(schemas[item.table].key)) for item in self.spec.inputs
        )
        columns = []
        for output in self.spec.outputs:
            source = schemas[self.spec.inputs[self.spec.input_index(output.source.input)].table]
            kind = next(c.type for c in source.columns if c.name == output.source.column)
            columns.append(Column(name=output.name, type=kind))
        columns += [Column(name=ROW_COLUMN, type="string", nullable=False)]
        columns += [Column(name=COUNT_COLUMN, type="int64", nullable=False)]
        self.schema = TableSchema(columns=tuple(columns))
        try:  # the caching plan: named caches must be candidates of these pipelines
            MJoinEngine(self.spec, self.graph, self.shapes, settings=config.caching.engine(0), timer=lambda: 0.0)
        except ValueError as exc:
            raise Invalid(f"view {config.name!r}: caching: {exc}") from None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def tables(self) -> tuple[str, ...]:
        """Each input's table, once (a self-join reads its table under two aliases)."""
        return tuple(dict.fromkeys(item.table for item in self.spec.inputs))


def resolve(config: ViewConfig, schemas: Mapping[str, TableSchema]) -> ResolvedView:
    """``config`` checked against ``schemas`` (the catalog's); ``Invalid`` (422) says why not."""
    return ResolvedView(config, schemas)
