"""A load worker process whose service is gone ends quietly, at whatever step it learns it.

The service may be killed (kill -9) while a worker starts, connects, runs a job or waits:
the worker's next read or write of its socket then fails, and it must exit without a
traceback in the log the two share (a test fails on a traceback it did not inject).
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import subprocess
import sys

import pytest

from loader.loading.workers.messages import WorkerSetup
from testing.server_process import refusing_port


def _worker(setup: WorkerSetup | None) -> subprocess.CompletedProcess[str]:
    """Start a worker on one end of a socket pair, send ``setup`` (or nothing), close the
    other end at once, as a killed service does, and wait for the worker to end."""
    ours, theirs = socket.socketpair()
    with ours:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loader.loading.workers.process", "--fd", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stderr=subprocess.PIPE,
            text=True,
        )
        theirs.close()
        if setup is not None:
            data = pickle.dumps(setup)
            ours.sendall(struct.pack("!i", len(data)) + data)  # multiprocessing.connection's framing
    _, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


@pytest.mark.parametrize("step", ["before its set-up", "while it connects to Spark"])
def test_a_worker_whose_service_died_exits_0_without_a_traceback(step: str) -> None:
    setup = None
    with refusing_port() as port:
        if step == "while it connects to Spark":  # (nobody answers: its failure has no one to go to)
            setup = WorkerSetup(
                index=0,
                warehouse="/nonexistent",
                writer="delta-rs",
                lean=(),
                url=f"sc://127.0.0.1:{port}",
                connect_timeout=0.3,
                parent_pid=os.getpid(),
                log_level=logging.WARNING,
            )
        done = _worker(setup)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
