"""The HTTP API and the page routes as pure handlers: ``WebApp.handle(request, now) -> Response``.

Sans-io (STYLE.md §2): the server (``arenad.web.server``) turns an HTTP request into a
``Request`` (raw path and query, lower-case headers, the client address it decided on) and writes
the ``Response`` back; everything between — routing, parameters, limits, rate limit, caching,
CORS, errors — is here, and the time comes in as ``now`` (a monotonic clock).

Routes (``docs/web.md`` has every parameter; ``openapi.json`` is the contract, checked in tests)::

    GET /api/v1/leaderboard  /api/v1/players/{player}  /api/v1/players?ids=
        /api/v1/players/{player}/history  /api/v1/tiers  /api/v1/predict  /api/v1/balance
        /api/v1/search  /api/v1/status  /api/v1/openapi.json
    GET /  /players/{player}  /player?name=  /tiers  /status  /static/web.css   (pages.py)

Percent-decoding is in ``arenad.web.request`` (each path segment, each list item on its own).

What a client cannot get: a stack trace (any failure is a 500 with a generic body, logged once
per route and exception type), an unbounded answer (every list has a limit, the ladder walks a
bounded number of entries), or more than ``burst + rate_limit * t`` answers per client.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict
from importlib import resources
from typing import Any, Protocol

import orjson
import structlog

from arenad import __version__
from arenad.core.params import TIER_NAMES
from arenad.views import TokenBucket, engine_stats, finite, scopes_body
from arenad.web.config import WebSettings
from arenad.web.pages import Pages
from arenad.web.port import WebPorts
from arenad.web.reader import ApiError, Reader
from arenad.web.request import Handler, Params, Raw, Request, Response, decode, show

log = structlog.get_logger("arenad.web")

MAX_LEADERBOARD = 500
MAX_BATCH = 256
MAX_TEAMS = 8
MAX_SEARCH = 50
MAX_OFFSET = 10_000_000

API_CSP = "default-src 'none'; frame-ancestors 'none'"
PAGE_CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
_COMMON = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
JSON_TYPE = "application/json"
HTML_TYPE = "text/html; charset=utf-8"


# ---------------------------------------------------------------------------- encoding
def encode_json(obj: Any) -> bytes:
    """orjson (non-finite floats become null); the standard library for what it refuses (a
    lone surrogate in a name), with every non-finite float nulled first."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(finite(obj), allow_nan=False, separators=(",", ":")).encode("ascii")


def etag_of(body: bytes) -> str:
    # SHA-256 runs in the CPU's SHA instructions where it has them (x86 since 2017, ARMv8):
    # 24 µs for a 40 KB answer against BLAKE2b's 61 µs on the project's VM; 96 bits are kept.
    return '"' + hashlib.sha256(body).hexdigest()[:24] + '"'


def _matches(if_none_match: str, etag: str) -> bool:
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or etag in tags or f"W/{etag}" in tags


# ---------------------------------------------------------------------------- rate limit
class Buckets(Protocol):
    """Per-client token buckets: ``ClientBuckets`` here, ``readers.SharedBuckets`` across forks."""

    def take(self, client: str, now: float) -> float: ...


class ClientBuckets:
    """A token bucket per client, the ``max_clients`` most recent remembered (the least recent
    forgotten first: a forgotten client starts again with a full bucket)."""

    def __init__(self, rate: float, burst: int, max_clients: int) -> None:
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def take(self, client: str, now: float) -> float:
        """0.0 if the request may go, else the seconds until the client has a token."""
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = self._buckets[client] = TokenBucket(self.rate, self.burst, now)
            if len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(client)
        return bucket.take(now)


# ---------------------------------------------------------------------------- the app


class WebApp:
    """Routes a ``Request`` to the API or a page and answers it; never raises."""

    def __init__(self, ports: WebPorts, settings: WebSettings) -> None:
        self.ports = ports
        self.settings = settings
        self.reader = Reader(ports.scopes, ports.hidden, ports.history)
        self.buckets: Buckets = ClientBuckets(settings.rate_limit, settings.burst, settings.max_clients)
        self.internal_errors = 0
        self.snapshot_at: float | None = None  # in a forked reader: when its snapshot was taken
        self._logged: set[tuple[str, str]] = set()
        self._openapi = resources.files("arenad.web").joinpath("openapi.json").read_bytes()
        self._origins = frozenset(settings.cors_origins)
        self.pages = Pages(self.reader, settings, self.status)
        self._api_simple: dict[str, Handler] = {
            "leaderboard": self._api_leaderboard,
            "players": self._api_batch,
            "tiers": self._api_tiers,
            "predict": self._api_predict,
            "balance": self._api_balance,
            "search": self._api_search,
            "status": self._api_status,
            "openapi.json": self._api_openapi,
        }

    # -- the entry point -------------------------------------------------------------------
    def handle(self, req: Request, now: float) -> Response:
        api = req.path.startswith("/api/")
        route = "other"
        try:
            # Every request costs a token, a bad one too: a flood of 404s is throttled alike.
            if self.settings.rate_limit > 0:
                wait = self.buckets.take(req.client, now)
                if wait > 0:
                    raise ApiError(429, "rate limited", retry_after=max(1, math.ceil(wait)))
            route, handler, segments = self._route(req.path)
            if req.method == "OPTIONS":
                return self._options(req, route, api)
            if req.method not in ("GET", "HEAD"):
                raise ApiError(405, f"method {show(req.method)} is not allowed: this API is read-only")
            params = Params(req.query)
            status, body = handler(req, params, segments)
            return self._ok(req, route, api, status, body)
        except ApiError as e:
            return self._error(req, route, api, e)
        except Exception as e:  # every failure becomes a response; the server goes on
            self.internal_error(route, e)
            return self._error(req, route, api, ApiError(500, "internal error"))

    def internal_error(self, route: str, e: Exception) -> None:
        """Count a failure and log it the first time this kind is seen (``web_request_failed``)."""
        self.internal_errors += 1
        key = (route, type(e).__qualname__)
        if key not in self._logged:
            self._logged.add(key)
            log.error("web_request_failed", route=route, exc_info=e)

    # -- routing ---------------------------------------------------------------------------
    def _route(self, path: str) -> tuple[str, Handler, list[str]]:
        raw = path.split("/")[1:]
        if path.startswith("/api/v1/"):
            parts = [decode(p, "path", plus=False) for p in raw[2:]]
            head = parts[0] if parts else ""
            if len(parts) == 1 and head in self._api_simple:
                return "/api/v1/" + head, self._api_simple[head], parts
            if head == "players" and len(parts) == 2 and parts[1]:
                return "/api/v1/players/{player}", self._api_player, parts
            if head == "players" and len(parts) == 3 and parts[1] and parts[2] == "history":
                return "/api/v1/players/{player}/history", self._api_history, parts
            raise ApiError(404, f"no route {show(path)} (see /api/v1/openapi.json)")
        route, handler = self.pages.route(raw)
        parts = [decode(p, "path", plus=False) for p in raw]
        return route, handler, parts

    # -- API handlers ----------------------------------------------------------------------
    def _scope(self, params: Params) -> Any:
        return self.reader.public(params.text("scope", "global"))

    def _api_leaderboard(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "offset", "limit", "tier", "active"}))
        pub = self._scope(params)
        offset = params.int("offset", 0, MAX_OFFSET, 0)
        limit = params.int("limit", 1, MAX_LEADERBOARD, 50)
        tier = params.choice("tier", TIER_NAMES)
        return 200, self.reader.leaderboard(pub, offset, limit, tier, params.flag("active"))

    def _api_player(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope"}))
        return 200, self.reader.player(self._scope(params), parts[1])

    def _api_history(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "since", "until"}))
        pub = self._scope(params)
        since = params.number("since", -math.inf)
        until = params.number("until", math.inf)
        if until <= since:
            raise ApiError(400, "must be after since", "until")
        return 200, self.reader.history_of(pub, parts[1], since, until)

    def _api_batch(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "ids"}))
        pub = self._scope(params)
        ids = params.items("ids")
        if len(ids) > MAX_BATCH:
            raise ApiError(400, f"at most {MAX_BATCH} ids, got {len(ids)}", "ids")
        return 200, self.reader.batch(pub, ids)

    def _api_tiers(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope"}))
        return 200, self.reader.tiers(self._scope(params))

    def _api_predict(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "a", "b"}))
        pub = self._scope(params)
        return 200, self.reader.predict(pub, params.text("a"), params.text("b"))

    def _api_balance(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "players", "teams"}))
        pub = self._scope(params)
        names = params.items("players")
        if len(names) > 64:
            raise ApiError(400, f"at most 64 players, got {len(names)}", "players")
        teams = params.int("teams", 2, MAX_TEAMS, 2)
        return 200, self.reader.balance(pub, names, teams)

    def _api_search(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "q", "limit"}))
        pub = self._scope(params)
        q = params.text("q")
        limit = params.int("limit", 1, MAX_SEARCH, 20)
        return 200, self.reader.search(pub, q, limit)

    def _api_status(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope"}))
        pub = self._scope(params)
        # The daemon's figures, and the engine's own for the scope asked (the query op's stats).
        return 200, {**self.status(), "scope": pub.scope, "ladder": engine_stats(pub.eng)}

    def _api_openapi(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset())
        return 200, Raw(JSON_TYPE, self._openapi)

    def status(self) -> dict[str, Any]:
        """The daemon's status with the scopes and this layer's figures; ``version`` last-resort."""
        out: dict[str, Any] = {"version": __version__, "feeds": {}, "events_per_second": None}
        out.update(self.ports.status())
        out["scopes"] = scopes_body(self.reader.scope_set())["scopes"]
        out["players"] = len(self.reader.scope_set().global_engine)
        out["web_internal_errors"] = self.internal_errors
        if self.snapshot_at is not None:  # answered by a reader: how far behind the daemon it may be
            out["snapshot_age"] = round(max(0.0, time.time() - self.snapshot_at), 3)
        return out

    def snapshot_taken(self) -> None:
        """Just before a reader is forked: what it inherits should be current (the status's
        events-per-second sample)."""
        self.ports.status()

    # -- responses -------------------------------------------------------------------------
    def _ok(self, req: Request, route: str, api: bool, status: int, body: Any) -> Response:
        if isinstance(body, Raw):
            data, ctype = body.data, body.content_type
        elif isinstance(body, str):
            data, ctype = body.encode("utf-8"), HTML_TYPE
        else:
            data, ctype = encode_json(body), JSON_TYPE
        etag = etag_of(data)
        headers = self._headers(req, api, ctype)
        headers["ETag"] = etag
        headers["Cache-Control"] = f"public, max-age={self.settings.cache_max_age}"
        if status == 200 and _matches(req.headers.get("if-none-match", ""), etag):
            headers.pop("Content-Type")
            return Response(304, headers, b"", route)
        return Response(status, headers, b"" if req.method == "HEAD" else data, route)

    def _error(self, req: Request, route: str, api: bool, e: ApiError) -> Response:
        message = e.message
        if e.parameter is not None and e.parameter not in message:
            message = f"parameter {e.parameter!r}: {message}"
        if api:
            body: dict[str, Any] = {"error": message, "status": e.status}
            if e.parameter is not None:
                body["parameter"] = e.parameter
            data, ctype = encode_json(body), JSON_TYPE
        else:
            try:
                data, ctype = self.pages.error(e.status, message).encode("utf-8"), HTML_TYPE
            except Exception as failure:  # the error page itself failed: plain text, still no trace
                self.internal_error("error-page", failure)
                data, ctype = f"{e.status}\n".encode(), "text/plain; charset=utf-8"
        headers = self._headers(req, api, ctype)
        headers["Cache-Control"] = "no-store"
        if e.retry_after:
            headers["Retry-After"] = str(e.retry_after)
        if e.status == 405:
            headers["Allow"] = "GET, HEAD, OPTIONS"
        return Response(e.status, headers, b"" if req.method == "HEAD" else data, route)

    def _options(self, req: Request, route: str, api: bool) -> Response:
        headers = self._headers(req, api, None)
        headers["Allow"] = "GET, HEAD, OPTIONS"
        if api and "Access-Control-Allow-Origin" in headers:
            headers["Access-Control-Allow-Methods"] = "GET, HEAD"
            headers["Access-Control-Allow-Headers"] = "If-None-Match"
            headers["Access-Control-Max-Age"] = "600"
        return Response(204, headers, b"", route)

    def _headers(self, req: Request, api: bool, ctype: str | None) -> dict[str, str]:
        headers = dict(_COMMON)
        if ctype is not None:
            headers["Content-Type"] = ctype
        headers["Content-Security-Policy"] = API_CSP if api else PAGE_CSP
        if api and self._origins:
            origin = req.headers.get("origin")
            if "*" in self._origins:
                headers["Access-Control-Allow-Origin"] = "*"
            elif origin is not None and origin in self._origins:
                headers["Access-Control-Allow-Origin"] = origin
                headers["Vary"] = "Origin"
            if "Access-Control-Allow-Origin" in headers:
                headers["Access-Control-Expose-Headers"] = "ETag, Retry-After"
        return headers
