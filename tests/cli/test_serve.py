"""``loader serve`` as a service manager sees it: non-zero when it cannot start. (Exit status 0
after a clean stop on SIGTERM, and on SIGINT, to the process or its group:
tests/cli/test_foreground.py.)"""

from __future__ import annotations

from pathlib import Path

from loader.durability.wal import WriteAheadLog
from testing.server_process import ServerProcess, free_port, write_config

TOKEN = "operator-token-0123456789"


def _server(tmp_path: Path) -> ServerProcess:
    port = free_port()
    settings = {
        "port": port,
        "data_dir": str(tmp_path / "data"),
        "workers": 1,
        "spark": {"master": "local[1]"},
        "auth_tokens": [{"token": TOKEN, "role": "operator", "name": "ops"}],
    }
    return ServerProcess(tmp_path, write_config(tmp_path / "loader.toml", settings), port, TOKEN)


def test_a_start_that_fails_exits_non_zero(tmp_path: Path) -> None:
    """Another process holds the WAL's lock (a second instance on the same data)."""
    server = _server(tmp_path)
    with WriteAheadLog(tmp_path / "data" / "wal"):
        server.start()
        code = server.wait_exit(120)
    assert code not in (0, None), server.log_tail()
    assert "lock" in server.log_text().lower(), server.log_tail()
