"""The ``loader`` command line (``cli.simulation.app``) through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("typer")
pytest.importorskip("rich")
from typer.testing import CliRunner  # noqa: E402

from cli.app import app  # noqa: E402
from schedulers.freshness import evaluate_schedule  # noqa: E402
from schedulers.generators import GENERATORS  # noqa: E402
from schedulers.registry import POLICIES  # noqa: E402
from schedulers.traces import read_schedule, read_trace  # noqa: E402

runner = CliRunner(env={"COLUMNS": "400"})  # no rich line wrapping of messages

SUMMARY_KEYS = {
    "policy",
    "workers",
    "updates",
    "batches",
    "total_staleness",
    "low_bound",
    "staleness_ratio",
    "max_stretch",
    "weighted_staleness",
    "weighted_low_bound",
}
BATCH_KEYS = {"table", "processor", "start", "finish", "first_release", "last_release", "n_updates"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = ["--tables", "6", "--workers", "2", "--horizon", "60"]


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    """Rich wraps stderr at the console width: compare with whitespace collapsed."""
    return " ".join(text.split())


def last_json(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output on stdout"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small seeded trace per generator kind, written by ``gen-trace``."""
    root = tmp_path_factory.mktemp("traces")
    out: dict[str, Path] = {}
    for kind in GENERATORS:
        path = root / f"{kind}.jsonl"
        result = invoke("gen-trace", kind, "--out", path, "--seed", "3", *SMALL, "--weighting", "skewed")
        assert result.exit_code == 0, result.output
        out[kind] = path
    return out


# -- gen-trace --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(GENERATORS))
def test_gen_trace_is_seeded_and_valid(kind: str, tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    messages = {}
    for path, seed in ((a, 11), (b, 11), (c, 12)):
        result = invoke("gen-trace", kind, "--out", path, "--seed", seed, *SMALL)
        assert result.exit_code == 0, result.output
        assert result.stdout == ""
        messages[path] = flat(result.stderr)
    assert a.read_bytes() == b.read_bytes()
    if kind != "counterexample":  # the counterexample is deterministic: it takes no seed
        assert a.read_bytes() != c.read_bytes()
    trace = read_trace(a)
    assert len(trace.tables) == 6
    assert trace.n_updates > 0
    assert f"wrote {a}: 6 tables, {trace.n_updates:,} updates" in messages[a]


def test_gen_trace_makes_latest_tables_the_simulator_reports_by_key(tmp_path: Path) -> None:
    path = tmp_path / "k.jsonl"
    made = invoke(
        "gen-trace", "poisson", "--out", path, *SMALL, "--latest-tables", "2", "--keys", "8", "--rows", "3",
        "--max-keys-per-batch", "5", "--key-policy", "linecutting-bounded",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    trace = read_trace(path)
    keyed = [spec.keyed for spec in trace.tables]
    assert keyed[2:] == [None] * 4 and all(k is not None and k.max_keys_per_batch == 5 for k in keyed[:2])
    result = invoke("simulate", "--trace", path, "--policy", "max-benefit", "--workers", "2", "--json")
    assert result.exit_code == 0, result.output
    assert set(last_json(result.stdout)["keyed"]) == {trace.tables[0].name, trace.tables[1].name}
    refused = invoke("gen-trace", "poisson", "--out", path, *SMALL, "--latest-tables", "1", "--key-policy", "lifo")
    assert refused.exit_code != 0 and "--key-policy must be one of" in flat(refused.output)


def test_gen_trace_options_reach_the_generator(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    result = invoke(
        "gen-trace", "quasiperiodic", "--out", path, "--tables", "4", "--workers", "2",
        "--utilization", "0.4", "--periods", "2,8", "--horizon", "40", "--overhead", "0.5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trace = read_trace(path)
    assert [s.period for s in trace.tables] == [2.0, 8.0, 2.0, 8.0]
    assert {s.alpha for s in trace.tables} == {0.4 * 2 / 4}
    assert {s.overhead for s in trace.tables} == {0.5}
    assert max(trace.update_releases) <= 40.0


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--periods", "1,,3"], "--periods"),
        (["--periods", "0"], "periods must be positive"),
        (["--weighting", "zipf"], "unknown weighting"),
        (["--utilization", "0"], "utilization"),
        (["--horizon", "0"], "horizon"),
    ],
)
def test_gen_trace_bad_options_exit_2(args: list[str], fragment: str, tmp_path: Path) -> None:
    result = invoke("gen-trace", "quasiperiodic", "--out", tmp_path / "x.jsonl", *args)
    assert result.exit_code == 2
    assert fragment in flat(result.stderr)
    assert not (tmp_path / "x.jsonl").exists()


def test_gen_trace_unknown_kind(tmp_path: Path) -> None:
    result = invoke("gen-trace", "zipfian", "--out", tmp_path / "x.jsonl")
    assert result.exit_code != 0
    assert "zipfian" in flat(result.stderr)


# -- simulate --json ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(POLICIES))
def test_simulate_json_last_line(policy: str, traces: dict[str, Path]) -> None:
    result = invoke("simulate", "--trace", traces["quasiperiodic"], "--policy", policy, "--workers", "2", "--json")
    assert result.exit_code == 0, result.output
    summary = last_json(result.stdout)
    assert isinstance(summary, dict)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["policy"] == policy
    assert summary["workers"] == 2
    assert summary["updates"] == read_trace(traces["quasiperiodic"]).n_updates
    assert summary["batches"] >= 1
    assert summary["total_staleness"] >= summary["low_bound"] > 0
    assert summary["staleness_ratio"] == pytest.approx(summary["total_staleness"] / summary["low_bound"])
    assert summary["max_stretch"] >= 1.0
    assert summary["weighted_staleness"] >= summary["weighted_low_bound"] > 0
    # Nothing else but the JSON object on stdout.
    assert len([line for line in result.stdout.splitlines() if line.strip()]) == 1


@pytest.mark.parametrize("policy", ["group-and-run", "group-and-run-wc"])
def test_simulate_json_reports_groups(policy: str, traces: dict[str, Path]) -> None:
    result = invoke("simulate", "--trace", traces["quasiperiodic"], "--policy", policy, "--workers", "4", "--json")
    assert result.exit_code == 0, result.output
    summary = last_json(result.stdout)
    groups = summary["groups"]
    assert isinstance(groups, list) and groups
    names = {s.name for s in read_trace(traces["quasiperiodic"]).tables}
    seen_tables: list[str] = []
    seen_workers: list[int] = []
    for group in groups:
        assert {"tables", "workers"} <= set(group)
        seen_tables += group["tables"]
        seen_workers += group["workers"]
        assert all(isinstance(w, int) and 0 <= w < 4 for w in group["workers"])
    assert sorted(seen_tables) == sorted(names)  # every table in exactly one group
    assert len(seen_workers) == len(set(seen_workers))  # no worker in two groups
    assert set(summary["spare_workers"]).isdisjoint(seen_workers)


@pytest.mark.parametrize("policy", ["myopic", "group-and-run", "interval", "no-batching"])
@pytest.mark.parametrize("kind", ["poisson", "bursty"])
def test_schedule_out(policy: str, kind: str, traces: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "schedule.jsonl"
    workers = 3
    result = invoke(
        "simulate", "--trace", traces[kind], "--policy", policy, "--workers", workers, "--json", "--schedule-out", out
    )
    assert result.exit_code == 0, result.output
    summary = last_json(result.stdout)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == summary["batches"]
    for line in lines:
        record = json.loads(line)
        assert set(record) == BATCH_KEYS
        assert isinstance(record["processor"], int) and 0 <= record["processor"] < workers
        assert isinstance(record["n_updates"], int) and record["n_updates"] >= 1
        assert record["first_release"] <= record["last_release"] <= record["start"] <= record["finish"]
    # The written schedule is a valid execution of the trace with the same figures.
    evaluated = evaluate_schedule(read_trace(traces[kind]), read_schedule(out))
    assert evaluated.batches == summary["batches"]
    assert evaluated.updates == summary["updates"]
    assert evaluated.total_staleness == pytest.approx(summary["total_staleness"], rel=1e-12)
    assert evaluated.max_stretch == pytest.approx(summary["max_stretch"], rel=1e-12)


def test_simulate_human_output(traces: dict[str, Path]) -> None:
    result = invoke("simulate", "--trace", traces["quasiperiodic"], "--policy", "group-and-run", "--workers", "4")
    assert result.exit_code == 0, result.output
    assert "group-and-run" in result.stdout
    assert "GroupAndRun groups" in result.stdout


def test_plot_writes_a_png(traces: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out.png"
    result = invoke(
        "simulate", "--trace", traces["poisson"], "--policy", "myopic", "--workers", "2", "--plot", out, "--json"
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    last_json(result.stdout)  # --plot does not disturb the JSON line


def test_interval_period_option(traces: dict[str, Path]) -> None:
    base = ["simulate", "--trace", traces["poisson"], "--policy", "interval", "--workers", "2", "--json"]
    short = last_json(invoke(*base, "--interval-period", "0.5").stdout)
    long = last_json(invoke(*base, "--interval-period", "50").stdout)
    assert short["batches"] > long["batches"]
    rejected = invoke(*base, "--interval-period", "0")
    assert rejected.exit_code == 2
    assert "period" in flat(rejected.stderr)


# -- compare and demo ------------------------------------------------------------------------


def test_compare_prints_every_policy(traces: dict[str, Path]) -> None:
    result = invoke("compare", "--trace", traces["poisson"], "--workers", "2")
    assert result.exit_code == 0, result.output
    for name in POLICIES:
        assert name in result.stdout, name


def test_compare_json(traces: dict[str, Path]) -> None:
    result = invoke("compare", "--trace", traces["bursty"], "--workers", "2", "--json")
    assert result.exit_code == 0, result.output
    data = last_json(result.stdout)
    assert data["workers"] == 2
    assert [r["policy"] for r in data["results"]] == list(POLICIES)
    for r in data["results"]:
        assert SUMMARY_KEYS <= set(r)


def test_sample_runs_every_policy() -> None:
    result = invoke("sample", "--workers", "2")
    assert result.exit_code == 0, result.output
    for name in POLICIES:
        assert name in result.stdout, name
    assert "LOW" in result.stdout


# -- errors -------------------------------------------------------------------------------------


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


TABLE = '{"type": "table", "name": "t", "alpha": 0.1}'


@pytest.mark.parametrize("command", ["simulate", "compare"])
@pytest.mark.parametrize(
    "lines,number,fragment",
    [
        ([TABLE, '{"type": "update", "table": "t", "release": 2}', "{oops"], 3, "not valid JSON"),
        (
            [TABLE, '{"type": "update", "table": "t", "release": 2}', '{"type": "update", "table": "t", "release": 1}'],
            3,
            "strictly increase",
        ),
        ([TABLE, '{"type": "update", "table": "u", "release": 1}'], 2, "unknown table 'u'"),
        (['{"type": "table", "name": "t", "alpha": -1}'], 1, "'alpha'"),
    ],
)  # fmt: skip
def test_malformed_trace_exits_2_naming_the_line(
    command: str, lines: list[str], number: int, fragment: str, tmp_path: Path
) -> None:
    path = write(tmp_path / "bad.jsonl", lines)
    args = ["--policy", "myopic"] if command == "simulate" else []
    result = invoke(command, "--trace", path, *args, "--workers", "1")
    assert result.exit_code == 2, result.output
    message = flat(result.stderr)
    assert "error" in message
    assert f"line {number}" in message, message
    assert fragment in message, message
    assert result.stdout.strip() == ""


def test_missing_trace_file_exits_2(tmp_path: Path) -> None:
    result = invoke("simulate", "--trace", tmp_path / "none.jsonl", "--policy", "fifo", "--workers", "1")
    assert result.exit_code == 2
    assert "does not exist" in flat(result.stderr)


def test_unknown_policy_is_rejected_clearly(traces: dict[str, Path]) -> None:
    result = invoke("simulate", "--trace", traces["poisson"], "--policy", "fastest", "--workers", "2")
    assert result.exit_code != 0
    message = flat(result.stderr)
    assert "--policy" in message
    assert "fastest" in message
    assert "myopic" in message  # the valid choices are listed


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--policy", "myopic"],
        ["compare"],
    ],
)
@pytest.mark.parametrize("workers", ["0", "-3"])
def test_non_positive_workers_rejected(args: list[str], workers: str, traces: dict[str, Path]) -> None:
    result = invoke(*args, "--trace", traces["poisson"], "--workers", workers)
    assert result.exit_code == 2
    assert "--workers" in flat(result.stderr)


def test_non_positive_workers_rejected_by_demo_and_gen_trace(tmp_path: Path) -> None:
    assert invoke("sample", "--workers", "0").exit_code == 2
    result = invoke("gen-trace", "poisson", "--out", tmp_path / "x.jsonl", "--workers", "0")
    assert result.exit_code == 2
    assert not (tmp_path / "x.jsonl").exists()


def test_no_arguments_shows_help() -> None:
    result = invoke()
    assert result.exit_code in (0, 2)  # click's no_args_is_help: usage, not a crash
    assert "simulate" in result.output and "gen-trace" in result.output


def test_error_message_with_brackets_is_printed_verbatim(tmp_path: Path) -> None:
    # BUG (reported): _fail() passes the message to rich as markup, so text taken from the
    # trace is interpreted: a table name "[/x]" makes rich raise MarkupError (a traceback,
    # exit 1) instead of the exit-2 error, and "[bold]" silently vanishes from the message.
    crash = write(tmp_path / "a.jsonl", [TABLE, '{"type": "update", "table": "[/x]", "release": 1}'])
    result = invoke("simulate", "--trace", crash, "--policy", "myopic", "--workers", "1")
    assert result.exit_code == 2, repr(result.exception)
    assert "'[/x]'" in flat(result.stderr)
    eaten = write(tmp_path / "b.jsonl", [TABLE, '{"type": "update", "table": "[bold]", "release": 1}'])
    result = invoke("simulate", "--trace", eaten, "--policy", "myopic", "--workers", "1")
    assert result.exit_code == 2
    assert "'[bold]'" in flat(result.stderr), result.stderr


def test_trace_path_that_is_a_directory_exits_2(tmp_path: Path) -> None:
    # BUG (reported): read_trace only maps FileNotFoundError; a directory raises
    # IsADirectoryError, which escapes as a traceback (exit 1).
    result = invoke("simulate", "--trace", tmp_path, "--policy", "myopic", "--workers", "1")
    assert result.exit_code == 2, repr(result.exception)
    assert str(tmp_path) in flat(result.stderr)


def test_huge_integer_release_exits_2(tmp_path: Path) -> None:
    # BUG (reported, see tests/schedulers/test_traces.py): OverflowError escapes the trace checks.
    path = write(tmp_path / "big.jsonl", [TABLE, '{"type": "update", "table": "t", "release": 1' + "0" * 400 + "}"])
    result = invoke("simulate", "--trace", path, "--policy", "myopic", "--workers", "1")
    assert result.exit_code == 2, repr(result.exception)
    assert "line 2" in flat(result.stderr)


@pytest.mark.parametrize("option", ["--schedule-out", "--plot"])
def test_output_into_missing_directory_fails_before_simulating(tmp_path: Path, option: str) -> None:
    trace = write(tmp_path / "a.jsonl", [TABLE, '{"type": "update", "table": "t", "release": 1}'])
    target = tmp_path / "missing" / "out.file"
    result = invoke("simulate", "--trace", trace, "--policy", "myopic", "--workers", "1", option, target)
    assert result.exit_code == 2
    assert "does not exist" in flat(result.output)
    assert not target.parent.exists()


def test_misspelt_table_field_is_named(tmp_path: Path) -> None:
    trace = write(tmp_path / "a.jsonl", ['{"type": "table", "name": "t", "alpah": 0.1}'])
    result = invoke("simulate", "--trace", trace, "--policy", "myopic", "--workers", "1")
    assert result.exit_code == 2
    assert "'alpah': unknown field" in flat(result.output)


def test_number_as_string_in_table_line_is_rejected(tmp_path: Path) -> None:
    trace = write(tmp_path / "a.jsonl", ['{"type": "table", "name": "t", "alpha": "0.1"}'])
    result = invoke("simulate", "--trace", trace, "--policy", "myopic", "--workers", "1")
    assert result.exit_code == 2
    assert "'alpha'" in flat(result.output)


def test_compare_keyed_puts_the_key_policies_side_by_side() -> None:
    result = invoke("compare", "--keyed", "two-class", "--slow", "2", "--updates", "2000", "--json")
    assert result.exit_code == 0, result.output
    data = last_json(result.stdout)
    assert data["workload"] == "two-class(2 slow, 10x), 10 keys, load 5"
    policies = ["fifo-aq", "fifo-uq", "in-place", "linecutting", "linecutting-faster", "linecutting-bounded"]
    assert [r["policy"] for r in data["results"]] == policies
    shown = invoke("compare", "--keyed", "zipf", "--updates", "2000")
    assert shown.exit_code == 0 and "linecutting" in shown.stdout and "superseded" in shown.stdout


def test_compare_refuses_a_trace_and_a_keyed_workload_together(traces: dict[str, Path]) -> None:
    both = invoke("compare", "--keyed", "uniform", "--trace", traces["poisson"])
    assert both.exit_code == 2 and "not both" in both.output
    neither = invoke("compare")
    assert neither.exit_code == 2 and "--trace FILE and --workers N" in neither.output
