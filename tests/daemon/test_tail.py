"""Following game-server logs: tail -F semantics on real files, and a real daemon following one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonProcess

from arenad.core.events import KillEvent
from arenad.daemon.config_sources import TailSpec
from arenad.daemon.sources.tail import LogFollower
from arenad.daemon.types import Batch
from arenad.feeds import builtin_feeds

REALDATA = Path(__file__).parents[1] / "data" / "realdata"


def line(t: float, a: str, v: str, event_id: str) -> bytes:
    return json.dumps({"t": t, "attacker": a, "victim": v, "id": event_id}).encode() + b"\n"


async def follow(
    path: Path, actions: list[Any], want: int, position: dict[str, Any] | None = None, from_start: bool = True
) -> tuple[list[KillEvent], LogFollower, dict[str, Any] | None]:
    """Run a follower on ``path`` while ``actions`` (callables) change the file; stop after
    ``want`` kill events arrived (bounded by a timeout). Returns events, follower, last position."""
    queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=8)
    spec = TailSpec(format="arenad", path=str(path), from_start=from_start)
    follower = LogFollower(spec, builtin_feeds()["arenad"].parser({}), queue, position, poll=0.02)
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    got: list[KillEvent] = []
    last: dict[str, Any] | None = position
    pending = list(actions)
    deadline = time.monotonic() + 10
    try:
        while len(got) < want and time.monotonic() < deadline:
            if pending:
                pending.pop(0)()
            try:
                batch = await asyncio.wait_for(queue.get(), timeout=0.2)
            except TimeoutError:
                continue
            got.extend(i for i in batch.items if isinstance(i, KillEvent))
            if batch.position is not None:
                last = batch.position[1]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
    return got, follower, last


class TestFollower:
    """tail -F: late files, partial lines, rotation, truncation, resuming from a position."""

    def test_file_created_later_is_read_from_its_start(self, tmp_path: Path) -> None:
        path = tmp_path / "games.log"

        def create() -> None:
            path.write_bytes(line(1, "a", "b", "1") + line(2, "b", "a", "2"))

        got, _, _ = asyncio.run(follow(path, [lambda: None, create], want=2, from_start=False))
        assert [e.id for e in got] == ["1", "2"]

    def test_partial_lines_wait_for_their_newline(self, tmp_path: Path) -> None:
        path = tmp_path / "games.log"
        whole = line(1, "a", "b", "1")
        path.write_bytes(whole[:10])

        def finish() -> None:
            with path.open("ab") as f:
                f.write(whole[10:] + line(2, "a", "c", "2"))

        got, follower, _ = asyncio.run(follow(path, [lambda: None, lambda: None, finish], want=2))
        assert [e.id for e in got] == ["1", "2"]
        assert follower.status.lines == 2

    def test_rotation_finishes_the_old_file_then_reads_the_new(self, tmp_path: Path) -> None:
        path = tmp_path / "games.log"
        path.write_bytes(line(1, "a", "b", "1"))

        def rotate() -> None:
            with path.open("ab") as f:
                f.write(line(2, "a", "b", "2") + b'{"t": 3, "attacker": "c", "victim": "d", "id": "3"}')
            path.rename(tmp_path / "games.log.1")
            path.write_bytes(line(4, "d", "c", "4"))

        got, follower, _ = asyncio.run(follow(path, [lambda: None, rotate], want=4))
        assert [e.id for e in got] == ["1", "2", "3", "4"]
        assert follower.status.rotations == 1

    def test_truncation_starts_over(self, tmp_path: Path) -> None:
        path = tmp_path / "games.log"
        path.write_bytes(line(1, "a", "b", "1") + line(2, "a", "b", "2"))

        def truncate() -> None:
            path.write_bytes(line(3, "x", "y", "3"))  # shorter than what was read

        got, follower, _ = asyncio.run(follow(path, [lambda: None, lambda: None, truncate], want=3))
        assert [e.id for e in got] == ["1", "2", "3"]
        assert follower.status.truncations == 1

    def test_resume_from_a_position_neither_skips_nor_repeats(self, tmp_path: Path) -> None:
        path = tmp_path / "games.log"
        path.write_bytes(b"".join(line(k, "a", "b", str(k)) for k in range(1, 4)))
        got, _, position = asyncio.run(follow(path, [], want=3))
        assert position is not None
        with path.open("ab") as f:
            f.write(line(4, "a", "b", "4") + line(5, "a", "b", "5"))
        more, _, _ = asyncio.run(follow(path, [], want=2, position=position))
        assert [e.id for e in got + more] == ["1", "2", "3", "4", "5"]

    def test_first_start_on_an_existing_file_reads_only_new_lines(self, tmp_path: Path) -> None:
        path = tmp_path / "games.log"
        path.write_bytes(line(1, "a", "b", "old"))

        def append() -> None:
            with path.open("ab") as f:
                f.write(line(2, "a", "b", "new"))

        got, _, _ = asyncio.run(follow(path, [lambda: None, lambda: None, append], want=1, from_start=False))
        assert [e.id for e in got] == ["new"]


def _append_in_chunks(src: list[bytes], dst: Path, chunks: int) -> None:
    step = max(1, len(src) // chunks)
    for k in range(0, len(src), step):
        with dst.open("ab") as f:
            f.write(b"".join(src[k : k + step]))
        time.sleep(0.01)  # pacing: a log that grows while it is followed, not a synchronisation


def decided(stats: dict[str, Any]) -> int:
    """Events the rating core has decided on: applied, filtered or rejected by it."""
    return int(stats["applied"] + stats["filtered"] + sum(stats["rejected"].values()))


class TestDaemonFollowsOpenArena:
    """A real daemon follows a games.log that a writer appends to, through a rotation and a restart."""

    def test_live_follow_with_rotation_and_restart(self, tmp_path: Path) -> None:
        log = tmp_path / "games.log"
        second = (REALDATA / "openarena-2.log").read_bytes().splitlines(keepends=True)
        config = tmp_path / "arenad.toml"
        # The captures are from 2026-11-30: accept them however old they are when this runs.
        # from_start: the writer may create the file before the follower first looks for it;
        # without it a file that already exists at the first look is only read from its end.
        config.write_text(
            "[daemon]\nmax_event_age = 1e10\n"
            f'[[tail]]\nformat = "openarena"\npath = "{log}"\nfrom_start = true\n'
        )
        d = DaemonProcess(tmp_path / "state", config=config)
        try:
            d.start(udp="off")  # the file does not exist yet
            source = f"tail:{log}"
            writer = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys, time, pathlib\n"
                    "src = pathlib.Path(sys.argv[1]).read_bytes().splitlines(keepends=True)\n"
                    "dst = pathlib.Path(sys.argv[2])\n"
                    "for k in range(0, len(src), 400):\n"
                    "    with dst.open('ab') as f: f.write(b''.join(src[k:k + 400]))\n"
                    "    time.sleep(0.02)\n",
                    str(REALDATA / "openarena-1.log"),
                    str(log),
                ]
            )
            assert writer.wait(60) == 0
            # Received is counted before the events are journaled and rated: wait for both.
            stats = d.wait_for(
                lambda s: s["received"].get(source, 0) >= 1291 and decided(s) >= 1291, timeout=60
            )
            assert stats["received"][source] == 1291  # player kills only: the rest is counted apart
            assert d.metric("arenad_unrated_deaths_total", 'kind="suicide"') == 70
            assert d.metric("arenad_unrated_deaths_total", 'kind="world_kill"') == 1
            assert d.stats()["unrated_deaths"] == {"suicide": 70, "world_kill": 1}
            rated_before = decided(stats)
            # Rotate: the old file keeps its name with .1, a new games.log starts.
            log.rename(tmp_path / "games.log.1")
            _append_in_chunks(second, log, 5)
            stats = d.wait_for(
                lambda s: s["received"].get(source, 0) >= 1291 + 696 and decided(s) >= rated_before + 696,
                timeout=60,
            )
            assert decided(stats) - rated_before == 696
            ladder = d.ladder()
            assert d.stop() == 0
            # Restart: resumes at the checkpointed offset, re-applies nothing.
            d.start(udp="off")
            again = d.stats()
            assert again["applied"] == stats["applied"]
            assert d.ladder() == ladder
            assert again["received"].get(source, 0) == 0  # nothing read again after the checkpoint
            assert os.path.exists(tmp_path / "games.log.1")
        finally:
            d.kill()

    def test_unknown_tail_format_fails_at_start(self, tmp_path: Path) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "arenad", "run", "--state-dir", str(tmp_path / "s"), "--udp", "off",
             "--query", "off", "--metrics", "off", "--tail", f"nope:{tmp_path}/x.log"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2
        assert "tail.format" in proc.stderr

    @pytest.mark.parametrize("bad", ["openarena", ":x", "openarena:"])
    def test_bad_tail_flag(self, tmp_path: Path, bad: str) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "arenad", "run", "--state-dir", str(tmp_path / "s"), "--tail", bad],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2
        assert "--tail" in proc.stderr
