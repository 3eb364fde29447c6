"""Trace files (JSON Lines): the documented format is accepted, round-trips, and every
malformed input is rejected with a ``TraceError`` whose message names the line."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from schedulers.generators import poisson
from schedulers.model import BatchRecord, TableSpec, Trace
from schedulers.registry import make_policy
from schedulers.simulator import simulate
from schedulers.traces import (
    SCHEDULE_CHUNK,
    TraceError,
    _read_columns,
    parse_trace,
    read_schedule,
    read_trace,
    trace_lines,
    write_schedule,
    write_trace,
)


def table(name: str = "t1", **fields: object) -> str:
    return json.dumps({"type": "table", "name": name, "alpha": 0.02, **fields})


def update(name: str, release: object) -> str:
    return json.dumps({"type": "update", "table": name, "release": release})


DOC_EXAMPLE = [
    '{"type":"table","name":"t1","alpha":0.02,"overhead":0.0,"weight":1.0,"period":10.0}',
    '{"type":"update","table":"t1","release":12.5}',
]


def test_documented_example_parses() -> None:
    trace = parse_trace(DOC_EXAMPLE)
    assert trace.tables == [TableSpec(name="t1", alpha=0.02, overhead=0.0, weight=1.0, period=10.0)]
    assert trace.update_tables == [0]
    assert trace.update_releases == [12.5]


def test_optional_table_fields_default() -> None:
    trace = parse_trace(['{"type":"table","name":"a","alpha":0.5}'])
    spec = trace.tables[0]
    assert (spec.overhead, spec.weight, spec.period) == (0.0, 1.0, None)
    assert trace.n_updates == 0


def test_full_format_with_several_tables() -> None:
    lines = [
        table("a", overhead=0.25, weight=2.0, period=5.0),
        table("b"),
        json.dumps({"type": "table", "name": "c", "alpha": 0, "period": None}),
        "",  # blank lines are skipped
        update("a", 1),  # an integer release is fine
        update("b", 1.0),  # equal releases across different tables are allowed
        update("c", 1.0),
        "   ",
        update("a", 2.5),
        update("b", 2.5),
    ]
    trace = parse_trace(lines)
    assert [s.name for s in trace.tables] == ["a", "b", "c"]
    assert trace.update_tables == [0, 1, 2, 0, 1]
    assert trace.update_releases == [1.0, 1.0, 1.0, 2.5, 2.5]
    assert all(isinstance(r, float) for r in trace.update_releases)
    assert trace.releases_by_table() == [[1.0, 2.5], [1.0, 2.5], [1.0]]
    assert trace.tables[0] == TableSpec(name="a", alpha=0.02, overhead=0.25, weight=2.0, period=5.0)


def test_read_trace_from_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(DOC_EXAMPLE) + "\n", encoding="utf-8")
    assert read_trace(path) == parse_trace(DOC_EXAMPLE)
    assert read_trace(str(path)) == parse_trace(DOC_EXAMPLE)


def test_write_read_round_trip(tmp_path: Path) -> None:
    trace = Trace(
        tables=[
            TableSpec(name="a", alpha=0.1, overhead=0.5, weight=3.0, period=2.0),
            TableSpec(name="b b", alpha=1 / 3),  # awkward float and name
            TableSpec(name="ü", alpha=0.0, weight=0.125),
        ],
        update_tables=[1, 0, 2, 0, 1],
        update_releases=[0.1, 0.1, 0.30000000000000004, 1e-9 + 1, 123456.789],
    )
    path = tmp_path / "rt.jsonl"
    write_trace(trace, path)
    back = read_trace(path)
    assert back == trace
    assert back.update_releases == trace.update_releases  # bit-exact floats
    # Writing the read-back trace gives the same bytes.
    path2 = tmp_path / "rt2.jsonl"
    write_trace(back, path2)
    assert path.read_bytes() == path2.read_bytes()
    assert list(trace_lines(trace)) == path.read_text(encoding="utf-8").splitlines()


def test_schedule_round_trip(tmp_path: Path) -> None:
    batches = [BatchRecord("a", 0, 1.0, 2.5, 0.5, 1.0, 2), BatchRecord("b", 1, 1.0, 1.25, 1.0, 1.0, 1)]
    buffer = io.StringIO()
    write_schedule(batches, buffer)
    lines = buffer.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == [b.as_dict() for b in batches]
    path = tmp_path / "s.jsonl"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    assert read_schedule(path) == batches


def old_schedule_text(batches: list[BatchRecord]) -> str:
    """The writer before issue 36: the format every reader of schedule files knows."""
    return "".join(json.dumps(batch.as_dict()) + "\n" for batch in batches)


def written(batches: list[BatchRecord], chunk: int = SCHEDULE_CHUNK) -> str:
    buffer = io.StringIO()
    write_schedule(batches, buffer, chunk)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("policy", "options"),
    [("myopic", {}), ("no-batching", {}), ("max-benefit", {"max_tables_per_job": 4, "job_overhead": 0.05})],
)
def test_written_schedule_is_the_old_writers(policy: str, options: dict[str, float]) -> None:
    """A seeded simulation's schedule comes out byte for byte as json.dumps wrote it, across chunks."""
    trace = poisson(tables=12, horizon=300.0, utilization=0.8, workers=2, overhead=0.05, seed=5)
    overhead = options.get("job_overhead", 0.0)
    schedule = simulate(trace, make_policy(policy, **options), 2, record_schedule=True, job_overhead=overhead).schedule
    assert schedule is not None and len(schedule) > 200
    if options:
        assert any(batch.job_tables > 1 for batch in schedule)  # the "job" fields are written too
    assert written(schedule, chunk=128) == written(schedule) == old_schedule_text(schedule)


def test_written_schedule_floats_arrow_spells_otherwise() -> None:
    """Times where Arrow's cast and repr differ (integral, tiny, huge, not finite), values that are
    not what BatchRecord declares and names needing escapes: each line is still json.dumps's."""
    odd = [0.0, -0.0, 2.0, 1e-05, 9.999999999999999e-05, 1e8, 559019696092.656, 1e16, 5e-324, math.inf, math.nan]
    batches = [BatchRecord("t", 0, x, 1.5, 0.25, 0.75, 1) for x in odd]
    batches += [BatchRecord("t", 1, 1.5, 2.5, 0.25, x, 3) for x in odd]
    batches += [
        BatchRecord("t", 1, 3, 4, 1, 2, 1),  # ints where floats are declared
        BatchRecord("t", 1, np.float64(0.1), 0.2, 0.1, 0.1, 1),
        BatchRecord('caf\u00e9 "quoted"\n', 2, 0.5, 0.75, 0.125, 0.25, 2),
        BatchRecord("t", 0, 0.5, 0.75, 0.125, 0.25, 2, job=7, job_tables=3),
        BatchRecord("t", 0, 0.5, 0.75, 0.125, 0.25, 2, job=None, job_tables=2),  # as json.dumps: "job": null
        BatchRecord("t", 0, 0.5, 0.75, 0.125, 0.25, 2, job=8, job_tables=1),  # one table: no job fields
        BatchRecord("t", 0, 0.5, 0.75, 0.125, 0.25, 2, job="x", job_tables=1),  # (nor a job it does not write)
    ]
    assert written(batches, chunk=5) == written(batches) == old_schedule_text(batches)
    # A column of another type than declared sends its chunk to json.dumps whole.
    strange = [BatchRecord("t", True, 0.5, 0.75, 0.125, 0.25, 1), BatchRecord("t", 0, 0.5, 0.75, 0.125, 0.25, 1.0)]
    assert written(strange, chunk=1) == old_schedule_text(strange)
    assert written([]) == ""


# -- rejections -----------------------------------------------------------------------------

T = table("t")
U = table("u")

BAD_TRACES = {
    # name: (lines, line number named, a fragment the message must contain)
    "invalid json": ([T, '{"type": "update", "table": "t", '], 2, "not valid JSON"),
    "invalid json first line": (["{not json"], 1, "not valid JSON"),
    "array line": ([T, "[1, 2]"], 2, "expected a JSON object"),
    "number line": (["3"], 1, "expected a JSON object"),
    "string line": ([T, '"update"'], 2, "expected a JSON object"),
    "null line": ([T, U, "null"], 3, "expected a JSON object"),
    "unknown type": ([T, '{"type": "insert", "table": "t", "release": 1}'], 2, "'type'"),
    "missing type": ([T, '{"table": "t", "release": 1}'], 2, "'type'"),
    "table after updates": ([T, update("t", 1), U], 3, "before the first update"),
    "duplicate table": ([T, U, table("t", alpha=0.5)], 3, "declared twice"),
    "unknown table in update": ([T, update("nope", 1)], 2, "unknown table 'nope'"),
    "non-string table in update": ([T, '{"type": "update", "table": 5, "release": 1}'], 2, "unknown table"),
    "update missing release": ([T, '{"type": "update", "table": "t"}'], 2, "missing ['release']"),
    "update missing table": ([T, '{"type": "update", "release": 1}'], 2, "missing ['table']"),
    "update extra field": (
        [T, '{"type": "update", "table": "t", "release": 1, "size": 3}'],
        2,
        "unknown fields ['size']",
    ),
    "string release": ([T, update("t", "12.5")], 2, "finite number"),
    "null release": ([T, update("t", None)], 2, "finite number"),
    "list release": ([T, '{"type": "update", "table": "t", "release": [1]}'], 2, "finite number"),
    "NaN release": ([T, '{"type": "update", "table": "t", "release": NaN}'], 2, "finite number"),
    "Infinity release": ([T, '{"type": "update", "table": "t", "release": Infinity}'], 2, "finite number"),
    "overflowing release": ([T, '{"type": "update", "table": "t", "release": 1e400}'], 2, "finite number"),
    "bool release": ([T, update("t", True)], 2, "finite number"),
    "negative release": ([T, update("t", -1.5)], 2, "strictly increase"),
    "zero release": ([T, update("t", 0)], 2, "starting above 0"),
    "repeated release within table": (
        [T, U, update("t", 2), update("u", 2), update("t", 2)],
        5,
        "strictly increase",
    ),
    "equal release within table": ([T, update("t", 1), update("t", 1)], 3, "strictly increase"),
    "decreasing release within table": ([T, update("t", 2), update("t", 1)], 3, "release 1.0"),
    "global order decreasing": ([T, U, update("t", 2), update("u", 1.5)], 4, "non-decreasing"),
    "negative alpha": ([table("t", alpha=-0.1)], 1, "'alpha'"),
    "missing alpha": (['{"type": "table", "name": "t"}'], 1, "'alpha'"),
    "NaN alpha": (['{"type": "table", "name": "t", "alpha": NaN}'], 1, "'alpha'"),
    "negative overhead": ([table("t", overhead=-1)], 1, "'overhead'"),
    "zero weight": ([T, table("u", weight=0)], 2, "'weight'"),
    "negative weight": ([table("t", weight=-2)], 1, "'weight'"),
    "zero period": ([table("t", period=0)], 1, "'period'"),
    "infinite period": (['{"type": "table", "name": "t", "alpha": 0.1, "period": Infinity}'], 1, "'period'"),
    "unknown table field": ([T, table("u", wieght=2.0)], 2, "'wieght'"),
    "misspelled alpha": (['{"type": "table", "name": "t", "alhpa": 0.1}'], 1, "bad table line"),
    "missing name": (['{"type": "table", "alpha": 0.1}'], 1, "'name'"),
    "empty name": ([table("")], 1, "'name'"),
    "blank name": ([table("   ")], 1, "blank"),
    "non-string name": (['{"type": "table", "name": 7, "alpha": 0.1}'], 1, "'name'"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_malformed_trace_is_rejected_naming_the_line(case: str) -> None:
    lines, number, fragment = BAD_TRACES[case]
    with pytest.raises(TraceError) as info:
        parse_trace(lines, source="bad.jsonl")
    message = str(info.value)
    assert f"bad.jsonl line {number}:" in message, message
    assert fragment in message, message


def test_line_numbers_count_blank_lines() -> None:
    with pytest.raises(TraceError, match=r"^trace line 4: "):
        parse_trace([T, "", "  ", update("nope", 1)])


def test_unknown_table_field_is_refused_even_with_alpha_present() -> None:
    with pytest.raises(TraceError, match=r"line 1: .*'alhpa'"):
        parse_trace(['{"type": "table", "name": "t", "alpha": 0.1, "alhpa": 0.2}'])


@pytest.mark.parametrize("lines", [[], [""], ["", "   "]])
def test_empty_trace_is_rejected(lines: list[str]) -> None:
    with pytest.raises(TraceError, match="no table lines"):
        parse_trace(lines, source="empty.jsonl")


def test_updates_without_tables_name_the_first_update_line() -> None:
    with pytest.raises(TraceError, match="line 1: update for unknown table 't'"):
        parse_trace([update("t", 1.0)])


def test_empty_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with pytest.raises(TraceError, match=re.escape(str(path)) + ".*no table lines"):
        read_trace(path)


def test_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(T + "\n" + update("t", 2) + "\n" + update("t", 1) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=re.escape(f"{path} line 3:")):
        read_trace(path)


def test_missing_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.jsonl"
    with pytest.raises(TraceError, match="does not exist") as info:
        read_trace(path)
    assert str(path) in str(info.value)


def test_non_utf8_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((T + "\n").encode() + b'{"type": "table", "name": "caf\xe9", "alpha": 0.1}\n')
    with pytest.raises(TraceError, match="not UTF-8") as info:
        read_trace(path)
    assert str(path) in str(info.value)


def test_non_utf8_error_names_the_right_line(tmp_path: Path) -> None:
    # BUG (reported): the message gives UnicodeDecodeError.start, an offset into the
    # decoder's current chunk (~8 KiB), neither the line nor the byte offset in the file.
    # Here the bad byte sits on line 2001, at file offset 98919, and the message says
    # "invalid start byte at byte 615", with no line number.
    lines = [T] + [update("t", k) for k in range(1, 2000)]
    head = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "deep.jsonl"
    path.write_bytes(head + b'{"type": "update", "table": "t\xff", "release": 5000}\n')
    bad_offset = len(head) + len(b'{"type": "update", "table": "t')  # 0-based offset of 0xff
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert "line 2001" in message or f"byte {bad_offset}" in message, message


def test_huge_integer_release_is_a_trace_error() -> None:
    # BUG (reported): json.loads turns a 400-digit integer into a Python int, and
    # math.isfinite(int) raises OverflowError instead of the check rejecting it.
    huge = "1" + "0" * 400
    with pytest.raises(TraceError, match="line 2"):
        parse_trace([T, '{"type": "update", "table": "t", "release": ' + huge + "}"])


def test_huge_integer_table_field_is_a_trace_error() -> None:
    huge = "1" + "0" * 400
    with pytest.raises(TraceError, match="line 1: bad table line, field 'alpha'"):
        parse_trace(['{"type": "table", "name": "t", "alpha": ' + huge + "}"])


# -- the columnar read of a file ------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_a_file_of_a_malformed_trace_gets_the_line_by_line_message(case: str, tmp_path: Path) -> None:
    """``read_trace`` reads a file's update lines as columns, and leaves to ``parse_trace``
    every trace it cannot tell is valid: the message is the same either way."""
    lines, _, _ = BAD_TRACES[case]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as by_lines:
        parse_trace(lines, source=str(path))
    with pytest.raises(TraceError) as from_file:
        read_trace(path)
    assert str(from_file.value) == str(by_lines.value)


def test_a_written_trace_reads_back_by_columns_as_by_lines(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    tables = [TableSpec(name=f"t{k}", alpha=0.01, weight=float(k + 1)) for k in range(20)]
    releases = np.cumsum(rng.exponential(0.01, size=5000))
    trace = Trace(tables=tables, update_tables=rng.integers(0, 20, 5000).tolist(), update_releases=releases.tolist())
    path = tmp_path / "t.jsonl"
    write_trace(trace, path)
    by_lines = parse_trace(path.read_text(encoding="utf-8").splitlines(), source=str(path))
    assert _read_columns(path) == by_lines == trace  # (the columns read it: no line-by-line fallback)
    assert read_trace(path) == trace
