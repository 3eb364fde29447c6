"""The shared service of the system tests (testing/shared_service.py): one ``loader serve``
per test process, over that process's Spark Connect server, started when a test first asks
for ``tables`` and stopped cleanly (exit status 0) when the run ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testing.server_process import ServerProcess
from testing.shared_service import Tables, start_shared_service
from tests.spark_fixtures import ConnectEndpoint


@pytest.fixture(scope="session")
def shared_service(
    tmp_path_factory: pytest.TempPathFactory, connect_server: ConnectEndpoint
) -> Iterator[ServerProcess]:
    server = start_shared_service(tmp_path_factory.mktemp("shared-service"), connect_server.url)
    yield server
    if server.alive:
        assert server.terminate() == 0, server.log_tail()


@pytest.fixture
def tables(shared_service: ServerProcess, request: pytest.FixtureRequest) -> Iterator[Tables]:
    """Fresh tables on the shared service for this test; settled before the log guard reads."""
    assert shared_service.alive, f"the shared service ended:\n{shared_service.log_tail()}"
    mine = Tables(shared_service, request.node.name)
    yield mine
    mine.settle()
