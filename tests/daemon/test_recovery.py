"""Recovery and checkpoints on their own (arenad/daemon/recovery.py, statedir.py): the state a
restart reaches equals the state before it; a damaged newest checkpoint falls back to the one
before; a gap in the journal refuses to start; checkpoints wait while a step is held; one
arenad per state directory."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import msgpack
import pytest
from rooms import Rooms, build

from arenad.core.events import KillEvent
from arenad.daemon.recovery import offline_recompute
from arenad.daemon.state import StateError
from arenad.daemon.types import Batch
from arenad.errors import ArenadError
from arenad.settings import Settings


def step(r: Rooms, n: int, t0: float, tag: str) -> None:
    items: list[Any] = [
        KillEvent(t0 + k, f"p{k % 9}", f"p{(k * 4 + 1) % 9}", "eu-1", f"{tag}{k}") for k in range(n)
    ]
    asyncio.run(r.pipeline.process([Batch("mqtt", items)]))


def state_bytes(r: Rooms) -> bytes:
    return bytes(msgpack.packb(r.state.scopes.export_state(), use_bin_type=True))


def test_checkpoint_plus_tail_restores_the_state(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    now = r.clock.now()
    step(r, 300, now - 1000, "a")
    asyncio.run(r.checkpointer.checkpoint())
    step(r, 200, now - 500, "b")  # the journal tail after the checkpoint
    want, seq, applied = state_bytes(r), r.state.seq, r.state.applied
    r.close()
    again = build(tmp_path / "state")
    report = again.recover()
    again.close()
    assert (report.checkpoint_seq, report.replayed) == (300, 200)
    assert (again.state.seq, again.state.applied) == (seq, applied)
    assert state_bytes(again) == want
    # The ids seen before are remembered: a redelivery of the tail is refused as duplicate.
    assert again.state.intake._seen.keys() >= {("eu-1", "b0"), ("eu-1", "a0")}


def test_a_damaged_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    now = r.clock.now()
    step(r, 100, now - 1000, "a")
    asyncio.run(r.checkpointer.checkpoint())
    step(r, 100, now - 800, "b")
    asyncio.run(r.checkpointer.checkpoint())
    want = state_bytes(r)
    r.close()
    newest = r.store.checkpoints.list()[0][1]
    newest.write_bytes(newest.read_bytes()[:-40])  # torn
    again = build(tmp_path / "state")
    report = again.recover()
    again.close()
    assert report.fallbacks == 1 and report.checkpoint_seq == 100 and report.replayed == 100
    assert state_bytes(again) == want


def test_a_gap_in_the_journal_refuses_to_start(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    # A chunk stores its first sequence number: a gap can only fall between two chunks.
    r.store.journal.append([(1, 1.0e9, "a", "b", "eu-1", "1")])
    r.store.journal.append([(3, 1.0e9 + 1, "b", "a", "eu-1", "3")])
    r.store.journal.sync()
    r.close()
    again = build(tmp_path / "state")
    try:
        with pytest.raises(StateError, match="journal jumps from event 1 to 3"):
            again.recover()
    finally:
        again.close()


def test_no_checkpoint_while_a_step_is_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = build(tmp_path / "state")
    r.recover()
    now = r.clock.now()
    step(r, 10, now - 100, "a")

    def full(records: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(r.store.journal, "append", full)
    step(r, 10, now - 50, "b")
    assert r.pipeline.held is not None
    asyncio.run(r.checkpointer.checkpoint())
    assert r.store.checkpoints.list() == []  # would remember ids of events in no journal
    monkeypatch.undo()
    assert asyncio.run(r.pipeline.retry_held())
    asyncio.run(r.checkpointer.checkpoint())
    r.close()
    assert [seq for seq, _ in r.store.checkpoints.list()] == [20]
    assert r.checkpointer.failures == 0 and r.checkpointer.last_success > 0


def test_one_daemon_per_state_directory(tmp_path: Path) -> None:
    settings = Settings.from_mapping({"daemon": {"state_dir": str(tmp_path / "state")}})
    first = build(tmp_path / "state", settings)
    first.store.lock()
    try:
        with pytest.raises(ArenadError, match="in use by another arenad"):
            offline_recompute(settings)
    finally:
        first.close()
    assert offline_recompute(settings)["records"] == 0  # free again
