"""Human-readable rendering of simulation results (rich tables)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from cli.figures import significant
from schedulers.keys.simulator import KeyedResult
from schedulers.simulator import SimulationResult


def _num(value: float) -> str:
    return significant(value, 4)


def comparison_table(results: Sequence[SimulationResult], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("policy", no_wrap=True)
    for column in ("batches", "staleness", "LOW", "ratio", "max stretch", "w. staleness", "w. ratio", "sim s"):
        table.add_column(column, justify="right", no_wrap=True)
    best = min(r.freshness.staleness_ratio for r in results) if results else 0.0
    for result in results:
        f = result.freshness
        ratio = _num(f.staleness_ratio)
        table.add_row(
            result.policy,
            f"{f.batches:,}",
            _num(f.total_staleness),
            _num(f.low_bound),
            f"[bold]{ratio}[/bold]" if f.staleness_ratio == best else ratio,
            _num(f.max_stretch),
            _num(f.weighted_staleness),
            _num(f.weighted_ratio),
            f"{result.wall_seconds:.2f}",
        )
    return table


def key_comparison_table(results: Sequence[KeyedResult], title: str) -> Table:
    """Key policies side by side: staleness per key (UpStream section 5.1) in units of the
    cost of loading one key, mean over keys, then the worst 1% and the worst key."""
    table = Table(title=title, title_justify="left")
    table.add_column("policy", no_wrap=True)
    for column in ("app. staleness", "p99", "max", "queue staleness", "loaded", "superseded", "batches", "cuts"):
        table.add_column(column, justify="right", no_wrap=True)
    best = min(r.application.mean for r in results) if results else 0.0
    for r in results:
        mean = _num(r.application.mean)
        table.add_row(
            r.policy,
            f"[bold]{mean}[/bold]" if r.application.mean == best else mean,
            _num(r.application.p99),
            _num(r.application.max),
            _num(r.queue.mean),
            f"{r.loaded:,}",
            f"{r.superseded:,}",
            f"{r.batches:,}",
            f"{r.cuts:,}",
        )
    return table


def print_result(console: Console, result: SimulationResult) -> None:
    console.print(comparison_table([result], title=f"{result.policy} on {result.workers} workers"))
    f = result.freshness
    console.print(
        f"{f.updates:,} updates in {f.batches:,} batches; makespan {result.makespan:,.2f} s; "
        f"staleness is {f.staleness_ratio:.4f}x the lower bound LOW."
    )
    groups = result.policy_state.get("groups")
    if groups:
        table = Table(title="GroupAndRun groups", title_justify="left")
        for column in ("group", "period range (s)", "tables", "workers"):
            table.add_column(column)
        for k, group in enumerate(groups):
            lo, hi = group["period_range"]
            names = group["tables"]
            shown = ", ".join(names[:6]) + (f" … (+{len(names) - 6})" if len(names) > 6 else "")
            table.add_row(str(k), f"{lo:g} – {hi:g}", shown, ", ".join(map(str, group["workers"])))
        console.print(table)
        spare = result.policy_state.get("spare_workers") or []
        if spare:
            console.print(f"spare workers (idle under the faithful algorithm): {', '.join(map(str, spare))}")
