"""The HTTP adapter: HTTP/1.1 by h11 (sans-io) on an ``asyncio.Protocol``, on the daemon's loop.

Thin (STYLE.md §2): bytes in, h11 events, a ``Request`` for ``WebApp.handle`` (raw path and query,
the client after the trusted-proxy rule), the ``Response`` back through h11 to the transport.

Why h11 on a protocol and not aiohttp (docs/web.md "Why h11"): a request is answered inside
``data_received``, in the same loop turn that reads it, exactly as the NDJSON query server is. A
request handed to a task (aiohttp's model) runs only after the engine task's next slice; for the
query port that cost p50 0.56 against 0.20 ms under 50k events/s (docs/performance.md, "Query
latency under ingest"). Synchronously on purpose: the engine is mutated only by the engine task
on this same loop, so it cannot change while one request is answered, and no lock is needed.

What a slow or hostile client cannot do: open more than ``max_connections`` (one over it gets
a 503 and is closed), send a request line and headers over ``max_header_bytes`` (h11 refuses:
431/400, then the connection closes), take longer than ``idle_timeout`` to send one complete
request (slow headers included: the deadline runs from the last answer, not the last byte), make
us buffer answers it does not read (reading pauses while the transport's buffer is full), or hold
the loop for more than a slice (pipelined requests past ``_SLICE`` of work wait for the next
turn). A request body is never kept: every route is GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import h11
import structlog

from arenad.daemon.config import parse_hostport
from arenad.web.api import WebApp, encode_json
from arenad.web.config import WebSettings
from arenad.web.port import WebPorts
from arenad.web.request import Request

log = structlog.get_logger("arenad.web")

#: ``observe(route, status, seconds)``: one call per answered request (for metrics).
Observe = Callable[[str, int, float], None]

_SLICE = 0.005  # seconds of answering before a connection yields the loop to others
_CLOSE_TIMEOUT = 1.0  # seconds to flush on close before the transport is aborted
_WARM_INTERVAL = 1.0  # seconds between name-index updates once it is complete
_SERVER = ("Server", "arenad")


def client_address(peer: str, forwarded_for: str | None, trusted: tuple[Any, ...]) -> str:
    """The client a request counts against: the peer, or — when the peer is a trusted proxy —
    the nearest address in ``X-Forwarded-For`` that is not itself a trusted proxy."""
    if not trusted or not forwarded_for or not _trusted(peer, trusted):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


def _trusted(address: str, trusted: tuple[Any, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in trusted)


#: The window over which the web's share of the event loop is measured (``[web] loop_share``).
_BUDGET_WINDOW = 0.1


@dataclass(slots=True)
class _Shared:
    """What every connection of one server shares."""

    app: WebApp
    settings: WebSettings
    trusted: tuple[Any, ...]
    observe: Observe | None
    open: set[_HttpConnection] = field(default_factory=set)
    active: int = 0
    # The loop-share budget: seconds spent answering in the current window, and when it ends.
    used: float = 0.0
    window_end: float = 0.0

    def budget_wait(self, now: float) -> float:
        """0 when the web may answer now; else the seconds until its share of the loop is back.

        The engine task, the sources and the query port share one event loop with the web: a
        burst of HTTP requests (2,000/s of 1 ms each is two cores' worth) would otherwise
        starve ingest. Beyond ``loop_share`` of each window the connections stop reading; the
        requests wait in their sockets, and the rest of the window is the engine's."""
        if now >= self.window_end:
            self.window_end = now + _BUDGET_WINDOW
            self.used = 0.0
            return 0.0
        share = self.settings.loop_share
        if share >= 1.0 or self.used < share * _BUDGET_WINDOW:
            return 0.0
        return self.window_end - now


class _HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection (keep-alive, pipelining), answered inside ``data_received``."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._loop = asyncio.get_running_loop()
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=shared.settings.max_header_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "-"
        self._request: h11.Request | None = None
        self._refusing = False
        self._write_paused = False
        self._scheduled = False
        self._deadline = self._loop.time() + shared.settings.idle_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._closed: asyncio.Future[None] = self._loop.create_future()

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport: no isinstance.
        self._transport = cast(asyncio.Transport, transport)
        shared = self._shared
        shared.open.add(self)
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) else "-"
        if shared.active >= shared.settings.max_connections:
            self._refusing = True
            self._send_error(503, "too many connections", retry_after=1)
            self.close()
            return
        shared.active += 1
        self._timer = self._loop.call_at(self._deadline, self._check_idle)

    def data_received(self, data: bytes) -> None:
        if self._refusing or self._transport is None or self._transport.is_closing():
            return
        self._h11.receive_data(data)
        if not self._scheduled:
            self._work()

    def eof_received(self) -> bool:
        if not self._refusing:
            self._h11.receive_data(b"")
            if not self._scheduled:
                self._work()
        return False  # our side closes once the last answer is written

    def pause_writing(self) -> None:
        # The client does not take our answers as fast as it asks: stop reading (and answering)
        # until it does, instead of buffering answers without bound.
        self._write_paused = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._work)

    def connection_lost(self, exc: Exception | None) -> None:
        shared = self._shared
        shared.open.discard(self)
        if not self._refusing:
            shared.active -= 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        if not self._closed.done():
            self._closed.set_result(None)

    # -- the work --------------------------------------------------------------------------
    def _work(self) -> None:
        """Answer every complete request received, until a slice is spent or answers back up."""
        self._scheduled = False
        conn = self._h11
        start = self._loop.time()
        try:
            while self._transport is not None and not self._transport.is_closing():
                if self._write_paused:
                    return
                wait = self._shared.budget_wait(self._loop.time())
                if wait > 0.0:
                    # The web's share of the loop is spent: the rest of the window is the
                    # engine's; read nothing more until then.
                    self._transport.pause_reading()
                    self._scheduled = True
                    self._loop.call_later(wait, self._work)
                    return
                if self._loop.time() - start > _SLICE:
                    # Pipelined requests must not hold the loop (and so the engine task) for
                    # longer than a slice: the rest waits for the next turn, and nothing more is
                    # read (h11 would buffer it) until they are answered.
                    self._transport.pause_reading()
                    self._scheduled = True
                    self._loop.call_soon(self._work)
                    return
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as e:
                    self._send_error(e.error_status_hint, f"bad request: {e}")
                    self.close()
                    return
                if event is h11.NEED_DATA:
                    if not self._transport.is_reading():
                        self._transport.resume_reading()
                    return
                if event is h11.PAUSED:
                    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                        conn.start_next_cycle()
                        continue
                    return
                if isinstance(event, h11.Request):
                    # h11 bounds only a head that is still incomplete; one that arrives whole in
                    # one read is measured here.
                    size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                    if size > self._shared.settings.max_header_bytes:
                        self._send_error(431, "request line and headers too large")
                        self.close()
                        return
                    self._request = event
                elif isinstance(event, h11.EndOfMessage) and self._request is not None:
                    self._answer(self._request)
                    self._request = None
                    if conn.our_state is h11.MUST_CLOSE:
                        self.close()
                        return
                elif isinstance(event, h11.ConnectionClosed):
                    self.close()
                    return
                # h11.Data (a request body) is dropped: no route reads one.
        except Exception as e:  # a bug here ends this connection only, and is logged once
            self._shared.app.internal_error("connection", e)
            self.close()

    def _answer(self, event: h11.Request) -> None:
        shared = self._shared
        started = self._loop.time()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        try:
            target = event.target.decode("utf-8")
        except UnicodeDecodeError:
            target = ""
        if not target.startswith("/"):
            self._send_error(400, "bad request: the target must be a UTF-8 path")
            return
        path, _, query = target.partition("?")
        path = path.partition("#")[0]
        req = Request(
            method=event.method.decode("ascii", "replace"),
            path=path,
            query=query,
            headers=headers,
            client=client_address(self._peer, headers.get("x-forwarded-for"), shared.trusted),
        )
        resp = shared.app.handle(req, started)
        out = [(name, value) for name, value in resp.headers.items()]
        out.append(_SERVER)
        out.append(("Content-Length", str(len(resp.body))))
        self._write(resp.status, out, resp.body)
        now = self._loop.time()
        self._deadline = now + shared.settings.idle_timeout
        shared.used += now - started  # this answer's part of the web's share of the loop
        if shared.observe is not None:
            try:
                shared.observe(resp.route, resp.status, self._loop.time() - started)
            except Exception as e:  # a metrics failure must not fail the request
                shared.app.internal_error("observe", e)

    def _write(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        conn = self._h11
        transport = self._transport
        if transport is None:
            return
        data = conn.send(h11.Response(status_code=status, headers=headers))
        if body:
            data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
        data = (data or b"") + (conn.send(h11.EndOfMessage()) or b"")
        transport.write(data)

    def _send_error(self, status: int, message: str, retry_after: int = 0) -> None:
        """An error before or outside any route (a malformed request, the connection limit)."""
        body = encode_json({"error": message[:200], "status": status})
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            _SERVER,
        ]
        if retry_after:
            headers.append(("Retry-After", str(retry_after)))
        transport = self._transport
        if transport is None:
            return
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(h11.LocalProtocolError):
                self._write(status, headers, body)
                return
        # h11 cannot frame it (the request line never parsed, or a refused connection): raw.
        head = f"HTTP/1.1 {status} Error\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        transport.write(head.encode("latin-1") + body)

    def _check_idle(self) -> None:
        """A connection must complete a request within ``idle_timeout`` of its last answer."""
        self._timer = None
        if self._transport is None:
            return
        now = self._loop.time()
        if now < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._check_idle)
            return
        if self._write_paused:
            self._transport.abort()  # has taken none of our answers for idle_timeout
        else:
            self.close()

    def close(self) -> None:
        """Close after the buffered answers are flushed; abort after ``_CLOSE_TIMEOUT``."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(_CLOSE_TIMEOUT, transport.abort)
        transport.close()

    async def closed(self) -> None:
        await self._closed


@dataclass(slots=True)
class WebHandle:
    """A running web server; ``close()`` stops it and ends its connections."""

    app: WebApp
    address: str | None  # "host:port" it listens on; None when [web] listen is off
    _server: asyncio.Server | None = None
    _shared: _Shared | None = None
    _warm: asyncio.Task[None] | None = None
    _closed: bool = False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._warm is not None:
            self._warm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm
        if self._server is not None:
            self._server.close()
            conns = set(self._shared.open) if self._shared is not None else set()
            for c in conns:
                c.close()
            if conns:
                await asyncio.gather(*(c.closed() for c in conns))
            await self._server.wait_closed()


async def start_web(settings: WebSettings, ports: WebPorts, *, observe: Observe | None = None) -> WebHandle:
    """Serve the API and the pages on ``settings.listen`` in the running loop.

    Returns with the server listening (``address`` has the port when ``listen`` asked for port
    0). With ``listen = "off"`` nothing listens and ``close()`` does nothing.
    """
    app = WebApp(ports, settings)
    if not settings.enabled:
        return WebHandle(app, None)
    loop = asyncio.get_running_loop()
    trusted = tuple(ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies)
    shared = _Shared(app, settings, trusted, observe)
    host, port = parse_hostport(settings.listen)
    server = await loop.create_server(lambda: _HttpConnection(shared), host, port)
    sock = server.sockets[0].getsockname()
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
    return WebHandle(app, address, server, shared, task)
