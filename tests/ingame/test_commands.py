"""The chat commands, sans-io: parsing what players type, and the replies from a real ladder."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arenad.core.engine import DISPLAY_K, Engine
from arenad.core.params import ADRParams
from arenad.daemon.config_ingame import TemplateSettings
from arenad.ingame.commands import MAX_LINE, Command, Speaker, answer, pack, parse
from arenad.views import player_body, tiers_body

T = TemplateSettings()
PLAIN = TemplateSettings(
    rank="{name} #{rank}/{players} {rating:.1f} {tier} {percentile:.0f}",
    unplaced="{name} unplaced {events}/{events_needed}",
    unknown="{name} unknown",
    top_header="top{n}",
    top_row="{rank}.{name}",
    next="{name} +{gap:.3f} to {next_tier} hold {hold:.3f}",
    next_best="{name} best {tier}",
    next_unplaced="{name} place first {events}/{events_needed}",
    session="{name} {change:+.3f} {kills}/{deaths}",
    no_session="{name} nosession",
    tier="{name} {tier} {min:.3f}",
    usage="usage {usage}",
)


def ladder(players: int = 8, kills: int = 4000) -> Engine:
    """A placed ladder: player k kills player j with a chance that grows with k - j."""
    eng = Engine(ADRParams())
    rng = random.Random(7)
    names = [f"name:P{k}" for k in range(players)]
    t = 1_000_000.0
    for _ in range(kills):
        a, b = rng.sample(range(players), 2)
        if rng.random() < 0.5 + 0.06 * (a - b):
            a, b = b, a
        t += 30.0
        eng.feed(names[b], names[a], t)
    eng.recalibrate(t)
    return eng


@pytest.fixture(scope="module")
def eng() -> Engine:
    return ladder()


class TestParse:
    """What counts as a command, and what gets the usage line."""

    @pytest.mark.parametrize(
        ("text", "want"),
        [
            ("!rank", Command("rank")),
            ("  !RANK  ", Command("rank")),
            ("^1!^2rank", Command("rank")),
            ("!top", Command("top")),
            ("!top 3", Command("top", n=3)),
            ("!top 0", Command("top", usage=True)),
            ("!top 6", Command("top", usage=True)),
            ("!top x", Command("top", usage=True)),
            ("!top 99999999999999999999999", Command("top", usage=True)),
            ("!top ３", Command("top", usage=True)),  # a full-width digit is not a number here
            ("!rank ^1Sarge", Command("rank", target="Sarge")),
            ("!next Grunt", Command("next", target="Grunt")),
            ("!session", Command("session")),
            ("!tier", Command("tier")),
            ("!rank " + "x" * 37, Command("rank", usage=True)),
        ],
    )
    def test_commands(self, text: str, want: Command) -> None:
        assert parse(text) == want

    @pytest.mark.parametrize("text", ["", "rank", "hello !rank", "!", "!ranking", "!quit", "!" + "x" * 1000])
    def test_not_ours(self, text: str) -> None:
        assert parse(text) is None

    @given(st.text(max_size=1200))
    def test_any_text(self, text: str) -> None:
        cmd = parse(text)
        assert cmd is None or cmd.name in ("rank", "top", "next", "session", "tier")


class TestAnswer:
    """Each reply says what the query server's get/tiers say, through the templates."""

    def test_rank(self, eng: Engine) -> None:
        i = eng.ids["name:P7"]
        v = player_body(eng, i, DISPLAY_K, eng.scope)
        (line,) = answer(Command("rank"), Speaker("name:P7", "P7"), eng, PLAIN)
        assert v["placed"]
        assert line == f"P7 #{v['rank']}/8 {v['mu']:.1f} {v['tier']} {v['percentile']:.0f}"

    def test_rank_of_someone_else_and_unknown(self, eng: Engine) -> None:
        assert answer(Command("rank", target="P3"), Speaker("name:P7", "P7"), eng, PLAIN)[0].startswith(
            "P3 #"
        )
        assert answer(Command("rank", target="Nobody"), Speaker("name:P7", "P7"), eng, PLAIN) == [
            "Nobody unknown"
        ]
        assert answer(Command("rank"), Speaker(None, "Ghost"), eng, PLAIN) == ["Ghost unknown"]

    def test_unplaced_shows_progress(self) -> None:
        eng = Engine(ADRParams())
        eng.feed("name:A", "name:B", 1.0e6)
        (line,) = answer(Command("rank"), Speaker("name:A", "A"), eng, PLAIN)
        assert line == f"A unplaced 1/{eng.params.n_min}"
        (line,) = answer(Command("next"), Speaker("name:A", "A"), eng, PLAIN)
        assert line == f"A place first 1/{eng.params.n_min}"

    def test_next_is_the_gap_to_the_tier_above(self, eng: Engine) -> None:
        tiers = tiers_body(eng)["tiers"]
        for player in eng.names:
            i = eng.ids[player]
            v = player_body(eng, i, DISPLAY_K, eng.scope)
            k = next(j for j, row in enumerate(tiers) if row["tier"] == v["tier"])
            (line,) = answer(Command("next"), Speaker(player, "X"), eng, PLAIN)
            if k == 0:
                assert line == f"X best {v['tier']}"
            else:
                # Below the tier above's boundary: the gap; above it already (§6.4 has not
                # promoted yet): no gap, only the excess still owed.
                gap = max(0.0, tiers[k - 1]["min_mu"] - v["mu"])
                hold = eng.params.h_req - max(0.0, float(eng._h[i]))
                assert line == f"X +{gap:.3f} to {tiers[k - 1]['tier']} hold {hold:.3f}"

    def test_tier(self, eng: Engine) -> None:
        v = player_body(eng, eng.ids["name:P0"], DISPLAY_K, eng.scope)
        (line,) = answer(Command("tier"), Speaker("name:P0", "P0"), eng, PLAIN)
        assert line.startswith(f"P0 {v['tier']} ")

    def test_top_skips_the_hidden(self, eng: Engine) -> None:
        best = [eng.names[i] for i in eng.top(4)]
        lines = answer(Command("top", n=3), Speaker("name:P0", "P0"), eng, PLAIN, hidden={best[0]})
        shown = [b.removeprefix("name:") for b in best[1:4]]
        assert lines == [
            f"top3  {eng.rank(eng.ids[best[1]])}.{shown[0]}  {eng.rank(eng.ids[best[2]])}.{shown[1]}  "
            f"{eng.rank(eng.ids[best[3]])}.{shown[2]}"
        ]
        # Nor can another player look a hidden one up.
        assert answer(
            Command("rank", target=shown[0] and best[0][5:]), Speaker("x", "x"), eng, PLAIN, hidden={best[0]}
        )[0].endswith("unknown")

    def test_session(self, eng: Engine) -> None:
        def sessions(player: str) -> tuple[float, int, int] | None:
            return (1.25, 4, 2) if player == "name:P1" else None

        assert answer(Command("session"), Speaker("name:P1", "P1"), eng, PLAIN, sessions=sessions) == [
            "P1 +1.250 4/2"
        ]
        assert answer(Command("session"), Speaker("name:P2", "P2"), eng, PLAIN, sessions=sessions) == [
            "P2 nosession"
        ]

    def test_usage(self, eng: Engine) -> None:
        assert answer(Command("top", usage=True), Speaker("name:P1", "P1"), eng, PLAIN) == [
            "usage !top [1-5]"
        ]

    def test_default_templates_fit_a_chat_line(self, eng: Engine) -> None:
        for cmd in (Command("rank"), Command("top"), Command("next"), Command("tier"), Command("session")):
            for line in answer(cmd, Speaker("name:P3", "P3" * 30), eng, T):
                assert 0 < len(line) <= MAX_LINE

    def test_pack(self) -> None:
        assert pack(["a" * 100, "b" * 40, "c" * 20]) == ["a" * 100 + "  " + "b" * 40, "c" * 20]
