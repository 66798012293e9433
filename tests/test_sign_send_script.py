"""scripts/arenad-sign-send, the reference sender for game-server operators, run as a program:
its datagrams arrive on a real UDP socket and verify with arenad's own checks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack

from arenad.auth import Verified, Verifier

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "arenad-sign-send"
SENDER = (sys.executable, str(SCRIPT))
KEY = bytes(range(32))


def test_sent_datagrams_verify_and_carry_the_events(tmp_path: Path) -> None:
    key_file = tmp_path / "eu-1.key"
    key_file.write_text(KEY.hex() + "\n")
    events = [
        {"t": 1700000000.0 + k, "attacker": f"a{k}", "victim": f"v{k}", "id": f"m-{k}"} for k in range(7)
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(10)
        port = sock.getsockname()[1]
        subprocess.run(
            [
                *SENDER,
                "--to",
                f"127.0.0.1:{port}",
                "--key-id",
                "eu-1",
                "--key-file",
                str(key_file),
                "--batch",
                "3",
            ],
            input="".join(json.dumps(e) + "\n" for e in events),
            text=True,
            check=True,
            timeout=30,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        datagrams = [sock.recv(65535) for _ in range(3)]  # 3 + 3 + 1 events
    verifier = Verifier({"eu-1": KEY}, max_skew_ms=30_000)
    received: list[dict[str, object]] = []
    seqs: list[int] = []
    for datagram in datagrams:
        result = verifier.check(datagram, time.time_ns() // 1_000_000)
        assert isinstance(result, Verified), result
        seqs.append(result.seq)
        received.extend(msgpack.unpackb(result.payload))
    assert received == events
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    # The same datagrams again are replays.
    assert not isinstance(verifier.check(datagrams[0], time.time_ns() // 1_000_000), Verified)


def test_a_wrong_key_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "k"
    key_file.write_text((b"\x01" * 32).hex())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(10)
        port = sock.getsockname()[1]
        subprocess.run(
            [
                sys.executable,
                str(SCRIPT),
                "--to",
                f"127.0.0.1:{port}",
                "--key-id",
                "eu-1",
                "--key-file",
                str(key_file),
            ],
            input=json.dumps({"t": 1.0, "attacker": "a", "victim": "b"}) + "\n",
            text=True,
            check=True,
            timeout=30,
        )
        datagram = sock.recv(65535)
    assert not isinstance(
        Verifier({"eu-1": KEY}, 30_000).check(datagram, time.time_ns() // 1_000_000), Verified
    )
