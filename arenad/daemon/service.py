"""The arenad service: the wiring of one asyncio process around a single-writer engine task.

::

    UDP datagrams ─┐                       ┌─> journal (fsync) ─> applier ─> shadows ─> Batch.done
    MQTT QoS 1 ────┼─> bounded queue ─> engine task (pipeline.py)
    (log tails) ───┘                       └─> checkpoint every N s (recovery.py; a thread writes it)
    query socket <── reads the engine between engine steps
    /metrics     <── MetricsSnapshot at scrape time

Only the engine task mutates rating state. Sources that can wait (MQTT) block on the bounded
queue when it is full, which pauses their intake; UDP drops and counts. An event is journaled
and fsynced before it is applied and before its source is told it is done, so everything a
source was told is done survives ``kill -9``. The rooms this module wires: ``live.py`` (the
state), ``statedir.py``, ``pipeline.py``, ``recovery.py``, ``recompute.py``,
``sources/ports.py``; docs/architecture.md draws them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import structlog

try:
    import uvloop
except ImportError:  # pragma: no cover - not available on every platform
    uvloop = None  # type: ignore[assignment]

from arenad.cluster.heartbeat import beat
from arenad.cluster.lease import Lease
from arenad.cluster.link import Link, node_name
from arenad.cluster.metrics import ClusterCollector, ClusterFigures
from arenad.cluster.outbox import Outbox
from arenad.cluster.replica import StreamSource, stream_position
from arenad.core.engine import Engine
from arenad.core.params import TIER_NAMES
from arenad.daemon import sdnotify
from arenad.daemon.admin import AdminHandler, load_token, serve_admin
from arenad.daemon.alloc import fix_mmap_threshold
from arenad.daemon.clock import DaemonClock
from arenad.daemon.config import Section, _off, parse_hostport
from arenad.daemon.history import first_match_time
from arenad.daemon.intake import Intake
from arenad.daemon.live import LiveState, StorageFaults
from arenad.daemon.logs import RejectWarnings, configure_level
from arenad.daemon.metrics import Metrics, serve_metrics
from arenad.daemon.notify import Notifier
from arenad.daemon.pipeline import Pipeline
from arenad.daemon.query import QueryHandler, close_servers, reload_settings, serve_query
from arenad.daemon.ratinghistory import RatingHistory
from arenad.daemon.recompute import Recomputer, Retention
from arenad.daemon.recovery import Checkpointer, cut_ratings, offline_recompute, recover
from arenad.daemon.shadows import ModelSet
from arenad.daemon.sources.mqtt import MqttStatus
from arenad.daemon.sources.ports import (
    MqttIngest,
    SourceContext,
    TailIngest,
    UdpIngest,
    default_sources,
    merged,
)
from arenad.daemon.state import RecoveryReport
from arenad.daemon.statedir import StateDir
from arenad.daemon.types import Batch, ControlRequest, MetricsSnapshot
from arenad.daemon.webroom import Status, web_ports
from arenad.errors import ArenadError
from arenad.ingame.service import InGame
from arenad.scopes import Exclusions, Rule, ScopeSet
from arenad.settings import Settings
from arenad.web.server import WebHandle, start_web

__all__ = ["Daemon", "offline_recompute", "run_daemon"]

S = TypeVar("S")

log = structlog.get_logger("arenad")


class Daemon:
    """Owns the rooms and every server; ``run`` until stopped.

    The rooms: ``state`` (``live.LiveState``, the only mutable rating state), ``store`` (the state
    directory), ``pipeline`` (the engine task's step), ``checkpointer`` and ``recover``
    (``recovery.py``), ``recomputer`` and ``retention`` (``recompute.py``), ``sources``
    (``sources/ports.py``). This class wires them to the servers, signals and reload.
    """

    def __init__(self, settings: Settings, reload: Callable[[], Settings] | None = None) -> None:
        self.settings = settings
        self._load_settings = reload  # re-reads the config file for the admin "reload"
        # Wall time for validation, dedupe and signatures, proof against host clock steps.
        self.clock = DaemonClock(
            step=settings.daemon.clock_step, adopt_after=settings.daemon.clock_adopt_after
        )
        self.store = StateDir(settings)
        self.state = LiveState(ScopeSet(settings.adr, settings.scope_config()), Intake(settings.daemon))
        self.queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=settings.daemon.queue_size)
        self.stop = asyncio.Event()  # SIGTERM/SIGINT: stop intake, drain, checkpoint, exit
        # Sources that acknowledge (MQTT) keep their connection until the queue is drained, so
        # every batch they handed over is acknowledged on a live connection.
        self.drained = asyncio.Event()
        self.ready = False
        self.recovery = RecoveryReport()
        self.faults = StorageFaults()
        # Chat commands and announcements ([ingame]), handed a read port on the live scopes.
        self.ingame: InGame | None = (
            InGame(settings.ingame, lambda: self.state.scopes) if settings.ingame.enabled else None
        )
        self._cluster_parts(settings)
        # Without shadows the primary is scored from the global engine's own ring at scrape time,
        # the engine looked up at each call (recovery and a recompute replace it).
        self.models = ModelSet(
            self._models_settings(),
            recent=lambda: self.state.engine.recent_predictions(),  # noqa: PLW0108 - see above
        )
        self.metrics = Metrics(self.snapshot)
        # Every model's histogram series exists from the start, so dashboards see each model.
        if self.models.scoring:
            self.models.observers = {
                name: self.metrics.model_update_seconds.labels(model=name).observe
                for name in self.models.names
            }
        for source in self.sources:
            for collector in source.collectors():
                self.metrics.registry.register(collector)
        for collector in self.ingame.collectors() if self.ingame is not None else []:
            self.metrics.registry.register(collector)
        if self.link is not None:
            self.metrics.registry.register(ClusterCollector(self.cluster_figures))
        self.reject_warnings = RejectWarnings(settings.log.reject_warning_interval)
        self.pipeline = Pipeline(
            self.state,
            self.queue,
            self.store.journal,
            models=self.models,
            metrics=self.metrics,
            clock=self.clock,
            faults=self.faults,
            reject_warnings=self.reject_warnings,
            notifier=self.notifier,
            on_change=self._on_change(),
        )
        #: The players' rating history (their play sessions), beside the state it derives from.
        self.ratings: RatingHistory | None = (
            RatingHistory(self.store.path, settings.history.ratings_days)
            if settings.history.ratings
            else None
        )
        self.recomputer = Recomputer(self.state, self.store, settings.adr, self.metrics, self.ratings)
        self.checkpointer = Checkpointer(
            self.state,
            self.store,
            models=self.models,
            pipeline=self.pipeline,
            recomputer=self.recomputer,
            retention=Retention(self.store, settings.history, self.faults),
            metrics=self.metrics,
            faults=self.faults,
            ratings=self.ratings,
        )
        # The HTTP API and pages ([web]): handed ports over the live state, counted here.
        self.web_status = Status(
            self.state,
            [src.name for src in self.sources],
            self.pipeline.last_event,
            self.clock.now,
            lambda: {"queue_depth": self.queue.qsize(), "ready": self.ready},
        )
        self.web: WebHandle | None = None
        self.bound: dict[str, Any] = {}  # actual listening addresses, for logs and tests
        self.query_handler: QueryHandler | None = None  # set once the query server starts
        self._query_servers: list[asyncio.Server] = []
        self._query_observers: dict[str, Callable[[float], None]] = {}

    # ------------------------------------------------------------------ the cluster's parts
    def _cluster_parts(self, settings: Settings) -> None:
        """The sources, notifier and cluster parts of this node's role ([cluster] role).

        Single node (``off``): the configured sources and the MQTT notifier. A replica or a
        shadow: the stream is the one source (``arenad.cluster.replica``); a replica competes
        for the leader lease, and while it holds it publishes the notifications (``Outbox``)
        and answers in the game; a shadow never leads.
        """
        c = settings.cluster
        self.link: Link | None = None
        self.lease: Lease | None = None
        self.outbox: Outbox | None = None
        self.stream: StreamSource | None = None
        self.notifier: Notifier | None = None
        if not c.enabled:
            self.sources = default_sources(settings)
            self.notifier = Notifier(settings.notify) if settings.notify.enabled else None
            return
        self.link = Link(c, node_name(c))
        if settings.notify.enabled:  # docs/operations.md "Cluster": the leader publishes to NATS
            log.warning("notify_mqtt_unused_in_cluster", role=c.role, notifications=f"{c.stream}_NOTIFY")
        if c.role == "replica":
            self.lease = Lease(
                self.link,
                c.lease_ttl,
                on_change=self._lease_changed,
                ready=lambda: self.stream is not None and self.stream.current and self.queue.empty(),
            )
            self.outbox = Outbox(self.link, c, settings.notify, lambda: self._leader)
        self.stream = StreamSource(
            c, self.link, chat_gate=lambda: self._leader, on_recompute=self._recompute_requested
        )
        self.sources = [self.stream]
        self.state.stamped = False  # replicas at one position write one checkpoint, byte for byte

    def _recompute_requested(self, args: dict[str, Any]) -> None:
        """A ``recompute`` control record applied from the stream: this replica's share of it."""
        scope, from_t = args.get("scope"), args.get("from")
        self.recomputer.request(
            scope if isinstance(scope, str) else None,
            float(from_t) if isinstance(from_t, int | float) and not isinstance(from_t, bool) else None,
            str(args.get("reason", "cluster")),
        )

    @property
    def _leader(self) -> bool:
        return self.lease is not None and self.lease.leader

    def _lease_changed(self, held: bool) -> None:
        if self.outbox is not None:
            self.outbox.took_lease(held)

    def _models_settings(self) -> Any:
        """``[models]``, without shadows on a cluster replica: they run on the shadow role."""
        models = self.settings.models
        if self.settings.cluster.role == "replica" and models.shadows:
            log.warning("shadows_on_shadow_role", shadows=list(models.shadows))
            return models.model_copy(update={"shadows": ()})
        return models

    def _on_change(self) -> Callable[[Any], None] | None:
        """Who hears each rating change: the in-game announcements and, on a replica, the
        outbox; on a replica the announcements only while it leads."""
        ingame = self.ingame.offer if self.ingame is not None else None
        outbox = self.outbox
        if outbox is None:
            if ingame is None or self.settings.cluster.role != "shadow":
                return ingame
            return None  # a shadow never announces

        def on_change(change: Any) -> None:
            outbox.offer(change)
            if ingame is not None and self._leader:
                ingame(change)

        return on_change

    def cluster_figures(self) -> ClusterFigures:
        stream = self.stream
        applied = stream_position(self.state.positions)
        return ClusterFigures(
            role=self.settings.cluster.role,
            connected=self.link is not None and self.link.connected,
            leader=self._leader,
            lease_changes=self.lease.changes if self.lease is not None else 0,
            position=applied,
            lag=max(0, stream.stream_end - applied) if stream is not None else 0,
            notifications=self.outbox.published if self.outbox is not None else 0,
            notification_duplicates=self.outbox.duplicates if self.outbox is not None else 0,
            outbox_kept=len(self.outbox.kept) if self.outbox is not None else 0,
            rejected=dict(stream.rejected) if stream is not None else {},
        )

    def _beat(self) -> dict[str, Any]:
        f = self.cluster_figures()
        return {
            "position": f.position,
            "seq": self.state.seq,
            "lag": f.lag,
            "leader": f.leader,
            "players": len(self.engine),
            "rejected": sum(f.rejected.values()),
        }

    @property
    def engine(self) -> Engine:
        """The global ladder (the primary model's, scored against the shadows)."""
        return self.state.engine

    def recover(self) -> RecoveryReport:
        """The state from the newest valid checkpoint and the journal tail (``recovery.py``);
        a cluster replica takes the tail from the stream instead."""
        self.recovery = recover(
            self.state, self.store, self.settings, self.models, self.clock, tail=self.stream is None
        )
        cut_ratings(self.ratings, self.recovery)
        return self.recovery

    # ------------------------------------------------------------------ metrics
    def _source(self, kind: type[S]) -> S | None:
        return next((s for s in self.sources if isinstance(s, kind)), None)

    def _dropped(self) -> Counter[str]:
        return merged([self.pipeline.dropped, *(s.dropped for s in self.sources)])

    def _unrated_deaths(self) -> Counter[str]:
        """World kills, suicides, team kills... seen in game-server logs (never rated)."""
        return merged(s.nonkills() for s in self.sources)

    def _suspects(self) -> int:
        """Pairs of the boosting report, worked out at the scrape (never per kill)."""
        gates = self.state.scopes.gates
        return len(gates.suspects()) if gates is not None and gates.config.suspects else 0

    def snapshot(self) -> MetricsSnapshot:
        st = self.state
        eng = st.engine
        info = eng.tier_info()
        by_tier = dict(zip(TIER_NAMES, info.counts, strict=True))
        by_tier["unplaced"] = len(eng) - sum(info.counts)
        mqtt = self._source(MqttIngest)
        mqtt_status = mqtt.status if mqtt is not None else MqttStatus()
        archive = self.store.archive
        return MetricsSnapshot(
            received=Counter(st.received),
            applied=st.applied,
            rejected=Counter(st.rejected),
            filtered=Counter(st.filtered),
            dropped=self._dropped(),
            queue_depth=self.queue.qsize(),
            queue_capacity=self.queue.maxsize,
            players_tracked=len(eng),
            players_cap=eng.params.max_players,
            players_active=eng.active_count,
            players_by_tier=by_tier,
            checkpoint_last_success=self.checkpointer.last_success,
            checkpoint_failures=self.checkpointer.failures,
            journal_bytes=self.store.journal.bytes_written,
            recovery_truncations=1 if self.recovery.truncated_bytes else 0,
            checkpoint_fallbacks=self.recovery.fallbacks,
            unrated_deaths=self._unrated_deaths(),
            mqtt_connected=mqtt_status.connected,
            mqtt_disconnects=mqtt_status.disconnects,
            mqtt_disconnected_seconds=mqtt_status.disconnected_seconds(time.monotonic()),
            ready=self.ready,
            placements=st.placements,
            models=self.models.figures(),
            query_connections=0 if self.query_handler is None else self.query_handler.connections,
            query_rejected=Counter() if self.query_handler is None else Counter(self.query_handler.rejected),
            storage_ok=self.faults.ok,
            intake_paused=self.pipeline.held is not None,
            storage_errors=Counter(self.faults.errors),
            scopes=self._scope_figures(),
            scope_counts=st.scopes.kind_counts(),
            scopes_refused=sum(st.scopes.refused.values()),
            excluded=st.excluded,
            exclusion_rules=len(st.scopes.exclusions.rules) - len(st.scopes.exclusions.merges()),
            merges=len(st.scopes.exclusions.merges()),
            boosting_suspects=self._suspects(),
            recompute_running=self.recomputer.status.running,
            recompute_runs=self.recomputer.status.runs,
            recompute_failures=self.recomputer.status.failures,
            archive_bytes=0 if archive is None else archive.total_bytes,
            archive_last_seq=0 if archive is None else archive.last_seq,
            clock_jumps=self.clock.jumps,
            time_clamped=st.intake.clamped,
            clock_offset=self.clock.offset,
            notify=None
            if self.notifier is None or not self.notifier.enabled
            else (self.notifier.connected, self.notifier.published, self.notifier.dropped),
        )

    def _scope_figures(self) -> dict[str, tuple[int, int, int]]:
        """Series for the global ladder, the current season, events and configured servers."""
        sc = self.state.scopes
        listed = {f"server:{s}" for s in self.settings.scopes.servers}
        out = {}
        for key, eng in sc.engines.items():
            kind = key.partition(":")[0]
            if kind == "server" and key not in listed:
                continue
            if kind == "season" and key in sc.closed:
                continue
            out[key] = (len(eng), eng.active_count, eng.applied)
        return out

    def stats(self) -> dict[str, Any]:
        """Daemon figures merged into the query ``stats`` answer."""
        st = self.state
        udp = self._source(UdpIngest)
        mqtt = self._source(MqttIngest)
        return {
            "received": dict(st.received),
            "rejected_by_daemon": dict(st.rejected),
            "dropped": dict(self._dropped()),
            "udp_auth_rejected": dict(udp.auth_rejected) if udp is not None else {},
            "journal_seq": st.seq,
            "excluded": st.excluded,
            "recompute": self.recomputer.status.as_dict(),
            "season": st.scopes.season,
            "placements": st.placements,
            "models": {f.model: f.as_dict() for f in self.models.figures()},
            "checkpoint_seq": st.checkpoint_seq,
            "queue_depth": self.queue.qsize(),
            "mqtt_connected": mqtt is not None and mqtt.status.connected,
            "unrated_deaths": dict(self._unrated_deaths()),
            "tails": {s.name: s.stats() for s in self.sources if isinstance(s, TailIngest)},
        }

    def _observe_query(self, op: str, seconds: float) -> None:
        """A query's latency into arenad_query_seconds{op}; the labelled child is looked up once
        per op (labels() costs more than the observation). The op labels are bounded (query.OPS
        and INVALID_OP), so is this map."""
        observe = self._query_observers.get(op)
        if observe is None:
            observe = self._query_observers[op] = self.metrics.query_seconds.labels(op=op).observe
        observe(seconds)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        """Recover, serve until SIGTERM/SIGINT, drain, checkpoint, return the exit code."""
        self.store.lock()
        try:
            return await self._run()
        finally:
            if self.ratings is not None:
                self.ratings.close()
            self.store.close()

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        servers: list[asyncio.Server] = []
        try:
            return await self._serve(servers)
        finally:
            self.ready = False
            await close_servers(servers)

    async def _serve(self, servers: list[asyncio.Server]) -> int:
        s = self.settings
        # Metrics first: /healthz answers 503 while the state is being loaded.
        if s.metrics.enabled:
            host, port = parse_hostport(s.metrics.listen)
            msrv = await serve_metrics(host, port, self.metrics, lambda: self.ready)
            servers.append(msrv)
            self.bound["metrics"] = msrv.sockets[0].getsockname()[:2]
        for source in self.sources:
            source.check()  # secrets and TLS files before anything is loaded
        if self.ingame is not None:
            self.ingame.check()  # rcon passwords, likewise
        started = time.perf_counter()
        report = await asyncio.to_thread(self.recover)
        self.store.journal.open_segment(self.state.seq + 1)
        log.info(
            "state_loaded",
            checkpoint=str(report.checkpoint) if report.checkpoint else None,
            checkpoint_seq=report.checkpoint_seq,
            replayed=report.replayed,
            fallbacks=report.fallbacks,
            truncated_bytes=report.truncated_bytes,
            players=len(self.engine),
            seconds=round(time.perf_counter() - started, 3),
            native_kernel=self.engine.native,  # False: built without a C compiler (docs/performance.md)
        )
        ctx = SourceContext(
            self.queue,
            self.stop,
            self.drained,
            self.store.path,
            self.clock.now_ms,
            positions=self.state.positions,
            chat=self.ingame.chat if self.ingame is not None else None,
        )
        try:
            handler = QueryHandler(
                lambda: self.state.scopes,
                s.query,
                stats=self.stats,
                observe=self._observe_query,
            )
            self.query_handler = handler
            qservers = await serve_query(handler, s.query)
            self._query_servers = qservers
            servers.extend(qservers)
            for srv in qservers:
                name = srv.sockets[0].getsockname()
                self.bound.setdefault("query", name[:2] if isinstance(name, tuple) else name)
            self.web = await start_web(
                s.web,
                web_ports(self.state, self.ratings, self.web_status, self.queue.qsize),
                observe=self.metrics.web.observe,
                forked=self.metrics.web.forked,
            )
            if self.web.address is not None:
                web_host, _, web_port = self.web.address.rpartition(":")
                self.bound["web"] = (web_host.strip("[]"), int(web_port))
            if self.link is not None:
                await self.link.open()
            for source in self.sources:
                self.bound.update(await source.open(ctx))
            servers.extend(await self._start_admin())
            # Ready before the first checkpoint: the recovered state is already durable (the
            # checkpoint it came from plus the journal tail, torn tail cut); the engine task
            # writes a checkpoint first thing, so the next start replays little, while queries
            # are answered and intake queues meanwhile.
            self.ready = True
            sdnotify.notify("READY=1")
            log.info(
                "arenad_started", **{k: list(v) if isinstance(v, tuple) else v for k, v in self.bound.items()}
            )
            self.recomputer.resume()  # requested before a crash or a stop: its result never landed
            async with asyncio.TaskGroup() as tg:
                self._source_tasks = [tg.create_task(src.run(ctx), name=src.name) for src in self.sources]
                tg.create_task(
                    self.pipeline.run(
                        stop=self.stop,
                        drained=self.drained,
                        sources_done=self._sources_done,
                        checkpoint=self.checkpointer.checkpoint,
                        checkpoint_interval=s.daemon.checkpoint_interval,
                        commit_interval=s.daemon.commit_interval,
                    ),
                    name="engine",
                )
                if self.notifier is not None and self.notifier.enabled:
                    tg.create_task(self.notifier.run(self.drained), name="notify")
                if self.ingame is not None:
                    tg.create_task(self.ingame.run(self.stop), name="ingame")
                if self.link is not None:
                    role = self.settings.cluster.role
                    tg.create_task(beat(self.link, role, self._beat, self.stop), name="heartbeat")
                if self.lease is not None:
                    tg.create_task(self.lease.run(self.stop), name="lease")
                if self.outbox is not None:
                    tg.create_task(self.outbox.run(self.stop), name="outbox")
                tg.create_task(self._wake_on_stop(), name="stopper")
            sdnotify.notify("STOPPING=1")
            await self.checkpointer.checkpoint()
            log.info("arenad_stopped", seq=self.state.seq, players=len(self.engine))
            return 0
        finally:
            self.ready = False
            if self.web is not None:
                await self.web.close()
            await self.recomputer.cancel()  # recompute.json stays: it runs again at the next start
            for source in self.sources:
                source.close()
            if self.link is not None:
                await self.link.close()

    def _sources_done(self) -> bool:
        """Every source task but the log followers' has ended (they end with ``stop``)."""
        return all(t.done() for t in self._source_tasks)

    async def _wake_on_stop(self) -> None:
        await self.stop.wait()
        log.info("stop_requested", queued=self.queue.qsize())
        # Wake the engine task if it is waiting on an empty queue (a full queue wakes it anyway).
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(Batch(source="control", items=[]))

    async def _start_admin(self) -> list[asyncio.Server]:
        a = self.settings.admin
        token = load_token(a.token_file) if a.token_file else None
        unix = None
        if not _off(a.unix):
            unix = Path(a.unix)
            if not unix.is_absolute():
                unix = self.store.path.absolute() / unix
        self.admin = AdminHandler(_AdminPort(self), self.reload if self._load_settings is not None else None)
        servers = await serve_admin(self.admin, unix, a.listen if a.tcp_enabled else None, token)
        for srv in servers:
            name = srv.sockets[0].getsockname()
            self.bound.setdefault(
                "admin" if isinstance(name, str) else "admin_tcp", name if isinstance(name, str) else name[:2]
            )
        return servers

    #: Keys ``reload`` may change in a running daemon; anything else needs a restart.
    RELOADABLE: ClassVar[dict[str, frozenset[str]]] = {
        "scopes": frozenset({"event", "season", "season_reset", "season_alpha", "season_lambda", "servers"}),
        "log": frozenset({"level", "reject_warning_interval"}),
        "query": frozenset({"rate_limit", "burst", "max_top", "display_k"}),
    }

    def reload(self) -> list[str]:
        """Re-read the config file and apply what can change live; names every key that cannot.

        New event windows that started in the past are filled in by a recompute of that scope.
        """
        assert self._load_settings is not None
        new = self._load_settings()
        old = self.settings
        changed: list[str] = []
        blocked: list[str] = []
        for section in Settings.model_fields:
            a, b = getattr(old, section), getattr(new, section)
            if a == b:
                continue
            if not isinstance(a, Section):  # [[tail]], [adr] as a whole
                blocked.append(section)
                continue
            allowed = self.RELOADABLE.get(section, frozenset())
            for name, spec in type(a).model_fields.items():
                if getattr(a, name) != getattr(b, name):
                    key = f"{section}.{spec.alias or name}"
                    (changed if name in allowed else blocked).append(key)
        if blocked:
            raise ArenadError(f"reload refused: {', '.join(blocked)} can only change with a restart")
        self.settings = new
        scopes = self.state.scopes
        scopes.reconfigure(new.scope_config())
        if self.query_handler is not None:
            self.query_handler.settings = new.query
        reload_settings(self._query_servers, new.query)
        if new.log.level != old.log.level:
            configure_level(new.log.level)
        self.reject_warnings.interval = new.log.reject_warning_interval
        old_events = {e.name for e in old.scopes.config().events}
        clock = self.engine.clock
        for ev in scopes.config.events:
            if ev.name not in old_events and ev.start < clock:
                self.recomputer.request(None, ev.start, f"reload: event {ev.name} started in the past")
        log.info("config_reloaded", changed=changed)
        return changed


class _AdminPort:
    """``admin.AdminPort`` over the daemon's rooms."""

    def __init__(self, daemon: Daemon) -> None:
        self._d = daemon

    @property
    def stopping(self) -> bool:
        return self._d.stop.is_set()

    @property
    def scopes(self) -> ScopeSet:
        return self._d.state.scopes

    @property
    def excluded(self) -> int:
        return self._d.state.excluded

    def control_time(self) -> float:
        return max(self._d.state.engine.clock, self._d.clock.now())  # -inf before the first event

    async def journal_control(self, request: ControlRequest) -> None:
        if self._d.stream is not None:  # a cluster replica: through the stream, for every replica
            await self._d.stream.publish_control(request)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        await self._d.queue.put(Batch(source="admin", items=[], done=finished, control=request))
        await done

    async def first_match_time(self, rule: Rule, upto: int) -> float | None:
        store = self._d.store
        async with store.history_lock:  # no segment is archived away while the scan reads
            return await asyncio.to_thread(
                first_match_time, store.path, Exclusions([rule]), upto, store.archive_reader()
            )

    async def request_recompute(self, scope: str | None, from_t: float | None, reason: str) -> dict[str, Any]:
        stream = self._d.stream
        if stream is None:
            return self._d.recomputer.request(scope, from_t, reason)
        # A cluster replica: every replica recomputes, each when the request reaches it in the
        # stream (after the rule it follows), so all of them swap in the same state.
        args = {"scope": scope, "from": from_t, "reason": reason}
        await stream.publish_control(ControlRequest("recompute", args, self.control_time()))
        return self._d.recomputer.status.as_dict()

    def recompute_status(self) -> dict[str, Any]:
        return self._d.recomputer.status.as_dict()


def run_daemon(settings: Settings, reload: Callable[[], Settings] | None = None) -> int:
    """Blocking entry point of ``arenad run``: uvloop when importable, plain asyncio otherwise."""
    daemon = Daemon(settings, reload)
    # The hot path allocates short-lived objects only; long-lived state (names, ids, dedupe keys)
    # would make every full collection walk millions of objects and stall queries for
    # milliseconds. Collect young objects less often and old ones rarely.
    gc.set_threshold(50_000, 20, 100)
    # Large transient arrays (recalibration) must go back to the system when freed, not stay in
    # the resident set as heap holes (arenad/daemon/alloc.py).
    log.info("allocator", mmap_threshold_fixed=fix_mmap_threshold())
    if uvloop is None:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(daemon.run())
    return int(uvloop.run(daemon.run()))
