"""UDP source: each datagram holds one msgpack event or a msgpack array of events.

UDP cannot be paused, so under overload (the engine queue full) a datagram is dropped and every
event in it is counted in ``dropped``; nothing else in arenad ever drops valid data.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections import Counter
from collections.abc import Sequence

from arenad.core.events import Reject, RejectReason
from arenad.daemon.config import UdpSettings, parse_hostport
from arenad.daemon.types import Batch

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class UdpSource(asyncio.DatagramProtocol):
    """Decodes datagrams into batches on the engine queue; counts what it cannot deliver."""

    def __init__(self, settings: UdpSettings, queue: asyncio.Queue[Batch], dropped: Counter[str]) -> None:
        self.settings = settings
        self.queue = queue
        self.dropped = dropped
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
        else:
            batch = Batch("udp", [], payload=data)  # decoded by the engine task
        try:
            self.queue.put_nowait(batch)
        except asyncio.QueueFull:
            # The datagram's events are counted by decoding it now, on this rare path.
            self.dropped["udp"] += len(batch.decoded())

    def error_received(self, exc: Exception) -> None:  # pragma: no cover - ICMP noise on loopback
        pass


async def open_udp(
    settings: UdpSettings, queue: asyncio.Queue[Batch], dropped: Counter[str]
) -> tuple[asyncio.DatagramTransport, UdpSource]:
    """Bind the UDP source; returns the transport (close it to stop) and the protocol."""
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
        lambda: UdpSource(settings, queue, dropped), sock=sock
    )
    return transport, protocol
