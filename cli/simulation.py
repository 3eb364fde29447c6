"""The scheduling simulator's commands: ``simulate``, ``compare``, ``gen-trace``, ``sample``, ``report``.

The operator's "what if" tools: replay a trace (generated, bundled, or exported from a
running service by ``loader export-trace``) through the same policy objects the service
runs, and compare, plot or report on the outcome.
"""

from __future__ import annotations

import gc
import json
import sys
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.console import console, err_console, fail
from cli.report import comparison_table, key_comparison_table, print_result
from schedulers import generators
from schedulers.job_groups import RULES
from schedulers.keys.queue import KEY_POLICIES
from schedulers.keys.simulator import compare_keys
from schedulers.keys.workloads import KEYED_SHAPES, keyed_workload, with_latest_tables
from schedulers.model import Trace
from schedulers.registry import GROUPABLE, POLICIES, make_policy
from schedulers.simulator import SimulationError, SimulationResult, simulate
from schedulers.stage_costs import StageCosts, fit_stage_costs
from schedulers.traces import TraceError, read_schedule, read_trace, write_schedule, write_trace

commands = typer.Typer()

PolicyName = Enum("PolicyName", {name: name for name in POLICIES}, type=str)  # type: ignore[misc]
Generator = Enum("Generator", {name: name for name in generators.GENERATORS}, type=str)  # type: ignore[misc]

TraceOption = Annotated[Path, typer.Option("--trace", help="Trace file (JSON Lines): table lines, then updates.")]
WorkersOption = Annotated[int, typer.Option("--workers", min=1, help="Number of workers P.")]
IntervalOption = Annotated[
    float | None,
    typer.Option(
        "--interval-period",
        min=0.0,
        help="Trigger period (s) for the interval policy; default: each table's period hint, else 10 s.",
    ),
]

JobOverheadOption = Annotated[
    float,
    typer.Option(
        "--job-overhead",
        min=0.0,
        help="Fixed cost (s) of any job, part of each table's overhead and paid once by a multi-table job "
        "(the service measures it: X-Loader-Job-Overhead of loader export-trace).",
    ),
]
JobsOption = Annotated[
    Path | None,
    typer.Option(
        "--jobs",
        help="The service's jobs export (loader export-trace --jobs-out): the simulator takes the stage costs its "
        "timelines measured, each table of a job visible at its own commit (docs/simulator.md).",
    ),
]
GroupRule = Enum("GroupRule", {name: name for name in RULES}, type=str)  # type: ignore[misc]
GroupRuleOption = Annotated[
    GroupRule,  # type: ignore[valid-type]
    typer.Option("--group-rule", help="How a multi-table job grows (docs/tuning.md)."),
]


def _load(path: Path) -> Trace:
    try:
        return read_trace(path)
    except TraceError as exc:
        raise fail(str(exc)) from None


def _progress(total: int, enabled: bool, label: str):  # type: ignore[no-untyped-def]
    """A tqdm bar on a terminal, else a no-op: --json output and pipes stay clean."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="upd", unit_scale=True, leave=False, file=sys.stderr)

    def update(done: int) -> None:
        bar.n = done
        bar.refresh()

    return update, bar.close


def _run(
    trace: Trace,
    policy: str,
    workers: int,
    interval: float | None,
    *,
    schedule: bool,
    progress: bool,
    max_tables: int = 1,
    job_overhead: float = 0.0,
    rule: str = "rate",
    stages: StageCosts | None = None,
) -> SimulationResult:
    try:
        instance = make_policy(
            policy, period=interval, max_tables_per_job=max_tables, job_overhead=job_overhead, group_rule=rule
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    update, close = _progress(trace.n_updates, progress, instance.name)
    # A recorded schedule keeps a BatchRecord per batch alive, a million at 1,000,000 updates, and
    # every full collection walked them all: 1.4 s of the run at that size (issue 36). The
    # simulator and its policies leave no reference cycles to collect (every policy, single-table,
    # grouped, latest tables and views: gc.collect() finds none after a run), so the run goes without;
    # after it, what it leaves is frozen, or the first collections would walk the records (0.4 s).
    collecting = schedule and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        return simulate(
            trace,
            instance,
            workers,
            record_schedule=schedule,
            progress=update,
            job_overhead=job_overhead,
            stages=stages,
        )
    except (SimulationError, ValueError) as exc:
        raise fail(f"simulation of {policy} failed: {exc}") from None
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
        close()


def _stages(path: Path | None) -> StageCosts | None:
    """The stage costs a jobs export's timelines measured (``schedulers.stage_costs``)."""
    if path is None:
        return None
    from loader.core.timeline import JobTimeline

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        timelines = [JobTimeline.from_dict(json.loads(line)) for line in lines if line.strip()]
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise fail(
            f"{path} is not a jobs export ({type(exc).__name__}: {exc}); write one with loader export-trace --jobs-out"
        ) from None
    measured = [m for t in timelines if (m := t.measured()) is not None]
    if not measured:
        raise fail(f"{path} holds no job that ran a Spark job and committed: nothing to measure stage costs from")
    return fit_stage_costs(measured)


@commands.command("simulate")
def simulate_command(
    trace: TraceOption,
    policy: Annotated[PolicyName, typer.Option("--policy", help="Scheduling policy.")],  # type: ignore[valid-type]
    workers: WorkersOption,
    schedule_out: Annotated[
        Path | None, typer.Option("--schedule-out", help="Write one JSON line per batch here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on the last line of stdout.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of staleness over time here.")] = None,
    interval_period: IntervalOption = None,
    max_tables_per_job: Annotated[
        int, typer.Option("--max-tables-per-job", min=1, help="Multi-table jobs of at most this many tables.")
    ] = 1,
    job_overhead: JobOverheadOption = 0.0,
    group_rule: GroupRuleOption = "rate",  # type: ignore[assignment]
    jobs: JobsOption = None,
) -> None:
    """Replay a trace through one policy and report staleness, LOW, stretch."""
    for target in (schedule_out, plot):
        if target is not None and not target.parent.is_dir():
            raise fail(f"cannot write {target}: directory {target.parent} does not exist; create it first")
    data = _load(trace)
    result = _run(
        data,
        policy.value,
        workers,
        interval_period,
        schedule=bool(schedule_out or plot),
        progress=not as_json,
        max_tables=max_tables_per_job,
        job_overhead=job_overhead,
        rule=getattr(group_rule, "value", group_rule),
        stages=_stages(jobs),
    )
    if schedule_out is not None and result.schedule is not None:
        with schedule_out.open("w", encoding="utf-8") as handle:
            write_schedule(result.schedule, handle)
    if plot is not None and result.schedule is not None:
        from cli.plots import plot_schedule

        plot_schedule(data, result.schedule, plot, title=f"{result.policy}, {workers} workers")
    if as_json:
        print(json.dumps(result.summary()))
    else:
        print_result(console, result)


def _compare(
    data: Trace,
    workers: int,
    interval: float | None,
    progress: bool,
    max_tables: int = 1,
    job_overhead: float = 0.0,
    rule: str = "rate",
    stages: StageCosts | None = None,
) -> list[SimulationResult]:
    """Every policy single-table; with a job overhead and room for groups, the groupable ones
    again with multi-table jobs (named ``<policy>+groups(k)``)."""
    results = [
        _run(data, name, workers, interval, schedule=False, progress=progress, job_overhead=job_overhead, stages=stages)
        for name in POLICIES
    ]
    if max_tables > 1 and job_overhead > 0:
        results += [
            _run(
                data,
                name,
                workers,
                interval,
                schedule=False,
                progress=progress,
                max_tables=max_tables,
                job_overhead=job_overhead,
                rule=rule,
                stages=stages,
            )
            for name in GROUPABLE
        ]
    return results


KeyedShape = Enum("KeyedShape", {name: name for name in KEYED_SHAPES}, type=str)  # type: ignore[misc]
KEYED = "Latest tables (--keyed): UpStream's update queues"
LATEST = "Latest tables among the others (section 'keys' of docs/latest-tables.md)"


@commands.command("compare")
def compare_command(
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Trace file (JSON Lines): table lines, then updates.")
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Number of workers P.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (a list of summaries) on the last line.")
    ] = False,
    interval_period: IntervalOption = None,
    max_tables_per_job: Annotated[
        int,
        typer.Option(
            "--max-tables-per-job",
            min=1,
            help="Also run myopic, max-benefit and fifo with multi-table jobs of at most this many tables "
            "(needs --job-overhead > 0).",
        ),
    ] = 32,
    job_overhead: JobOverheadOption = 0.0,
    group_rule: GroupRuleOption = "rate",  # type: ignore[assignment]
    jobs: JobsOption = None,
    keyed: Annotated[
        KeyedShape | None,  # type: ignore[valid-type]
        typer.Option(
            "--keyed",
            help=(
                "Instead of a trace: one latest table's keys under FIFO-AQ, FIFO-UQ, IN-PLACE, LINECUTTING "
                "and our LINECUTTING-BOUNDED."
            ),
            rich_help_panel=KEYED,
        ),
    ] = None,
    keys: Annotated[int, typer.Option("--keys", min=1, help="Distinct keys.", rich_help_panel=KEYED)] = 10,
    load: Annotated[
        float,
        typer.Option(
            "--load", min=0.0, help="Arrival rate x cost of one key (the paper's load factor).", rich_help_panel=KEYED
        ),
    ] = 5.0,
    slow: Annotated[int, typer.Option("--slow", min=0, help="two-class: slow keys.", rich_help_panel=KEYED)] = 1,
    ratio: Annotated[
        float, typer.Option("--ratio", min=1.0, help="two-class: how many times slower.", rich_help_panel=KEYED)
    ] = 10.0,
    theta: Annotated[float, typer.Option("--theta", min=0.0, help="zipf: skew.", rich_help_panel=KEYED)] = 0.9,
    updates: Annotated[int, typer.Option("--updates", min=1, help="Arrivals to draw.", rich_help_panel=KEYED)] = 20_000,
    cost: Annotated[
        float, typer.Option("--cost", min=0.0, help="Seconds to load one key.", rich_help_panel=KEYED)
    ] = 1.0,
    overhead: Annotated[
        float, typer.Option("--overhead", min=0.0, help="Fixed seconds per batch.", rich_help_panel=KEYED)
    ] = 0.0,
    max_keys: Annotated[
        int | None,
        typer.Option(
            "--max-keys", min=1, help="Keys per batch (default 1: the paper's setting).", rich_help_panel=KEYED
        ),
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the keyed workload.", rich_help_panel=KEYED)] = 0,
    known_rates: Annotated[
        bool,
        typer.Option(
            "--known-rates",
            help="LINECUTTING reads each key's true rate (the paper's premise) instead of estimating it.",
            rich_help_panel=KEYED,
        ),
    ] = False,
) -> None:
    """Run every policy on one trace and print them side by side (grouped vs single-table jobs
    with --job-overhead); with --keyed, every key policy on a seeded keyed workload."""
    if keyed is not None:
        if trace is not None:
            raise fail("give --trace or --keyed, not both: --keyed compares key policies on a generated workload")
        try:
            workload = keyed_workload(
                keyed.value,
                keys=keys,
                load=load,
                cost=cost,
                updates=updates,
                seed=seed,
                slow=slow,
                ratio=ratio,
                theta=theta,
            )
            keyed_results = compare_keys(
                workload, cost=cost, overhead=overhead, max_keys=max_keys, known_rates=known_rates
            )
        except ValueError as exc:
            raise fail(str(exc)) from None
        if as_json:
            print(json.dumps({"workload": workload.name, "results": [r.summary() for r in keyed_results]}))
        else:
            console.print(
                key_comparison_table(keyed_results, title=f"{workload.name}: {len(workload.arrivals):,} updates")
            )
        return
    if trace is None or workers is None:
        raise fail("compare needs --trace FILE and --workers N (or --keyed SHAPE for a latest table's key policies)")
    data = _load(trace)
    results = _compare(
        data,
        workers,
        interval_period,
        progress=not as_json,
        max_tables=max_tables_per_job,
        job_overhead=job_overhead,
        rule=getattr(group_rule, "value", group_rule),
        stages=_stages(jobs),
    )
    if as_json:
        print(json.dumps({"workers": workers, "results": [r.summary() for r in results]}))
    else:
        console.print(
            comparison_table(
                results, title=f"{trace.name}: {data.n_updates:,} updates, {len(data.tables)} tables, {workers} workers"
            )
        )


@commands.command("gen-trace")
def gen_trace_command(
    kind: Annotated[Generator, typer.Argument(help="Workload shape.")],  # type: ignore[valid-type]
    out: Annotated[Path, typer.Option("--out", help="Trace file to write.")],
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same trace).")] = 0,
    tables: Annotated[int, typer.Option(min=1)] = 30,
    workers: Annotated[int, typer.Option(min=1, help="Workers the utilization refers to.")] = 4,
    utilization: Annotated[float, typer.Option(min=0.0, help="sum(alpha_i) / workers.")] = 0.5,
    horizon: Annotated[float, typer.Option(min=0.0, help="Seconds of arrivals.")] = 1000.0,
    overhead: Annotated[float, typer.Option(min=0.0, help="Fixed cost per batch (s).")] = 0.0,
    weighting: Annotated[str, typer.Option(help="uniform, or skewed (log-uniform weights in [1, 20]).")] = "uniform",
    periods: Annotated[str, typer.Option(help="quasiperiodic: comma-separated periods B.")] = "1,10,100",
    latest_tables: Annotated[
        int,
        typer.Option(
            "--latest-tables",
            min=0,
            help="Make the first N tables latest tables (keyed: their batches cost per key).",
            rich_help_panel=LATEST,
        ),
    ] = 0,
    keys: Annotated[int, typer.Option("--keys", min=1, help="Distinct keys per table.", rich_help_panel=LATEST)] = 100,
    rows: Annotated[int, typer.Option("--rows", min=1, help="Rows (keys) per update.", rich_help_panel=LATEST)] = 10,
    key_shape: Annotated[
        str, typer.Option("--key-shape", help="uniform, or zipf (theta 0.9).", rich_help_panel=LATEST)
    ] = "zipf",
    key_policy: Annotated[
        str, typer.Option("--key-policy", help="fifo-uq, in-place, linecutting(-bounded).", rich_help_panel=LATEST)
    ] = "in-place",
    max_keys: Annotated[
        int | None,
        typer.Option("--max-keys-per-batch", min=1, help="Most keys one batch loads.", rich_help_panel=LATEST),
    ] = None,
) -> None:
    """Generate a seeded workload trace."""
    options: dict[str, Any] = {"tables": tables, "workers": workers, "utilization": utilization}
    if kind.value == "counterexample":
        options = {"tables": tables, "workers": workers, "utilization": utilization}
    else:
        options.update(horizon=horizon, overhead=overhead, weighting=weighting, seed=seed)
    if kind.value == "quasiperiodic":
        try:
            options["periods"] = tuple(float(p) for p in periods.split(","))
        except ValueError:
            raise fail(f"--periods must be numbers separated by commas, got {periods!r}") from None
    if key_policy not in KEY_POLICIES:
        raise fail(f"--key-policy must be one of {', '.join(KEY_POLICIES)}, got {key_policy!r}")
    try:
        data = generators.GENERATORS[kind.value](**options)
        if latest_tables:
            data = with_latest_tables(
                data,
                latest_tables,
                keys=keys,
                rows=rows,
                shape=key_shape,
                policy=key_policy,  # type: ignore[arg-type]
                max_keys_per_batch=max_keys,
                seed=seed,
            )
    except ValueError as exc:
        raise fail(str(exc)) from None
    write_trace(data, out)
    summary = f"{len(data.tables)} tables, {data.n_updates:,} updates"
    err_console.print(f"wrote {escape(str(out))}: {summary}", soft_wrap=True)  # a long path is not wrapped


@commands.command("report")
def report_command(
    trace: TraceOption,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Directory for the PNGs (created if missing).")],
    schedule: Annotated[
        Path | None,
        typer.Option("--schedule", help="A recorded schedule (loader export-trace --schedule-out) to report on."),
    ] = None,
    policy: Annotated[
        PolicyName | None,  # type: ignore[valid-type]
        typer.Option("--policy", help="Without --schedule: simulate this policy on the trace and report on that."),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Workers of the simulation.")] = None,
    interval_period: IntervalOption = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Tables drawn in the staleness sawtooth.")] = 5,
) -> None:
    """Render PNG plots of a run (--schedule) or of a simulation (--policy, --workers): staleness
    over time per table, the ratio to LOW, the stretch distribution."""
    if schedule is not None and (policy is not None or workers is not None):
        raise fail("give either --schedule (report on a run) or --policy and --workers (simulate), not both")
    if schedule is None and (policy is None or workers is None):
        raise fail("give --schedule FILE to report on a run, or --policy and --workers to simulate one")
    if out_dir.exists() and not out_dir.is_dir():
        raise fail(f"--out-dir {out_dir} is a file; give a directory")
    data = _load(trace)
    if schedule is not None:
        try:
            batches = read_schedule(schedule)
        except FileNotFoundError:
            raise fail(f"schedule file {schedule} does not exist") from None
        except (OSError, ValueError, TypeError) as exc:
            raise fail(f"cannot read schedule {schedule}: {exc}") from None
        title = f"{trace.stem}, recorded"
    else:
        result = _run(data, policy.value, workers, interval_period, schedule=True, progress=True)
        batches = result.schedule or []
        title = f"{trace.stem}, {result.policy} on {workers} workers"
    from cli.plots import build_run, write_report

    run = build_run(data, batches)
    try:
        paths = write_report(run, out_dir, title, top)
    except OSError as exc:
        raise fail(f"cannot write plots into {out_dir}: {exc}") from None
    f = run.summary
    console.print(
        f"{f.updates:,} updates in {f.batches:,} batches of {len(run.tables)} tables: staleness "
        f"{f.staleness_ratio:.4f}x LOW, max stretch {f.max_stretch:.3g}"
    )
    for note in run.notes():
        err_console.print(f"note: {escape(note)}", soft_wrap=True)
    for path in paths:
        console.print(f"wrote {escape(str(path))}", soft_wrap=True)


def sample_trace_path() -> Path:
    return Path(str(resources.files("schedulers") / "workloads" / "sample.jsonl"))


@commands.command("sample")
def sample_command(workers: WorkersOption = 4) -> None:
    """Simulate the bundled sample workload under every policy and compare them."""
    path = sample_trace_path()
    data = _load(path)
    console.print(
        f"Sample workload {path.name}: {len(data.tables)} tables in three period groups, skewed weights, "
        f"{data.n_updates:,} updates, utilization ~0.6 on {workers} workers."
    )
    results = _compare(data, workers, None, progress=True)
    console.print(comparison_table(results, title="policy comparison (ratio = total staleness / LOW)"))
    console.print(
        "LOW is a lower bound on any schedule's staleness; a ratio near 1 is close to optimal. "
        "Try: loader simulate --trace FILE --policy myopic --workers 4 --plot staleness.png"
    )
