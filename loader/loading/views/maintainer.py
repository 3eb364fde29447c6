"""One join view kept up to date from its inputs' committed versions, each view load
committed exactly once, by one of two engines (docs/join-views.md, "Where the work runs"):

- ``driver``: the MJoin executor with A-Caching runs in the loader process, on the worker
  thread that loads the view. A-Caching is a per-tuple algorithm over in-memory hash
  indexes and caches (section 3): a probe costs microseconds, a Spark job's fixed cost
  (~0.2 s here) the time of 10^4-10^5 probes. The inputs (windows, or whole tables) are
  held in the loader's memory; their rows come from the inputs' Delta logs (``commits.py``).
- ``spark``: each view load is one Spark job (``loader.loading.sinks.view_join``) over the
  inputs' Parquet files, old and new states as the loader lists them from the logs, joined
  in each input's pipeline order; the job runs where table loads run (a load worker
  process, a cluster), and only the load's changes come back. No caches: a view load
  joins its deltas against the other inputs' files (a scan of each, on the executors).

Either way the view's delta is committed by ``deltalake`` as one MERGE
(``loader.loading.sinks.view_delta``), on the driver: the delta is the load's changes,
and the commit carries the view's exactly-once transactions.

Exactly once: each view commit carries one application transaction per input table,
``(view_app_id(view, table), the table's last version the view holds)``. After any
failure or restart the state is rebuilt from those versions (the driver engine's executor:
whole inputs from the snapshot at that version, windows from the versions the last view
commit lists), never trusted stale, and versions at or below them are skipped. Caches
start empty after a rebuild and fill as probes miss (section 3.2): no blocking rebuild.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from loader.core.evolution import conform_rows
from loader.core.views import COUNT_COLUMN, ResolvedView
from loader.loading.sinks.view_delta import ViewTable
from loader.loading.sinks.view_join import JobInput, ViewJob
from loader.loading.views.commits import Commit, added_files, current_version, read_commit, snapshot, state_files
from schedulers.views.engine import Delta, MJoinEngine
from schedulers.views.pipelines import default_orders

log = logging.getLogger(__name__)
#: The view commit's field listing each window's versions (module docstring): [version,
#: data_until, rows of it in the window] for the driver engine; the spark engine's windows
#: move by whole versions, [version, data_until, rows it added], under a key of their own.
WINDOWS_KEY = "loader.view.windows"
SPARK_WINDOWS_KEY = "loader.view.window_versions"


#: Runs a view's Spark job where table loads run (the service's sink); its answer, the
#: load's changes: the outputs and ``COUNT_COLUMN``.
Joiner = Callable[[ViewJob], pa.Table]


@dataclass(frozen=True, slots=True)
class InputChange:
    """A view's pending update: ``table`` committed new versions, up to ``upto`` (None: its
    newest when the view loads)."""

    table: str
    upto: int | None


@dataclass(frozen=True, slots=True)
class ViewLoad:
    """What one view load did."""

    inserted: int
    deleted: int
    changed_rows: int
    versions: dict[str, int]
    skipped: bool
    join_seconds: float
    commit_seconds: float
    delta_version: int | None


class ViewMaintainer:
    """A view's executor and Delta table; one view load at a time (the dispatcher's rule)."""

    def __init__(
        self,
        view: ResolvedView,
        warehouse: Path,
        seed: int = 0,
        timer: Callable[[], float] = time.perf_counter,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.view = view
        self.warehouse = warehouse
        self._seed = seed
        self._timer = timer
        self.table = ViewTable(warehouse / view.name, view.schema, view.name, properties)
        self.spark = view.config.engine == "spark"
        self._windows_key = SPARK_WINDOWS_KEY if self.spark else WINDOWS_KEY
        #: The driver engine's executor (None for the spark engine).
        self.engine: MJoinEngine | None = None
        #: False until opened and after any failed load: the state is rebuilt from Delta first.
        self.ready = False
        #: The spark engine's jobs and the last one's wall time.
        self.jobs = 0
        self.last_job_seconds: float | None = None
        #: The spark engine's window versions' files, by (table, version).
        self._files: dict[tuple[str, int], list[str]] = {}
        #: Per input table: the last version the executor holds (-1: none yet).
        self.absorbed: dict[str, int] = {}
        #: Per windowed input: [version, data_until, rows of it inside the window], oldest first.
        self.windows: dict[str, deque[list[float]]] = {}
        self.rebuilds = 0
        #: The admin view's body as the last load (or rebuild) left the executor: read on the
        #: event loop while the next load changes the executor on a worker thread.
        self._described: dict[str, object] = self._figures()

    # -- state ---------------------------------------------------------------------
    def open(self) -> dict[str, int]:
        """The view's Delta table (created if missing) and the executor rebuilt from it;
        each input table's version the view holds."""
        try:
            self.table.ensure()
            self._rebuild()
        finally:
            self._describe()
        return dict(self.absorbed)

    def _rebuild(self) -> None:
        view = self.view
        held = self.table.versions(view.tables)
        windows = self.table.last_metadata(self._windows_key) or {}
        if self.spark:  # the versions held and the windows' version lists are the whole state
            self.windows = {
                item.alias: deque(list(entry) for entry in windows.get(item.alias, []))  # type: ignore[union-attr]
                for item in view.spec.inputs
                if item.window is not None
            }
            self.absorbed = {table: held.get(table, -1) for table in view.tables}
            self._files.clear()
            self.ready = True
            self.rebuilds += 1
            return
        engine = MJoinEngine(
            view.spec, view.graph, view.shapes, settings=view.config.caching.engine(self._seed), timer=self._timer
        )
        self.windows = {}
        for i, item in enumerate(view.spec.inputs):
            path, schema = self.warehouse / item.table, view.inputs[item.table]
            version = held.get(item.table, -1)
            if item.window is None:
                engine.restore(i, _tuples(snapshot(path, version, schema)))
                continue
            ledger: deque[list[float]] = deque(list(entry) for entry in windows.get(item.alias, []))
            for entry in ledger:
                commit = read_commit(path, int(entry[0]), schema)
                rows = commit.rows if commit.rows is not None else schema.arrow().empty_table()
                take = int(entry[2])
                engine.restore(i, _tuples(rows.slice(rows.num_rows - take)), entry[1])
            self.windows[item.alias] = ledger
        self.engine = engine
        self.absorbed = {table: held.get(table, -1) for table in view.tables}
        self.ready = True
        self.rebuilds += 1

    # -- a view load --------------------------------------------------------------------
    def load(self, changes: Sequence[InputChange], joiner: Joiner | None = None) -> ViewLoad:
        """Absorb ``changes`` in order (each input's versions in commit order) and commit the
        view's delta once; on any failure the state is rebuilt before the next load.
        ``joiner`` runs the spark engine's job."""
        try:
            if not self.ready:
                self.table.ensure()
                self._rebuild()
            if self.spark:
                if joiner is None:
                    raise RuntimeError(f"view {self.view.name!r} runs its joins in Spark, which is not up yet")
                return self._load_spark(changes, joiner)
            return self._load(changes)
        except BaseException:
            self.engine = None
            self.ready = False
            raise
        finally:
            self._describe()

    def _describe(self) -> None:
        """The admin view's figures after a load; never the reason a committed load fails."""
        try:
            self._described = self._figures()
        except Exception:
            log.exception(
                "view %r: the admin view's figures could not be read; it shows the previous ones", self.view.name
            )

    def _load(self, changes: Sequence[InputChange]) -> ViewLoad:
        engine = self.engine
        assert engine is not None
        started = time.perf_counter()
        delta: dict[tuple, int] = {}
        versions: dict[str, int] = {}
        for change in changes:
            path = self.warehouse / change.table
            upto = self._target(change)
            first = self.absorbed[change.table] + 1
            if upto < first:
                continue  # already in the view (a replay after a crash) or nothing new
            schema = self.view.inputs[change.table]
            if first == 0:  # never absorbed: whole inputs as the table is now, windows from its history
                self._absorb(change.table, Commit(upto, snapshot(path, upto, schema), 0.0), delta, windows=False)
                for version in range(0, upto + 1):
                    self._absorb(change.table, read_commit(path, version, schema), delta, whole=False)
            else:
                for version in range(first, upto + 1):
                    self._absorb(change.table, read_commit(path, version, schema), delta)
            self.absorbed[change.table] = versions[change.table] = upto
        return self._commit(delta, versions, started, time.perf_counter())

    def _target(self, change: InputChange) -> int:
        """The input version a change brings the view to (its table's newest if not named)."""
        return change.upto if change.upto is not None else current_version(self.warehouse / change.table)

    def _commit(self, delta: dict[tuple, int], versions: dict[str, int], started: float, joined: float) -> ViewLoad:
        """The view's delta as one MERGE with the load's transactions (nothing new: skipped)."""
        if not versions:
            return ViewLoad(0, 0, 0, {}, True, joined - started, 0.0, None)
        metadata = {self._windows_key: json.dumps({alias: list(ledger) for alias, ledger in self.windows.items()})}
        changed = {row: count for row, count in delta.items() if count}
        version, inserted, deleted = self.table.commit(changed, versions, metadata)
        self.absorbed.update(versions)
        done = time.perf_counter()
        return ViewLoad(inserted, deleted, len(changed), versions, False, joined - started, done - joined, version)

    def _load_spark(self, changes: Sequence[InputChange], joiner: Joiner) -> ViewLoad:
        """The spark engine: every input's old and new files, one job for the delta rule
        (loader/loading/sinks/view_join.py), then the same commit as the driver engine's."""
        started = time.perf_counter()
        view = self.view
        targets: dict[str, int] = {}
        for change in changes:
            upto = self._target(change)
            if upto > self.absorbed[change.table]:
                targets[change.table] = max(upto, targets.get(change.table, -1))
        if not targets:
            return self._commit({}, {}, started, time.perf_counter())
        inputs = []
        for item in view.spec.inputs:
            path = self.warehouse / item.table
            held = self.absorbed[item.table]
            upto = targets.get(item.table, held)
            if item.window is None:
                old = state_files(path, held)
                new = old if upto == held else state_files(path, upto)
            else:  # a seconds window (engine 'spark' refuses rows windows): whole versions slide
                ledger = self.windows.setdefault(item.alias, deque())
                old = self._window_files(item.table, path, ledger)
                for version in range(held + 1, upto + 1):
                    files, data_until, added = self._version_files(item.table, path, version)
                    if files and added != 0:  # as the driver engine: a version without rows neither adds nor expires
                        self._slide(item.alias, Commit(version, None, data_until), added or len(files))
                new = self._window_files(item.table, path, ledger)
            inputs.append(JobInput(item.alias, str(path), view.inputs[item.table], tuple(old), tuple(new)))
        outputs = tuple((view.spec.input_index(o.source.input), o.source.column, o.name) for o in view.spec.outputs)
        job = ViewJob(
            view.name, tuple(inputs), view.graph.attributes, default_orders(view.graph), outputs, COUNT_COLUMN
        )
        answer = joiner(job)
        self.jobs += 1
        arrow = view.schema.arrow()
        names = [name for _, _, name in outputs]
        # (conform_rows, not a cast: a nested NOT NULL field Spark read as nullable is null under
        # a null struct, which pyarrow's cast refuses)
        typed = conform_rows(answer.select(names), pa.schema([arrow.field(n) for n in names]))
        delta = dict(zip(_tuples(typed), answer.column(COUNT_COLUMN).to_pylist(), strict=True))
        joined = time.perf_counter()
        self.last_job_seconds = joined - started
        live = {(t, int(e[0])) for t, ledger in self._ledgers() for e in ledger}
        self._files = {key: files for key, files in self._files.items() if key in live}
        return self._commit(delta, targets, started, joined)

    def _ledgers(self) -> list[tuple[str, deque[list[float]]]]:
        view = self.view
        return [(view.spec.inputs[view.spec.input_index(a)].table, ledger) for a, ledger in self.windows.items()]

    def _version_files(self, table: str, path: Path, version: int) -> tuple[list[str], float, int | None]:
        """A version's added files (absolute), data interval end and rows (None: not in its stats)."""
        files, data_until, added = added_files(path, version)
        self._files[(table, version)] = [str(path / name) for name in files]
        return self._files[(table, version)], data_until, added

    def _window_files(self, table: str, path: Path, ledger: deque[list[float]]) -> list[str]:
        out: list[str] = []
        for entry in ledger:
            key = (table, int(entry[0]))
            if key not in self._files:
                self._version_files(table, path, key[1])
            out += self._files[key]
        return out

    def _absorb(
        self, table: str, commit: Commit, delta: dict[tuple, int], whole: bool = True, windows: bool = True
    ) -> None:
        """One input version through every input over ``table`` (a self-join's aliases in turn)."""
        engine = self.engine
        assert engine is not None
        if commit.rows is None or commit.rows.num_rows == 0:
            return
        rows = _tuples(commit.rows)
        for i, item in enumerate(self.view.spec.inputs):
            if item.table != table or not (windows if item.window is not None else whole):
                continue
            out: Delta = engine.apply(i, rows, data_until=commit.data_until if item.window is not None else None)
            for row, count in out:
                delta[row] = delta.get(row, 0) + count
            if item.window is not None:
                self._slide(item.alias, commit, len(rows))

    def _slide(self, alias: str, commit: Commit, count: int) -> None:
        """The window's version list moves exactly as the executor's window did."""
        window = self.view.spec.inputs[self.view.spec.input_index(alias)].window
        assert window is not None
        ledger = self.windows.setdefault(alias, deque())
        ledger.append([commit.version, commit.data_until, count])
        if window.kind == "seconds":
            while ledger and ledger[0][1] <= commit.data_until - window.size:
                ledger.popleft()
            return
        total = sum(int(entry[2]) for entry in ledger)
        while ledger and total - int(ledger[0][2]) >= window.size:
            total -= int(ledger.popleft()[2])
        if total > window.size:
            ledger[0][2] -= total - window.size

    # -- reading ------------------------------------------------------------------------
    def describe(self) -> dict[str, object]:
        """The admin view's body for this view's executor (docs/join-views.md), as of the
        last load: safe to call while a load runs."""
        return self._described

    def _figures(self) -> dict[str, object]:
        view, engine = self.view, self.engine
        out: dict[str, object] = {
            "name": view.name,
            "inputs": [
                {
                    "alias": item.alias,
                    "table": item.table,
                    "kind": item.kind,
                    "window": {item.window.kind: item.window.size} if item.window is not None else None,
                    "version_held": self.absorbed.get(item.table, -1),
                }
                for item in view.spec.inputs
            ],
            "rebuilds": self.rebuilds,
            "engine": view.config.engine,
        }
        aliases = view.spec.aliases
        if self.spark:
            out["executor"] = {
                "mode": "spark",
                "jobs": self.jobs,
                "last_job_seconds": self.last_job_seconds,
                "cache_probes": 0,
                "cache_hits": 0,
                "pipelines": [
                    {"input": aliases[i], "order": [aliases[k] for k in order]}
                    for i, order in enumerate(default_orders(view.graph))
                ],
                "candidates": [],
                "caches": [],
            }
            return out
        if engine is None:
            out["executor"] = None
            return out
        estimates = engine.reoptimizer.estimates
        states = engine.reoptimizer.states
        grants = engine.reoptimizer.grants
        out["executor"] = {
            "mode": engine.settings.mode,
            "updates": engine.updates,
            "cache_probes": engine.cache_probes,
            "cache_hits": engine.cache_hits,
            "pipelines": [
                {"input": aliases[i], "order": [aliases[k] for k in order]} for i, order in enumerate(engine.orders)
            ],
            "candidates": [
                {
                    "name": c.name(aliases),
                    "pipeline": aliases[c.pipeline],
                    "scope": c.scope,
                    "state": states[c],
                    "benefit": estimates[c].benefit if c in estimates else None,
                    "cost": estimates[c].cost if c in estimates else None,
                    "memory_bytes": estimates[c].memory if c in estimates else None,
                    "granted_entries": grants[c.group].entries if c.group in grants else None,
                    "granted_bytes": grants[c.group].bytes if c.group in grants else None,
                }
                for c in engine.candidates
            ],
            "caches": [
                {
                    "name": f.name,
                    "pipelines": list(f.pipelines),
                    "entries": f.entries,
                    "tuples": f.tuples,
                    "capacity": f.capacity,
                    "probes": f.probes,
                    "hits": f.hits,
                    "evictions": f.evictions,
                    "bytes": f.bytes,
                }
                for f in engine.cache_figures()
            ],
        }
        return out


def _tuples(rows: pa.Table) -> list[tuple]:
    """Rows as tuples, hashable (the executor keys its state by rows): a nested column's value
    frozen (``_frozen``), as Arrow takes it back for the column's type."""
    columns = [
        column.to_pylist() if _flat(column.type) else [_frozen(v) for v in column.to_pylist()]
        for column in rows.columns
    ]
    return list(zip(*columns)) if columns else []


def _flat(kind: pa.DataType) -> bool:
    return not (pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_map(kind))


def _frozen(value: object) -> object:
    """A nested value made hashable: a struct's dict as the tuple of its field values (in
    field order), a list as a tuple, a map's (key, value) pairs as a tuple of pairs."""
    if isinstance(value, dict):
        return tuple(_frozen(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value
