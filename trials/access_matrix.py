"""Access-control trial: every route × every kind of caller, tokens in logs, token comparison.

    .venv/bin/python -m trials.access_matrix              # a few seconds; rewrites RELIABILITY.md
    .venv/bin/python -m trials.access_matrix --no-write   # print only

Runs the table of ``tests/api/test_access_control.py`` (``RULES``) over HTTP against the
service under uvicorn in this process (Spark-free sink), with every logger, uvicorn's
access log included, at DEBUG: each route as no token, a wrong token, a producer, a
producer limited to another table and the operator, with requests that are valid apart
from authorization. Reports the matrix, that the table covers every route the app
serves, whether any token appeared in a log record or a response, how many comparisons
one authentication makes, the time one takes for matching and wrong tokens of very
different lengths, and the mode of a generated tokens file. Writes RELIABILITY.md
section ``access-control``.
"""

from __future__ import annotations

import argparse
import hmac
import os
import stat
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import requests

from api.auth import Authenticator, generated_tokens, tokens_file
from loader.config import Role, TokenConfig, load_settings
from loader.core.errors import Unauthorized
from testing.access_control import (
    PRINCIPALS,
    RULES,
    Outcome,
    app_routes,
    capture_all_logs,
    exercise_tokens,
    leaks,
    served_with_all_logs,
)
from testing.report import (
    LoadMonitor,
    log,
    machine_info,
    machine_markdown,
    md_table,
    print_table,
    run_meta,
    status,
)
from trials.reliability import write_reliability

MODULE = "trials.access_matrix"
SECTION = "access-control"


def comparisons_per_authentication() -> tuple[int, int, set[int]]:
    """(configured tokens, compare_digest calls per authenticate, lengths compared)."""
    tokens = [
        TokenConfig(token="s" * 16, role=Role.operator, name="short"),
        TokenConfig(token="m" * 64, role=Role.producer, name="medium"),
        TokenConfig(token="l" * 512, role=Role.producer, name="long"),
    ]
    authenticator = Authenticator(tokens)
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.extend((len(a), len(b)))
        return real(a, b)

    hmac.compare_digest = counting  # type: ignore[assignment]
    try:
        per_call = []
        for presented in ("s" * 16, "l" * 512, "x" * 16, ""):
            before = len(calls)
            try:
                authenticator.authenticate(f"Bearer {presented}")
            except Unauthorized:
                pass
            per_call.append((len(calls) - before) // 2)
    finally:
        hmac.compare_digest = real  # type: ignore[assignment]
    assert len(set(per_call)) == 1
    return len(tokens), per_call[0], set(calls)


def authentication_times(repeat: int = 7, number: int = 20000) -> list[list[Any]]:
    """Median-of-``repeat`` ns per authenticate() for matching and wrong tokens."""
    short, long = "s" * 16, "l" * 512
    authenticator = Authenticator(
        [
            TokenConfig(token=short, role=Role.operator, name="short"),
            TokenConfig(token=long, role=Role.producer, name="long"),
        ]
    )

    def attempt(presented: str) -> None:
        try:
            authenticator.authenticate(f"Bearer {presented}")
        except Unauthorized:
            pass

    rows = []
    for label, presented in (
        ("the 16-character token (first configured)", short),
        ("the 512-character token (last configured)", long),
        ("wrong, 16 characters, same first 15", short[:-1] + "x"),
        ("wrong, 512 characters, same first 511", long[:-1] + "x"),
        ("wrong, 1 character", "x"),
    ):
        runs = timeit.repeat(lambda p=presented: attempt(p), repeat=repeat, number=number)
        rows.append([label, f"{sorted(runs)[repeat // 2] / number * 1e9:.0f}"])
    return rows


def tokens_file_mode() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(None, data_dir=Path(tmp) / "data")
        old = os.umask(0)
        try:
            generated_tokens(settings)
        finally:
            os.umask(old)
        return oct(stat.S_IMODE(tokens_file(settings).stat().st_mode))


def matrix_rows(outcomes: list[Outcome]) -> list[list[str]]:
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for o in outcomes:
        mark = str(o.status) if o.status == o.expected else f"**{o.status}** (expected {o.expected})"
        cells.setdefault((o.method, o.route), {})[o.principal] = mark
    return [[f"`{method} {route}`", *(row[p] for p in PRINCIPALS)] for (method, route), row in cells.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="do not rewrite RELIABILITY.md")
    args = parser.parse_args(argv)
    machine = machine_info("api")
    began = time.perf_counter()
    with LoadMonitor() as load:
        served = app_routes()
        missing, stale = sorted(served - set(RULES)), sorted(set(RULES) - served)
        with tempfile.TemporaryDirectory(prefix="access-") as tmp, capture_all_logs() as logs:
            with served_with_all_logs(Path(tmp) / "data", logs) as (url, _), requests.Session() as session:
                outcomes, bodies = exercise_tokens(url, session)
        tokens, compares, lengths = comparisons_per_authentication()
        times = authentication_times()
        mode = tokens_file_mode()
    meta = run_meta(MODULE, argv, machine, began, load)
    mismatches = [o for o in outcomes if o.status != o.expected]
    leaked_logs, leaked_bodies = leaks(logs.texts), leaks(bodies)
    access_records = sum(r.name == "uvicorn.access" for r in logs.records)
    ok = (
        not mismatches
        and not missing
        and not stale
        and not leaked_logs
        and not leaked_bodies
        and compares == tokens
        and lengths == {32}
        and mode == "0o600"
    )
    headers = ["route", *PRINCIPALS]
    rows = matrix_rows(outcomes)
    print_table("Access control: status per route and caller", headers, rows)
    figures = [
        ["routes served / with a row in the table", f"{len(served)} / {len(served) - len(missing)}"],
        ["rows for routes not served", len(stale)],
        ["requests (route × caller)", len(outcomes)],
        ["statuses other than the table's", len(mismatches)],
        [f"log records scanned (uvicorn access log: {access_records})", len(logs.records)],
        ["response bodies scanned", len(bodies)],
        ["tokens found in log records / responses", f"{len(leaked_logs)} / {len(leaked_bodies)}"],
        ["comparisons per authentication (tokens configured)", f"{compares} ({tokens})"],
        ["bytes per comparison (SHA-256 digests)", ", ".join(map(str, sorted(lengths)))],
        ["generated tokens file mode (umask 000)", mode],
        ["**promise** (only the right token gets in, tokens never shown)", status(ok)],
    ]
    print_table("Access control: figures", ["figure", "value"], figures)
    print_table("One authentication (ns, median)", ["presented token", "ns"], times)
    if not args.no_write:
        body = (
            "## Access control\n\n"
            "Every route the app serves (FastAPI's routes, enumerated; the table in "
            "`tests/api/test_access_control.py` must have a row for each) is called over HTTP as five callers: no "
            "token, a wrong token, a producer, a producer limited to another table (`orders`; the requests act on "
            "`clicks`) and the operator. The requests are valid apart from authorization, so the status is the "
            "authorization decision: 401 without a valid token, 403 where the role or table list does not allow "
            "it, the route's success status otherwise (404 for the quarantine actions: nothing is quarantined). "
            "Meanwhile every logger, uvicorn's access log included, records at DEBUG, and every record and "
            "response body is searched for the four token strings (near-miss credentials such as `Basic "
            "<token>` and `Bearer <token>x` included). Tokens are compared as SHA-256 digests against every "
            "configured token (no early exit), so neither a token's content nor its length shows in the time "
            "an authentication takes; the times below are for reference (they grow with the *presented* "
            "token's length, which the caller knows, not with how much of it is right).\n\n"
            "Short version (CI): `.venv/bin/python -m pytest -q tests/api/test_access_control.py`.  \n"
            f"This report: `.venv/bin/python -m {MODULE}`.\n\n"
            + machine_markdown(meta, package="api")
            + "\n"
            + md_table(["figure", "value"], figures, align="lr")
            + "\n\nStatus per route and caller (a mismatch would be shown in bold with the expected status):\n\n"
            + md_table(headers, rows, align="l" + "r" * len(PRINCIPALS))
            + "\n\nOne authentication, median of 7 × 20,000 calls (ns; Python, in-process; two tokens "
            "configured, 16 and 512 characters):\n\n" + md_table(["presented token", "ns"], times, align="lr") + "\n"
        )
        path = write_reliability(SECTION, body)
        log(f"wrote section {SECTION} of {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
