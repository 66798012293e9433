"""The HTTP adapter: HTTP/1.1 by llhttp (``httptools``) on an ``asyncio.Protocol``, on the daemon's loop.

Thin (STYLE.md §2): bytes in, llhttp's callbacks, a ``Request`` for ``WebApp.handle`` (raw path
and query, the client after the trusted-proxy rule), the ``Response`` framed straight onto the
transport.

Why a protocol and not aiohttp (docs/web.md "Why a protocol"): a request is answered inside
``data_received``, in the same loop turn that reads it, exactly as the NDJSON query server is. A
request handed to a task (aiohttp's model) runs only after the engine task's next slice; for the
query port that cost p50 0.56 against 0.20 ms under 50k events/s (docs/performance.md, "Query
latency under ingest"). Synchronously on purpose: the engine is mutated only by the engine task
on this same loop, so it cannot change while one request is answered, and no lock is needed.
Why llhttp and not h11 (docs/web.md "Performance"): h11's parsing and framing, pure Python, cost
the loop about as much as the answers themselves.

What a slow or hostile client cannot do: open more than ``max_connections`` (one over it gets
a 503 and is closed), send a request line and headers over ``max_header_bytes`` (431, then the
connection closes; a head is measured before llhttp holds it, so trickling one in does not
help), take longer than ``idle_timeout`` to send one complete request (slow headers included:
the deadline runs from the last answer, not the last byte), make us buffer answers it does not
read (reading pauses while the transport's buffer is full), or hold the loop for more than a
slice (pipelined requests past ``_SLICE`` of work wait for the next turn). A request body is
never kept: every route is GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from http import HTTPStatus
from typing import Any, NamedTuple, NoReturn, cast

import httptools
import msgpack
import structlog

from arenad.daemon.config import parse_hostport
from arenad.web.api import WebApp, encode_json
from arenad.web.config import WebSettings
from arenad.web.port import WebPorts
from arenad.web.readers import (
    FLUSH_INTERVAL,
    HANDOVER_POLL,
    MSG_MAX,
    ParentLogger,
    ReaderLink,
    ReaderPool,
    SharedBuckets,
    detach_from_daemon,
    fds_of,
    fork_supported,
    new_loop,
)
from arenad.web.request import Request

log = structlog.get_logger("arenad.web")

#: ``observe(route, status, seconds)``: one call per answered request (for metrics).
Observe = Callable[[str, int, float], None]

_SLICE = 0.005  # seconds of answering before a connection yields the loop to others
_CLOSE_TIMEOUT = 1.0  # seconds to flush on close before the transport is aborted
# Seconds a connection refused with an error keeps reading (and dropping) what its client still
# sends. Closing at once with unread bytes makes the kernel answer with a reset, which can reach
# the client before it has read the error (RFC 9112 §9.6, "lingering close").
_LINGER = 1.0
_WARM_INTERVAL = 1.0  # seconds between name-index updates once it is complete


class _Parsed(NamedTuple):
    """A complete request as llhttp saw it, waiting for its answer."""

    method: bytes
    target: bytes
    headers: dict[str, str]  # names in lower case; a repeated header keeps its last value
    head: int  # bytes of the request line and headers
    keep_alive: bool
    version: str


@cache
def _status_line(status: int) -> str:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    return f"HTTP/1.1 {status} {reason}\r\n"


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


#: The window over which the web's share of the event loop is measured (``[web] loop_share``):
#: short, so that a request held back past the share waits at most 14 ms (at 0.3), not 70.
_BUDGET_WINDOW = 0.02


@dataclass(slots=True)
class _Shared:
    """What every connection of one server shares."""

    app: WebApp
    settings: WebSettings
    trusted: tuple[Any, ...]
    observe: Observe | None
    engine_behind: Callable[[], bool] = field(default=lambda: True)
    open: set[_HttpConnection] = field(default_factory=set)
    active: int = 0
    # In a retiring reader: moves an idle connection to the newer reader (readers.py).
    handover: Callable[[_HttpConnection], None] | None = None
    # The loop-share budget: seconds spent answering in the current window, and when it ends.
    used: float = 0.0
    window_end: float = 0.0

    def budget_wait(self, now: float) -> float:
        """0 when the web may answer now; else the seconds until its share of the loop is back.

        The engine task, the sources and the query port share one event loop with the web: a
        burst of HTTP requests (2,000/s of 1 ms each is two cores' worth) would otherwise
        starve ingest. Beyond ``loop_share`` of each window, while the engine has a backlog
        (``engine_behind``), the connections stop reading; the requests wait in their sockets,
        and the rest of the window is the engine's. While the engine keeps up the web goes on:
        holding requests back then only leaves the loop idle (docs/web.md "Performance")."""
        if now >= self.window_end:
            self.window_end = now + _BUDGET_WINDOW
            self.used = 0.0
            return 0.0
        share = self.settings.loop_share
        if share >= 1.0 or self.used < share * _BUDGET_WINDOW or not self.engine_behind():
            return 0.0
        return self.window_end - now


class _HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection (keep-alive, pipelining), answered inside ``data_received``.

    Bytes go to llhttp one head at a time (up to the next blank line): a request is answered
    before the next is parsed, so pipelined requests wait in ``_buf`` (bounded by one read, as
    reading pauses while they wait) and never as parsed objects."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._buf = bytearray()  # received; from _pos on not yet given to the parser
        self._pos = 0
        self._transport: asyncio.Transport | None = None
        self._peer = "-"
        # The request being parsed: its target, headers, head size; the ones parsed, to answer.
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head = 0
        self._in_body = False
        self._partial = 0  # bytes of a head not complete yet (a client trickling it)
        self._ready: deque[_Parsed] = deque()
        self._eof = False
        self._refusing = False
        self._lingering = False
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
            self._linger()
            return
        shared.active += 1
        self._timer = self._loop.call_at(self._deadline, self._check_idle)

    def data_received(self, data: bytes) -> None:
        if self._refusing or self._lingering or self._transport is None or self._transport.is_closing():
            return
        self._buf += data
        if not self._scheduled:
            self._work()

    def eof_received(self) -> bool:
        self._eof = True
        if self._lingering:
            self.close()  # the client has sent all it will: the answer went before our FIN
        elif not self._refusing and not self._scheduled:
            self._work()
        return False  # the transport closes once the last answer is written

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

    # -- llhttp's callbacks (httptools) ----------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._head = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value) + 4
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._in_body = True
        self._partial = 0

    def on_message_complete(self) -> None:
        self._in_body = False
        p = self._parser
        self._ready.append(
            _Parsed(
                p.get_method(),
                self._url,
                self._headers,
                self._head,
                p.should_keep_alive(),
                p.get_http_version(),
            )
        )

    # -- the work --------------------------------------------------------------------------
    def _work(self) -> None:
        """Answer every complete request received, until a slice is spent or answers back up."""
        self._scheduled = False
        start = self._loop.time()
        try:
            while self._transport is not None and not self._transport.is_closing():
                if self._write_paused or self._lingering:
                    return
                if self._ready:
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
                        # longer than a slice: the rest waits for the next turn, and nothing more
                        # is read until they are answered.
                        self._transport.pause_reading()
                        self._scheduled = True
                        self._loop.call_soon(self._work)
                        return
                    parsed = self._ready.popleft()
                    if not self._answer(parsed):
                        self._linger()
                        return
                    if not parsed.keep_alive:
                        self.close()
                        return
                elif self._pos < len(self._buf):
                    if not self._feed():
                        self._linger()
                        return
                else:
                    if self._eof:
                        self.close()
                    elif self._shared.handover is not None and self.idle():
                        self._shared.handover(self)  # a retiring reader: to the newer one, now
                    elif not self._transport.is_reading():
                        self._transport.resume_reading()
                    return
        except Exception as e:  # a bug here ends this connection only, and is logged once
            self._shared.app.internal_error("connection", e)
            self.close()

    def _feed(self) -> bool:
        """Give llhttp the buffered bytes up to the end of the next head; False (an error sent)
        when the request is malformed or its head is over ``max_header_bytes``."""
        buf, pos = self._buf, self._pos
        end = buf.find(b"\r\n\r\n", pos)
        n = (end + 4 if end >= 0 else len(buf)) - pos
        limit = self._shared.settings.max_header_bytes
        # Outside a body every byte up to the blank line is request line and headers: an
        # oversized head is refused before llhttp holds it (a client trickling one included).
        if not self._in_body and self._partial + (end - pos if end >= 0 else n) > limit:
            self._send_error(431, "request line and headers too large")
            return False
        piece = bytes(buf[pos : pos + n])
        # An offset, not a cut per request: a read of many pipelined requests is moved once.
        self._pos = pos + n
        if self._pos >= len(buf):
            buf.clear()
            self._pos = 0
        elif self._pos > 65536:
            del buf[: self._pos]
            self._pos = 0
        self._partial = 0 if end >= 0 else self._partial + n
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            # An upgrade (or CONNECT) is not served: the request is answered, then we close.
            self._eof = True
            self._buf.clear()
            self._pos = 0
        except httptools.HttpParserError as e:
            self._send_error(400, f"bad request: {e}")
            return False
        return True

    def _answer(self, parsed: _Parsed) -> bool:
        """Answer one request; False when the connection must close after it."""
        shared = self._shared
        started = self._loop.time()
        # The answer's cost by the fine clock: uvloop's loop.time() steps by milliseconds, the
        # size of a whole answer, and the share is reckoned in fractions of a window.
        t0 = time.perf_counter()
        if parsed.head > shared.settings.max_header_bytes:
            self._send_error(431, "request line and headers too large")
            return False
        headers = parsed.headers
        if parsed.version == "1.1" and "host" not in headers:
            self._send_error(400, "bad request: an HTTP/1.1 request needs a Host header")  # RFC 9112 §3.2
            return False
        try:
            target = parsed.target.decode("utf-8")
        except UnicodeDecodeError:
            target = ""
        if not target.startswith("/"):
            self._send_error(400, "bad request: the target must be a UTF-8 path")
            return False
        path, _, query = target.partition("?")
        req = Request(
            method=parsed.method.decode("ascii", "replace"),
            path=path.partition("#")[0],
            query=query,
            headers=headers,
            client=client_address(self._peer, headers.get("x-forwarded-for"), shared.trusted),
        )
        resp = shared.app.handle(req, started)
        self._write(resp.status, resp.headers, resp.body, close=not parsed.keep_alive)
        spent = time.perf_counter() - t0
        self._deadline = self._loop.time() + shared.settings.idle_timeout
        shared.used += spent  # this answer's part of the web's share of the loop
        if shared.observe is not None:
            try:
                shared.observe(resp.route, resp.status, spent)
            except Exception as e:  # a metrics failure must not fail the request
                shared.app.internal_error("observe", e)
        return True

    def _write(self, status: int, headers: Mapping[str, str], body: bytes, *, close: bool) -> None:
        transport = self._transport
        if transport is None:
            return
        # The names and values are the app's own (an echoed CORS origin only when it is one of
        # the configured origins): no CR or LF can come from a client.
        head = [_status_line(status)]
        head.extend(f"{name}: {value}\r\n" for name, value in headers.items())
        head.append(f"Server: arenad\r\nContent-Length: {len(body)}\r\n")
        if close:
            head.append("Connection: close\r\n")
        head.append("\r\n")
        transport.write("".join(head).encode("latin-1") + body)

    def _send_error(self, status: int, message: str, retry_after: int = 0) -> None:
        """An error before or outside any route (a malformed request, the connection limit)."""
        headers = {
            "Content-Type": "application/json",
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        }
        if retry_after:
            headers["Retry-After"] = str(retry_after)
        self._write(status, headers, encode_json({"error": message[:200], "status": status}), close=True)

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

    def _linger(self) -> None:
        """After an error answer: send it and our FIN, drop what the client still sends, and
        close when it ends or after ``_LINGER``, so that it reads the answer, not a reset."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if not transport.can_write_eof():
            self.close()
            return
        self._lingering = True
        self._ready.clear()
        self._buf.clear()
        self._pos = 0
        transport.write_eof()
        if not transport.is_reading():
            transport.resume_reading()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(_LINGER, self.close)

    async def closed(self) -> None:
        await self._closed

    # -- moving to a newer snapshot (arenad/web/readers.py) -----------------------------------
    def idle(self) -> bool:
        """Between requests with nothing held: no bytes unparsed, no answer unwritten, no head
        half-received. Only then can the socket move to another process as a bare fd."""
        t = self._transport
        return (
            t is not None
            and not t.is_closing()
            and not self._ready
            and self._pos >= len(self._buf)
            and self._partial == 0
            and not self._in_body
            and not self._scheduled
            and not self._write_paused
            and not self._refusing
            and not self._lingering
            and not self._eof
            and t.get_write_buffer_size() == 0
        )

    def detach(self) -> tuple[int, float] | None:
        """A duplicate of the socket's fd and the seconds left of its idle deadline; the
        connection here is closed without a FIN (the duplicate keeps the socket open). None when
        the socket cannot be had."""
        t = self._transport
        if t is None:
            return None
        sock = t.get_extra_info("socket")
        if sock is None:
            return None
        t.pause_reading()
        fd = os.dup(sock.fileno())
        left = max(0.0, self._deadline - self._loop.time())
        t.close()
        return fd, left

    def adopt(self, idle_left: float) -> None:
        """A connection taken over from an older snapshot keeps the rest of its idle deadline."""
        self._deadline = self._loop.time() + idle_left
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._loop.call_at(self._deadline, self._check_idle)


@dataclass(slots=True)
class WebHandle:
    """A running web server; ``close()`` stops it and ends its connections (and its readers)."""

    app: WebApp
    address: str | None  # "host:port" it listens on; None when [web] listen is off
    _server: asyncio.Server | None = None
    _shared: _Shared | None = None
    _warm: asyncio.Task[None] | None = None
    _closed: bool = False
    pool: ReaderPool | None = None  # the forked readers, when [web] readers > 0
    _pool_task: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in (self._warm, self._pool_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.pool is not None:
            await self.pool.close()
        if self._server is not None:
            self._server.close()
            conns = set(self._shared.open) if self._shared is not None else set()
            for c in conns:
                c.close()
            if conns:
                await asyncio.gather(*(c.closed() for c in conns))
            await self._server.wait_closed()


def _listening_socket(host: str, port: int) -> socket.socket:
    """The socket every reader accepts on (the daemon holds it, and never accepts on it)."""
    info = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family = info[0][0]
    sock = socket.create_server((host, port), family=family, backlog=1024)
    sock.setblocking(False)
    return sock


async def start_web(
    settings: WebSettings,
    ports: WebPorts,
    *,
    observe: Observe | None = None,
    forked: Callable[[float], None] | None = None,
) -> WebHandle:
    """Serve the API and the pages on ``settings.listen``: from forked readers when
    ``settings.readers`` > 0 (arenad/web/readers.py), else in the running loop.

    Returns with the server listening (``address`` has the port when ``listen`` asked for port
    0). With ``listen = "off"`` nothing listens and ``close()`` does nothing.
    """
    app = WebApp(ports, settings)
    if not settings.enabled:
        return WebHandle(app, None)
    loop = asyncio.get_running_loop()
    trusted = tuple(ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies)
    host, port = parse_hostport(settings.listen)
    server: asyncio.Server | None = None
    shared: _Shared | None = None
    pool: ReaderPool | None = None
    if settings.readers > 0 and fork_supported():
        # One budget per client across every reader and generation (readers.SharedBuckets).
        app.buckets = SharedBuckets(settings.rate_limit, settings.burst, settings.max_clients)
        listener = _listening_socket(host, port)
        sock = listener.getsockname()

        def serve(
            lsock: socket.socket, control: socket.socket, inbox: socket.socket, parent: int
        ) -> NoReturn:
            serve_reader(
                app,
                settings,
                trusted,
                ports.after_fork,
                listener=lsock,
                control=control,
                inbox=inbox,
                parent=parent,
                shared_files=ports.shared_files(),
            )

        pool = ReaderPool(
            settings.readers,
            settings.refresh,
            listener,
            serve,
            observe,
            version=lambda: (ports.version(), app.reader.index_progress()),
            urgent=ports.urgent,
            fork_guard=ports.fork_guard,
            before_fork=app.snapshot_taken,
            forked=forked,
            index_wanted=app.reader.want_index,
            retire_limit=settings.idle_timeout + 15.0,
        )
    else:
        shared = _Shared(app, settings, trusted, observe, ports.engine_behind)
        server = await loop.create_server(lambda: _HttpConnection(shared), host, port)
        sock = server.sockets[0].getsockname()
    address = f"[{sock[0]}]:{sock[1]}" if ":" in str(sock[0]) else f"{sock[0]}:{sock[1]}"
    log.info("web_listening", address=address, readers=settings.readers if pool is not None else 0)

    async def warm() -> None:
        # The search index is built a step per loop turn, so the first search need not wait
        # and no step holds the loop for long; then new names are added once a second. With
        # readers it is built here all the same, and each fork inherits it as it stands.
        while True:
            try:
                done = app.reader.warm()
            except Exception as e:
                app.internal_error("warm", e)
                done = True
            await asyncio.sleep(_WARM_INTERVAL if done else 0)

    task = loop.create_task(warm(), name="web-name-index")
    handle = WebHandle(app, address, server, shared, task, pool=pool)
    if pool is not None:
        handle._pool_task = loop.create_task(pool.run(), name="web-readers")
    return handle


# ---------------------------------------------------------------------------- in a reader
def serve_reader(
    app: WebApp,
    settings: WebSettings,
    trusted: tuple[Any, ...],
    after_fork: Callable[[], None],
    *,
    listener: socket.socket,
    control: socket.socket,
    inbox: socket.socket,
    parent: int,
    shared_files: Sequence[str] = (),
) -> NoReturn:
    """A forked reader's whole life: answer on ``listener`` from this snapshot until retired."""
    code = 0
    link = ReaderLink(control, inbox)
    try:
        keep = {listener.fileno(), control.fileno(), inbox.fileno(), *fds_of(shared_files)}
        detach_from_daemon(keep, parent)
        structlog.configure(logger_factory=lambda *_a: ParentLogger(control))
        after_fork()
        app.snapshot_at = time.time()
        app.reader.index_wanted = link.index_wanted
        loop = new_loop()
        shared = _Shared(app, settings, trusted, link.observe, lambda: False)
        loop.run_until_complete(_reader_main(shared, listener, link))
    except BaseException as e:  # whatever ends a reader, the daemon hears of it
        code = 1
        with contextlib.suppress(Exception):
            log.error("web_reader_failed", error=repr(e))
    finally:
        with contextlib.suppress(Exception):
            link.flush()
    os._exit(code)


async def _reader_main(shared: _Shared, listener: socket.socket, link: ReaderLink) -> None:
    loop = asyncio.get_running_loop()
    control, inbox = link.control, link.inbox
    for s in (listener, control, inbox):
        s.setblocking(False)
    server = await loop.create_server(lambda: _HttpConnection(shared), sock=listener, backlog=1024)
    retire: asyncio.Future[socket.socket | None] = loop.create_future()

    def on_control() -> None:
        try:
            msg, fds, _, _ = socket.recv_fds(control, 256, 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            msg, fds = b"", []
        if retire.done():
            for fd in fds:
                os.close(fd)
            return
        if msg == b"retire" and fds:
            retire.set_result(socket.socket(fileno=fds[0]))
        elif not msg:  # the daemon is gone
            loop.remove_reader(control.fileno())
            retire.set_result(None)

    async def adopt(fd: int, idle_left: float) -> None:
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        try:
            _, proto = await loop.connect_accepted_socket(lambda: _HttpConnection(shared), sock)
        except OSError:
            sock.close()
            return
        proto.adopt(idle_left)
        if shared.handover is not None and proto.idle():  # retiring too: pass it on
            shared.handover(proto)

    adopting: set[asyncio.Task[None]] = set()
    inbox_done = asyncio.Event()

    def on_inbox() -> None:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(inbox, MSG_MAX, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, fds = b"", []
            if not msg:  # the reader before us is gone: nothing more will come
                loop.remove_reader(inbox.fileno())
                inbox_done.set()
                return
            try:
                body = msgpack.unpackb(msg)
            except Exception:
                body = {}
            if "conn" in body and fds:
                task = loop.create_task(adopt(fds[0], float(body["conn"])))
                adopting.add(task)
                task.add_done_callback(adopting.discard)
                fds = fds[1:]
            for fd in fds:
                os.close(fd)

    loop.add_reader(control.fileno(), on_control)
    loop.add_reader(inbox.fileno(), on_inbox)
    link.ready()  # accepting: the reader before us may now hand over (ReaderPool._ready)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL)
            link.flush()

    flush = loop.create_task(flusher())
    successor = await retire
    loop.remove_reader(control.fileno())  # nothing more to hear: an EOF now must not spin here
    server.close()  # no more accepts here; the newer reader accepts on its own copy
    for _ in range(3):  # connections accepted in the same turn reach connection_made first
        await asyncio.sleep(0)
    if successor is not None:
        successor.settimeout(1.0)  # a successor that stopped reading must not hang us too
    await _hand_over(shared, successor, inbox_done, adopting)
    flush.cancel()
    link.flush()


async def _hand_over(
    shared: _Shared,
    successor: socket.socket | None,
    inbox_done: asyncio.Event,
    adopting: set[asyncio.Task[None]],
) -> None:
    """Move every connection to ``successor`` the moment it is idle (``_work`` calls
    ``handover`` after its last answer; the idle ones now; a poll for the rest); connections the
    reader before us still sends are passed on as they come, until its end of our inbox closes.
    What has not gone idle within ``idle_timeout`` is closed."""
    loop = asyncio.get_running_loop()

    def send(conn: _HttpConnection) -> None:
        got = conn.detach()
        if got is None:
            conn.close()
            return
        fd, left = got
        try:
            if successor is not None:
                socket.send_fds(successor, [msgpack.packb({"conn": left})], [fd])
        except OSError:
            pass  # the successor is gone: the client sees this connection close
        finally:
            os.close(fd)

    shared.handover = send
    deadline = loop.time() + shared.settings.idle_timeout + _CLOSE_TIMEOUT
    while (shared.open or adopting or not inbox_done.is_set()) and loop.time() < deadline:
        for conn in list(shared.open):
            if successor is None:
                conn.close()
            elif conn.idle():
                send(conn)
        await asyncio.sleep(HANDOVER_POLL)
    for conn in list(shared.open):
        conn.close()
    if successor is not None:
        successor.close()
