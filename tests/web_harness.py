"""The web tests' harness: a real ScopeSet fed a generated stream, in-memory history and hidden
ports, and a real aiohttp server on 127.0.0.1 port 0 running on a uvloop loop in a thread.

Every API answer fetched through ``Client.get`` is validated against arenad/web/openapi.json
(openapi-core) before the test sees it, so each test of the API also checks the contract.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import uvloop
from openapi_core import OpenAPI
from openapi_core.templating.paths.exceptions import PathNotFound
from openapi_core.testing import MockRequest, MockResponse

from arenad.core.params import ADRParams
from arenad.scopes import ScopeConfig, ScopeSet
from arenad.simulate import Population, event_stream
from arenad.web.config import WebSettings
from arenad.web.port import HistoryPoint, Session, WebPorts
from arenad.web.server import Observe, WebHandle, start_web

SPEC_PATH = Path(__file__).parents[1] / "arenad" / "web" / "openapi.json"
TIMEOUT = 20.0  # seconds any one step of a fixture or a request may take

#: Names a hostile player could pick: each must render as inert text and round-trip in URLs.
HOSTILE = (
    "<script>alert(1)</script>",
    "\"quoted' name",
    "rtl\u202eevil\u202c",
    "x" * 128,
    "é" * 64,  # 128 UTF-8 bytes
    "a/b",
    "100%",
    "..",
    ".",
    "two words",
    "plus+sign",
    "comma,name",
    "q?x=1&y#z",
    "http://evil.example/",
    "日本語プレイヤー",
    "emoji😀",
)
SERVERS = ("eu-1", "us-1")
NEWCOMER = "newcomer"


class MemoryHistory:
    """``HistoryReader`` in memory: a point per player per rated kill, sessions split at idle
    gaps or a change of server (the SQLite store's rules, in the small)."""

    GAP = 1800.0

    def __init__(self) -> None:
        self._points: dict[tuple[str, str], list[HistoryPoint]] = defaultdict(list)
        self._sessions: dict[tuple[str, str], list[Session]] = defaultdict(list)
        self._open: dict[tuple[str, str], list[Any]] = {}

    def record(
        self, scope: str, player: str, *, server: str, t: float, kill: bool, point: HistoryPoint
    ) -> None:
        key = (scope, player)
        self._points[key].append(point)
        cur = self._open.get(key)
        if cur is not None and (cur[0] != server or t - cur[2] > self.GAP):
            self._close(key)
            cur = None
        if cur is None:
            prev = self._sessions[key][-1].rating_after if self._sessions[key] else point.rating
            cur = self._open[key] = [server, t, t, 0, 0, prev]
        cur[2] = t
        cur[3 if kill else 4] += 1
        cur.append(point.rating)

    def _close(self, key: tuple[str, str]) -> None:
        server, t0, t1, kills, deaths, before, *ratings = self._open.pop(key)
        after = ratings[-1] if ratings else before
        self._sessions[key].append(Session(server, t0, t1, kills, deaths, after - before, after))

    def finish(self) -> None:
        for key in list(self._open):
            self._close(key)

    def points(self, scope: str, player: str, since: float, until: float) -> Sequence[HistoryPoint]:
        return [p for p in self._points.get((scope, player), ()) if since <= p.t < until]

    def sessions(self, scope: str, player: str, limit: int) -> Sequence[Session]:
        return list(reversed(self._sessions.get((scope, player), [])))[:limit]


@dataclass
class MemoryHidden:
    """``HiddenPlayers`` in memory: one set for every scope."""

    names: set[str] = field(default_factory=set)

    def is_hidden(self, scope: str, player: str) -> bool:
        return player in self.names

    def hidden(self, scope: str) -> Collection[str]:
        return self.names


@dataclass
class World:
    scopes: ScopeSet
    history: MemoryHistory
    hidden: MemoryHidden
    players: list[str]


def build_world(players: int = 120, days: int = 4, seed: int = 7) -> World:
    """A ScopeSet (global + per-server) fed a simulated stream, the hostile names playing too."""
    sset = ScopeSet(ADRParams(), ScopeConfig(kinds=("global", "server")))
    history = MemoryHistory()
    events = event_stream(Population(players=players, days=days, seed=seed))
    regulars = sorted({a for a, _, _ in events})
    last = events[-1][2]
    extra = []
    for k, name in enumerate(HOSTILE):  # each hostile name plays 40 kills after the stream
        for j in range(40):
            other = regulars[(k * 7 + j) % len(regulars)]
            t = last + 1.0 + k * 400 + j * 5
            extra.append((name, other, t) if j % 3 else (other, name, t))
    # A newcomer with three kills: not placed yet, so its page shows placement progress.
    extra += [(NEWCOMER, regulars[j], extra[-1][2] + 10.0 + j) for j in range(3)]
    for n, (a, v, t) in enumerate([*events, *extra]):
        server = SERVERS[n % 2] if n < len(events) else SERVERS[0]
        sset.feed(a, v, t, server)
        eng = sset.global_engine
        for name, kill in ((a, True), (v, False)):
            i = eng.ids.get(name)
            if i is not None:
                point = HistoryPoint(t, eng.mu(i), eng.display(i), eng.tier_of(i))
                history.record("global", name, server=server, t=t, kill=kill, point=point)
    history.finish()
    return World(sset, history, MemoryHidden(), regulars)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


class Client:
    """Plain blocking HTTP/1.1 requests to the test server, each API answer checked against the
    OpenAPI document."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.host = host
        self.port = int(port)
        self.address = address
        self.spec = OpenAPI.from_dict(json.loads(SPEC_PATH.read_text(encoding="utf-8")))
        self.validated: list[tuple[str, int]] = []

    def get(
        self,
        target: str,
        headers: dict[str, str] | None = None,
        method: str = "GET",
        *,
        validate: bool = True,
    ) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        try:
            conn.request(method, target, headers=headers or {})
            r = conn.getresponse()
            reply = Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()
        if method == "GET" and validate:
            self.check(target, reply)
        return reply

    def check(self, target: str, reply: Reply) -> None:
        path, _, query = target.partition("?")
        if not path.startswith("/api/v1/") or path == "/api/v1/openapi.json" or reply.status == 405:
            return
        ctype = reply.headers.get("content-type", "application/json").split(";")[0]
        args = dict(parse_qsl(query, keep_blank_values=True))
        request = MockRequest(f"http://{self.address}", "get", path, args=args)
        response = MockResponse(reply.body, status_code=reply.status, content_type=ctype)
        if reply.status == 304:
            response = MockResponse(b"", status_code=304, content_type="")
        try:
            self.spec.validate_response(request, response)  # raises on any mismatch
        except PathNotFound:
            # A route the document does not have: only the 404 for it is right.
            assert reply.status == 404, f"{target} answered {reply.status} but is not in the API"
            assert set(json.loads(reply.body)) == {"error", "status"}
        self.validated.append((path, reply.status))


class ServerThread:
    """``start_web`` on a uvloop event loop in a thread of its own, like the daemon's loop."""

    def __init__(self, ports: WebPorts, settings: WebSettings, observe: Observe | None = None) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="web-test-loop", daemon=True)
        self.thread.start()
        self.handle: WebHandle = self.call(start_web(settings, ports, observe=observe))

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT)

    def stop(self) -> None:
        try:
            self.call(self.handle.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(TIMEOUT)
            if not self.thread.is_alive():
                self.loop.close()


def start_server(world: World, **settings: Any) -> ServerThread:
    ports = WebPorts(
        scopes=lambda: world.scopes,
        status=lambda: {
            "feeds": {"udp": {"state": "listening", "last_event_age": 1.5}, "mqtt": {"state": "off"}},
            "events_per_second": 12.5,
        },
        history=world.history,
        hidden=world.hidden,
    )
    # The loop answers (readers = 0): these tests change the world and read it back at once;
    # the forked readers are tested on a real daemon (tests/web/test_readers.py).
    config = {"listen": "127.0.0.1:0", "rate_limit": 0.0, "readers": 0, **settings}
    return ServerThread(ports, WebSettings.model_validate(config))


def seg(name: str) -> str:
    """A player name as one path segment."""
    return quote(name, safe="")
