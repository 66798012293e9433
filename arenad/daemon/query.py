"""The query server: newline-delimited JSON lookups of the live ladder over TCP and a Unix socket.

Sans-io at the centre (STYLE.md, "thin adapters"): ``QueryHandler.handle_line`` turns one request
line into one response line and never raises; ``serve_query`` only moves bytes between sockets and
the handler. One request per line, one response per line, in order::

    {"op": "get", "player": "alice", "id": 7}
    {"ok": true, "op": "get", "id": 7, "player": "alice", "mu": 1213.4, ...}
    {"op": "top", "n": "ten"}
    {"ok": false, "error": "field 'n' must be an integer, got string"}

A bad request gets an error line and the connection stays open. Operations: ``get``, ``top``,
``around``, ``tiers``, ``predict``, ``stats``; an optional ``"id"`` (string or integer) is echoed.

What a slow or hostile client cannot do: grow a buffer past ``max_line`` (an over-long line is
answered once and the rest of it skipped), hold a connection without making progress for more
than ``idle_timeout`` (neither sending nor reading our replies), open more than
``max_connections`` connections at once, send more than ``burst`` requests at once or more than
``rate_limit`` per second on one connection (a token bucket per connection: a request over it is
answered ``{"ok": false, "error": "rate limited", "retry_after": seconds}`` and the connection
stays open), or keep the event loop (and so the engine task) busy for more than a few
milliseconds at a time. Each refusal is counted by reason (``QUERY_REJECT_REASONS``) for
``arenad_query_rejected_total``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import stat
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import structlog

from arenad.core.engine import Engine
from arenad.core.events import MAX_NAME_BYTES
from arenad.daemon.config import QuerySettings, parse_hostport
from arenad.daemon.types import QUERY_REJECT_REASONS
from arenad.errors import ArenadError
from arenad.scopes import ScopeSet
from arenad.views import TokenBucket as TokenBucket  # noqa: PLC0414 - re-exported (mypy strict): its tests import it here
from arenad.views import (
    engine_stats,
    finite,
    ladder_rows,
    player_body,
    scopes_body,
    tiers_body,
    walk_ladder,
)

log = structlog.get_logger("arenad.query")

#: Operations in the order they are listed in error messages.
OPS: tuple[str, ...] = ("get", "top", "around", "tiers", "predict", "stats", "scopes")
# Fields each op accepts besides "op" and "id"; anything else is refused so a typo ("ofset") is
# reported instead of silently falling back to a default.
_FIELDS: dict[str, frozenset[str]] = {
    "get": frozenset({"player", "scope"}),
    "top": frozenset({"n", "offset", "scope", "active_only"}),
    "around": frozenset({"player", "n", "scope"}),
    "tiers": frozenset({"scope"}),
    "predict": frozenset({"a", "b", "scope"}),
    "stats": frozenset({"scope"}),
    "scopes": frozenset(),
}
_COMMON_FIELDS = frozenset({"op", "id"})
_ENVELOPE = frozenset({"ok", "op", "id", "error"})  # response keys no operation body may set
#: The ``observe`` label of a request whose op is unknown or unreadable: client-chosen strings
#: never become metric labels, so the histogram's label set stays bounded.
INVALID_OP = "invalid"

_SLICE = 0.005  # seconds of request handling before the connection yields the loop to others
_REFUSE_TIMEOUT = 1.0  # seconds to deliver the one "too many connections" line
_CLOSE_TIMEOUT = 1.0  # seconds to flush on close before the transport is aborted
_SHOW = 40  # characters of a client-supplied value quoted back in an error message


class _RequestError(Exception):
    """A request the client got wrong; the message is sent back as is.

    Private flow control inside ``handle_line``: it never leaves this module, so it is not part
    of the ``ArenadError`` tree.
    """


# ---------------------------------------------------------------------------- the handler
class QueryHandler:
    """Answers one request line with one response line from the live engine; never raises."""

    def __init__(
        self,
        engine: Callable[[], Engine | ScopeSet],
        settings: QuerySettings,
        stats: Callable[[], dict[str, Any]] = dict,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self._engine = engine
        self.settings = settings
        self._stats = stats
        self._observe = observe
        self.internal_errors = 0
        #: Requests and connections refused, by reason (QUERY_REJECT_REASONS); read at scrape time.
        self.rejected: Counter[str] = Counter(dict.fromkeys(QUERY_REJECT_REASONS, 0))
        #: Query connections open now (TCP and Unix), refused ones not included.
        self.connections = 0
        # (op, exception type) pairs already logged: a client that can trigger a bug over and
        # over must not be able to flood the log with the same traceback.
        self._logged: set[tuple[str, str]] = set()
        self._ops: dict[str, Callable[[Engine, dict[str, Any]], dict[str, Any]]] = {
            "get": self._get,
            "top": self._top,
            "around": self._around,
            "tiers": self._tiers,
            "predict": self._predict,
            "stats": self._stats_op,
            "scopes": self._scopes_op,
        }

    # -- the protocol ----------------------------------------------------------------------
    def handle_line(self, line: bytes) -> bytes:
        """One request (a JSON object, without or with its trailing newline) -> one JSON line."""
        started = time.perf_counter()
        label = INVALID_OP
        head: dict[str, Any] = {}
        try:
            request = _parse(line)
            if "id" in request:
                head["id"] = _request_id(request["id"])
            op = _op(request)
            label = op
            unknown = sorted(set(request) - _COMMON_FIELDS - _FIELDS[op])
            if unknown:
                raise _RequestError(f"unknown field {_show(unknown[0])} for op {op!r}")
            body = self._ops[op](self._scope_engine(request), request)
            out = _encode({"ok": True, "op": op, **head, **body})
        except _RequestError as e:
            out = _encode({"ok": False, **head, "error": str(e)})
        except Exception as e:  # every failure becomes a response; the connection goes on
            self.internal_error(label, e)
            out = _encode({"ok": False, **head, "error": "internal error"})
        self._record(label, time.perf_counter() - started)
        return out

    def rate_limited(self, retry_after: float) -> bytes:
        """The response to a request over the connection's rate limit (its content is never parsed)."""
        self.rejected["rate_limited"] += 1
        # Rounded up, so a client that waits exactly retry_after finds a token.
        wait = math.ceil(retry_after * 1000) / 1000
        return _encode({"ok": False, "error": "rate limited", "retry_after": wait})

    def line_too_long(self) -> bytes:
        """The response to a line longer than ``max_line`` (its content is never parsed)."""
        self._record(INVALID_OP, 0.0)
        self.rejected["oversize"] += 1
        return error_line(f"request line longer than {self.settings.max_line} bytes; the line was discarded")

    def _scope_engine(self, req: dict[str, Any]) -> Engine:
        """The ladder a request reads: its ``scope`` (default ``global``)."""
        live = self._engine()
        scope = req.get("scope", "global")
        if not isinstance(scope, str):
            raise _RequestError(f"field 'scope' must be a string, got {_kind(scope)}")
        if isinstance(live, Engine):
            if scope != "global":
                raise _RequestError(f"no scope {_show(scope)}: this server has the global ladder only")
            return live
        try:
            key = live.resolve(scope)
        except (KeyError, ValueError) as e:
            raise _RequestError(f"scope {_show(scope)}: {e.args[0] if e.args else e}") from None
        return live.engines[key]

    def _hidden(self) -> Callable[[str], bool] | None:
        """Who is left out of ``top`` and ``around`` and answered as unknown (admin ``hide``,
        bots under ``[gates] bots = "hidden"``); None when nobody is, the common case."""
        live = self._engine()
        if isinstance(live, Engine) or not live.hides_anyone:
            return None
        return live.is_hidden

    def _visible(self, eng: Engine, req: dict[str, Any], key: str, *, say_field: bool = False) -> int:
        """``_player``, and a hidden player is as unknown as one never seen (docs/operations.md)."""
        i = _player(eng, req, key, say_field=say_field)
        hidden = self._hidden()
        if hidden is not None and hidden(eng.names[i]):
            raise _RequestError(f"unknown player {req[key]!r}" + (f" (field {key!r})" if say_field else ""))
        return i

    # -- operations ------------------------------------------------------------------------
    def _get(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        i = self._visible(eng, req, "player")
        return player_body(eng, i, self.settings.display_k, req.get("scope", "global"))

    def _top(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        n = _int(req, "n", 1, self.settings.max_top)
        offset = _int(req, "offset", 0, None, default=0)
        active_only = req.get("active_only", False)
        if not isinstance(active_only, bool):
            raise _RequestError(f"field 'active_only' must be true or false, got {_kind(active_only)}")
        hidden = self._hidden()
        if hidden is not None:
            # Hidden players are stepped over like inactive ones; ranks stay the ladder's own.
            names = eng.names
            keep: Callable[[int], bool] = (
                (lambda i: eng.is_active(i) and not hidden(names[i]))
                if active_only
                else (lambda i: not hidden(names[i]))
            )
            ids, truncated = walk_ladder(eng, keep, offset, n)
            out: dict[str, Any] = {
                "n": n,
                "offset": offset,
                "total": len(eng),
                "players": self._rows(eng, ids),
            }
            if active_only:
                out["total"] = eng.active_count
                out["active_only"] = True
            if truncated:
                out["truncated"] = True
            return out
        if not active_only:
            return {
                "n": n,
                "offset": offset,
                "total": len(eng),
                "players": self._rows(eng, eng.top(n, offset)),
            }
        # Inactive players (outside the §2.3 active set) are hidden: walk the ladder from the top,
        # skipping them; ranks stay the ladder's own.
        ids, truncated = walk_ladder(eng, eng.is_active, offset, n)
        out = {"n": n, "offset": offset, "total": eng.active_count, "active_only": True}
        out["players"] = self._rows(eng, ids)
        if truncated:
            out["truncated"] = True
        return out

    def _around(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        i = self._visible(eng, req, "player")
        n = _int(req, "n", 1, self.settings.max_top)
        ids = eng.around(i, n)
        hidden = self._hidden()
        if hidden is not None:  # the window without them (it may hold fewer than asked)
            ids = [j for j in ids if not hidden(eng.names[j])]
        return {
            "player": eng.names[i],
            "n": n,
            "rank": eng.rank(i),
            "index": ids.index(i),  # where the asked player sits in "players" (0-based)
            "total": len(eng),
            "players": self._rows(eng, ids),
        }

    def _tiers(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        return tiers_body(eng)

    def _predict(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        a = self._visible(eng, req, "a", say_field=True)
        b = self._visible(eng, req, "b", say_field=True)
        return {"a": eng.names[a], "b": eng.names[b], "p": eng.predict(a, b)}  # §3.1

    def _stats_op(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {**engine_stats(eng), "internal_errors": self.internal_errors}
        # Daemon figures (queue depth, uptime, ...) come last so the daemon can refine a figure
        # the engine alone cannot know (e.g. events rejected before they reached the engine);
        # only the envelope keys stay ours.
        out.update((k, v) for k, v in self._stats().items() if k not in _ENVELOPE)
        return out

    # -- helpers ---------------------------------------------------------------------------
    def _rows(self, eng: Engine, ids: Iterable[int]) -> list[dict[str, Any]]:
        return ladder_rows(eng, ids, self.settings.display_k)

    def _scopes_op(self, eng: Engine, req: dict[str, Any]) -> dict[str, Any]:
        return scopes_body(self._engine())

    def internal_error(self, op: str, e: Exception) -> None:
        """Count a failure and log it the first time this kind is seen (``query_failed``)."""
        self.internal_errors += 1
        key = (op, type(e).__qualname__)
        if key not in self._logged:
            self._logged.add(key)
            log.error("query_failed", op=op, exc_info=e)

    def _record(self, op: str, seconds: float) -> None:
        if self._observe is None:
            return
        try:
            self._observe(op, seconds)
        except Exception as e:  # a metrics failure must not turn into a failed query
            self.internal_error(f"observe:{op}", e)


# ---------------------------------------------------------------------------- request parsing
def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; they are not JSON and no field may hold them.
    raise ValueError(f"{name} is not valid JSON")


_FLAT = frozenset({str, int, bool, type(None)})


def _parse(line: bytes) -> dict[str, Any]:
    # Valid JSON, parsed by orjson (~1 us against ~13), when its result is certainly the one the
    # standard parser gives: a flat object of strings, ints, booleans and nulls (orjson turns an
    # int beyond 64 bits into a float). Anything else goes the standard way below, which also
    # accepts more (NaN, surrogate escapes) only to refuse it by name.
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    else:
        if type(parsed) is dict and all(type(v) in _FLAT for v in parsed.values()):
            return parsed
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _RequestError(f"request is not valid UTF-8 (byte {e.start})") from e
    text = text.strip()
    if not text:
        raise _RequestError('empty request: expected a JSON object such as {"op": "stats"}')
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError as e:
        raise _RequestError("invalid JSON: nested too deeply") from e
    except ValueError as e:
        raise _RequestError(f"invalid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise _RequestError(f"request must be a JSON object, got {_kind(obj)}")
    return obj


def _request_id(value: object) -> str | int:
    if isinstance(value, str):
        if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise _RequestError(f"field 'id' is longer than {MAX_NAME_BYTES} UTF-8 bytes")
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63:
        return value
    raise _RequestError(f"field 'id' must be a string or a 64-bit integer, got {_kind(value)}")


def _op(request: dict[str, Any]) -> str:
    if "op" not in request:
        raise _RequestError(f"missing field 'op' (one of: {', '.join(OPS)})")
    op = request["op"]
    if not isinstance(op, str):
        raise _RequestError(f"field 'op' must be a string, got {_kind(op)}")
    if op not in _FIELDS:
        raise _RequestError(f"unknown op {_show(op)} (one of: {', '.join(OPS)})")
    return op


def _player(eng: Engine, req: dict[str, Any], key: str, *, say_field: bool = False) -> int:
    """The engine id of the player named in ``req[key]``."""
    if key not in req:
        raise _RequestError(f"missing field {key!r}")
    name = req[key]
    if not isinstance(name, str) or not name:
        got = "an empty string" if name == "" else _kind(name)
        raise _RequestError(f"field {key!r} must be a non-empty player name, got {got}")
    # surrogatepass: measured the way the event decoder measures names (arenad.core.events).
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise _RequestError(
            f"field {key!r} is {size} UTF-8 bytes long; a player name has at most {MAX_NAME_BYTES}"
        )
    i = eng.ids.get(name)
    if i is None:
        raise _RequestError(f"unknown player {name!r}" + (f" (field {key!r})" if say_field else ""))
    return i


def _int(req: dict[str, Any], key: str, lo: int, hi: int | None, default: int | None = None) -> int:
    if key not in req:
        if default is None:
            raise _RequestError(f"missing field {key!r}")
        return default
    v = req[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _RequestError(f"field {key!r} must be an integer, got {_kind(v)}")
    if v < lo or (hi is not None and v > hi):
        want = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise _RequestError(f"field {key!r} must be {want}, got {_show(v)}")
    return v


def _kind(v: object) -> str:
    """The JSON type name of a decoded value, for error messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _show(v: object) -> str:
    """A client-supplied value for an error message, cut short so a reply stays small."""
    text = repr(v)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


# ---------------------------------------------------------------------------- response encoding
def _encode(obj: dict[str, Any]) -> bytes:
    # orjson: a top-10 reply in ~3 us against ~50 us for the standard library (docs/performance.md);
    # non-finite floats become null, as views.finite does. What it refuses (a lone surrogate, an int
    # beyond 64 bits) goes the standard way, where ensure_ascii keeps the reply valid UTF-8.
    try:
        return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        pass
    try:
        text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except ValueError:
        # Rare (the clock before the first event, a NaN in daemon stats): walk and fix only then.
        text = json.dumps(finite(obj), allow_nan=False, separators=(",", ":"))
    return text.encode("ascii") + b"\n"


def error_line(message: str) -> bytes:
    """A ``{"ok": false, "error": message}`` response line."""
    return _encode({"ok": False, "error": message})


# ---------------------------------------------------------------------------- line framing
_TOO_LONG = None  # what LineSplitter yields in place of an over-long line


class LineSplitter:
    """Splits a byte stream into lines of at most ``max_line`` bytes; never buffers more.

    ``feed`` returns the complete lines (without their newline) in order, with ``None`` standing
    for a line that went over the limit: that is reported as soon as the limit is passed, and the
    rest of the line, up to its newline, is skipped as it arrives.
    """

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes | None]:
        out: list[bytes | None] = []
        buf = self._buf
        start = len(buf)  # the part already searched holds no newline
        buf += data
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                # Over the limit already, unless the one extra byte is the "\r" of a "\r\n".
                too_long = len(buf) > self.max_line + buf.endswith(b"\r")
                if too_long and not self._skipping:
                    out.append(_TOO_LONG)
                    self._skipping = True
                if self._skipping:
                    buf.clear()
                return out
            # A "\r\n" terminator is not part of the line's length.
            size = nl - 1 if nl and buf[nl - 1] == 0x0D else nl
            if self._skipping:
                self._skipping = False
            elif size > self.max_line:
                out.append(_TOO_LONG)
            else:
                out.append(bytes(buf[:nl]))
            del buf[: nl + 1]
            start = 0

    def finish(self) -> bytes | None:
        """At end of input: an unterminated last line, if any (a client may omit the newline)."""
        rest = None if self._skipping or not self._buf.strip() else bytes(self._buf)
        self._buf.clear()
        return rest


# ---------------------------------------------------------------------------- the servers
@dataclass(slots=True)
class _Connections:
    """Every connection of one ``serve_query`` call (TCP and Unix together), under one limit."""

    handler: QueryHandler
    settings: QuerySettings
    active: int = 0
    open: set[_QueryConnection] = field(default_factory=set)

    def factory(self) -> _QueryConnection:
        return _QueryConnection(self)


class _QueryConnection(asyncio.Protocol):
    """One query connection, answered inside ``data_received``.

    Why a protocol and not a stream reader: a request that arrives while the engine task runs a
    slice is answered as soon as that slice yields, in the same turn of the loop that reads it.
    With a ``StreamReader`` the read only wakes a task, which runs after the engine's *next*
    slice, so every request waited for about two slices (docs/performance.md, "Query latency
    under ingest").
    There is no per-request timer either: one timer per connection checks the idle timeout
    lazily against the time of the last progress.
    """

    __slots__ = (
        "_bucket",
        "_closed",
        "_conns",
        "_eof",
        "_handler",
        "_last",
        "_lines",
        "_loop",
        "_pending",
        "_refusing",
        "_scheduled",
        "_timeout",
        "_timer",
        "_transport",
        "_write_paused",
    )

    def __init__(self, conns: _Connections) -> None:
        self._conns = conns
        self._handler = conns.handler
        self._loop = asyncio.get_running_loop()
        settings = conns.settings  # the limits as the connection opens (reload_settings)
        self._lines = LineSplitter(settings.max_line)
        self._timeout = settings.idle_timeout
        rate = settings.rate_limit
        self._bucket = TokenBucket(rate, settings.burst, self._loop.time()) if rate > 0 else None
        self._transport: asyncio.Transport | None = None
        self._pending: deque[bytes | None] = deque()  # lines read, not answered yet
        self._last = self._loop.time()  # last progress: a read, or the client taking our replies
        self._timer: asyncio.TimerHandle | None = None
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._refusing = False  # over the connection limit: one answer, then closed
        self._eof = False
        self._write_paused = False
        self._scheduled = False  # a _work call is queued (pipelined lines past one slice)

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport: no isinstance.
        self._transport = cast(asyncio.Transport, transport)
        transport = self._transport
        conns = self._conns
        conns.open.add(self)  # close_servers ends these: nothing outlives the servers
        limit = conns.settings.max_connections
        if conns.active >= limit:
            self._handler.rejected["too_many_connections"] += 1
            self._refusing = True
            # Answer one line and end our side; closing while the client's request is still
            # unread would send a reset, which can destroy the answer before the client reads it,
            # so its input is read and dropped until it closes (or _REFUSE_TIMEOUT passes).
            transport.write(error_line(f"too many connections (limit {limit})"))
            if transport.can_write_eof():
                transport.write_eof()
            self._timer = self._loop.call_later(_REFUSE_TIMEOUT, self.close)
            return
        conns.active += 1
        self._handler.connections = conns.active
        self._timer = self._loop.call_at(self._last + self._timeout, self._check_idle)

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            return
        batch = self._lines.feed(data)
        if batch:
            self._pending.extend(batch)
            if not self._scheduled:
                self._work()
        self._last = self._loop.time()

    def eof_received(self) -> bool:
        if self._refusing:
            return False  # the transport closes itself: our one line is flushed first
        last = self._lines.finish()
        if last is not None:
            self._pending.append(last)
        self._eof = True
        if not self._scheduled:
            self._work()
        return True  # kept half-open until the last answer is handed over (_work closes)

    def pause_writing(self) -> None:
        # The client does not take our replies as fast as it asks: stop reading (and answering)
        # until it does, instead of buffering replies without bound; _check_idle drops a client
        # that takes nothing for idle_timeout.
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._last = self._loop.time()
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._work)

    def connection_lost(self, exc: Exception | None) -> None:
        conns = self._conns
        conns.open.discard(self)
        if not self._refusing:
            # Counted down at once, so a client that has seen its connection end can rely on
            # its slot being free.
            conns.active -= 1
            self._handler.connections = conns.active
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending.clear()
        self._transport = None
        if not self._closed.done():
            self._closed.set_result(None)

    # -- the work --------------------------------------------------------------------------
    def _work(self) -> None:
        """Answer pending lines until none is left, a slice is spent or the replies back up."""
        self._scheduled = False
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        handler = self._handler
        bucket = self._bucket
        pending = self._pending
        loop = self._loop
        slice_start = loop.time()
        answered = 0
        try:
            while pending and not self._write_paused:
                # At least one request per turn: a slow turn (a collection, a busy machine)
                # still makes progress.
                if answered and loop.time() - slice_start > _SLICE:
                    # A client pipelining expensive requests must not hold the loop (and so the
                    # engine task) for longer than a slice: the rest waits for the next turn.
                    self._pause_reading()
                    self._scheduled = True
                    loop.call_soon(self._work)
                    return
                line = pending.popleft()
                # Every line costs a token, an over-long or invalid one too; a refused request
                # is answered without being parsed, so a flood costs us little.
                wait = 0.0 if bucket is None else bucket.take(loop.time())
                if wait > 0.0:
                    reply = handler.rate_limited(wait)
                elif line is None:
                    reply = handler.line_too_long()
                else:
                    # Answered synchronously: the engine is only mutated by the engine task on
                    # this same loop, so it cannot change while one request is being answered.
                    reply = handler.handle_line(line)
                transport.write(reply)
                answered += 1
        except Exception as e:  # a bug here ends this connection only, and is logged once
            handler.internal_error("connection", e)
            self.close()
            return
        if pending:
            return  # the client is not reading: resume_writing continues
        if self._eof:
            self.close()  # end of input, and the last reply is handed to the transport
        elif not self._write_paused and not transport.is_reading():
            transport.resume_reading()

    def _pause_reading(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing() and transport.is_reading():
            transport.pause_reading()

    def _check_idle(self) -> None:
        """The idle timer: re-armed at the last progress plus idle_timeout, or closes."""
        self._timer = None
        transport = self._transport
        if transport is None:
            return
        due = self._last + self._timeout
        if self._loop.time() < due or (self._pending and not self._write_paused):
            self._timer = self._loop.call_at(max(due, self._loop.time() + 0.01), self._check_idle)
            return
        if self._write_paused:
            transport.abort()  # has taken none of our replies for idle_timeout
        else:
            self.close()  # idle for idle_timeout

    def close(self) -> None:
        """Close after the buffered replies are flushed; abort after _CLOSE_TIMEOUT (a peer that
        never reads would hold the flush forever)."""
        transport = self._transport
        if transport is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(_CLOSE_TIMEOUT, transport.abort)
        transport.close()

    async def closed(self) -> None:
        await self._closed


@dataclass(frozen=True, slots=True)
class _Served:
    """What close_servers needs to know about a server beyond the asyncio.Server itself."""

    connections: _Connections
    unix_path: Path | None


# Keyed weakly so a server dropped without close_servers does not stay alive through this map.
_SERVED: weakref.WeakKeyDictionary[asyncio.Server, _Served] = weakref.WeakKeyDictionary()


async def serve_query(handler: QueryHandler, settings: QuerySettings) -> list[asyncio.Server]:
    """Start the TCP server (unless ``listen`` is off) and the Unix socket server (if ``unix``).

    Both share one connection limit. Stop them with ``close_servers``, which also ends every open
    connection and removes the Unix socket file.
    """
    connections = _Connections(handler, settings)
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    try:
        if settings.tcp_enabled:
            host, port = parse_hostport(settings.listen)
            server = await loop.create_server(connections.factory, host, port)
            _SERVED[server] = _Served(connections, None)
            servers.append(server)
            for sock in server.sockets:
                log.info("query_listening", address=_address(sock.getsockname()))
        if settings.unix:
            path = Path(settings.unix)
            _remove_stale_socket(path)
            server = await loop.create_unix_server(connections.factory, str(path))
            _SERVED[server] = _Served(connections, path)
            servers.append(server)
            # Created with the umask's mode first; narrowing it after bind is the portable way
            # (changing the process umask would race with other threads).
            os.chmod(path, 0o660)
            log.info("query_listening", address=str(path))
    except BaseException:
        await close_servers(servers)
        raise
    return servers


def reload_settings(servers: Iterable[asyncio.Server], settings: QuerySettings) -> None:
    """New limits for connections opened from now on (the admin ``reload``)."""
    for server in servers:
        served = _SERVED.get(server)
        if served is not None:
            served.connections.settings = settings
            served.connections.handler.settings = settings


async def close_servers(servers: Iterable[asyncio.Server]) -> None:
    """Stop accepting, end every open connection, and remove Unix socket files."""
    servers = list(servers)
    served = [_SERVED.pop(s, None) for s in servers]
    for server in servers:
        server.close()
    conns: set[_QueryConnection] = set()
    for s in served:
        if s is not None:
            conns |= s.connections.open
    for conn in conns:
        conn.close()
    if conns:
        # Each closes once its buffered replies are flushed, or is aborted after _CLOSE_TIMEOUT.
        await asyncio.gather(*(c.closed() for c in conns))
    for server in servers:
        await server.wait_closed()
    for s in served:
        if s is not None and s.unix_path is not None:
            _unlink_socket(s.unix_path)


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket file left by a daemon that is gone; refuse anything else at ``path``."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ArenadError(f"query.unix: {path} exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # A blocking probe at start-up only: connecting to a local socket answers at once.
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink(missing_ok=True)  # nobody listening: stale
        return
    except FileNotFoundError:
        return
    except OSError as e:
        raise ArenadError(f"query.unix: cannot tell whether {path} is in use: {e}") from e
    finally:
        probe.close()
    raise ArenadError(f"query.unix: {path} is in use by another process")


def _unlink_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass


def _address(sockname: Any) -> str:
    if isinstance(sockname, tuple):
        host, port = sockname[0], sockname[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(sockname)
