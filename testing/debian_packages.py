"""Commands a test needs from Debian packages: found on PATH, or installed when the test may.

Tests that drive a real outside program (Prometheus, a headless Chromium) must not fail on
a developer's machine that lacks it, and must not need a manual step on the project's own
machines: there the suite runs as root with apt-get, so the package is installed once
(under a file lock, pytest-xdist workers share the machine) and the test goes on.
Anywhere else the test is skipped with what to install.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

INSTALL_TIMEOUT = 900.0


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=300", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)


def _which(commands: tuple[str, ...]) -> list[str] | None:
    found = [shutil.which(command) for command in commands]
    return [path for path in found if path] if all(found) else None


def commands(names: tuple[str, ...], packages: tuple[str, ...]) -> list[str]:
    """Paths of ``names`` (in that order), installing ``packages`` first when some are
    missing and this is root with apt-get; otherwise the calling test is skipped."""
    found = _which(names)
    if found is not None:
        return found
    wanted = " ".join(packages)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{'/'.join(names)} not on PATH and this is not root with apt-get to install {wanted}")
    lock_path = Path(tempfile.gettempdir()) / f"warehouse-loader-{'-'.join(packages)}-install.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _which(names) is None:
            install = ("install", "-y", "--no-install-recommends", *packages)
            result = _apt(*install)
            if result.returncode != 0:  # a stale package list: refresh it once
                _apt("update")
                result = _apt(*install)
            if result.returncode != 0:
                pytest.fail(f"apt-get install {wanted} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    found = _which(names)
    if found is None:
        pytest.fail(f"apt-get installed {wanted} but {'/'.join(names)} are still not on PATH")
    return found
