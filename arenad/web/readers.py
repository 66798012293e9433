"""Web readers: the API and the pages answered by forked snapshots of the daemon, off its loop.

Why (docs/web.md "Readers"): on the engine's loop every HTTP answer is loop time the engine
does not get, so under ingest the web keeps to ``[web] loop_share`` and requests queue behind
the engine (client p99 16-23 ms at 2,000 requests/s and 50k events/s, 1M players). A reader is
a ``fork()`` of the daemon taken between engine slices: its copy of the ladders, the scopes and
the rating history is consistent for free (nothing runs between two loop callbacks) and shared
copy-on-write with the daemon, and it answers on its own loop and core with no lock. It is
replaced by a newer fork ``[web] refresh`` seconds after the last while the state changes, and
at the next look (``_LOOK``) after an urgent change (a hide, a recompute's swap); an idle
ladder is not forked again.

One generation hands over to the next without a client noticing: the parent forks the new
reader (which starts accepting on the same listening socket as soon as its loop runs) and, once
the new one reports that it does (``ready``), tells the old one to retire and gives it the new
one's inbox; until then the old one answers as before, so no connection waits for a reader
still starting (2-14 ms at 1M players under load, ``_READY_TIMEOUT`` at most). The old reader
stops accepting, answers what it holds,
and moves every keep-alive connection as a bare fd (``SCM_RIGHTS``) once it is between requests,
with the rest of its idle deadline; the kernel keeps any bytes the client sent meanwhile in the
socket for the new reader. What does not move within ``idle_timeout`` (a client trickling a
head) is closed. The rate-limit buckets live in memory shared by the daemon and every reader
(``SharedBuckets``), so a client has one budget however many readers answer it. Request figures
and log lines come back to the daemon over the control socket, so the metrics and the logs are
the daemon's as before.

What a fork must not inherit, and how it is kept out: the daemon's loop (a new one is made; the
old epoll instance, shared with the daemon, is never touched), its signal wakeup fd (reset:
a signal to a reader must not reach the daemon's loop), every other fd (replaced by
``/dev/null`` so that no socket the daemon closes stays open here, and no stale object can
close a reused number; the rating history's database files excepted, which SQLite's inherited
table of open files locks through), locks other threads might hold (no stdio: logs go to the
parent; SQLite: the daemon forks only while no thread is inside it, ``ratinghistory.ForkGate``,
and the reader reads through a connection of its own), and the daemon's lifetime
(``PR_SET_PDEATHSIG``: a reader dies with it). Linux only (``prctl``, ``SOCK_SEQPACKET``);
elsewhere the daemon's loop answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import mmap
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgpack
import structlog

from arenad.views import take_token

log = structlog.get_logger("arenad.web")

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
MSG_MAX = 1 << 16  # bytes of one control or inbox message
FLUSH_INTERVAL = 0.1  # seconds between a reader's reports of its answered requests
HANDOVER_POLL = 0.005  # seconds between looks for connections that have gone idle
_LOOK = 0.25  # seconds between looks for an urgent change (a hide reaches the pages this soon)
_RETRY = 0.05  # seconds until the next try when a fork was due but not safe
_RESPAWN_SPACING = 1.0  # seconds between forks that replace readers which ended by themselves
_READY_TIMEOUT = 10.0  # seconds a new reader has to report ready before it is stopped
_REAP_TIMEOUT = 2.0  # seconds a stopped reader gets after SIGTERM before SIGKILL
_PROBES = 8  # slots of the shared rate-limit table a client may be found in
_U64 = (1 << 64) - 1

#: ``observe(route, status, seconds)``, as ``arenad.web.server.Observe``.
Observe = Callable[[str, int, float], None]


def fork_supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "SOCK_SEQPACKET")


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


# ---------------------------------------------------------------------------- the daemon's side
@dataclass(slots=True)
class _Reader:
    pid: int
    control: socket.socket  # the daemon's end
    inbox: socket.socket | None  # the daemon's copy of the send end of the reader's inbox
    forked_at: float
    retiring: bool = False
    retired_at: float = 0.0
    exited: bool = False
    ready: bool = False  # its loop runs and accepts: the reader it replaces may retire
    replaces: _Reader | None = None  # answering until this one is ready, then retired
    urgent: object = None  # ReaderPool.urgent() when it was forked: what it shows of privacy


def _drop_inbox(r: _Reader) -> None:
    """Close the parent's send end of ``r``'s inbox (once sent to the reader it replaces, or
    not needed any more)."""
    if r.inbox is not None:
        r.inbox.close()
        r.inbox = None


@dataclass
class ReaderPool:
    """Forks and retires the readers; runs on the daemon's loop (``run``).

    ``serve`` is what a reader runs in the child (``server.serve_reader``): it never returns.
    ``version`` changes whenever what the web shows may have (a new fork is due only then, and
    ``refresh`` after the last); ``urgent`` changes with what must show at once (privacy: a
    hide; a recompute's swap), a new fork following within a look (``_LOOK``);
    ``fork_guard`` is held around the forks and yields False while a worker thread is where a
    child must not find it (inside SQLite: ``ForkGate.quiet``); ``before_fork`` refreshes what
    the child should inherit fresh."""

    count: int
    refresh: float
    listener: socket.socket
    serve: Callable[[socket.socket, socket.socket, socket.socket, int], NoReturn]
    observe: Observe | None = None
    version: Callable[[], object] = object
    urgent: Callable[[], object] = lambda: None
    fork_guard: Callable[[], AbstractContextManager[bool]] = lambda: nullcontext(True)
    before_fork: Callable[[], None] = lambda: None
    forked: Callable[[float], None] | None = None  # seconds the loop was held by one fork
    index_wanted: Callable[[str], None] | None = None  # a reader's search found this scope unindexed
    retire_limit: float = 30.0  # seconds a retired reader may take to exit (idle_timeout + margin)
    _slots: list[_Reader | None] = field(default_factory=list)
    _retired: list[_Reader] = field(default_factory=list)
    _version: object = None
    _urgent: object = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _closed: bool = False
    _last_fork: float = -1e9
    _retry_after: float = -1e9  # no generation before this (a new reader failed before ready)

    def __post_init__(self) -> None:
        self._slots = [None] * self.count

    async def run(self) -> None:
        """Keep ``count`` readers no older than ``refresh`` behind a changing state, and none
        behind an ``urgent`` change (a hide, a recompute's swap) by more than a look."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            self._reap()
            now = time.monotonic()
            missing = any(r is None or r.exited for r in self._slots)
            wait = min(self.refresh, _LOOK)
            if missing and now - self._last_fork < _RESPAWN_SPACING:
                wait = _RESPAWN_SPACING - (now - self._last_fork)  # a reader that fails at once
            else:
                try:
                    if (missing or self._due(now)) and now >= self._retry_after:
                        with self.fork_guard() as safe:
                            if safe:
                                self._generation(loop)
                            else:
                                wait = _RETRY  # a worker thread is inside SQLite: soon
                    self._stop_overdue(now)
                    self._stop_unready(now)
                except Exception as e:  # this task must outlive any one failure: later forks
                    log.error("web_readers_failed", error=repr(e))
                    wait = _RESPAWN_SPACING
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)

    def _due(self, now: float) -> bool:
        if self.urgent() != self._urgent:
            return True
        old = all(r is not None and now - r.forked_at >= self.refresh for r in self._slots)
        return old and self.version() != self._version

    def _generation(self, loop: asyncio.AbstractEventLoop) -> None:
        if any(r is not None and r.replaces is not None for r in self._slots):
            return  # a handover is under way: the next look forks, once it is done
        try:
            self.before_fork()
        except Exception as e:  # what the fork inherits is a little staler; it forks all the same
            log.error("web_reader_before_fork_failed", error=repr(e))
        self._last_fork = time.monotonic()
        urgent, version = self.urgent(), self.version()
        for k, old in enumerate(self._slots):
            new = self._fork(loop)
            if new is None:  # fork failed: this generation is not done, the next look retries
                self._close_inboxes()
                return
            self._slots[k] = new
            new.urgent = urgent
            if old is not None and not old.exited:
                new.replaces = old  # retired when the new one is ready (_ready)
        self._close_inboxes()
        self._urgent, self._version = urgent, version

    def _close_inboxes(self) -> None:
        for r in self._slots:  # the inbox's send end lives on only in the reader it was sent to
            if r is not None and r.replaces is None:
                _drop_inbox(r)

    def _ready(self, reader: _Reader) -> None:
        """``reader`` accepts on its own loop: the one it replaces retires into it now."""
        if reader.ready or reader.exited or reader.retiring:  # late, or being stopped: _ended
            return
        reader.ready = True
        old, reader.replaces = reader.replaces, None
        if old is not None and old.exited:
            self._to_reap(old)  # ended meanwhile
        elif old is not None:
            self._retire(old)
            try:
                assert reader.inbox is not None
                socket.send_fds(old.control, [b"retire"], [reader.inbox.fileno()])
            except OSError:
                self._kill(old)
        _drop_inbox(reader)
        self._wake.set()  # a generation that waited for this handover may go on

    def _stop_unready(self, now: float) -> None:
        """A new reader that has not reported ready within ``_READY_TIMEOUT`` is killed (it holds
        no connection of its own yet); the one it was to replace goes on answering (``_ended``
        puts it back in its slot) and a slot it was alone in is filled again."""
        for r in self._slots:
            if r is None or r.ready or r.exited or r.retiring or r.pid <= 0:
                continue
            if now - r.forked_at > _READY_TIMEOUT:
                log.warning("web_reader_killed", pid=r.pid, reason="not ready in time")
                r.retiring = True  # its end is expected: _ended must not call it a failure
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, signal.SIGKILL)

    def _stop_overdue(self, now: float) -> None:
        """A retired reader has ``retire_limit`` seconds to hand over and exit; then SIGKILL (a
        reader stuck for any reason must not serve an old snapshot, or hold memory, for ever)."""
        for r in self._retired:
            if r.pid > 0 and r.retired_at and now - r.retired_at > self.retire_limit:
                log.warning("web_reader_killed", pid=r.pid, reason="did not exit after retiring")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, signal.SIGKILL)
                r.retired_at = 0.0

    def _fork(self, loop: asyncio.AbstractEventLoop) -> _Reader | None:
        control, control_child = _pair()
        inbox_recv, inbox_send = _pair()
        parent = os.getpid()
        started = time.perf_counter()
        try:
            pid = os.fork()
        except OSError as e:
            log.error("web_reader_fork_failed", error=str(e))
            for s in (control, control_child, inbox_recv, inbox_send):
                s.close()
            return None
        if pid == 0:  # the reader: never returns
            try:
                self.serve(self.listener, control_child, inbox_recv, parent)
            finally:
                os._exit(70)
        if self.forked is not None:
            self.forked(time.perf_counter() - started)
        control_child.close()
        inbox_recv.close()
        control.setblocking(False)
        reader = _Reader(pid, control, inbox_send, time.monotonic())
        loop.add_reader(control.fileno(), self._on_message, reader)
        return reader

    def _on_message(self, reader: _Reader) -> None:
        while True:
            try:
                data = reader.control.recv(MSG_MAX)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # the reader has ended
                self._ended(reader)
                return
            try:
                msg = msgpack.unpackb(data)
            except Exception:
                continue
            if "obs" in msg and self.observe is not None:
                for route, status, seconds in msg["obs"]:
                    self.observe(route, status, seconds)
            if "ready" in msg:
                self._ready(reader)
            if "index" in msg and self.index_wanted is not None:
                self.index_wanted(str(msg["index"]))
            if "log" in msg:
                line = str(msg["log"])
                with contextlib.suppress(Exception):
                    sys.stderr.write(line if line.endswith("\n") else line + "\n")
                    sys.stderr.flush()

    def _ended(self, reader: _Reader) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(reader.control.fileno())
        reader.control.close()
        reader.exited = True
        old, reader.replaces = reader.replaces, None
        if old is not None:  # it ended before it was ready: the one it was to replace stays
            _drop_inbox(reader)
            self._to_reap(reader)  # in no slot now
            self._restore(reader, old)
            # What the new one was to show is still due, urgent changes included: fork again,
            # a respawn's spacing later.
            self._version, self._urgent = None, object()
            self._retry_after = time.monotonic() + _RESPAWN_SPACING
        if not reader.retiring and not self._closed:
            log.warning("web_reader_ended", pid=abs(reader.pid))
            self._wake.set()  # replace it at once
        self._reap()

    def _restore(self, failed: _Reader, old: _Reader) -> None:
        """Put ``old`` back in the slot of ``failed``, its successor that ended before it was
        ready, unless it shows what an urgent change has changed since its fork (privacy: a hide
        must not be undone by a failing fork): then it stops too and the slot waits for a fork."""
        if old.exited:
            self._to_reap(old)
            return
        if failed in self._slots and old.urgent == self.urgent():
            self._slots[self._slots.index(failed)] = old
            return
        log.warning("web_reader_killed", pid=old.pid, reason="stale after an urgent change")
        self._retire(old)  # SIGKILL after retire_limit if SIGTERM does not end it
        self._kill(old)

    def _retire(self, r: _Reader) -> None:
        """``r`` is on its way out: counted from now against ``retire_limit``, reaped when gone."""
        r.retiring = True
        r.retired_at = time.monotonic()
        self._retired.append(r)

    def _to_reap(self, r: _Reader) -> None:
        """``r`` has ended but sits in no slot: keep it where ``_reap`` looks until it is waited for."""
        if r.pid > 0:
            self._retired.append(r)

    def _everyone(self) -> list[_Reader]:
        """Every reader not yet reaped: retired, in a slot, or answering until its successor is ready."""
        slots = [s for s in self._slots if s is not None]
        return [*self._retired, *slots, *(s.replaces for s in slots if s.replaces is not None)]

    def _reap(self) -> None:
        for r in self._everyone():
            if r.pid <= 0:
                continue
            try:
                pid, _ = os.waitpid(r.pid, os.WNOHANG)
            except ChildProcessError:
                pid = r.pid
            if pid:
                r.pid = -r.pid
                r.exited = True
        self._retired = [r for r in self._retired if r.pid > 0]

    def _kill(self, reader: _Reader) -> None:
        if reader.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(reader.pid, signal.SIGTERM)

    async def close(self) -> None:
        """Stop every reader (SIGTERM; SIGKILL after ``_REAP_TIMEOUT``) and wait for them."""
        self._closed = True
        self._wake.set()
        everyone = self._everyone()
        for r in everyone:
            self._kill(r)
        deadline = time.monotonic() + _REAP_TIMEOUT
        while True:
            self._reap()
            alive = [r for r in everyone if r.pid > 0]
            if not alive:
                break
            if time.monotonic() >= deadline:
                for r in alive:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(r.pid, signal.SIGKILL)
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(r.pid, 0)
                    r.pid = -r.pid
                break
            await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        for r in everyone:
            if not r.exited:
                with contextlib.suppress(Exception):
                    loop.remove_reader(r.control.fileno())
                r.control.close()
            if r.inbox is not None:
                r.inbox.close()
        self.listener.close()


# ---------------------------------------------------------------------------- shared by all
class SharedBuckets:
    """The per-client token buckets of every reader, in memory shared with all of them.

    Readers are separate processes, so ``ClientBuckets`` in each would give a client the rate
    once per reader (and afresh at every generation). This table is mapped by the daemon before
    its first fork and inherited by every reader it forks, so one client has one bucket however
    many readers answer it and however often they are replaced. Open addressing on the client's
    hash (the same in every fork: the hash secret is inherited): ``_PROBES`` slots, a client not
    found taking an empty one or else the least recently used of them (it starts full again, as
    a client ``ClientBuckets`` forgot). No lock, on purpose: a reader killed while holding one
    would stall every later reader on it. Each value is an aligned 8-byte word (written whole);
    two readers updating one client's bucket at the same microsecond can lose one update (one
    request more for that client), and two newcomers racing for one empty slot can leave one of
    them a fresh bucket at its next request.
    """

    def __init__(self, rate: float, burst: int, max_clients: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        n = 1 << max(4, (2 * max_clients - 1).bit_length())
        self._mask = n - 1
        self._map = mmap.mmap(-1, 24 * n)  # MAP_SHARED | MAP_ANONYMOUS: kept across fork
        view = memoryview(self._map)
        self._key = view[: 8 * n].cast("Q")  # 0: empty
        self._tokens = view[8 * n : 16 * n].cast("d")
        self._last = view[16 * n :].cast("d")

    def take(self, client: str, now: float) -> float:
        """0.0 if the request may go, else the seconds until the client has a token."""
        h = hash(client) & _U64
        key = h | 1  # never 0, the empty slot's mark
        keys, tokens, last, mask = self._key, self._tokens, self._last, self._mask
        start = (h >> 1) & mask
        slot = -1
        for k in range(_PROBES):
            j = (start + k) & mask
            got = keys[j]
            if got == key:
                slot = j
                break
            if got == 0:
                keys[j], tokens[j], last[j] = key, self.burst, now
                slot = j
                break
        if slot < 0:  # all taken: the least recently used of them starts again
            slot = min(((start + k) & mask for k in range(_PROBES)), key=lambda j: last[j])
            keys[slot], tokens[slot], last[slot] = key, self.burst, now
        tokens[slot], last[slot], wait = take_token(tokens[slot], last[slot], now, self.rate, self.burst)
        return wait


# ---------------------------------------------------------------------------- the reader's side
class ParentLogger:
    """A structlog logger whose lines go to the daemon over the control socket (a reader has no
    stdio of its own: its locks may be held by a thread of the daemon that was not forked)."""

    def __init__(self, control: socket.socket) -> None:
        self._control = control

    def msg(self, message: str) -> None:
        with contextlib.suppress(OSError):
            self._control.send(msgpack.packb({"log": str(message)[: MSG_MAX - 64]}))

    log = debug = info = warn = warning = error = err = critical = exception = fatal = failure = msg


def fds_of(paths: Sequence[str]) -> set[int]:
    """The fds open on ``paths`` (a reader keeps them: SQLite's inherited table of open files
    holds its locks through them)."""
    want = {os.path.realpath(p) for p in paths}
    out = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") in want:
                out.add(int(name))
    return out


def detach_from_daemon(keep: set[int], parent: int) -> None:
    """The first steps of a reader: die with the daemon, leave its signals and fds alone."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C reaches the group: the daemon stops us
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the daemon died before the prctl: nobody would stop us
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    keep = keep | {0, 1, 2, devnull}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.dup2(devnull, fd)
    # Nothing inherited is ever collected (its finalizers could touch the daemon's loop or
    # sockets): frozen, the collector never looks at it again, and collections scan only what
    # this reader made (an idle ladder is not forked again, so a reader may live for days).
    gc.freeze()
    with contextlib.suppress(Exception):  # "arenad-reader" in ps -o comm, top, /proc/PID/comm
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, b"arenad-reader", 0, 0, 0)


def new_loop() -> asyncio.AbstractEventLoop:
    """A fresh loop for the reader (the daemon's, inherited mid-callback, is left as it is)."""
    asyncio.events._set_running_loop(None)
    try:
        import uvloop  # noqa: PLC0415  # the daemon's loop kind, when it has it

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop


@dataclass(slots=True)
class ReaderLink:
    """A reader's two sockets to the rest: the daemon (control) and its inbox (connections from
    the reader it replaces)."""

    control: socket.socket
    inbox: socket.socket
    pending: list[list[Any]] = field(default_factory=list)  # answered requests not reported yet

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.pending.append([route, status, seconds])
        if len(self.pending) >= 1000:
            self.flush()

    def index_wanted(self, scope: str) -> None:
        with contextlib.suppress(OSError):
            self.control.send(msgpack.packb({"index": scope}))

    def ready(self) -> None:
        """Tell the daemon this reader accepts: the reader it replaces may retire into it."""
        with contextlib.suppress(OSError):
            self.control.send(msgpack.packb({"ready": True}))

    def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        with contextlib.suppress(OSError):
            self.control.send(msgpack.packb({"obs": batch}))
