"""A process of the loader with busy gRPC channels (the Spark Connect client) starts child
processes the way the loader starts its Connect server (preexec_fn), and every child
reaches exec: gRPC's fork handlers are off (loader/__init__.py, grpc/grpc#43055). Without
the setting about 1 child in 40 aborted on this machine (SIGABRT, "epoll_wait error: Bad
file descriptor"), so 300 children catch a regression nearly always and never fail
when it is fixed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILDREN = 300

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, subprocess, sys, threading, time
    from concurrent import futures

    def serve(port):
        import grpc
        handler = grpc.method_handlers_generic_handler(
            "svc", {"echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request)}
        )
        server = grpc.server(futures.ThreadPoolExecutor(4))
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        server.wait_for_termination()

    if __name__ == "__main__":
        import loader  # first, as in the service: before grpc is imported
        import grpc
        from testing.server_process import free_port

        port = free_port()
        server = multiprocessing.get_context("spawn").Process(target=serve, args=(port,), daemon=True)
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        echo = channel.unary_unary("/svc/echo")
        stop = threading.Event()

        def busy():
            while not stop.is_set():
                try:
                    echo(b"x", timeout=5)
                except grpc.RpcError:
                    pass

        for _ in range(2):
            threading.Thread(target=busy, daemon=True).start()
        codes = [
            subprocess.run(["true"], stderr=subprocess.DEVNULL, preexec_fn=os.setpgrp).returncode
            for _ in range(int(sys.argv[1]))
        ]
        stop.set()
        server.terminate()
        print(sum(code != 0 for code in codes), sorted(set(codes)))
    """
)


def test_children_of_a_process_with_busy_grpc_channels_all_reach_exec(tmp_path: Path) -> None:
    script = tmp_path / "fork_children.py"
    script.write_text(SCRIPT, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script), str(CHILDREN)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    failed, codes = result.stdout.split(maxsplit=1)
    assert failed == "0", f"{failed} of {CHILDREN} children did not reach exec (exit codes {codes})"
