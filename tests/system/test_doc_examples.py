"""The examples of docs/producers.md and README.md run as written, against the shared
``loader serve`` (tests/system/conftest.py), and their rows land in Delta: every
Python block of docs/producers.md, the Python block of README.md, and README's
``loader submit orders rows.ndjson`` and ``curl .../v1/tables`` lines (the columns
example sends a DataFrame as an Arrow stream).

How an example is run, so the docs stay as a reader wants them: its code is executed as
it is, with ``URL`` and ``TOKEN`` given to it as globals (the service's address and a
producer token); a service address written out in it (``http://loader:8000``,
``http://127.0.0.1:8000``) becomes the test service's, and the paths ``/data/incoming``
and ``/var/lib/clicks-producer`` become directories under the test's tmp_path. Nothing
else is changed. A block that only defines a function (the streaming producer's
``forward``) is then called with events. A new Python block in either file fails
``test_every_python_block_is_run_here`` until this module runs it too.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.server_process import ServerProcess
from testing.shared_service import PRODUCER
from testing.tables import read_delta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "producers.md"
README = ROOT / "README.md"
#: Service addresses the examples write out, for the test service's.
SERVICE_URLS = ("http://loader:8000", "http://127.0.0.1:8000")
#: Which example a Python block is, by something only it says (test_every_python_block_is_run_here).
MARKERS = {
    DOCS: {
        "quickstart": 'url="http://loader:8000"',
        "file drop": "/data/incoming",
        "streaming": "async def forward",
        "columns": "pd.DataFrame(",
    },
    README: {"readme": "LoaderProducer("},
}


def column(name: str, kind: str, nullable: bool = False) -> dict[str, Any]:
    return {"name": name, "type": kind, "nullable": nullable}


EVENT = {"columns": [column("kind", "string"), column("ts", "float64"), column("n", "int64")]}
TABLES = {
    "orders": {"columns": [column("order_id", "int64"), column("amount", "float64")]},
    "clicks": {"columns": [column("user", "string"), column("n", "int64")]},
    "views": EVENT,
    "taps": EVENT,
}


def python_blocks(source: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", source.read_text(encoding="utf-8"), flags=re.S | re.M)


def example(source: Path, name: str) -> str:
    marker = MARKERS[source][name]
    found = [block for block in python_blocks(source) if marker in block]
    assert len(found) == 1, f"{source.name}: {len(found)} Python blocks hold {marker!r}, the {name} example's marker"
    return found[0]


def run_example(code: str, server: ServerProcess, paths: dict[str, Path] | None = None) -> dict[str, Any]:
    """Execute an example as the module docstring says; its globals afterwards."""
    for literal in SERVICE_URLS:
        code = code.replace(f'"{literal}"', f'"{server.base}"')
    for literal, path in (paths or {}).items():
        code = code.replace(f'"{literal}"', json.dumps(str(path)))
    left = re.findall(r'"(/(?:data|var)/[^"]*)"', code)
    assert not left, f"the example names paths this test does not redirect: {left}; add them to its paths"
    namespace: dict[str, Any] = {"__name__": "doc_example", "URL": server.base, "TOKEN": PRODUCER}
    exec(compile(code, "<example>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def service(shared_service: ServerProcess) -> ServerProcess:
    """The shared service (tests/system/conftest.py), given the tables the examples name."""
    with shared_service.client(timeout=120) as http:
        for name, schema in TABLES.items():
            answer = http.post("/v1/admin/tables", json={"name": name, "schema": schema})
            assert answer.status_code in (200, 201), answer.text
    return shared_service


def loaded(server: ServerProcess, table: str) -> list[dict[str, Any]]:
    """The table's rows in Delta once every update it acknowledged is loaded (polled, with a deadline)."""
    deadline = time.monotonic() + 120.0
    with server.client() as http:
        while True:
            status = http.get(f"/v1/tables/{table}").json()
            if status["last_loaded_sequence"] >= status["last_sequence"]:
                break
            assert time.monotonic() < deadline, f"{table}: not loaded after 120 s: {status}\n{server.log_tail()}"
            time.sleep(0.1)
    path = server.workdir / "data" / "warehouse" / table
    return read_delta(path).to_pylist() if (path / "_delta_log").is_dir() else []


def test_every_python_block_is_run_here() -> None:
    for source, markers in MARKERS.items():
        blocks = python_blocks(source)
        assert blocks, f"no Python block found in {source.name}"
        for block in blocks:
            matched = [name for name, marker in markers.items() if marker in block]
            assert len(matched) == 1, (
                f"a Python block of {source.name} is not one of the examples this module runs ({sorted(markers)}); "
                f"run it in tests/system/test_doc_examples.py:\n{block}"
            )


def orders_of_one(server: ServerProcess) -> int:
    return sum(1 for row in loaded(server, "orders") if row == {"order_id": 1, "amount": 9.5})


def test_the_first_example_of_docs_producers(service: ServerProcess) -> None:
    before = orders_of_one(service)
    namespace = run_example(example(DOCS, "quickstart"), service)
    assert namespace["ack"].table == "orders" and namespace["ack"].sequence >= 1
    assert orders_of_one(service) == before + 1


def test_the_columns_example_of_docs_producers(service: ServerProcess) -> None:
    """A DataFrame sent as an Arrow stream of the table's types, loaded by Spark."""
    before = len(loaded(service, "orders"))
    namespace = run_example(example(DOCS, "columns"), service)
    assert namespace["ack"].table == "orders" and namespace["ack"].sequence >= 1
    rows = loaded(service, "orders")
    assert len(rows) == before + 2 and {"order_id": 3, "amount": 7.0} in rows


def test_the_python_example_of_the_readme(service: ServerProcess) -> None:
    before = orders_of_one(service)
    namespace = run_example(example(README, "readme"), service)
    assert namespace["ack"].table == "orders" and not namespace["ack"].replayed
    assert orders_of_one(service) == before + 1


def test_the_shell_lines_of_the_readme(service: ServerProcess, tmp_path: Path) -> None:
    """``loader submit orders rows.ndjson`` as written (with the test service's address and
    token added), and the curl line as an httpx GET of the same path with the same header."""
    text = README.read_text(encoding="utf-8")
    submit = next(line for line in text.splitlines() if "loader submit orders rows.ndjson" in line)
    words = shlex.split(submit, comments=True)
    assert words[0].endswith("loader") and words[1:] == ["submit", "orders", "rows.ndjson"], words
    lines = [json.dumps({"order_id": 100 + k, "amount": k / 2}) for k in range(3)]
    (tmp_path / "rows.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "cli", *words[1:], "--url", service.base, "--token", PRODUCER],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ack = json.loads(result.stdout.strip().splitlines()[-1])["updates"][0]
    assert ack["table"] == "orders" and not ack["replayed"]
    rows = [row for row in loaded(service, "orders") if row["order_id"] >= 100]
    assert sorted(r["order_id"] for r in rows) == [100, 101, 102]  # once each

    curl = next(line for line in text.splitlines() if line.startswith("curl "))
    match = re.search(r'-H "([^"]+)" \S*?localhost:\d+(/\S+)', curl)
    assert match, f"the README's curl line is not one this test can follow: {curl}"
    header, path = match.groups()
    name, _, value = header.partition(": ")
    with httpx.Client(base_url=service.base, timeout=30) as http:
        answer = http.get(path, headers={name: value.replace("$TOKEN", PRODUCER)})
    assert answer.status_code == 200, answer.text
    assert set(TABLES) <= {t["name"] for t in answer.json()["tables"]}


def test_the_file_drop_example_sets_aside_only_the_refused_file(service: ServerProcess, tmp_path: Path) -> None:
    """Files a, b (a row the table refuses) and c go out close together; only b is set aside,
    with an error naming it and its row; d (not NDJSON) is set aside before anything of it
    is sent. A second run, with one more file, sends only that one: each row lands once."""
    incoming, state = tmp_path / "incoming", tmp_path / "state"
    incoming.mkdir()

    def drop(name: str, lines: list[str]) -> None:
        (incoming / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    def rows(user: str, *numbers: Any) -> list[str]:
        return [json.dumps({"user": user, "n": n}) for n in numbers]

    drop("a.ndjson", rows("a", 0, 1, 2))
    drop("b.ndjson", rows("b", 10, 11, "twelve"))
    drop("c.ndjson", rows("c", 20, 21))
    drop("d.ndjson", [*rows("d", 30), "not json"])
    paths = {"/data/incoming": incoming, "/var/lib/clicks-producer": state}
    code = example(DOCS, "file drop")

    run_example(code, service, paths)
    refused = incoming / "refused"
    assert sorted(p.name for p in refused.iterdir()) == ["b.ndjson", "b.ndjson.error", "d.ndjson", "d.ndjson.error"]
    error = (refused / "b.ndjson.error").read_text()
    assert "HTTP 422 for table 'clicks'" in error, error
    assert "row 2 of this send (checkpoint 'b.ndjson') to table 'clicks': column 'n'" in error, error
    assert "line 2 is not JSON" in (refused / "d.ndjson.error").read_text()
    assert sorted(p.name for p in incoming.glob("*.ndjson")) == ["a.ndjson", "c.ndjson"]
    assert sorted(r["n"] for r in loaded(service, "clicks")) == [0, 1, 2, 20, 21]

    drop("e.ndjson", rows("e", 40))
    run_example(code, service, paths)  # a restart: resumes after c, the last file journaled
    assert sorted(r["n"] for r in loaded(service, "clicks")) == [0, 1, 2, 20, 21, 40]  # each file once
    assert sorted(p.name for p in refused.iterdir()) == ["b.ndjson", "b.ndjson.error", "d.ndjson", "d.ndjson.error"]


def test_the_streaming_example(service: ServerProcess) -> None:
    namespace = run_example(example(DOCS, "streaming"), service)
    # After the tables' registration (a module's service may have started a moment ago) and
    # within the service's clock skew (5 s) ahead: every event's data_until is accepted.
    start = time.time()

    async def events() -> AsyncIterator[dict[str, Any]]:
        for k in range(20):
            yield {"kind": ("views", "taps")[k % 2], "ts": start + 0.1 * k, "n": k}
            await asyncio.sleep(0)

    asyncio.run(namespace["forward"](events()))
    assert sorted(r["n"] for r in loaded(service, "views")) == list(range(0, 20, 2))
    assert sorted(r["n"] for r in loaded(service, "taps")) == list(range(1, 20, 2))
