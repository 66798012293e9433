"""UDP source: each datagram holds one msgpack event or a msgpack array of events.

UDP cannot be paused, so under overload (the engine queue full) a datagram is dropped and every
event in it is counted in ``dropped``; nothing else in arenad ever drops valid data.

Signed datagrams (``[udp] auth``, ``arenad.auth``) are verified here, in the datagram callback,
before anything is queued: a few microseconds each. A forged one (unsigned where signing is
required, malformed, unknown key, bad MAC) is counted as an ``unauthorised`` reject and in
``auth_rejected`` by reason; a stale or replayed one is counted in ``auth_rejected`` only (it is
a copy of, or as old as, traffic that was authentic). Events of a verified datagram that name no
server are attributed to its key id.

The replay windows survive restarts through ``udp-replay.json`` in the state directory: written
at most once a second while signed traffic flows (no fsync: it survives ``kill -9``, which is
what an attacker can provoke), and with an fsync when the socket closes (``"clean": true``).
After an unclean stop everything up to the saved sequence numbers is refused, and timestamps up
to ``REPLAY_GUARD_MS`` after the saved ones; if the file is unreadable, every timestamp up to our
clock plus ``max_skew`` at start-up is refused (a replay cannot be newer than that).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import structlog
from prometheus_client.core import CounterMetricFamily, Metric

from arenad.auth import AuthReason, AuthReject, Verifier, is_signed, parse_key
from arenad.core.events import Reject, RejectReason
from arenad.daemon.config import parse_hostport
from arenad.daemon.config_sources import UdpSettings
from arenad.daemon.secrets import read_secret
from arenad.daemon.types import Batch
from arenad.errors import ConfigError, ConfigProblem
from arenad.fileio import write_atomic

log = structlog.get_logger("arenad.udp")

#: Name of the replay-window state file in the state directory.
REPLAY_FILE = "udp-replay.json"
#: Seconds between writes of the replay state while signed datagrams arrive.
REPLAY_FLUSH = 1.0
#: After an unclean stop, timestamps up to this many ms after the saved ones are refused: the
#: flush interval plus a second for datagrams reordered on the network.
REPLAY_GUARD_MS = int(REPLAY_FLUSH * 1000) + 1000


def load_udp_keys(settings: UdpSettings) -> dict[str, bytes]:
    """Every ``[[udp.keys]]`` secret by key id; one ``ConfigError`` naming every failure."""
    keys: dict[str, bytes] = {}
    problems: list[ConfigProblem] = []
    for i, spec in enumerate(settings.keys):
        where = f"udp.keys[{i}]"
        try:
            secret = read_secret(
                spec.secret_env, spec.secret_file, f"{where}.secret_env", f"{where}.secret_file"
            )
        except ConfigError as e:
            problems.extend(e.problems)
            continue
        if secret is None:  # pragma: no cover - UdpKey requires one of them
            continue
        try:
            keys[spec.id] = parse_key(secret)
        except ValueError as e:
            which = f"{where}.secret_env" if spec.secret_env else f"{where}.secret_file"
            problems.append(ConfigProblem(which, spec.secret_env or spec.secret_file, f"the key {e}"))
    if problems:
        raise ConfigError(problems)
    return keys


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AuthRejectCollector:
    """``arenad_udp_auth_rejected_total{reason}``: signed-UDP refusals, every reason always present."""

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "arenad_udp_auth_rejected",
            "UDP datagrams refused by signature checks, by reason (unsigned, malformed, unknown_key, "
            "bad_mac: also counted as unauthorised events; stale, replayed: only here).",
            labels=["reason"],
        )
        for reason in AuthReason:
            family.add_metric([reason.value], self.counts.get(reason.value, 0))
        yield family


class UdpSource(asyncio.DatagramProtocol):
    """Decodes datagrams into batches on the engine queue; counts what it cannot deliver."""

    def __init__(
        self,
        settings: UdpSettings,
        queue: asyncio.Queue[Batch],
        dropped: Counter[str],
        *,
        keys: dict[str, bytes] | None = None,
        auth_rejected: Counter[str] | None = None,
        state_dir: Path | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        #: Wall time in ms for the signature's skew check (the daemon's step-proof clock).
        self.clock_ms: Callable[[], int] = clock_ms if clock_ms is not None else _wall_ms
        self.queue = queue
        self.dropped = dropped
        self.auth_rejected: Counter[str] = Counter() if auth_rejected is None else auth_rejected
        #: None when auth is off: every datagram is taken as unsigned msgpack.
        self.verifier = (
            Verifier(keys or {}, int(settings.max_skew * 1000)) if settings.auth != "off" else None
        )
        self.require_signed = settings.auth == "required"
        self.replay_path = state_dir / REPLAY_FILE if state_dir is not None and self.verifier else None
        self._replay_dirty = False
        self._replay_flushed = 0.0
        self._replay_failing = False
        if self.replay_path is not None:
            self._load_replay_state(self.replay_path)
        self.networks: Sequence[IPNetwork] = [ipaddress.ip_network(n, strict=False) for n in settings.allow]
        self._allowed_cache: dict[str, bool] = {}
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport is not a subclass of asyncio.DatagramTransport: no isinstance.
        self.transport = transport  # type: ignore[assignment]

    def _allowed(self, host: str) -> bool:
        ok = self._allowed_cache.get(host)
        if ok is None:
            try:
                ip = ipaddress.ip_address(host.split("%", 1)[0])
            except ValueError:
                ok = False
            else:
                if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                    ip = ip.ipv4_mapped
                ok = any(ip in net for net in self.networks)
            if len(self._allowed_cache) < 4096:  # bounded: a spoofing flood cannot grow it
                self._allowed_cache[host] = ok
        return ok

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if not self._allowed(str(addr[0])):
            batch = Batch("udp", [Reject(RejectReason.UNAUTHORISED, f"source {addr[0]} is not in udp.allow")])
        elif len(data) > self.settings.max_datagram:
            batch = Batch("udp", [Reject(RejectReason.OVERSIZE, f"datagram of {len(data)} bytes")])
        elif self.verifier is not None and (self.require_signed or is_signed(data)):
            if not is_signed(data):
                self.auth_rejected["unsigned"] += 1
                batch = Batch("udp", [Reject(RejectReason.UNAUTHORISED, "unsigned datagram (udp.auth)")])
            else:
                checked = self.verifier.check(data, self.clock_ms())
                if isinstance(checked, AuthReject):
                    self.auth_rejected[checked.reason.value] += 1
                    if not checked.reason.forged:
                        return  # stale or replayed: counted above only
                    batch = Batch("udp", [Reject(RejectReason.UNAUTHORISED, checked.detail)])
                else:
                    batch = Batch("udp", [], server=checked.key_id, payload=checked.payload)
                    self._replay_dirty = True
                    now = time.monotonic()
                    if now - self._replay_flushed >= REPLAY_FLUSH:
                        self._replay_flushed = now
                        self._save_replay_state(clean=False)
        else:
            batch = Batch("udp", [], payload=data)  # decoded by the engine task
        try:
            self.queue.put_nowait(batch)
        except asyncio.QueueFull:
            # The datagram's events are counted by decoding it now, on this rare path.
            self.dropped["udp"] += len(batch.decoded())

    def error_received(self, exc: Exception) -> None:  # pragma: no cover - ICMP noise on loopback
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        if self.replay_path is not None:
            self._save_replay_state(clean=True)

    # ------------------------------------------------------------------ replay state
    def _load_replay_state(self, path: Path) -> None:
        assert self.verifier is not None
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raw = None  # first start with signing: nothing was accepted before
        except OSError as e:
            raw = str(e).encode()
        if raw is not None:
            try:
                saved = json.loads(raw)
                guard = 0 if saved["clean"] is True else REPLAY_GUARD_MS
                self.verifier.import_state(saved["keys"], unclean_guard_ms=guard)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                floor = self.clock_ms() + self.verifier.max_skew_ms
                self.verifier.refuse_until(floor)
                log.warning(
                    "udp_replay_state_unreadable", path=str(path), error=str(e), refuse_until_ms=floor
                )
            else:
                log.info("udp_replay_state_loaded", path=str(path), clean=guard == 0, keys=len(saved["keys"]))
        # From now on the file says "unclean" until the socket closes in order.
        self._save_replay_state(clean=False, force=True)

    def _save_replay_state(self, *, clean: bool, force: bool = False) -> None:
        """Write the replay state atomically; fsync (file and directory) only for the clean copy."""
        if self.replay_path is None or self.verifier is None or not (self._replay_dirty or clean or force):
            return
        path = self.replay_path
        body = json.dumps({"clean": clean, "keys": self.verifier.export_state()}, sort_keys=True).encode()
        try:
            write_atomic(path, body, sync=clean)
        except OSError as e:
            if not self._replay_failing:
                log.error("udp_replay_state_write_failed", path=str(path), error=str(e))
            self._replay_failing = True
            return
        self._replay_failing = False
        self._replay_dirty = False


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


async def open_udp(
    settings: UdpSettings,
    queue: asyncio.Queue[Batch],
    dropped: Counter[str],
    *,
    keys: dict[str, bytes] | None = None,
    auth_rejected: Counter[str] | None = None,
    state_dir: Path | None = None,
    clock_ms: Callable[[], int] | None = None,
) -> tuple[asyncio.DatagramTransport, UdpSource]:
    """Bind the UDP source; returns the transport (close it to stop) and the protocol.

    ``keys`` (``load_udp_keys``) verify signed datagrams when ``settings.auth`` is not "off";
    ``state_dir`` keeps the replay windows across restarts (``REPLAY_FILE``).
    """
    host, port = parse_hostport(settings.listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if settings.receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, settings.receive_buffer)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: UdpSource(
            settings,
            queue,
            dropped,
            keys=keys,
            auth_rejected=auth_rejected,
            state_dir=state_dir,
            clock_ms=clock_ms,
        ),
        sock=sock,
    )
    return transport, protocol
