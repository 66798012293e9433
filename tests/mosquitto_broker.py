"""A real mosquitto broker on a free loopback port, for the tests that need MQTT.

``Mosquitto`` starts one broker with persistence in a test's temporary directory; ``stop()`` /
``start()`` restart the *same* broker (same port, same persistence file), which is how
broker-restart tests check that sessions and queued QoS 1 messages survive. mosquitto writes its
persistence file on a clean shutdown (SIGTERM), so ``stop()`` terminates it gracefully.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT = 10.0  # seconds for mosquitto to accept connections
STOP_TIMEOUT = 10.0  # seconds for a clean shutdown before it is killed


def _mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None
    )
    if found is None:
        pytest.fail(
            "mosquitto is not installed: the MQTT tests need a real broker "
            "(./scripts/test installs it, or: apt-get install mosquitto)",
            pytrace=False,
        )
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Mosquitto:
    """One mosquitto process with a fixed port and persistence directory across restarts."""

    host = "127.0.0.1"

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.extra_ports: list[int] = []
        self.extra_config: list[str] = []  # appended to the config at the next start()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "mosquitto.log"

    def add_listener(self, *lines: str) -> int:
        """Another listener on a new free port, with its own options (TLS, say); returns the port."""
        port = free_port()
        self.extra_ports.append(port)
        self.extra_config += [f"listener {port} {self.host}", *lines]
        return port

    def _write_config(self) -> Path:
        # When the tests run as root, mosquitto would otherwise drop to user "mosquitto" and be
        # unable to write its persistence file in our temporary directory.
        user = pwd.getpwuid(os.getuid()).pw_name
        lines = [
            "per_listener_settings false",
            f"user {user}",
            f"listener {self.port} {self.host}",
            "allow_anonymous true",
            "persistence true",
            f"persistence_location {self.workdir}/",
            f"log_dest file {self.log_path}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            *self.extra_config,
        ]
        path = self.workdir / "mosquitto.conf"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def start(self) -> None:
        """Start (or restart) the broker and wait until every listener accepts connections."""
        assert self.proc is None, "broker already running"
        config = self._write_config()
        self.proc = subprocess.Popen(
            [self.binary, "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT
        for port in (self.port, *self.extra_ports):
            while not self._accepts(port):
                if self.proc.poll() is not None:
                    code = self.proc.returncode
                    self.proc = None
                    pytest.fail(f"mosquitto exited with {code} at start:\n{self._log_tail()}", pytrace=False)
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"mosquitto did not listen on {port} within {START_TIMEOUT} s", pytrace=False)
                time.sleep(0.02)

    def stop(self) -> None:
        """Shut the broker down cleanly (it saves sessions and queued messages); idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)

    def _accepts(self, port: int) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.host, port), timeout=0.5):
            return True
        return False

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A running mosquitto on a free loopback port; stopped (always) when the test ends."""
    broker = Mosquitto(_mosquitto_binary(), tmp_path / "mosquitto")
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
