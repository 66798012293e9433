"""The Source-engine feed: HL Log Standard lines (CS2, CS:GO, TF2) and logaddress_add datagrams."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from arenad_feeds.source import (
    MAX_LINE_BYTES,
    SourceFeed,
    SourceOptions,
    SourceParser,
    unframe_udp,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.core.events import KillEvent, Reject, RejectReason
from arenad.errors import ConfigError, InputError
from arenad.feeds import ChatLine, FeedItem, FeedParser, FeedPlugin, IdentityUpdate, MatchBoundary, NonKill

STAMP = "10/20/2023 - 18:23:45"
T = datetime(2023, 10, 20, 18, 23, 45, tzinfo=UTC).timestamp()
HEADER = b"\xff\xff\xff\xff"


def line(body: str, stamp: str = STAMP) -> bytes:
    return f"L {stamp}: {body}".encode()


def player(name: str, uid: int, steam: str, team: str) -> str:
    return f'"{name}<{uid}><{steam}><{team}>"'


ALICE_CSGO = player("alice", 2, "STEAM_1:0:12345", "CT")
BOB_CSGO = player("bob", 3, "STEAM_1:1:54321", "TERRORIST")
ALICE_CS2 = player("alice", 2, "[U:1:24690]", "CT")
BOB_CS2 = player("bob", 3, "[U:1:108643]", "TERRORIST")


def parse(body: str, received_at: float = 0.0, **options: Any) -> list[FeedItem]:
    return SourceFeed().parser(options).feed(line(body), received_at)


def kill_body(
    attacker: str, victim: str, weapon: str = "ak47", props: str = "", positions: bool = True
) -> str:
    a_pos = " [100 200 -50]" if positions else ""
    v_pos = " [10 20 30]" if positions else ""
    return f'{attacker}{a_pos} killed {victim}{v_pos} with "{weapon}"{props}'


class TestKillLines:
    """Each game's kill lines give one KillEvent between Steam (or bot) identities."""

    def test_csgo_kill_with_positions_and_headshot(self) -> None:
        out = parse(kill_body(ALICE_CSGO, BOB_CSGO, props=" (headshot)"))
        assert out == [KillEvent(T, "steam:[U:1:24690]", "steam:[U:1:108643]", "source", None, "ak47")]

    @pytest.mark.parametrize(
        "props", ["", " (headshot)", " (penetrated)", " (headshot penetrated)", " (noscope) (throughsmoke)"]
    )
    def test_cs2_kill_with_steamid3_and_any_properties(self, props: str) -> None:
        out = parse(kill_body(ALICE_CS2, BOB_CS2, weapon="awp", props=props))
        assert out == [KillEvent(T, "steam:[U:1:24690]", "steam:[U:1:108643]", "source", None, "awp")]

    def test_tf2_kill_without_positions_with_property_values(self) -> None:
        body = kill_body(
            player("Scout Main", 5, "[U:1:7]", "Red"),
            player("heavy", 6, "[U:1:8]", "Blue"),
            weapon="scattergun",
            props=' (customkill "headshot") (attacker_position "-1 2 3") (victim_position "4 5 6")',
            positions=False,
        )
        assert parse(body) == [KillEvent(T, "steam:[U:1:7]", "steam:[U:1:8]", "source", None, "scattergun")]

    def test_fractional_positions(self) -> None:
        body = f'{ALICE_CS2} [1.5 -2.25 3] killed {BOB_CS2} [-0.5 0 64.03125] with "knife"'
        assert parse(body) == [
            KillEvent(T, "steam:[U:1:24690]", "steam:[U:1:108643]", "source", None, "knife")
        ]

    @pytest.mark.parametrize(
        "name",
        [
            "<<Pro>> x<y",
            "a<1><b><c>",
            "ends with >",
            "name with spaces",
            "x killed y with z",
            "killed",
            "Ümlaut ☃ 名前",
            "",
        ],
    )
    def test_names_never_change_the_identity(self, name: str) -> None:
        body = kill_body(player(name, 2, "[U:1:1]", "CT"), player(name + "2", 3, "[U:1:2]", "TERRORIST"))
        out = parse(body)
        assert out == [KillEvent(T, "steam:[U:1:1]", "steam:[U:1:2]", "source", None, "ak47")]

    @pytest.mark.parametrize("name", ["<<Pro>> x<y", "a<1><b><c>", "Bot killed Bot", "Ümlaut ☃"])
    def test_bots_are_identified_by_name(self, name: str) -> None:
        body = kill_body(player(name, 7, "BOT", "CT"), ALICE_CS2.replace("CT", "TERRORIST"))
        assert parse(body) == [KillEvent(T, f"bot:{name}", "steam:[U:1:24690]", "source", None, "ak47")]

    def test_empty_weapon_is_none_and_the_server_option_is_used(self) -> None:
        out = parse(kill_body(ALICE_CS2, BOB_CS2, weapon=""), server="eu-dm-1")
        assert out == [KillEvent(T, "steam:[U:1:24690]", "steam:[U:1:108643]", "eu-dm-1", None, None)]

    @pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\x00", b"\n\x00"])
    def test_line_endings_and_a_byte_order_mark_are_tolerated(self, ending: bytes) -> None:
        parser = SourceParser()
        raw = line(kill_body(ALICE_CS2, BOB_CS2))
        expected = [KillEvent(T, "steam:[U:1:24690]", "steam:[U:1:108643]", "source", None, "ak47")]
        assert parser.feed(raw + ending, 0.0) == expected
        assert parser.feed(b"\xef\xbb\xbf" + raw + ending, 0.0) == expected

    def test_ids_are_off_by_default_and_stable_per_line_when_on(self) -> None:
        first = line(kill_body(ALICE_CS2, BOB_CS2))
        second = line(kill_body(BOB_CS2, ALICE_CS2))
        assert [e.id for e in SourceParser().feed(first, 0.0) if isinstance(e, KillEvent)] == [None]
        on = SourceOptions(ids=True)
        ids = [
            e.id
            for raw in (first, first + b"\n", second)
            for e in SourceParser(on).feed(raw, 0.0)
            if isinstance(e, KillEvent)
        ]
        assert ids[0] is not None
        assert ids[0] == ids[1] != ids[2]

    def test_the_same_line_by_udp_or_from_a_file_has_the_same_id(self) -> None:
        raw = line(kill_body(ALICE_CS2, BOB_CS2))
        unframed = unframe_udp(HEADER + b"R" + raw + b"\n\x00", None)
        assert isinstance(unframed, bytes)
        parser = SourceParser(SourceOptions(ids=True))
        assert parser.feed(unframed, 0.0) == parser.feed(raw + b"\n", 0.0)


class TestNonKills:
    """Suicides, world deaths, team kills and excluded bots are counted as NonKill, never rated."""

    def test_suicide(self) -> None:
        out = parse(f'{ALICE_CSGO} [1 2 3] committed suicide with "world"')
        assert out == [NonKill("suicide", T, "steam:[U:1:24690]")]

    def test_tf2_suicide_without_position_with_properties(self) -> None:
        out = parse(
            f'{player("a", 2, "[U:1:9]", "Red")} committed suicide with "world" (attacker_position "1 2 3")'
        )
        assert out == [NonKill("suicide", T, "steam:[U:1:9]")]

    def test_killing_oneself_is_a_suicide(self) -> None:
        out = parse(kill_body(ALICE_CS2, ALICE_CS2, weapon="hegrenade"))
        assert out == [NonKill("suicide", T, "steam:[U:1:24690]")]

    def test_killed_by_the_bomb_is_a_world_kill(self) -> None:
        out = parse(f"{ALICE_CS2} [1 2 3] was killed by the bomb.")
        assert out == [NonKill("world_kill", T, "steam:[U:1:24690]")]

    @pytest.mark.parametrize("world", ["world", "World", "worldspawn"])
    def test_the_world_as_attacker_is_a_world_kill(self, world: str) -> None:
        out = parse(f'"{world}" killed {BOB_CS2} with "trigger_hurt"')
        assert out == [NonKill("world_kill", T, "steam:[U:1:108643]")]

    @pytest.mark.parametrize("team", ["CT", "TERRORIST", "Red", "Blue"])
    def test_team_kills_are_not_rated_by_default(self, team: str) -> None:
        out = parse(kill_body(player("a", 2, "[U:1:1]", team), player("b", 3, "[U:1:2]", team)))
        assert out == [NonKill("team_kill", T, "steam:[U:1:2]")]

    @pytest.mark.parametrize(
        ("team_a", "team_b"), [("Unassigned", "Unassigned"), ("", ""), ("CT", "TERRORIST")]
    )
    def test_same_non_team_or_different_teams_are_kills(self, team_a: str, team_b: str) -> None:
        out = parse(kill_body(player("a", 2, "[U:1:1]", team_a), player("b", 3, "[U:1:2]", team_b)))
        assert out == [KillEvent(T, "steam:[U:1:1]", "steam:[U:1:2]", "source", None, "ak47")]

    def test_team_kills_are_kills_when_not_ignored(self) -> None:
        """Deathmatch with mp_teammates_are_enemies puts FFA players on one side."""
        body = kill_body(player("a", 2, "[U:1:1]", "CT"), player("b", 3, "[U:1:2]", "CT"))
        out = parse(body, ignore_team_kills=False)
        assert out == [KillEvent(T, "steam:[U:1:1]", "steam:[U:1:2]", "source", None, "ak47")]

    def test_bots_are_rated_by_default(self) -> None:
        out = parse(kill_body(player("Bot A", 7, "BOT", "CT"), BOB_CS2))
        assert out == [KillEvent(T, "bot:Bot A", "steam:[U:1:108643]", "source", None, "ak47")]

    @pytest.mark.parametrize("bot_is_attacker", [True, False])
    def test_excluded_bots_make_any_of_their_kills_a_non_kill(self, bot_is_attacker: bool) -> None:
        bot = player("Bot A", 7, "BOT", "CT")
        body = kill_body(bot, BOB_CS2) if bot_is_attacker else kill_body(BOB_CS2, bot)
        victim = "steam:[U:1:108643]" if bot_is_attacker else "bot:Bot A"
        assert parse(body, bots="exclude") == [NonKill("bot_excluded", T, victim)]


class TestOtherEvents:
    """Identity changes and match boundaries are reported; everything else is ignored."""

    def test_entered_the_game_binds_the_slot(self) -> None:
        out = parse(f"{player('alice', 2, '[U:1:24690]', '')} entered the game")
        assert out == [IdentityUpdate("2", "steam:[U:1:24690]", "alice", False)]

    def test_a_renamed_human_keeps_their_identity(self) -> None:
        out = parse(f'{ALICE_CSGO} changed name to "alice <3"')
        assert out == [IdentityUpdate("2", "steam:[U:1:24690]", "alice <3", False)]

    def test_a_renamed_bot_is_a_new_identity(self) -> None:
        out = parse(f'{player("Bot A", 7, "BOT", "CT")} changed name to "Bot B"')
        assert out == [IdentityUpdate("7", "bot:Bot B", "Bot B", True)]

    def test_a_new_log_file_forgets_the_previous_map(self) -> None:
        parser = SourceParser()
        parser.feed(line('Started map "de_dust2"'), 0.0)
        out = parser.feed(line("Log file started"), 0.0)
        assert out == [MatchBoundary("start", T, {"event": "log_file_started"})]
        assert parser.map is None

    def test_a_player_still_validating_binds_nothing(self) -> None:
        assert parse(f"{player('new', 9, 'STEAM_ID_PENDING', '')} entered the game") == []

    def test_map_changes_and_rounds_are_boundaries_carrying_the_map(self) -> None:
        parser = SourceParser()
        out = [
            item
            for body in (
                'Log file started (file "logs/L1020000.log") (game "/srv/csgo") (version "7617")',
                'Loading map "de_dust2"',
                'Started map "de_dust2" (CRC "-123")',
                'World triggered "Round_Start"',
                'World triggered "Round_End"',
                'World triggered "Match_Start" on "de_inferno"',
                'World triggered "Game_Over" reason "Reached Win Limit"',
                "Log file closed",
            )
            for item in parser.feed(line(body), 0.0)
        ]
        assert out == [
            MatchBoundary(
                "start",
                T,
                {
                    "file": "logs/L1020000.log",
                    "game": "/srv/csgo",
                    "version": "7617",
                    "event": "log_file_started",
                },
            ),
            MatchBoundary("start", T, {"event": "loading_map", "map": "de_dust2"}),
            MatchBoundary("start", T, {"event": "started_map", "map": "de_dust2"}),
            MatchBoundary("start", T, {"event": "round_start", "map": "de_dust2"}),
            MatchBoundary("end", T, {"event": "round_end", "map": "de_dust2"}),
            MatchBoundary("start", T, {"event": "match_start", "map": "de_inferno"}),
            MatchBoundary("end", T, {"event": "game_over", "map": "de_inferno"}),
            MatchBoundary("end", T, {"event": "log_file_closed", "map": "de_inferno"}),
        ]
        assert parser.map == "de_inferno"

    @pytest.mark.parametrize(
        "body",
        [
            f'{ALICE_CSGO} purchased "ak47"',
            f'{ALICE_CSGO} [1 2 3] attacked {BOB_CSGO} [4 5 6] with "ak47" (damage "27") (health "73")',
            f'{ALICE_CSGO} [1 2 3] killed other "chicken<212>" [4 5 6] with "knife"',
            f"{ALICE_CSGO} assisted killing {BOB_CSGO}",
            'World triggered "Restart_Round_(1_second)"',
            'Team "CT" scored "1" with "5" players',
            '"player_5" : "  56591298,      2,  16000"',
            "JSON_BEGIN{",
            '"lonely"',
            "server cvars start",
            "",
        ],
    )
    def test_lines_of_no_interest_are_ignored(self, body: str) -> None:
        assert parse(body) == []


class TestMalformed:
    """A bad line is one Reject with a reason, and the lines after it parse as usual."""

    @pytest.mark.parametrize(
        ("raw", "reason"),
        [
            (b"garbage", RejectReason.MALFORMED),
            (b"10/20/2023 - 18:23:45: World triggered", RejectReason.MALFORMED),
            (b"L 10/20/2023 18:23:45: Log file closed", RejectReason.MALFORMED),
            (b"L 13/20/2023 - 18:23:45: Log file closed", RejectReason.MALFORMED),
            (b"L 02/29/2023 - 18:23:45: Log file closed", RejectReason.MALFORMED),
            (b"L 10/20/2023 - 24:00:00: Log file closed", RejectReason.MALFORMED),
            (line(f"{ALICE_CS2} [1 2 3] killed {BOB_CS2} [4 5 6] wi"), RejectReason.MALFORMED),
            (line(f'{ALICE_CS2} killed {BOB_CS2} with "ak47"junk'), RejectReason.MALFORMED),
            (line(f'"alice" killed {BOB_CS2} with "ak47"'), RejectReason.MALFORMED),
            (line(f'{ALICE_CS2} killed "bob<3><[U:1:2]>" with "ak47"'), RejectReason.MALFORMED),
            (line('"alice<2><[U:1:1]><CT> killed'), RejectReason.MALFORMED),
            (line('"alice" committed suicide with "world"'), RejectReason.MALFORMED),
            (line(f"{ALICE_CS2} committed suicide with world"), RejectReason.MALFORMED),
            (line('"alice" was killed by the bomb.'), RejectReason.MALFORMED),
            (line("World triggered Round_Start"), RejectReason.MALFORMED),
            (line("Loading map de_dust2"), RejectReason.MALFORMED),
            (line(f"{ALICE_CS2} changed name to bob"), RejectReason.MALFORMED),
            (line(kill_body(player("p", 2, "STEAM_ID_PENDING", "CT"), BOB_CS2)), RejectReason.MISSING_FIELD),
            (line(kill_body(ALICE_CS2, player("p", 3, "", ""))), RejectReason.MISSING_FIELD),
            (line(kill_body(player("", 2, "BOT", "CT"), BOB_CS2)), RejectReason.MISSING_FIELD),
            (line(kill_body(player("b" * 130, 2, "BOT", "CT"), BOB_CS2)), RejectReason.OVERSIZE),
            (line(kill_body(ALICE_CS2, BOB_CS2, weapon="w" * 129)), RejectReason.OVERSIZE),
            (line("x" * MAX_LINE_BYTES), RejectReason.OVERSIZE),
        ],
    )
    def test_each_bad_line_is_rejected_with_its_reason_and_the_feed_goes_on(
        self, raw: bytes, reason: RejectReason
    ) -> None:
        parser = SourceParser()
        out = parser.feed(raw, 0.0)
        assert len(out) == 1
        assert isinstance(out[0], Reject)
        assert out[0].reason is reason
        assert parser.feed(line(kill_body(ALICE_CS2, BOB_CS2)), 0.0) == [
            KillEvent(T, "steam:[U:1:24690]", "steam:[U:1:108643]", "source", None, "ak47")
        ]

    @pytest.mark.parametrize("raw", [b"", b"\n", b"   ", b"\r\n", b"\x00"])
    def test_blank_lines_are_ignored(self, raw: bytes) -> None:
        assert SourceParser().feed(raw, 0.0) == []


class TestTimestamps:
    """Log times are the server's local time, converted to UTC; or arenad's clock on request."""

    @pytest.mark.parametrize(("offset", "hours"), [(0, 0.0), (2, 2.0), (-5, -5.0), (5.5, 5.5), (14, 14.0)])
    def test_local_log_time_is_converted_to_utc(self, offset: float, hours: float) -> None:
        out = parse(kill_body(ALICE_CS2, BOB_CS2), timezone_offset=offset)
        assert isinstance(out[0], KillEvent)
        assert out[0].t == T - hours * 3600.0

    def test_the_offset_applies_to_non_kills_and_boundaries_too(self) -> None:
        parser = SourceParser(SourceOptions(timezone_offset=1.0))
        suicide = parser.feed(line(f'{ALICE_CS2} committed suicide with "world"'), 0.0)
        boundary = parser.feed(line('World triggered "Round_Start"'), 0.0)
        assert suicide == [NonKill("suicide", T - 3600.0, "steam:[U:1:24690]")]
        assert boundary == [MatchBoundary("start", T - 3600.0, {"event": "round_start"})]

    def test_each_second_gets_its_own_time(self) -> None:
        parser = SourceParser()
        times = [
            item.t
            for stamp in (
                "12/31/2023 - 23:59:59",
                "01/01/2024 - 00:00:00",
                "01/01/2024 - 00:00:00",
                "02/29/2024 - 12:00:01",
            )
            for item in parser.feed(line(kill_body(ALICE_CS2, BOB_CS2), stamp), 0.0)
            if isinstance(item, KillEvent)
        ]
        base = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
        assert times == [base - 1, base, base, datetime(2024, 2, 29, 12, 0, 1, tzinfo=UTC).timestamp()]

    def test_log_clock_ignores_the_time_of_receipt(self) -> None:
        out = parse(kill_body(ALICE_CS2, BOB_CS2), received_at=1.0e9)
        assert isinstance(out[0], KillEvent)
        assert out[0].t == T

    def test_received_clock_uses_the_time_of_receipt(self) -> None:
        out = parse(
            kill_body(ALICE_CS2, BOB_CS2), received_at=1_800_000_000.25, clock="received", timezone_offset=3
        )
        assert out == [
            KillEvent(1_800_000_000.25, "steam:[U:1:24690]", "steam:[U:1:108643]", "source", None, "ak47")
        ]

    def test_received_clock_still_refuses_a_bad_log_timestamp(self) -> None:
        raw = b"L 99/99/2023 - 18:23:45: " + kill_body(ALICE_CS2, BOB_CS2).encode()
        out = SourceParser(SourceOptions(clock="received")).feed(raw, 1.0e9)
        assert len(out) == 1
        assert isinstance(out[0], Reject)
        assert out[0].reason is RejectReason.MALFORMED

    @pytest.mark.parametrize("received_at", [math.nan, math.inf, -math.inf])
    def test_received_clock_refuses_a_non_finite_time(self, received_at: float) -> None:
        out = parse(kill_body(ALICE_CS2, BOB_CS2), received_at=received_at, clock="received")
        assert len(out) == 1
        assert isinstance(out[0], Reject)
        assert out[0].reason is RejectReason.NON_FINITE_TIME


class TestOptions:
    """Options are validated up front; every bad key is named with its value."""

    def test_defaults(self) -> None:
        opts = SourceOptions.from_mapping({})
        assert opts == SourceOptions("source", "include", True, 0.0, "log", False)

    def test_the_plugin_fits_the_protocols(self) -> None:
        plugin: FeedPlugin = SourceFeed()
        assert plugin.name == "source"
        assert plugin.description
        assert isinstance(plugin.parser({}), FeedParser)

    def test_integral_offset_from_toml_is_accepted(self) -> None:
        assert SourceOptions.from_mapping({"timezone_offset": -3}).timezone_offset == -3.0

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("server", ""),
            ("server", 7),
            ("server", "s" * 129),
            ("bots", "only"),
            ("ignore_team_kills", "yes"),
            ("ids", 1),
            ("timezone_offset", 15),
            ("timezone_offset", -12.5),
            ("timezone_offset", math.nan),
            ("timezone_offset", True),
            ("timezone_offset", "2"),
            ("clock", "wall"),
            ("secret", "123"),
        ],
    )
    def test_a_bad_option_names_its_key_and_value(self, key: str, value: object) -> None:
        with pytest.raises(ConfigError) as err:
            SourceFeed().parser({key: value})
        assert [p.key for p in err.value.problems] == [key]
        assert repr(err.value.problems[0].value) == repr(value)  # repr: NaN is not equal to itself
        assert key in str(err.value)

    def test_every_problem_is_reported_at_once(self) -> None:
        with pytest.raises(ConfigError) as err:
            SourceFeed().parser({"bots": "x", "clock": "y", "colour": "z"})
        assert sorted(p.key for p in err.value.problems) == ["bots", "clock", "colour"]


class TestState:
    """state() and restore() carry the current map and the counters across a restart."""

    def test_round_trip(self) -> None:
        parser = SourceParser()
        for body in (
            'Started map "de_dust2" (CRC "1")',
            kill_body(ALICE_CS2, BOB_CS2),
            f'{ALICE_CS2} committed suicide with "world"',
            f'{ALICE_CS2} purchased "ak47"',
        ):
            parser.feed(line(body), 0.0)
        parser.feed(b"junk", 0.0)
        state = parser.state()
        assert state["map"] == "de_dust2"
        assert state["counts"] == {
            "lines": 5,
            "kills": 1,
            "non_kills": 1,
            "rejects": 1,
            "boundaries": 1,
            "identities": 0,
            "ignored": 1,
            "chat": 0,
        }
        fresh = SourceParser()
        fresh.restore(state)
        assert fresh.state() == state
        out = fresh.feed(line('World triggered "Round_Start"'), 0.0)
        assert out == [MatchBoundary("start", T, {"event": "round_start", "map": "de_dust2"})]

    def test_missing_keys_keep_their_defaults(self) -> None:
        parser = SourceParser()
        parser.restore({"counts": {"kills": 4, "from_a_newer_version": 1}})
        assert parser.state() == {
            "map": None,
            "counts": {
                "lines": 0,
                "kills": 4,
                "non_kills": 0,
                "rejects": 0,
                "boundaries": 0,
                "identities": 0,
                "ignored": 0,
                "chat": 0,
            },
        }

    @pytest.mark.parametrize(
        "state", [{"map": 3}, {"counts": [1]}, {"counts": {"kills": -1}}, {"counts": {"kills": "1"}}]
    )
    def test_a_corrupt_state_is_refused_by_name(self, state: dict[str, Any]) -> None:
        parser = SourceParser()
        with pytest.raises(InputError, match=next(iter(state))):
            parser.restore(state)


class TestUnframeUdp:
    """logaddress_add datagrams: R lines without a secret, S lines only with the right one."""

    LINE = line('World triggered "Round_Start"')

    def test_r_datagram_without_a_secret(self) -> None:
        assert unframe_udp(HEADER + b"R" + self.LINE + b"\n\x00", None) == self.LINE

    @pytest.mark.parametrize("tail", [b"", b"\n", b"\r\n", b"\x00", b"\n\x00", b"\n\x00\x00junk"])
    def test_trailing_newline_and_nul_are_stripped(self, tail: bytes) -> None:
        assert unframe_udp(HEADER + b"R" + self.LINE + tail, None) == self.LINE

    @pytest.mark.parametrize("secret", ["123456", "9", "aL b", "ünï"])
    def test_s_datagram_with_the_right_secret(self, secret: str) -> None:
        packet = HEADER + b"S" + secret.encode() + self.LINE + b"\n\x00"
        assert unframe_udp(packet, secret) == self.LINE

    @pytest.mark.parametrize("sent", ["12345", "1234567", "654321", "", "123456L"])
    def test_s_datagram_with_a_wrong_secret_is_unauthorised(self, sent: str) -> None:
        out = unframe_udp(HEADER + b"S" + sent.encode() + self.LINE, "123456")
        assert isinstance(out, Reject)
        assert out.reason is RejectReason.UNAUTHORISED
        assert "123456" not in out.detail

    @pytest.mark.parametrize("secret", [None, ""])
    def test_s_datagram_without_a_configured_secret_is_unauthorised(self, secret: str | None) -> None:
        out = unframe_udp(HEADER + b"S123456" + self.LINE, secret)
        assert isinstance(out, Reject)
        assert out.reason is RejectReason.UNAUTHORISED

    def test_r_datagram_where_a_secret_is_configured_is_unauthorised(self) -> None:
        out = unframe_udp(HEADER + b"R" + self.LINE, "123456")
        assert isinstance(out, Reject)
        assert out.reason is RejectReason.UNAUTHORISED

    @pytest.mark.parametrize(
        "packet",
        [
            b"",
            b"R" + LINE,
            b"\xff\xff\xffR" + LINE,
            HEADER,
            HEADER + b"X" + LINE,
            HEADER + b"log " + LINE,
            HEADER + b"R",
            HEADER + b"R\n\x00",
            b"garbage \xff\xfe",
        ],
    )
    def test_garbage_and_missing_header_are_malformed(self, packet: bytes) -> None:
        out = unframe_udp(packet, None)
        assert isinstance(out, Reject)
        assert out.reason is RejectReason.MALFORMED

    def test_oversize_datagram(self) -> None:
        at_limit = HEADER + b"R" + self.LINE + b" " * (MAX_LINE_BYTES - 5 - len(self.LINE))
        assert len(at_limit) == MAX_LINE_BYTES
        assert isinstance(unframe_udp(at_limit, None), bytes)
        out = unframe_udp(at_limit + b" ", None)
        assert isinstance(out, Reject)
        assert out.reason is RejectReason.OVERSIZE


FRAGMENTS = [
    "L ",
    STAMP,
    ": ",
    '"',
    "<",
    ">",
    "<2>",
    "<BOT>",
    "<[U:1:5]>",
    "<STEAM_1:0:5>",
    "<CT>",
    " [1 2 3]",
    " killed ",
    " with ",
    " committed suicide with ",
    " was killed by ",
    " entered the game",
    " changed name to ",
    "World triggered ",
    "Loading map ",
    "Started map ",
    "Log file started",
    " (headshot)",
    "\x00",
    "\n",
    "é",
]


def fragment_lines() -> st.SearchStrategy[bytes]:
    pieces = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=25)
    return pieces.map(lambda ps: "".join(ps).encode("utf-8", "surrogatepass"))


def check_item(item: object) -> None:
    assert isinstance(item, (KillEvent, Reject, IdentityUpdate, MatchBoundary, NonKill, ChatLine))
    if isinstance(item, KillEvent):
        assert math.isfinite(item.t)
        assert item.attacker != item.victim
        assert item.attacker.startswith(("steam:", "bot:"))
        assert item.victim.startswith(("steam:", "bot:"))
        for text in (item.attacker, item.victim, item.weapon or ""):
            assert len(text.encode()) <= 128


class TestFuzz:
    """Arbitrary lines and datagrams never make the parser or the unframing raise."""

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=300) | fragment_lines(), st.sampled_from([None, "123"]))
    def test_arbitrary_lines(self, raw: bytes, secret: str | None) -> None:
        for options in ({}, {"clock": "received", "bots": "exclude", "ids": True, "timezone_offset": 5.5}):
            parser = SourceFeed().parser(options)
            for item in parser.feed(raw, 1.7e9):
                check_item(item)
            for item in parser.feed(b"L " + STAMP.encode() + b": " + raw, 1.7e9):
                check_item(item)
        out = unframe_udp(HEADER + b"S123" + raw, secret)
        assert isinstance(out, (bytes, Reject))

    @settings(max_examples=300, deadline=None)
    @given(
        st.sampled_from([b"", HEADER, HEADER + b"R", HEADER + b"S", HEADER + b"S123", b"\xff\xff"]),
        st.binary(max_size=300) | fragment_lines(),
        st.sampled_from([None, "", "123", "L "]),
    )
    def test_arbitrary_datagrams(self, prefix: bytes, rest: bytes, secret: str | None) -> None:
        out = unframe_udp(prefix + rest, secret)
        if isinstance(out, bytes):
            assert out
            assert b"\x00" not in out
            assert len(out) <= MAX_LINE_BYTES
            for item in SourceParser().feed(out, 0.0):
                check_item(item)
        else:
            assert isinstance(out, Reject)


class TestReplay:
    """A synthetic server log replayed through the engine ranks its strongest player first."""

    def test_500_kills_rank_the_strongest_player_first(self) -> None:
        rng = random.Random(11)
        players = [player(f"p{i} <{i}>", i + 2, f"[U:1:{1000 + i}]", "") for i in range(10)]
        players.append(player("Bot Zed", 12, "BOT", ""))
        skill = [rng.gauss(0.0, 0.5) for _ in players]
        ace = 3
        skill[ace] = 3.0
        local = datetime(2024, 3, 1, 20, 0, 0)  # the server runs at UTC+2
        lines: list[bytes] = [line('Started map "dm_arena"', local.strftime("%m/%d/%Y - %H:%M:%S"))]
        expected_t: list[float] = []
        while len(expected_t) < 500:
            local += timedelta(seconds=rng.randint(5, 40))
            stamp = local.strftime("%m/%d/%Y - %H:%M:%S")
            if rng.random() < 0.1:  # the noise of a real log
                noise = rng.choice(
                    [f'{players[0]} purchased "ak47"', f'{players[1]} committed suicide with "world"']
                )
                lines.append(line(noise, stamp))
                continue
            a, b = rng.sample(range(len(players)), 2)
            if rng.random() > 1.0 / (1.0 + math.exp(skill[b] - skill[a])):
                a, b = b, a
            lines.append(line(kill_body(players[a], players[b], positions=rng.random() < 0.5), stamp))
            expected_t.append((local - timedelta(hours=2)).replace(tzinfo=UTC).timestamp())

        parser = SourceParser(SourceOptions(timezone_offset=2.0, server="dm-1"))
        events = [
            item for raw in lines for item in parser.feed(raw + b"\n", 0.0) if isinstance(item, KillEvent)
        ]
        assert [ev.t for ev in events] == expected_t
        assert {ev.server for ev in events} == {"dm-1"}
        engine = Engine()
        for ev in events:
            engine.feed(ev.attacker, ev.victim, ev.t)
        assert engine.applied > 400
        assert engine.names[engine.top(1)[0]] == f"steam:[U:1:{1000 + ace}]"
        assert "bot:Bot Zed" in engine.ids


class TestChat:
    """say / say_team lines become chat for the in-game commands, answered to #userid."""

    def test_say_and_say_team(self) -> None:
        p = SourceFeed().parser({"server": "cs-1"})
        (item,) = p.feed(b'L 10/01/2026 - 12:00:00: "Alice<2><STEAM_1:0:123><CT>" say "!rank"', 0.0)
        assert isinstance(item, ChatLine)
        assert item == ChatLine("cs-1", item.t, "#2", "steam:[U:1:246]", "Alice", "!rank", False)
        (team,) = p.feed(b'L 10/01/2026 - 12:00:01: "Bot<3><BOT><CT>" say_team "!top 2"', 0.0)
        assert isinstance(team, ChatLine) and team.team and team.player == "bot:Bot"

    def test_quotes_semicolons_and_pending_ids(self) -> None:
        p = SourceFeed().parser({})
        (item,) = p.feed(b'L 10/01/2026 - 12:00:00: "A;b<2><STEAM_1:0:1><CT>" say "!rank x";quit""', 0.0)
        assert isinstance(item, ChatLine) and item.text == '!rank x";quit"' and item.name == "A;b"
        (pending,) = p.feed(b'L 10/01/2026 - 12:00:00: "C<4><STEAM_ID_PENDING><CT>" say "!rank"', 0.0)
        assert isinstance(pending, ChatLine) and pending.slot is None and pending.unresolved
