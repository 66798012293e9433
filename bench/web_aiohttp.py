"""bench/web.py's second adapter: the web app on aiohttp's low-level server (not used by arenad).

arenad serves the web layer with llhttp (httptools) on an ``asyncio.Protocol`` (arenad/web/server.py); this
aiohttp adapter is kept for the measurement that chose it (docs/web.md "Why a protocol"). The notes
below are what it was written for.

Thin (STYLE.md §2): it turns an aiohttp request into a ``Request`` (raw path and query, the client
address after the trusted-proxy rule), calls ``WebApp.handle`` synchronously and writes the
``Response``. Synchronously on purpose, as the NDJSON query server does: the engine is mutated only
by the engine task on this same loop, so it cannot change while one request is answered, and no
lock is needed. Every handler's cost is bounded (limits on every list, bounded ladder walks), so a
request holds the loop for at most a few milliseconds (bench/web.py measures it at a million
players).

Why aiohttp: its HTTP parser is C (llhttp), it runs on uvloop, and its per-request overhead was
measured at about 60 µs (bench/web.py ``--overhead``), small beside the targets (API p99 2 ms).
The low-level ``web.Server`` is used, not ``web.Application``: routing is the pure app's.

Limits here: ``max_connections`` (a connection over it gets one 503 and is closed), the request
line and header sizes (aiohttp's parser refuses longer ones with a 400), a keep-alive idle
timeout, and no request body is ever read (every route is GET).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from arenad.daemon.config import parse_hostport
from arenad.web.api import WebApp
from arenad.web.config import WebSettings
from arenad.web.port import WebPorts
from arenad.web.request import Request
from arenad.web.server import client_address

log = structlog.get_logger("arenad.web")
_QUIET = logging.getLogger("arenad.web.http")
_QUIET.setLevel(logging.CRITICAL)
_QUIET.propagate = False

#: ``observe(route, status, seconds)``: one call per answered request (for metrics).
Observe = Callable[[str, int, float], None]

_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b'Connection: close\r\nContent-Length: 50\r\n\r\n{"error": "too many connections", "status": 503}\n\n'
)
_WARM_INTERVAL = 1.0  # seconds between name-index updates once it is complete


class _Refuse(asyncio.Protocol):
    """A connection over ``max_connections``: one 503, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t: Any = transport
        t.write(_REFUSAL)
        t.close()


@dataclass(slots=True)
class WebHandle:
    """A running web server; ``close()`` stops it and ends its connections."""

    app: WebApp
    address: str | None  # "host:port" it listens on; None when [web] listen is off
    _runner: asyncio.Server | None = None
    _server: web.Server | None = None
    _warm: asyncio.Task[None] | None = None
    _closed: bool = field(default=False)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._warm is not None:
            self._warm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm
        if self._runner is not None:
            self._runner.close()
            if self._server is not None:
                await self._server.shutdown(1.0)
            await self._runner.wait_closed()


async def start_web_aiohttp(
    settings: WebSettings, ports: WebPorts, *, observe: Observe | None = None
) -> WebHandle:
    """Serve the API and the pages on ``settings.listen`` in the running loop.

    Returns at once with the server listening (``address`` has the port when ``listen`` asked
    for port 0). With ``listen = "off"`` nothing listens and ``close()`` does nothing.
    """
    app = WebApp(ports, settings)
    if not settings.enabled:
        return WebHandle(app, None)
    loop = asyncio.get_running_loop()
    trusted = tuple(ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies)

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        started = loop.time()
        path, _, query = request.raw_path.partition("?")
        peer = request.remote or "-"
        req = Request(
            method=request.method,
            path=path,
            query=query,
            headers={k.lower(): v for k, v in request.headers.items()},
            client=client_address(peer, request.headers.get("X-Forwarded-For"), trusted),
        )
        resp = app.handle(req, started)
        out = web.Response(status=resp.status, body=resp.body, headers=resp.headers)
        if observe is not None:
            try:
                observe(resp.route, resp.status, loop.time() - started)
            except Exception as e:  # a metrics failure must not fail the request
                app.internal_error("observe", e)
        return out

    server = web.Server(
        handler,
        keepalive_timeout=settings.idle_timeout,
        max_line_size=settings.max_header_bytes,
        max_field_size=settings.max_header_bytes,
        max_headers=64,
        access_log=None,
        # aiohttp logs every malformed request (an over-long header, say) at error level with a
        # traceback: a client could fill the log. Requests that reach WebApp never raise (it
        # answers every failure itself and logs each kind once), so this logger only ever
        # carries the parser's refusals of bad clients.
        logger=_QUIET,
    )

    def factory() -> asyncio.Protocol:
        if len(server.connections) >= settings.max_connections:
            return _Refuse()
        proto: asyncio.Protocol = server()
        return proto

    host, port = parse_hostport(settings.listen)
    listener = await loop.create_server(factory, host, port)
    sock = listener.sockets[0].getsockname()
    address = f"[{sock[0]}]:{sock[1]}" if ":" in str(sock[0]) else f"{sock[0]}:{sock[1]}"
    log.info("web_listening", address=address)

    async def warm() -> None:
        # The search index is built a step per loop turn, so the first search need not wait
        # and no step holds the loop for long; then new names are added once a second.
        while True:
            try:
                done = app.reader.warm()
            except Exception as e:
                app.internal_error("warm", e)
                done = True
            await asyncio.sleep(_WARM_INTERVAL if done else 0)

    task = loop.create_task(warm(), name="web-name-index")
    return WebHandle(app, address, listener, server, task)
