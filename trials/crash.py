"""Crash-consistency trial: many SIGKILLs of ``loader serve`` under producers, then an audit.

    python -m trials.crash --kills 50 --seed 1   # the long run (~10-20 min); rewrites RELIABILITY.md
    python -m trials.crash --kills 8 --seed 1    # a short run: prints, results/crash_trials-quick.json
    python -m trials.crash --rerender            # the saved long results again (and their section)

One data directory, one ``loader serve`` subprocess (local Spark, delta-rs writer, fsync
WAL, a 64 KiB memory budget so pending updates spill, WAL segments of 256 KiB truncated
every second, tables compacted every 5 s), and producer threads submitting numbered rows
with Idempotency-Keys all along, retrying whatever was left unanswered
(testing/crash_trial.py). Each life of the
server ends in SIGKILL of a seeded random kind: a failpoint (loader/core/failpoints.py)
inside the WAL's group commit, mid-record, during recovery (spill reset, the N-th
replayed record), in a spill write, around the Delta commit, between the WAL and the
202; or a kill of the process group from outside at a random delay, before /readyz
(timed from the start, or from the first log line of the WAL replay so that some land
inside the replay of the backlog) or while loads run. Every kind comes once in the first
lives, the rest are drawn with the outside kills weighted up. At the end the service is
restarted cleanly, everything acknowledged is loaded, and each Delta table is read back
with the deltalake package and DuckDB: lost and duplicated rows must be 0.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testing.crash_trial import EXTERNAL_RECOVERY, EXTERNAL_SERVING, KINDS, CrashTrial, Verdict
from testing.report import (
    LoadMonitor,
    command_line,
    fmt_duration,
    load_average,
    log,
    machine_info,
    machine_markdown,
    md_table,
    print_table,
    source_fingerprint,
    status,
    write_json,
)
from trials.reliability import RESULTS_DIR, write_reliability

MODULE = "trials.crash"
SECTION = "crash"
#: What the long run promises to have done (the issue: "the long run at least 50").
LONG_KILLS = 50
#: Outside kills are the "random moments"; failpoints the exact ones. Weights of the draws.
#: Per-table audit columns of the report: (header, key of a TableCheck).
TABLE_COLUMNS = [
    ("table", "table"),
    ("ack'd updates", "acked_updates"),
    ("ack'd rows", "acked_rows"),
    ("rows (deltalake)", "loaded_rows"),
    ("rows (DuckDB)", "duckdb_rows"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("superseded left", "superseded_loaded"),
    ("Delta txn version", "txn_version"),
    ("last ack'd seq", "last_acked_seq"),
    ("staging dirs", "staging_dirs"),
]
WEIGHTS = {kind: (3 if kind in (EXTERNAL_RECOVERY, EXTERNAL_SERVING) else 1) for kind in KINDS}


def schedule(kills: int, seed: int) -> list[str]:
    """The kinds of kill, in order: a load commit first (something to recover), then every
    kind once, shuffled, then weighted draws (all seeded)."""
    rng = random.Random(seed)
    rest = [k for k in KINDS if k != "load.after-commit"]
    rng.shuffle(rest)
    kinds = ["load.after-commit", *rest]
    names = list(WEIGHTS)
    while len(kinds) < kills:
        kinds.append(rng.choices(names, weights=[WEIGHTS[n] for n in names])[0])
    return kinds[:kills]


def run(
    kills: int,
    seed: int,
    workdir: Path,
    pace: float = 0.02,
    final_timeout: float = 900.0,
    acceptors: int = 0,
    upsert: str = "deletion-vectors",
) -> Verdict:
    trial = CrashTrial(workdir, seed, pace=pace, acceptors=acceptors, upsert=upsert, log=log)
    try:
        trial.run(schedule(kills, seed))
        return trial.finish(final_timeout)
    finally:
        trial.close()


# -- report -----------------------------------------------------------------------------------
def summary(verdict: Verdict) -> dict[str, Any]:
    hits: dict[str, int] = {}
    planned: dict[str, int] = {}
    for life in verdict.lives:
        hits[life.hit] = hits.get(life.hit, 0) + 1
        planned[life.plan] = planned.get(life.plan, 0) + 1
    p = verdict.producer
    return {
        "kills": verdict.kills,
        "planned": planned,
        "hits": hits,
        "not_reached": sum(1 for life in verdict.lives if "not reached" in life.hit),
        "acked_requests": verdict.acked_requests,
        "acked_updates": verdict.acked_updates,
        "acked_rows": verdict.acked_rows,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "phantom": sum(t.phantom + t.unacked_loaded for t in verdict.tables),
        "sequence_reused": verdict.sequence_reused,
        "attempts": p.attempts,
        "unanswered_attempts": p.transport_errors + p.unavailable + p.server_errors,
        "server_errors": p.server_errors,
        "refused": len(p.refused),
        "replayed": p.replayed,
        "reasked": verdict.reasked,
        "reask_mismatches": len(verdict.reask_mismatches),
        "restarts": verdict.kills + 1,
        "restarts_met_spill_files": verdict.restarts_met_spill_files,
        "largest_backlog_records": max((life.backlog_records for life in verdict.lives), default=0),
        "slowest_replay": max(
            ([life.recovered_after, life.backlog_records] for life in verdict.lives if life.recovered_after),
            default=None,
        ),
        "final_backlog_records": verdict.final_backlog_records,
        "final_ready_after": verdict.final_ready_after,
        "killed_before_ready": sum(1 for life in verdict.lives if life.ready_after is None),
        "acked_file_updates": verdict.acked_file_updates,
        "acked_arrow_updates": verdict.acked_arrow_updates,
        "poison_updates": verdict.poison_updates,
        "poison_not_quarantined": verdict.poison_not_quarantined,
        "good_quarantined": verdict.good_quarantined,
        "poison_loaded": sum(t.poison_loaded for t in verdict.tables),
        "copies_left": verdict.copies_left,
        "view": {**asdict(verdict.view), "ok": verdict.view.ok},
        "failures": verdict.failures,
        "problems": verdict.problems(),
        "trial_seconds": verdict.seconds,
        "ok": verdict.ok,
    }


def render_markdown(results: dict[str, Any]) -> str:
    meta, s = results["meta"], results["summary"]
    enough = s["kills"] >= LONG_KILLS
    verdict_ok = s["ok"] and s["lost"] == 0 and s["duplicated"] == 0
    lines = [
        "## Crash consistency (`trials/crash.py`)",
        "",
        "A producer stream with Idempotency-Keys against `loader serve` (local Spark, fsync WAL, "
        "64 KiB memory budget so updates spill, 256 KiB WAL segments truncated every second, tables "
        "compacted every 5 s), "
        "killed with SIGKILL again and again: at failpoints (`loader/core/failpoints.py`) inside the WAL "
        "group commit (after `write()` before fsync; half a record written), during recovery (after "
        "the spill reset; after the N-th replayed WAL record), in a spill write, between Spark's write, "
        "the publish and the Delta commit, between the WAL and the 202, around a join view's commit, in the "
        "latest table's upsert (`quotes`: deletion vectors unless `--upsert merge`; before its commit, and "
        "mid-MERGE) and around its compaction's commit; and from "
        "outside (service and JVM) at seeded random moments before `/readyz` and while loads run. Producers "
        "retry every unanswered request with its key; one in five single-update requests names a Parquet file in the "
        "landing directory instead of carrying rows. A join view over an append and the latest table lives "
        "through every kill. Once the first life is ready, another tool adds a CHECK constraint (`id >= 0`) "
        "to `alpha` while the loader writes to it, and from then on one request in fifty is a poison update "
        "(negative ids), one in five of them in a landing file: acknowledged, never loadable; the failed load's "
        "search (its rows, its spilled rows and its landing files read again) names every such update of its "
        "batch, and they are set aside in quarantine while the rest of the batch loads (bisection is what is left "
        "for a failure that names no update). "
        "At the end the service restarts cleanly, loads everything, "
        "and each Delta table is read back with the `deltalake` package and DuckDB and compared with "
        "the acknowledged set; the view with the join recomputed from its inputs.",
        "",
        "Short version: `.venv/bin/python -m pytest -q tests/system/test_crash.py` (CI: 8 kills of 8 kinds) "
        "or `.venv/bin/python -m trials.crash --kills 8 --seed 1`. "
        f"Long version: `.venv/bin/python -m trials.crash --kills {LONG_KILLS} --seed "
        f"{meta['seed']}`.",
        "",
        machine_markdown(meta, package="loader"),
        "| promise | figure | result |",
        "| :--- | ---: | :---: |",
        f"| kills (lives ended by SIGKILL), at least {LONG_KILLS} | {s['kills']} | {status(enough)} |",
        f"| acknowledged rows lost | {s['lost']} | {status(s['lost'] == 0)} |",
        f"| acknowledged rows duplicated | {s['duplicated']} | {status(s['duplicated'] == 0)} |",
        f"| rows nobody acknowledged | {s['phantom']} | {status(s['phantom'] == 0)} |",
        f"| sequence numbers acknowledged twice | {s['sequence_reused']} | {status(s['sequence_reused'] == 0)} |",
        f"| re-sent acknowledged requests answered differently (of {s['reasked']}) | {s['reask_mismatches']} "
        f"| {status(s['reask_mismatches'] == 0)} |",
        f"| 5xx other than 503 | {s['server_errors']} | {status(s['server_errors'] == 0)} |",
        f"| restarts that failed or got stuck | {len(s['failures'])} | {status(not s['failures'])} |",
        f"| copies of landing files left after everything loaded | {s['copies_left']} "
        f"| {status(s['copies_left'] == 0)} |",
        *(
            [
                f"| poison updates (of {s['poison_updates']}) not quarantined, or their rows loaded | "
                f"{s['poison_not_quarantined']}, {s['poison_loaded']} | "
                f"{status(s['poison_not_quarantined'] == s['poison_loaded'] == 0)} |",
                f"| good updates quarantined beside a poison one | {s['good_quarantined']} "
                f"| {status(s['good_quarantined'] == 0)} |",
            ]
            if "poison_updates" in s
            else []
        ),
        f"| Delta txn version = last acknowledged sequence, no staging left, DuckDB = deltalake | "
        f"{sum(t['ok'] for t in results['tables'])} of {len(results['tables'])} tables | "
        f"{status(all(t['ok'] for t in results['tables']))} |",
        *(
            [
                f"| join view `{v['view']}` = the join recomputed from its inputs (rows missing, extra; of "
                f"{v['expected_rows']:,}) | {v['missing']}, {v['extra']} | {status(v['ok'])} |"
            ]
            if (v := s.get("view"))
            else []
        ),
        f"| **overall** | | **{status(verdict_ok and enough)}** |",
        "",
        md_table(
            ["figure", "value"],
            [
                ["acknowledged requests (202)", f"{s['acked_requests']:,}"],
                ["acknowledged updates (WAL records)", f"{s['acked_updates']:,}"],
                ["acknowledged rows", f"{s['acked_rows']:,}"],
                ['of the updates, rows in a landing file (`{"files": [...]}`)', f"{s['acked_file_updates']:,}"],
                ["of the updates, rows in an Arrow IPC stream", f"{s.get('acked_arrow_updates', 0):,}"],
                ["requests sent (attempts)", f"{s['attempts']:,}"],
                ["attempts left unanswered (reset, refused, 503) and retried", f"{s['unanswered_attempts']:,}"],
                ["retries answered with the first answer (durable before the kill)", f"{s['replayed']:,}"],
                ["restarts", s["restarts"]],
                ["restarts that met spill files of the killed life", s["restarts_met_spill_files"]],
                ["lives killed before /readyz", s["killed_before_ready"]],
                ["largest WAL backlog met by a restart (records)", f"{s['largest_backlog_records']:,}"],
                ["slowest start to intake open (WAL replayed)", slowest_replay(s["slowest_replay"])],
                [
                    "final clean restart: WAL records replayed, seconds to /readyz",
                    f"{s['final_backlog_records']:,}, {s['final_ready_after'] or float('nan'):.1f} s",
                ],
                ["failpoints armed but not reached (killed from outside instead)", s["not_reached"]],
                ["wall time of the trial", fmt_duration(s["trial_seconds"])],
            ],
        ),
        "",
        "Kill points hit, by kind (`kill: ...` = from outside, named by what the service was doing):",
        "",
        md_table(["kill point", "lives"], sorted(s["hits"].items(), key=lambda kv: (-kv[1], kv[0]))),
        "",
        md_table(
            [header for header, _ in TABLE_COLUMNS],
            [[t.get(k, "—") for _, k in TABLE_COLUMNS] for t in results["tables"]],
        ),
    ]
    if s["problems"]:
        lines += ["", "Problems:", "", *[f"- {p.splitlines()[0]}" for p in s["problems"]]]
    return "\n".join(lines) + "\n"


def slowest_replay(value: list[float] | None) -> str:
    return "n/a" if value is None else f"{value[0]:.1f} s ({value[1]:,.0f} records)"


def print_console(results: dict[str, Any]) -> None:
    s = results["summary"]
    print_table(
        "crash trial",
        ["figure", "value"],
        [
            ["kills", s["kills"]],
            ["acknowledged updates", s["acked_updates"]],
            ["acknowledged rows", s["acked_rows"]],
            ["lost", s["lost"]],
            ["duplicated", s["duplicated"]],
            ["restarts that met spill files", s["restarts_met_spill_files"]],
            ["wall time", fmt_duration(s["trial_seconds"])],
            ["verdict", status(s["ok"])],
        ],
    )
    print_table("kill points hit", ["kill point", "lives"], sorted(s["hits"].items()))
    for problem in s["problems"]:
        log(f"PROBLEM: {problem}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=LONG_KILLS, help="lives ended by SIGKILL (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the kinds, counts, delays and producers")
    parser.add_argument("--workdir", type=Path, help="keep the data directory and server logs here")
    parser.add_argument(
        "--pace",
        type=float,
        default=0.02,
        help="seconds each producer thread rests between requests (default 0.02); with poison updates "
        "on 2 busy cores the loader may fall behind a faster feed, and the backlog grows life after life",
    )
    parser.add_argument(
        "--final-timeout", type=float, default=900.0, help="seconds the final start may take to load the backlog"
    )
    parser.add_argument(
        "--acceptors", type=int, default=0, help="the service's HTTP in this many acceptor processes (intake.acceptors)"
    )
    parser.add_argument(
        "--upsert",
        choices=["deletion-vectors", "merge"],
        default="deletion-vectors",
        help="the latest table's upsert (default deletion-vectors; merge: deltalake's MERGE killed mid-run)",
    )
    parser.add_argument("--json", type=Path, help="results file (default results/crash_trials[-quick].json)")
    parser.add_argument("--write", action="store_true", help="rewrite RELIABILITY.md even for a short run")
    parser.add_argument("--no-write", action="store_true", help="never rewrite RELIABILITY.md")
    parser.add_argument("--rerender", action="store_true", help="render the saved results again")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    if args.json is None:
        quick = args.kills < LONG_KILLS and not args.rerender
        args.json = RESULTS_DIR / ("crash_trials-quick.json" if quick else "crash_trials.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        results = json.loads(args.json.read_text(encoding="utf-8"))
    else:
        started = time.perf_counter()
        machine = machine_info("loader")
        meta: dict[str, Any] = {
            "command": command_line(MODULE, argv),
            "quick": args.kills < LONG_KILLS,
            "seed": args.seed,
            "pace": args.pace,
            "acceptors": args.acceptors,
            "machine": machine,
        }
        scratch = None if args.workdir else tempfile.mkdtemp(prefix="crash-trial-")
        workdir = args.workdir or Path(scratch)  # type: ignore[arg-type]
        workdir.mkdir(parents=True, exist_ok=True)
        log(f"crash trial: {args.kills} kills, seed {args.seed}, data in {workdir}")
        with LoadMonitor() as monitor:
            verdict = run(args.kills, args.seed, workdir, args.pace, args.final_timeout, args.acceptors, args.upsert)
        meta["run_seconds"] = time.perf_counter() - started
        meta["loadavg_end"] = load_average()
        meta["loadavg_peak"] = monitor.peak
        meta["loader_unchanged_during_run"] = source_fingerprint("loader") == machine["loader_sha256"]
        results = {
            "meta": meta,
            "summary": summary(verdict),
            "tables": [{**asdict(t), "ok": t.ok} for t in verdict.tables],
            "lives": [asdict(life) for life in verdict.lives],
        }
        write_json(args.json, results)
        log(f"results: {args.json}")
        if scratch is not None:
            if verdict.ok:
                shutil.rmtree(scratch, ignore_errors=True)
            else:
                log(f"kept the data directory and server logs for inspection: {scratch}")
    if not args.no_write and (args.write or not results["meta"]["quick"]):
        write_reliability(SECTION, render_markdown(results))
        log(f"wrote section '{SECTION}' of RELIABILITY.md")
    print_console(results)
    return 0 if results["summary"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
