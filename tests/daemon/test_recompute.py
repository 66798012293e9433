"""Background recompute and retention on their own (arenad/daemon/recompute.py): a recompute of
unchanged history reproduces the live state; one under a new rule rates the player nowhere;
events journaled while it runs are caught up before the swap; the request survives until a
checkpoint holds the result; retention archives what the oldest checkpoint covers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st
from rooms import Rooms, build

from arenad.core.events import KillEvent
from arenad.daemon.recompute import RECOMPUTE_FILE, merge_requests
from arenad.daemon.types import Batch
from arenad.scopes import Rule
from arenad.settings import Settings

scopes_ = st.one_of(st.none(), st.sampled_from(["global", "server:eu-1"]))
starts = st.one_of(st.none(), st.floats(min_value=0, max_value=1e10))


@given(scopes_, starts, scopes_, starts)
def test_a_merged_request_covers_both(
    s1: str | None, t1: float | None, s2: str | None, t2: float | None
) -> None:
    scope, start = merge_requests((s1, t1), (s2, t2))
    for s, t in ((s1, t1), (s2, t2)):
        assert scope is None or scope == s  # the merged scope is all, or the one both named
        assert start is None or (t is not None and start <= t)  # it starts no later than either
    assert merge_requests((s1, t1), (s2, t2)) == merge_requests((s2, t2), (s1, t1))


async def step(r: Rooms, n: int, t0: float, tag: str) -> None:
    items: list[Any] = [
        KillEvent(t0 + k, f"p{k % 9}", f"p{(k * 4 + 1) % 9}", "eu-1", f"{tag}{k}") for k in range(n)
    ]
    await r.pipeline.process([Batch("mqtt", items)])


def state_bytes(r: Rooms) -> bytes:
    return bytes(msgpack.packb(r.state.scopes.export_state(), use_bin_type=True))


async def finish(r: Rooms) -> None:
    for _ in range(3000):
        if r.recomputer.idle and r.recomputer.status.runs:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"recompute did not finish: {r.recomputer.status.as_dict()}")


def test_a_recompute_of_unchanged_history_reproduces_the_live_state(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()

    async def main() -> None:
        now = r.clock.now()
        await step(r, 400, now - 2000, "a")
        await r.checkpointer.checkpoint()
        await step(r, 300, now - 1000, "b")
        want = state_bytes(r)
        r.recomputer.request(None, None, "test")
        assert json.loads((r.store.path / RECOMPUTE_FILE).read_bytes())["reason"] == "test"
        await finish(r)
        assert state_bytes(r) == want
        assert r.recomputer.status.records == 700 and r.recomputer.status.error is None
        assert r.recomputer.unsaved and (r.store.path / RECOMPUTE_FILE).exists()
        await r.checkpointer.checkpoint()  # the result is durable: the request goes
        assert not r.recomputer.unsaved and not (r.store.path / RECOMPUTE_FILE).exists()

    try:
        asyncio.run(main())
    finally:
        r.close()


def test_a_new_rule_rates_the_player_nowhere_and_live_events_are_caught_up(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()

    async def main() -> None:
        now = r.clock.now()
        await step(r, 500, now - 3000, "a")
        assert "p3" in r.state.engine.ids
        r.state.scopes.exclusions.add(Rule(id=1, player="p3"))  # as a journaled exclude would
        # Held by the test (as retention would hold it) so that the rebuild, which waits for it,
        # starts only after the live events below are journaled: they must be caught up, not
        # merely applied live after a swap that beat them.
        async with r.store.history_lock:
            r.recomputer.request(None, None, "exclude p3")
            await asyncio.sleep(0)  # the recompute task reads its upto (500) and waits
            await step(r, 100, now - 1000, "b")
        await finish(r)
        assert r.recomputer.status.caught_up == 100

    try:
        asyncio.run(main())
    finally:
        r.close()
    assert "p3" not in r.state.engine.ids
    assert r.recomputer.status.upto == r.state.seq == 600
    # The same history replayed from nothing under the rule: what the swap put in place.
    fresh = build(tmp_path / "fresh")
    fresh.recover()
    fresh.state.scopes.exclusions.add(Rule(id=1, player="p3"))
    records = r.store.journal.replay_after(0)[0]
    asyncio.run(fresh.pipeline.commit(list(records), [], fresh.store.journal.size))
    fresh.close()
    assert state_bytes(fresh) == state_bytes(r)


def test_a_request_left_by_a_crash_runs_again(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    (r.store.path / RECOMPUTE_FILE).write_text('{"scope": null, "from": null, "reason": "before crash"}')

    async def main() -> None:
        r.recomputer.resume()
        await finish(r)

    try:
        asyncio.run(main())
    finally:
        r.close()
    assert r.recomputer.status.reason == "before crash" and r.recomputer.status.runs == 1


def test_an_unreadable_request_is_logged_not_fatal(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    (r.store.path / RECOMPUTE_FILE).write_text("{not json")
    try:
        asyncio.run(asyncio.to_thread(r.recomputer.resume))
    finally:
        r.close()
    assert r.recomputer.status.runs == 0


def test_retention_archives_what_the_oldest_checkpoint_covers(tmp_path: Path) -> None:
    settings = Settings.from_mapping({"daemon": {"checkpoints_kept": 1}, "history": {"archive": True}})
    r = build(tmp_path / "state", settings)
    r.recover()

    async def main() -> None:
        now = r.clock.now()
        for k in range(3):
            await step(r, 50, now - 3000 + 100 * k, f"s{k}")
            await r.checkpointer.checkpoint()

    try:
        asyncio.run(main())
    finally:
        r.close()
    segments = [first for first, _ in r.store.journal.segments()]
    assert segments == [151]  # the open segment only: the rest is in the archive
    assert r.store.archive is not None and r.store.archive.last_seq == 150
    assert len(r.store.snapshots.list()) == 1  # one snapshot per snapshot_interval
    assert r.faults.ok
