"""PNG plots of a simulated schedule: the staleness sawtooth of the stalest tables (as in
the paper's Figure 1) and the running staleness integral against the running LOW."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from schedulers.model import BatchRecord, Trace  # noqa: E402


def _per_table(schedule: list[BatchRecord]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    by_table: dict[str, list[BatchRecord]] = defaultdict(list)
    for batch in schedule:
        by_table[batch.table].append(batch)
    out = {}
    for name, batches in by_table.items():
        batches.sort(key=lambda b: b.finish)
        out[name] = (np.array([b.finish for b in batches]), np.array([b.last_release for b in batches]))
    return out


def _running_staleness(finishes: np.ndarray, uptos: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Integral of the table's staleness from 0 to each grid time (capped at its last finish)."""
    starts = np.concatenate(([0.0], finishes[:-1]))
    currents = np.concatenate(([0.0], uptos[:-1]))
    seg = (finishes - starts) * ((finishes - currents) + (starts - currents)) / 2
    cum = np.concatenate(([0.0], np.cumsum(seg)))
    tau = np.minimum(grid, finishes[-1])
    k = np.searchsorted(finishes, tau, side="left")
    k = np.minimum(k, len(finishes) - 1)
    c, s = currents[k], starts[k]
    return cum[k] + ((tau - c) ** 2 - (s - c) ** 2) / 2


def _running_low(trace: Trace, grid: np.ndarray) -> np.ndarray:
    total = np.zeros_like(grid)
    for releases in trace.releases_by_table():
        if not releases:
            continue
        ends = np.array(releases)
        starts = np.concatenate(([0.0], ends[:-1]))
        full = np.concatenate(([0.0], np.cumsum((ends - starts) ** 2 / 2)))
        k = np.searchsorted(ends, grid, side="left")
        inside = k < len(ends)
        kk = np.minimum(k, len(ends) - 1)
        partial = np.where(inside, (np.clip(grid - starts[kk], 0, None)) ** 2 / 2, 0.0)
        total += full[k] + partial
    return total


def plot_schedule(trace: Trace, schedule: list[BatchRecord], out: str | Path, title: str, top: int = 5) -> Path:
    tables = _per_table(schedule)
    horizon = max((b.finish for b in schedule), default=1.0)
    grid = np.linspace(0.0, horizon, 600)
    totals = {name: _running_staleness(f, u, grid) for name, (f, u) in tables.items()}
    stalest = sorted(totals, key=lambda name: totals[name][-1], reverse=True)[:top]

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), constrained_layout=True)
    for name in stalest:
        finishes, uptos = tables[name]
        xs = [0.0]
        ys = [0.0]
        current = 0.0
        for finish, upto in zip(finishes, uptos):
            xs += [finish, finish]
            ys += [finish - current, finish - upto]
            current = upto
        ax1.plot(xs, ys, linewidth=1, label=name)
    ax1.set_title(f"{title}: staleness of the {len(stalest)} stalest tables")
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("staleness (s)")
    ax1.legend(loc="upper left", fontsize="small")

    running = np.sum(list(totals.values()), axis=0) if totals else np.zeros_like(grid)
    low = _running_low(trace, grid)
    ax2.plot(grid, running, label="total staleness (integral so far)")
    ax2.plot(grid, low, label="LOW (lower bound so far)", linestyle="--")
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("staleness integral (s²)")
    ratio = running[-1] / low[-1] if low[-1] > 0 else float("nan")
    ax2.set_title(f"running total against LOW (final ratio {ratio:.3f})")
    ax2.legend(loc="upper left", fontsize="small")
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
