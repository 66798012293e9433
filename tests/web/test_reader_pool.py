"""ReaderPool's handover (arenad/web/readers.py) with real forks and stand-in readers.

The old reader must go on answering until its successor's loop runs: it is told to retire only
once the new one reports ``ready``, and a successor that never does is stopped while the old one
keeps its slot. The stand-in reader is the smallest child that speaks the control protocol: it
reports ready after a delay (or never), waits for ``retire`` and notes each step in a file.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import msgpack
import pytest

from arenad.web import readers
from arenad.web.readers import ReaderPool

pytestmark = pytest.mark.skipif(not readers.fork_supported(), reason="readers fork on Linux")


Serve = Callable[[socket.socket, socket.socket, socket.socket, int], NoReturn]


def stand_in(log: Path, delays: list[str], forks: list[int]) -> Serve:
    """A reader that takes its delay before ``ready`` from ``delays`` by its place among the
    forks ("never": no ready at all) and notes "<event> <pid> <monotonic>" lines in ``log``.
    ``forks`` is counted in the parent after each fork (ReaderPool.forked), so each child
    inherits the number of forks before it."""

    def note(what: str) -> None:
        with log.open("a") as f:
            f.write(f"{what} {os.getpid()} {time.monotonic():.6f}\n")

    def serve(listener: socket.socket, control: socket.socket, inbox: socket.socket, parent: int) -> NoReturn:
        delay = delays[min(forks[0], len(delays) - 1)]
        note("start")
        control.setblocking(True)
        if delay != "never":
            time.sleep(float(delay))
            note("ready")
            control.send(msgpack.packb({"ready": True}))
        while True:
            msg, fds, _, _ = socket.recv_fds(control, 256, 1)
            if not msg:
                os._exit(0)
            if msg == b"retire":
                note("retire")
                for fd in fds:
                    os.close(fd)
                os._exit(0)

    return serve


def events(log: Path) -> list[tuple[str, int, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        what, pid, t = line.split()
        out.append((what, int(pid), float(t)))
    return out


async def run_pool(pool: ReaderPool, until: Callable[[], bool], timeout: float) -> None:
    task = asyncio.get_running_loop().create_task(pool.run())
    try:
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.02)
    finally:
        await pool.close()
        task.cancel()


def make_pool(
    tmp_path: Path, delays: str, version: Callable[[], object], urgent: Callable[[], object] = lambda: None
) -> tuple[ReaderPool, Path]:
    log = tmp_path / "log"
    forks = [0]

    def forked(_seconds: float) -> None:
        forks[0] += 1

    listener = socket.create_server(("127.0.0.1", 0))
    serve = stand_in(log, delays.split(), forks)
    pool = ReaderPool(1, 0.05, listener, serve, version=version, urgent=urgent, forked=forked)
    return pool, log


def reaped(pid: int) -> bool:
    """Whether ``pid`` is no child of ours any more (waited for), not a zombie left behind."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_old_reader_retires_only_once_its_successor_is_ready(tmp_path: Path) -> None:
    """Generation 2 takes 0.4 s to report ready: generation 1 is told to retire after that, not
    at the fork (until then it is the one that answers)."""
    pool, log = make_pool(tmp_path, "0 0.4 0", version=time.monotonic)  # always changed: due each refresh

    def two_handovers() -> bool:
        return sum(1 for e in events(log) if e[0] == "retire") >= 2

    asyncio.run(run_pool(pool, two_handovers, 20.0))
    evs = events(log)
    starts = [pid for what, pid, _ in evs if what == "start"]
    first, second = starts[0], starts[1]
    at = {(what, pid): t for what, pid, t in evs}
    assert at[("ready", second)] - at[("start", second)] >= 0.4
    assert at[("retire", first)] >= at[("ready", second)]
    # The second's own successor was forked only once the second was ready, though a fork was
    # due every 0.05 s: one handover at a time per slot.
    assert at[("start", starts[2])] >= at[("ready", second)]


def test_a_successor_never_ready_is_stopped_and_the_old_reader_keeps_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generation 2 never reports ready: after _READY_TIMEOUT it is stopped, generation 1 is not
    told to retire, and the next fork (ready at once) replaces generation 1."""
    monkeypatch.setattr(readers, "_READY_TIMEOUT", 0.5)
    pool, log = make_pool(tmp_path, "0 never 0", version=time.monotonic)

    def replaced_after_the_failure() -> bool:
        evs = events(log)
        return sum(1 for e in evs if e[0] == "start") >= 3 and any(e[0] == "retire" for e in evs)

    asyncio.run(run_pool(pool, replaced_after_the_failure, 20.0))
    evs = events(log)
    starts = [pid for what, pid, _ in evs if what == "start"]
    first, stuck, third = starts[0], starts[1], starts[2]
    at = {(what, pid): t for what, pid, t in evs}
    assert ("ready", stuck) not in at
    assert ("retire", stuck) not in at  # stopped, never told to retire: it was never in service
    # The first went on until the third was ready, and it is the first that retired into it.
    assert at[("retire", first)] >= at[("ready", third)]
    assert at[("start", third)] - at[("start", stuck)] >= 0.5
    assert reaped(stuck) and reaped(first)  # no zombie left behind


def test_a_reader_older_than_a_hide_is_not_kept_when_its_successor_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Privacy first: a hide (an urgent change) forks generation 2, which never reports ready.
    Generation 1 still shows the hidden player, so it is stopped too rather than put back, and
    the next fork (ready at once) serves alone."""
    monkeypatch.setattr(readers, "_READY_TIMEOUT", 0.5)
    token = ["before the hide"]
    pool, log = make_pool(tmp_path, "0 never 0", version=lambda: 1, urgent=lambda: token[0])

    def third_ready() -> bool:
        evs = events(log)
        starts = [pid for what, pid, _ in evs if what == "start"]
        if len(starts) == 1:
            token[0] = "after the hide"
        return len(starts) >= 3 and ("ready", starts[2]) in {(w, p) for w, p, _ in evs}

    asyncio.run(run_pool(pool, third_ready, 20.0))
    evs = events(log)
    starts = [pid for what, pid, _ in evs if what == "start"]
    first, stuck = starts[0], starts[1]
    at = {(what, pid): t for what, pid, t in evs}
    assert ("retire", first) not in at  # stopped, not handed over to the failing fork
    assert ("ready", stuck) not in at
    assert reaped(first) and reaped(stuck)
