"""The web's forked readers ([web] readers, arenad/web/readers.py) on a real daemon process.

A reader is a fork of the daemon answering HTTP from its snapshot; a newer fork replaces it as
the state changes. These tests hold it to what that must not cost: a keep-alive connection
survives generations (the same TCP connection, never reset) and sees the new state; a client
has one rate limit across readers and generations; a hide shows at once, not a refresh later;
a half-sent request finishes across a handover; readers hold none of the daemon's sockets, die
with it (kill -9) and are replaced when killed; and a daemon with readers answers exactly what
one answering on its loop does (the differential).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonProcess
from waiting import wait_until

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="readers fork on Linux")


def config(tmp: Path, **web: Any) -> Path:
    body = "[web]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in web.items())
    path = tmp / "arenad.toml"
    path.write_text(body)
    return path


def events(n: int, players: int, seed: int, t0: float) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = [f"r{k}" for k in range(players)]
    out = []
    for k in range(n):
        a, v = rng.sample(names, 2)
        out.append({"t": t0 + 3.0 * k, "attacker": a, "victim": v, "server": "eu-1"})
    return out


def readers_of(pid: int, n: int = 2) -> set[int]:
    """The daemon's readers once there are ``n`` of them."""
    got: set[int] = wait_until(
        lambda: children(pid) if len(children(pid)) >= n else set(), f"{n} readers", 10
    )
    return got


def children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
                out.add(int(entry.name))
    return out


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            out.add(target)
    return out


def listener_inode(port: int) -> str:
    """The socket inode listening on ``port`` (from /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "0A":  # 0A: LISTEN
            return f"socket:[{f[9]}]"
    raise AssertionError(f"nothing listens on {port}")


def request(conn: http.client.HTTPConnection, path: str) -> tuple[int, Any]:
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    return r.status, json.loads(body) if body.startswith(b"{") else body


def get(d: DaemonProcess, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(*d.addr("web"), timeout=10)
    try:
        return request(conn, path)
    finally:
        conn.close()


def caught_up(d: DaemonProcess, seq: int, players: int) -> None:
    """Until the web shows journal position ``seq`` with its ``players`` rated, on every reader,
    and its name index is complete. A position is journaled before the engine applies it, so a
    reader forked in between shows the position over an engine without its events; and while a
    generation hands over, another connection can still reach the reader it replaces: hence the
    players too, and a run of answers in a row (each its own connection)."""

    def current() -> bool:
        body = get(d, "/api/v1/status")[1]
        return bool(body["journal_seq"] == seq and body["players"] == players)

    def shown() -> bool:
        return all(current() for _ in range(12))

    def indexed() -> bool:
        return get(d, "/api/v1/search?q=r")[0] == 200

    wait_until(shown, "the web caught up", 30)
    wait_until(indexed, "the name index", 30)


def started(tmp: Path, **web: Any) -> DaemonProcess:
    return DaemonProcess(tmp / "state", config=config(tmp, **web)).start()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = started(tmp_path, readers=2, refresh=0.2)
    try:
        yield d
    finally:
        if d.alive():
            d.stop()


def test_a_keep_alive_connection_outlives_generations_and_sees_each_new_state(daemon: DaemonProcess) -> None:
    forks_before = daemon.metric("arenad_web_reader_forks_total")
    conn = http.client.HTTPConnection(*daemon.addr("web"), timeout=10)
    status, _ = request(conn, "/api/v1/tiers")
    assert status == 200
    assert conn.sock is not None
    local = conn.sock.getsockname()
    t0 = time.time() - 3600
    for k in range(6):  # a newcomer each round: only a newer snapshot knows them
        daemon.send_events([{"t": t0 + k, "attacker": f"new{k}", "victim": "old", "server": "eu-1"}])
        path = f"/api/v1/players/new{k}"

        def known(path: str = path) -> bool:
            return request(conn, path)[0] == 200

        wait_until(known, f"{path} answered", 10)
        assert conn.sock is not None and conn.sock.getsockname() == local  # never reconnected
    assert daemon.metric("arenad_web_reader_forks_total") >= forks_before + 2 * 6
    conn.close()


def test_one_rate_limit_for_a_client_across_readers_and_generations(tmp_path: Path) -> None:
    # A token every 10 s: nothing below waits that long (the refill itself is the differential
    # test's, tests/web/test_shared_buckets.py).
    d = started(tmp_path, readers=2, refresh=0.1, rate_limit=0.1, burst=6)
    try:
        # Fresh connections, so the kernel spreads them over both readers.
        statuses = [get(d, "/api/v1/tiers")[0] for _ in range(6)]
        assert statuses == [200] * 6
        assert [get(d, "/api/v1/tiers")[0] for _ in range(3)] == [429] * 3
        forks = d.metric("arenad_web_reader_forks_total")
        d.send_events([{"t": time.time() - 60, "attacker": "a", "victim": "b", "server": "eu-1"}])
        wait_until(lambda: d.metric("arenad_web_reader_forks_total") >= forks + 2, "a new generation", 8)
        # New readers, the same bucket: still empty (per-process buckets would start full).
        assert [get(d, "/api/v1/tiers")[0] for _ in range(4)] == [429] * 4
    finally:
        d.stop()


def test_a_hide_reaches_the_readers_at_once_not_a_refresh_later(tmp_path: Path) -> None:
    d = started(tmp_path, readers=1, refresh=3600.0)
    try:
        evs = events(40, 6, 1, time.time() - 7200)
        d.send_events(evs)
        d.wait_for(lambda s: s["journal_seq"] == len(evs))
        # refresh is an hour, and the readers were forked before any kill: only the urgent path
        # (who is hidden changed) forks a snapshot that knows the players this soon.
        assert get(d, "/api/v1/players/r2")[0] == 404
        assert d.admin({"op": "hide", "player": "r1", "reason": "asked"})["ok"]
        wait_until(lambda: get(d, "/api/v1/players/r2")[0] == 200, "a snapshot after the hide", 5)
        assert get(d, "/api/v1/players/r1")[0] == 404
        assert d.admin({"op": "unhide", "player": "r1"})["ok"]
        wait_until(lambda: get(d, "/api/v1/players/r1")[0] == 200, "r1 shown again", 5)
    finally:
        d.stop()


def test_a_request_half_sent_across_a_handover_is_answered_and_the_connection_moves(
    daemon: DaemonProcess,
) -> None:
    with socket.create_connection(daemon.addr("web"), timeout=10) as s:
        s.sendall(b"GET /api/v1/tiers HTTP/1.1\r\nHo")
        for k in range(2):  # two generations, each after a kill: the first reader retires mid-head
            forks = daemon.metric("arenad_web_reader_forks_total")
            daemon.send_events(
                [{"t": time.time() - 60 + k, "attacker": "a", "victim": "b", "server": "eu-1"}]
            )
            wait_until(forked_since(daemon, forks, 2), "a generation", 10)
        s.sendall(b"st: x\r\n\r\n")
        first = read_response(s)
        assert first.startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /api/v1/players/a HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(s).startswith(b"HTTP/1.1 200")  # a's kill: a newer snapshot answered


def forked_since(d: DaemonProcess, forks: float, n: int) -> Callable[[], bool]:
    def done() -> bool:
        return d.metric("arenad_web_reader_forks_total") >= forks + n

    return done


def read_response(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, "the connection closed"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, "the connection closed"
        body += chunk
    return head


def test_readers_hold_none_of_the_daemons_sockets(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    readers_of(pid)  # both up
    listening = listener_inode(daemon.addr("web")[1])
    mine = socket_inodes(pid)
    assert len(mine) >= 4  # UDP, query, metrics, admin at least: there is something to leak

    def leaks() -> dict[int, set[str]]:
        # A reader holds everything for the moment between its fork and its first steps; a
        # generation may be that young when we look, so the property is asked of readers that
        # have settled: within a few seconds none may hold anything but the listening socket.
        out = {}
        for r in children(pid):
            try:
                shared = socket_inodes(r) & mine
            except OSError:  # retired and gone meanwhile
                continue
            if not shared <= {listening}:
                out[r] = shared
        return out

    wait_until(lambda: not leaks(), "no reader holding the daemon's sockets", 5)
    for r in readers_of(pid):
        with contextlib.suppress(OSError):
            assert Path(f"/proc/{r}/comm").read_text().strip() == "arenad-reader"  # ps tells them apart


def test_readers_die_with_the_daemon_and_free_the_port(tmp_path: Path) -> None:
    d = started(tmp_path, readers=2, refresh=0.2)
    assert d.proc is not None
    pid = d.proc.pid
    readers = readers_of(pid)
    port = d.addr("web")[1]
    d.kill()  # kill -9: the daemon cannot stop them; PR_SET_PDEATHSIG does
    wait_until(lambda: not any(Path(f"/proc/{r}").exists() for r in readers), "the readers gone", 10)
    with socket.socket() as s:  # nobody holds the port: a restart can listen on it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_killed_reader_is_replaced(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    readers = readers_of(pid)
    victim = min(readers)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(children(pid) - {victim}) >= 2, "a reader in its place", 10)
    assert all(get(daemon, "/api/v1/tiers")[0] == 200 for _ in range(20))
    assert daemon.alive()


def test_readers_answer_what_the_daemons_loop_answers(tmp_path: Path) -> None:
    """The differential: the same kills into a daemon answering on its loop and one answering
    from forked readers give the same bodies, route by route."""
    evs = events(400, 30, 7, time.time() - 86400)
    paths = [
        "/api/v1/leaderboard?limit=100",
        "/api/v1/players/r3",
        "/api/v1/players?ids=r1,r2,r29,nobody",
        "/api/v1/tiers",
        "/api/v1/predict?a=r1&b=r2",
        "/api/v1/balance?players=r1,r2,r3,r4,r5,r6&teams=2",
        "/api/v1/search?q=r2",
        "/api/v1/players/r4/history",
        "/",
        "/players/r5",
    ]
    bodies = []
    for k, readers in enumerate((0, 2)):
        (tmp_path / f"s{k}").mkdir()
        d = DaemonProcess(
            tmp_path / f"s{k}" / "state", config=config(tmp_path / f"s{k}", readers=readers)
        ).start()
        try:
            d.send_events(evs)
            d.wait_for(lambda s: s["journal_seq"] == len(evs))
            caught_up(d, len(evs), len({e[k] for e in evs for k in ("attacker", "victim")}))
            bodies.append({p: get(d, p) for p in paths})
        finally:
            d.stop()
    loop, forked = bodies
    for p in paths:
        assert forked[p][0] == loop[p][0] == 200, p
        assert forked[p][1] == loop[p][1], p
