"""A real mosquitto broker for the daemon's integration tests.

``mosquitto`` starts one broker per test on a free loopback port with persistence in the test's
temporary directory; ``stop()`` / ``start()`` restart the *same* broker (same port, same
persistence file), which is how broker-restart tests check that sessions and queued QoS 1
messages survive. mosquitto writes its persistence file on a clean shutdown (SIGTERM), so
``stop()`` terminates it gracefully. The broker is always terminated at the end of the test.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mosquitto_broker import Mosquitto, _mosquitto_binary, free_port, mosquitto  # noqa: F401 - re-exported

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
