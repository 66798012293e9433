"""Disk full under a real daemon: a 2 MiB tmpfs as the state directory, filled to ENOSPC.

A failed checkpoint leaves the previous one intact; a failed journal write pauses intake instead
of acknowledging what cannot be persisted (MQTT messages stay unacknowledged at the broker); both
raise the alarm in the metrics and the log; when space returns the daemon resumes by itself and
ends with every event exactly once, as an offline replay has it.

The tests run as root here and in CI; a machine where ``mount`` is refused fails the test (with
the reason), it does not skip it: a skipped fault test would look like a passing one.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonProcess
from waiting import wait_until

from arenad.daemon.emit import emit_mqtt, simulated_kills
from arenad.daemon.state import Checkpoints

FS_SIZE = "2m"
CHECKPOINT_INTERVAL = 2.0  # seconds; short, so a checkpoint is attempted while the disk is full
WAIT = 20.0  # seconds for any one condition


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test, unmounted (lazily if still busy) afterwards."""
    mnt = tmp_path / "state"
    mnt.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE},mode=0750", "tmpfs", str(mnt)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        pytest.fail(
            f"cannot mount a {FS_SIZE} tmpfs on {mnt} ({' '.join(cmd)} exited {proc.returncode}: "
            f"{proc.stderr.strip()}); the disk-full test needs root (or CAP_SYS_ADMIN)",
            pytrace=False,
        )
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30, check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30, check=False)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem refuses with ENOSPC; returns its path."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * size
            while True:
                try:
                    if f.write(block) != size:
                        break
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return filler


def events(n: int, seed: int, start: float) -> list[dict[str, Any]]:
    return list(simulated_kills(30, n, seed=seed, start=start, rate=1.0))


def offline_ladder(tmp_path: Path, evs: list[dict[str, Any]]) -> dict[str, Any]:
    """``arenad replay`` of the events: player -> state row."""
    src = tmp_path / "replay.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in evs))
    out = src.with_suffix(".state")
    cmd = [sys.executable, "-m", "arenad", "replay", "--out", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    return {row["player"]: row for row in map(json.loads, out.read_text().splitlines())}


def logged(daemon: DaemonProcess, event: str, **fields: Any) -> list[dict[str, Any]]:
    out = []
    for line in list(daemon.log_lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == event and all(rec.get(k) == v for k, v in fields.items()):
            out.append(rec)
    return out


class TestDiskFull:
    """A full state filesystem pauses intake and alarms; freeing space resumes with nothing lost."""

    def test_full_disk_pauses_alarms_and_resumes_exactly_once(
        self, small_fs: Path, mosquitto: Any, tmp_path: Path
    ) -> None:
        config = tmp_path / "arenad.toml"
        config.write_text(f"[daemon]\ncheckpoint_interval = {CHECKPOINT_INTERVAL}\n")
        daemon = DaemonProcess(small_fs, config=config)
        publisher: threading.Thread | None = None
        try:
            daemon.start(mqtt=mosquitto.url)
            daemon.wait_for(lambda s: s["mqtt_connected"])
            t0 = time.time() - 1000
            udp = events(200, seed=31, start=t0)
            mqtt = events(200, seed=32, start=t0 + 300)
            for e in mqtt:
                e["server"] = "eu-1"  # as the topic says (the daemon fills it in from there)
                e["id"] = f"mqtt-{e['id']}"

            # 1. Journaled and checkpointed normally.
            daemon.send_events(udp[:199])
            daemon.wait_for(lambda s: s["journal_seq"] == 199 and s["checkpoint_seq"] == 199)
            assert daemon.metric("arenad_storage_ok") == 1
            # One more event just after a checkpoint: the next one (≤ 2 s away) has work to do.
            daemon.send_events(udp[199:])
            daemon.wait_for(lambda s: s["journal_seq"] == 200)

            # 2. The disk fills up: the checkpoint fails and leaves the previous ones intact.
            filler = fill(small_fs)
            wait_until(
                lambda: daemon.metric("arenad_storage_errors_total", 'op="checkpoint"') >= 1,
                "a checkpoint failure counted",
                WAIT,
            )
            assert daemon.metric("arenad_storage_ok") == 0
            assert logged(daemon, "storage_write_failed", op="checkpoint", errno=errno.ENOSPC)
            assert not list(small_fs.glob(".checkpoint-*.tmp")), "a failed checkpoint left its temporary"
            kept = Checkpoints(small_fs).list()
            assert kept and kept[0][0] == 199
            for _seq, path in kept:
                Checkpoints.read(path)  # raises if it does not verify

            # 3. MQTT events while the disk is full: not journaled, not applied, not acknowledged.
            publisher = threading.Thread(
                target=emit_mqtt, args=(mosquitto.url, "arena/eu-1/kills", iter(mqtt)), kwargs={"batch": 20}
            )
            publisher.start()
            wait_until(
                lambda: (
                    daemon.metric("arenad_intake_paused") == 1
                    and daemon.metric("arenad_storage_errors_total", 'op="journal"') >= 1
                ),
                "intake paused on a journal failure",
                WAIT,
            )
            failed = logged(daemon, "storage_write_failed", op="journal")
            assert failed and failed[0]["errno"] == errno.ENOSPC and failed[0]["intake_paused"] is True
            publisher.join(WAIT)  # the broker has them all; arenad holds back its acknowledgements
            assert not publisher.is_alive()
            paused = daemon.stats()
            # A record that fits the journal file's last page may have gone in before ENOSPC;
            # the rest waits, and every retry (once a second) fails and is counted.
            assert paused["journal_seq"] < 400
            wait_until(
                lambda: daemon.metric("arenad_storage_errors_total", 'op="journal"') >= 3,
                "the journal write retried",
                WAIT,
            )
            assert daemon.stats()["journal_seq"] == paused["journal_seq"]
            assert daemon.alive()
            assert len(logged(daemon, "storage_write_failed", op="journal")) == 1, "logged once per interval"

            # 4. Space returns: the held batch is journaled, the backlog follows, the alarm clears.
            filler.unlink()
            freed = time.monotonic()
            stats = daemon.wait_for(lambda s: s["journal_seq"] >= 400, timeout=WAIT)
            wait_until(lambda: daemon.metric("arenad_storage_ok") == 1, "the alarm cleared", WAIT)
            assert time.monotonic() - freed < WAIT
            assert daemon.metric("arenad_intake_paused") == 0
            assert logged(daemon, "storage_recovered", op="journal")
            assert logged(daemon, "storage_recovered", op="checkpoint")
            # Every MQTT event exactly once: all 400 journaled, no duplicate applied.
            stats = daemon.wait_for(lambda s: s["applied"] + s["filtered"] >= 400)
            assert stats["journal_seq"] == 400
            assert stats["dropped"] == {}
            assert set(stats["rejected_by_daemon"]) <= {"duplicate_id"}
            assert daemon.metric("arenad_events_received_total", 'source="mqtt"') >= 200
            rows = daemon.ladder()
            assert daemon.stop() == 0
        finally:
            if publisher is not None:
                publisher.join(WAIT)
            daemon.kill()

        offline = offline_ladder(tmp_path, udp + mqtt)
        assert {r["player"] for r in rows} == set(offline)
        for row in rows:
            ref = offline[row["player"]]
            assert row["mu"] == pytest.approx(ref["mu"], abs=1e-9), row["player"]
            assert row["sigma"] == pytest.approx(ref["sigma"], abs=1e-9), row["player"]
        # And a restart from what is on the (no longer full) disk gives the same ladder.
        again = DaemonProcess(small_fs, config=config).start()
        try:
            assert again.stats()["journal_seq"] == 400
            assert again.ladder() == rows
        finally:
            again.kill()
