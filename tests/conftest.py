"""Hypothesis settings for the test suite: reproducible runs, no per-example deadline.

``derandomize=True`` draws examples from a seed derived from each test, so every run (and
every machine) sees the same cases; ``database=None`` keeps no example store in the shared
checkout. Select another registered profile with HYPOTHESIS_PROFILE=<name>.
"""

import json
import os
import sys
import time
from pathlib import Path

from hypothesis import settings

# `from testing.invariants import ...` also under a bare `pytest` (python -m adds the cwd).
ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

#: Every JVM a test starts (Spark sessions, Spark Connect servers, a cluster's daemons; set
#: here, so every service and worker process the tests start inherits it): the C1 compiler
#: only and the serial collector. A Spark JVM's start spends half its CPU in C2 compiling
#: code it runs a few times: 17 to 18 CPU-seconds per session start and five small jobs
#: against 9.3 to 9.5 with these (docs/testing.md). The tests' loads are a few rows, so C2's
#: faster steady state is never reached; the service's own JVMs keep the JVM's defaults.
#: Nor is pyspark's own bytecode verified as it loads (its jars are the ones pip installed):
#: a session's start and five jobs, 8.0 to 8.5 CPU-seconds with verification, 7.0 to 7.5
#: without (three runs each, interleaved).
TEST_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
)
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_variable, TEST_JVM_OPTIONS)

from testing.log_guard import LogGuard  # noqa: E402
from testing.service_harness import Harness  # noqa: E402

#: One Spark session and, for the tests that ask, one Spark Connect server per test process
#: (tests/spark_fixtures.py): both are started on first use only.
pytest_plugins = ["tests.spark_fixtures"]


@pytest.fixture(autouse=True)
def no_unexpected_errors(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A retry must not hide a defect: any ERROR line (a failed load attempt, a quarantine, a
    failed callback) that the test did not allow with ``@pytest.mark.allow_errors(regex, ...)``
    fails it (testing/log_guard.py)."""
    allowed = [pattern for marker in request.node.iter_markers("allow_errors") for pattern in marker.args]
    guard = LogGuard(allowed)
    guard.start()
    try:
        yield
    finally:
        guard.stop()
    unexpected = guard.unexpected()
    if unexpected:
        shown = "\n".join(f"  {line[:600]}" for line in unexpected[:20])
        more = f"\n  ... and {len(unexpected) - 20} more" if len(unexpected) > 20 else ""
        pytest.fail(
            f"{len(unexpected)} ERROR line(s) this test did not inject; fix the cause, or allow what the test "
            f"injects on purpose with @pytest.mark.allow_errors(regex):\n{shown}{more}",
            pytrace=False,
        )


@pytest.fixture
def harness(tmp_path: Path):  # type: ignore[no-untyped-def]
    """An in-process service behind TestClient with the Spark-free sink (testing/service_harness.py)."""
    with Harness(tmp_path / "data") as h:
        yield h


settings.register_profile("repro", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("explore", deadline=None, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))


#: The longest tests (real servers, crash trials), in this order, before everything else:
#: the files whose tests take 20 s or more, longest first, so that what is left for the
#: last minute of a run is short; then the dashboards' modules, each sharing one Prometheus
#: (and a thousand tables) among its tests, which a process stealing half of them would
#: start again; then the other system tests.
FIRST = (
    "tests/system/test_crash.py",
    "tests/system/test_connect_mode.py",
    "tests/cli/test_foreground.py",
    "tests/system/test_cluster.py",
    "tests/system/test_producer.py",
    "tests/system/test_overload.py",
    "tests/system/test_spill_e2e.py",
    "tests/deploy/",
    "tests/system/",
)

#: The system tier (docs/testing.md): real services, Spark, browsers and Prometheus. A test
#: is in it by where it lives or by asking for a JVM; ``./scripts/test -m "not system"`` is
#: the quick tier, the edit loop.
SYSTEM_PATHS = ("tests/system/", "tests/deploy/", "tests/cli/test_foreground.py", "tests/cli/test_serve.py")
JVM_FIXTURES = frozenset({"spark", "connect_server", "connect_spark", "shared_service", "tables"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The system tier marked; the longest tests first. ``./scripts/test`` runs two
    processes with ``--dist worksteal``: each starts on one half of this order, and a process
    that runs out takes the back half of what the other has not started, so the long tests
    begin early and the run ends on short ones (a crash trial collected last once ran alone
    at the end while the other process sat idle)."""
    for item in items:
        if item.nodeid.startswith(SYSTEM_PATHS) or JVM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.system)

    def rank(item: pytest.Item) -> int:
        return next((k for k, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))

    items.sort(key=rank)  # stable: the order within each rank stays the collection order


#: ``TESTS_TIMELINE=<dir>``: each test process writes when each test began and ended
#: there (``<worker>.jsonl``), for ``python -m testing.timeline <dir>`` (docs/testing.md).
_TIMELINE = os.environ.get("TESTS_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    if not _TIMELINE:
        yield
        return
    began = time.time()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    record = {"worker": worker, "test": item.nodeid, "start": began, "end": time.time()}
    Path(_TIMELINE).mkdir(parents=True, exist_ok=True)
    with open(Path(_TIMELINE) / f"{worker}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
