"""The sources' port (arenad/daemon/sources/ports.py): the list the settings enable, each source's
own counters, and the shared lifecycle (check, open, run until stop) over real sockets."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import msgpack
import pytest

from arenad.daemon.sources.ports import (
    MqttIngest,
    SourceContext,
    SourceLogIngest,
    TailIngest,
    UdpIngest,
    default_sources,
    merged,
)
from arenad.daemon.types import Batch
from arenad.errors import ConfigError
from arenad.settings import Settings


def context(tmp_path: Path) -> SourceContext:
    return SourceContext(asyncio.Queue(maxsize=4), asyncio.Event(), asyncio.Event(), tmp_path, lambda: 0)


def test_the_settings_choose_the_sources_in_order(tmp_path: Path) -> None:
    log = tmp_path / "games.log"
    settings = Settings.from_mapping(
        {
            "udp": {"listen": "127.0.0.1:0"},
            "source_udp": {"listen": "127.0.0.1:0", "servers": [{"name": "css", "address": "127.0.0.1"}]},
            "mqtt": {"url": "mqtt://127.0.0.1:1883"},
            "tail": [{"path": str(log), "format": "openarena", "server": "oa"}],
        }
    )
    sources = default_sources(settings)
    assert [type(s) for s in sources] == [UdpIngest, SourceLogIngest, MqttIngest, TailIngest]
    assert len({s.name for s in sources}) == 4
    quiet = Settings.from_mapping({"udp": {"listen": "off"}})
    assert default_sources(quiet) == []


def test_a_tail_of_an_unknown_format_fails_at_check(tmp_path: Path) -> None:
    settings = Settings.from_mapping(
        {"udp": {"listen": "off"}, "tail": [{"path": str(tmp_path / "x.log"), "format": "quake9"}]}
    )
    (source,) = default_sources(settings)
    with pytest.raises(ConfigError, match=r"tail\.format"):
        source.check()


def test_udp_queues_datagrams_counts_its_own_drops_and_closes_at_stop(tmp_path: Path) -> None:
    settings = Settings.from_mapping({"udp": {"listen": "127.0.0.1:0"}})
    (source,) = default_sources(settings)
    assert isinstance(source, UdpIngest)

    async def main() -> list[Batch]:
        ctx = context(tmp_path)
        source.check()
        bound = await source.open(ctx)
        host, port = bound["udp"]
        task = asyncio.create_task(source.run(ctx))
        payload = msgpack.packb({"t": 1.0e9, "attacker": "a", "victim": "b"})
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(10):  # the queue holds 4: the rest is dropped and counted
                s.sendto(payload, (host, port))
        for _ in range(200):
            if ctx.queue.full() and sum(source.dropped.values()) == 6:
                break
            await asyncio.sleep(0.01)
        ctx.stop.set()
        await asyncio.wait_for(task, timeout=5)
        assert source.transport is not None and source.transport.is_closing()
        return [ctx.queue.get_nowait() for _ in range(ctx.queue.qsize())]

    batches = asyncio.run(main())
    assert [b.source for b in batches] == ["udp"] * 4
    assert source.dropped == {"udp": 6}
    assert merged([source.dropped, source.dropped]) == {"udp": 12}
    assert source.collectors() == []  # auth off: no signature metrics


def test_source_log_datagrams_count_their_non_kills(tmp_path: Path) -> None:
    settings = Settings.from_mapping(
        {
            "udp": {"listen": "off"},
            "source_udp": {"listen": "127.0.0.1:0", "servers": [{"name": "css", "address": "127.0.0.1"}]},
        }
    )
    (source,) = default_sources(settings)
    assert isinstance(source, SourceLogIngest)
    line = (
        b"\xff\xff\xff\xffRL 01/02/2026 - 10:00:00: "
        b'"bob<2><STEAM_1:0:2><CT>" committed suicide with "world"\n\x00'
    )

    async def main() -> None:
        ctx = context(tmp_path)
        source.check()
        host, port = (await source.open(ctx))["source_udp"]
        task = asyncio.create_task(source.run(ctx))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(line, (host, port))
        for _ in range(200):
            if source.nonkills():
                break
            await asyncio.sleep(0.01)
        ctx.stop.set()
        await asyncio.wait_for(task, timeout=5)

    asyncio.run(main())
    assert sum(source.nonkills().values()) == 1
