"""Where a test run's time went: ``python -m testing.timeline <dir>`` reads what the test
processes of a run with ``TESTS_TIMELINE=<dir>`` wrote (tests/conftest.py) and prints
each process's busy time and idle tail, and the files that took the most (docs/testing.md)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def summary(directory: Path, top: int = 25) -> str:
    records = [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]
    if not records:
        return f"no timeline records in {directory}"
    start = min(r["start"] for r in records)
    end = max(r["end"] for r in records)
    lines = [f"wall time of the tests: {end - start:.0f} s (collection and start-up before the first test excluded)"]
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_worker[r["worker"]].append(r)
    for worker, mine in sorted(by_worker.items()):
        busy = sum(r["end"] - r["start"] for r in mine)
        last = max(r["end"] for r in mine)
        done, idle = last - start, end - last
        lines.append(f"{worker}: {len(mine)} tests, busy {busy:.0f} s, done {done:.0f} s in, idle {idle:.0f} s")
    by_file: dict[str, float] = defaultdict(float)
    for r in records:
        by_file[r["test"].split("::")[0]] += r["end"] - r["start"]
    total = sum(by_file.values())
    lines.append(f"\n{'file':70} {'seconds':>8} {'share':>6}")
    for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{name:70} {seconds:8.1f} {seconds / total:6.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
