"""The llhttp adapter: connection limit, trusted proxies, head limits, framing, start and close."""

from __future__ import annotations

import asyncio
import http.client
import ipaddress
import socket

import pytest
import uvloop
from web_harness import TIMEOUT, Client, ServerThread, World, start_server

from arenad.web.config import WebSettings
from arenad.web.port import WebPorts
from arenad.web.server import client_address, start_web

TRUSTED = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"))


class TestClientAddress:
    """X-Forwarded-For is believed only from a trusted proxy, and only past trusted hops."""

    @pytest.mark.parametrize(
        ("peer", "xff", "trusted", "expected"),
        [
            ("203.0.113.9", "1.2.3.4", TRUSTED, "203.0.113.9"),  # peer not trusted: header ignored
            ("127.0.0.1", "1.2.3.4", TRUSTED, "1.2.3.4"),
            ("127.0.0.1", "6.6.6.6, 1.2.3.4, 10.1.1.1", TRUSTED, "1.2.3.4"),  # rightmost untrusted
            ("127.0.0.1", None, TRUSTED, "127.0.0.1"),
            ("127.0.0.1", "1.2.3.4", (), "127.0.0.1"),  # no trusted proxies configured
            ("127.0.0.1", "10.0.0.1, 10.0.0.2", TRUSTED, "10.0.0.1"),
        ],
    )
    def test_rule(self, peer: str, xff: str | None, trusted: tuple[object, ...], expected: str) -> None:
        assert client_address(peer, xff, trusted) == expected

    def test_rate_limit_counts_the_forwarded_client(self, world: World) -> None:
        srv = start_server(world, rate_limit=0.001, burst=1, trusted_proxies=["127.0.0.1/32"])
        try:
            assert srv.handle.address is not None
            c = Client(srv.handle.address)
            assert c.get("/api/v1/tiers", headers={"X-Forwarded-For": "198.51.100.1"}).status == 200
            assert c.get("/api/v1/tiers", headers={"X-Forwarded-For": "198.51.100.1"}).status == 429
            assert c.get("/api/v1/tiers", headers={"X-Forwarded-For": "198.51.100.2"}).status == 200
        finally:
            srv.stop()


class TestConnections:
    """A connection over max_connections gets one 503 and is closed; the others are served."""

    def test_limit(self, world: World) -> None:
        srv = start_server(world, max_connections=2)
        held: list[socket.socket] = []
        try:
            assert srv.handle.address is not None
            host, _, port = srv.handle.address.rpartition(":")
            for _ in range(2):
                s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
                held.append(s)
            # The held connections are established once they answer a request.
            for s in held:
                s.sendall(b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\n\r\n")
                assert s.recv(12).startswith(b"HTTP/1.1 200")
            conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
            conn.request("GET", "/api/v1/tiers")
            r = conn.getresponse()
            assert r.status == 503
            assert r.getheader("Retry-After") == "1"
            conn.close()
        finally:
            for s in held:
                s.close()
            srv.stop()


class TestLifecycle:
    """listen = off starts nothing; close is idempotent and frees the port."""

    def test_off_and_close(self, world: World) -> None:
        async def scenario() -> None:
            ports = WebPorts(scopes=lambda: world.scopes, status=dict)
            off = await start_web(WebSettings(listen="off"), ports)
            assert off.address is None
            await off.close()
            on = await start_web(WebSettings(listen="127.0.0.1:0", readers=0), ports)
            assert on.address is not None
            host, _, port = on.address.rpartition(":")
            await on.close()
            await on.close()
            with pytest.raises(OSError):
                await asyncio.wait_for(asyncio.open_connection(host, int(port)), TIMEOUT)

        runner = uvloop.new_event_loop()
        try:
            runner.run_until_complete(asyncio.wait_for(scenario(), TIMEOUT))
        finally:
            runner.close()


class TestObserve:
    """observe(route, status, seconds) is called once per answer with a bounded route label."""

    def test_route_labels(self, world: World) -> None:
        seen: list[tuple[str, int, float]] = []
        ports = WebPorts(scopes=lambda: world.scopes, status=dict)
        settings = WebSettings(listen="127.0.0.1:0", rate_limit=0.0, readers=0)
        srv = ServerThread(ports, settings, observe=lambda *a: seen.append(a))
        try:
            assert srv.handle.address is not None
            c = Client(srv.handle.address)
            c.get("/api/v1/players/" + world.players[0])
            c.get("/api/v1/players/someone-else")
            c.get("/api/v1/leaderboard?limit=1")
            c.get("/no/such/page")
        finally:
            srv.stop()
        assert [(route, status) for route, status, _ in seen] == [
            ("/api/v1/players/{player}", 200),
            ("/api/v1/players/{player}", 404),
            ("/api/v1/leaderboard", 200),
            ("other", 404),
        ]
        assert all(seconds >= 0 for _, _, seconds in seen)


class TestHttp11:
    """Keep-alive, pipelining, Connection: close and HEAD over one raw socket."""

    def _read_responses(self, s: socket.socket, count: int) -> list[bytes]:
        buf = b""
        out: list[bytes] = []
        while len(out) < count:
            head_end = buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = buf[:head_end].decode("latin-1")
                length = next(
                    (
                        int(line.split(":", 1)[1])
                        for line in head.split("\r\n")
                        if line.lower().startswith("content-length:")
                    ),
                    0,
                )
                end = head_end + 4 + (0 if head.startswith("HTTP/1.1 304") or "HEAD" in head else length)
                if len(buf) >= end:
                    out.append(buf[:end])
                    buf = buf[end:]
                    continue
            chunk = s.recv(65536)
            assert chunk, "the server closed early"
            buf += chunk
        return out

    def test_pipelined_requests_answer_in_order(self, client: Client) -> None:
        with socket.create_connection((client.host, client.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /api/v1/players/nobody HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            replies = self._read_responses(s, 3)
        assert [r.split(b" ", 2)[1] for r in replies] == [b"200", b"404", b"200"]
        assert b'"tiers"' in replies[0] and b'"version"' in replies[2]

    def test_many_pipelined_requests_in_one_write(self, client: Client) -> None:
        # More than one slice of work and more than the buffer's compaction point: every one
        # answered, in order.
        n = 400
        with socket.create_connection((client.host, client.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"".join(
                    b"GET /api/v1/players/nobody-%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n"
                    % (k, b"p" * 200)
                    for k in range(n)
                )
            )
            replies = self._read_responses(s, n)
        assert [r.split(b" ", 2)[1] for r in replies] == [b"404"] * n
        assert all(b"nobody-%d" % k in r for k, r in enumerate(replies))

    def test_connection_close_is_honoured(self, client: Client) -> None:
        with socket.create_connection((client.host, client.port), timeout=TIMEOUT) as s:
            s.sendall(b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200")
        assert b'"tiers"' in data

    def test_http_1_0(self, client: Client) -> None:
        with socket.create_connection((client.host, client.port), timeout=TIMEOUT) as s:
            s.sendall(b"GET /api/v1/tiers HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        assert data.split(b" ", 2)[1] == b"200"


class TestHeadLimits:
    """A head over max_header_bytes is refused with 431 however it arrives; one under it is not."""

    def _exchange(self, client: Client, pieces: list[bytes]) -> bytes:
        with socket.create_connection((client.host, client.port), timeout=TIMEOUT) as s:
            for piece in pieces:
                try:
                    s.sendall(piece)
                except OSError:  # the server refused and closed while we were still sending
                    break
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return data

    def test_trickled_oversized_head_is_refused(self, client: Client) -> None:
        # 8190 bytes by default: a header value sent in 1 KB pieces, never finished. It must be
        # refused once it passes the limit, not held until a blank line that never comes.
        pieces = [b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\nX-Junk: "] + [b"j" * 1024] * 12
        data = self._exchange(client, pieces)
        assert data.startswith(b"HTTP/1.1 431 "), data[:80]
        assert b"Connection: close" in data

    def test_head_just_under_the_limit_is_served(self, client: Client) -> None:
        start = b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Junk: "
        junk = b"j" * (8190 - len(start) - 8)
        data = self._exchange(client, [start, junk[:4000], junk[4000:], b"\r\n\r\n"])
        assert data.startswith(b"HTTP/1.1 200 "), data[:80]

    def test_head_over_the_limit_in_one_piece(self, client: Client) -> None:
        data = self._exchange(
            client, [b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\nX-Junk: " + b"j" * 9000 + b"\r\n\r\n"]
        )
        assert data.startswith(b"HTTP/1.1 431 "), data[:80]

    def test_http_1_1_needs_a_host(self, client: Client) -> None:
        data = self._exchange(client, [b"GET /api/v1/tiers HTTP/1.1\r\n\r\n"])
        assert data.startswith(b"HTTP/1.1 400 "), data[:80]

    def test_a_body_is_skipped_and_the_next_request_served(self, client: Client) -> None:
        data = self._exchange(
            client,
            [
                b"POST /api/v1/tiers HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello\r\n\r\nx"
                b"GET /api/v1/tiers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            ],
        )
        assert data.startswith(b"HTTP/1.1 405 "), data[:80]
        assert data.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 200 " in data


class TestSlowClients:
    """A client that sends its head slower than idle_timeout is closed; the server goes on."""

    def test_trickling_head_times_out(self, world: World) -> None:
        srv = start_server(world, idle_timeout=0.3)
        try:
            assert srv.handle.address is not None
            host, _, port = srv.handle.address.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=TIMEOUT) as s:
                s.sendall(b"GET /api/v1/tiers HTTP/1.1\r\n")
                s.settimeout(TIMEOUT)
                assert s.recv(100) == b""  # closed by the server, with no answer
            assert Client(srv.handle.address).get("/api/v1/tiers").status == 200
        finally:
            srv.stop()


def test_the_web_keeps_to_its_share_of_the_loop() -> None:
    """Past ``loop_share`` of a window the connections wait for the next window."""
    from arenad.web.config import WebSettings
    from arenad.web.server import _BUDGET_WINDOW, _Shared

    shared = _Shared(app=None, settings=WebSettings(loop_share=0.2), trusted=(), observe=None)  # type: ignore[arg-type]
    w = _BUDGET_WINDOW
    assert shared.budget_wait(10.0) == 0.0  # a new window
    shared.used = 0.19 * w
    assert shared.budget_wait(10.0 + 0.3 * w) == 0.0
    shared.used = 0.21 * w  # over 0.2 of the window
    assert shared.budget_wait(10.0 + 0.5 * w) == pytest.approx(0.5 * w)
    assert shared.budget_wait(10.0 + _BUDGET_WINDOW) == 0.0  # the next window starts afresh
    assert shared.used == 0.0
    unlimited = _Shared(app=None, settings=WebSettings(loop_share=1.0), trusted=(), observe=None)  # type: ignore[arg-type]
    unlimited.budget_wait(1.0)
    unlimited.used = 5.0
    assert unlimited.budget_wait(1.0 + 0.5 * w) == 0.0


def test_the_share_holds_only_while_the_engine_is_behind() -> None:
    """Past the share the web goes on while the engine keeps up, and waits once it falls behind."""
    from arenad.web.config import WebSettings
    from arenad.web.server import _BUDGET_WINDOW, _Shared

    behind = [False]
    shared = _Shared(
        app=None,  # type: ignore[arg-type]
        settings=WebSettings(loop_share=0.2),
        trusted=(),
        observe=None,
        engine_behind=lambda: behind[0],
    )
    w = _BUDGET_WINDOW
    assert shared.budget_wait(10.0) == 0.0
    shared.used = 0.5 * w  # well over 0.2 of the window
    assert shared.budget_wait(10.0 + 0.3 * w) == 0.0  # the engine has nothing waiting: the loop is free
    behind[0] = True
    assert shared.budget_wait(10.0 + 0.3 * w) == pytest.approx(0.7 * w)


def test_ports_without_an_engine_never_hold_the_web_back() -> None:
    """WebPorts without ``engine_behind`` (no engine shares the loop): past the share of a window
    the web still answers at once; the daemon's ports pass the engine's backlog instead."""
    from arenad.web.config import WebSettings
    from arenad.web.port import WebPorts
    from arenad.web.server import _BUDGET_WINDOW, _Shared

    ports = WebPorts(scopes=lambda: None, status=dict)  # type: ignore[arg-type,return-value]
    assert ports.engine_behind() is False
    shared = _Shared(
        app=None,  # type: ignore[arg-type]
        settings=WebSettings(loop_share=0.2),
        trusted=(),
        observe=None,
        engine_behind=ports.engine_behind,
    )
    assert shared.budget_wait(10.0) == 0.0
    shared.used = 0.9 * _BUDGET_WINDOW
    assert shared.budget_wait(10.0 + 0.5 * _BUDGET_WINDOW) == 0.0
