"""MQTT source: QoS 1 kill events from a persistent session, acknowledged only once journaled.

One connection at a time, kept up by ``run_mqtt`` with ``arenad.daemon.reconnect`` (exponential
backoff with jitter, as aiomqtt documents it). Each PUBLISH becomes one ``Batch`` on the engine's
bounded queue; the batch's ``done`` sends the PUBACK for exactly that message.

Why PUBACK waits for ``Batch.done`` (and how, with aiomqtt 2.5):
    aiomqtt 2.5 leaves acknowledgement to paho, and paho sends the PUBACK as soon as its
    ``on_message`` callback returns — that is, when aiomqtt has put the message on an in-memory
    queue. A crash after that point loses the message: the broker has forgotten it and the
    journal never saw it. Idempotent re-application by event id only protects against *duplicates*
    on redelivery, never against that loss, so acknowledging late is the part that matters.
    paho-mqtt 2.x can do it (``manual_ack_set(True)``, then ``ack(mid, qos)``); aiomqtt 2.5 does
    not expose it, so ``_ManualAckClient`` switches it on for the paho client aiomqtt wraps, and
    the engine task calls ``Batch.done`` — hence ``ack`` — only after the batch's events are
    durably journaled. aiomqtt 3.0 has its own ``puback`` but is still alpha; pyproject pins
    ``aiomqtt<3``, so this reaches into ``aiomqtt.Client._client`` in one small subclass only.

Consequences, all deliberate:
    * A crash or disconnect before the journal write means the broker redelivers: at-least-once.
      The engine's dedupe by event id turns that into exactly-once for events that carry an id.
    * A ``done`` that arrives after its connection is gone is dropped instead of being sent on
      the next connection: packet ids belong to a connection, and the broker redelivers the
      message anyway (the duplicate is caught by id).
    * Every connection is a fresh client, so nothing read on a dead connection lingers in
      aiomqtt's in-memory queue to be acknowledged with a stale packet id.
    * The engine calls ``done`` in queue order, so PUBACKs leave in the order the PUBLISHes
      arrived, as MQTT 3.1.1 asks of QoS 1 receivers (§4.6).

Backpressure: ``await queue.put`` stops this task from taking messages while the engine's queue
is full. paho still reads the socket into aiomqtt's (unbounded) queue, but the broker sends at most
its inflight window of unacknowledged QoS 1 messages (mosquitto ``max_inflight_messages``, default
20) and holds the rest — so memory stays bounded and nothing is dropped here. Two things follow
for operators: the inflight window caps throughput at one window per journal write, and the broker
drops a persistent session's QoS 1 messages beyond its per-client queue limit (mosquitto
``max_queued_messages``, default 1000) while arenad is down or stalled — size both for the feed.
aiomqtt's ``max_queued_incoming_messages`` is left unlimited on purpose: when full it *discards*.
While waiting for queue space the connection is still watched, so ``MqttStatus.connected`` turns
false (and the reconnect starts) when the broker goes away, not when the engine catches up.

Retained messages are acknowledged and skipped: a broker re-sends them on every (re)subscription,
so treating them as kills would re-apply old events after each reconnect.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
import paho.mqtt.client as paho
import structlog
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config_sources import BrokerSettings, MqttSettings
from arenad.daemon.reconnect import Backoff, Failure, reconnecting
from arenad.daemon.secrets import read_secret
from arenad.daemon.types import Batch
from arenad.decode import decode_json_line, decode_msgpack, looks_like_json
from arenad.errors import ConfigError, ConfigProblem

log = structlog.get_logger(__name__)

_DEFAULT_MAX_PAYLOAD = MqttSettings().max_payload
_PORTS = {"mqtt": 1883, "tcp": 1883, "mqtts": 8883, "ssl": 8883}
_TLS_SCHEMES = ("mqtts", "ssl")


@dataclass(slots=True)
class MqttStatus:
    """What the metrics collector reads about the MQTT source (updated per connection, not event)."""

    connected: bool = False  # connected and subscribed right now
    connects: int = 0  # successful connections since start
    disconnects: int = 0  # established connections that ended (error or stop)
    received: int = 0  # PUBLISH packets taken from the broker (redeliveries included)
    last_error: str = ""  # why the last connection attempt or connection failed
    retained_skipped: int = 0  # retained messages acknowledged and ignored
    #: Seconds spent not connected in outages that have ended (see ``disconnected_seconds``).
    down_seconds: float = 0.0
    #: ``time.monotonic()`` when the current outage began; ``None`` while connected or not running.
    down_since: float | None = None

    def mark_down(self, now: float) -> None:
        """The source is running and not connected from ``now`` on (start-up or a lost session)."""
        if self.down_since is None:
            self.down_since = now

    def mark_up(self, now: float) -> None:
        """Connected and subscribed at ``now``: the outage in progress, if any, ends."""
        if self.down_since is not None:
            self.down_seconds += max(0.0, now - self.down_since)
            self.down_since = None

    def disconnected_seconds(self, now: float) -> float:
        """Seconds the running source has spent without a session, the outage in progress included
        (start-up before the first connection counts: events may be waiting at the broker)."""
        current = 0.0 if self.down_since is None else max(0.0, now - self.down_since)
        return self.down_seconds + current


# ---------------------------------------------------------------------------- pure helpers
def decode_payload(
    payload: bytes, mode: str, *, max_payload: int = _DEFAULT_MAX_PAYLOAD
) -> list[KillEvent | PlacementEvent | Reject]:
    """One MQTT payload — an event or a list of events — as events and rejects; never empty.

    ``mode`` is ``"auto"``, ``"json"`` or ``"msgpack"``. Auto-detection is exact for valid input:
    a JSON event starts with ``{`` or ``[`` after whitespace, and those bytes (and the whitespace
    bytes) are msgpack positive fixints, which are never a valid event.
    """
    if mode not in ("auto", "json", "msgpack"):
        raise ValueError(f"mode must be 'auto', 'json' or 'msgpack', got {mode!r}")
    if len(payload) > max_payload:
        return [Reject(RejectReason.OVERSIZE, f"payload of {len(payload)} bytes exceeds {max_payload}")]
    if mode == "json" or (mode == "auto" and looks_like_json(payload)):
        items = list(decode_json_line(payload))
    else:
        items = list(decode_msgpack(payload))
    # A message that yields nothing (empty or blank) is still counted as one reject.
    return items or [Reject(RejectReason.MALFORMED, "empty payload")]


_NO_MATCH = object()


def _match(filter_levels: list[str], topic_levels: list[str]) -> object:
    """``_NO_MATCH``, or the level matched by the filter's first ``+`` (``None`` if it has none)."""
    # Wildcards at the first level never match "$" topics ($SYS/...), per MQTT 3.1.1 §4.7.2.
    if topic_levels[0].startswith("$") and filter_levels[0] in ("+", "#"):
        return _NO_MATCH
    first_plus: str | None = None
    seen_plus = False
    for i, level in enumerate(filter_levels):
        if level == "#":
            return first_plus
        if i >= len(topic_levels):
            return _NO_MATCH
        if level == "+":
            if not seen_plus:
                seen_plus, first_plus = True, topic_levels[i]
        elif level != topic_levels[i]:
            return _NO_MATCH
    return first_plus if len(filter_levels) == len(topic_levels) else _NO_MATCH


def payload_mode(topic: str, settings: MqttSettings) -> str:
    """The payload format for ``topic``: the first matching ``payload_by_topic`` filter's, else
    ``settings.payload``."""
    levels = topic.split("/")
    for topic_filter, mode in settings.payload_by_topic.items():
        if _match(topic_filter.split("/"), levels) is not _NO_MATCH:
            return mode
    return settings.payload


def server_id_from_topic(topic: str, filters: Sequence[str]) -> str | None:
    """The server id in ``topic``: the level the first ``+`` of the first matching filter matched.

    ``None`` when no filter matches, the matching filter has no ``+``, or the level is empty.
    Shared subscriptions (``$share/GROUP/filter``) are matched by their filter part.
    """
    topic_levels = topic.split("/")
    for subscribed in filters:
        f = subscribed
        if f.startswith("$share/"):  # $share/GROUP/FILTER: only FILTER is matched against topics
            f = f.split("/", 2)[2] if f.count("/") >= 2 else ""
        found = _match(f.split("/"), topic_levels)
        if found is _NO_MATCH:
            continue
        return found if isinstance(found, str) and found else None
    return None


def broker_address(settings: BrokerSettings) -> tuple[str, int, bool]:
    """``(host, port, tls)`` from ``settings.url``; mqtts:// (or ssl://) means TLS."""
    key = settings.key("url")
    try:
        parts = urlsplit(settings.url)
        port = parts.port
    except ValueError as e:
        raise ConfigError([ConfigProblem(key, settings.url, str(e))]) from e
    if parts.scheme not in _PORTS or not parts.hostname:
        raise ConfigError([ConfigProblem(key, settings.url, "must be mqtt://HOST[:PORT] or mqtts://")])
    return parts.hostname, port or _PORTS[parts.scheme], parts.scheme in _TLS_SCHEMES


def tls_context(settings: BrokerSettings) -> ssl.SSLContext | None:
    """The TLS context for an mqtts:// URL (``None`` for plain mqtt://), built from ``tls_*``.

    Built once, before connecting, so a missing or bad certificate file is a ``ConfigError``
    naming its key rather than a connection error retried forever.
    """
    if not broker_address(settings)[2]:
        return None
    try:
        # CERT_REQUIRED with hostname checks; the system store unless a CA bundle is named.
        ctx = ssl.create_default_context(cafile=settings.tls_ca or None)
    except (OSError, ValueError) as e:
        problem = ConfigProblem(settings.key("tls_ca"), settings.tls_ca, f"cannot load: {e}")
        raise ConfigError([problem]) from e
    if settings.tls_cert:  # (a tls_key without it is refused by the settings)
        try:
            ctx.load_cert_chain(settings.tls_cert, settings.tls_key or None)
        except (OSError, ValueError) as e:
            problem = ConfigProblem(settings.key("tls_cert"), settings.tls_cert, f"cannot load: {e}")
            raise ConfigError([problem]) from e
    if settings.tls_insecure:
        ctx.check_hostname = False  # the chain is still verified; only the name is not
    ctx.sslsocket_class = _ClosingSSLSocket
    return ctx


class _ClosingSSLSocket(ssl.SSLSocket):
    """An SSL socket that closes itself when its handshake fails.

    paho-mqtt 2.2 does not close the socket when ``do_handshake`` raises (an untrusted or
    expired certificate, say), so every failed reconnect would leak a file descriptor.
    ``SSLContext.sslsocket_class`` is the documented hook for this.
    """

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except BaseException:
            self.close()
            raise


def load_password(settings: BrokerSettings) -> str | None:
    """The broker password from ``password_env`` (first) or ``password_file``; ``None`` if neither.

    Secrets never live in the config file, only where it points. A named source that is missing
    or empty is a ``ConfigError``: connecting without the password would only fail later, slower.
    """
    return read_secret(
        settings.password_env,
        settings.password_file,
        settings.key("password_env"),
        settings.key("password_file"),
    )


# ---------------------------------------------------------------------------- the connection
class _ManualAckClient(aiomqtt.Client):
    """An aiomqtt 2.5 client whose QoS 1 PUBACKs are sent by ``ack`` and not by paho on receipt.

    The one place that touches aiomqtt internals (see the module docstring for why).
    """

    def __init__(
        self,
        hostname: str,
        port: int,
        *,
        identifier: str,
        keepalive: int,
        username: str | None,
        password: str | None,
        tls_context: ssl.SSLContext | None,
    ) -> None:
        super().__init__(
            hostname,
            port,
            identifier=identifier,
            # MQTT 3.1.1 persistent session: the broker keeps our subscriptions, queues QoS 1
            # messages while arenad is down or restarting, and redelivers the unacknowledged ones.
            clean_session=False,
            keepalive=keepalive,
            username=username,
            password=password,
            tls_context=tls_context,
        )
        self.session_present = False
        # Before connect: from here on paho never PUBACKs by itself (paho-mqtt >= 1.6).
        self._client.manual_ack_set(True)

    def ack(self, mid: int, qos: int) -> None:
        self._client.ack(mid, qos)

    @property
    def disconnected(self) -> asyncio.Future[None]:
        """Done when this connection is lost (with the error) or closed (after connecting)."""
        return self._disconnected

    def _on_connect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None = None,
    ) -> None:
        # Kept for the log: without a session, messages published while we were away are gone.
        self.session_present = flags.session_present
        super()._on_connect(client, userdata, flags, reason_code, properties)


class _Connection:
    """One live connection's acknowledgement state: which ``done`` calls may still PUBACK."""

    __slots__ = ("client", "idle", "live", "outstanding")

    def __init__(self, client: _ManualAckClient) -> None:
        self.client = client
        self.live = True  # False once the connection ended: late acks are dropped
        self.outstanding = 0  # batches handed to the engine whose done has not been called
        self.idle = asyncio.Event()
        self.idle.set()

    def handed_out(self) -> None:
        self.outstanding += 1
        self.idle.clear()

    def settled(self) -> None:
        self.outstanding -= 1
        if self.outstanding == 0:
            self.idle.set()

    def ack(self, mid: int, qos: int) -> None:
        # A QoS 0 delivery has nothing to acknowledge. On a dead connection the packet id may
        # already name another message, and the broker redelivers this one regardless.
        if self.live and qos > 0:
            self.client.ack(mid, qos)


class _Ack:
    """``Batch.done`` for one message handed to the engine: PUBACK it once, if still connected."""

    __slots__ = ("called", "conn", "mid", "qos")

    def __init__(self, conn: _Connection, mid: int, qos: int) -> None:
        self.conn = conn
        self.mid = mid
        self.qos = qos
        self.called = False
        conn.handed_out()

    def __call__(self) -> None:
        if self.called:  # the contract says once; a second PUBACK for a reused id would be wrong
            return
        self.called = True
        self.conn.settled()
        self.conn.ack(self.mid, self.qos)


async def _first(
    task: asyncio.Future[Any], *others: asyncio.Future[Any], timeout: float | None = None
) -> bool:
    """Wait until ``task`` is done (True), or any of ``others`` or the timeout comes first (False).

    In the second case ``task`` is cancelled, and waited for, so that nothing is left running.
    """
    try:
        done, _ = await asyncio.wait((task, *others), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if task in done:
        return True
    task.cancel()
    await asyncio.wait((task,))  # let the cancellation finish; its outcome no longer matters
    return False


async def _pump(
    settings: MqttSettings,
    conn: _Connection,
    queue: asyncio.Queue[Batch],
    status: MqttStatus,
    stop_waiter: asyncio.Future[Any],
) -> None:
    """Messages -> batches until stop (returns) or the connection drops (``MqttError``)."""
    messages = conn.client.messages
    warned_retained = False
    while not stop_waiter.done():
        next_message = asyncio.ensure_future(anext(messages))
        if not await _first(next_message, stop_waiter):
            return
        message = next_message.result()  # MqttError when the connection dropped
        status.received += 1
        if message.retain:
            status.retained_skipped += 1
            if not warned_retained:
                warned_retained = True
                log.warning("mqtt_retained_skipped", topic=message.topic.value)
            conn.ack(message.mid, message.qos)  # nothing to journal
            continue
        # Counted as handed out before the put: the engine may call done as soon as it is queued.
        ack = _Ack(conn, message.mid, message.qos)
        # Decoding is left to the engine task (Batch.decoded), which interleaves it with queries;
        # a full inflight window decoded here at once would stall the event loop for milliseconds.
        batch = Batch(
            source="mqtt",
            items=[],
            server=server_id_from_topic(message.topic.value, settings.topics),
            done=ack,
            payload=message.payload,
            decode=functools.partial(
                decode_payload,
                mode=payload_mode(message.topic.value, settings),
                max_payload=settings.max_payload,
            ),
        )
        try:
            queue.put_nowait(batch)
        except asyncio.QueueFull:
            # The engine is behind: wait here, so the broker's inflight window fills and it stops
            # sending (see the module docstring). Stop or a lost connection abandons the message:
            # it stays unacknowledged, and the broker delivers it again.
            disconnected = conn.client.disconnected
            if not await _first(asyncio.ensure_future(queue.put(batch)), stop_waiter, disconnected):
                conn.settled()
                if disconnected.done():
                    raise aiomqtt.MqttError("Disconnected while waiting for queue space") from (
                        disconnected.exception()
                    )
                return


async def _session(
    settings: MqttSettings,
    client: _ManualAckClient,
    queue: asyncio.Queue[Batch],
    status: MqttStatus,
    stop_waiter: asyncio.Future[Any],
    *,
    connected: Callable[[], None],
    ack_grace: float,
) -> None:
    """One connection: subscribe, pump, and on stop give journaled batches a moment to be acked.

    ``connected`` is called once subscribed (the reconnect loop's backoff starts over)."""
    async with client:
        conn = _Connection(client)
        try:
            granted = await client.subscribe([(t, settings.qos) for t in settings.topics])
            refused = [t for t, code in zip(settings.topics, granted, strict=False) if _refused(code)]
            if refused:
                raise aiomqtt.MqttError(f"subscription refused for {', '.join(refused)}")
            if status.connects and not client.session_present:
                log.warning("mqtt_session_lost", client_id=settings.client_id)
            status.connected = True
            status.connects += 1
            connected()
            status.mark_up(time.monotonic())
            log.info(
                "mqtt_connected",
                url=settings.url,
                client_id=settings.client_id,
                session_present=client.session_present,
                topics=list(settings.topics),
            )
            await _pump(settings, conn, queue, status, stop_waiter)
            # Stopping: batches already on the queue may still be journaled during shutdown; keep
            # the connection a little so their PUBACKs go out (else the broker redelivers them).
            if conn.outstanding and ack_grace > 0:
                await _first(asyncio.ensure_future(conn.idle.wait()), client.disconnected, timeout=ack_grace)
        finally:
            conn.live = False
            if client.disconnected.done() and not client.disconnected.cancelled():
                client.disconnected.exception()  # seen: the session ends here either way
            if status.connected:
                status.connected = False
                status.disconnects += 1
                status.mark_down(time.monotonic())


def _refused(code: object) -> bool:
    if isinstance(code, ReasonCode):
        return code.is_failure
    return code == 0x80  # MQTT 3.1.1 SUBACK failure


async def run_mqtt(
    settings: MqttSettings,
    queue: asyncio.Queue[Batch],
    status: MqttStatus,
    stop: asyncio.Event,
    password: str | None = None,
    *,
    ack_grace: float = 1.0,
) -> None:
    """Feed ``queue`` from the broker in ``settings`` until ``stop`` is set; reconnect on errors.

    Returns promptly once ``stop`` is set — while waiting for messages, for queue space or in a
    backoff; a connection attempt in progress finishes first (bounded by the client timeouts).
    ``ack_grace`` is how long, at stop, it waits for batches already queued to be acknowledged.
    Raises ``ConfigError`` for an unusable URL or TLS file (before connecting).
    """
    host, port, _ = broker_address(settings)
    tls = tls_context(settings)
    stop_waiter = asyncio.ensure_future(stop.wait())

    async def connect_once(connected: Callable[[], None]) -> None:
        client = _ManualAckClient(
            host,
            port,
            identifier=settings.client_id,
            keepalive=settings.keepalive,
            username=settings.username or None,
            password=password if settings.username else None,
            tls_context=tls,
        )
        await _session(settings, client, queue, status, stop_waiter, connected=connected, ack_grace=ack_grace)
        log.info("mqtt_disconnected", reason="stop")

    def on_failure(failure: Failure) -> None:
        status.last_error = failure.error
        if not failure.expected:  # a bug or a library surprise: log it, and the daemon goes on
            log.exception("mqtt_source_failed")
        if failure.connected:
            log.warning("mqtt_disconnected", reason=status.last_error)
        else:
            log.warning("mqtt_connect_failed", error=status.last_error, retry_in=round(failure.retry_in, 3))

    status.mark_down(time.monotonic())  # not connected yet: the outage metric counts from here
    try:
        backoff = Backoff(settings.reconnect_min, settings.reconnect_max)
        await reconnecting(connect_once, stop, backoff, on_failure, expected=(aiomqtt.MqttError,))
    finally:
        stop_waiter.cancel()
        status.connected = False
        status.mark_up(time.monotonic())  # stopped on purpose: no longer an outage
