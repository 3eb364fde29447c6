"""The guard that keeps a retry from hiding a defect (testing/log_guard.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from testing.log_guard import LogGuard, error_lines, watch_log

log = logging.getLogger("loader.test")


@pytest.mark.allow_errors(r"loading t \(updates")  # (the suite's own guard sees them too)
def test_an_error_record_of_this_process_is_unexpected_unless_allowed() -> None:
    guard = LogGuard([r"injected on purpose"])
    guard.start()
    try:
        log.error("loading t (updates 1..1) failed (attempt 1): injected on purpose; retrying in 0.5s")
        log.error("loading t (updates 2..2) failed (attempt 1): FileNotFoundError: data/handoff/x; retrying")
        log.warning("a warning is not an error")
    finally:
        guard.stop()
    assert guard.unexpected() == [
        "ERROR loader.test: loading t (updates 2..2) failed (attempt 1): FileNotFoundError: data/handoff/x; retrying"
    ]


@pytest.mark.allow_errors(r"the guard's own test")
def test_a_service_log_is_read_once_per_test_from_where_the_last_read_ended(tmp_path: Path) -> None:
    service_log = tmp_path / "server-1.log"
    service_log.write_text("2026-01-01 10:00:00,000 INFO loader.service: recovered\n")
    watch_log(service_log)
    guard = LogGuard()
    guard.start()
    guard.stop()
    assert guard.unexpected() == []
    with open(service_log, "a") as out:
        out.write("2026-01-01 10:00:01,000 ERROR loader.loading.dispatcher: the guard's own test\n")
        out.write("2026-01-01 10:00:01,000 ERROR loader.loading.disp")  # a line being written: not yet
    [line] = guard.unexpected()
    assert line.endswith("ERROR loader.loading.dispatcher: the guard's own test")
    assert guard.unexpected() == []


def test_a_traceback_counts_as_its_exception_and_joins_the_error_record_it_belongs_to() -> None:
    lines = [
        "2026-01-01 10:00:00,000 INFO a: fine",
        "2026-01-01 10:00:00,000 ERROR a: could not start loading",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "    g()",
        "ValueError: bad",
        "2026-01-01 10:00:01,000 INFO a: fine again",
        "Traceback (most recent call last):",
        '  File "y.py", line 2, in h',
        "KeyError: 'k'",
        "error: a command's own one-line message is not a log record",
    ]
    assert error_lines(lines) == [
        "2026-01-01 10:00:00,000 ERROR a: could not start loading [ValueError: bad]",
        "Traceback: KeyError: 'k'",
    ]


@pytest.mark.allow_errors(r"ERROR root: (Exception while sending command\. \[RuntimeError|something else)")
def test_py4j_logging_a_command_it_then_raises_is_left_to_the_caller() -> None:
    class Py4JNetworkError(Exception):  # (py4j's class, by name: py4j's record is matched by it)
        pass

    guard = LogGuard()
    guard.start()
    try:
        for message, error in (
            ("Exception while sending command.", Py4JNetworkError("Error while sending or receiving")),
            ("Exception while sending command.", RuntimeError("Error while sending or receiving")),
            ("something else", Py4JNetworkError("Error while sending or receiving")),
        ):
            try:
                raise error
            except Exception:
                logging.getLogger().exception(message)
    finally:
        guard.stop()
    assert [line.split(" [")[0] for line in guard.unexpected()] == [
        "ERROR root: Exception while sending command.",
        "ERROR root: something else",
    ]
