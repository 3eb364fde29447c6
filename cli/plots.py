"""PNG plots of a schedule, simulated or recorded by the live service (``loader report``,
``loader simulate --plot``): staleness over time per table (the sawtooth of the paper's
Figure 1 and a heat map), the running staleness integral against the running LOW and
their ratio, and the distribution of stretch.

The figures are computed by ``build_run`` with the same ``FreshnessLedger`` as the
simulator. A simulated schedule covers its trace exactly. A recorded one may not: updates
still pending at export time, batches recorded after the trace was taken, or the oldest
entries dropped by the service's bounded rings. ``build_run`` then keeps, per table, the
run of batches that matches the trace contiguously and accounts the table from the
release before its first kept batch, as if it had been current up to that release; what
it left out is counted in ``Run.notes``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from schedulers.freshness import FreshnessLedger, FreshnessSummary, batch_stretches  # noqa: E402
from schedulers.model import BatchRecord, Trace  # noqa: E402

GRID_POINTS = 600
HEATMAP_TABLES = 40


@dataclass
class TableRun:
    """One table's loads: covered releases, batch finishes and what each made current."""

    name: str
    weight: float
    #: Start of the first covered update's data interval (0 unless the start was cut).
    origin: float
    releases: np.ndarray
    finishes: np.ndarray
    uptos: np.ndarray
    stretches: np.ndarray
    staleness: float
    low_bound: float
    max_stretch: float


@dataclass
class Run:
    tables: list[TableRun]
    summary: FreshnessSummary
    #: Updates of the trace no kept batch covers (pending, or their batch not recorded).
    unloaded_updates: int = 0
    #: Batches that do not continue their table's covered run (not in the trace).
    skipped_batches: int = 0
    #: Tables with updates in the trace but no kept batch.
    unloaded_tables: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.unloaded_updates or self.skipped_batches)

    def notes(self) -> list[str]:
        out = []
        if self.unloaded_updates:
            out.append(f"{self.unloaded_updates:,} updates of the trace are in no recorded batch (left out)")
        if self.skipped_batches:
            out.append(f"{self.skipped_batches:,} batches do not match the trace's updates (left out)")
        if self.unloaded_tables:
            shown = ", ".join(self.unloaded_tables[:5]) + (" ..." if len(self.unloaded_tables) > 5 else "")
            out.append(f"no loads of {len(self.unloaded_tables)} tables with updates: {shown}")
        return out


def build_run(trace: Trace, schedule: list[BatchRecord]) -> Run:
    """Freshness figures of ``schedule`` over ``trace``: exact when it covers the trace (then
    equal to ``schedulers.freshness.evaluate_schedule``), else over what it covers."""
    index = trace.table_index()
    per_table = trace.releases_by_table()
    by_table: dict[int, list[BatchRecord]] = defaultdict(list)
    skipped = 0
    for batch in schedule:
        tid = index.get(batch.table)
        if tid is None:
            skipped += 1
        else:
            by_table[tid].append(batch)
    for vid, spec in enumerate(trace.tables):
        if spec.view_of is not None:  # a view's releases are its inputs' commits (schedulers.simulator)
            inputs = [index[name] for name in spec.view_of]
            per_table[vid] = sorted({b.finish for tid in inputs for b in by_table.get(tid, ())})
    ledger = FreshnessLedger()
    tables: list[TableRun] = []
    covered = 0
    unloaded_tables: list[str] = []
    for tid, spec in enumerate(trace.tables):
        releases = per_table[tid]
        position = {release: j for j, release in enumerate(releases)}
        kept: list[tuple[BatchRecord, int, int]] = []
        cursor: int | None = None
        for batch in sorted(by_table.get(tid, ()), key=lambda b: (b.start, b.finish)):
            lo = position.get(batch.first_release)
            hi = -1 if lo is None else lo + batch.n_updates
            if (
                lo is None
                or (cursor is not None and lo != cursor)
                or batch.n_updates < 1
                or hi > len(releases)
                or releases[hi - 1] != batch.last_release
            ):
                skipped += 1
                continue
            kept.append((batch, lo, hi))
            cursor = hi
        if not kept:
            if releases:
                unloaded_tables.append(spec.name)
            continue
        first = kept[0][1]
        origin = releases[first - 1] if first else 0.0
        lid = ledger.add_table(spec.name, spec.weight, origin=origin)
        previous = origin
        for release in releases[first:cursor]:
            ledger.note_release(lid, release - previous)
            previous = release
        stretches: list[float] = []
        for batch, lo, hi in kept:
            start = releases[lo - 1] if lo else 0.0
            ledger.record_batch(lid, batch.finish, releases, lo, hi, start)
            stretches += batch_stretches(batch.finish, start, releases[lo:hi])
        covered += cursor - first
        account = ledger.table(lid)
        tables.append(
            TableRun(
                name=spec.name,
                weight=spec.weight,
                origin=origin,
                releases=np.array(releases[first:cursor]),
                finishes=np.array([b.finish for b, _, _ in kept]),
                uptos=np.array([b.last_release for b, _, _ in kept]),
                stretches=np.array(stretches),
                staleness=account.staleness,
                low_bound=account.low_bound,
                max_stretch=account.max_stretch,
            )
        )
    return Run(
        tables=tables,
        summary=ledger.summary(),
        unloaded_updates=sum(len(r) for r in per_table) - covered,
        skipped_batches=skipped,
        unloaded_tables=unloaded_tables,
    )


# -- curves -------------------------------------------------------------------------------------
def _grid(run: Run) -> np.ndarray:
    start = min((t.origin for t in run.tables), default=0.0)
    end = max((float(t.finishes[-1]) for t in run.tables), default=1.0)
    return np.linspace(start, max(end, start + 1e-9), GRID_POINTS)


def _running_staleness(table: TableRun, grid: np.ndarray) -> np.ndarray:
    """Integral of the table's staleness from its origin to each grid time (capped at its last finish)."""
    finishes, uptos = table.finishes, table.uptos
    starts = np.concatenate(([table.origin], finishes[:-1]))
    currents = np.concatenate(([table.origin], uptos[:-1]))
    seg = (finishes - starts) * ((finishes - currents) + (starts - currents)) / 2
    cum = np.concatenate(([0.0], np.cumsum(seg)))
    tau = np.clip(grid, table.origin, finishes[-1])
    k = np.minimum(np.searchsorted(finishes, tau, side="left"), len(finishes) - 1)
    c, s = currents[k], starts[k]
    return cum[k] + ((tau - c) ** 2 - (s - c) ** 2) / 2


def _running_low(table: TableRun, grid: np.ndarray) -> np.ndarray:
    ends = table.releases
    starts = np.concatenate(([table.origin], ends[:-1]))
    full = np.concatenate(([0.0], np.cumsum((ends - starts) ** 2 / 2)))
    k = np.searchsorted(ends, grid, side="left")
    kk = np.minimum(k, len(ends) - 1)
    partial = np.where(k < len(ends), np.clip(grid - starts[kk], 0, None) ** 2 / 2, 0.0)
    return full[k] + partial


def _staleness_now(table: TableRun, grid: np.ndarray) -> np.ndarray:
    """Staleness at each grid time (NaN before the table's origin and after its last load)."""
    k = np.searchsorted(table.finishes, grid, side="right")
    upto = np.where(k > 0, table.uptos[np.maximum(k - 1, 0)], table.origin)
    out = grid - upto
    out[(grid < table.origin) | (grid > table.finishes[-1])] = np.nan
    return out


def _sawtooth(table: TableRun) -> tuple[list[float], list[float]]:
    xs, ys, current = [table.origin], [0.0], table.origin
    for finish, upto in zip(table.finishes.tolist(), table.uptos.tolist()):
        xs += [finish, finish]
        ys += [finish - current, finish - upto]
        current = upto
    return xs, ys


def _stalest(run: Run, top: int) -> list[TableRun]:
    return sorted(run.tables, key=lambda t: t.staleness, reverse=True)[:top]


# -- figures ------------------------------------------------------------------------------------
def _draw_sawtooth(ax: plt.Axes, run: Run, title: str, top: int) -> None:
    stalest = _stalest(run, top)
    for table in stalest:
        ax.plot(*_sawtooth(table), linewidth=1, label=table.name)
    ax.set_title(f"{title}: staleness of the {len(stalest)} stalest tables")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("staleness (s)")
    if stalest:
        ax.legend(loc="upper left", fontsize="small")


def _draw_integrals(ax: plt.Axes, run: Run, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    running = sum((_running_staleness(t, grid) for t in run.tables), np.zeros_like(grid))
    low = sum((_running_low(t, grid) for t in run.tables), np.zeros_like(grid))
    ax.plot(grid, running, label="total staleness (integral so far)")
    ax.plot(grid, low, label="LOW (lower bound so far)", linestyle="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("staleness integral (s²)")
    ratio = running[-1] / low[-1] if low[-1] > 0 else float("nan")
    ax.set_title(f"running total against LOW (final ratio {ratio:.3f})")
    ax.legend(loc="upper left", fontsize="small")
    return running, low


def _save(fig: plt.Figure, out: str | Path) -> Path:
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_schedule(trace: Trace, schedule: list[BatchRecord], out: str | Path, title: str, top: int = 5) -> Path:
    """One PNG (``loader simulate --plot``): the stalest tables' sawtooth and the running
    total against LOW."""
    run = build_run(trace, schedule)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), constrained_layout=True)
    _draw_sawtooth(ax1, run, title, top)
    _draw_integrals(ax2, run, _grid(run))
    return _save(fig, out)


def plot_staleness(run: Run, out: str | Path, title: str, top: int = 5) -> Path:
    """Staleness over time per table: the stalest tables' sawtooth, and a heat map of up
    to 40 tables (stalest on top)."""
    grid = _grid(run)
    shown = _stalest(run, HEATMAP_TABLES)
    height = 4 + 0.18 * len(shown)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, height + 3.5), constrained_layout=True)
    _draw_sawtooth(ax1, run, title, top)
    if shown:
        values = np.vstack([_staleness_now(t, grid) for t in shown])
        image = ax2.imshow(
            np.ma.masked_invalid(values),
            aspect="auto",
            interpolation="nearest",
            extent=(float(grid[0]), float(grid[-1]), len(shown) - 0.5, -0.5),
            cmap="magma_r",
        )
        ax2.set_yticks(range(len(shown)), [t.name for t in shown], fontsize="small")
        fig.colorbar(image, ax=ax2, label="staleness (s)")
    ax2.set_title(f"staleness of {len(shown)} of {len(run.tables)} tables over time (stalest on top)")
    ax2.set_xlabel("time (s)")
    return _save(fig, out)


def plot_ratio(run: Run, out: str | Path, title: str) -> Path:
    """The running staleness integral against the running LOW, and their ratio over time."""
    grid = _grid(run)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), constrained_layout=True, sharex=True)
    running, low = _draw_integrals(ax1, run, grid)
    ax1.set_title(f"{title}: " + ax1.get_title())
    floor = low[-1] * 1e-6 if low[-1] > 0 else np.inf
    ratio = np.where(low > floor, running / np.where(low > 0, low, 1.0), np.nan)
    ax2.plot(grid, ratio, color="tab:red", label="staleness / LOW so far")
    ax2.axhline(1.0, color="grey", linestyle=":", label="LOW (ratio 1: no schedule does better)")
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("ratio")
    ax2.set_ylim(bottom=0.9)
    ax2.set_title("ratio to the lower bound over time (the dashboard's ratio, from the start)")
    ax2.legend(loc="upper left", fontsize="small")
    return _save(fig, out)


def plot_stretch(run: Run, out: str | Path, title: str, top: int = 20) -> Path:
    """Distribution of every loaded update's stretch, and the tables with the largest."""
    values = np.concatenate([t.stretches for t in run.tables]) if run.tables else np.zeros(0)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    if values.size:
        low, high = max(float(values.min()), 1e-3), max(float(values.max()), 1.0 + 1e-9)
        wide = high / low > 30  # a long tail: log-spaced bins
        bins = np.geomspace(low, high * 1.0001, 40) if wide else np.linspace(low, high * 1.0001, 40)
        ax1.hist(values, bins=bins, color="tab:blue")
        ax1.set_yscale("log")
        if wide:
            ax1.set_xscale("log")
        for q, style in ((50, "--"), (99, ":")):
            value = float(np.percentile(values, q))
            ax1.axvline(value, color="black", linestyle=style, linewidth=1, label=f"p{q} {value:.3g}")
        ax1.axvline(high, color="tab:red", linewidth=1, label=f"max {high:.3g}")
        ax1.legend(loc="upper right", fontsize="small")
    ax1.set_title(f"{title}: stretch of {values.size:,} updates")
    ax1.set_xlabel("stretch (finish - data start) / update length")
    ax1.set_ylabel("updates (log scale)")
    worst = sorted(run.tables, key=lambda t: t.max_stretch, reverse=True)[:top]
    ax2.barh([t.name for t in worst][::-1], [t.max_stretch for t in worst][::-1], color="tab:orange")
    ax2.set_title(f"largest stretch per table (top {len(worst)})")
    ax2.set_xlabel("max stretch")
    ax2.tick_params(axis="y", labelsize="small")
    return _save(fig, out)


def write_report(run: Run, out_dir: str | Path, title: str, top: int = 5) -> list[Path]:
    """staleness.png, ratio.png and stretch.png in ``out_dir`` (created if missing)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_staleness(run, out_dir / "staleness.png", title, top),
        plot_ratio(run, out_dir / "ratio.png", title),
        plot_stretch(run, out_dir / "stretch.png", title),
    ]
