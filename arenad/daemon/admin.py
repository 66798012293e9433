"""The admin socket: season start, exclusions, recompute and reload — never on the query port.

Newline-delimited JSON like the query protocol, one request per line, one answer per line::

    {"op": "season_start", "name": "2026-winter", "reset": "soft"}
    {"op": "exclude", "player": "cheater", "reason": "aimbot"}
    {"op": "exclude", "server": "eu-1", "from": 1764000000, "to": 1764003600}
    {"op": "include", "rule": 3}
    {"op": "hide", "player": "alice", "reason": "asked by mail"}
    {"op": "unhide", "player": "alice"}
    {"op": "hidden"}
    {"op": "merge", "into": "guid:ABC", "player": "name:Tony", "reason": "same person"}
    {"op": "merge_steam_ids"}
    {"op": "aliases"}
    {"op": "suspects", "limit": 20}
    {"op": "exclusions"}
    {"op": "recompute", "scope": "server:eu-1", "from": 1764000000}
    {"op": "recompute_status"}
    {"op": "reload"}

Who may ask: anyone who can open the Unix socket (``[admin] unix``, mode 0600 inside the state
directory: the filesystem decides), or a TCP client (``[admin] listen``) whose every request
carries ``"token"`` equal to the contents of ``[admin] token_file`` (compared in constant time).
Operations that change what later events do (season start, exclusion rules, merges) are journaled as
control records before they take effect, so recovery and recompute apply them at the same point.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import structlog

from arenad.daemon.config import parse_hostport
from arenad.daemon.types import ControlRequest
from arenad.errors import ArenadError
from arenad.identity import SteamIdError, canonical_steam_id
from arenad.scopes import NAME_PATTERN, RESET_PRESETS, Reset, Rule, ScopeSet

log = structlog.get_logger("arenad.admin")

ADMIN_OPS = (
    "season_start",
    "exclude",
    "include",
    "hide",
    "unhide",
    "hidden",
    "merge",
    "merge_steam_ids",
    "aliases",
    "suspects",
    "exclusions",
    "recompute",
    "recompute_status",
    "reload",
    "scopes",
)
MAX_LINE = 65536
MIN_TOKEN = 16
MAX_CONNECTIONS = 16  # admin connections at once (the TCP listener is reachable by more than root)
IDLE_TIMEOUT = 300.0  # seconds an admin connection may wait between requests


class AdminError(Exception):
    """A request the operator got wrong; the message goes back as is."""


def load_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as e:
        raise ArenadError(f"admin.token_file: cannot read {path}: {e.strerror or e}") from e
    if len(token) < MIN_TOKEN:
        raise ArenadError(f"admin.token_file: the token in {path} is shorter than {MIN_TOKEN} characters")
    return token


def _time(req: dict[str, Any], key: str) -> float | None:
    v = req.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise AdminError(f"field {key!r} must be unix seconds (a finite number)")
    return float(v)


def _str(req: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    v = req.get(key)
    if v is None:
        if required:
            raise AdminError(f"missing field {key!r}")
        return None
    if not isinstance(v, str) or not v or len(v.encode()) > 256:
        raise AdminError(f"field {key!r} must be a non-empty string of at most 256 bytes")
    return v


class AdminPort(Protocol):
    """What the admin operations may see and do in a running daemon (``service.py`` implements
    it over the daemon's rooms): read the scopes, journal a control record through the engine
    task, scan history, ask for a recompute. Nothing else of the daemon is reachable from here."""

    @property
    def stopping(self) -> bool: ...

    @property
    def scopes(self) -> ScopeSet: ...

    @property
    def excluded(self) -> int: ...

    def control_time(self) -> float:
        """The event time a control record journaled now gets (never before the ladder's clock)."""
        ...

    async def journal_control(self, request: ControlRequest) -> None:
        """Journal ``request`` through the engine task; returns once it is applied (its ``seq`` set)."""
        ...

    async def first_match_time(self, rule: Rule, upto: int) -> float | None:
        """Event time of the first record in history up to ``upto`` that ``rule`` matches."""
        ...

    async def request_recompute(self, scope: str | None, from_t: float | None, reason: str) -> dict[str, Any]:
        """Start a recompute (on a cluster replica: on every replica, through the stream)."""
        ...

    def recompute_status(self) -> dict[str, Any]: ...


class AdminHandler:
    """Answers admin requests through an ``AdminPort``."""

    def __init__(self, daemon: AdminPort, reload: Callable[[], list[str]] | None = None) -> None:
        self.daemon = daemon
        self._reload = reload
        self._lock = asyncio.Lock()  # one mutating operation at a time (rule ids, season names)
        self.requests = 0

    async def handle_line(self, line: bytes, token: str | None) -> bytes:
        head: dict[str, Any] = {}
        try:
            try:
                req = json.loads(line)
            except (ValueError, UnicodeDecodeError) as e:
                raise AdminError(f"not a JSON object: {e}") from None
            if not isinstance(req, dict):
                raise AdminError("not a JSON object")
            if "id" in req:
                head["id"] = req["id"] if isinstance(req["id"], (str, int)) else None
            if token is not None:
                given = req.get("token")
                if not isinstance(given, str) or not hmac.compare_digest(given.encode(), token.encode()):
                    log.warning("admin_denied", reason="bad token")
                    raise AdminError("forbidden: a valid token is required")
            op = req.get("op")
            if op not in ADMIN_OPS:
                raise AdminError(f"unknown op {op!r} (one of: {', '.join(ADMIN_OPS)})")
            self.requests += 1
            body = await getattr(self, f"_op_{op}")(req)
            out = {"ok": True, "op": op, **head, **body}
        except AdminError as e:
            out = {"ok": False, **head, "error": str(e)}
        except Exception as e:  # the daemon goes on; the operator sees what failed
            log.error("admin_failed", exc_info=e)
            out = {"ok": False, **head, "error": f"internal error: {type(e).__name__}: {e}"}
        return (json.dumps(out, allow_nan=False, default=str) + "\n").encode()

    # -- journaled operations ------------------------------------------------------------------
    async def _journal(self, op: str, args: dict[str, Any]) -> int:
        """Journal a control record through the engine task; its sequence number once applied."""
        d = self.daemon
        if d.stopping:
            raise AdminError("the daemon is stopping")
        req = ControlRequest(op, args, t=d.control_time())
        await d.journal_control(req)
        return req.seq

    async def _op_season_start(self, req: dict[str, Any]) -> dict[str, Any]:
        d = self.daemon
        name = _str(req, "name", required=True)
        assert name is not None
        if not NAME_PATTERN.match(name):
            raise AdminError("season name must be 1-64 letters, digits, '.', '_' or '-'")
        if not d.scopes.config.on("season"):
            raise AdminError('seasons are not enabled: add "season" to [scopes] kinds')
        preset = req.get("reset")
        if preset is None:
            reset = d.scopes.config.season_reset
        elif preset == "custom":
            reset = Reset(float(req.get("alpha", 1.0)), float(req.get("lambda", 0.0)))
        elif preset in RESET_PRESETS:
            reset = RESET_PRESETS[preset]
        else:
            raise AdminError(f"reset must be one of: {', '.join((*RESET_PRESETS, 'custom'))}")
        bad = reset.problems()
        if bad:
            raise AdminError("; ".join(bad))
        async with self._lock:
            if f"season:{name}" in d.scopes.engines:
                raise AdminError(f"season {name!r} exists already")
            seq = await self._journal(
                "season_start", {"name": name, "alpha": reset.alpha, "lambda": reset.lam}
            )
        return {"season": name, "alpha": reset.alpha, "lambda": reset.lam, "seq": seq}

    async def _op_exclude(self, req: dict[str, Any]) -> dict[str, Any]:
        d = self.daemon
        player = _str(req, "player")
        server = _str(req, "server")
        start = _time(req, "from")
        end = _time(req, "to")
        reason = req.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 1000:
            raise AdminError("field 'reason' must be a string of at most 1000 characters")
        if (player is None) == (server is None):
            raise AdminError("give exactly one of 'player' or 'server'")
        if player is not None and (start is not None or end is not None):
            raise AdminError("a player rule excludes all of the player's events: no 'from'/'to'")
        if start is not None and end is not None and end <= start:
            raise AdminError("'to' must be after 'from'")
        async with self._lock:
            rule = Rule(
                id=d.scopes.exclusions.next_id(),
                player=player,
                server=server,
                start=-math.inf if start is None else start,
                end=math.inf if end is None else end,
                reason=reason,
            )
            seq = await self._journal("exclude", rule.as_dict())
        status = await self._recompute_for(rule, seq, f"exclude rule {rule.id}")
        return {"rule": rule.as_dict(), "seq": seq, "recompute": status}

    async def _op_include(self, req: dict[str, Any]) -> dict[str, Any]:
        d = self.daemon
        rid = req.get("rule")
        if isinstance(rid, bool) or not isinstance(rid, int):
            raise AdminError("field 'rule' must be a rule id (see op 'exclusions')")
        async with self._lock:
            rule = next((r for r in d.scopes.exclusions.rules if r.id == rid), None)
            if rule is None:
                raise AdminError(f"no exclusion rule {rid}")
            seq = await self._journal("include", {"id": rid})
        status = await self._recompute_for(rule, seq, f"include rule {rid}")
        return {"removed": rule.as_dict(), "seq": seq, "recompute": status}

    async def _op_hide(self, req: dict[str, Any]) -> dict[str, Any]:
        """Leave a player out of public lists (top, pages, API); their rating still counts."""
        player = _str(req, "player", required=True)
        assert player is not None
        reason = req.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 1000:
            raise AdminError("field 'reason' must be a string of at most 1000 characters")
        async with self._lock:
            already = player in self.daemon.scopes.hidden
            seq = 0 if already else await self._journal("hide", {"player": player, "reason": reason})
        return {"player": player, "hidden": True, "changed": not already, "seq": seq}

    async def _op_unhide(self, req: dict[str, Any]) -> dict[str, Any]:
        player = _str(req, "player", required=True)
        assert player is not None
        async with self._lock:
            was = player in self.daemon.scopes.hidden
            seq = await self._journal("unhide", {"player": player}) if was else 0
        return {"player": player, "hidden": False, "changed": was, "seq": seq}

    async def _op_hidden(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"players": sorted(self.daemon.scopes.hidden)}

    async def _op_merge(self, req: dict[str, Any]) -> dict[str, Any]:
        """Rate ``player`` as ``into`` from now on, and re-rate ``player``'s history as ``into``'s
        by a recompute from its first event (a journaled rule, like an exclusion: issue 17)."""
        d = self.daemon
        into = _str(req, "into", required=True)
        player = _str(req, "player", required=True)
        assert into is not None and player is not None
        reason = req.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 1000:
            raise AdminError("field 'reason' must be a string of at most 1000 characters")
        async with self._lock:
            ex = d.scopes.exclusions
            known = d.scopes.global_engine.ids
            if into == player:
                raise AdminError(f"cannot merge {player!r} into itself")
            if ex.resolve(player) != player:
                raise AdminError(
                    f"{player!r} is merged into {ex.resolve(player)!r} already (see op 'aliases')"
                )
            if ex.resolve(into) != into:
                raise AdminError(f"{into!r} is merged into {ex.resolve(into)!r}: merge into that player")
            if into not in known:
                raise AdminError(f"no player {into!r}: merge into a player who has played")
            if player not in known:
                raise AdminError(f"no player {player!r}: nothing to merge")
            rule = Rule(id=ex.next_id(), player=player, into=into, reason=reason)
            seq = await self._journal("merge", rule.as_dict())
        status = await self._recompute_for(rule, seq, f"merge rule {rule.id}")
        return {"rule": rule.as_dict(), "seq": seq, "recompute": status}

    async def _op_merge_steam_ids(self, req: dict[str, Any]) -> dict[str, Any]:
        """The upgrade to one spelling of Steam IDs (issue 17): every player rated under a Steam2
        spelling (``steam:STEAM_1:X:Y``, as the Source feed wrote them before) is merged into
        ``steam:[U:1:Z]``, and one recompute re-rates their history under it."""
        d = self.daemon
        merged: list[dict[str, Any]] = []
        async with self._lock:
            ex = d.scopes.exclusions
            for name in sorted(d.scopes.global_engine.ids):
                if not name.startswith("steam:STEAM_") or ex.resolve(name) != name:
                    continue
                try:
                    into = "steam:" + canonical_steam_id(name.removeprefix("steam:"))
                except SteamIdError:
                    continue  # not an account: left as it is
                rule = Rule(id=ex.next_id(), player=name, into=into, reason="one spelling of Steam IDs")
                await self._journal("merge", rule.as_dict())  # applied on return: next_id moves on
                merged.append(rule.as_dict())
        status = await d.request_recompute(None, None, "canonical Steam IDs") if merged else None
        return {"merges": merged, "recompute": status}

    async def _op_aliases(self, req: dict[str, Any]) -> dict[str, Any]:
        """The merges in force (undo one with op include and its rule id) and whom each player
        is rated as."""
        ex = self.daemon.scopes.exclusions
        return {"merges": [r.as_dict() for r in ex.merges()], "aliases": dict(sorted(ex.aliases.items()))}

    async def _op_suspects(self, req: dict[str, Any]) -> dict[str, Any]:
        """The boosting report (``arenad.gates``): pairs far above chance, most suspicious first."""
        limit = req.get("limit", 50)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10000:
            raise AdminError("field 'limit' must be an integer in 1..10000")
        gates = self.daemon.scopes.gates
        if gates is None or not gates.config.suspects:
            raise AdminError("the boosting report is off: set [gates] suspects = true")
        found = gates.suspects()
        cfg = gates.config
        return {
            "suspects": [s.as_dict() for s in found[:limit]],
            "total": len(found),
            "window": cfg.suspect_window,
            "p": cfg.suspect_p,
            "min_kills": cfg.suspect_min_kills,
        }

    async def _recompute_for(self, rule: Rule, upto: int, reason: str) -> dict[str, Any] | None:
        """Recompute from the first event the rule matches (None when it matches nothing)."""
        d = self.daemon
        if rule.player is None:
            from_t: float | None = rule.start
        else:
            from_t = await d.first_match_time(rule, upto)
            if from_t is None:
                return None  # the player never played: nothing to recompute
        return await d.request_recompute(
            None, from_t if from_t is not None and math.isfinite(from_t) else None, reason
        )

    # -- reads and jobs --------------------------------------------------------------------------
    async def _op_exclusions(self, req: dict[str, Any]) -> dict[str, Any]:
        d = self.daemon
        rules = [r.as_dict() for r in d.scopes.exclusions.rules if r.into is None]  # merges: op aliases
        return {"rules": rules, "excluded": d.excluded}

    async def _op_recompute(self, req: dict[str, Any]) -> dict[str, Any]:
        d = self.daemon
        scope = _str(req, "scope")
        key = None
        if scope is not None and scope != "all":
            try:
                key = d.scopes.resolve(scope)
            except (KeyError, ValueError) as e:
                raise AdminError(f"scope {scope!r}: {e.args[0] if e.args else e}") from None
        from_t = _time(req, "from")
        return {"recompute": await d.request_recompute(key, from_t, "admin")}

    async def _op_recompute_status(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"recompute": self.daemon.recompute_status()}

    async def _op_scopes(self, req: dict[str, Any]) -> dict[str, Any]:
        d = self.daemon
        return {
            "scopes": {
                key: {
                    "players": len(e),
                    "active": e.active_count,
                    "applied": e.applied,
                    "closed": key in d.scopes.closed,
                }
                for key, e in d.scopes.engines.items()
            },
            "season": d.scopes.season,
            "excluded": d.excluded,
        }

    async def _op_reload(self, req: dict[str, Any]) -> dict[str, Any]:
        if self._reload is None:
            raise AdminError("this daemon was started without a config file: nothing to reload")
        try:
            changed = self._reload()
        except ArenadError as e:
            raise AdminError(str(e)) from None
        return {"changed": changed}


async def serve_admin(
    handler: AdminHandler, unix: Path | None, tcp: str | None, token: str | None
) -> list[asyncio.Server]:
    """The Unix socket (mode 0600) and, with a token, a TCP listener."""

    slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tok: str | None) -> None:
        if slots.locked():
            writer.write(b'{"ok": false, "error": "too many admin connections"}\n')
            writer.close()
            return
        async with slots:
            await _session(reader, writer, tok)

    async def _session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tok: str | None) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_TIMEOUT):
                        line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as e:
                    line = e.partial
                    if not line.strip():
                        return
                except TimeoutError:
                    return  # idle: an admin session is a few requests, not a standing line
                except asyncio.LimitOverrunError:
                    writer.write(b'{"ok": false, "error": "request line too long"}\n')
                    await writer.drain()
                    return
                if not line.strip():
                    continue
                writer.write(await handler.handle_line(line, tok))
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    servers: list[asyncio.Server] = []
    if unix is not None:
        if unix.exists() or unix.is_symlink():
            unix.unlink()  # the state directory is locked by this daemon: a leftover socket
        srv = await asyncio.start_unix_server(lambda r, w: session(r, w, None), str(unix), limit=MAX_LINE)
        os.chmod(unix, 0o600)
        servers.append(srv)
        log.info("admin_listening", address=str(unix))
    if tcp is not None:
        if token is None:
            raise ArenadError("admin.listen needs admin.token_file")
        host, port = parse_hostport(tcp)
        srv = await asyncio.start_server(lambda r, w: session(r, w, token), host, port, limit=MAX_LINE)
        servers.append(srv)
        log.info("admin_listening", address=tcp, token=True)
    return servers
