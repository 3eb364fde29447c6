"""Poison updates among good ones, against a real ``loader serve`` whose tables another tool
alters while it loads: the second part of the hostile-input trial (``trials/hostile_input.py``
runs many rounds; ``tests/system/test_poison_update.py`` one).

The first part of that trial sends requests the service must refuse. These are requests it
must accept, and then cannot load: the promise is that a 202 is loaded exactly once, and an
update that cannot load holds back only itself. Before the first round, another tool (the
``deltalake`` package, from outside the service) gives both tables a CHECK constraint while
the loader writes to them. Each round then pauses the tables, sends a seeded mix of good and
poison updates, and resumes them, so that all of them meet in one batch:

- ``feed``, an append table: a poison update is a ``rule`` one (a row among good rows that
  breaks ``id >= 0``) or a ``file`` one (an update naming a landing file, whose owned copy is
  damaged after the 202 so that Spark cannot read it);
- ``quotes``, a latest table without ``order_by``: a poison update sets a key's price to a
  value that breaks ``px > 0``; the values that arrive after it for the keys it holds must
  wait (they may not overwrite what it would have written) while the other keys load.

Verified after each round: exactly the poison updates are in quarantine, each alone; every
good row of ``feed`` is in the table once; every key of ``quotes`` holds its newest value not
after a poison of that key. Then the operator discards the poison updates, and the values
that waited load: every key holds its newest good value.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from testing.server_process import ServerProcess, free_port, write_config
from testing.tables import read_delta

TOKEN = "poison-trial-operator-token-01"
FEED, QUOTES = "feed", "quotes"
TABLES = [
    {
        "name": FEED,
        "schema": {"columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "note", "type": "string"}]},
    },
    {
        "name": QUOTES,
        "mode": "latest",
        "key": ["sym"],
        "schema": {
            "columns": [{"name": "sym", "type": "string", "nullable": False}, {"name": "px", "type": "float64"}]
        },
    },
]
#: What the other tool adds to each table while the loader writes to it.
CONSTRAINTS = {FEED: {"no_negative_ids": "id >= 0"}, QUOTES: {"px_positive": "px > 0"}}
SYMBOLS = ("a", "b", "c", "d", "e")
#: The ERROR lines a round causes on purpose (each failed attempt of a bisection, each quarantine).
EXPECTED_ERRORS = (r"loading (feed|quotes) \(updates \d+\.\.\d+\) (failed|was named)",)


@dataclass
class Sent:
    table: str
    seq: int
    rows: list[dict[str, Any]]
    #: "" for a good update, else how it is poisoned: "rule" or "file".
    poison: str = ""


@dataclass
class RoundResult:
    index: int
    good: int
    poison: int
    poison_kinds: Counter[str]
    #: Poison updates not in quarantine alone; good updates in quarantine.
    poison_missed: int
    good_quarantined: int
    #: feed: good rows missing from the table, extra copies, poison rows in it.
    lost: int
    duplicated: int
    poison_loaded: int
    #: quotes: keys not holding the value they must (before and after the discards).
    wrong_keys_held: int
    wrong_keys_released: int
    #: Values that waited behind a poisoned key and loaded once it was discarded.
    held_values: int
    seconds_to_settle: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not any(
            (
                self.poison_missed,
                self.good_quarantined,
                self.lost,
                self.duplicated,
                self.poison_loaded,
                self.wrong_keys_held,
                self.wrong_keys_released,
            )
        )


def poison_config(workdir: Path, port: int, spark_remote: str = "") -> Path:
    """Fast retries (a bisection is a few failed attempts each), two load workers; over the
    Spark Connect server at ``spark_remote`` when given, else the service's own."""
    return write_config(
        workdir / "loader.toml",
        {
            "port": port,
            "data_dir": str(workdir / "data"),
            "workers": 2,
            "spark": {"master": "local[2]", **({"remote": spark_remote} if spark_remote else {})},
            "loading": {"max_attempts": 2, "retry_base_seconds": 0.05, "retry_max_seconds": 0.2},
            "maintenance": {"compact_seconds": 0, "vacuum_seconds": 0},
            "auth_tokens": [{"name": "ops", "token": TOKEN, "role": "operator"}],
            "tables": TABLES,
        },
    )


class PoisonTrial:
    """A server, the outside alterations, and seeded rounds against them."""

    def __init__(
        self, workdir: Path, seed: int, log: Callable[[str], None] | None = None, spark_remote: str = ""
    ) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.log = log or (lambda message: None)
        port = free_port()
        self.server = ServerProcess(workdir, poison_config(workdir, port, spark_remote), port, TOKEN)
        self.data = workdir / "data"
        self.landing = self.data / "landing"
        self.owned = self.data / "landed" / FEED
        self.next_id = 0
        self.next_key = 0
        self.sent: list[Sent] = []
        self.results: list[RoundResult] = []
        #: Poison updates the operator discarded (their rows never load).
        self._discarded: set[tuple[str, int]] = set()

    # -- the server and the alterations -----------------------------------------------------
    def start(self, timeout: float = 300.0) -> None:
        self.server.start()
        if not self.server.wait_ready(timeout):
            raise RuntimeError(f"the service ended while starting:\n{self.server.log_tail()}")
        self.landing.mkdir(parents=True, exist_ok=True)
        with self.server.client(timeout=60) as http:
            # Something loaded first: the other tool alters tables the loader already writes.
            for table, rows in (
                (FEED, [{"id": self._id(), "note": "first"}]),
                (QUOTES, [{"sym": s, "px": 1.0} for s in SYMBOLS]),
            ):
                self.sent.append(Sent(table, self._post(http, table, rows), rows))
            self._settle(http)
        for table, constraint in CONSTRAINTS.items():
            self._alter(table, constraint)

    def close(self) -> None:
        if self.server.proc is not None and self.server.alive:
            self.server.terminate()

    def _alter(self, table: str, constraint: dict[str, str]) -> None:
        """deltalake adds the constraint in a commit of its own; one that meets a commit of the
        loader's is retried on the table as it now is."""
        for attempt in range(50):
            try:
                DeltaTable(str(self.data / "warehouse" / table)).alter.add_constraint(constraint)
                self.log(f"outside alteration: {table} now has CHECK {constraint}")
                return
            except Exception:
                if attempt == 49:
                    raise
                time.sleep(0.05)

    # -- one round --------------------------------------------------------------------------
    def round(self) -> RoundResult:
        rng = self.rng
        index = len(self.results) + 1
        before = set(self._quarantined_seqs())
        started = len(self.sent)
        with self.server.client(timeout=60) as http:
            for table in (FEED, QUOTES):
                self._expect(http.post(f"/v1/admin/tables/{table}/pause"), 200)
            count = rng.randint(6, 14)
            poison_at = set(rng.sample(range(count), rng.randint(1, max(1, count // 4))))
            for k in range(count):
                kind = rng.choice(("rule", "file")) if k in poison_at else ""
                self._feed_update(http, kind, as_file=kind == "file" or rng.random() < 0.2)
            # quotes: good values of other keys, then the poison holding two keys last in the
            # batch (a later value of one of its keys would replace it in the queue, and a value
            # it replaced would go with it to quarantine: docs/latest-tables.md).
            poisoned = rng.sample(SYMBOLS, 2)
            others = [s for s in SYMBOLS if s not in poisoned]
            for _ in range(rng.randint(1, 3)):
                rows = [{"sym": s, "px": round(rng.uniform(1, 99), 2)} for s in rng.sample(others, 2)]
                self.sent.append(Sent(QUOTES, self._post(http, QUOTES, rows), rows))
            rows = [{"sym": poisoned[0], "px": -1.0}, {"sym": poisoned[1], "px": 5.0}]
            self.sent.append(Sent(QUOTES, self._post(http, QUOTES, rows), rows, "rule"))
            began = time.monotonic()
            for table in (FEED, QUOTES):
                self._expect(http.post(f"/v1/admin/tables/{table}/resume"), 200)
            poison = {(s.table, s.seq) for s in self.sent[started:] if s.poison}
            self._settle(http, until_quarantined=poison)
            settled = time.monotonic() - began
            # Values that arrive for the poisoned keys now must wait; the other keys load.
            for _ in range(rng.randint(2, 4)):
                rows = [{"sym": s, "px": round(rng.uniform(1, 99), 2)} for s in rng.sample(SYMBOLS, 3)]
                self.sent.append(Sent(QUOTES, self._post(http, QUOTES, rows), rows))
            self._settle(http)
            mine = self.sent[started:]
            quarantined = set(self._quarantined_seqs(http)) - before
            result = RoundResult(
                index=index,
                good=sum(1 for s in mine if not s.poison),
                poison=len(poison),
                poison_kinds=Counter(s.poison for s in mine if s.poison),
                poison_missed=len(poison - quarantined),
                good_quarantined=len(quarantined - poison),
                lost=0,
                duplicated=0,
                poison_loaded=0,
                wrong_keys_held=self._wrong_keys(released=False),
                wrong_keys_released=0,
                held_values=sum(1 for s in mine if s.table == QUOTES and self._waited(s, mine)),
                seconds_to_settle=settled,
            )
            self._check_feed(result)
            for table, seq in sorted(poison):  # the operator discards them: what waited loads
                self._expect(http.delete(f"/v1/admin/quarantine/{table}/{seq}"), 200)
                self._discarded.add((table, seq))
            self._settle(http)
            result.wrong_keys_released = self._wrong_keys(released=True)
        self.results.append(result)
        self.log(
            f"round {index}: {result.good} good, {result.poison} poison {dict(result.poison_kinds)}, "
            f"settled in {settled:.1f} s, {'ok' if result.ok else 'PROBLEMS'}"
        )
        return result

    def _feed_update(self, http: httpx.Client, poison: str, as_file: bool) -> None:
        rows = [{"id": self._id(), "note": f"good {self.next_id}"} for _ in range(self.rng.randint(1, 4))]
        if poison == "rule":
            rows.insert(self.rng.randint(0, len(rows)), {"id": -self._id(), "note": "breaks id >= 0"})
        if not as_file:
            self.sent.append(Sent(FEED, self._post(http, FEED, rows), rows, poison))
            return
        name = f"update-{self._key()}.parquet"
        pq.write_table(
            pa.table({"id": pa.array([r["id"] for r in rows], pa.int64()), "note": [r["note"] for r in rows]}),
            self.landing / name,
        )
        before = set(self.owned.iterdir()) if self.owned.exists() else set()
        seq = self._post(http, FEED, None, files=[name])
        if poison == "file":
            [copy] = set(self.owned.iterdir()) - before
            copy.write_bytes(b"PAR1 damaged after its 202 PAR1")
        self.sent.append(Sent(FEED, seq, rows, poison))

    # -- checks -----------------------------------------------------------------------------
    def _check_feed(self, result: RoundResult) -> None:
        """feed, from the start: every good row once, no poison row (a ``file`` poison's
        rows are good rows, and stay out: its update is quarantined whole)."""
        loaded = Counter(read_delta(self.data / "warehouse" / FEED).column("id").to_pylist())
        expected = Counter(r["id"] for s in self.sent if s.table == FEED and not s.poison for r in s.rows)
        poison_ids = {r["id"] for s in self.sent if s.table == FEED and s.poison for r in s.rows}
        result.lost = sum((expected - loaded).values())
        result.duplicated = sum(n - 1 for i, n in loaded.items() if n > 1)
        result.poison_loaded = sum(n for i, n in loaded.items() if i in poison_ids)

    def _wrong_keys(self, released: bool) -> int:
        """Keys of quotes not holding what they must: the newest value among the good updates
        (``released``: after the discards), or (while a poison is quarantined) the newest
        that arrived before the first poison of its key that is still in quarantine."""
        held = {r["sym"]: r["px"] for r in read_delta(self.data / "warehouse" / QUOTES).to_pylist()}
        wrong = 0
        for sym in SYMBOLS:
            must: float | None = None
            for sent in (s for s in self.sent if s.table == QUOTES):
                mine = [r for r in sent.rows if r["sym"] == sym]
                if sent.poison and not released and (QUOTES, sent.seq) not in self._discarded:
                    if mine:
                        break  # every key of a quarantined update: the values after it wait
                    continue
                if sent.poison:
                    continue  # discarded: none of its rows loads
                if mine:
                    must = mine[-1]["px"]
            if held.get(sym) != must:
                self.log(
                    f"quotes key {sym!r} holds {held.get(sym)}, not {must} ({'after' if released else 'before'} "
                    "the discards)"
                )
                wrong += 1
        return wrong

    @staticmethod
    def _waited(sent: Sent, round_sent: list[Sent]) -> bool:
        """A good value of quotes that arrived after a poison of its key in the same round."""
        if sent.poison:
            return False
        for other in round_sent:
            if other is sent:
                return False
            if other.table == QUOTES and other.poison:
                poisoned = {r["sym"] for r in other.rows}
                if poisoned & {r["sym"] for r in sent.rows}:
                    return True
        return False

    # -- plumbing ---------------------------------------------------------------------------
    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _key(self) -> int:
        self.next_key += 1
        return self.next_key

    def _post(
        self, http: httpx.Client, table: str, rows: list[dict[str, Any]] | None, files: list[str] | None = None
    ) -> int:
        body = {"files": files} if files is not None else {"rows": rows}
        r = http.post(f"/v1/tables/{table}/updates", json=body, headers={"Idempotency-Key": f"u-{self._key()}"})
        self._expect(r, 202)
        return int(r.json()["updates"][0]["sequence"])

    def _expect(self, answer: httpx.Response, status: int) -> None:
        if answer.status_code != status:
            raise AssertionError(
                f"{answer.request.method} {answer.request.url.path}: {answer.status_code} {answer.text[:500]} "
                f"(expected {status})"
            )

    def _quarantined_seqs(self, http: httpx.Client | None = None) -> list[tuple[str, int]]:
        def read(client: httpx.Client) -> list[tuple[str, int]]:
            entries = client.get("/v1/admin/quarantine").json()["batches"]
            return [
                (e["table"], seq)
                for e in entries
                if not e.get("resolved")
                for seq in range(e["first_sequence"], e["last_sequence"] + 1)
            ]

        if http is not None:
            return read(http)
        with self.server.client(timeout=60) as client:
            return read(client)

    def _settle(
        self, http: httpx.Client, until_quarantined: set[tuple[str, int]] = frozenset(), timeout: float = 240.0
    ) -> None:
        """Until every table is idle with nothing pending but what waits behind a quarantined
        key, and ``until_quarantined`` is in quarantine."""
        deadline = time.monotonic() + timeout
        while True:
            tables = {t["name"]: t for t in http.get("/v1/tables").json()["tables"]}
            idle = all(not t["running"] and t["pending_updates"] == 0 for t in tables.values())
            if idle and until_quarantined <= set(self._quarantined_seqs(http)):
                return
            if time.monotonic() > deadline or not self.server.alive:
                brief = {
                    n: {k: t[k] for k in ("pending_updates", "running", "last_loaded_sequence")}
                    for n, t in tables.items()
                }
                raise AssertionError(
                    f"not settled after {timeout:.0f} s: {brief}; waiting for {sorted(until_quarantined)} in "
                    f"quarantine, which holds {sorted(self._quarantined_seqs(http))}\n{self.server.log_tail()}"
                )
            time.sleep(0.2)
