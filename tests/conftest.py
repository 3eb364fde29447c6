"""Hypothesis settings for the test suite: reproducible runs, no per-example deadline.

``derandomize=True`` draws examples from a seed derived from each test, so every run (and
every machine) sees the same cases; ``database=None`` keeps no example store in the shared
checkout. Select another registered profile with HYPOTHESIS_PROFILE=<name>.
"""

import os
import sys
from pathlib import Path

from hypothesis import settings

# `from testing.invariants import ...` also under a bare `pytest` (python -m adds the cwd).
ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from testing.log_guard import LogGuard  # noqa: E402
from testing.service_harness import Harness  # noqa: E402


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


#: The longest tests (real servers, crash trials), in this order, before everything else.
FIRST = ("tests/system/test_crash.py", "tests/system/", "tests/deploy/", "tests/cli/test_foreground.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first: pytest-xdist (``./scripts/test`` runs two processes) hands
    tests out in collection order, and a three-minute crash trial collected last ran
    alone at the end while the other process sat idle (9:16 against 7:00 for the suite)."""

    def rank(item: pytest.Item) -> int:
        return next((k for k, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))

    items.sort(key=rank)  # stable: the order within each rank stays the collection order
