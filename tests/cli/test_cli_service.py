"""``loader submit`` against a running service (uvicorn on loopback, Spark-free sink)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cli.app import app
from loader.service import LoaderService
from testing.service_harness import PRODUCER, serve_in_thread


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LoaderService]]:
    with serve_in_thread(Path(tmp_path_factory.mktemp("cli")) / "data") as served:
        yield served


def submit(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["submit", *args, "--url", url, "--token", PRODUCER])
    return result.exit_code, result.output


def test_submit_ndjson_rows_prints_the_acknowledgement(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, service = running
    rows = tmp_path / "clicks.ndjson"
    rows.write_text('{"url": "/a", "n": 1}\n{"url": "/b", "n": 2}\n', encoding="utf-8")
    code, output = submit(url, "clicks", str(rows), "--idempotency-key", "cli-1")
    assert code == 0, output
    ack = json.loads(output.strip().splitlines()[-1])["updates"][0]
    assert ack["table"] == "clicks" and ack["sequence"] >= 1
    again = json.loads(submit(url, "clicks", str(rows), "--idempotency-key", "cli-1")[1].strip().splitlines()[-1])
    assert again["updates"][0] == ack | {"replayed": True}  # a retried submission is answered, not loaded twice
    assert ack["key"] == "cli-1" and not ack["replayed"]


def test_submit_an_arrow_file_or_stream_sends_its_columns(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, service = running
    data = pa.table({"url": ["/a", "/b"], "n": pa.array([1, 2], pa.int64())})
    with pa.ipc.new_file(tmp_path / "c.arrow", data.schema) as writer:
        writer.write_table(data)
    with pa.ipc.new_stream(tmp_path / "c.arrows", data.schema) as writer:
        writer.write_table(data)
    for name in ("c.arrow", "c.arrows"):
        code, output = submit(url, "clicks", str(tmp_path / name))
        assert code == 0, output
        assert json.loads(output.strip().splitlines()[-1])["updates"][0]["table"] == "clicks"
    (tmp_path / "bad.arrow").write_bytes(b"not arrow")
    code, output = submit(url, "clicks", str(tmp_path / "bad.arrow"))
    assert code == 2 and "is not an Arrow IPC file or stream" in output


def test_submit_a_landing_file_by_a_path_relative_to_the_caller(running, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    url, service = running
    landing = service.settings.landing_path.resolve()
    pq.write_table(pa.table({"order_id": pa.array([1, 2], pa.int64())}), landing / "o.parquet")
    monkeypatch.chdir(landing.parent)
    code, output = submit(url, "orders", os.path.join(landing.name, "o.parquet"))
    assert code == 0, output
    assert json.loads(output.strip().splitlines()[-1])["updates"][0]["table"] == "orders"


def test_submit_errors_exit_2_with_the_reason(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, _ = running
    rows = tmp_path / "r.ndjson"
    rows.write_text('{"n": 1}\n', encoding="utf-8")
    code, output = submit(url, "nope", str(rows))
    assert code == 2 and "HTTP 404" in output and "does not exist" in output
    code, output = submit(url, "clicks", str(tmp_path / "missing.ndjson"))
    assert code == 2 and "is not a file" in output
    code, output = submit("http://127.0.0.1:9", "clicks", str(rows), "--timeout", "0.5")  # retried until then
    assert code == 2 and "cannot reach" in output and "ConnectError" in output
