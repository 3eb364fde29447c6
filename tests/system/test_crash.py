"""Kill -9 at every step where durability or exactly-once is decided, and restart.

The short version of the crash-consistency trial (testing/crash_trial.py; the long one is
``trials/crash.py``): one data directory lives through one SIGKILL of each
kind, with producers submitting all along and retrying what was left unanswered; a table
is given a CHECK constraint from outside while the loader writes to it, and poison
updates that break it arrive among the good ones. In the end each Delta table, read back
with deltalake and DuckDB, holds every acknowledged update but the poison ones (each in
quarantine, alone) exactly once (the latest table: each key's newest acknowledged value, once), and the
join view over two of them equals the join recomputed from them. The
WAL's own failpoints are also checked alone, without a server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from loader.core.updates import Update, WalRecord
from loader.durability.wal import WriteAheadLog
from testing.crash_trial import EXTERNAL_RECOVERY, CrashTrial
from tests.spark_fixtures import ConnectEndpoint

#: The lives of the server, each ended by this kill (seeded counts and delays). Loads run in
#: worker processes (the default mode): the points around a Delta commit are theirs.
KILLS = (
    # A worker's MERGE into the latest table committed, the service has not noted it: the
    # replay must be skipped (the same notice as an append's, load.after-commit; the pool's
    # tests kill there for appends).
    "load.upsert.after-merge",
    "wal.torn-write",  # half a record on disk: the restart cuts the torn tail
    "recovery.replay",  # killed while replaying the WAL: the next start replays it all again
    "intake.after-wal",  # durable but unanswered: the retry must get the first answer
    "recovery.after-spill-reset",  # spill directory emptied, nothing replayed yet
    "spill.write",  # mid-write of a spill segment: the restart meets the killed life's spill files
    "worker:external",  # a worker process killed from outside, mid-batch or idle
    # a latest table's deletion-vector upsert killed a moment after it began (files written,
    # committed or not)
    "worker:load.upsert.mid-merge",
    EXTERNAL_RECOVERY,  # the whole process group, at a random moment before /readyz
)
#: Not a life of its own here (the suite is near its budget): the compaction of the latest
#: table killed before or after its commit (compact.latest.*) is killed in a subprocess by
#: tests/loader/loading/test_upsert_dv.py; the long trial draws both. Nor wal.after-write,
#: written and unanswered, is intake.after-wal's case for the service and is killed at
#: exactly that point by test_a_wal_killed_mid_group_keeps_whole_calls_only below; the long
#: trial (python -m trials.crash) still draws it among every failpoint.
#: Nor worker:load.group.between-commits: whether the first worker gets two multi-table jobs
#: within the life's four minutes is up to the schedule (on a busy machine it often did
#: not); tests/loader/loading/workers/test_pool.py kills a worker there in a group job it
#: is given (the same sink code as in the service's own process; what a restart then sees,
#: one table's commit landed and not noted, is load.after-commit's case per table), and the
#: long trial draws it, for the service and for workers.
#: The classic mode (the Spark driver in the service process): its load points are the service's.
#: (A worker dying at load.after-publish: tests/system/test_connect_mode.py and the pool's tests.)
CLASSIC_KILLS = ("load.after-publish",)
#: What the alteration from outside and its poison updates log on purpose: each poison
#: update's failed attempt and quarantine, and a load that met the alteration's commit.
OUTSIDE_ALTERATION = (
    r"violates CHECK constraint no_negative_ids \(id >= 0\)",
    r"TableChanged: table 'alpha' got a new protocol or metadata from another writer",
)


#: Seconds each producer thread rests between requests: a fifth of the long trial's rate,
#: still a burst at every kill, and a final backlog (poison bisections included) that loads
#: in seconds rather than minutes.
PACE = 0.1
#: Pending payload bytes kept in memory: two or three updates, so a few updates waiting for
#: a load spill at this pace however fast the machine loads (with the long trial's 64 KiB, a
#: quiet machine kept up and no restart met spill files), and ``spill.write`` is reached.
MEMORY_BUDGET = 2048


@pytest.fixture
def trial(tmp_path: Path, connect_server: ConnectEndpoint) -> Iterator[CrashTrial]:
    """Over the suite's Spark Connect server: a life's restart skips a JVM start (the long
    trial, python -m trials.crash, has each life start the service's own, killed with it)."""
    trial = CrashTrial(
        tmp_path, seed=20240607, spark_remote=connect_server.url, pace=PACE, memory_budget=MEMORY_BUDGET, log=print
    )
    yield trial
    trial.close()


@pytest.fixture
def classic_trial(tmp_path: Path, connect_server: ConnectEndpoint) -> Iterator[CrashTrial]:
    """The killed life runs the Spark driver in the service; the final start, whose loads
    the verdict waits for, runs over the suite's Spark Connect server (a JVM start and a
    local Spark's loads less; a data directory changing modes between starts is also what
    an operator may do)."""
    trial = CrashTrial(
        tmp_path,
        seed=20261124,
        mode="classic",
        final_spark_remote=connect_server.url,
        pace=PACE,
        memory_budget=MEMORY_BUDGET,
        log=print,
    )
    yield trial
    trial.close()


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.allow_errors(
    r"failed \(attempt \d\): load worker \d \(pid \d+\) ended mid-answer, exit code -9",
    *OUTSIDE_ALTERATION,
)
def test_sigkill_at_every_step_loses_and_duplicates_nothing(trial: CrashTrial) -> None:
    trial.run(KILLS)
    verdict = trial.finish()
    print(dict(verdict.hits()), [(t.table, t.acked_rows, t.loaded_rows, t.lost, t.duplicated) for t in verdict.tables])

    assert verdict.problems() == []
    assert verdict.kills == len(KILLS)
    assert verdict.lost == 0 and verdict.duplicated == 0
    assert verdict.view.ok and verdict.view.expected_rows > 0, verdict.view  # the join view, through every kill
    planned = [life.plan for life in verdict.lives[:-1]]
    assert [life.hit for life in verdict.lives[:-1]] == planned, "a failpoint was not reached"
    assert verdict.lives[-1].hit.startswith("kill: ") and "not reached" not in verdict.lives[-1].hit
    assert verdict.acked_updates >= 150
    # The requests killed between their WAL write and their 202 were durable: their retries
    # got the first answer back rather than a second append.
    assert verdict.producer.replayed >= 1
    assert verdict.acked_file_updates >= 1, "no acknowledged update named a landing file"
    assert verdict.acked_arrow_updates >= 1, "no acknowledged update was an Arrow IPC stream"
    # A table altered from outside mid-trial: its poison updates, each in quarantine alone.
    assert verdict.poison_updates >= 1 and verdict.poison_not_quarantined == verdict.good_quarantined == 0
    assert verdict.restarts_met_spill_files >= 1, "no restart met spill files"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.allow_errors(
    *OUTSIDE_ALTERATION,
    # The driver is in the service: Spark logs the job its rule check failed (a poison update).
    r"ERROR TaskSetManager: Task \d+ in stage [\d.]+ failed \d+ times?; aborting job",
    r"ERROR (Utils: Aborting task"
    r"|FileFormatWriter: (Job: \S+, Task: \S+, Task attempt \S+ aborted\.|Aborting job \S+\.)"
    r"|Executor: Exception in task [\d.]+ in stage [\d.]+ \(TID \d+\))$",
    # The killed service's JVM shuts down (PR_SET_PDEATHSIG) while a task of the load is being
    # launched: its executor refuses the task as it stops, or once its pool has stopped.
    r"ERROR Executor: Executor launch task task [\d.]+ in stage [\d.]+ \(TID \d+\) failed, "
    r"reason: Task \S+ rejected from \S+\[(Shutting down|Terminated)",
)
def test_sigkill_of_a_classic_mode_service_mid_load_loses_and_duplicates_nothing(classic_trial: CrashTrial) -> None:
    classic_trial.run(CLASSIC_KILLS)
    verdict = classic_trial.finish()
    assert verdict.problems() == []
    assert [life.hit for life in verdict.lives] == list(CLASSIC_KILLS), "a failpoint was not reached"
    assert verdict.lost == 0 and verdict.duplicated == 0


#: Appends three calls of two records each (one with an Idempotency-Key), one call at a time.
WAL_WRITER = """
import sys
import pyarrow as pa
from loader.core.updates import Update, WalRecord
from loader.durability.wal import WriteAheadLog

wal = WriteAheadLog(sys.argv[1]).open()
rows = pa.table({"id": list(range(50))})
for seq in (1, 2, 3):
    wal.append_sync(
        [
            WalRecord(Update("t", seq, float(seq), rows), f"key-{seq}", "hash", {"seq": seq}),
            WalRecord(Update("u", seq, float(seq), rows)),
        ]
    )
"""


@pytest.mark.parametrize(
    ("point", "calls_left", "torn"),
    [
        ("wal.torn-write=2", 1, True),  # half of the 2nd call on disk: cut, the 1st call stays
        ("wal.after-write=2", 2, False),  # the 2nd call written, never fsynced: still whole
    ],
)
def test_a_wal_killed_mid_group_keeps_whole_calls_only(tmp_path: Path, point: str, calls_left: int, torn: bool) -> None:
    env = {**os.environ, "LOADER_FAILPOINTS": point}
    done = subprocess.run([sys.executable, "-c", WAL_WRITER, str(tmp_path)], env=env, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL

    wal = WriteAheadLog(tmp_path)
    try:
        records = list(wal.replay())
        assert (wal.last_repair is not None) == torn, wal.last_repair
        assert [(r.update.table, r.update.seq) for r in records] == [
            (table, seq) for seq in range(1, calls_left + 1) for table in ("t", "u")
        ]
        assert [r.idempotency_key for r in records[::2]] == [f"key-{s}" for s in range(1, calls_left + 1)]
        wal.append_sync([WalRecord(Update("t", 10, 10.0, pa.table({"id": [7]})))])  # the cut log takes appends
    finally:
        wal.close()
    with WriteAheadLog(tmp_path) as again:
        assert [r.update.seq for r in again.replay()][-1] == 10
        assert again.last_repair is None
