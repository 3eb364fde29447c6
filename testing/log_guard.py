"""A retry must not hide a defect: a test fails on any ERROR it did not inject on purpose.

The service retries a failed load and sets aside a batch that keeps failing, so a defect
that fails the first attempt (a relative path that one process cannot find, say) passes
every assertion on the rows. It does log each failed attempt, each quarantine and each
failed callback at ERROR, so the guard watches, for the length of each test:

- log records at ERROR or above in the test's own process (in-process services);
- the log of every ``loader serve`` the test started (``testing/server_process.py``
  registers each), for lines at ERROR or a ``Traceback``.

A test that injects a failure names what it expects with
``@pytest.mark.allow_errors(r"regex", ...)`` (on a test, a class or a module's
``pytestmark``): a line that one of the patterns finds (``re.search``) is allowed, any
other fails the test with the lines listed. The fixture is ``tests/conftest.py``'s.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

#: Lines of a service's log that the guard reads as errors.
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b")
#: The start of a log record (the service's format: a timestamp first).
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d")

#: Each service log started in this process, and how far the guard has read it: a service
#: a module's fixture started outlives a test, and what it logs counts in the next one.
_watched: dict[Path, int] = {}


def watch_log(path: Path) -> None:
    """A log file to read as each test ends (a service started by a test or a fixture)."""
    _watched.setdefault(path, 0)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if _py4j_release(record):
            return
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format is still an error line
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += f" [{type(record.exc_info[1]).__name__}: {record.exc_info[1]}]"
        self.lines.append(f"{record.levelname} {record.name}: {text}")


def _py4j_release(record: logging.LogRecord) -> bool:
    """py4j's own ERROR record of a command whose answer never came (the test process's Spark
    session, tests/spark_fixtures.py): py4j logs it and then raises the same error to the
    caller, so a test's own call that meets it fails the test anyway. What this leaves out is
    only the record of a caller that ignored the error, such as a finalizer's release of a JVM
    object: met once in ten suites (every test passed), right after a test that held a classic
    and a Connect session of one JVM."""
    error = record.exc_info[1] if record.exc_info else None
    return (
        record.name == "root"
        and record.getMessage() == "Exception while sending command."
        and type(error).__name__ == "Py4JNetworkError"
        and str(error) == "Error while sending or receiving"
    )


class LogGuard:
    """One test's watch: ``start()``, then ``unexpected()`` once it ended."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed = [re.compile(p) for p in allowed]
        self._handler = _Records()

    def start(self) -> None:
        logging.getLogger().addHandler(self._handler)

    def stop(self) -> None:
        logging.getLogger().removeHandler(self._handler)

    def unexpected(self) -> list[str]:
        lines = list(self._handler.lines)
        for path in list(_watched):
            lines += [f"{path}: {line}" for line in _new_error_lines(path)]
        return [line for line in lines if not any(p.search(line) for p in self.allowed)]


def _new_error_lines(path: Path) -> Sequence[str]:
    """The error lines of what ``path`` gained since the last read (whole lines only)."""
    try:
        with open(path, "rb") as log:
            log.seek(_watched[path])
            data = log.read()
    except FileNotFoundError:
        return ()
    end = data.rfind(b"\n") + 1
    _watched[path] += end
    return error_lines(data[:end].decode("utf-8", errors="replace").splitlines())


def error_lines(lines: Sequence[str]) -> list[str]:
    """Each ERROR line, and each traceback as its exception's line; a traceback that belongs
    to an ERROR record (``log.exception``: no new log line between the two) joins it."""
    found: list[str] = []
    joinable = False  # the last line found is an ERROR record that a traceback may follow
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("Traceback (most recent call last)"):
            k += 1
            while k < len(lines) and (lines[k][:1].isspace() or not lines[k]):
                k += 1
            exception = lines[k] if k < len(lines) else "(cut off)"
            if joinable:
                found[-1] += f" [{exception}]"
            else:
                found.append(f"Traceback: {exception}")
            joinable = False
        elif ERROR_LINE.search(line):
            found.append(line)
            joinable = True
        elif LOG_RECORD.match(line):
            joinable = False
        k += 1
    return found
