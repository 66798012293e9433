"""A real mosquitto broker for the daemon's integration tests.

``mosquitto`` starts one broker per test on a free loopback port with persistence in the test's
temporary directory; ``stop()`` / ``start()`` restart the *same* broker (same port, same
persistence file), which is how broker-restart tests check that sessions and queued QoS 1
messages survive. mosquitto writes its persistence file on a clean shutdown (SIGTERM), so
``stop()`` terminates it gracefully. The broker is always terminated at the end of the test.
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


# ---------------------------------------------------------------------------- an authenticated broker
SECURE_USERS = {"arenad": "arenad-pw", "server-eu1": "eu1-pw", "spectator": "spectator-pw"}
# Who may do what (mosquitto acl_file): arenad reads every server's kills, a game server writes
# only its own topic, a spectator only reads. Anything not granted is denied.
SECURE_ACL = """\
user arenad
topic read arena/+/kills

user server-eu1
topic write arena/eu-1/kills

user spectator
topic read arena/#
"""
OPENSSL_TIMEOUT = 30.0  # seconds for one openssl or mosquitto_passwd run


def _run_tool(*args: str, cwd: Path) -> None:
    proc = subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=OPENSSL_TIMEOUT, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}", pytrace=False)


def make_test_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A throw-away CA (EC P-256, valid one day) made with openssl: ``(cert, key)``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _run_tool(
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "1", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return cert, key


def make_server_cert(directory: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A server certificate for IP:127.0.0.1 and DNS:localhost signed by ``ca``: ``(cert, key)``."""
    cert, key, csr = directory / "server.pem", directory / "server.key", directory / "server.csr"
    ext = directory / "server.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n",
        encoding="ascii",
    )
    _run_tool(
        "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr),
        cwd=directory,
    )  # fmt: skip
    _run_tool(
        "openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "1",
        "-extfile", str(ext), "-out", str(cert),
        cwd=directory,
    )  # fmt: skip
    return cert, key


class SecureMosquitto(Mosquitto):
    """A mosquitto whose only listener is TLS on a free loopback port, with a password file and
    ACLs (``per_listener_settings true``, ``allow_anonymous false``); see ``SECURE_USERS`` and
    ``SECURE_ACL``. ``ca`` is the CA that signed the server certificate, ``other_ca`` one that did
    not."""

    users = SECURE_USERS

    def __init__(self, binary: str, workdir: Path) -> None:
        super().__init__(binary, workdir)
        pki = workdir / "pki"
        self.ca, ca_key = make_test_ca(pki, "arenad-test-ca")
        self.other_ca, _ = make_test_ca(pki, "untrusted-ca")
        self.cert, self.key = make_server_cert(pki, (self.ca, ca_key))
        self.password_file = workdir / "passwd"
        passwd = shutil.which("mosquitto_passwd")
        if passwd is None:
            pytest.fail("mosquitto_passwd is not installed (it comes with mosquitto)", pytrace=False)
        for i, (user, password) in enumerate(SECURE_USERS.items()):
            create = ["-c"] if i == 0 else []
            _run_tool(passwd, "-b", *create, str(self.password_file), user, password, cwd=workdir)
        self.acl_file = workdir / "acl"
        self.acl_file.write_text(SECURE_ACL, encoding="utf-8")
        for secret in (self.password_file, self.acl_file, self.key):
            secret.chmod(0o600)

    @property
    def url(self) -> str:
        return f"mqtts://{self.host}:{self.port}"

    def _write_config(self) -> Path:
        user = pwd.getpwuid(os.getuid()).pw_name
        lines = [
            "per_listener_settings true",
            f"user {user}",
            "persistence false",
            f"log_dest file {self.log_path}",
            "log_type all",
            f"listener {self.port} {self.host}",
            "allow_anonymous false",
            f"password_file {self.password_file}",
            f"acl_file {self.acl_file}",
            f"cafile {self.ca}",
            f"certfile {self.cert}",
            f"keyfile {self.key}",
            "tls_version tlsv1.2",
        ]
        path = self.workdir / "mosquitto.conf"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


@pytest.fixture
def secure_mosquitto(tmp_path: Path) -> Iterator[SecureMosquitto]:
    """A running TLS + password + ACL mosquitto on a free loopback port; always stopped at the end."""
    broker = SecureMosquitto(_mosquitto_binary(), tmp_path / "secure-mosquitto")
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
