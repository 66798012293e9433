"""Hostile log lines: OpenArena games.log, Source (HL Log Standard) lines and UDP datagrams.

Lines are built from the formats' grammar pieces (and real captured lines), then mutated. Beyond
the per-plugin fuzz tests (tests/plugins), these check determinism, a bound on the output, that
garbage lines leave the parser's state alone, and that they change no engine state.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arenad_feeds.openarena import OpenArenaParser
from arenad_feeds.source import SourceOptions, SourceParser, unframe_udp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.core.events import MAX_NAME_BYTES, KillEvent, PlacementEvent, Reject
from arenad.daemon.config_sources import HlUdpSettings
from arenad.daemon.sources.hl_udp import HlUdpSource
from arenad.daemon.types import Batch
from arenad.feeds import ChatLine, ClockNote, FeedItem, IdentityUpdate, MatchBoundary, NonKill

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REALDATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
OA_REAL = (REALDATA / "openarena-1.log").read_bytes().splitlines()[:400]


def _fits(s: str) -> bool:
    return 0 < len(s.encode("utf-8")) <= MAX_NAME_BYTES


def check_items(items: list[FeedItem], line: bytes) -> None:
    assert len(items) <= 3  # a line yields a few items at most (placements + the line's own)
    for it in items:
        if isinstance(it, KillEvent):
            assert math.isfinite(it.t) and it.attacker != it.victim
            assert _fits(it.attacker) and _fits(it.victim)
            assert it.weapon is None or _fits(it.weapon)
        elif isinstance(it, PlacementEvent):
            players = [p for g in it.placements for p in g]
            assert math.isfinite(it.t) and len(players) >= 2 and len(set(players)) == len(players)
        elif isinstance(it, Reject):
            assert len(it.detail) <= 400 + 12 * len(line)
        elif isinstance(it, IdentityUpdate):
            assert _fits(it.player)
        elif isinstance(it, ChatLine):
            assert len(it.text) <= 200 and len(it.name) <= MAX_NAME_BYTES
        elif isinstance(it, ClockNote):
            assert it.moved >= 0 and math.isfinite(it.t)
        else:
            assert isinstance(it, (MatchBoundary, NonKill))


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        pos = draw(st.integers(0, len(out)))
        how = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if how == "flip" and pos < len(out):
            out[pos] = draw(st.integers(0, 255))
        elif how == "insert":
            out[pos:pos] = draw(st.sampled_from([b"\xff", b"\x00", b"\xc3", b"\r", b"\\", b":", b'"', b"<"]))
        elif how == "delete":
            del out[pos : pos + draw(st.integers(1, 6))]
        else:
            del out[pos:]
    return bytes(out)


# ---------------------------------------------------------------------------- OpenArena
SLOTS = st.sampled_from(["0", "1", "2", "3", "63", "64", "1022", "1023", "99999", "-1", "x", ""])
OA_NAMES = st.sampled_from(["Tony", "^1Ayumi", "^", " ", "é", "x" * 200, "a killed b by MOD_X", "\\"])
OA_CLOCK = st.sampled_from(["  0:00", "  1:05", " 12:59", "999999999:59", "1:60", "0:0", "1234567890:00"])


@st.composite
def oa_lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["kill", "userinfo", "disconnect", "init", "exit", "score", "real"]))
    clock = draw(OA_CLOCK)
    if kind == "real":
        return draw(byte_mutations(draw(st.sampled_from(OA_REAL))))
    if kind == "kill":
        mod = draw(st.sampled_from(["MOD_ROCKET", "MOD_" + "A" * 70, "", "MOD_railgun"]))
        body = f"Kill: {draw(SLOTS)} {draw(SLOTS)} {draw(SLOTS)}: a killed b by {mod}"
    elif kind == "userinfo":
        extra = draw(st.sampled_from(["", "\\skill\\ 2.00", "\\id\\" + "g" * 130, "\\id\\abc", "\\t\\2"]))
        body = f"ClientUserinfoChanged: {draw(SLOTS)} n\\{draw(OA_NAMES)}\\t\\{draw(SLOTS)}{extra}"
    elif kind == "disconnect":
        body = f"ClientDisconnect: {draw(SLOTS)}"
    elif kind == "init":
        stamp = draw(
            st.sampled_from(["2026-11-30 19:20:08", "9999-99-99 99:99:99", "", "0000-00-00 00:00:00"])
        )
        body = f"InitGame: \\g_gametype\\{draw(SLOTS)}\\mapname\\dm\\g_timestamp\\{stamp}"
    elif kind == "exit":
        body = draw(st.sampled_from(["Exit: Fraglimit hit.", "ShutdownGame:", "Exit:"]))
    else:
        body = (
            f"score: {draw(st.sampled_from(['30', '-5', '9999999', 'x']))}  ping: 0  client: {draw(SLOTS)} n"
        )
    return draw(byte_mutations(f"{clock} {body}".encode("utf-8", "surrogatepass")))


def _oa_run(lines: list[bytes]) -> tuple[list[FeedItem], dict[str, Any]]:
    p = OpenArenaParser()
    out: list[FeedItem] = []
    for line in lines:
        items = p.feed(line, 1.7e9)
        check_items(items, line)
        out.extend(items)
    return out, p.state()


def _feed_engine(items: list[FeedItem]) -> Engine:
    eng = Engine()
    for it in items:
        if isinstance(it, KillEvent):
            eng.feed(it.attacker, it.victim, it.t)
    return eng


def _without_ids(items: Sequence[FeedItem]) -> list[FeedItem]:
    return [
        KillEvent(i.t, i.attacker, i.victim, i.server, None, i.weapon) if isinstance(i, KillEvent) else i
        for i in items
    ]


class TestOpenArena:
    """Grammar-built and mutated games.log lines: bounded, deterministic, garbage changes nothing."""

    @FUZZ
    @given(st.lists(oa_lines(), max_size=40))
    def test_hostile_sequences(self, lines: list[bytes]) -> None:
        first = _oa_run(lines)
        assert _oa_run(lines) == first

    @FUZZ
    @given(
        st.lists(st.sampled_from(OA_REAL), min_size=1, max_size=60),
        st.lists(st.binary(max_size=60).map(lambda b: b"#" + b), max_size=20),
        st.randoms(use_true_random=False),
    )
    def test_garbage_lines_change_nothing(self, real: list[bytes], garbage: list[bytes], rng: Any) -> None:
        """Lines without an event header move only the line counters (and give at most a reject)."""
        mixed = list(real)
        for g in garbage:
            mixed.insert(rng.randrange(len(mixed) + 1), g)
        p = OpenArenaParser()
        out: list[FeedItem] = []
        for line in mixed:
            before = p.state()
            items = p.feed(line, 1.7e9)
            out.extend(items)
            if line.startswith(b"#"):
                assert all(isinstance(i, Reject) for i in items)
                after = p.state()
                for key in ("line", "line_in_map"):
                    before.pop(key), after.pop(key)
                assert after == before
        clean, _ = _oa_run(real)
        kept = [i for i in out if not isinstance(i, Reject)]
        # Ids number lines within a map, so inserted lines shift them: compare the rest.
        assert _without_ids(kept) == _without_ids([i for i in clean if not isinstance(i, Reject)])
        assert _feed_engine(out).export_state() == _feed_engine(clean).export_state()


# ---------------------------------------------------------------------------- Source
STAMPS = st.sampled_from(
    ["10/20/2023 - 18:23:45", "13/40/2023 - 25:61:61", "02/30/2023 - 00:00:00", "00/00/0000 - 00:00:00"]
)
PLAYERS = st.builds(
    lambda n, uid, sid, team: f'"{n}<{uid}><{sid}><{team}>"',
    st.sampled_from(["Alice", "", "<>", "x" * 300, "é", "\x00", "a<1><BOT><CT>"]),
    st.sampled_from(["2", "-1", "x", "99999999999999999999"]),
    st.sampled_from(["STEAM_1:0:123", "[U:1:456]", "BOT", "STEAM_ID_PENDING", "", "STEAM_1:0:" + "9" * 40]),
    st.sampled_from(["CT", "TERRORIST", "Red", "", "Unassigned"]),
)
SOURCE_BODIES = st.one_of(
    st.builds(lambda a, v, w: f'{a} [1 2 3] killed {v} [4 5 6] with "{w}" (headshot)', PLAYERS, PLAYERS,
              st.sampled_from(["ak47", "", "w" * 200])),
    st.builds(lambda a: f'{a} committed suicide with "world"', PLAYERS),
    st.builds(lambda a: f"{a} was killed by the bomb.", PLAYERS),
    st.builds(lambda a: f"{a} entered the game", PLAYERS),
    st.builds(lambda a: f'{a} changed name to "Bob"', PLAYERS),
    st.sampled_from(['World triggered "Round_Start" on "de_dust2"', 'Loading map "de_dust2"',
                     'Started map "x" (CRC "1")', 'Log file started (file "a.log") (game "/cs")',
                     "Log file closed", 'World triggered "Game_Over"', '"world" killed "x']),
)  # fmt: skip
SOURCE_LINES = st.builds(
    lambda stamp, body: f"L {stamp}: {body}".encode("utf-8", "surrogatepass"), STAMPS, SOURCE_BODIES
).flatmap(byte_mutations)


class TestSource:
    """Grammar-built and mutated Source lines and datagrams: bounded, deterministic, never raise."""

    @FUZZ
    @given(st.lists(SOURCE_LINES, max_size=30), st.sampled_from([{}, {"bots": "exclude", "ids": True}]))
    def test_hostile_lines(self, lines: list[bytes], options: dict[str, Any]) -> None:
        runs = []
        for _ in range(2):
            p = SourceParser(SourceOptions(**options))
            out = []
            for line in lines:
                items = p.feed(line, 1.7e9)
                check_items(items, line)
                out.append(items)
            runs.append((out, p.state()))
        assert runs[0] == runs[1]

    @FUZZ
    @given(st.lists(SOURCE_LINES, max_size=20), st.binary(max_size=200))
    def test_a_line_without_the_l_prefix_changes_nothing(self, lines: list[bytes], junk: bytes) -> None:
        p = SourceParser()
        for line in lines:
            p.feed(line, 1.7e9)
        before = p.state()["map"]
        items = p.feed(b"X" + junk, 1.7e9)
        assert all(isinstance(i, Reject) for i in items) and p.state()["map"] == before

    @FUZZ
    @given(
        st.sampled_from(
            [b"", b"\xff\xff\xff\xffR", b"\xff\xff\xff\xffS", b"\xff\xff\xff\xffSs3cret", b"\xff"]
        ),
        SOURCE_LINES | st.binary(max_size=100),
        st.sampled_from([None, "", "s3cret"]),
    )
    def test_hostile_datagrams(self, head: bytes, rest: bytes, secret: str | None) -> None:
        packet = head + rest
        line = unframe_udp(packet, secret)
        assert unframe_udp(packet, secret) == line
        if isinstance(line, bytes):
            assert line and b"\x00" not in line
            if secret:
                assert packet.startswith(b"\xff\xff\xff\xffS" + secret.encode() + b"L ")
            else:
                assert packet.startswith(b"\xff\xff\xff\xffR")
            check_items(SourceParser().feed(line, 1.7e9), line)
        else:
            assert isinstance(line, Reject)

    @FUZZ
    @given(
        st.lists(st.binary(max_size=40) | SOURCE_LINES.map(lambda b: b"\xff\xff\xff\xffR" + b), max_size=30)
    )
    def test_receiver_queues_only_kills_and_rejects(self, packets: list[bytes]) -> None:
        """HlUdpSource.datagram_received: no parser error, only kills and rejects are queued."""
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        source = HlUdpSource(HlUdpSettings(listen="127.0.0.1:0", accept_unknown=True), queue, Counter(), {})
        for k, packet in enumerate(packets):
            source.datagram_received(packet, ("10.0.0.1", 27015 + k % 3))
        assert source.parser_errors == 0
        while not queue.empty():
            batch = queue.get_nowait()
            assert all(isinstance(i, (KillEvent, Reject)) for i in batch.items)
