"""The crash points' spec: what arms a kill, and a delayed kill that lands while the process
carries on (``load.upsert.mid-merge``: the MERGE is one native call with no step to stop at)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from loader.core.failpoints import ENV, Armed, parse


def test_a_spec_names_points_counts_and_delays() -> None:
    assert parse("") == {}
    assert parse("load.after-commit=3, wal.after-write,load.upsert.mid-merge=2@0.05") == {
        "load.after-commit": Armed(3),
        "wal.after-write": Armed(1),
        "load.upsert.mid-merge": Armed(2, 0.05),
    }


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("load.after-comit", "unknown failpoint 'load.after-comit'"),
        ("load.after-commit=x", "is not NAME, NAME=COUNT or NAME=COUNT@SECONDS"),
        ("load.after-commit=1@soon", "is not NAME, NAME=COUNT or NAME=COUNT@SECONDS"),
        ("load.after-commit=0", "the count must be at least 1"),
        ("load.after-commit=1@-1", "the delay a finite, not negative number"),
        ("load.after-commit=1@nan", "the delay a finite, not negative number"),
        ("load.after-commit=1@inf", "the delay a finite, not negative number"),
        ("wal.torn-write=1@0.1", "a torn write happens at the write; it takes no delay"),
    ],
)
def test_a_wrong_spec_is_refused_with_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")) as caught:
        parse(spec)
    assert ENV in str(caught.value)


#: Passes a delayed point twice (armed for the 2nd), then works on, reporting its progress.
WORKER = """
import sys, time
from loader.core import failpoints
failpoints.hit("load.upsert.mid-merge")
print("first pass", flush=True)
failpoints.hit("load.upsert.mid-merge")
print("second pass: carrying on", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.01)
print("never killed", flush=True)
"""


def test_a_delayed_point_kills_the_process_after_it_carried_on() -> None:
    env = {**os.environ, ENV: "load.upsert.mid-merge=2@0.2"}
    done = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.splitlines() == ["first pass", "second pass: carrying on"]
