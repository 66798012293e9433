"""The in-game room: chat commands answered over rcon, and announcements of rating changes.

::

    followed logs ──ChatLine──> InGame.chat ──> commands.answer ──┐
    engine task ──RatingChange─> InGame.offer (placed, promoted,  ├─> per-server bounded queue
                                 demoted, a new #1)               ┘      └─> sender task ─> rcon

``chat`` and ``offer`` are called on the event loop between engine steps, read the live ladder
through the read port (``scopes()``), never await and never raise: an answer is computed there
(a few dictionary look-ups) and queued. One sender task per server takes the queue, waits for the
server's token bucket (``server_rate``), and sends; a full queue drops the newest reply, counted.
A player over ``player_rate`` is not answered (counted), nor is a server's announcement over
``announce_rate``. Every rcon failure (wrong password, timeout, unreachable, protocol) is
counted by server and reason and logged at most once per ``failure_log_interval`` per server;
the daemon goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, Metric

from arenad.core.engine import Engine
from arenad.daemon.config import parse_hostport
from arenad.daemon.config_ingame import InGameSettings, RconServer
from arenad.daemon.notify import RatingChange
from arenad.daemon.secrets import read_secret
from arenad.errors import ConfigError, ConfigProblem
from arenad.feeds import ChatLine
from arenad.ingame.commands import Speaker, answer, display_name, parse
from arenad.ingame.rcon import Quake3Rcon, Rcon, RconError, SourceRcon
from arenad.scopes import ScopeSet
from arenad.views import TokenBucket

log = structlog.get_logger("arenad.ingame")

#: Players whose rate-limit bucket and display name are remembered (least recently used go).
MAX_PLAYERS = 10_000
#: Reply results counted (arenad_ingame_replies_total{result}).
RESULTS = ("sent", "failed", "dropped", "no_server")
#: What happened to chat lines (arenad_ingame_chat_total{outcome}).
CHAT_OUTCOMES = ("command", "usage", "ignored", "unresolved", "rate_limited")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One rcon message: to ``target`` (a client number or ``#userid``), or said to all."""

    kind: str  # "reply" | "announce"
    target: str | None
    text: str


def make_client(server: RconServer, password: str, timeout: float) -> Rcon:
    host, port = parse_hostport(server.address)
    if server.kind == "source":
        return SourceRcon(host, port, password, timeout)
    return Quake3Rcon(host, port, password, timeout)


class InGame:
    """Built from ``[ingame]`` and handed a read port: ``scopes()`` returns the live ScopeSet."""

    def __init__(
        self,
        settings: InGameSettings,
        scopes: Callable[[], ScopeSet],
        *,
        clock: Callable[[], float] = time.monotonic,
        clients: dict[str, Rcon] | None = None,
    ) -> None:
        self.settings = settings
        self._scopes = scopes
        self._clock = clock
        self._clients: dict[str, Rcon] = dict(clients or {})
        self._queues: dict[str, asyncio.Queue[Outgoing]] = {
            s.name: asyncio.Queue(maxsize=settings.queue) for s in settings.servers
        }
        self._players: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()
        self._announce_buckets: dict[str, TokenBucket] = {}
        #: The last name each identity was seen with in the chat (for !top and lookups).
        self.names: OrderedDict[str, str] = OrderedDict()
        self._announce = frozenset(settings.announce)
        self._top1: str | None = None
        self._top1_known = False
        # Counters, read at scrape time by the collector.
        self.chat_lines: Counter[str] = Counter(dict.fromkeys(CHAT_OUTCOMES, 0))
        self.commands: Counter[str] = Counter()
        self.replies: Counter[str] = Counter(dict.fromkeys(RESULTS, 0))
        self.announcements: Counter[str] = Counter()
        self.failures: Counter[tuple[str, str]] = Counter()
        self.internal_errors = 0
        self._failure_logged: dict[str, float] = {}
        self._wake: dict[str, asyncio.Event] = {}

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    # ------------------------------------------------------------------ start
    def check(self) -> None:
        """Read every server's rcon password (a ``ConfigError`` names the key) and build its client."""
        for k, server in enumerate(self.settings.servers):
            if server.name in self._clients:
                continue  # handed in (tests)
            key = f"ingame.servers[{k}]"
            password = read_secret(
                server.password_env, server.password_file, f"{key}.password_env", f"{key}.password_file"
            )
            assert password is not None  # the settings require one of the two
            try:
                self._clients[server.name] = make_client(server, password, self.settings.timeout)
            except ValueError as e:
                where = f"{key}.password_env" if server.password_env else f"{key}.password_file"
                raise ConfigError([ConfigProblem(where, "<secret>", str(e))]) from e

    # ------------------------------------------------------------------ the chat sink
    def chat(self, line: ChatLine) -> None:
        """A chat line from a followed log: answered if it is a command. Never raises."""
        try:
            self._chat(line)
        except Exception:  # a bug here must cost one reply, not the follower
            self.internal_errors += 1
            if self.internal_errors == 1:
                log.exception("ingame_chat_failed")

    def _chat(self, line: ChatLine) -> None:
        s = self.settings
        cmd = parse(line.text, s.prefix)
        if cmd is None:
            self.chat_lines["ignored"] += 1
            return
        if line.slot is None or line.player is None:
            self.chat_lines["unresolved"] += 1  # the name matched no single slot: whom to answer?
            return
        if line.server not in self._queues:
            self.replies["no_server"] += 1  # a log whose server has no [[ingame.servers]] entry
            return
        self._remember(line.player, line.name)
        if self._player_bucket(line.server, line.player).take(self._clock()) > 0:
            self.chat_lines["rate_limited"] += 1
            return
        self.chat_lines["usage" if cmd.usage else "command"] += 1
        self.commands[cmd.name] += 1
        scopes = self._scopes()
        eng = self._engine(scopes)
        lines = answer(
            cmd,
            Speaker(line.player, line.name),
            eng,
            s.templates,
            sessions=lambda player: _session(scopes, player),
            names=self.names,
            hidden=scopes.hidden,
        )
        for text in lines:
            self._put(line.server, Outgoing("reply", line.slot, text))

    def _engine(self, scopes: ScopeSet) -> Engine:
        try:
            return scopes.engines[scopes.resolve(self.settings.scope)]
        except (KeyError, ValueError):
            return scopes.global_engine  # a season or event scope not open (yet): the global ladder

    def _remember(self, player: str, name: str) -> None:
        names = self.names
        names[player] = name
        names.move_to_end(player)
        if len(names) > MAX_PLAYERS:
            names.popitem(last=False)

    def _player_bucket(self, server: str, player: str) -> TokenBucket:
        key = (server, player)
        bucket = self._players.get(key)
        if bucket is None:
            s = self.settings
            bucket = self._players[key] = TokenBucket(s.player_rate, s.player_burst, self._clock())
            if len(self._players) > MAX_PLAYERS:
                self._players.popitem(last=False)
        self._players.move_to_end(key)
        return bucket

    def _put(self, server: str, out: Outgoing) -> None:
        try:
            self._queues[server].put_nowait(out)
        except asyncio.QueueFull:
            self.replies["dropped"] += 1  # the newest goes: the server is slow or gone

    # ------------------------------------------------------------------ announcements
    def offer(self, change: RatingChange) -> None:
        """A rating change from the engine task (as the notifier gets it). Never raises."""
        try:
            self._offer(change)
        except Exception:
            self.internal_errors += 1
            if self.internal_errors == 1:
                log.exception("ingame_offer_failed")

    def _offer(self, change: RatingChange) -> None:
        if not self._announce or change.scope != self._scope_key():
            return
        server = change.server
        if change.kind in self._announce:
            self._announce_to(server, change.kind, self._change_fields(change))
        if "top1" in self._announce:
            self._check_top1(server)

    def _scope_key(self) -> str:
        try:
            return self._scopes().resolve(self.settings.scope)
        except (KeyError, ValueError):
            return "global"

    def _change_fields(self, change: RatingChange) -> dict[str, Any]:
        return {
            "name": display_name(change.player, self.names),
            "tier": change.tier or "unplaced",
            "old_tier": change.old_tier or "unplaced",
            "rank": change.rank if change.rank is not None else 0,
            "rating": change.mu if math.isfinite(change.mu) else 0.0,
            "server": change.server or "",
        }

    def _check_top1(self, server: str | None) -> None:
        eng = self._engine(self._scopes())
        top = eng.top(1)
        leader = eng.names[top[0]] if top else None
        if not self._top1_known:
            self._top1, self._top1_known = leader, True  # the #1 when we started: not news
            return
        if leader is None or leader == self._top1:
            return
        self._top1 = leader
        i = top[0]
        fields = {
            "name": display_name(leader, self.names),
            "rating": eng.mu(i),
            "tier": eng.tier_of(i) or "unplaced",
            "server": server or "",
        }
        self._announce_to(server, "top1", fields)

    def _announce_to(self, server: str | None, kind: str, fields: dict[str, Any]) -> None:
        if server is None or server not in self._queues:
            self.announcements[f"{kind}:no_server"] += 1
            return
        s = self.settings
        bucket = self._announce_buckets.get(server)
        if bucket is None:
            bucket = self._announce_buckets[server] = TokenBucket(
                s.announce_rate, s.announce_burst, self._clock()
            )
        if bucket.take(self._clock()) > 0:
            self.announcements[f"{kind}:rate_limited"] += 1
            return
        self.announcements[f"{kind}:queued"] += 1
        template: str = getattr(s.templates, kind)
        self._put(server, Outgoing("announce", None, template.format_map(fields)))

    # ------------------------------------------------------------------ the senders
    async def run(self, stop: asyncio.Event) -> None:
        """One sender per server until ``stop``; what is still queued then is dropped (counted)."""
        if "top1" in self._announce and not self._top1_known:
            self._check_top1(None)  # the current #1, so only a change is announced
        try:
            async with asyncio.TaskGroup() as tg:
                for name in self._queues:
                    tg.create_task(self._sender(name, stop), name=f"ingame:{name}")
        finally:
            for name, q in self._queues.items():
                self.replies["dropped"] += q.qsize()
                client = self._clients.get(name)
                if client is not None:
                    client.close()

    async def _sender(self, server: str, stop: asyncio.Event) -> None:
        queue = self._queues[server]
        s = self.settings
        bucket = TokenBucket(s.server_rate, s.server_burst, self._clock())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                getting = asyncio.ensure_future(queue.get())
                await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():
                    getting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getting
                    return
                out = getting.result()
                wait = bucket.take(self._clock())
                while wait > 0:  # the server's own limit: wait rather than flood its rcon
                    await asyncio.sleep(min(wait, 1.0))
                    wait = bucket.take(self._clock())
                await self._send(server, out)
        finally:
            stopping.cancel()

    async def _send(self, server: str, out: Outgoing) -> None:
        client = self._clients.get(server)
        if client is None:
            self.replies["failed"] += 1
            return
        try:
            if out.target is None:
                await client.say(out.text)
            else:
                await client.tell(out.target, out.text)
        except RconError as e:
            self._failed(server, e.reason, str(e))
        except Exception as e:  # a bug or a library surprise: counted, logged, and we go on
            self._failed(server, "error", f"{type(e).__name__}: {e}")
        else:
            self.replies["sent"] += 1

    def _failed(self, server: str, reason: str, message: str) -> None:
        self.replies["failed"] += 1
        self.failures[(server, reason)] += 1
        now = self._clock()
        last = self._failure_logged.get(server, -math.inf)
        if now - last >= self.settings.failure_log_interval:
            self._failure_logged[server] = now
            log.warning(
                "rcon_failed",
                server=server,
                reason=reason,
                error=message[:200],
                failures=sum(n for (srv, _), n in self.failures.items() if srv == server),
            )

    # ------------------------------------------------------------------ metrics
    def collectors(self) -> list[Any]:
        return [_Collector(self)]


def _session(scopes: ScopeSet, player: str) -> tuple[float, int, int] | None:
    """The global ladder's session in progress of ``player``: (change, kills, deaths)."""
    sessions = scopes.sessions
    g = scopes.global_engine
    i = g.ids.get(player)
    if sessions is None or i is None:
        return None
    current = sessions.current(g, i)
    if current is None:
        return None
    return current.delta, current.kills, current.deaths


class _Collector:
    """``arenad_ingame_*``: the in-game room's counters, read at scrape time."""

    def __init__(self, room: InGame) -> None:
        self.room = room

    def collect(self) -> Iterator[Metric]:
        r = self.room
        chat = CounterMetricFamily(
            "arenad_ingame_chat", "Chat lines read by the in-game commands, by outcome.", labels=["outcome"]
        )
        for outcome in CHAT_OUTCOMES:
            chat.add_metric([outcome], r.chat_lines[outcome])
        yield chat
        commands = CounterMetricFamily(
            "arenad_ingame_commands", "In-game commands answered, by command.", labels=["command"]
        )
        for name, n in sorted(r.commands.items()):
            commands.add_metric([name], n)
        yield commands
        replies = CounterMetricFamily(
            "arenad_ingame_replies",
            "Rcon messages (replies and announcements) by result: sent, failed, dropped (queue "
            "full or left at stop), no_server (no [[ingame.servers]] entry).",
            labels=["result"],
        )
        for result in RESULTS:
            replies.add_metric([result], r.replies[result])
        yield replies
        ann = CounterMetricFamily(
            "arenad_ingame_announcements", "Announcements by kind and outcome.", labels=["kind", "outcome"]
        )
        for key, n in sorted(r.announcements.items()):
            kind, _, outcome = key.partition(":")
            ann.add_metric([kind, outcome], n)
        yield ann
        fail = CounterMetricFamily(
            "arenad_ingame_rcon_failures",
            "Rcon commands a game server did not take, by server and reason (auth, timeout, "
            "unreachable, protocol, error).",
            labels=["server", "reason"],
        )
        for (server, reason), n in sorted(r.failures.items()):
            fail.add_metric([server, reason], n)
        yield fail
