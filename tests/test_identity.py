"""The Steam ID canonicaliser (``arenad/identity.py``): one account, one spelling."""

from __future__ import annotations

import pytest
from arenad_feeds.source import SourceParser
from hypothesis import given
from hypothesis import strategies as st

from arenad.identity import MAX_ACCOUNT, SteamIdError, canonical_steam_id, steam2

accounts = st.integers(min_value=1, max_value=MAX_ACCOUNT)


class TestRoundTrips:
    """Every spelling of an account is the same [U:1:Z]."""

    @given(accounts, st.sampled_from((0, 1)))
    def test_steam2_in_either_universe_is_its_steam3(self, z: int, universe: int) -> None:
        assert canonical_steam_id(steam2(z, universe)) == f"[U:1:{z}]"

    @given(accounts)
    def test_steam3_is_its_own_canonical_form(self, z: int) -> None:
        canon = canonical_steam_id(f"[U:1:{z}]")
        assert canon == f"[U:1:{z}]" and canonical_steam_id(canon) == canon

    def test_the_documented_example(self) -> None:
        """STEAM_0:1:61 and STEAM_1:1:61 are [U:1:123] (Z = 2Y + X)."""
        assert {canonical_steam_id(s) for s in ("STEAM_0:1:61", "STEAM_1:1:61", "[U:1:123]")} == {"[U:1:123]"}


class TestRefusals:
    """Malformed, foreign and huge ids are refused, saying why."""

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            ("STEAM_2:0:1", "universe 2"),
            ("[U:0:5]", "universe 0"),
            ("STEAM_1:2:5", "low bit"),
            ("STEAM_1:0:0", "account 0"),
            ("[U:1:0]", "account 0"),
            ("[U:1:4294967296]", "beyond 32 bits"),
            ("STEAM_1:1:2147483648", "beyond 32 bits"),
            ("[U:1:99999999999]", "not STEAM_0"),  # 11 digits: never parsed as a number
            ("STEAM_1:0:" + "9" * 5000, "not STEAM_0"),
            ("STEAM_ID_PENDING", "not STEAM_0"),
            ("[U:1:12]x", "not STEAM_0"),
            ("", "not STEAM_0"),
        ],
    )
    def test_each_bad_id_names_its_fault(self, text: str, why: str) -> None:
        with pytest.raises(SteamIdError, match=why) as e:
            canonical_steam_id(text)
        assert len(str(e.value)) < 200  # a huge id is not echoed whole

    @given(st.text(max_size=60))
    def test_any_text_is_canonical_or_refused_never_anything_else(self, text: str) -> None:
        try:
            out = canonical_steam_id(text)
        except SteamIdError:
            return
        assert out.startswith("[U:1:") and canonical_steam_id(out) == out


class TestSourceFeed:
    """The Source feed rates one player per account, whatever the game logs."""

    @staticmethod
    def kill(attacker_id: str, victim_id: str) -> object:
        line = (
            f'L 11/30/2026 - 19:20:08: "alice<2><{attacker_id}><CT>" killed "bob<3><{victim_id}><TERRORIST>"'
            ' with "ak47"'
        )
        return SourceParser().feed(line.encode(), 0.0)[0]

    def test_steam2_and_steam3_kills_name_the_same_players(self) -> None:
        a = self.kill("STEAM_0:0:12345", "STEAM_1:1:54321")
        b = self.kill("[U:1:24690]", "[U:1:108643]")
        assert (a.attacker, a.victim) == (b.attacker, b.victim) == ("steam:[U:1:24690]", "steam:[U:1:108643]")  # type: ignore[attr-defined]

    def test_a_malformed_id_is_refused_with_the_reason(self) -> None:
        out = self.kill("STEAM_1:0:" + "1" * 40, "[U:1:5]")
        assert type(out).__name__ == "Reject"
        assert "bad Steam ID" in out.detail and "not STEAM_0" in out.detail  # type: ignore[attr-defined]
