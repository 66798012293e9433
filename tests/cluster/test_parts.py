"""The cluster's parts against one real JetStream server: the lease, the outbox, the stream source."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from nats_cluster import NatsCluster

from arenad.cluster.lease import Lease
from arenad.cluster.link import ClusterError, Link
from arenad.cluster.outbox import Outbox
from arenad.cluster.replica import StreamSource
from arenad.cluster.wire import SCHEMA, chat_subject, encode_chat, encode_records, kills_subject
from arenad.daemon.config_cluster import ClusterSettings
from arenad.daemon.config_sources import NotifySettings
from arenad.daemon.notify import RatingChange
from arenad.daemon.sources.ports import SourceContext
from arenad.daemon.types import Batch, ControlRequest
from arenad.feeds import ChatLine

BOUND = 30.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsCluster]:
    one = NatsCluster(tmp_path / "nats", size=1)
    try:
        yield one.start()
    finally:
        one.close()


def settings(server: NatsCluster, **kw: Any) -> ClusterSettings:
    return ClusterSettings.model_validate(
        {"role": "replica", "servers": tuple(server.urls), "stream_replicas": 1, "lease_ttl": 2.0, **kw}
    )


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), BOUND))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TestLease:
    """At most one holder; a clean release hands over at once, a dead holder after the TTL."""

    def test_one_holder_release_and_lapse(self, server: NatsCluster) -> None:
        async def body() -> None:
            s = settings(server)
            a, b = Link(s, "a"), Link(s, "b")
            await a.open()
            await b.open()
            try:
                changes: list[tuple[str, bool]] = []
                la = Lease(a, s.lease_ttl, on_change=lambda held: changes.append(("a", held)))
                lb = Lease(b, s.lease_ttl, on_change=lambda held: changes.append(("b", held)))
                await la.step()
                await lb.step()
                assert la.leader and not lb.leader
                await la.release()  # a clean stop
                await lb.step()
                assert lb.leader and not la.leader
                # b dies without a word: its key lapses after the TTL, then a takes it
                await la.step()
                assert not la.leader
                await asyncio.sleep(s.lease_ttl + 0.5)
                await la.step()
                assert la.leader
                # b comes back thinking it holds: its compare-and-set fails, it learns it lost
                await lb.step()
                assert not lb.leader and la.leader
                assert changes == [("a", True), ("a", False), ("b", True), ("a", True), ("b", False)]
            finally:
                await a.close()
                await b.close()

        run(body)

    def test_a_node_that_is_not_ready_does_not_take_a_free_lease(self, server: NatsCluster) -> None:
        async def body() -> None:
            s = settings(server)
            link = Link(s, "a")
            await link.open()
            caught_up = {"now": False}
            lease = Lease(link, s.lease_ttl, ready=lambda: caught_up["now"])
            try:
                await lease.step()
                assert not lease.leader  # still catching up: it would announce stale changes
                caught_up["now"] = True
                await lease.step()
                assert lease.leader
            finally:
                await link.close()

        run(body)

    def test_a_bucket_with_another_ttl_is_refused(self, server: NatsCluster) -> None:
        async def body() -> None:
            first = Link(settings(server), "a")
            await first.open()
            await first.close()
            other = Link(settings(server, lease_ttl=9.0), "b")
            with pytest.raises(ClusterError, match=r"lease_ttl is 9\.0 s"):
                await other.open(timeout=5)
            await other.close()

        run(body)

    def test_a_holder_that_cannot_renew_stops_leading_before_the_ttl(self, server: NatsCluster) -> None:
        async def body() -> None:
            s = settings(server)
            link = Link(s, "a")
            await link.open()
            clock = Clock()
            lease = Lease(link, s.lease_ttl, clock=clock)
            try:
                await lease.step()
                assert lease.leader
                clock.now += 0.79 * s.lease_ttl
                assert lease.leader
                clock.now += 0.02 * s.lease_ttl  # past the fence without a renewal
                assert not lease.leader
            finally:
                await link.close()

        run(body)


def change(seq: int, player: str = "alice", kind: str = "promoted") -> RatingChange:
    return RatingChange("eu-1", "global", player, kind, "2H", "3L", 1500.0, 80.0, 3, 100.0 + seq, seq)


async def notify_ids(link: Link, stream: str) -> list[str]:
    assert link.js is not None
    info = await link.js.stream_info(stream)
    sub = await link.js.pull_subscribe(">", stream=stream)
    out: list[str] = []
    while len(out) < info.state.messages:
        out.extend((m.headers or {})["Nats-Msg-Id"] for m in await sub.fetch(100, timeout=5))
    return out


class TestOutbox:
    """Only the leader publishes; a takeover publishes the kept changes again, stored once."""

    def test_takeover_republishes_without_duplicates(self, server: NatsCluster) -> None:
        async def body() -> None:
            s = settings(server)
            link = Link(s, "a")
            await link.open()
            leading = {"a": True, "b": False}
            a = Outbox(link, s, NotifySettings(), lambda: leading["a"])
            b = Outbox(link, s, NotifySettings(), lambda: leading["b"])
            stop = asyncio.Event()
            tasks = [asyncio.create_task(o.run(stop)) for o in (a, b)]
            try:
                for seq in range(1, 6):
                    for o in (a, b):  # every replica sees every change
                        o.offer(change(seq, player=f"p{seq}"))
                        o.offer(change(seq, player=f"p{seq}", kind="rating"))  # not a tier change: not kept
                while a.published < 5:
                    await asyncio.sleep(0.05)
                assert b.published == 0 and len(b.kept) == 5
                leading.update(a=False, b=True)  # a died after publishing 1..5; b takes over
                a.took_lease(False)
                b.took_lease(True)
                b.offer(change(6, player="p6"))
                while b.published + b.duplicates < 6:
                    await asyncio.sleep(0.05)
                assert (b.published, b.duplicates) == (1, 5)
                ids = await notify_ids(link, f"{s.stream}_NOTIFY")
                assert sorted(ids) == sorted(f"{k}:global:p{k}" for k in range(1, 7))
            finally:
                stop.set()
                await asyncio.gather(*tasks)
                await link.close()

        run(body)


class TestStreamSource:
    """Stream messages become batches of rows; chat only on the leader; filters; control waits."""

    def test_batches_filters_chat_and_control(self, server: NatsCluster, tmp_path: Path) -> None:
        async def body() -> None:
            s = settings(server, filter=("arena.eu-1.kills", "arena.*.chat"))
            link = Link(s, "r")
            await link.open()
            assert link.js is not None
            js = link.js
            kill = (0, 1.0, "a", "b", "eu-1", "1")
            await js.publish(kills_subject("arena", "eu-1"), encode_records([kill]))
            await js.publish(kills_subject("arena", "us-1"), encode_records([kill]))  # filtered out
            await js.publish(kills_subject("arena", "eu-1"), msgpack.packb([SCHEMA + 5, [], b""]))
            line = ChatLine("eu-1", 2.0, "3", "a", "a", "!rank", False)
            await js.publish(chat_subject("arena", "eu-1"), encode_chat(line))
            leader = {"now": False}
            heard: list[ChatLine] = []
            queue: asyncio.Queue[Batch] = asyncio.Queue()
            stop = asyncio.Event()
            ctx = SourceContext(
                queue, stop, asyncio.Event(), tmp_path, lambda: 0, positions={}, chat=heard.append
            )
            source = StreamSource(s, link, chat_gate=lambda: leader["now"])
            await source.open(ctx)
            task = asyncio.create_task(source.run(ctx))
            try:
                got = [await asyncio.wait_for(queue.get(), 10) for _ in range(4)]
                assert [b.position for b in got] == [("stream", {"seq": k}) for k in (1, 2, 3, 4)]
                assert got[0].rows == [(0, [1.0, "a", "b", "eu-1", "1"])]
                assert got[1].rows == [] and got[2].rows == []  # another scope's; another schema
                assert source.rejected["schema_version"] == 1
                assert heard == []  # not the leader: chat is not answered here
                leader["now"] = True
                await js.publish(chat_subject("arena", "eu-1"), encode_chat(line))
                assert (await asyncio.wait_for(queue.get(), 10)).rows == []
                assert heard == [line]
                # an admin operation on this replica: published, returns once applied here
                request = ControlRequest("hide", {"player": "a"}, 3.0)
                waiting = asyncio.create_task(source.publish_control(request))
                batch = await asyncio.wait_for(queue.get(), 10)
                assert batch.rows == [(2, [3.0, "hide", {"player": "a"}])]
                batch.last_seq = 41  # what the engine task numbered it
                assert batch.done is not None
                batch.done()
                await waiting
                assert request.seq == 41
            finally:
                stop.set()
                await task
                await link.close()

        run(body)

    def test_a_state_older_than_the_stream_refuses_to_start(
        self, server: NatsCluster, tmp_path: Path
    ) -> None:
        async def body() -> None:
            s = settings(server)
            link = Link(s, "r")
            await link.open()
            assert link.js is not None
            for k in range(3):
                await link.js.publish(
                    kills_subject("arena", "eu-1"), encode_records([(0, float(k), "a", "b", "eu-1", str(k))])
                )
            await link.js.purge_stream(s.stream, seq=3)  # messages 1 and 2 aged out
            ctx = SourceContext(
                asyncio.Queue(), asyncio.Event(), asyncio.Event(), tmp_path, lambda: 0, positions={}
            )
            with pytest.raises(ClusterError, match="starts at 3"):
                await StreamSource(s, link, chat_gate=lambda: False).open(ctx)
            await link.close()

        run(body)


def test_heartbeat_document_is_json(server: NatsCluster) -> None:
    from arenad.cluster.heartbeat import beat

    async def body() -> None:
        s = settings(server)
        link = Link(s, "n1")
        await link.open()
        stop = asyncio.Event()
        task = asyncio.create_task(beat(link, "replica", lambda: {"position": 7}, stop))
        try:
            assert link.nodes_kv is not None
            for _ in range(100):
                try:
                    entry = await link.nodes_kv.get("n1")
                    break
                except Exception:  # not written yet
                    await asyncio.sleep(0.05)
            doc = json.loads(entry.value or b"{}")
            assert doc["role"] == "replica" and doc["position"] == 7 and doc["node"] == "n1"
        finally:
            stop.set()
            await task
            await link.close()

    run(body)
