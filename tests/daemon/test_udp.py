"""The UDP source on a real socket: allowlist, size limit, and counted drops under overload."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter

import msgpack

from arenad.core.events import Reject, RejectReason
from arenad.daemon.config_sources import UdpSettings
from arenad.daemon.sources.udp import UdpSource, open_udp
from arenad.daemon.types import Batch

EVENT = {"t": 1.0, "attacker": "a", "victim": "b"}


async def _send_and_collect(
    settings: UdpSettings, payloads: list[bytes], source: str = "127.0.0.1"
) -> tuple[list[Batch], Counter[str]]:
    """Send datagrams from ``source`` over loopback and take one batch per datagram (bounded)."""
    queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=100)
    dropped: Counter[str] = Counter()
    transport, _ = await open_udp(settings, queue, dropped)
    try:
        addr = transport.get_extra_info("sockname")[:2]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((source, 0))
            for p in payloads:
                s.sendto(p, addr)
        out = [await asyncio.wait_for(queue.get(), timeout=5) for _ in payloads]
        return out, dropped
    finally:
        transport.close()


class TestUdpSource:
    """Datagrams become batches; refusals and drops are counted, never silent."""

    def test_datagrams_are_queued_undecoded(self) -> None:
        payload = msgpack.packb([EVENT, EVENT])
        out, dropped = asyncio.run(_send_and_collect(UdpSettings(listen="127.0.0.1:0"), [payload]))
        assert [b.payload for b in out] == [payload]
        assert out[0].source == "udp"
        assert not dropped

    def test_source_outside_the_allowlist_is_unauthorised(self) -> None:
        settings = UdpSettings(listen="127.0.0.1:0", allow=("127.0.0.2/32",))
        out, _ = asyncio.run(_send_and_collect(settings, [msgpack.packb(EVENT)]))
        assert len(out) == 1
        assert out[0].payload is None
        assert isinstance(out[0].items[0], Reject)
        assert out[0].items[0].reason is RejectReason.UNAUTHORISED

    def test_oversize_datagram(self) -> None:
        settings = UdpSettings(listen="127.0.0.1:0", max_datagram=64)
        out, _ = asyncio.run(_send_and_collect(settings, [b"\x90" * 100]))
        assert isinstance(out[0].items[0], Reject)
        assert out[0].items[0].reason is RejectReason.OVERSIZE

    def test_full_queue_drops_and_counts_every_event(self) -> None:
        settings = UdpSettings(listen="127.0.0.1:0")
        payloads = [msgpack.packb([EVENT] * 3) for _ in range(4)]

        async def run() -> tuple[int, Counter[str]]:
            queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
            dropped: Counter[str] = Counter()
            transport, protocol = await open_udp(settings, queue, dropped)
            try:
                for p in payloads:  # straight into the protocol: no scheduling between them
                    protocol.datagram_received(p, ("127.0.0.1", 9))
                return queue.qsize(), dropped
            finally:
                transport.close()

        queued, dropped = asyncio.run(run())
        assert queued == 1
        assert dropped == Counter({"udp": 9})  # three datagrams of three events

    def test_ipv4_mapped_sources_match_ipv4_networks(self) -> None:
        proto = UdpSource(UdpSettings(allow=("10.0.0.0/8",)), asyncio.Queue(), Counter())
        assert proto._allowed("::ffff:10.1.2.3")
        assert not proto._allowed("::ffff:11.1.2.3")
        assert not proto._allowed("not-an-ip")
