"""The outside reader of the freshness benchmark, run as its own process (``python -m ... SPEC.json``).

Polls every table's commit log (``testing.commit_logs``) every ``interval`` seconds and
records when it first saw each commit and which files it added, reading no data file
meanwhile (a few stat-like calls per table and round). Once the control file names every
expected update id it drains: it reads the committed files' update ids (a bounded time per
round, so the polling resolution holds) until every one is visible or the deadline passes,
then writes per table its commits and, per update id, its rows, first commit and commits.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import child
from testing.commit_logs import CommitLogFollower, ObservedCommit, follower, value_counts
from testing.observed_staleness import percentile

#: Seconds of file reading per round while draining.
READ_BUDGET = 0.05


class Reader:
    def __init__(self, kind: str, tables: dict[str, str], column: str) -> None:
        self.followers: dict[str, CommitLogFollower] = {
            name: follower(kind, Path(root), time.time) for name, root in tables.items()
        }
        self.column = column
        self.commits: dict[str, list[ObservedCommit]] = defaultdict(list)
        self.unread: list[tuple[str, int, str]] = []  # (table, version, path)
        #: Per table: uid -> versions holding it; removed files; rows per uid of each file read.
        self.versions: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.removed: dict[str, set[str]] = defaultdict(set)
        self.file_counts: dict[str, dict[str, Counter[int]]] = defaultdict(dict)
        self.round_seconds: list[float] = []

    def poll(self) -> None:
        began = time.perf_counter()
        for name, log in self.followers.items():
            for commit in log.poll():
                self.commits[name].append(commit)
                self.unread.extend((name, commit.version, path) for path in commit.added)
                self.removed[name].update(commit.removed)
        self.round_seconds.append(time.perf_counter() - began)

    def read(self, budget: float | None) -> None:
        """Read the update ids of committed files, for at most ``budget`` seconds (None: all)."""
        began = time.perf_counter()
        while self.unread and (budget is None or time.perf_counter() - began < budget):
            name, version, path = self.unread.pop()
            self.file_counts[name][path] = counts = value_counts(path, self.column)
            for uid in counts:
                self.versions[name][uid].append(version)

    def result(self) -> dict[str, Any]:
        tables: dict[str, Any] = {}
        for name in self.followers:
            rows: Counter[int] = Counter()
            for path, counts in self.file_counts[name].items():
                if path not in self.removed[name]:
                    rows.update(counts)
            tables[name] = {
                "commits": [
                    [c.version, c.seen, c.previous_check, len(c.added), len(c.removed)] for c in self.commits[name]
                ],
                "updates": [
                    [uid, rows.get(uid, 0), min(versions), len(set(versions))]
                    for uid, versions in sorted(self.versions[name].items())
                ],
                "rows": sum(rows.values()),
                "files": len(self.file_counts[name]) - len(self.removed[name]),
            }
        return {"tables": tables}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    interval = float(spec["interval"])
    control = Path(spec["control"])
    reader = Reader(spec["kind"], spec["tables"], spec["column"])
    cpu0, started = time.process_time(), time.time()
    reader.poll()  # what is already there (the priming commits)
    Path(spec["ready"]).write_text(json.dumps({"started": started}), encoding="utf-8")
    expected: dict[str, set[int]] | None = None
    deadline = drain_started = drained_at = None
    measured_rounds = 0
    cpu_measuring = 0.0
    while True:
        tick = time.time()
        reader.poll()
        if expected is None:
            if control.exists():
                order = json.loads(control.read_text(encoding="utf-8"))
                expected = {name: set(uids) for name, uids in order["expected"].items()}
                deadline = float(order["deadline"])
                drain_started = time.time()
                measured_rounds = len(reader.round_seconds)
                cpu_measuring = time.process_time() - cpu0
        else:
            reader.read(READ_BUDGET)
            if not reader.unread and all(uids <= reader.versions[name].keys() for name, uids in expected.items()):
                drained_at = time.time()
                break
            if time.time() > deadline:  # type: ignore[operator]
                break
        pause = tick + interval - time.time()
        if pause > 0:
            time.sleep(pause)
    measuring = reader.round_seconds[:measured_rounds]
    reader.read(None)
    out = reader.result()
    out.update(
        {
            "started": started,
            "interval": interval,
            "poll_rounds": {
                "rounds": len(measuring),
                "p50_seconds": percentile(measuring, 0.5),
                "p99_seconds": percentile(measuring, 0.99),
            },
            "drain_started": drain_started,
            "drained": drained_at is not None,
            "drain_seconds": (drained_at or time.time()) - drain_started if drain_started else None,
            "cpu_seconds": time.process_time() - cpu0,
            "cpu_seconds_before_drain": cpu_measuring,
        }
    )
    child.write(spec["out"], out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
