"""How a hostile-input case runs: a fresh service, the request, and proof that it changed nothing.

The cases themselves are in ``testing/hostile_cases.py``. Each case runs against a fresh
in-process service (``testing/service_harness.Harness``, Spark-free sink, ~0.1 s) whose
tables already hold one loaded update, and whose landing directory holds good files, bad
files, symbolic links into and out of it and a FIFO. Around the request the whole
observable state is snapshotted: per table the last sequence number, pending count and
bytes, loaded sequence and Delta log version; the WAL's bytes and records; the
Idempotency-Key store; every file (kind, size, inode, mtime, content digest) in the
landing directory, in a directory outside it and in the service's owned-files directory.
A refused request must leave all of it as it was, and its error body must name what was
wrong (``wrong``) and what to do (``todo``) in at most ``MAX_MESSAGE_CHARS`` characters.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from testing.service_harness import OPERATOR, PRODUCER, Harness

#: Small enough that the over-limit cases cost little; the same code path as 16 MiB.
MAX_BODY_BYTES = 64 * 1024
#: An error message longer than this echoes the input instead of explaining it.
MAX_MESSAGE_CHARS = 1200

ORD = "/v1/tables/orders/updates"
CLK = "/v1/tables/clicks/updates"
TYP = "/v1/tables/typed/updates"
WIDE = "/v1/tables/wide/updates"
MULTI = "/v1/updates"
NDJSON = "application/x-ndjson"

TYPED = {
    "name": "typed",
    "schema": {
        "columns": [
            {"name": "i32", "type": "int32"},
            {"name": "f32", "type": "float32"},
            {"name": "ok", "type": "boolean"},
            {"name": "day", "type": "date"},
            {"name": "at", "type": "timestamp"},
        ]
    },
}
NES = "/v1/tables/nested/updates"
FEED = "/v1/tables/feed/updates"


def _field(name: str, kind: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


def _map(key: str, value: str) -> dict[str, Any]:
    return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": True}


#: Nested columns in Delta's schema JSON: a list of structs (a decimal and a binary inside),
#: a map of string keys and one of integer keys (an array of {"key", "value"} entries in JSON).
NESTED_TABLE = {
    "name": "nested",
    "schema": {
        "columns": [
            {"name": "id", "type": "int64"},
            {
                "name": "items",
                "type": {
                    "type": "array",
                    "elementType": {
                        "type": "struct",
                        "fields": [_field("sku", "string"), _field("price", "decimal(6,2)"), _field("blob", "binary")],
                    },
                    "containsNull": True,
                },
            },
            {"name": "attrs", "type": _map("string", "long")},
            {"name": "codes", "type": _map("long", "string")},
        ]
    },
}
#: A table that takes new fields from its rows (docs/tables.md, "From the feed").
FEED_TABLE = {"name": "feed", "schema": {"columns": [{"name": "id", "type": "int64"}]}, "on_new_fields": "add"}
#: 64 nullable int64 columns: a 3-byte ``{}`` row takes 512 bytes as columns.
WIDE_TABLE = {"name": "wide", "schema": {"columns": [{"name": f"c{k}", "type": "int64"} for k in range(64)]}}


@dataclass
class Env:
    """What a case's request may refer to: the running service and its directories."""

    harness: Harness
    landing: Path
    outside: Path
    memo: dict[str, Any] = field(default_factory=dict)


Payload = Any  # a JSON value, or a callable Env -> JSON value


@dataclass(frozen=True)
class Case:
    """One hostile request and what the service must answer."""

    group: str
    name: str
    expect: int
    #: Fragments (lower case) the error message must hold: what was wrong, what to do.
    wrong: str | None
    todo: str | None
    path: str = ORD
    json: Payload = None
    #: Raw body (bytes or Env -> bytes); when set, ``json`` is ignored.
    body: bytes | Callable[[Env], bytes] | None = None
    content_type: str | None = "application/json"
    headers: dict[str, str | bytes] = field(default_factory=dict)
    token: str = PRODUCER
    #: Sent without Content-Length (Transfer-Encoding: chunked), in 8 KiB pieces.
    chunked: bool = False
    #: Runs after seeding and before the "before" snapshot (e.g. an earlier accepted update).
    prepare: Callable[[Env], None] | None = None
    #: A replay of an earlier request: 202 with Idempotent-Replayed: true, nothing new.
    replayed: bool = False
    #: Why this status (shown in the report where it is a decision, not obvious).
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"


@dataclass
class Outcome:
    case: Case
    status: int
    message: str
    changes: list[str]
    problems: list[str]
    seconds: float

    @property
    def unchanged(self) -> bool:
        return not self.changes

    @property
    def passed(self) -> bool:
        return not self.problems


# ----------------------------------------------------------------------------- fixtures


def _orders_file(path: Path, **columns: Any) -> None:
    data = {"order_id": pa.array([1, 2], pa.int64()), "amount": [1.5, 2.5], "country": ["DE", "FR"]}
    data.update(columns)
    pq.write_table(pa.table(data), path)


def _make_files(landing: Path, outside: Path) -> None:
    outside.mkdir(parents=True, exist_ok=True)
    _orders_file(outside / "secret.parquet")
    (outside / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    _orders_file(landing / "good.parquet")
    os.link(landing / "good.parquet", landing / "hardlink.parquet")
    (landing / "sub").mkdir()
    _orders_file(landing / "sub" / "inner.parquet")
    _orders_file(landing / "wrong_type.parquet", order_id=pa.array(["a", "b"]))
    _orders_file(landing / "unknown_column.parquet", colour=pa.array(["red", "blue"]))
    _orders_file(landing / "null_id.parquet", order_id=pa.array([1, None], pa.int64()))
    _orders_file(landing / "nul_partition.parquet", country=pa.array(["DE", "F\x00R"]))
    (landing / "not_parquet.parquet").write_bytes(b"order_id,amount,country\n1,1.5,DE\n")
    (landing / "bad.csv").write_text("order_id,amount,country\nnot-a-number,1,DE\n", encoding="utf-8")
    (landing / "notes.txt").write_text("not a feed file\n", encoding="utf-8")
    os.symlink(outside / "secret.parquet", landing / "link_out.parquet")
    os.symlink("good.parquet", landing / "link_in.parquet")
    os.symlink(outside, landing / "link_dir")
    os.symlink("sub", landing / "linkdir_in")
    os.mkfifo(landing / "fifo.parquet")


def _seed(h: Harness) -> None:
    for table in (TYPED, WIDE_TABLE, NESTED_TABLE, FEED_TABLE):
        r = h.post("/v1/admin/tables", token=OPERATOR, json=table)
        assert r.status_code == 201, r.text
    for path, rows in ((ORD, [{"order_id": 1, "country": "DE"}]), (CLK, [{"url": "/seed", "n": 1}])):
        r = h.post(path, json={"rows": rows})
        assert r.status_code == 202, r.text
    h.wait_loaded("orders", 1)
    h.wait_loaded("clicks", 1)


_TEMPLATE: Path | None = None


def _seeded_data_dir() -> Path:
    """A data directory whose tables are registered and hold one loaded update, made once
    per process and copied for each case (a copy and a restart cost less than seeding)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        root = Path(tempfile.mkdtemp(prefix="hostile-template-"))
        atexit.register(shutil.rmtree, root, True)
        with Harness(root / "data", intake={"max_body_bytes": MAX_BODY_BYTES}) as h:
            _seed(h)
        _TEMPLATE = root / "data"
    return _TEMPLATE


def _on_loop(h: Harness, read: Callable[[], Any]) -> Any:
    """``read`` on the service's event loop, which owns its state (no HTTP round trip)."""
    return h.client.portal.call(read)


def _busy(h: Harness) -> bool:
    service = h.service

    def read() -> bool:
        return any(
            service.pending.count(name) or service.dispatcher.state(name).running for name in service.intake.tables
        )

    return _on_loop(h, read)


def _quiesce(h: Harness, timeout: float = 10.0) -> bool:
    """Every accepted update loaded (a wrongly accepted one then shows in Delta too);
    False if loading has not settled by the deadline (a load that keeps failing)."""
    deadline = time.monotonic() + timeout
    while _busy(h):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# ----------------------------------------------------------------------------- snapshot


def _delta_log_version(table_dir: Path) -> int:
    log = table_dir / "_delta_log"
    versions = [int(p.name.split(".")[0]) for p in log.glob("*.json")] if log.is_dir() else []
    return max(versions, default=-1)


def _tree(root: Path, files_only: bool = False) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` without following links: kind, size, inode, mtime, digest.

    ``files_only``: directories are not listed (the owned-files directory keeps one per
    table, made on first use).
    """
    out: dict[str, tuple[Any, ...]] = {}
    if not root.exists():
        return out
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(directory) / name
            info = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                out[rel] = ("file", info.st_size, info.st_ino, info.st_mtime_ns, digest)
            elif stat.S_ISDIR(info.st_mode):
                if not files_only:
                    out[rel] = ("dir",)
            else:
                out[rel] = ("special", stat.S_IFMT(info.st_mode), info.st_ino)
    return out


def snapshot(env: Env) -> dict[str, Any]:
    """Everything a request could change, as plain values (compared with ``==``)."""
    h = env.harness
    service = h.service
    state: dict[str, Any] = {}
    statuses = _on_loop(h, lambda: {name: service.status.table(name) for name in service.intake.tables})
    for name in sorted(statuses):
        status = statuses[name]
        for key in ("last_sequence", "last_loaded_sequence", "pending_updates", "pending_bytes", "delta_version"):
            state[f"table {name}: {key}"] = status[key]
        state[f"table {name}: Delta log version"] = _delta_log_version(h.settings.warehouse_path / name)
    state["tables"] = sorted(service.catalog.entries)
    state["WAL bytes"] = service.wal.size_bytes
    state["WAL records"] = service.wal.records_written
    state["Idempotency-Keys"] = len(service.idempotency)
    state["landing files"] = _tree(env.landing)
    state["files outside landing"] = _tree(env.outside)
    state["owned files"] = _tree(service.intake.owned_dir, files_only=True)
    return state


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            out.append(f"{key}: {', '.join(changed[:5])}")
        else:
            out.append(f"{key}: {old!r} -> {new!r}")
    return sorted(out)


# ----------------------------------------------------------------------------- running


def _body(case: Case, env: Env) -> bytes:
    if case.body is not None:
        return case.body(env) if callable(case.body) else case.body
    value = case.json(env) if callable(case.json) else case.json
    return json.dumps(value).encode()


def _pieces(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), 8192):
        yield body[start : start + 8192]


def send(case: Case, env: Env) -> Any:
    headers: dict[str, Any] = dict(case.headers)
    if case.content_type is not None:
        headers["Content-Type"] = case.content_type
    body = _body(case, env)
    content: Any = _pieces(body) if case.chunked else body
    return env.harness.post(case.path, token=case.token, content=content, headers=headers)


def _judge(case: Case, status: int, payload: Any, headers: Any) -> tuple[str, list[str]]:
    problems = []
    message = ""
    if status != case.expect:
        problems.append(f"status {status}, expected {case.expect}")
    if status >= 500:
        problems.append("server error")
    if case.expect >= 400:
        if not isinstance(payload, dict) or not isinstance(payload.get("message"), str) or "error" not in payload:
            problems.append(f"error body is not {{error, message}}: {str(payload)[:200]}")
        else:
            message = payload["message"]
            lowered = message.lower()
            for what, fragment in (("what was wrong", case.wrong), ("what to do", case.todo)):
                if fragment is not None and fragment.lower() not in lowered:
                    problems.append(f"message does not say {what} ({fragment!r})")
            if len(message) > MAX_MESSAGE_CHARS:
                problems.append(f"message is {len(message)} characters long (echoes the input)")
    if case.replayed and headers.get("idempotent-replayed") != "true":
        problems.append("no Idempotent-Replayed: true header")
    return message, problems


def run_case(case: Case, workdir: Path) -> Outcome:
    """The case against a fresh service under ``workdir`` (which must not exist yet)."""
    shutil.copytree(_seeded_data_dir(), workdir / "data", symlinks=True)
    with Harness(workdir / "data", intake={"max_body_bytes": MAX_BODY_BYTES}) as h:
        env = Env(h, h.settings.landing_path, workdir / "outside")
        _make_files(env.landing, env.outside)
        if case.prepare is not None:
            case.prepare(env)
        assert _quiesce(h), "the service did not settle before the request"
        before = snapshot(env)
        began = time.perf_counter()
        try:
            response = send(case, env)
            status, headers = response.status_code, response.headers
            try:
                payload = response.json()
            except ValueError:
                payload = response.text[:200]
        except Exception:  # the TestClient re-raises what the app raised: an unhandled 500
            status, headers, payload = 500, {}, {"error": "unhandled", "message": traceback.format_exc(limit=3)}
        seconds = time.perf_counter() - began
        settled = _quiesce(h)
        changes = differences(before, snapshot(env))
        if not settled:
            changes.append("loading did not settle: an accepted update keeps failing to load")
    message, problems = _judge(case, status, payload, headers)
    if changes:
        problems.append("changed: " + "; ".join(changes))
    return Outcome(case, status, message, changes, problems, seconds)
