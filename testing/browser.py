"""A real headless browser for tests of the service's page: Debian's ``chromium`` driven
through ``chromedriver`` with selenium.

``binaries()`` finds ``chromium`` and ``chromedriver`` on PATH and, when they are missing
and the test runs as root with apt-get, installs ``chromium chromium-driver`` first
(testing/debian_packages.py); anywhere else the test is skipped with the reason.

The machines the suite runs on have no internet: Chromium's own traffic (component and
safe-browsing updates, sync, field trials, QUIC probes) is switched off, so that the only
requests the browser makes are the page's, and a hang or a console error cannot come
from a call to the outside. selenium is given the driver's path, so its driver manager
never looks for one online either.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from testing.debian_packages import commands

PACKAGES = ("chromium", "chromium-driver")
#: Headless, offline and quiet; ``--disable-dev-shm-usage`` because containers' /dev/shm is small.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--password-store=basic",
)

T = TypeVar("T")


def binaries() -> tuple[str, str]:
    """Paths of ``chromium`` and ``chromedriver``, installing the Debian packages when needed and allowed."""
    chromium, chromedriver = commands(("chromium", "chromedriver"), PACKAGES)
    return chromium, chromedriver


@contextlib.contextmanager
def headless_chromium(width: int = 1440, height: int = 1000) -> Iterator[Any]:
    """A selenium ``WebDriver`` on a fresh profile (nothing remembered from another run),
    with the browser's console kept for ``console_errors``; closed and its profile
    removed afterwards."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = binaries()
    profile = Path(tempfile.mkdtemp(prefix="loader-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: Any, seen: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The SEVERE entries of the browser's console since the last call (Chromium hands each
    entry out once); every entry read is also appended to ``seen`` for a failure message."""
    entries = driver.get_log("browser")
    if seen is not None:
        seen.extend(entries)
    return [entry for entry in entries if entry.get("level") == "SEVERE"]


def wait_for(predicate: Callable[[], T | None], timeout: float, message: Callable[[], str] | str) -> T:
    """The first truthy value of ``predicate``, polled until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message() if callable(message) else message} (after {timeout:.0f} s)")
        time.sleep(0.1)
