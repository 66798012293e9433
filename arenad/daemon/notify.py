"""Optional publishing of rating and tier changes to MQTT, so game servers can announce promotions.

``[notify]`` (``NotifySettings``) is off by default. When on, the engine task hands each change to
``Notifier.offer`` — O(1), never awaits, never raises for a full queue — and ``Notifier.run``
publishes them from a bounded queue over its own MQTT connection (separate from the ``[mqtt]``
source's, with its own ``client_id``: a broker disconnects the older of two clients sharing one).

What is published
    ``changes = "tiers"`` (the default) sends placements, promotions and demotions (kinds
    ``placed``, ``promoted``, ``demoted``); ``"all"`` also sends every plain rating change (kind
    ``rating``). Only changes of the scopes listed in ``scopes`` are sent: exact scope keys
    (``"global"``, ``"server:eu-1"``, ``"season:2026-Q4"``, ``"event:cup"``), every scope of a kind
    (``"server:*"``, ``"season:*"``, ``"event:*"``), or ``"*"`` for all of them.

    The payload is one compact JSON object (UTF-8)::

        {"player": "...", "scope": "global", "kind": "promoted", "tier": "2H", "old_tier": "3L",
         "mu": 27.1, "sigma": 2.3, "rank": 41, "t": 1767225600.0, "server": "eu-1"}

    ``tier``/``old_tier``/``rank``/``server`` may be ``null``; ``mu``, ``sigma`` and ``t`` are
    numbers, or ``null`` if not finite (the JSON never holds NaN or Infinity).

Topics
    ``topic`` is a template with ``{server}`` (required) and optionally ``{scope}``. ``{server}``
    becomes the event's server id, or ``_`` for an event without one (a server literally named
    ``_`` is written ``%5F``). Substituted values are percent-encoded where MQTT would misread
    them: ``%``, ``/``, ``+``, ``#``, control characters and a leading ``$`` (decode a level with
    ``urllib.parse.unquote``). A server id ``eu-1`` stays ``eu-1``.

    * ``retain = false``: every change goes to the topic itself, ``arena/eu-1/ratings``, not
      retained. Subscribe to ``arena/<server>/ratings`` (or ``arena/+/ratings``).
    * ``retain = true``: every change goes *instead* to the per-player topic
      ``<topic>/<player>``, e.g. ``arena/eu-1/ratings/Alice``, with the retain flag. The broker
      keeps the newest message of each player on each server, so a game server that subscribes to
      ``arena/eu-1/ratings/+`` late (after a restart, say) first receives every player's latest
      state there, then live changes. Retained messages stay at the broker until overwritten or
      cleared (publish an empty retained message to the topic); one exists per player and server.
      The state is the one published with the player's last change *on that server*: a later
      change elsewhere (another server, for the global ladder) goes to that server's topic. With
      more than one scope listed the template must contain ``{scope}``, or one scope's retained
      message would overwrite another's.

Delivery
    QoS 0 or 1 (``qos``). Changes waiting while the broker is unreachable stay queued (at most
    ``queue``; when full, the *oldest* is dropped and ``dropped`` counts it: a game server cares
    more about the current state than a stale announcement). With QoS 1 a change is published again
    after a reconnect unless the broker acknowledged it, so a subscriber may, rarely, see one twice;
    ``t`` and the retained per-player state make that harmless. Up to ``WINDOW`` publishes are in
    flight at once, so throughput is not bounded by one broker round trip per change.

Stopping
    When ``stop`` is set, ``run`` keeps publishing what is queued for at most ``flush_timeout``
    seconds (2 s by default) if it is connected, then disconnects cleanly. Whatever is still
    queued then (or at once, when not connected) is counted in ``dropped`` and logged.

Changes offered before ``run`` starts are queued (bounded) and sent once it connects.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import ssl
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
import structlog

from arenad.daemon.config import MqttSettings, _need_num, _need_str, _off
from arenad.daemon.sources.mqtt import backoff_delay, broker_address, load_password, tls_context
from arenad.errors import ConfigError, ConfigProblem

log = structlog.get_logger("arenad.notify")

#: Change kinds: a first placement into a tier, a tier up, a tier down, a rating move within a tier.
KINDS: tuple[str, ...] = ("placed", "promoted", "demoted", "rating")
TIER_KINDS: frozenset[str] = frozenset(("placed", "promoted", "demoted"))
CHANGES_MODES = ("tiers", "all")
#: Scope kinds a ``scopes`` entry may name (the ``arenad.scopes`` kinds).
SCOPE_KINDS = ("global", "server", "season", "event")
#: Publishes in flight at once on one connection.
WINDOW = 64
#: Largest ``queue``: a change is a few hundred bytes, so this bounds memory at a few hundred MB.
MAX_QUEUE = 1_000_000
#: Seconds ``run`` keeps publishing after ``stop`` (while connected).
FLUSH_TIMEOUT = 2.0
#: Seconds between two "changes dropped" warnings.
DROP_LOG_INTERVAL = 10.0
_MAX_TOPIC_TEMPLATE = 1024  # bytes; player and server ids add at most 3 x 128 x 3 more

_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
# Characters a topic level must not contain raw: MQTT wildcards, the level separator, NUL and other
# control characters (MQTT 3.1.1 §1.5.3), and '%' itself so the encoding can be undone.
_UNSAFE = re.compile(r"[%/+#\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """``[notify]``: publish rating/tier changes to an MQTT broker (off by default)."""

    mqtt: str = "off"  # broker URL, "mqtt://HOST[:PORT]" or "mqtts://HOST[:PORT]"; "off" disables
    username: str = ""
    password_env: str = ""  # name of an environment variable holding the password
    password_file: str = ""  # or a file whose first line is the password
    ca_file: str = ""  # CA bundle for mqtts:// (the system store when empty)
    client_id: str = "arenad-notify"  # must differ from [mqtt] client_id
    topic: str = "arena/{server}/ratings"  # {server} required ("_" without one); {scope} optional
    changes: str = "tiers"  # "tiers": placed/promoted/demoted; "all": every rating change too
    retain: bool = False  # true: retained, per player, on <topic>/<player> instead of <topic>
    qos: int = 0  # 0 or 1
    queue: int = 10_000  # changes waiting to be published; when full the oldest is dropped
    scopes: tuple[str, ...] = ("global",)  # scope keys, "<kind>:*", or "*"

    @property
    def enabled(self) -> bool:
        return isinstance(self.mqtt, str) and not _off(self.mqtt)

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        plain = False  # a valid mqtt:// URL (no TLS)
        if _need_str(out, "notify", self, "mqtt") and self.enabled:
            problem = _url_problem(self.mqtt)
            if problem:
                out.append(ConfigProblem("notify.mqtt", self.mqtt, problem))
            else:
                plain = urlsplit(self.mqtt).scheme not in ("mqtts", "ssl")
        strings_ok = True
        for key in ("username", "password_env", "password_file"):
            strings_ok = _need_str(out, "notify", self, key) and strings_ok
        if strings_ok:
            if self.password_env and self.password_file:
                out.append(
                    ConfigProblem(
                        "notify.password_file",
                        self.password_file,
                        "name one of password_env or password_file",
                    )
                )
            if (self.password_env or self.password_file) and not self.username:
                key = "notify.password_env" if self.password_env else "notify.password_file"
                value = self.password_env or self.password_file
                out.append(ConfigProblem(key, value, "a password needs notify.username"))
        if _need_str(out, "notify", self, "ca_file") and self.ca_file and plain:
            out.append(ConfigProblem("notify.ca_file", self.ca_file, "is only used with an mqtts:// URL"))
        if _need_str(out, "notify", self, "client_id", allow_empty=False) and (
            len(self.client_id.encode("utf-8", "replace")) > 65535 or "\x00" in self.client_id
        ):
            out.append(ConfigProblem("notify.client_id", self.client_id, "not a valid MQTT client id"))
        scopes_ok = _scope_problems(out, self.scopes)
        if _need_str(out, "notify", self, "topic", allow_empty=False):
            problem = _topic_problem(self.topic)
            if problem:
                out.append(ConfigProblem("notify.topic", self.topic, problem))
            elif (
                self.retain is True
                and scopes_ok
                and "{scope}" not in self.topic
                and (len(self.scopes) > 1 or any(s.endswith("*") for s in self.scopes))
            ):
                out.append(
                    ConfigProblem(
                        "notify.topic",
                        self.topic,
                        "with retain = true and more than one scope the topic needs {scope}, or the "
                        "retained message of one scope would overwrite another's",
                    )
                )
        if self.changes not in CHANGES_MODES:
            out.append(
                ConfigProblem(
                    "notify.changes",
                    self.changes,
                    'must be "tiers" (placements, promotions, demotions) or "all" (every rating change)',
                )
            )
        if not isinstance(self.retain, bool):
            out.append(ConfigProblem("notify.retain", self.retain, "must be true or false"))
        if isinstance(self.qos, bool) or self.qos not in (0, 1):
            out.append(ConfigProblem("notify.qos", self.qos, "must be 0 or 1"))
        _need_num(out, "notify", self, "queue", lo=1, hi=MAX_QUEUE, integer=True)
        return out

    def conflicts(self, mqtt: MqttSettings) -> list[ConfigProblem]:
        """Problems between ``[notify]`` and ``[mqtt]``: one client id for both connections."""
        if (
            self.enabled
            and mqtt.enabled
            and isinstance(self.client_id, str)
            and self.client_id == mqtt.client_id
        ):
            return [
                ConfigProblem(
                    "notify.client_id",
                    self.client_id,
                    "must differ from mqtt.client_id: a broker disconnects the older of two clients "
                    "with one id",
                )
            ]
        return []


def _url_problem(url: str) -> str:
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as e:
        return f"not a broker URL ({e})"
    if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
        return 'must be "mqtt://HOST[:PORT]", "mqtts://HOST[:PORT]" or "off"'
    if not parts.hostname:
        return "no host"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must be just mqtt://HOST[:PORT] (no path or query)"
    return ""


def _topic_problem(topic: str) -> str:
    if len(topic.encode("utf-8", "replace")) > _MAX_TOPIC_TEMPLATE:
        return f"longer than {_MAX_TOPIC_TEMPLATE} bytes"
    if "{server}" not in topic:
        return "must contain {server} (the game server's id, or _ for events without one)"
    others = [p for p in _PLACEHOLDER.findall(topic) if p not in ("{server}", "{scope}")]
    if others:
        return f"unknown placeholder {others[0]} (only {{server}} and {{scope}})"
    rest = _PLACEHOLDER.sub("", topic)
    if "{" in rest or "}" in rest:
        return "unbalanced { or }"
    if "+" in topic or "#" in topic:
        return "a topic to publish to cannot contain the wildcards + or #"
    if "\x00" in topic:
        return "must not contain NUL"
    if topic.startswith("$"):
        return "topics starting with $ are reserved for the broker"
    return ""


def _scope_problems(out: list[ConfigProblem], scopes: object) -> bool:
    if not isinstance(scopes, tuple) or not scopes:
        out.append(
            ConfigProblem(
                "notify.scopes",
                scopes,
                'must be a non-empty list such as ["global"] or ["global", "server:*"]',
            )
        )
        return False
    ok = True
    seen: set[str] = set()
    for s in scopes:
        problem = _scope_entry_problem(s)
        if not problem and s in seen:
            problem = "listed twice"
        if problem:
            out.append(ConfigProblem("notify.scopes", s, problem))
            ok = False
        else:
            seen.add(s)
    return ok


def _scope_entry_problem(entry: object) -> str:
    if not isinstance(entry, str):
        return "must be a string"
    if entry == "*":
        return ""
    kind, sep, ident = entry.partition(":")
    if kind not in SCOPE_KINDS:
        return (
            f'unknown scope kind {kind!r}: "global", "server:ID", "season:NAME", "event:NAME", '
            '"KIND:*" or "*"'
        )
    if kind == "global":
        return "" if not sep else "the global scope has no id"
    if not sep or not ident:
        return f'needs an id or *: "{kind}:ID" or "{kind}:*"'
    if len(ident.encode("utf-8", "replace")) > 256:
        return "id longer than 256 bytes"
    return ""


# ---------------------------------------------------------------------------- changes
@dataclass(frozen=True, slots=True)
class RatingChange:
    """One player's rating or tier change in one scope, as the engine task saw it.

    ``kind`` is one of ``KINDS``; ``tier``/``old_tier`` are tier names (``None``: unplaced);
    ``rank`` is the 1-based ladder position, if known; ``t`` the event time (Unix seconds).
    """

    server: str | None
    scope: str
    player: str
    kind: str
    tier: str | None
    old_tier: str | None
    mu: float
    sigma: float
    rank: int | None
    t: float


def _finite(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        return float(x) if math.isfinite(x) else None
    except OverflowError:
        return None


def _opt_str(x: object) -> str | None:
    return x if isinstance(x, str) else None


def payload_of(change: RatingChange) -> bytes:
    """The JSON payload of ``change`` (compact, UTF-8; never NaN or Infinity)."""
    rank = change.rank if isinstance(change.rank, int) and not isinstance(change.rank, bool) else None
    doc = {
        "player": change.player,
        "scope": change.scope,
        "kind": change.kind,
        "tier": _opt_str(change.tier),
        "old_tier": _opt_str(change.old_tier),
        "mu": _finite(change.mu),
        "sigma": _finite(change.sigma),
        "rank": rank,
        "t": _finite(change.t),
        "server": _opt_str(change.server),
    }
    try:
        return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate (the wire decoders refuse those): \u-escape it
        return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()


def _escape_char(m: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass"))


def topic_level(value: str) -> str:
    """``value`` as one topic level: ``%``, ``/``, ``+``, ``#``, control characters and a leading
    ``$`` percent-encoded (``urllib.parse.unquote`` undoes it). ``""`` stays empty."""
    level = _UNSAFE.sub(_escape_char, value)
    if level.startswith("$"):
        level = "%24" + level[1:]
    return level


def topic_for(settings: NotifySettings, change: RatingChange) -> str:
    """The topic ``change`` is published to under ``settings`` (see the module docstring)."""
    server = change.server
    if not server:
        level = "_"
    elif server == "_":
        level = "%5F"
    else:
        level = topic_level(server)
    topic = settings.topic.replace("{server}", level)
    if "{scope}" in topic:
        topic = topic.replace("{scope}", topic_level(change.scope) or "_")
    if settings.retain:
        topic += "/" + (topic_level(change.player) or "_")
    return topic


# ---------------------------------------------------------------------------- the notifier
_KEY_RENAMES = {
    "mqtt.url": "notify.mqtt",
    "mqtt.tls_ca": "notify.ca_file",
    "mqtt.password_env": "notify.password_env",
    "mqtt.password_file": "notify.password_file",
}


def _as_notify_error(e: ConfigError) -> ConfigError:
    problems = [
        ConfigProblem(_KEY_RENAMES.get(p.key, "notify." + p.key.partition(".")[2]), p.value, p.message)
        for p in e.problems
    ]
    return ConfigError(problems, e.source)


def _connection_lost(watcher: asyncio.Future[Any]) -> None:
    """Raise ``MqttError`` for a finished connection watcher (see ``Notifier._session``)."""
    if watcher.cancelled():
        raise aiomqtt.MqttError("connection watcher cancelled")
    exc = watcher.exception()
    if exc is not None:
        raise exc
    raise aiomqtt.MqttError("unexpected message on the notify connection")


class _Stopping:
    """The flush deadline, fixed the first time a publish wait sees ``stop``."""

    __slots__ = ("deadline", "flush_timeout", "waiter")

    def __init__(self, waiter: asyncio.Future[Any], flush_timeout: float) -> None:
        self.waiter = waiter
        self.flush_timeout = flush_timeout
        self.deadline: float | None = None

    def remaining(self) -> float | None:
        """Seconds left to flush, or ``None`` while not stopping."""
        if not self.waiter.done():
            return None
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.flush_timeout
        return max(0.0, self.deadline - now)


class Notifier:
    """Queue of ``RatingChange`` and the MQTT publisher that drains it (see the module docstring).

    Counters for metrics (plain attributes, read at scrape time):
      ``published`` changes the broker took (QoS 1: acknowledged; QoS 0: written to the socket),
      ``dropped`` changes never published (queue full — oldest dropped — or still queued at stop),
      ``failures`` failed connection attempts plus established connections lost,
      ``connects`` successful connections, ``connected`` whether connected now,
      ``queued`` (property) changes waiting, ``last_error`` the last connection error.

    ``__init__`` raises ``ConfigError`` (naming ``notify.*`` keys) when enabled settings name a
    password or CA file that cannot be read; ``run`` never raises (but may be cancelled).
    """

    def __init__(
        self,
        settings: NotifySettings,
        *,
        reconnect_min: float = 0.5,
        reconnect_max: float = 30.0,
        flush_timeout: float = FLUSH_TIMEOUT,
        keepalive: int = 30,
        timeout: float = 10.0,
    ) -> None:
        self.settings = settings
        self.flush_timeout = flush_timeout
        self.published = 0
        self.dropped = 0
        self.failures = 0
        self.connects = 0
        self.connected = False
        self.last_error = ""
        self._keepalive = keepalive
        self._timeout = timeout
        self._queue: deque[RatingChange] = deque()
        self._limit = settings.queue if settings.enabled else 0
        self._wake: asyncio.Event | None = None
        self._dropped_logged = 0
        self._dropped_log_at = -math.inf
        # offer()'s filters, precomputed: an empty kind set means "disabled".
        if not settings.enabled:
            self._kinds: frozenset[str] = frozenset()
        elif settings.changes == "all":
            self._kinds = frozenset(KINDS)
        else:
            self._kinds = TIER_KINDS
        self._all_scopes = "*" in settings.scopes
        self._scope_keys = frozenset(s for s in settings.scopes if not s.endswith(":*"))
        self._scope_kinds = frozenset(s[:-2] for s in settings.scopes if s.endswith(":*"))
        # The [mqtt] source's helpers take MqttSettings: a shim carries the fields they read.
        self._shim = MqttSettings(
            url=settings.mqtt if settings.enabled else "mqtt://disabled",
            client_id=settings.client_id,
            username=settings.username,
            password_env=settings.password_env,
            password_file=settings.password_file,
            tls_ca=settings.ca_file,
            keepalive=keepalive,
            reconnect_min=reconnect_min,
            reconnect_max=reconnect_max,
        )
        self._password: str | None = None
        self._tls: ssl.SSLContext | None = None
        self._address: tuple[str, int] = ("", 0)
        if settings.enabled:
            try:
                host, port, _ = broker_address(self._shim)
                self._address = (host, port)
                self._tls = tls_context(self._shim)
                self._password = load_password(self._shim)
            except ConfigError as e:
                raise _as_notify_error(e) from e

    # ------------------------------------------------------------------ the caller's side
    @property
    def enabled(self) -> bool:
        return self._limit > 0

    @property
    def queued(self) -> int:
        """Changes waiting to be published."""
        return len(self._queue)

    def offer(self, change: RatingChange) -> None:
        """Queue ``change`` for publishing if ``changes`` and ``scopes`` want it. O(1), never blocks;
        when the queue is full the oldest queued change is dropped (and counted)."""
        if change.kind not in self._kinds:
            return
        scope = change.scope
        if not (
            self._all_scopes
            or scope in self._scope_keys
            or (self._scope_kinds and scope.partition(":")[0] in self._scope_kinds)
        ):
            return
        queue = self._queue
        if len(queue) >= self._limit:
            queue.popleft()
            self.dropped += 1
        queue.append(change)
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ the publisher
    async def run(self, stop: asyncio.Event) -> None:
        """Publish queued changes until ``stop`` is set, reconnecting with backoff; then flush for
        at most ``flush_timeout`` seconds and disconnect. Returns at once when disabled."""
        if not self.enabled:
            return
        self._wake = asyncio.Event()
        stop_waiter = asyncio.ensure_future(stop.wait())
        stopping = _Stopping(stop_waiter, self.flush_timeout)
        attempts = 0  # consecutive failures since the last successful connection
        try:
            while not stop.is_set():
                connects_before = self.connects
                try:
                    await self._session(stop_waiter, stopping)
                    return
                except aiomqtt.MqttError as e:
                    self.last_error = str(e) or type(e).__name__
                except Exception as e:  # a bug or a library surprise: log it, and the daemon goes on
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.exception("notify_failed")
                self.failures += 1
                if self.connects > connects_before:
                    attempts = 0
                    log.warning("notify_disconnected", reason=self.last_error, queued=len(self._queue))
                delay = backoff_delay(self._shim, attempts)
                if self.connects == connects_before:
                    log.warning(
                        "notify_connect_failed",
                        url=self.settings.mqtt,
                        error=self.last_error,
                        retry_in=round(delay, 3),
                    )
                attempts += 1
                sleeper = asyncio.ensure_future(asyncio.sleep(delay))
                try:
                    await asyncio.wait((sleeper, stop_waiter), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
        finally:
            stop_waiter.cancel()
            self.connected = False
            self._wake = None
            left = len(self._queue)
            if left:
                self._queue.clear()
                self.dropped += left
                log.warning("notify_unsent_at_stop", dropped=left)
            self._log_drops(force=True)

    def _client(self) -> aiomqtt.Client:
        host, port = self._address
        s = self.settings
        return aiomqtt.Client(
            host,
            port,
            identifier=s.client_id,
            username=s.username or None,
            password=self._password if s.username else None,
            tls_context=self._tls,
            keepalive=self._keepalive,
            timeout=self._timeout,
            clean_session=True,  # a publisher keeps no session
        )

    async def _session(self, stop_waiter: asyncio.Future[Any], stopping: _Stopping) -> None:
        """One connection: publish until stop (then flush and return) or until it fails (raises)."""
        client = self._client()
        async with client:
            # No subscriptions, so the message iterator yields nothing: it is the public way to
            # learn that the connection dropped (it raises MqttError then).
            watcher: asyncio.Future[aiomqtt.Message] = asyncio.ensure_future(anext(client.messages))
            self.connected = True
            self.connects += 1
            log.info(
                "notify_connected",
                url=self.settings.mqtt,
                client_id=self.settings.client_id,
                queued=self.queued,
            )
            try:
                await self._pump(client, watcher, stop_waiter, stopping)
                # Stopping: what is queued gets flush_timeout seconds.
                while self._queue and await self._send(client, watcher, stopping):
                    pass
                log.info("notify_disconnected", reason="stop", published=self.published)
            finally:
                self.connected = False
                watcher.cancel()
                await asyncio.wait((watcher,))
                if not watcher.cancelled():
                    watcher.exception()  # seen: the session ends here either way

    async def _pump(
        self,
        client: aiomqtt.Client,
        watcher: asyncio.Future[Any],
        stop_waiter: asyncio.Future[Any],
        stopping: _Stopping,
    ) -> None:
        wake = self._wake
        assert wake is not None
        while not stop_waiter.done():
            if watcher.done():
                _connection_lost(watcher)
            if not self._queue:
                wake.clear()
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait((woken, watcher, stop_waiter), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
                continue
            await self._send(client, watcher, stopping)
            self._log_drops()

    async def _send(self, client: aiomqtt.Client, watcher: asyncio.Future[Any], stopping: _Stopping) -> bool:
        """Publish up to ``WINDOW`` queued changes at once. Those not taken by the broker go back to
        the front of the queue, in order. Raises ``MqttError`` when the connection failed; returns
        False when the flush deadline passed, else True."""
        s = self.settings
        batch = [self._queue.popleft() for _ in range(min(WINDOW, len(self._queue)))]
        tasks = [
            asyncio.ensure_future(client.publish(topic_for(s, c), payload_of(c), qos=s.qos, retain=s.retain))
            for c in batch
        ]
        group = asyncio.gather(*tasks, return_exceptions=True)
        in_time = True
        try:
            while not group.done() and not watcher.done():
                remaining = stopping.remaining()
                if remaining is None:
                    await asyncio.wait((group, watcher, stopping.waiter), return_when=asyncio.FIRST_COMPLETED)
                elif remaining <= 0:
                    in_time = False
                    break
                else:
                    await asyncio.wait(
                        (group, watcher), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                    )
        finally:
            if not group.done():
                group.cancel()
            await asyncio.wait(tasks)
            error = self._settle(batch, tasks)
        if error is not None:
            raise aiomqtt.MqttError(f"publish failed: {error}") from error
        if watcher.done():
            _connection_lost(watcher)
        return in_time

    def _settle(
        self, batch: Sequence[RatingChange], tasks: Sequence[asyncio.Future[None]]
    ) -> BaseException | None:
        """Count what was published, requeue what was not; the first connection error, if any."""
        error: BaseException | None = None
        retry: list[RatingChange] = []
        for change, task in zip(batch, tasks, strict=True):
            if task.cancelled():
                retry.append(change)
                continue
            exc = task.exception()
            if exc is None:
                self.published += 1
            elif isinstance(exc, aiomqtt.MqttError):
                retry.append(change)
                if error is None:
                    error = exc
            else:  # this change cannot be published (paho refused the topic or payload): skip it
                self.dropped += 1
                log.warning(
                    "notify_unpublishable", player=change.player, error=f"{type(exc).__name__}: {exc}"
                )
        self._requeue(retry)
        return error

    def _requeue(self, changes: Iterable[RatingChange]) -> None:
        """Put ``changes`` (oldest first) back at the front; drop the oldest of them if full."""
        queue = self._queue
        for change in reversed(list(changes)):
            if len(queue) >= self._limit:
                self.dropped += 1
                continue
            queue.appendleft(change)

    def _log_drops(self, *, force: bool = False) -> None:
        if self.dropped == self._dropped_logged:
            return
        now = time.monotonic()
        if force or now - self._dropped_log_at >= DROP_LOG_INTERVAL:
            log.warning(
                "notify_dropped",
                dropped=self.dropped - self._dropped_logged,
                total=self.dropped,
                queue=self._limit,
            )
            self._dropped_logged = self.dropped
            self._dropped_log_at = now
