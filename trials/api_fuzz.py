"""API fuzzing trial: schemathesis against the service's own OpenAPI document, as every role.

    .venv/bin/python -m trials.api_fuzz                  # 60 examples per operation, role and mode
    .venv/bin/python -m trials.api_fuzz --examples 300   # longer
    .venv/bin/python -m trials.api_fuzz --no-write       # print only, RELIABILITY.md untouched

Runs what ``tests/api/test_api_fuzz.py`` runs in CI (``testing/api_fuzzing.py``), with more
examples: every operation of the document, as the operator, a producer, a producer
limited to one table and a caller without a token, with data that fits the document
(positive) and data that does not (negative). The service runs in this process under
uvicorn with the Spark-free sink. Counted: generated cases (per role and mode), response
statuses, 5xx, responses that do not match the document (status code, content type,
headers, body schema), invalid data accepted, and afterwards whether every acknowledged
update loaded. Writes RELIABILITY.md section ``api-fuzz``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import requests

from testing.api_fuzzing import CHECKS, CI_EXAMPLES, ROLES, Settled, Tally, fuzz_all, settle
from testing.report import (
    LoadMonitor,
    log,
    machine_info,
    machine_markdown,
    md_table,
    print_table,
    run_meta,
    status,
    write_json,
)
from testing.service_harness import serve_in_thread
from trials.reliability import RESULTS_DIR, write_reliability

MODULE = "trials.api_fuzz"
SECTION = "api-fuzz"


def _status_class(code: int) -> str:
    if code in (401, 403, 404, 422):
        return str(code)
    return f"{code // 100}xx"


STATUS_COLUMNS = ["2xx", "401", "403", "404", "422", "4xx", "5xx"]


def run(examples: int) -> tuple[Tally, Settled]:
    with tempfile.TemporaryDirectory(prefix="api-fuzz-") as tmp, requests.Session() as session:
        with serve_in_thread(Path(tmp) / "data") as (url, service):
            tally = fuzz_all(url, max_examples=examples, progress=log)
            settled = settle(url, service, session)
    return tally, settled


def role_rows(tally: Tally) -> list[list[Any]]:
    rows = []
    for role in ROLES:
        by_class: Counter[str] = Counter()
        for (who, code), n in tally.statuses.items():
            if who == role:
                by_class[_status_class(code)] += n
        rows.append(
            [
                role,
                tally.cases[role],
                tally.cases_by_mode[(role, "positive")],
                tally.cases_by_mode[(role, "negative")],
                *(by_class[c] for c in STATUS_COLUMNS),
            ]
        )
    return rows


def report(tally: Tally, settled: Settled, meta: dict[str, Any]) -> str:
    promise = (
        tally.server_errors == 0
        and tally.schema_violations == 0
        and tally.accepted_invalid == 0
        and tally.transport_errors == 0
        and tally.refusals_missed == 0
        and settled.ok
    )
    checks = ", ".join(f"`{check.__name__}`" for check in CHECKS)
    ci = ", ".join(f"{n} as {role}" for role, n in CI_EXAMPLES.items())
    findings = "None." if not tally.findings else "\n\n```\n" + tally.report(limit=30) + "\n```"
    figures = md_table(
        ["figure", "value"],
        [
            ["generated cases (requests)", tally.total],
            ["operations × roles", f"{len(tally.cases_by_operation)} × {len(ROLES)}"],
            ["5xx responses", tally.server_errors],
            ["responses not matching the document", tally.schema_violations],
            ["invalid data accepted (2xx/3xx to negative cases)", tally.accepted_invalid],
            ["callers without the right not answered exactly 401 / 403", tally.refusals_missed],
            ["transport errors (no response)", tally.transport_errors],
            ["updates acknowledged during fuzzing", settled.acknowledged],
            ["of them loaded afterwards", settled.loaded],
            ["failed load attempts / quarantined batches", f"{settled.failed_loads} / {settled.quarantined}"],
            ["fuzzing time", f"{tally.seconds:.0f} s ({1000 * tally.seconds / max(1, tally.total):.0f} ms per case)"],
            ["**promise** (no 5xx, every response as documented, bad input refused, acks loaded)", status(promise)],
        ],
        align="lr",
    )
    per_role = md_table(["role", "cases", "positive", "negative", *STATUS_COLUMNS], role_rows(tally))
    per_operation = md_table(["operation", "cases (all roles)"], sorted(tally.cases_by_operation.items()), align="lr")
    return (
        "## API fuzzing\n\n"
        "Schemathesis generates requests from the service's own OpenAPI document "
        "(`api.app.create_app(...).openapi()`) for every operation, as four callers: the operator, a producer, "
        "a producer limited to `orders`, and no token; with data that fits the document (positive) and data "
        "that does not (negative). Where a path names a table, some positive cases name one that exists, and on "
        "the feed routes some carry rows that fit it (the document cannot say what a table holds), so requests "
        "reach row validation, the WAL and the loader. The service runs in-process under uvicorn with the "
        "Spark-free sink (`testing/service_harness.py`). Each response is checked with "
        f"{checks}: no 5xx, a documented status code, content type and headers, a body matching the documented "
        "schema (errors: `ErrorModel`), and negative data refused with a 4xx; a caller without the right to an "
        "operation at all (no token; a producer on `/v1/admin`) must get exactly 401 / 403 whatever the request "
        "holds. Afterwards every table is resumed and every acknowledged update must have loaded. Generation is "
        "derandomized: the same document gives the same cases.\n\n"
        f"Short version (CI; examples per operation and mode: {ci}): "
        "`.venv/bin/python -m pytest -q tests/api/test_api_fuzz.py`.  \n"
        f"Long version: `.venv/bin/python -m {MODULE}` (60 examples), or `--examples 300` for a deeper run.\n\n"
        + machine_markdown(meta, package="api")
        + f"\nExamples per operation, role and mode: {meta['examples']}.\n\n"
        + figures
        + "\n\nCases and response statuses per role:\n\n"
        + per_role
        + "\n\nCases per operation:\n\n"
        + per_operation
        + "\n\nFindings: "
        + findings
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=60, help="examples per operation, role and mode")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite RELIABILITY.md")
    args = parser.parse_args(argv)
    machine = machine_info("api")
    began = time.perf_counter()
    with LoadMonitor() as load:
        tally, settled = run(args.examples)
    meta = run_meta(MODULE, argv, machine, began, load, examples=args.examples)
    print_table(
        "API fuzzing: cases and statuses per role", ["role", "cases", "pos", "neg", *STATUS_COLUMNS], role_rows(tally)
    )
    print_table(
        "API fuzzing: figures",
        ["figure", "value"],
        [
            ["cases", tally.total],
            ["5xx", tally.server_errors],
            ["not as documented", tally.schema_violations],
            ["invalid accepted", tally.accepted_invalid],
            ["not refused 401/403", tally.refusals_missed],
            ["transport errors", tally.transport_errors],
            ["acknowledged / loaded", f"{settled.acknowledged} / {settled.loaded}"],
            ["failed loads / quarantined", f"{settled.failed_loads} / {settled.quarantined}"],
        ],
    )
    if tally.findings:
        print(tally.report(limit=50))
    write_json(
        RESULTS_DIR / "api-fuzz.json",
        {
            "meta": meta,
            "cases": dict(tally.cases),
            "cases_by_mode": {f"{r}/{m}": n for (r, m), n in tally.cases_by_mode.items()},
            "cases_by_operation": dict(tally.cases_by_operation),
            "statuses": {f"{r}/{c}": n for (r, c), n in sorted(tally.statuses.items())},
            "server_errors": tally.server_errors,
            "schema_violations": tally.schema_violations,
            "accepted_invalid": tally.accepted_invalid,
            "transport_errors": tally.transport_errors,
            "refusals_missed": tally.refusals_missed,
            "settled": vars(settled),
            "findings": [vars(f) for f in tally.findings.values()],
        },
    )
    if not args.no_write:
        path = write_reliability(SECTION, report(tally, settled, meta))
        log(f"wrote section {SECTION} of {path}")
    ok = not tally.findings and settled.ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
