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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import aiomqtt
import structlog

from arenad.daemon.config_sources import NotifySettings
from arenad.daemon.reconnect import Backoff, Failure, reconnecting
from arenad.daemon.sources.mqtt import broker_address, load_password, tls_context

log = structlog.get_logger("arenad.notify")

#: Change kinds: a first placement into a tier, a tier up, a tier down, a rating move within a tier.
KINDS: tuple[str, ...] = ("placed", "promoted", "demoted", "rating")
TIER_KINDS: frozenset[str] = frozenset(("placed", "promoted", "demoted"))
#: Publishes in flight at once on one connection.
WINDOW = 64
#: Seconds ``run`` keeps publishing after ``stop`` (while connected).
FLUSH_TIMEOUT = 2.0
#: Seconds between two "changes dropped" warnings.
DROP_LOG_INTERVAL = 10.0
# Characters a topic level must not contain raw: MQTT wildcards, the level separator, NUL and other
# control characters (MQTT 3.1.1 §1.5.3), and '%' itself so the encoding can be undone.
_UNSAFE = re.compile(r"[%/+#\x00-\x1f\x7f-\x9f\ud800-\udfff]")


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
    #: The journal sequence number of the event (the same on every cluster replica: what the
    #: cluster's notifications are deduplicated by); 0 where unknown. Not in the payload.
    seq: int = 0


class ChangeFilter:
    """``[notify]``'s choice of changes: ``changes`` (kinds) and ``scopes``; one rule for the MQTT
    notifier and the cluster's outbox (``arenad.cluster.outbox``)."""

    def __init__(self, settings: NotifySettings, enabled: bool) -> None:
        # An empty kind set means "disabled".
        if not enabled:
            self._kinds: frozenset[str] = frozenset()
        elif settings.changes == "all":
            self._kinds = frozenset(KINDS)
        else:
            self._kinds = TIER_KINDS
        self._all_scopes = "*" in settings.scopes
        self._scope_keys = frozenset(s for s in settings.scopes if not s.endswith(":*"))
        self._scope_kinds = frozenset(s[:-2] for s in settings.scopes if s.endswith(":*"))

    def wants(self, change: RatingChange) -> bool:
        if change.kind not in self._kinds:
            return False
        scope = change.scope
        return (
            self._all_scopes
            or scope in self._scope_keys
            or bool(self._scope_kinds and scope.partition(":")[0] in self._scope_kinds)
        )


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
        reconnect_min: float | None = None,
        reconnect_max: float | None = None,
        flush_timeout: float = FLUSH_TIMEOUT,
        keepalive: int | None = None,
        timeout: float = 10.0,
    ) -> None:
        # The keyword arguments override [notify]'s keys of the same names (tests reconnect fast).
        given = {"reconnect_min": reconnect_min, "reconnect_max": reconnect_max, "keepalive": keepalive}
        overrides = {k: v for k, v in given.items() if v is not None}
        self.settings = settings.model_copy(update=overrides) if overrides else settings
        self.flush_timeout = flush_timeout
        self.published = 0
        self.dropped = 0
        self.failures = 0
        self.connects = 0
        self.connected = False
        self.last_error = ""
        self._timeout = timeout
        self._queue: deque[RatingChange] = deque()
        self._limit = settings.queue if settings.enabled else 0
        self._wake: asyncio.Event | None = None
        self._dropped_logged = 0
        self._dropped_log_at = -math.inf
        self.filter = ChangeFilter(settings, settings.enabled)  # offer()'s, precomputed
        self._password: str | None = None
        self._tls: ssl.SSLContext | None = None
        self._address: tuple[str, int] = ("", 0)
        if settings.enabled:  # the [mqtt] source's helpers: errors name notify.* keys
            host, port, _ = broker_address(settings)
            self._address = (host, port)
            self._tls = tls_context(settings)
            self._password = load_password(settings)

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
        if not self.filter.wants(change):
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

        async def connect_once(connected: Callable[[], None]) -> None:
            await self._session(stop_waiter, stopping, connected)

        def on_failure(failure: Failure) -> None:
            self.last_error = failure.error
            if not failure.expected:  # a bug or a library surprise: log it, and the daemon goes on
                log.exception("notify_failed")
            self.failures += 1
            if failure.connected:
                log.warning("notify_disconnected", reason=self.last_error, queued=len(self._queue))
            else:
                log.warning(
                    "notify_connect_failed",
                    url=self.settings.url,
                    error=self.last_error,
                    retry_in=round(failure.retry_in, 3),
                )

        try:
            backoff = Backoff(self.settings.reconnect_min, self.settings.reconnect_max)
            await reconnecting(connect_once, stop, backoff, on_failure, expected=(aiomqtt.MqttError,))
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
            keepalive=self.settings.keepalive,
            timeout=self._timeout,
            clean_session=True,  # a publisher keeps no session
        )

    async def _session(
        self, stop_waiter: asyncio.Future[Any], stopping: _Stopping, connected: Callable[[], None]
    ) -> None:
        """One connection: publish until stop (then flush and return) or until it fails (raises).
        ``connected`` is called once connected (the reconnect loop's backoff starts over)."""
        client = self._client()
        async with client:
            # No subscriptions, so the message iterator yields nothing: it is the public way to
            # learn that the connection dropped (it raises MqttError then).
            watcher: asyncio.Future[aiomqtt.Message] = asyncio.ensure_future(anext(client.messages))
            self.connected = True
            self.connects += 1
            connected()
            log.info(
                "notify_connected",
                url=self.settings.url,
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
