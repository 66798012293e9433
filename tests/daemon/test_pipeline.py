"""The engine task's step on its own (arenad/daemon/pipeline.py): journal, apply, acknowledge, in
that order; a refused journal write holds the step with nothing applied or acknowledged; the
engine loop drains what was queued, checkpoints and stops."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest
from rooms import Rooms, build

from arenad.core.events import KillEvent
from arenad.daemon.state import JournalRecord, read_records, record_seq
from arenad.daemon.types import Batch

T0 = 1_800_000_000.0


def kill_batch(n: int, t0: float, log: list[str], name: str, *, source: str = "mqtt") -> Batch:
    items: list[Any] = [
        KillEvent(t0 + k, f"p{k % 5}", f"p{k % 5 + 1}", "eu-1", f"{name}-{k}") for k in range(n)
    ]
    return Batch(source, items, done=lambda: log.append(name))


@pytest.fixture
def rooms(tmp_path: Path) -> Rooms:
    r = build(tmp_path / "state")
    r.recover()
    return r


def journaled(r: Rooms) -> list[JournalRecord]:
    path = r.store.journal.current_path
    assert path is not None
    return read_records(path.read_bytes())[0]


def test_a_step_is_journaled_before_it_is_applied_and_acknowledged(
    rooms: Rooms, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    sync = rooms.store.journal.sync

    def synced() -> None:
        sync()
        order.append(f"fsync applied={rooms.state.applied}")

    monkeypatch.setattr(rooms.store.journal, "sync", synced)
    now = rooms.clock.now()
    batches = [kill_batch(20, now - 100, order, "a"), kill_batch(5, now - 50, order, "b")]
    try:
        asyncio.run(rooms.pipeline.process(batches))
        records = journaled(rooms)
    finally:
        rooms.close()
    assert order == ["fsync applied=0", "a", "b"]
    assert rooms.state.seq == len(records) == 25
    assert rooms.state.applied + rooms.state.filtered["cooldown"] == 25
    assert rooms.state.received["mqtt"] == 25


def test_a_refused_write_holds_the_step_until_the_disk_takes_it(
    rooms: Rooms, monkeypatch: pytest.MonkeyPatch
) -> None:
    acked: list[str] = []
    append = rooms.store.journal.append
    failures = [2]

    def flaky(records: list[JournalRecord]) -> int:
        if failures[0]:
            failures[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return append(records)

    monkeypatch.setattr(rooms.store.journal, "append", flaky)
    now = rooms.clock.now()

    async def steps() -> list[bool]:
        await rooms.pipeline.process([kill_batch(10, now - 100, acked, "a")])
        return [await rooms.pipeline.retry_held(), await rooms.pipeline.retry_held()]

    try:
        assert rooms.state.seq == 0
        retries = asyncio.run(steps())
        records = journaled(rooms)
    finally:
        rooms.close()
    assert retries == [False, True]
    assert rooms.faults.errors["journal"] == 2 and rooms.faults.ok
    assert acked == ["a"]  # once, after the write that worked
    assert [record_seq(r) for r in records] == list(range(1, 11))  # the failed attempts left nothing behind
    assert rooms.pipeline.held is None


def test_a_failing_acknowledgement_does_not_stop_the_step(rooms: Rooms) -> None:
    acked: list[str] = []

    def broken() -> None:
        raise ConnectionError("broker gone")

    now = rooms.clock.now()
    bad = kill_batch(3, now - 100, acked, "bad")
    bad.done = broken
    try:
        asyncio.run(rooms.pipeline.process([bad, kill_batch(3, now - 90, acked, "good")]))
    finally:
        rooms.close()
    assert acked == ["good"]
    assert rooms.state.seq == 6


def test_the_engine_loop_drains_the_queue_then_stops(rooms: Rooms) -> None:
    acked: list[str] = []
    checkpoints: list[int] = []
    now = rooms.clock.now()

    async def checkpoint() -> None:
        checkpoints.append(rooms.state.seq)

    async def main() -> None:
        stop, drained = asyncio.Event(), asyncio.Event()
        for k in range(5):
            await rooms.queue.put(kill_batch(40, now - 500 + 50 * k, acked, f"b{k}"))
        stop.set()
        await asyncio.wait_for(
            rooms.pipeline.run(
                stop=stop,
                drained=drained,
                sources_done=lambda: True,
                checkpoint=checkpoint,
                checkpoint_interval=3600.0,
                commit_interval=0.0,
            ),
            timeout=30,
        )
        assert drained.is_set()

    try:
        asyncio.run(main())
    finally:
        rooms.close()
    assert acked == [f"b{k}" for k in range(5)]
    assert rooms.state.seq == 200
    assert checkpoints == [0]  # the first checkpoint comes at once, before the first step
    assert rooms.queue.empty()
