"""A real OpenArena dedicated server (Debian's ``openarena-server``) on loopback, for rcon tests.

Started with its home in a temporary directory, ``rconpassword`` set and ``g_log`` on; its
console (stdout) is read by a thread, so a test can wait for the server's own ``Rcon from`` line.
Every wait is bounded; ``stop`` kills the process (and is called by the fixtures' finalisers).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

BINARY = "/usr/games/openarena-server"
PASSWORD = "secret"


def available() -> bool:
    return os.access(BINARY, os.X_OK) and shutil.which("timeout") is not None


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rcon(port: int, command: str, password: str = PASSWORD, timeout: float = 1.0, tries: int = 5) -> str:
    """One raw rcon exchange, written here from the protocol (not through arenad's client).

    ioquake3 drops rcon packets over its own limit (a burst of 10, then 10 a second per
    address) without a word, before it runs them: a silent one is sent again, a few times.
    """
    for _ in range(tries - 1):
        try:
            return _rcon_once(port, command, password, timeout)
        except TimeoutError:
            continue
    return _rcon_once(port, command, password, timeout)


def _rcon_once(port: int, command: str, password: str, timeout: float) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(b"\xff\xff\xff\xffrcon " + password.encode() + b" " + command.encode(), ("127.0.0.1", port))
        data, _ = s.recvfrom(65536)
        out = [data]
        s.settimeout(0.2)
        try:
            while True:
                out.append(s.recvfrom(65536)[0])
        except TimeoutError:
            pass
    return "".join(d.removeprefix(b"\xff\xff\xff\xffprint\n").decode("utf-8", "replace") for d in out)


class OpenArenaServer:
    def __init__(self, home: Path, lifetime: int = 240) -> None:
        self.home = home
        self.port = free_udp_port()
        self.lines: list[str] = []
        self._cond = threading.Condition()
        home.mkdir(parents=True, exist_ok=True)
        # `timeout` bounds the server's life even if a test process dies without its finaliser.
        self.proc = subprocess.Popen(
            ["timeout", "-s", "KILL", str(lifetime), BINARY,
             "+set", "dedicated", "1", "+set", "net_ip", "127.0.0.1", "+set", "net_port", str(self.port),
             "+set", "fs_homepath", str(home), "+set", "rconpassword", PASSWORD,
             "+set", "g_log", "games.log", "+set", "g_logsync", "1", "+set", "sv_master1", "",
             "+set", "com_hunkmegs", "64", "+map", "oa_dm1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "HOME": str(home)}, text=True, errors="replace",
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def log_path(self) -> Path:
        return self.home / "baseoa" / "games.log"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_console(self, pattern: str, timeout: float = 20.0, start: int = 0) -> str:
        """The first console line from index ``start`` on matching ``pattern`` (a regex)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            k = start
            while True:
                while k < len(self.lines):
                    if rx.search(self.lines[k]):
                        return self.lines[k]
                    k += 1
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"no console line matching {pattern!r}; last: {self.lines[-5:]}")
                self._cond.wait(min(left, 0.5))

    def mark(self) -> int:
        with self._cond:
            return len(self.lines)

    def ready(self, timeout: float = 30.0) -> OpenArenaServer:
        self.wait_console(r"AAS initialized", timeout)
        # The map is loaded; the server answers rcon from its next frame on.
        deadline = time.monotonic() + timeout
        while True:
            try:
                if "map:" in rcon(self.port, "status", timeout=1.0):
                    return self
            except TimeoutError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the OpenArena server never answered rcon status")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
