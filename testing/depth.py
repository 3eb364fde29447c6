"""How many examples a property-based test draws: its suite count times ``TESTS_DEPTH``.

The suite draws each property at the count that keeps the quick tier inside its 90 s and the
whole suite inside six minutes (docs/testing.md); the same tests at depth are a trial run on
demand, ``python -m trials.properties`` (``TESTS_DEPTH=10``). One knob for every property test,
rather than a hypothesis profile, because hypothesis lets a test's own ``@settings`` count win
over any profile, and these tests set their counts by what each example costs.
"""

from __future__ import annotations

import os

DEPTH = int(os.environ.get("TESTS_DEPTH", "1"))


def examples(count: int) -> int:
    """``count`` at the suite's depth; more when a trial asks for depth."""
    return max(1, count * DEPTH)
