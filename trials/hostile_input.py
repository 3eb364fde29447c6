"""Hostile-input trial: every case of testing/hostile_cases.py, written to RELIABILITY.md.

Each case is one malformed or hostile request (bad JSON, wrong types, path traversal,
symbolic links, oversized bodies, reused Idempotency-Keys, data_until going backwards,
one bad update in a batch, ...) sent to a fresh in-process service (Spark-free sink).
A case passes when the status is exactly the expected one, the error body names what
was wrong and what to do, and nothing changed: sequence counters, pending updates,
Delta log versions, the WAL, the Idempotency-Key store, the landing directory, a
directory outside it and the service's owned copies are all as before the request.

Its second part sends what the service must accept and then cannot load (poison updates
among good ones, in tables another tool altered while the loader writes to them) to a real
``loader serve`` (testing/poison_trial.py), and checks that only the poison updates are set
aside, each alone, and that everything else loads exactly once.

    .venv/bin/python -m trials.hostile_input                      # the table once (~30 s), 3 poison rounds
    .venv/bin/python -m trials.hostile_input --repeat 5           # five rounds of the table (flakiness)
    .venv/bin/python -m trials.hostile_input --poison-rounds 20   # the poison part at depth
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from testing.hostile_cases import CASES
from testing.hostile_runner import MAX_BODY_BYTES, MAX_MESSAGE_CHARS, Case, Outcome, run_case
from testing.poison_trial import PoisonTrial, RoundResult
from testing.report import (
    LoadMonitor,
    log,
    machine_info,
    machine_markdown,
    md_table,
    median,
    print_table,
    run_meta,
    status,
    write_json,
)
from trials.reliability import RESULTS_DIR, write_reliability

MODULE = "trials.hostile_input"
SECTION = "hostile-input"
POISON_SECTION = "poison-updates"

#: What earlier rounds of this trial found, and the fix each got (each case stays in the table).
FINDINGS = [
    '`{"files": []}` was acknowledged (202) as an update with neither rows nor files, and every '
    "load of its table then failed (`Must pass at least one table`): now 422.",
    'Lone UTF-16 surrogate escapes (`"\\ud800"`) in a value, key, table name or file path, and a '
    "surrogate encoded as UTF-8 bytes (`ED A0 80`, which the parser let through), gave 500 (Arrow, the "
    "file system or the error response could not encode them): now 400.",
    "A timestamp past year 9999 or before year 1 once converted to UTC (`9999-12-31T23:59:59-01:00`) "
    "gave 500 (OverflowError): now 422.",
    "A NUL byte or a 5000-character name in a file path gave 500 (ValueError, ENAMETOOLONG): now 400.",
    "`NaN`, `Infinity` and `-Infinity` (not JSON) were accepted into float columns, and `1e400` "
    "as infinity; a float32 overflow was stored as infinity: now 400 / 422.",
    "A NUL in a partition value (Spark does not escape it) or a value too long for a directory name "
    "was acknowledged and would fail every load of the table: now 422, for rows and for files.",
    "A file named twice in one request (same path, another spelling, or a hard link) was loaded twice: now 422.",
    "Landing files: resolved, then checked, then copied by path, so a symlink swapped in between, or "
    "the producer rewriting its file after the check, changed what was loaded. Components are now "
    "opened with O_NOFOLLOW from the landing directory's descriptor, the copy is made from that "
    "descriptor and the copy is what gets checked; links are refused, FIFOs refused without blocking.",
    "A body of `{}` rows for a wide table of nullable columns asked for ~170x its size in memory "
    "(and could exceed a WAL record's 1 GiB): capped at 4 x max_body_bytes as columns, 413.",
    "Idempotency-Key: empty or non-ASCII keys were accepted (stored as Latin-1 mojibake), a long key "
    "gave 422: now 400 for all three.",
    "Error messages echoed unbounded input (a 5000-character table name, a multi-megabyte value) and "
    "used Python's repr (`True`, `'x'`): values are quoted as JSON, cut to 60 characters.",
]


def run(rounds: int) -> list[list[Outcome]]:
    results: list[list[Outcome]] = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        for r in range(rounds):
            outcomes = []
            for k, case in enumerate(CASES):
                outcomes.append(run_case(case, Path(tmp) / f"r{r}-c{k}"))
            misses = sum(not o.passed for o in outcomes)
            log(f"round {r + 1}/{rounds}: {len(outcomes)} cases, {misses} missed")
            results.append(outcomes)
    return results


def _verdict(outcomes: list[Outcome]) -> str:
    return status(all(o.passed for o in outcomes))


def case_rows(case_index: int, results: list[list[Outcome]]) -> list[Any]:
    outcomes = [round_[case_index] for round_ in results]
    case: Case = outcomes[0].case
    got = sorted({o.status for o in outcomes})
    unchanged = all(o.unchanged for o in outcomes)
    return [
        case.group,
        case.name,
        case.expect,
        "/".join(map(str, got)),
        "yes" if unchanged else "no",
        _verdict(outcomes),
        case.note,
    ]


def report(results: list[list[Outcome]], meta: dict[str, Any]) -> str:
    flat = [o for round_ in results for o in round_]
    passed = sum(o.passed for o in flat)
    server_errors = sum(o.status >= 500 for o in flat)
    accepted = sum(200 <= o.status < 300 and o.case.expect >= 400 for o in flat)
    changed = sum(not o.unchanged for o in flat)
    unclear = sum(any(p.startswith("message") or p.startswith("error body") for p in o.problems) for o in flat)
    by_group = Counter(o.case.group for o in results[0])
    rows = [case_rows(k, results) for k in range(len(CASES))]
    misses = [o for o in flat if not o.passed]
    missed = "\n".join(f"- {o.case.id}: {'; '.join(o.problems)}" for o in misses[:30]) or "none"
    totals = md_table(
        ["figure", "value"],
        [
            ["cases (distinct requests)", len(CASES)],
            ["rounds", meta["rounds"]],
            ["requests", len(flat)],
            ["PASS", passed],
            ["MISS", len(flat) - passed],
            ["5xx", server_errors],
            ["bad input acknowledged (2xx)", accepted],
            ["requests that changed something", changed],
            ["unclear or missing error message", unclear],
            ["median request time (ms)", f"{1000 * median([o.seconds for o in flat]):.1f}"],
            ["verdict: bad input gets a clear error and changes nothing", status(passed == len(flat))],
        ],
        align="lr",
    )
    groups = ", ".join(f"{group} {n}" for group, n in by_group.items())
    return (
        "## Hostile input\n\n"
        "Every case of `testing/hostile_cases.py` is one malformed or hostile request sent to a fresh "
        "in-process service (`testing/service_harness.Harness`, Spark-free sink) whose tables already hold a "
        "loaded update and whose landing directory holds good and bad files, symbolic links into and out of "
        "it, a hard link and a FIFO. A case passes when the status is exactly the expected one, the error "
        "body (`{error, message}`) names what was wrong and what to do in at most "
        f"{MAX_MESSAGE_CHARS} characters, and nothing changed: per table the last sequence number, pending "
        "updates and bytes, loaded sequence and Delta log version; the WAL's bytes and records; the "
        "Idempotency-Key store; every file (kind, size, inode, mtime, SHA-256) in the landing directory, in "
        "a directory outside it and in the service's owned-files directory. The replayed Idempotency-Key "
        "case expects 202 with `Idempotent-Replayed: true` and, likewise, no change. "
        f"`intake.max_body_bytes` is {MAX_BODY_BYTES:,} bytes in the trial (the same code path as the 16 MiB "
        "default). The same table runs in the test suite as `tests/api/test_hostile_input.py`.\n\n"
        "Short version (the table once, also the CI test): "
        "`.venv/bin/python -m trials.hostile_input`; long version (five rounds, to catch flaky cases): "
        "`.venv/bin/python -m trials.hostile_input --repeat 5`.\n\n"
        + machine_markdown(meta, package="loader")
        + f"\nCases per group: {groups}.\n\n"
        + totals
        + "\n\nDecisions: `data_until` at or before the table's last accepted release, or more than "
        "`intake.max_clock_skew_seconds` ahead, is 422 like any other invalid value (not 409: nothing conflicts, "
        "the value is wrong), as docs/service.md documents. There is no row- or value-size limit of its own: "
        "`intake.max_body_bytes` bounds every value (413), and the in-memory size of the rows is capped at "
        "4 x `intake.max_body_bytes`. Symbolic links in the landing directory are refused even when they point "
        "inside it (following none is what makes the open race-free). A NUL in a plain string value is data "
        "and is accepted (Parquet and Delta store it); in a partition value it is refused. Duplicate keys in a "
        "JSON object are not refused (the last wins, as in JavaScript): checking them costs 1.7x the parse. "
        "The 403 for a table the token may not use names the token and table but not what to do (api/auth.py, "
        "outside this trial).\n\n"
        + md_table(["group", "case", "expected", "got", "nothing changed", "result", "note"], rows, align="llrrcll")
        + "\n\nMissed:\n\n"
        + missed
        + "\n\nDefects this trial found, each fixed and kept as its regression case:\n\n"
        + "\n".join(f"- {finding}" for finding in FINDINGS)
        + "\n"
    )


def run_poison(rounds: int, seed: int) -> tuple[list[RoundResult], float]:
    """The second part: ``rounds`` seeded rounds against one real service; (results, seconds)."""
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="poison-") as tmp:
        trial = PoisonTrial(Path(tmp), seed, log=log)
        try:
            trial.start()
            results = [trial.round() for _ in range(rounds)]
        finally:
            trial.close()
    return results, time.perf_counter() - began


def poison_report(results: list[RoundResult], seconds: float, meta: dict[str, Any], seed: int) -> str:
    good = sum(r.good for r in results)
    kinds = Counter[str]()
    for r in results:
        kinds.update(r.poison_kinds)
    rows = [
        ["rounds (one batch of good and poison updates each)", len(results)],
        ["good updates", f"{good:,}"],
        ["poison updates: a row breaking a CHECK constraint added from outside", kinds["rule"]],
        ["poison updates: a landing file damaged after its 202", kinds["file"]],
        [
            "values of a latest table that waited behind a quarantined update of their key",
            sum(r.held_values for r in results),
        ],
        [
            "median seconds from resume to the round settled (bisection included)",
            f"{median([r.seconds_to_settle for r in results]):.1f}",
        ],
        ["wall time of the part", f"{seconds:.0f} s"],
    ]
    promises = [
        ["poison updates not in quarantine alone", sum(r.poison_missed for r in results)],
        ["good updates quarantined", sum(r.good_quarantined for r in results)],
        ["good rows lost, duplicated", f"{sum(r.lost for r in results)}, {sum(r.duplicated for r in results)}"],
        ["rows of poison updates in the table", sum(r.poison_loaded for r in results)],
        [
            "latest-table keys holding a value after a quarantined one of theirs",
            sum(r.wrong_keys_held for r in results),
        ],
        [
            "keys not holding their newest good value once the poison was discarded",
            sum(r.wrong_keys_released for r in results),
        ],
    ]
    ok = all(r.ok for r in results)
    return (
        "## Poison updates and tables altered from outside (`trials/hostile_input.py`, second part)\n\n"
        "What the service must accept and then cannot load, against a real `loader serve` (load worker "
        "processes over Spark Connect, the embedded writer, `max_attempts` 2). Before the first round another "
        "tool (deltalake) gives both tables a CHECK constraint while the loader writes to them. Each round "
        "pauses the tables, sends a seeded mix of good and poison updates so that they meet in one batch, "
        "and resumes them: an append table's poison is a row breaking `id >= 0` among good rows, or a "
        "landing file damaged after its 202; a latest table's (no `order_by`) is a price breaking `px > 0`, "
        "after which more values of its keys arrive. The load's rule check names every update of the batch "
        "holding a violating row: an append table's are set aside and the others load at once, a latest "
        "table's batch is cut around them; a damaged file, which names no update, is bisected. Only the "
        "poison updates may end in quarantine, each alone; every good row loads once; a latest table's later "
        "values of a "
        "quarantined update's keys wait, the other keys load; once the operator discards the poison, the "
        "values that waited load. (`testing/poison_trial.py`; two rounds run in the test suite as "
        "`tests/system/test_poison_update.py`.)\n\n"
        f"Command: `.venv/bin/python -m trials.hostile_input --poison-rounds {len(results)} --poison-seed {seed}`.\n\n"
        + machine_markdown(meta, package="loader")
        + "\n"
        + md_table(["promise", "figure"], promises, align="lr")
        + f"\n\nVerdict: **{status(ok)}**.\n\n"
        + md_table(["figure", "value"], rows, align="lr")
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole table")
    parser.add_argument("--poison-rounds", type=int, default=3, help="rounds of the second part (0: skip it)")
    parser.add_argument("--poison-seed", type=int, default=33, help="seed of the second part")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite RELIABILITY.md")
    args = parser.parse_args(argv)
    machine = machine_info("loader")
    began = time.perf_counter()
    with LoadMonitor() as load:
        results = run(max(1, args.repeat))
    meta = run_meta(MODULE, argv, machine, began, load, quick=args.repeat <= 1, rounds=len(results))
    rows = [case_rows(k, results) for k in range(len(CASES))]
    print_table(
        "Hostile input: one row per case",
        ["group", "case", "expected", "got", "unchanged", "result"],
        [row[:6] for row in rows],
    )
    flat = [o for round_ in results for o in round_]
    for outcome in flat:
        if not outcome.passed:
            log(f"MISS {outcome.case.id}: {'; '.join(outcome.problems)}")
    write_json(
        RESULTS_DIR / "hostile-input.json",
        {
            "meta": meta,
            "outcomes": [
                {
                    "case": o.case.id,
                    "expected": o.case.expect,
                    "status": o.status,
                    "message": o.message,
                    "changes": o.changes,
                    "problems": o.problems,
                    "seconds": o.seconds,
                }
                for o in flat
            ],
        },
    )
    if not args.no_write:
        path = write_reliability(SECTION, report(results, meta))
        log(f"wrote section {SECTION} of {path}")
    poisoned_ok = True
    if args.poison_rounds > 0:
        poison, seconds = run_poison(args.poison_rounds, args.poison_seed)
        poisoned_ok = all(r.ok for r in poison)
        if not args.no_write:
            path = write_reliability(POISON_SECTION, poison_report(poison, seconds, meta, args.poison_seed))
            log(f"wrote section {POISON_SECTION} of {path}")
    return 0 if all(o.passed for o in flat) and poisoned_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
