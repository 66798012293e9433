"""The public reader (arenad.web.reader): hidden players, public ranks, limits, search."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_harness import MemoryHidden, World, build_world

from arenad.core.engine import Engine
from arenad.views import player_body
from arenad.web.reader import _FEW_HIDDEN, ApiError, NameIndex, Public, Reader


@pytest.fixture
def fresh() -> World:
    return build_world(players=60, days=2, seed=3)


def reader(w: World) -> Reader:
    return Reader(lambda: w.scopes, w.hidden, w.history)


def ladder(eng: Engine) -> list[str]:
    return [eng.names[i] for i in eng.ladder_ids()]


class TestHidden:
    """A hidden player is absent everywhere public, and the ranks shown skip them."""

    def test_absent_from_leaderboard_and_ranks_close_up(self, fresh: World) -> None:
        r = reader(fresh)
        eng = fresh.scopes.global_engine
        names = ladder(eng)
        fresh.hidden.names.update({names[0], names[5]})
        board = r.leaderboard(r.public("global"), 0, 500, None, False)
        shown = [row["player"] for row in board["players"]]
        assert shown == [n for n in names if n not in fresh.hidden.names]
        assert board["total"] == len(names) - 2
        # Ranks are competition ranks over the public players: the ladder's own minus the
        # hidden players rated strictly above.
        for row in board["players"]:
            i = eng.ids[row["player"]]
            above = sum(1 for h in fresh.hidden.names if eng.mu(eng.ids[h]) > eng.mu(i))
            assert row["rank"] == eng.rank(i) - above
        assert board["players"][0]["rank"] == 1

    def test_pages_of_the_public_ladder_skip_them(self, fresh: World) -> None:
        r = reader(fresh)
        names = ladder(fresh.scopes.global_engine)
        fresh.hidden.names.update({names[3], names[4], names[11]})
        public = [n for n in names if n not in fresh.hidden.names]
        pub = r.public("global")
        pages = [r.leaderboard(pub, off, 5, None, False)["players"] for off in range(0, len(public), 5)]
        assert [row["player"] for page in pages for row in page] == public

    def test_lookups_answer_404_and_batches_unknown(self, fresh: World) -> None:
        r = reader(fresh)
        name = fresh.players[0]
        fresh.hidden.names.add(name)
        pub = r.public("global")
        with pytest.raises(ApiError) as e:
            r.player(pub, name)
        assert e.value.status == 404
        with pytest.raises(ApiError):
            r.history_of(pub, name, 0.0, 1e12)
        with pytest.raises(ApiError):
            r.predict(pub, name, fresh.players[1])
        batch = r.batch(pub, [name, fresh.players[1], "never-seen"])
        assert batch["unknown"] == [name, "never-seen"]
        assert [row["player"] for row in batch["players"]] == [fresh.players[1]]
        assert all(row["player"] != name for row in r.search(pub, name[:2], 50)["players"])
        # Balanced as a newcomer, so the answer does not tell a hidden player from an unknown one.
        assert name in r.balance(pub, [name, fresh.players[1]], 2)["unknown"]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_a_batch_is_each_name_once_in_order(self, fresh: World, data: st.DataObject) -> None:
        """Against a plain model: every name asked once, in the order asked; known and visible
        ones as leaderboard rows (the same rows as the ladder shows them), the rest unknown."""
        eng = fresh.scopes.global_engine
        pool = [*fresh.players[:12], "never-seen", "ghost-2"]
        fresh.hidden.names.clear()
        fresh.hidden.names.update(data.draw(st.sets(st.sampled_from(fresh.players[:12]), max_size=4)))
        asked = data.draw(st.lists(st.sampled_from(pool), max_size=30))
        r = reader(fresh)
        pub = r.public("global")
        batch = r.batch(pub, asked)
        once = list(dict.fromkeys(asked))
        shown = [n for n in once if n in eng.ids and n not in fresh.hidden.names]
        assert [row["player"] for row in batch["players"]] == shown
        assert batch["unknown"] == [n for n in once if n not in shown]
        board = {row["player"]: row for row in r.leaderboard(pub, 0, 500, None, False)["players"]}
        assert batch["players"] == [board[n] for n in shown]

    def test_a_batch_with_many_hidden_players(self) -> None:
        """More hidden players than the batch compares directly (np.isin's branch): the same
        answer as the plain model's."""
        w = build_world(players=200, days=1, seed=5)
        eng = w.scopes.global_engine
        assert len(w.players) > _FEW_HIDDEN + 40
        w.hidden.names.update(w.players[: _FEW_HIDDEN + 20])
        r = reader(w)
        pub = r.public("global")
        asked = [*w.players[::3], "never-seen"]
        batch = r.batch(pub, asked)
        shown = [n for n in asked if n in eng.ids and n not in w.hidden.names]
        assert shown and [row["player"] for row in batch["players"]] == shown
        assert batch["unknown"] == [n for n in asked if n not in shown]
        board = {row["player"]: row for row in r.leaderboard(pub, 0, 500, None, False)["players"]}
        assert batch["players"] == [board[n] for n in shown]

    def test_their_rating_still_counts(self, fresh: World) -> None:
        eng = fresh.scopes.global_engine
        before = eng.mu(eng.ids[fresh.players[1]])
        fresh.hidden.names.add(fresh.players[0])
        reader(fresh).leaderboard(reader(fresh).public("global"), 0, 10, None, False)
        assert eng.mu(eng.ids[fresh.players[1]]) == before
        assert fresh.players[0] in eng.ids

    def test_player_rank_and_percentile_agree_with_the_leaderboard(self, fresh: World) -> None:
        r = reader(fresh)
        names = ladder(fresh.scopes.global_engine)
        fresh.hidden.names.update(names[:3])
        pub = r.public("global")
        rows = r.leaderboard(pub, 0, 500, None, False)["players"]
        for row in rows[:10]:
            body = r.player(pub, row["player"])
            assert body["rank"] == row["rank"]
            assert body["players"] == len(names) - 3
        assert r.player(pub, rows[0]["player"])["percentile"] == pytest.approx(100.0)
        assert r.player(pub, rows[-1]["player"])["percentile"] == pytest.approx(0.0)

    def test_without_hidden_players_the_answer_is_the_query_ops(self, fresh: World) -> None:
        r = reader(fresh)
        pub = r.public("global")
        name = fresh.players[2]
        body = r.player(pub, name)
        body.pop("history")
        eng = fresh.scopes.global_engine
        assert body == player_body(eng, eng.ids[name], 3.0, "global")


class TestFilters:
    """tier and active filter the public ladder; offsets count within the filter."""

    def test_tier_filter(self, fresh: World) -> None:
        r = reader(fresh)
        pub = r.public("global")
        eng = pub.eng
        tier = eng.tier_of(next(iter(eng.ladder_ids())))
        assert tier is not None
        board = r.leaderboard(pub, 0, 500, tier, False)
        expected = [eng.names[i] for i in eng.ladder_ids() if eng.tier_of(i) == tier]
        assert [row["player"] for row in board["players"]] == expected
        assert board["total"] == len(expected)
        second = r.leaderboard(pub, 1, 500, tier, False)["players"]
        assert [row["player"] for row in second] == expected[1:]

    def test_active_filter(self, fresh: World) -> None:
        r = reader(fresh)
        pub = r.public("global")
        board = r.leaderboard(pub, 0, 500, None, True)
        assert all(row["active"] for row in board["players"])
        assert board["total"] == pub.eng.active_count


class TestScopes:
    """scope resolves like the query op's: 400 when malformed, 404 when absent."""

    @pytest.mark.parametrize(
        ("scope", "status"), [("nonsense:x", 400), ("server:none", 404), ("event:x", 404)]
    )
    def test_bad_scopes(self, fresh: World, scope: str, status: int) -> None:
        with pytest.raises(ApiError) as e:
            reader(fresh).public(scope)
        assert e.value.status == status
        assert e.value.parameter == "scope"

    def test_server_scope(self, fresh: World) -> None:
        pub = reader(fresh).public("server:eu-1")
        assert pub.scope == "server:eu-1"
        assert pub.eng is fresh.scopes.engines["server:eu-1"]


class TestSearch:
    """Prefix search, case-insensitive, built a step at a time."""

    def test_prefix_case_insensitive(self) -> None:
        eng = Engine()
        for k, name in enumerate(["Alice", "alfred", "bob", "ALBERT", "al"]):
            eng.feed(name, "victim", 1e9 + k)
        index = NameIndex(eng)
        assert not index.step(2)
        assert index.step()
        found = [eng.names[i] for i in index.prefix("AL", 10, lambda i: True)]
        assert sorted(found, key=str.casefold) == found
        assert set(found) == {"Alice", "alfred", "ALBERT", "al"}
        assert [eng.names[i] for i in index.prefix("al", 2, lambda i: True)] == found[:2]

    def test_new_names_are_picked_up(self) -> None:
        eng = Engine()
        eng.feed("a1", "b1", 1e9)
        index = NameIndex(eng)
        index.step()
        eng.feed("a2", "b2", 1e9 + 1)
        index.step()
        assert {eng.names[i] for i in index.prefix("a", 10, lambda i: True)} == {"a1", "a2"}

    def test_public_total(self) -> None:
        eng = Engine()
        eng.feed("a", "b", 1e9)
        pub = Public.of("global", eng, MemoryHidden({"a"}))
        assert pub.total == 1
        assert pub.rank(eng.ids["b"]) == 1


class TestWarm:
    """The background steps complete every index a search asked for, not only the global one."""

    def test_scope_index_completes(self, fresh: World) -> None:
        r = reader(fresh)
        pub = r.public("server:eu-1")
        try:
            r.search(pub, "p", 5)
        except ApiError as e:  # still building: 503 with Retry-After
            assert e.status == 503 and e.retry_after == 1
        steps = 0
        while not r.warm(7):
            steps += 1
            assert steps < 10_000
        assert r.search(pub, "p", 5)["players"]
