"""The in-game room with a recording rcon: rate limits, bounded queues, failures, announcements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from arenad.core.params import ADRParams
from arenad.daemon.config_ingame import InGameSettings, RconServer
from arenad.daemon.notify import RatingChange
from arenad.errors import ConfigError
from arenad.feeds import ChatLine
from arenad.ingame.rcon import RconAuthError
from arenad.ingame.service import InGame
from arenad.scopes import ScopeSet


class Recorder:
    """An Rcon that records what it was asked, or fails with ``fail``."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.sent: list[tuple[str | None, str]] = []
        self.fail = fail
        self.closed = False

    async def tell(self, target: str, text: str) -> str:
        if self.fail is not None:
            raise self.fail
        self.sent.append((target, text))
        return ""

    async def say(self, text: str) -> str:
        if self.fail is not None:
            raise self.fail
        self.sent.append((None, text))
        return ""

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def settings(**kw: object) -> InGameSettings:
    base: dict[str, object] = {
        "enabled": True,
        "servers": (RconServer(name="oa-1", address="127.0.0.1:1", password_env="X"),),
    }
    return InGameSettings.model_validate({**base, **kw})


def scopes() -> ScopeSet:
    sc = ScopeSet(ADRParams())
    for k in range(30):
        sc.feed("name:A", "name:B", 1.0e6 + 60 * k, "oa-1")
    return sc


def chat(text: str, slot: str | None = "3", player: str | None = "name:A", server: str = "oa-1") -> ChatLine:
    return ChatLine(server, 0.0, slot, player, "A", text, False)


def drive(room: InGame, act: Callable[[], None], until: Callable[[], bool]) -> None:
    """Run the room's senders while ``act`` queues work; stop once ``until`` holds (bounded)."""

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(room.run(stop))
        act()
        for _ in range(500):
            if until():
                break
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())


class TestReplies:
    """Commands are answered to the speaker's slot; floods and junk cost nothing."""

    def test_rank_answered_to_the_slot(self) -> None:
        rec = Recorder()
        sc = scopes()
        room = InGame(settings(), lambda: sc, clients={"oa-1": rec})
        drive(room, lambda: room.chat(chat("!rank")), lambda: bool(rec.sent))
        assert rec.sent and rec.sent[0][0] == "3" and "A" in rec.sent[0][1]
        assert room.replies["sent"] == 1 and room.commands["rank"] == 1
        assert rec.closed

    def test_ignored_and_unresolved(self) -> None:
        rec = Recorder()
        sc = scopes()
        room = InGame(settings(), lambda: sc, clients={"oa-1": rec})
        room.chat(chat("gg"))
        room.chat(chat("!quit"))
        room.chat(chat("!rank", slot=None, player=None))
        room.chat(chat("!rank", server="elsewhere"))
        assert room.chat_lines["ignored"] == 2 and room.chat_lines["unresolved"] == 1
        assert room.replies["no_server"] == 1
        assert room._queues["oa-1"].qsize() == 0

    def test_player_rate_limit(self) -> None:
        clock = Clock()
        sc = scopes()
        room = InGame(
            settings(player_burst=2, player_rate=0.5), lambda: sc, clock=clock, clients={"oa-1": Recorder()}
        )
        for _ in range(5):
            room.chat(chat("!rank"))
        assert room.chat_lines["command"] == 2 and room.chat_lines["rate_limited"] == 3
        clock.now += 2.0  # one token back
        room.chat(chat("!rank"))
        assert room.chat_lines["command"] == 3
        # Another player has a bucket of their own.
        room.chat(chat("!rank", slot="4", player="name:B"))
        assert room.chat_lines["command"] == 4

    def test_full_queue_drops_and_counts(self) -> None:
        sc = scopes()
        room = InGame(settings(queue=2, player_burst=100), lambda: sc, clients={"oa-1": Recorder()})
        for _ in range(5):
            room.chat(chat("!tier"))
        assert room.replies["dropped"] == 3 and room._queues["oa-1"].qsize() == 2

    def test_failures_are_counted_not_fatal(self) -> None:
        rec = Recorder(fail=RconAuthError("Bad rconpassword."))
        sc = scopes()
        room = InGame(settings(), lambda: sc, clients={"oa-1": rec})

        def act() -> None:
            room.chat(chat("!rank"))
            room.chat(chat("!tier"))

        drive(room, act, lambda: room.replies["failed"] >= 2)
        assert room.failures[("oa-1", "auth")] == 2
        assert room.replies["sent"] == 0

    def test_a_bug_in_the_sender_is_counted(self) -> None:
        rec = Recorder(fail=ZeroDivisionError("boom"))
        sc = scopes()
        room = InGame(settings(), lambda: sc, clients={"oa-1": rec})
        drive(room, lambda: room.chat(chat("!rank")), lambda: room.replies["failed"] >= 1)
        assert room.failures[("oa-1", "error")] == 1

    def test_password_missing_names_the_key(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("X", raising=False)
        room = InGame(settings(), scopes)
        with pytest.raises(ConfigError, match=r"ingame.servers\[0\].password_env"):
            room.check()


def change(kind: str, player: str = "name:A", server: str = "oa-1") -> RatingChange:
    return RatingChange(server, "global", player, kind, "3H", "4L", 30.0, 2.0, 1, 0.0)


class TestAnnouncements:
    """Placements, promotions, demotions and a new #1, each on/off, rate-limited per server."""

    def test_kinds_on_and_off(self) -> None:
        rec = Recorder()
        sc = scopes()
        room = InGame(settings(announce=("promoted",)), lambda: sc, clients={"oa-1": rec})

        def act() -> None:
            room.offer(change("placed"))
            room.offer(change("promoted"))
            room.offer(change("rating"))

        drive(room, act, lambda: bool(rec.sent))
        assert rec.sent == [(None, "^3A^7 promoted: 4L -> ^23H")]

    def test_rate_limited(self) -> None:
        sc = scopes()
        room = InGame(settings(announce=("placed",), announce_burst=2, announce_rate=0), lambda: sc)
        for _ in range(4):
            room.offer(change("placed"))
        assert room.announcements["placed:queued"] == 2 and room.announcements["placed:rate_limited"] == 2

    def test_new_number_one(self) -> None:
        rec = Recorder()
        sc = scopes()
        room = InGame(settings(announce=("top1",)), lambda: sc, clients={"oa-1": rec})
        g = sc.global_engine
        leader = g.names[g.top(1)[0]]
        other = "name:B" if leader == "name:A" else "name:A"
        t = 2.0e6

        def act() -> None:
            nonlocal t
            room.offer(change("rating", leader))  # still the same #1: nothing
            while g.names[g.top(1)[0]] == leader:
                t += 60
                sc.feed(other, leader, t, "oa-1")
            room.offer(change("rating", other))

        drive(room, act, lambda: bool(rec.sent))
        assert len(rec.sent) == 1 and rec.sent[0][1].startswith(f"^3{other[5:]}^7 is the new ^2#1")
