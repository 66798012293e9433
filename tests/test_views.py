"""The rows both read protocols answer (arenad/views.py): the gathered columns equal the
engine's own accessors, player by player."""

from __future__ import annotations

import random

import pytest

from arenad.core.engine import DISPLAY_K, Engine
from arenad.core.params import ADRParams
from arenad.views import display_rating, ladder_rows


def _engine(seed: int) -> Engine:
    rng = random.Random(seed)
    eng = Engine(ADRParams())
    names = [f"p{k}" for k in range(300)]
    t = 1_790_000_000.0
    for _ in range(20_000):
        t += rng.uniform(0.5, 3.0)
        a, v = rng.sample(names[: rng.choice((20, 300))], 2)  # a core of regulars, placed
        eng.feed(a, v, t)
    for k in range(30):  # one-off visitors: not placed
        eng.feed(f"visitor{k}", names[k], t + k)
    return eng


def _reference(eng: Engine, ids: list[int], k: float) -> list[dict[str, object]]:
    """The rows read one accessor call at a time, as ladder_rows did before its columns."""
    return [
        {
            "rank": eng.rank(i),
            "player": eng.names[i],
            "mu": eng.mu(i),
            "sigma": eng.sigma(i),
            "display": display_rating(eng, i, k),
            "tier": eng.tier_of(i),
            "provisional": eng.tier_of(i) is None,
            "active": eng.is_active(i),
        }
        for i in ids
    ]


class TestLadderRows:
    """ladder_rows equals the accessors for any ids, with an anchor offset, another k, and another
    ranking."""

    @pytest.mark.parametrize("k", [DISPLAY_K, 2.0])
    def test_rows_equal_the_accessors(self, k: float) -> None:
        eng = _engine(1)
        rng = random.Random(2)
        ids = [rng.randrange(len(eng)) for _ in range(200)] + eng.top(50) + [eng.ids["visitor3"]]
        placed = [i for i in ids if eng.tier_of(i) is not None]
        assert placed and len(placed) < len(ids)  # both kinds are in the sample
        assert ladder_rows(eng, ids, k) == _reference(eng, ids, k)
        eng.offset = 17.25  # what a recalibration's anchor does to every visible rating
        assert ladder_rows(eng, ids, k) == _reference(eng, ids, k)

    def test_players_left_out_above_move_a_row_up_and_no_ids(self) -> None:
        """``above``: the web's hidden players; each rated strictly above a row is one place
        fewer, by the same rule as ``Public.rank`` (the accessor path, per id)."""
        eng = _engine(3)
        ids = eng.top(30)
        out = [ids[2], ids[7], ids[8]]
        above = sorted(-eng.mu(i) for i in out)
        rows = ladder_rows(eng, ids, DISPLAY_K, above)
        want = [eng.rank(i) - sum(1 for j in out if eng.mu(j) > eng.mu(i)) for i in ids]
        assert [r["rank"] for r in rows] == want
        assert want[9] == eng.rank(ids[9]) - 3  # the case that can fail: three above it
        assert ladder_rows(eng, [], DISPLAY_K) == []

    def test_a_newcomer_can_join_after_a_read(self) -> None:
        eng = _engine(4)
        ladder_rows(eng, list(range(len(eng))), DISPLAY_K)
        eng.feed("newcomer-a", "newcomer-b", 1_800_000_000.0)  # the columns grow: no view is held
        assert eng.ids["newcomer-b"] == len(eng) - 1
