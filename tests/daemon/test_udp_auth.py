"""Signed UDP end to end: a real daemon process, real datagrams, metrics and a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from daemon_harness import DaemonProcess

from arenad.auth import sign

KEY = bytes(range(32))
OTHER = bytes(range(100, 132))
AUTH = "arenad_udp_auth_rejected_total"


def kills(prefix: str, n: int) -> list[dict[str, Any]]:
    t = time.time()
    return [
        {"t": t, "attacker": f"{prefix}a{k}", "victim": f"{prefix}v{k}", "id": f"{prefix}{k}"}
        for k in range(n)
    ]


def signed(seq: int, events: list[dict[str, Any]], key: bytes = KEY, key_id: str = "eu-1") -> bytes:
    return sign(key, key_id, seq, time.time_ns() // 1_000_000, msgpack.packb(events))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "eu-1.key").write_text(KEY.hex() + "\n")
    cfg = tmp_path / "arenad.toml"
    cfg.write_text(
        '[udp]\nauth = "required"\nmax_skew = 30.0\n'
        f'[[udp.keys]]\nid = "eu-1"\nsecret_file = "{tmp_path / "eu-1.key"}"\n'
        '[[udp.keys]]\nid = "eu-2"\nsecret_env = "ARENAD_TEST_EU2_KEY"\n'
    )
    return cfg


@pytest.fixture
def daemon(tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("ARENAD_TEST_EU2_KEY", OTHER.hex())
    d = DaemonProcess(tmp_path / "state", config).start()
    yield d
    d.kill()


def wait_metric(d: DaemonProcess, labels: str, value: float, name: str = AUTH) -> None:
    deadline = time.monotonic() + 30
    while d.metric(name, labels) < value:
        assert time.monotonic() < deadline, f"{name}{{{labels}}} never reached {value}:\n{d.metrics()}"
        time.sleep(0.05)


class TestSignedUdp:
    """Only authentic, fresh, first-seen datagrams reach the ratings; the rest are counted."""

    def test_signed_accepted_and_forgeries_rejected_and_counted(self, daemon: DaemonProcess) -> None:
        daemon.send_udp(signed(1, kills("ok", 3)))
        daemon.send_udp(signed(1, kills("eu2", 2), OTHER, "eu-2"))  # each key has its own window
        # Journaled comes before applied: wait for the ratings, not only the journal.
        daemon.wait_for(lambda s: s.get("journal_seq", 0) >= 5 and s.get("applied", 0) >= 5)
        ladder_before = daemon.ladder()
        assert len(ladder_before) == 10

        forged = bytearray(signed(2, kills("forged", 3)))
        forged[-1] ^= 1
        daemon.send_udp(bytes(forged))  # bad MAC
        daemon.send_udp(signed(3, kills("unknown", 3), KEY, "eu-9"))  # unknown key
        daemon.send_udp(signed(4, kills("wrongkey", 3), OTHER, "eu-1"))  # another server's key
        daemon.send_udp(msgpack.packb(kills("unsigned", 3)))  # unsigned while required
        daemon.send_udp(signed(1, kills("replay", 3)))  # seq 1 again
        stale = sign(KEY, "eu-1", 5, time.time_ns() // 1_000_000 - 120_000, msgpack.packb(kills("old", 1)))
        daemon.send_udp(stale)
        for labels, n in (
            ('reason="bad_mac"', 2),
            ('reason="unknown_key"', 1),
            ('reason="unsigned"', 1),
            ('reason="replayed"', 1),
            ('reason="stale"', 1),
        ):
            wait_metric(daemon, labels, n)
        wait_metric(daemon, 'reason="unauthorised"', 4, "arenad_events_rejected_total")
        stats = daemon.stats()
        assert stats["journal_seq"] == 5
        assert daemon.ladder() == ladder_before  # nothing rejected touched the ratings

        daemon.send_udp(signed(6, kills("late", 1)))  # the window moved on past the refusals
        daemon.wait_for(lambda s: s.get("journal_seq", 0) >= 6)

    def test_restart_does_not_reopen_the_replay_window(
        self, tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("ARENAD_TEST_EU2_KEY", OTHER.hex())
        state = tmp_path / "state"
        captured = [signed(seq, kills(f"r{seq}-", 2)) for seq in (1, 2, 3)]
        d = DaemonProcess(state, config).start()
        try:
            for datagram in captured[:2]:
                d.send_udp(datagram)
            d.wait_for(lambda s: s.get("journal_seq", 0) >= 4)
            assert d.stop() == 0  # clean stop
            d.start()
            d.send_udp(captured[2])  # sent before, never seen: above the saved top, accepted
            d.wait_for(lambda s: s.get("journal_seq", 0) >= 6)
            # Keep signing until the periodic (un-fsynced) flush has saved a later datagram.
            replay_file = state / "udp-replay.json"
            seq, deadline = 3, time.monotonic() + 30
            while json.loads(replay_file.read_text())["keys"]["eu-1"]["seq"] <= 3:
                assert time.monotonic() < deadline, replay_file.read_text()
                seq += 1
                captured.append(signed(seq, kills(f"r{seq}-", 1)))
                d.send_udp(captured[-1])
                want = 6 + seq - 3
                d.wait_for(lambda s: s.get("journal_seq", 0) >= want)  # noqa: B023 - used at once
                time.sleep(0.1)  # pacing only: the flush happens at most once a second
            journal = d.stats()["journal_seq"]
            d.kill()  # kill -9: only the periodic flush is on disk
            d.start()
            for datagram in captured:
                d.send_udp(datagram)
            wait_metric(d, 'reason="replayed"', len(captured))
            assert d.stats()["journal_seq"] == journal
            # Fresh traffic goes on once the sender's clock is past the unclean-stop guard
            # (REPLAY_GUARD_MS after the last flushed timestamp); until then it counts as replayed.
            deadline = time.monotonic() + 30
            while d.stats()["journal_seq"] == journal:
                assert time.monotonic() < deadline
                seq += 1
                d.send_udp(signed(seq, kills(f"after{seq}-", 1)))
                time.sleep(0.2)  # pacing: each try is a new datagram, checked by the loop
        finally:
            d.kill()


class TestStartup:
    """A missing key fails at start, naming it."""

    def test_missing_key_file_fails_at_start(self, tmp_path: Path) -> None:
        cfg = tmp_path / "arenad.toml"
        cfg.write_text(
            f'[udp]\nauth = "required"\n[[udp.keys]]\nid = "eu-1"\nsecret_file = "{tmp_path}/none.key"\n'
        )
        d = DaemonProcess(tmp_path / "state", cfg)
        with pytest.raises(AssertionError):
            d.start()
        assert any("udp.keys[0].secret_file" in line for line in d.log_lines), d.log_lines[-10:]
