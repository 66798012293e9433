"""``arenad run`` with ``[cluster] role = "ingest"``: the sources, checked, into the stream.

::

    UDP datagrams ─┐
    MQTT QoS 1 ────┼─> bounded queue ─> IngestPipeline ─> JetStream (R3) ─> Batch.done (acks)
    (log tails) ───┘        (the daemon's checks)          arena.<server>.kills
    chat lines ─────────────────────────────────────────> arena.<server>.chat

The same sources and the same checks as the single-node daemon (``default_sources``,
``Intake``), with the stream where the journal was: a source hears "done" only once the stream's
quorum acknowledged its events. The node keeps no rating state. Its state directory holds one
small file, ``ingest.state``: the duplicate-id memory and the log followers' positions as of
the last acknowledged step, written atomically every ``[daemon] checkpoint_interval`` and at
stop, so a restarted ingest neither re-reads a log from the start nor forgets which ids it
already published (JetStream's duplicate window covers what a crash loses in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from typing import Any

import msgpack
import structlog

from arenad.cluster.heartbeat import beat
from arenad.cluster.ingest import IngestPipeline, Publisher
from arenad.cluster.link import Link, node_name
from arenad.cluster.metrics import ClusterCollector, ClusterFigures, publish_histogram
from arenad.cluster.wire import chat_subject, encode_chat
from arenad.daemon import sdnotify
from arenad.daemon.clock import DaemonClock
from arenad.daemon.config import parse_hostport
from arenad.daemon.intake import Intake
from arenad.daemon.live import LiveState, StorageFaults
from arenad.daemon.logs import RejectWarnings
from arenad.daemon.metrics import Metrics, serve_metrics
from arenad.daemon.shadows import ModelSet
from arenad.daemon.sources.mqtt import MqttStatus
from arenad.daemon.sources.ports import MqttIngest, SourceContext, default_sources, merged
from arenad.daemon.statedir import StateDir
from arenad.daemon.types import Batch, MetricsSnapshot
from arenad.feeds import ChatLine
from arenad.fileio import write_atomic
from arenad.scopes import ScopeSet
from arenad.settings import Settings

log = structlog.get_logger("arenad.cluster")

STATE_FILE = "ingest.state"


class IngestNode:
    """The ingest role's wiring (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        c = settings.cluster
        self.clock = DaemonClock(
            step=settings.daemon.clock_step, adopt_after=settings.daemon.clock_adopt_after
        )
        self.store = StateDir(settings)
        # Only the intake's part of a LiveState is used: received / rejected, ids, positions.
        self.state = LiveState(ScopeSet(settings.adr, settings.scope_config()), Intake(settings.daemon))
        self.queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=settings.daemon.queue_size)
        self.stop = asyncio.Event()
        self.drained = asyncio.Event()
        self.ready = False
        self.sources = default_sources(settings)
        self.faults = StorageFaults()
        self.link = Link(c, node_name(c))
        self.metrics = Metrics(self.snapshot)
        for source in self.sources:
            for collector in source.collectors():
                self.metrics.registry.register(collector)
        self.publisher = Publisher(self.link, c, publish_histogram(self.metrics.registry).observe)
        self.metrics.registry.register(ClusterCollector(self.figures))
        self.pipeline = IngestPipeline(
            self.state,
            self.queue,
            self.store.journal,  # never written: the stream is this node's journal
            models=ModelSet(settings.models.model_copy(update={"shadows": ()})),
            metrics=self.metrics,
            clock=self.clock,
            faults=self.faults,
            reject_warnings=RejectWarnings(settings.log.reject_warning_interval),
        )
        self.pipeline.publisher = self.publisher
        self.pipeline.save_positions = self.save
        self.bound: dict[str, Any] = {}
        self._source_tasks: list[asyncio.Task[None]] = []
        self._chat_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ figures
    def figures(self) -> ClusterFigures:
        return ClusterFigures(
            role="ingest",
            connected=self.link.connected,
            position=self.state.seq,
            published=self.publisher.messages,
            duplicates=self.publisher.duplicates,
        )

    def snapshot(self) -> MetricsSnapshot:
        st = self.state
        mqtt = next((s for s in self.sources if isinstance(s, MqttIngest)), None)
        status = mqtt.status if mqtt is not None else MqttStatus()
        return MetricsSnapshot(
            received=Counter(st.received),
            rejected=Counter(st.rejected),
            dropped=merged([self.pipeline.dropped, *(s.dropped for s in self.sources)]),
            queue_depth=self.queue.qsize(),
            queue_capacity=self.queue.maxsize,
            unrated_deaths=merged(s.nonkills() for s in self.sources),
            mqtt_connected=status.connected,
            mqtt_disconnects=status.disconnects,
            mqtt_disconnected_seconds=status.disconnected_seconds(time.monotonic()),
            ready=self.ready,
            storage_ok=self.faults.ok,
            intake_paused=self.pipeline.held is not None,
            storage_errors=Counter(self.faults.errors),
            clock_jumps=self.clock.jumps,
            time_clamped=st.intake.clamped,
            clock_offset=self.clock.offset,
        )

    # ------------------------------------------------------------------ ingest.state
    def load(self) -> None:
        path = self.store.path / STATE_FILE
        if not path.exists():
            return
        doc = msgpack.unpackb(path.read_bytes(), raw=False)
        self.state.intake.import_state(doc.get("dedupe", []))
        self.state.positions = dict(doc.get("positions", {}))
        self.state.seq = int(doc.get("seq", 0))

    async def save(self) -> None:
        if self.pipeline.held is not None or self.pipeline.unjournaled_ids:
            return  # ids of unpublished events are remembered: saving them would refuse a redelivery
        st = self.state
        doc = {"seq": st.seq, "dedupe": st.intake.export_state(), "positions": dict(st.positions)}
        body = msgpack.packb(doc, use_bin_type=True)
        try:
            await asyncio.to_thread(write_atomic, self.store.path / STATE_FILE, body)
        except OSError as e:
            self.faults.failed("checkpoint", e, seq=st.seq)
            return
        self.faults.recovered("checkpoint")
        st.positions_moved = False

    # ------------------------------------------------------------------ chat
    def chat(self, line: ChatLine) -> None:
        """A chat line to the stream, for the leader's in-game commands (fire and forget)."""
        js = self.link.js
        if js is None:
            return

        async def send() -> None:
            with contextlib.suppress(Exception):  # a lost chat line is a command not answered
                await js.publish(
                    chat_subject(self.settings.cluster.subject_prefix, line.server),
                    encode_chat(line),
                    timeout=self.settings.cluster.publish_timeout,
                )

        task = asyncio.get_running_loop().create_task(send())
        self._chat_tasks.add(task)
        task.add_done_callback(self._chat_tasks.discard)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        self.store.lock()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        servers: list[asyncio.Server] = []
        try:
            s = self.settings
            if s.metrics.enabled:
                host, port = parse_hostport(s.metrics.listen)
                msrv = await serve_metrics(host, port, self.metrics, lambda: self.ready)
                servers.append(msrv)
                self.bound["metrics"] = msrv.sockets[0].getsockname()[:2]
            for source in self.sources:
                source.check()
            self.load()
            await self.link.open()
            ctx = SourceContext(
                self.queue,
                self.stop,
                self.drained,
                self.store.path,
                self.clock.now_ms,
                positions=self.state.positions,
                chat=self.chat,
            )
            for source in self.sources:
                self.bound.update(await source.open(ctx))
            self.ready = True
            sdnotify.notify("READY=1")
            log.info(
                "arenad_started",
                role="ingest",
                node=self.link.name,
                **{k: list(v) if isinstance(v, tuple) else v for k, v in self.bound.items()},
            )
            async with asyncio.TaskGroup() as tg:
                self._source_tasks = [tg.create_task(src.run(ctx), name=src.name) for src in self.sources]
                tg.create_task(
                    self.pipeline.run(
                        stop=self.stop,
                        drained=self.drained,
                        sources_done=lambda: all(t.done() for t in self._source_tasks),
                        checkpoint=self.save,
                        checkpoint_interval=s.daemon.checkpoint_interval,
                        commit_interval=s.daemon.commit_interval,
                    ),
                    name="ingest",
                )
                tg.create_task(beat(self.link, "ingest", self._beat, self.stop), name="heartbeat")
                tg.create_task(self._wake_on_stop(), name="stopper")
            await self.save()
            log.info("arenad_stopped", role="ingest", seq=self.state.seq)
            return 0
        finally:
            self.ready = False
            for source in self.sources:
                source.close()
            for srv in servers:
                srv.close()
            await self.link.close()
            self.store.close()

    def _beat(self) -> dict[str, Any]:
        return {
            "published": self.publisher.messages,
            "events": self.state.seq,
            "queue": self.queue.qsize(),
            "paused": self.pipeline.held is not None,
        }

    async def _wake_on_stop(self) -> None:
        await self.stop.wait()
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(Batch(source="control", items=[]))


def run_ingest(settings: Settings) -> int:
    """Blocking entry point of ``arenad run`` on an ingest node."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a dependency on Linux
        return asyncio.run(IngestNode(settings).run())
    return int(uvloop.run(IngestNode(settings).run()))
