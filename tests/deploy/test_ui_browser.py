"""The page at /ui in a real browser (Debian's headless chromium, driven by chromedriver
through selenium) against a real ``loader demo`` (one load worker, over the test process's Spark server), its demo
producer feeding its four tables, and a latest table fed by the producer client: the
operator types the token once, the page shows every table, and its figures move as loads
commit, with nothing logged to the browser's console as an error.

A screenshot of the page is left in /tmp/ui-check/ui.png for a person to look at.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.demo import DEMO_TABLES
from producer import LoaderProducer
from testing.browser import binaries, console_errors, headless_chromium, wait_for
from testing.server_process import ServerProcess, free_port, write_config
from tests.spark_fixtures import ConnectEndpoint

pytestmark = pytest.mark.slow
By = pytest.importorskip("selenium.webdriver.common.by", reason="selenium is not installed (the test extra)").By

OPERATOR = "operator-token-0123456789"
PRODUCER = "producer-token-0123456789"
SCREENSHOT = Path("/tmp/ui-check/ui.png")
READ_TEXT = "const found = document.querySelector(arguments[0]); return found ? found.textContent : '';"
READ_TABLES = "return [...document.querySelectorAll('#tables-body tr')].map((row) => row.dataset.table);"
#: The demo's own tables (cli/demo.py), and one this test adds and feeds.
DEMO = [table.name for table in DEMO_TABLES]
USERS: dict[str, Any] = {
    "name": "users",
    "mode": "latest",
    "key": ["user_id"],
    "schema": {"columns": [{"name": "user_id", "type": "int64", "nullable": False}, {"name": "plan", "type": "string"}]},
}
TABLES = [*DEMO, USERS["name"]]


def _rows(k: int) -> list[dict[str, Any]]:
    return [{"user_id": k % 5, "plan": f"plan-{k}"}]


class Feed:
    """The producer client on a thread: the latest table an update every 0.2 s until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.sent = 0
        self.thread = threading.Thread(target=self._run, name="ui-feed", daemon=True)

    def _run(self) -> None:
        try:
            with LoaderProducer(url=self.url, token=PRODUCER) as producer:
                k = 0
                while not self.stop.is_set():
                    producer.send(USERS["name"], _rows(k))
                    self.sent += 1
                    k += 1
                    self.stop.wait(0.2)
                producer.flush()
        except BaseException as exc:  # shown by the test when the page waits in vain
            self.error = exc

    def __enter__(self) -> Feed:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


@pytest.fixture
def server(tmp_path: Path, connect_server: ConnectEndpoint) -> Iterator[ServerProcess]:
    binaries()  # skip (or install) before paying for Spark's start
    port = free_port()
    settings = {
        "port": port,
        "data_dir": str(tmp_path / "data"),
        "workers": 1,
        # The page is what is tested: the test process's Spark Connect server (a JVM start less).
        "spark": {"master": "local[1]", "remote": connect_server.url},
        "auth_tokens": [
            {"token": OPERATOR, "role": "operator", "name": "ops"},
            {"token": PRODUCER, "role": "producer", "name": "feed"},
        ],
    }
    config = write_config(tmp_path / "loader.toml", settings)
    served = ServerProcess(tmp_path, config, port, OPERATOR, args=["demo", "--config", str(config)])
    served.start()
    try:
        assert served.wait_ready(timeout=300), served.log_tail()
        with httpx.Client(base_url=served.base, headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
            answer = http.post("/v1/admin/tables", json=USERS)
            assert answer.status_code == 201, answer.text
        yield served
    finally:
        if served.alive:
            served.terminate()


def test_the_page_shows_every_table_and_follows_their_loads(server: ServerProcess) -> None:
    console: list[dict[str, Any]] = []

    def no_console_errors() -> None:
        severe = console_errors(driver, console)
        assert not severe, "the browser's console has errors:\n" + "\n".join(e["message"] for e in severe)

    # Read in one script each: the page redraws its rows every 2 s, so an element found by
    # one call may be gone by the next.
    def cell(table: str, field: str) -> str:
        selector = f'#tables-body tr[data-table="{table}"] td[data-field="{field}"]'
        return str(driver.execute_script(READ_TEXT, selector))

    def shown() -> set[str]:
        return set(driver.execute_script(READ_TABLES))

    with Feed(server.base) as feed, headless_chromium() as driver:

        def why() -> str:
            return f"feed sent {feed.sent}, error {feed.error!r}; server log:\n{server.log_tail(20)}"

        driver.get(f"{server.base}/")
        assert driver.current_url.endswith("/ui")
        token = wait_for(lambda: _displayed(driver.find_elements(By.ID, "token-input")), 15, "no token form")
        token.send_keys(OPERATOR)
        driver.find_element(By.ID, "token-submit").click()
        wait_for(lambda: not driver.find_element(By.ID, "token-dialog").get_attribute("open"), 15, "the form stayed")

        # Every table, its mode, and the service's state in the header.
        names = set(TABLES)
        wait_for(lambda: names <= shown(), 30, lambda: f"tables shown: {shown()}")
        assert "latest" in cell("users", "name")
        chips = wait_for(lambda: driver.find_element(By.ID, "chips").text, 15, "no status in the header")
        assert "Ready" in chips and "Spark reachable" in chips, chips

        # Loads commit while the producer feeds: the loaded sequence and Delta version move.
        first = wait_for(lambda: _loaded(cell("clicks", "last_loaded_sequence")), 180, why)
        version = cell("clicks", "delta_version")
        wait_for(lambda: (_loaded(cell("clicks", "last_loaded_sequence")) or 0) > first, 180, why)
        wait_for(lambda: cell("clicks", "delta_version") != version, 60, why)
        wait_for(lambda: _loaded(cell("users", "last_loaded_sequence")), 120, why)
        assert cell("orders", "staleness_seconds").endswith(" s")

        # The chart draws a line per table, the figures across tables are there.
        wait_for(
            lambda: len(driver.find_elements(By.CSS_SELECTOR, "#chart path.series")) == len(TABLES), 30, "no lines"
        )
        legend = driver.find_element(By.ID, "legend").text
        assert all(name in legend for name in names), legend
        kpis = driver.find_element(By.ID, "kpis").text
        assert f"Tables\n{len(TABLES)}" in kpis, kpis
        assert "Needs an operator token" not in driver.find_element(By.TAG_NAME, "main").text
        assert not driver.find_element(By.ID, "banner").text, driver.find_element(By.ID, "banner").text
        no_console_errors()

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1440, int(height) + 200)  # the whole page: its height and the window's frame
        wait_for(lambda: driver.execute_script("return document.readyState") == "complete", 10, "not settled")
        assert driver.save_screenshot(str(SCREENSHOT))
        no_console_errors()
    assert feed.error is None, feed.error


def _displayed(elements: list[Any]) -> Any:
    return elements[0] if elements and elements[0].is_displayed() else None


def _loaded(text: str) -> int | None:
    """The loaded sequence number of a "12 / 14" cell, once above 0."""
    try:
        value = int(text.split("/")[0].strip().replace(",", ""))
    except ValueError:
        return None
    return value or None
