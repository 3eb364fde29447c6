"""The service in the foreground of a terminal or a supervisor: started, served and stopped
by the command itself, so that each event is one line and the exit status means something.

Why not ``uvicorn.run`` with the app's lifespan: uvicorn reports an error raised at start
with the lifespan's whole stack (about 60 lines before "WAL directory ... is in use"),
binds its port only after the service has opened the WAL and started Spark, and after a
stop on SIGINT raises the signal again, so a clean stop on Ctrl-C ended with status 130 (or
with a ``KeyboardInterrupt`` and a ``CancelledError`` stack). Here the port is bound first,
the service is started through ``LoaderApp.start_service`` (uvicorn runs with the lifespan
off), and SIGINT and SIGTERM, whether sent to the whole process group (a terminal's Ctrl-C)
or to this process alone, are handled the same way:

- during start-up: noted, and the service stops as soon as its start has finished (a start
  is not cut off half-way: recovery runs on threads that cannot be cancelled);
- while serving: what ``before_stop`` stops first (the demo producer), then intake closes,
  running loads finish and the WAL is closed; one line says the stop began and one that it
  ended; exit status 0;
- a second signal: exit at once (status 1), as a crash would; nothing acknowledged is lost,
  the WAL replays it at the next start.

Exit statuses: 0 after a clean stop; 1 when loading could not start or the stop failed; 2
when the service could not start (the error's one line says what to do).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Generator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import FrameType

import uvicorn

from api.acceptors.gateway import Gateway
from api.app import LoaderApp
from loader.config import Settings
from loader.core.errors import StartError
from loader.service import LoaderService

log = logging.getLogger("loader.serve")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds open HTTP connections get to finish once a stop began.
GRACEFUL_HTTP_SECONDS = 10.0


class PortInUse(StartError):
    pass


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the runner's handlers set ``should_exit``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, before anything else starts: a port in use is a one-line error
    at once, not after the WAL was opened and Spark started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Every accepted connection inherits it (Linux): uvicorn on uvloop leaves Nagle's
    # algorithm on, and a response it writes in two parts (head, then body) then waits for
    # the client's delayed ACK, 40 ms each: 44 ms for a producer sending one request at a
    # time, against 0.2 ms with it (issue 36; tests/cli/test_foreground.py).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUse(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); stop what uses it (another loader?) "
            "or choose another port (--port, or port in the configuration)"
        ) from None
    sock.set_inheritable(True)
    return sock


@dataclass
class Foreground:
    """One run of the service in this process; ``run()`` returns the exit status."""

    app: LoaderApp
    settings: Settings
    #: Called (on a thread) when a stop begins, before intake closes: the demo producer.
    before_stop: Callable[[], None] = lambda: None
    #: Called once the service is started and serving, with its base URL.
    on_serving: Callable[[str], None] = lambda base: None
    #: Called with the message of an error that kept the service from starting.
    on_start_error: Callable[[str], None] = lambda message: None
    _signals: list[str] = field(default_factory=list)
    _stop: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._noted) for sig in STOP_SIGNALS}
        try:
            return asyncio.run(self._main())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _noted(self, signum: int, frame: FrameType | None) -> None:
        """Until the event loop runs: note the signal (the loop looks at it first thing)."""
        self._on_signal(signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._signals.append(name)
        if len(self._signals) > 1:
            log.warning(
                "second signal (%s): exiting now, without waiting for running loads; nothing acknowledged is "
                "lost (the WAL replays it at the next start)",
                name,
            )
            logging.shutdown()
            os._exit(1)
        log.info("%s received: stopping (running loads finish first)", name)
        if self._stop is not None:
            self._stop.set()

    async def _main(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in STOP_SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal, sig)
        if self._signals:
            return 0  # stopped before anything started
        s = self.settings
        try:
            sock = bind(s.host, s.port)
        except PortInUse as exc:
            self.on_start_error(str(exc))
            return 2
        with sock:
            async with AsyncExitStack() as exit_stack:
                try:
                    service = await self.app.start_service(exit_stack)
                except StartError as exc:
                    self.on_start_error(str(exc))
                    return 2
                if self._signals:
                    return 0  # (the exit stack stops what started)
                return await self._serve(service, sock)
        return 0  # (not reached: the stack re-raises a failed stop)

    async def _serve(self, service: LoaderService, sock: socket.socket) -> int:
        assert self._stop is not None
        server: _Server | Gateway
        if self.settings.intake.acceptors:  # HTTP in acceptor processes (api/acceptors/gateway.py)
            server = Gateway(self.app, self.settings, GRACEFUL_HTTP_SECONDS)
        else:
            server = _Server(
                uvicorn.Config(
                    self.app,
                    lifespan="off",
                    log_level="warning",
                    timeout_graceful_shutdown=GRACEFUL_HTTP_SECONDS,
                )
            )
        host, port = sock.getsockname()[:2]
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        self.on_serving(f"http://{host if ':' not in host else f'[{host}]'}:{port}")
        stop = asyncio.create_task(self._stop.wait())
        waits: set[asyncio.Task[object]] = {serving, stop}  # type: ignore[arg-type]
        if service.loading is not None:
            waits.add(service.loading)  # type: ignore[arg-type]
        status = 0
        while True:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if service.loading in done:
                waits.discard(service.loading)  # type: ignore[arg-type]
                if service.start_error is not None:  # logged by the service, with what to do
                    status = 1
                    break
                continue
            break
        stop.cancel()
        if not serving.done():
            await asyncio.to_thread(self.before_stop)
            server.should_exit = True
            await serving
        elif serving.exception() is not None:
            raise serving.exception()  # type: ignore[misc]
        return status
