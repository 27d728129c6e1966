"""uvicorn, as `hinfer serve` runs it: the port bound before the model loads, read deadlines for headers and
bodies, a connection cap, and a graceful drain on SIGTERM/SIGINT (drain.py) that exits 0."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from hinfer.errors import ConfigError
from hinfer.server.drain import Drain
from hinfer.server.errors import APIError, error_body

log = logging.getLogger("hinfer.server")


@dataclass
class HTTPLimits:
    header_timeout_s: float = 10.0  # from connection (or the end of the last response) to a complete header block
    body_timeout_s: float = 60.0  # from the headers to the end of the body
    keep_alive_s: int = 15  # an idle keep-alive connection is closed after this
    max_connections: int = 1024  # connections opened beyond it get a JSON 503
    shutdown_timeout_s: float = 30.0  # how long running requests may finish after SIGTERM/SIGINT


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen now, so a busy port fails in a second instead of after the model has loaded; clients
    connecting while the model loads wait in the backlog."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restart over TIME_WAIT sockets
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e} (is another server using the "
                          "port? choose another with --port)") from e
    sock.set_inheritable(True)
    return sock


class _DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines: a client trickling its headers or body (slowloris) is cut
    off instead of holding a connection forever. Set on the class by `serve` (one server per process)."""

    header_timeout_s = 10.0
    body_timeout_s = 60.0
    max_connections: int | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        self._reading = True  # a fresh connection owes us a request; an idle keep-alive one does not (yet)
        self._upgraded = False
        super().connection_made(transport)
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self.app = _over_capacity  # (uvicorn's own limit_concurrency answers in plain text)
        self._rearm()

    def data_received(self, data: bytes) -> None:
        self._reading = True
        super().data_received(data)  # handle_events re-arms

    def handle_events(self) -> None:
        super().handle_events()
        self._rearm()

    def on_response_complete(self) -> None:
        self._reading = False  # idle until the next request's first byte: uvicorn's keep-alive timeout applies
        super().on_response_complete()
        self._rearm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: Any) -> None:
        """The connection becomes a WebSocket's (its own protocol object from here on): no read deadline any more
        (a socket waits for its client's next message as long as it likes)."""
        self._upgraded = True
        self._cancel()
        super().handle_websocket_upgrade(event)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _rearm(self) -> None:
        if self._upgraded:
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            phase: str | None = "headers" if self._reading else None
        elif cycle.more_body:
            phase = "body"
        else:
            phase = None  # the request is read; the app is answering
        if phase == self._phase:
            return
        self._cancel()
        self._phase = phase
        if phase is not None:
            timeout = self.header_timeout_s if phase == "headers" else self.body_timeout_s
            self._deadline = self.loop.call_later(timeout, self._expired, phase)

    def _expired(self, phase: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        peer = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
        log.warning("closing a connection from %s: its request %s did not arrive within %.0f s", peer, phase,
                    self.header_timeout_s if phase == "headers" else self.body_timeout_s)
        self.transport.close()


_last_cap_warning = 0.0


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The answer on a connection opened beyond --max-connections: a JSON 503 with Retry-After, then close."""
    global _last_cap_warning
    if scope["type"] != "http":
        return
    if time.monotonic() - _last_cap_warning > 10:  # at most one line per 10 s under a flood
        _last_cap_warning = time.monotonic()
        log.warning("more than --max-connections open connections: answering 503")
    err = APIError(503, "too many open connections to this server (--max-connections); retry shortly",
                   code="too_many_connections", close=True)
    await JSONResponse(error_body(err, scope.get("path", "")), status_code=503,
                       headers=err.headers())(scope, receive, send)


class DrainingServer(uvicorn.Server):
    """The first SIGTERM/SIGINT drains (drain.py) and then stops uvicorn; a second one ends the running
    requests at once; a third quits without waiting. The signal is not re-raised, so the exit code is 0."""

    def __init__(self, config: uvicorn.Config, drain: Drain, shutdown_timeout_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.shutdown_timeout_s = shutdown_timeout_s
        self._signals = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        loop = self._loop
        if loop is None or not self.started:  # still starting: nothing to drain
            self.should_exit = True
            return
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if self._signals == 1:
            log.info("%s: shutting down gracefully (up to --shutdown-timeout %.0f s for running requests)", name,
                     self.shutdown_timeout_s)
            loop.call_soon_threadsafe(lambda: loop.create_task(self._drain_then_exit()))
        elif self._signals == 2:
            log.warning("%s again: ending running requests now", name)
            loop.call_soon_threadsafe(self.drain.expire)
        else:
            self.force_exit = self.should_exit = True

    async def _drain_then_exit(self) -> None:
        try:
            await self.drain.run(self.shutdown_timeout_s)
        finally:
            self.should_exit = True


def serve(app: Any, sock: socket.socket, drain: Drain, limits: HTTPLimits) -> None:
    _DeadlineH11Protocol.header_timeout_s = limits.header_timeout_s
    _DeadlineH11Protocol.body_timeout_s = limits.body_timeout_s
    _DeadlineH11Protocol.max_connections = limits.max_connections
    config = uvicorn.Config(app, http=_DeadlineH11Protocol, log_level="warning", lifespan="on",
                            timeout_keep_alive=limits.keep_alive_s,
                            timeout_graceful_shutdown=5)  # after the drain: only responses still flushing
    DrainingServer(config, drain, limits.shutdown_timeout_s).run(sockets=[sock])
