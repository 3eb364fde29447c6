"""Every knob of the service, validated at start-up (pydantic-settings).

Sources, later ones winning: built-in defaults < the TOML file (``loader serve --config``)
< environment variables ``LOADER_<FIELD>`` with ``__`` between nested fields
(``LOADER_SPARK__MASTER=spark://host:7077``). ``deploy/loader.example.toml`` documents
each setting.

Settings come in one section per stage where a stage has several (``[intake]``, ``[wal]``,
``[spill]``, ``[loading]``, ...). The wiring (loader/service.py) hands each stage its
values; no stage reads this module. Names of earlier releases still work as aliases:
``ALIASES`` maps them, in the file, as keyword arguments and as ``LOADER_<NAME>``.
"""

from __future__ import annotations

import os
import tomllib
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from loader.core.errors import StartError
from loader.core.schema import HARD_MAX_DEPTH, MAX_NESTING_DEPTH, MAX_SCHEMA_FIELDS, check_limits
from loader.core.tables import TableConfig
from loader.core.views import ViewConfig
from loader.durability.wal import Durability
from loader.loading.spark import lean_changes
from schedulers.registry import POLICIES


class Role(str, Enum):
    producer = "producer"
    operator = "operator"


class TokenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=16, description="Bearer token (at least 16 characters).")
    role: Role
    #: Producer tokens may be limited to these tables; None = every table.
    tables: list[str] | None = None
    name: str = "client"


class IntakeConfig(BaseModel):
    """What a request may hold before anything is accepted (loader/intake)."""

    model_config = ConfigDict(extra="forbid")

    #: Larger bodies get 413; big feeds belong in the landing directory.
    max_body_bytes: int = Field(default=16 << 20, ge=1024)
    #: Largest file a {"files": [...]} update may name (refused with 413 above it, before copying).
    max_landing_file_bytes: int = Field(default=16 << 30, ge=1)
    #: Updates whose data_until lies further than this in the future are refused.
    max_clock_skew_seconds: float = Field(default=5.0, ge=0)
    #: Deepest nesting of a column's struct, array and map types a table may declare (422 beyond).
    max_nesting_depth: int = Field(default=MAX_NESTING_DEPTH, ge=1, le=HARD_MAX_DEPTH)
    #: Most columns, struct fields, array elements and map keys and values a table's schema may
    #: hold in all (422 beyond).
    max_schema_fields: int = Field(default=MAX_SCHEMA_FIELDS, ge=1, le=1_000_000)
    #: Processes that accept HTTP for the service (api/acceptors/): each parses requests and
    #: checks submitted rows, and the service's own process only numbers, logs and loads them.
    #: 0: the service's process serves HTTP itself. Pays where producers batch or cores are
    #: spare beside the loads (docs/tuning.md).
    acceptors: int = Field(default=0, ge=0, le=64)


class WalConfig(BaseModel):
    """The write-ahead log (loader/durability/wal.py): where, how durable, how it is cut."""

    model_config = ConfigDict(extra="forbid")

    #: Default: <data_dir>/wal.
    dir: Path | None = None
    durability: Durability = Durability.fsync
    #: A segment is closed past this size; whole segments are deleted once Delta holds them.
    segment_bytes: int = Field(default=64 << 20, ge=1 << 16)
    #: While appends arrive together (the last group held more than one), how long the WAL
    #: writer waits after a group's first record for more before it writes and fsyncs them
    #: as one group. Each group wakes the event loop and hands the GIL between threads, which
    #: costs the request path more than the wait (BENCHMARKS.md, isolation). A lone request
    #: never waits. 0: write as soon as the writer is free.
    group_delay_seconds: float = Field(default=0.001, ge=0.0, le=0.1)


class SparkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    master: str = "local[*]"
    app_name: str = "warehouse-loader"
    #: Extra Spark configuration (e.g. spark.jars.packages for the native Delta writer).
    conf: dict[str, str] = Field(default_factory=dict)
    #: Nice increment for the local driver JVM and the load worker processes (Linux): loads
    #: yield the CPU to acks. 0: off.
    driver_nice: int = Field(default=10, ge=0, le=19)
    #: The loader's own Spark Connect server and its load worker processes run under
    #: SCHED_IDLE (Linux): loads get only the CPU time that acknowledgements leave
    #: (BENCHMARKS.md, issue 15). Under an intake that
    #: takes every core, loads then wait, pending updates grow and spill, and intake answers
    #: 503 once the budgets are full. False: ``driver_nice`` only.
    driver_idle: bool = True
    #: What a small append does without (loader/loading/spark.py LEAN_CHANGES, measured in
    #: BENCHMARKS.md): true = the default set, false = none, or a list of change names.
    lean_writes: bool | list[str] = True
    #: How loads reach Spark. "connect" (default): each of the ``workers`` is a process of
    #: its own, a Spark Connect client of ``remote`` or, when that is empty, of a local
    #: Spark Connect server the loader starts from the pyspark package as a child process
    #: (``master`` and ``conf`` are then that server's), restarts if it dies and stops on
    #: shutdown. "classic": the Spark driver runs inside the service process (py4j) and
    #: loads run on its threads, sharing the GIL with intake (docs/service.md).
    mode: Literal["classic", "connect"] = "connect"
    #: A running Spark Connect server, ``sc://host:port`` (mode "connect"); empty: start one.
    remote: str = Field(default="", pattern=r"^(sc://\S+)?$")
    #: Seconds a local Spark Connect server may take to answer before the start fails.
    connect_start_timeout_seconds: float = Field(default=180.0, gt=0)

    @field_validator("lean_writes")
    @classmethod
    def _known_changes(cls, value: bool | list[str]) -> bool | list[str]:
        lean_changes(value)  # ValueError naming the unknown change and the known ones
        return value

    @property
    def lean(self) -> frozenset[str]:
        """The lean changes switched on."""
        return lean_changes(self.lean_writes)

    @model_validator(mode="after")
    def _remote_needs_connect(self) -> SparkConfig:
        if self.remote and self.mode != "connect":
            raise ValueError(f'remote = "{self.remote}" is used only over Spark Connect: set mode = "connect"')
        return self


class MaintenanceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: Seconds between WAL truncations (deleting segments whose updates are all in Delta).
    wal_truncate_seconds: float = Field(default=10.0, gt=0)
    #: Seconds between compactions of each table's small files; 0 disables.
    compact_seconds: float = Field(default=3600.0, ge=0)
    #: Seconds between vacuums; 0 disables. Files younger than the retention stay.
    vacuum_seconds: float = Field(default=86400.0, ge=0)
    vacuum_retention_hours: int = Field(default=168, ge=0)
    #: ``delta.logRetentionDuration`` of the tables the loader creates (others keep theirs,
    #: Delta's 30 days unless set): commit files older than this go at the next checkpoint or
    #: log-keeping run (docs/tuning.md, "Tables that age"). Time travel, and a join view's
    #: windows and lag, reach back this far: keep it, as ``vacuum_retention_hours``, above the
    #: longest (docs/join-views.md). 0: Delta's default.
    log_retention_hours: int = Field(default=168, ge=0, le=1_000_000)
    #: Seconds between log-keeping runs (each table's newest checkpoint verified, a checkpoint
    #: written when far behind, expired log files cleaned: loader/ops/delta_log.py); 0 disables.
    log_keeping_seconds: float = Field(default=3600.0, ge=0)
    #: How long an Idempotency-Key is remembered.
    idempotency_ttl_seconds: float = Field(default=86400.0, gt=0)


class LoadingConfig(BaseModel):
    """How failed loads are retried, and when a batch that keeps failing is set aside."""

    model_config = ConfigDict(extra="forbid")

    #: Back-off before the n-th retry of a table: base * 2**(n-1), at most ``retry_max_seconds``.
    retry_base_seconds: float = Field(default=0.5, gt=0, allow_inf_nan=False)
    retry_max_seconds: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    #: Failed attempts after which a batch is quarantined (its updates set aside, with
    #: their error, for an operator to retry or discard) so that the table's later updates
    #: load. Failures of the environment (disk full, read-only) never quarantine. 0: never.
    max_attempts: int = Field(default=5, ge=0)
    #: Most tables one job may load (docs/tuning.md, "Multi-table jobs"): a free worker is
    #: offered a group of due tables and pays a Spark job's fixed cost once for all of them.
    #: 1 = one table per job, the paper's policies unchanged. Applies to myopic, max-benefit, fifo.
    max_tables_per_job: int = Field(default=32, ge=1, le=1024)
    #: How a job grows (schedulers/job_groups.py): "rate" (max-benefit's criterion on the
    #: job) or "delay" (one job of look-ahead; forms smaller groups).
    group_rule: Literal["rate", "delay"] = "rate"
    #: Starting estimate of the fixed cost every Spark job pays whatever it loads (seconds);
    #: measured online from the jobs' durations afterwards (loader/loading/estimates.py).
    job_overhead_seconds: float = Field(default=0.1, ge=0, le=60, allow_inf_nan=False)
    #: ``delta.checkpointInterval`` of the tables the loader creates: a checkpoint every this
    #: many commits. deltalake replays every commit since the last checkpoint when it commits
    #: and when a handle is brought up to date, so at a few commits a second per table Delta's
    #: default of 100 costs a load 14 ms of commit and refresh where 20 costs 7.5 (BENCHMARKS.md,
    #: "Freshness at 200 to 10,000 tables"). Existing tables keep theirs; 0: Delta's default.
    checkpoint_interval: int = Field(default=20, ge=0, le=100_000)
    #: Seconds a load worker process may take to answer one job (a load, a multi-table
    #: load, a join view's Spark job) before it is killed and the job fails as if the worker
    #: had died: retried with back-off, a strike toward quarantine. A hang thus shows up as
    #: failed loads instead of a worker slot lost for good. Loads in worker processes only
    #: (``[spark] mode = "connect"``): a job in the service's own Spark driver cannot be
    #: stopped without stopping the service. 0: no limit.
    job_timeout_seconds: float = Field(default=1800.0, ge=0, allow_inf_nan=False)


class SpillConfig(BaseModel):
    """Pending updates beyond a memory budget go to spill segments (docs/spilling.md)."""

    model_config = ConfigDict(extra="forbid")

    #: M: payload bytes of pending updates held in memory, shared by all tables' queues.
    memory_budget_bytes: int = Field(default=256 << 20, ge=1024)
    #: buffered-head (many tables, default), half (one table), greedy-chunk or hybrid
    #: (the extended cost model; blocks of c0/c1 bytes).
    policy: Literal["buffered-head", "half", "greedy-chunk", "hybrid"] = "buffered-head"
    #: Where segments go (default: <data_dir>/spill). Emptied at start-up.
    dir: Path | None = None
    #: Bytes of segments at which intake answers 503 with Retry-After instead of accepting.
    disk_budget_bytes: int = Field(default=16 << 30, ge=1024)
    #: Seconds a refused producer is told to wait (Retry-After).
    retry_after_seconds: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    #: Extended cost model of one disk operation, c0 + c1 * bytes (seconds; seconds per byte).
    #: Measured on the spill directory at start-up when not set and the policy needs them.
    c0_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    c1_seconds_per_byte: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _both_costs(self) -> SpillConfig:
        if (self.c0_seconds is None) != (self.c1_seconds_per_byte is None):
            raise ValueError("set both c0_seconds and c1_seconds_per_byte, or neither (then they are measured)")
        return self


class PressureConfig(BaseModel):
    """Chain memory-pressure mode (Babcock et al.): under memory pressure, load the table
    that frees the most resident bytes per second of predicted load time."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    #: Resident pending bytes, as fractions of spill.memory_budget_bytes, at which the
    #: mode starts (high) and ends (low).
    high_watermark: float = Field(default=0.8, gt=0, le=1.0)
    low_watermark: float = Field(default=0.5, ge=0, lt=1.0)
    #: A table this stale is loaded first even under pressure (no starvation).
    staleness_cap_seconds: float = Field(default=300.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> PressureConfig:
        if self.low_watermark >= self.high_watermark:
            raise ValueError("pressure.low_watermark must be below pressure.high_watermark")
        return self


class MetricsConfig(BaseModel):
    """Which per-table series /metrics carries (docs/scaling.md: a scrape at 10,000 tables).

    Every table has about 60 series of its own (freshness gauges, counters, two histograms),
    so at thousands of tables a scrape is tens of megabytes and blocks the event loop for
    seconds. ``top-k`` exports them only for the ``top_k`` stalest tables, the ``top_k``
    whose oldest pending update waits longest, and up to ``top_k`` tables in trouble
    (failing loads, quarantined updates); the ``loader_tables_*`` aggregates over every
    table are exported in both modes.
    """

    model_config = ConfigDict(extra="forbid")

    per_table_series: Literal["all", "top-k"] = "all"
    top_k: int = Field(default=100, ge=1, le=100_000)


class Settings(BaseSettings):
    """Every setting of one service, validated whole before anything starts.

    Built from keyword arguments (the TOML file's contents, via ``load_settings``) under
    the environment, which wins; a mistake anywhere is a ``ValidationError`` naming the
    setting, so a typo never silently falls back to a default.
    """

    model_config = SettingsConfigDict(env_prefix="LOADER_", env_nested_delimiter="__", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    data_dir: Path = Path("data")
    #: Where Delta tables live (default: <data_dir>/warehouse).
    warehouse_dir: Path | None = None
    #: Only files under this directory may be named in {"files": [...]} (default: <data_dir>/landing).
    landing_dir: Path | None = None

    workers: int = Field(default=2, ge=1, le=256)
    policy: str = "myopic"
    #: Extra constructor arguments of the policy (e.g. {period = 5.0} for interval).
    policy_params: dict[str, Any] = Field(default_factory=dict)
    writer: Literal["auto", "delta-rs", "delta-spark"] = "auto"

    #: Observed releases kept for ``GET /v1/admin/trace`` (a ring, oldest dropped first;
    #: 12 bytes each: 12 MB at the default). 0 turns the record off.
    observed_trace_max_updates: int = Field(default=1_000_000, ge=0, le=1 << 31)
    #: Finished batches kept for ``GET /v1/admin/schedule`` (48 bytes each: 4.8 MB). 0: off.
    observed_schedule_max_batches: int = Field(default=100_000, ge=0, le=1 << 31)
    #: The newest load jobs' timelines kept for ``GET /v1/admin/jobs`` (about 2 KB a job of
    #: ten tables); 0 turns the record off (the per-stage metrics stay).
    observed_jobs_max: int = Field(default=10_000, ge=0, le=1_000_000)

    #: Bearer tokens. Empty: tokens are generated at start-up into <data_dir>/tokens.json.
    auth_tokens: list[TokenConfig] = Field(default_factory=list)
    tables: list[TableConfig] = Field(default_factory=list)
    #: Join views over the tables (docs/join-views.md), checked against them at start-up.
    views: list[ViewConfig] = Field(default_factory=list)
    intake: IntakeConfig = Field(default_factory=IntakeConfig)
    wal: WalConfig = Field(default_factory=WalConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    spill: SpillConfig = Field(default_factory=SpillConfig)
    pressure: PressureConfig = Field(default_factory=PressureConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    loading: LoadingConfig = Field(default_factory=LoadingConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"unknown policy {value!r}; choose one of {sorted(POLICIES)}")
        return value

    @model_validator(mode="after")
    def _absolute_paths(self) -> Settings:
        """Every directory as an absolute path, anchored at the working directory of the
        process that read the settings: paths cross into the load worker processes, the
        Spark Connect server and its executors, whose working directories are not ours
        (a relative hand-off file was not found there, and the load failed once)."""
        self.data_dir = self.data_dir.absolute()
        for holder, name in ((self, "warehouse_dir"), (self, "landing_dir"), (self.wal, "dir"), (self.spill, "dir")):
            value = getattr(holder, name)
            if value is not None:
                setattr(holder, name, value.absolute())
        return self

    @model_validator(mode="after")
    def _unique_tables(self) -> Settings:
        counts = Counter(t.name for t in self.tables)  # (not list.count: 10,000 tables must validate fast)
        repeated = sorted(name for name, n in counts.items() if n > 1)
        if repeated:
            raise ValueError(f"tables declared twice: {repeated}")
        views = Counter(v.name for v in self.views)
        if any(n > 1 for n in views.values()):
            raise ValueError(f"views declared twice: {sorted(v for v, n in views.items() if n > 1)}")
        tokens = [t.token for t in self.auth_tokens]
        if len(set(tokens)) != len(tokens):
            raise ValueError("auth_tokens holds the same token twice")
        for table in self.tables:
            if table.schema_.nested or len(table.schema_.columns) > self.intake.max_schema_fields:
                try:
                    check_limits(table.schema_, self.intake.max_nesting_depth, self.intake.max_schema_fields)
                except ValueError as exc:
                    raise ValueError(f"table {table.name!r}: {exc}") from None
        return self

    @model_validator(mode="after")
    def _spill_dir_apart(self) -> Settings:
        """The spill directory is emptied of segments at start-up: it must hold nothing else."""
        if self.spill.dir is None:
            return self
        spill = self.spill.dir.resolve()
        for name, other in (
            ("data_dir", self.data_dir),
            ("the WAL directory", self.wal_path),
            ("the warehouse", self.warehouse_path),
            ("the landing directory", self.landing_path),
        ):
            place = other.resolve()
            if spill == place or place.is_relative_to(spill) or (spill.is_relative_to(place) and name != "data_dir"):
                raise ValueError(
                    f"spill.dir {self.spill.dir} overlaps {name} ({other}); give it a directory of its own"
                )
        return self

    @property
    def warehouse_path(self) -> Path:
        return self.warehouse_dir or self.data_dir / "warehouse"

    @property
    def landing_path(self) -> Path:
        return self.landing_dir or self.data_dir / "landing"

    @property
    def wal_path(self) -> Path:
        return self.wal.dir or self.data_dir / "wal"

    @property
    def spill_path(self) -> Path:
        return self.spill.dir or self.data_dir / "spill"

    @property
    def state_path(self) -> Path:
        return self.data_dir / "state"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file (passed as init kwargs), so deployments override it; the
        # flat names of earlier releases (LOADER_DURABILITY, ...) count as environment too.
        # Each source nests its own old names first, so precedence holds setting by setting.
        return (env_settings, AliasEnvironment(settings_cls), NestedInit(settings_cls, init_settings))


#: Settings of earlier releases -> (section, name) they now have. Accepted wherever settings
#: come from: in the TOML file, as keyword arguments, and as ``LOADER_<OLD NAME>`` variables.
ALIASES: dict[str, tuple[str, str]] = {
    "max_body_bytes": ("intake", "max_body_bytes"),
    "max_landing_file_bytes": ("intake", "max_landing_file_bytes"),
    "max_clock_skew_seconds": ("intake", "max_clock_skew_seconds"),
    "wal_dir": ("wal", "dir"),
    "durability": ("wal", "durability"),
    "wal_segment_bytes": ("wal", "segment_bytes"),
}


def nest_aliases(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each old flat name moved into its section; both at once is an error
    (which one was meant is not clear)."""
    if not any(name in data for name in ALIASES):
        return data
    data = dict(data)
    for old, (section, name) in ALIASES.items():
        if old not in data:
            continue
        value = data.pop(old)
        given = data.get(section)
        if isinstance(given, BaseModel):
            nested = given.model_dump(exclude_unset=True)  # (defaults are not "given")
        else:
            nested = dict(given) if isinstance(given, dict) else {}
        if name in nested:
            raise ValueError(f"{old} and {section}.{name} are the same setting; give it once, as {section}.{name}")
        nested[name] = value
        data[section] = nested
    return data


class AliasEnvironment(PydanticBaseSettingsSource):
    """``LOADER_<OLD NAME>`` variables (``LOADER_DURABILITY=flush``), nested into their sections."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # the whole mapping comes from __call__

    def __call__(self) -> dict[str, Any]:
        environment = {name.lower(): value for name, value in os.environ.items()}  # as pydantic-settings reads it
        found = {}
        for old in ALIASES:
            value = environment.get(f"loader_{old}")
            if value is not None:
                found[old] = value
        return nest_aliases(found)


class NestedInit(PydanticBaseSettingsSource):
    """The keyword arguments of ``Settings(...)`` with their old names nested (``durability=``
    becomes ``wal={"durability": ...}``), so that the environment still wins setting by setting."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # the whole mapping comes from __call__

    def __call__(self) -> dict[str, Any]:
        return nest_aliases(self._init())


class ConfigError(ValueError, StartError):
    """A configuration that cannot start the service; the message says what to fix."""


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Read the TOML file (if any), apply environment and ``overrides``, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    where = f"config file {path}" if path else "configuration"
    try:
        data = nest_aliases(data)
        given = nest_aliases({key: value for key, value in overrides.items() if value is not None})
    except ValueError as exc:
        raise ConfigError(f"{where} is invalid: {exc}") from None
    aliased_sections = {section for section, _ in ALIASES.values()}
    for key, value in given.items():  # (command-line options: they win over the file)
        if key in aliased_sections and isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}  # an old flat name overrides its one setting
        else:
            data[key] = value
    try:
        return Settings(**data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{where} is invalid: {problems}") from None
