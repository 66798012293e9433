"""sd_notify over real Unix datagram sockets, and the watchdog interval from the environment."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from arenad.daemon.sdnotify import notify, watchdog_interval

WAIT = 5.0  # seconds a receive may block before the test fails


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound Unix datagram socket at a filesystem path, as systemd would provide."""
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(WAIT)
        yield sock, path


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under systemd the test runner itself may have these set; each test states its own.
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)


class TestNotify:
    """notify() delivers one datagram to $NOTIFY_SOCKET and reports failure as False, never raising."""

    def test_a_socket_path_receives_the_message(
        self, listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sock, path = listener
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert notify("READY=1") is True
        assert sock.recv(4096) == b"READY=1"

    def test_several_assignments_travel_in_one_datagram(
        self, listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sock, path = listener
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert notify("STATUS=loading checkpoint ✓\nEXTEND_TIMEOUT_USEC=5000000")
        assert sock.recv(4096).decode() == "STATUS=loading checkpoint ✓\nEXTEND_TIMEOUT_USEC=5000000"

    def test_an_abstract_socket_is_named_with_a_leading_at(self, monkeypatch: pytest.MonkeyPatch) -> None:
        name = f"arenad-test-{os.getpid()}-{uuid.uuid4().hex}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind("\0" + name)
            sock.settimeout(WAIT)
            monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
            assert notify("WATCHDOG=1") is True
            assert sock.recv(4096) == b"WATCHDOG=1"

    def test_unset_or_empty_is_false(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert notify("READY=1") is False
        monkeypatch.setenv("NOTIFY_SOCKET", "")
        assert notify("READY=1") is False

    def test_nobody_listening_is_false(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone.sock"))
        assert notify("READY=1") is False

    def test_a_socket_that_is_not_a_datagram_socket_is_false(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = str(tmp_path / "stream.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(path)
            sock.listen()
            monkeypatch.setenv("NOTIFY_SOCKET", path)
            assert notify("READY=1") is False

    @pytest.mark.parametrize("address", ["relative.sock", "vsock:2:1234"])
    def test_unsupported_addresses_are_false(self, address: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        assert notify("READY=1") is False

    def test_an_unencodable_message_is_false(
        self, listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _, path = listener
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert notify("STATUS=\udc80") is False


class TestWatchdogInterval:
    """watchdog_interval() is half of $WATCHDOG_USEC in seconds, for this process only."""

    def test_half_the_timeout_in_seconds(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WATCHDOG_USEC", "30000000")
        assert watchdog_interval() == 15.0

    def test_sub_second_timeouts_are_kept(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WATCHDOG_USEC", "500000")
        assert watchdog_interval() == 0.25

    def test_unset_is_none(self) -> None:
        assert watchdog_interval() is None

    @pytest.mark.parametrize("value", ["", "abc", "0", "-5", "1.5e6"])
    def test_invalid_or_non_positive_is_none(self, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WATCHDOG_USEC", value)
        assert watchdog_interval() is None

    def test_our_own_pid_keeps_the_watchdog(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WATCHDOG_USEC", "30000000")
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
        assert watchdog_interval() == 15.0

    def test_another_pid_means_the_watchdog_is_not_ours(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WATCHDOG_USEC", "30000000")
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
        assert watchdog_interval() is None
