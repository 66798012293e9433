"""The rating history on disk (arenad/daemon/ratinghistory.py) through the daemon's rooms: what
checkpoints write equals what the sessions closed; a restart from an older checkpoint cuts and
rewrites the same rows; a recompute rebuilds the same database; a full disk keeps the sessions
in the checkpoint; hostile names are stored as given; retention deletes old sessions."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import threading
from dataclasses import astuple
from pathlib import Path

import pytest
from rooms import Rooms, build

from arenad.daemon.ratinghistory import FILE, ForkGate, HistoryReader
from arenad.daemon.state import JournalRecord
from arenad.settings import Settings

T0 = 1_790_000_000.0
HOSTILE = ["'; DROP TABLE sessions; --", "<script>alert(1)</script>", "\u202egnp.exe", "x" * 128, "名前"]


def stream(seed: int, hours: float = 8.0, start: int = 0) -> list[JournalRecord]:
    """Twelve players in visits of 10-40 minutes with breaks longer than the session gap."""
    rng = random.Random(seed)
    players = [f"p{k}" for k in range(10)] + HOSTILE[:2]
    out: list[JournalRecord] = []
    t = T0
    away: dict[str, float] = {}
    while t < T0 + hours * 3600:
        t += rng.uniform(2, 12)
        here = [p for p in players if away.get(p, 0) <= t]
        if len(here) < 2:
            continue
        a, v = rng.sample(here, 2)
        out.append((start + len(out) + 1, t, a, v, "eu-1" if players.index(a) % 2 else "us-1", None))
        if rng.random() < 0.004:
            away[a] = t + rng.uniform(2000, 7000)
    return out


def rows(state_dir: Path) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(state_dir / FILE)) as db:
        return db.execute(
            "SELECT p.name, v.name, s.t_start, s.t_end, s.kills, s.deaths, s.rating_before,"
            " s.rating_after, s.display_after, s.tier_after, s.seq FROM sessions AS s"
            " JOIN players AS p ON p.id = s.player LEFT JOIN servers AS v ON v.id = s.server"
            " ORDER BY s.seq, p.name"
        ).fetchall()


def feed(r: Rooms, records: list[JournalRecord], *, checkpoint_every: int = 0) -> None:
    async def main() -> None:
        for k in range(0, len(records), 500):
            assert await r.pipeline.commit(list(records[k : k + 500]), [], r.store.journal.size)
            if checkpoint_every and (k // 500) % checkpoint_every == 0:
                await r.checkpointer.checkpoint()
        await r.checkpointer.checkpoint()

    asyncio.run(main())


def test_checkpoints_write_the_closed_sessions(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    records = stream(1)
    try:
        feed(r, records, checkpoint_every=3)
    finally:
        r.close()
    got = rows(r.store.path)
    assert len(got) > 20
    assert {row[0] for row in got} >= {"p0", HOSTILE[0], HOSTILE[1]}  # stored as given
    assert r.state.scopes.sessions is not None and r.state.scopes.sessions.closed == []
    kills = sum(int(row[4]) for row in got)  # type: ignore[call-overload]
    assert 0 < kills <= len(records)


def test_a_restart_from_an_older_checkpoint_writes_the_same_rows(tmp_path: Path) -> None:
    records = stream(2)
    whole = build(tmp_path / "whole")
    whole.recover()
    feed(whole, records)
    whole.close()
    # The same stream, but the last checkpoint is lost after the history took its rows.
    r = build(tmp_path / "state")
    r.recover()
    half = len(records) // 2
    feed(r, records[:half])
    feed(r, records[half:])
    r.close()
    newest = r.store.checkpoints.list()[0][1]
    newest.unlink()
    again = build(tmp_path / "state")
    report = again.recover()  # from the older checkpoint: the history is cut back to it
    assert report.checkpoint_seq == half
    asyncio.run(again.checkpointer.checkpoint())
    again.close()
    assert rows(again.store.path) == rows(whole.store.path)


def test_a_recompute_rebuilds_the_same_history(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    records = stream(3)

    async def main() -> None:
        feed_part = records[: len(records) // 2]
        assert await r.pipeline.commit(list(feed_part), [], r.store.journal.size)
        await r.checkpointer.checkpoint()
        assert await r.pipeline.commit(list(records[len(feed_part) :]), [], r.store.journal.size)
        await r.checkpointer.checkpoint()
        before = rows(r.store.path)
        r.recomputer.request(None, None, "test")
        for _ in range(3000):
            if r.recomputer.idle and r.recomputer.status.runs:
                break
            await asyncio.sleep(0.01)
        assert r.recomputer.status.error is None
        await r.checkpointer.checkpoint()
        assert rows(r.store.path) == before
        assert r.ratings is not None and r.ratings.generation == 1

    try:
        asyncio.run(main())
    finally:
        r.close()


def test_a_refused_write_keeps_the_sessions_in_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = build(tmp_path / "state")
    r.recover()
    assert r.ratings is not None

    def full(*args: object) -> None:
        raise OSError(28, "rating history: database or disk is full")

    monkeypatch.setattr(r.ratings, "write", full)
    records = stream(4)
    try:
        feed(r, records)
        tracker = r.state.scopes.sessions
        assert tracker is not None and len(tracker.closed) > 5
        assert "ratings" in r.faults.failing and r.checkpointer.failures == 0
        monkeypatch.undo()
        asyncio.run(r.checkpointer.checkpoint())  # nothing new: still written now
    finally:
        r.close()
    assert r.faults.ok
    assert len(rows(r.store.path)) > 5


def test_the_reader_gives_the_newest_first_with_the_session_in_progress(tmp_path: Path) -> None:
    r = build(tmp_path / "state")
    r.recover()
    assert r.ratings is not None
    try:
        feed(r, stream(5))
        reader = HistoryReader(r.ratings, lambda: r.state.scopes)
        tracker = r.state.scopes.sessions
        assert tracker is not None and tracker.open
        playing = r.state.engine.names[min(tracker.open)]  # someone still in a session
        got = reader.sessions(playing, limit=500)
        points = reader.points(playing)
        unknown = reader.sessions("nobody")
        reader.close()
    finally:
        r.close()
    ends = [s.t_end for s in got]
    assert ends == sorted(ends, reverse=True) and len(got) > 2
    assert got[0].seq == 0  # the one in progress: in no database yet
    assert [p.t for p in points] == sorted(p.t for p in points)
    assert unknown == []


def test_retention_deletes_old_sessions(tmp_path: Path) -> None:
    settings = Settings.from_mapping({"history": {"ratings_days": 0.1}})  # 2.4 hours
    r = build(tmp_path / "state", settings)
    r.recover()
    try:
        feed(r, stream(6, hours=30), checkpoint_every=4)
    finally:
        r.close()
    got = rows(r.store.path)
    newest = max(float(row[3]) for row in got)  # type: ignore[arg-type]
    assert got and min(float(row[3]) for row in got) >= newest - 86400 - 0.1 * 86400  # type: ignore[arg-type]


def _commit(r: Rooms, records: list[JournalRecord]) -> None:
    async def main() -> None:
        for k in range(0, len(records), 500):
            assert await r.pipeline.commit(list(records[k : k + 500]), [], r.store.journal.size)

    asyncio.run(main())


def _scanned(r: Rooms, player: str) -> list[tuple[object, ...]]:
    """What the reader must answer, read the slow way: the session in progress, every closed
    one not written yet, then the database."""
    tracker = r.state.scopes.sessions
    assert tracker is not None
    eng = r.state.engine
    out: list[tuple[object, ...]] = []
    now = tracker.current(eng, eng.ids[player])
    if now is not None:
        out.append(astuple(now))
    out.extend(astuple(s) for s in reversed(tracker.closed) if s.player == player)
    with contextlib.closing(sqlite3.connect(r.store.path / FILE)) as db:
        got = db.execute(
            "SELECT v.name, s.t_start, s.t_end, s.kills, s.deaths, s.rating_before, s.rating_after,"
            " s.display_after, s.tier_after, s.seq FROM sessions AS s JOIN players AS p ON p.id ="
            " s.player LEFT JOIN servers AS v ON v.id = s.server WHERE p.name = ? ORDER BY s.t_end DESC",
            (player,),
        ).fetchall()
    out.extend((player, *row) for row in got)
    return out


class TestReaderCache:
    """The reader's index of unwritten sessions and its cache of database rows answer what a
    full read would, and a checkpoint's write, a refused write and a new session are seen."""

    def test_answers_follow_checkpoints_and_new_sessions(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        r = build(tmp_path / "state")
        r.recover()
        assert r.ratings is not None
        records = stream(7, hours=12)
        third = len(records) // 3
        try:
            feed(r, records[:third])  # in the database
            reader = HistoryReader(r.ratings, lambda: r.state.scopes)

            def check() -> None:
                for name in r.state.engine.names:
                    got = [astuple(s) for s in reader.sessions(name, limit=500)]
                    assert got == _scanned(r, name), name

            check()
            reads = reader.db_reads
            check()
            assert reader.db_reads == reads  # nothing changed: every answer from the cache
            _commit(r, records[third : 2 * third])  # closed, not written yet
            tracker = r.state.scopes.sessions
            assert tracker is not None and tracker.closed
            check()
            assert reader.db_reads == reads  # the database did not change
            before = {n: reader.sessions(n, limit=500) for n in r.state.engine.names}
            # A refused write puts the sessions back in front of the list: still found once.
            monkeypatch.setattr(r.ratings, "write", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
            asyncio.run(r.checkpointer.checkpoint())
            assert tracker.closed
            check()
            monkeypatch.undo()
            asyncio.run(r.checkpointer.checkpoint())  # written: the database changed
            assert tracker.closed == []
            check()
            assert reader.db_reads > reads
            _commit(r, records[2 * third :])
            asyncio.run(r.checkpointer.checkpoint())
            check()
            after = {n: reader.sessions(n, limit=500) for n in r.state.engine.names}
            assert any(after[n] != before[n] for n in before)  # the answers did change
            reader.close()
        finally:
            r.close()


def test_the_fork_gate_is_quiet_only_while_no_thread_is_inside_sqlite() -> None:
    """The web's readers fork under ``ForkGate.quiet`` (docs/web.md "Readers"): never while a
    thread is inside SQLite, and no thread enters while a fork holds it."""
    gate = ForkGate()
    with gate.quiet() as ok:
        assert ok
    entered, leave = threading.Event(), threading.Event()

    def worker() -> None:
        with gate.inside():
            entered.set()
            leave.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    assert entered.wait(5)
    with gate.quiet() as ok:
        assert not ok  # a thread is inside: no fork now
    leave.set()
    t.join(5)
    with gate.quiet() as ok:
        assert ok
        blocked = threading.Thread(target=worker)
        entered.clear()
        leave.clear()
        blocked.start()
        assert not entered.wait(0.2)  # held while the fork runs: the thread waits at the door
    assert entered.wait(5)  # and goes in once the fork is done
    leave.set()
    blocked.join(5)
