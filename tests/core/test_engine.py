"""Behaviour of the ADR engine, one paper section (or arenad choice) at a time."""

from __future__ import annotations

import itertools
import math
import platform
import random
import shutil
import subprocess
import sys
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core import engine as engine_module
from arenad.core.engine import Engine, Outcome, PlayerView, initial_boundaries
from arenad.core.params import TIER_NAMES, ADRParams

DAY = 86400.0
T0 = 1_700_000_000.0


def snapshot(eng: Engine) -> list[PlayerView]:
    return [eng.view(i) for i in range(len(eng))]


def busy_engine(players: int = 60, events: int = 6000, seed: int = 5, **overrides: object) -> Engine:
    """A server where everyone is active and placed: kills a few seconds apart over ~a day."""
    eng = Engine(replace(ADRParams.paper(), **overrides))  # type: ignore[arg-type]
    rng = random.Random(seed)
    skill = [rng.gauss(0, 1) for _ in range(players)]
    t = T0
    for _ in range(events):
        a, b = rng.sample(range(players), 2)
        if rng.random() > 1 / (1 + math.exp(skill[b] - skill[a])):
            a, b = b, a
        t += rng.uniform(1.0, 20.0)
        eng.feed(f"p{a}", f"p{b}", t)
    return eng


class TestPreprocessing:
    """§2.1 cooldown and the reject rules leave the state untouched."""

    def test_repeat_kill_inside_cooldown_is_filtered_and_changes_nothing(self) -> None:
        eng = Engine(ADRParams.paper())
        assert eng.apply("a", "b", T0) is Outcome.APPLIED
        before = snapshot(eng)
        assert eng.apply("a", "b", T0 + 59.9) is Outcome.FILTERED
        assert snapshot(eng) == before
        assert eng.filtered == 1
        assert eng.apply("a", "b", T0 + 60.0) is Outcome.APPLIED

    def test_cooldown_is_per_ordered_pair(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.apply("a", "b", T0)
        assert eng.apply("b", "a", T0 + 1) is Outcome.APPLIED
        assert eng.apply("a", "c", T0 + 2) is Outcome.APPLIED

    def test_cooldown_memory_holds_only_the_last_window(self) -> None:
        """Pairs older than t_cooldown are forgotten as time goes on, without a sweep."""
        eng = Engine(ADRParams.paper())
        rng = random.Random(3)
        t = T0
        for _ in range(20_000):
            a, b = rng.sample(range(400), 2)
            t += 0.5
            eng.apply(f"p{a}", f"p{b}", t)
        # 60 s of kills at 2 per second: at most 120 live pairs (+ a few not yet swept).
        cooldown, log = eng._cooldown_py()
        assert len(cooldown) <= 130
        assert len(log) <= 130

    def test_cooldown_counts_from_the_last_counted_kill(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.apply("a", "b", T0)
        eng.apply("a", "b", T0 + 50)  # filtered: does not restart the cooldown
        assert eng.apply("a", "b", T0 + 61) is Outcome.APPLIED

    @pytest.mark.parametrize(
        ("attacker", "victim", "t", "outcome", "reason"),
        [
            ("a", "a", T0, Outcome.SELF_KILL, "self_kill"),
            ("a", "b", math.nan, Outcome.NON_FINITE_TIME, "non_finite_time"),
            ("a", "b", math.inf, Outcome.NON_FINITE_TIME, "non_finite_time"),
        ],
    )
    def test_rejects_create_no_players(
        self, attacker: str, victim: str, t: float, outcome: Outcome, reason: str
    ) -> None:
        eng = Engine(ADRParams.paper())
        assert eng.apply(attacker, victim, t) is outcome
        assert len(eng) == 0
        assert eng.rejected == {reason: 1}

    def test_late_event_within_tolerance_is_applied_at_the_clock(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.apply("a", "b", T0 + 100)
        assert eng.apply("c", "d", T0 + 97) is Outcome.APPLIED
        assert eng.view(eng.ids["c"]).last_t == T0 + 100
        assert eng.late_applied == 1

    def test_older_event_is_rejected_out_of_order(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.apply("a", "b", T0 + 100)
        before = snapshot(eng)
        assert eng.apply("a", "c", T0 + 94) is Outcome.OUT_OF_ORDER
        assert snapshot(eng) == before
        assert "c" not in eng.ids


class TestActiveSet:
    """§2.3: n_active counted events within t_active days, else fall back to everyone."""

    def test_player_becomes_active_at_the_fifth_event_and_expires_after_seven_days(self) -> None:
        eng = Engine(ADRParams.paper())
        for k in range(5):
            eng.apply("a", f"v{k}", T0 + 100 * k)
        a = eng.ids["a"]
        assert eng.view(a).active
        assert eng.active_count == 1
        # 7 days after the first of the five events, that event leaves the window.
        eng.apply("x", "y", T0 + 7 * DAY + 1)
        assert not eng.view(a).active
        assert eng.active_count == 0

    def test_active_mean_falls_back_to_all_players(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.apply("a", "b", T0)
        mean_all = sum(eng.mu(i) for i in range(len(eng))) / len(eng)
        assert eng.active_count == 0
        assert eng.active_mean() == pytest.approx(mean_all)

    def test_active_mean_tracks_updates(self) -> None:
        eng = busy_engine(players=20, events=2000)
        active = [i for i in range(len(eng)) if eng.view(i).active]
        assert len(active) == eng.active_count > 0
        assert eng.active_mean() == pytest.approx(sum(eng.mu(i) for i in active) / len(active), abs=1e-6)


class TestUpdate:
    """§4 update direction and size."""

    def test_first_kill_between_newcomers(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.apply("a", "b", T0)
        a, b = eng.view(eng.ids["a"]), eng.view(eng.ids["b"])
        p = ADRParams.paper()
        base = p.eta_min + (p.eta_max - p.eta_min) * 2 * 350 * 200 / (350**2 + 200**2)
        assert a.mu == pytest.approx(1000 + base * 0.5)
        assert b.mu == pytest.approx(1000 - base * 0.8 * 0.5)
        assert (a.streak, b.streak, a.n, b.n) == (1, 0, 1, 1)
        assert a.trend == pytest.approx(0.1)
        assert b.trend == pytest.approx(-0.1)

    def test_corrected_victim_loses_more_after_an_upset(self) -> None:
        """The victim's loss grows with the surprise (1 - P_ab), unlike the printed §4.2 form."""
        losses = {}
        for rule in ("corrected", "printed"):
            eng = Engine(ADRParams.paper(loser_rule=rule))
            eng.seed_player("strong", mu=1400, sigma=50, n=100, last_t=T0)
            eng.seed_player("weak", mu=800, sigma=50, n=100, last_t=T0)
            eng.apply("weak", "strong", T0 + 1)  # an upset
            upset = -eng.last_delta_victim
            eng.apply("strong", "weak", T0 + 2)  # expected
            expected = -eng.last_delta_victim
            losses[rule] = (upset, expected)
        assert losses["corrected"][0] > losses["corrected"][1]
        assert losses["printed"][0] < losses["printed"][1]

    def test_change_is_capped_at_delta_max(self) -> None:
        eng = Engine(ADRParams.paper(eta_max=400.0, delta_max=25.0))
        eng.apply("a", "b", T0)
        assert eng.last_delta_attacker == pytest.approx(25.0)
        assert eng.last_delta_victim == pytest.approx(-25.0)

    def test_rating_is_clipped_to_bounds(self) -> None:
        eng = Engine(ADRParams.paper(anchor=False))
        eng.seed_player("top", mu=3995.0, sigma=200, n=50, last_t=T0)
        eng.seed_player("low", mu=3.0, sigma=200, n=50, last_t=T0)
        eng.apply("top", "low", T0 + 1)
        eng.apply("low", "top", T0 + 2)
        assert eng.mu(eng.ids["top"]) <= 4000.0
        assert eng.mu(eng.ids["low"]) >= 0.0


class TestDecay:
    """§5: a long break pulls the rating toward the active mean and widens sigma."""

    def test_absent_player_is_pulled_toward_the_mean(self) -> None:
        p = ADRParams.paper(eta_min=0.0, eta_max=1e-9)  # no learning: only decay moves ratings
        eng = Engine(p)
        eng.seed_player("away", mu=1300, sigma=50, n=100, last_t=T0)
        eng.seed_player("other", mu=1000, sigma=50, n=100, last_t=T0 + 30 * DAY)
        eng.apply("away", "other", T0 + 30 * DAY)
        # "away" left the active set 7 days after its last event; "other" is the active set.
        expected = 1000 + (1300 - 1000) * math.exp(-1.0)
        v = eng.view(eng.ids["away"])
        assert v.mu == pytest.approx(expected, abs=1e-6)


class TestReturning:
    """§8: the returning-player safeguards."""

    def test_more_than_t_return_days_starts_the_returning_phase(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.seed_player("r", mu=1000, sigma=60, n=100, last_t=T0)
        eng.seed_player("x", mu=1000, sigma=60, n=100, last_t=T0 + 60 * DAY)
        eng.apply("r", "x", T0 + 60 * DAY + 1)
        v = eng.view(eng.ids["r"])
        assert v.returning_left == ADRParams.paper().returning_events - 1
        assert v.pool > 0

    def test_exactly_t_return_days_is_not_returning(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.seed_player("r", mu=1000, sigma=60, n=100, last_t=T0)
        eng.seed_player("x", mu=1000, sigma=60, n=100, last_t=T0)
        eng.apply("r", "x", T0 + 60 * DAY)
        assert eng.view(eng.ids["r"]).returning_left == 0
        assert eng.view(eng.ids["r"]).pool == 0.0

    @pytest.mark.parametrize("release", ["transfer", "literal"])
    def test_pool_after_the_returning_phase(self, release: str) -> None:
        """transfer: the pool drains to exactly zero; literal: what is left stays frozen."""
        eng = Engine(ADRParams.paper(pool_release=release))
        eng.seed_player("r", mu=1000, sigma=60, n=100, last_t=T0)
        eng.seed_player("x", mu=1500, sigma=60, n=100, last_t=T0 + 61 * DAY)
        t = T0 + 61 * DAY
        for k in range(60):
            eng.apply("r", "x", t + 61 * k)
        pool = eng.view(eng.ids["r"]).pool
        if release == "transfer":
            assert pool == 0.0
        else:
            assert pool == pytest.approx(ADRParams.paper().delta_max)


class TestTiers:
    """§6 placement, calibration and accumulators."""

    def test_placement_needs_n_min_events_and_low_sigma(self) -> None:
        eng = Engine(ADRParams.paper())
        for k in range(14):
            eng.apply("a", f"v{k}", T0 + 100 * k)
        assert eng.view(eng.ids["a"]).tier is None
        eng.apply("a", "v99", T0 + 5000)
        assert eng.view(eng.ids["a"]).tier in TIER_NAMES
        assert sum(eng.tier_info().counts) >= 1

    def test_initial_boundaries_are_descending_normal_quantiles(self) -> None:
        b = initial_boundaries(ADRParams.paper())
        assert len(b) == 14
        assert all(x > y for x, y in itertools.pairwise(b))
        assert b[6] > 1000 > b[7]  # the middle tier 3M straddles mu0

    def test_first_calibration_sets_quantiles_then_smooths_with_beta(self) -> None:
        eng = busy_engine()
        first = eng.tier_info().boundaries
        assert eng.tier_info().calibrations >= 1
        mus = sorted((eng.mu(i) for i in range(len(eng))), reverse=True)
        # After many events, B_1 sits near the top 1/15 of the active population.
        assert mus[len(mus) // 15 + 3] <= first[0] <= mus[max(0, len(mus) // 15 - 3)]
        eng.recalibrate(eng.clock)
        second = eng.tier_info().boundaries
        target_gap = [s - f for s, f in zip(second, first, strict=True)]
        assert all(abs(g) < 50 for g in target_gap)

    def test_accumulators_move_one_tier_at_a_time(self) -> None:
        eng = Engine(ADRParams.paper(h_req=0.0, n_min=1, sigma_place=400.0))
        eng.seed_player("x", mu=1000, sigma=60, n=100, last_t=T0)
        eng.apply("a", "x", T0)  # places "a" near mu0 (tier 3M/3L region)
        tiers = [TIER_NAMES.index(eng.view(eng.ids["a"]).tier or "")]
        for k in range(1, 4):
            eng.apply("a", "x", T0 + 61 * k)
            tiers.append(TIER_NAMES.index(eng.view(eng.ids["a"]).tier or ""))
        steps = [before - after for before, after in itertools.pairwise(tiers)]
        assert all(s in (0, 1) for s in steps)  # never down, never more than one tier per event
        assert sum(steps) >= 1


class TestAnchor:
    """The scale anchor shifts everything uniformly; nothing relative changes."""

    def test_recalibration_puts_the_active_mean_at_mu0_and_keeps_order(self) -> None:
        eng = busy_engine(anchor=False)
        eng_anchor = busy_engine(anchor=True)
        assert eng.active_mean() > 1005  # c_loss < 1 inflates the unanchored scale
        assert eng_anchor.active_mean() == pytest.approx(1000.0, abs=5.0)
        order = list(eng_anchor.ladder_ids())
        probs = [eng_anchor.predict(order[0], j) for j in order[1:6]]
        tiers = [eng_anchor.view(i).tier for i in order]
        eng_anchor.recalibrate(eng_anchor.clock)
        assert eng_anchor.active_mean() == pytest.approx(1000.0, abs=1e-6)
        assert list(eng_anchor.ladder_ids()) == order
        assert [eng_anchor.view(i).tier for i in order] == tiers
        assert [eng_anchor.predict(order[0], j) for j in order[1:6]] == pytest.approx(probs)

    def test_shift_never_pushes_a_rating_past_the_bounds(self) -> None:
        eng = Engine(ADRParams.paper())
        for k in range(30):
            eng.seed_player(f"p{k}", mu=900.0, sigma=60, n=50, last_t=T0)
        eng.seed_player("top", mu=4000.0, sigma=60, n=50, last_t=T0)
        eng.recalibrate(T0 + 1)
        assert eng.active_mean() == pytest.approx(1000.0, abs=5.0)
        assert eng.mu(eng.ids["top"]) == pytest.approx(4000.0)
        assert eng.ladder_is_consistent()


class TestQueries:
    """Rank, percentile, top and around agree with a sort of every player."""

    def test_queries_match_a_full_sort(self) -> None:
        eng = busy_engine(players=80, events=3000)
        by_mu = sorted(range(len(eng)), key=lambda i: -eng.mu(i))
        assert eng.top(10) == by_mu[:10]
        assert eng.top(5, offset=20) == by_mu[20:25]
        for pos in (0, 7, 40, 79):
            i = by_mu[pos]
            assert eng.rank(i) == pos + 1
            assert eng.percentile(i) == pytest.approx(100.0 * (79 - pos) / 79)
        mid = by_mu[40]
        assert eng.around(mid, 2) == by_mu[38:43]
        assert eng.around(by_mu[0], 3) == by_mu[:4]
        assert eng.top(0) == []
        assert eng.ladder_is_consistent()


class TestIdsOf:
    """Engine.ids_of: the C lookup (reads only) against the comprehension it replaces."""

    @settings(max_examples=200, deadline=None)
    @given(
        known=st.lists(st.text(min_size=1, max_size=12), max_size=40, unique=True),
        asked=st.lists(st.text(max_size=12), max_size=60),
    )
    def test_c_and_python_agree(self, known: list[str], asked: list[str]) -> None:
        eng = Engine(ADRParams())
        for k, name in enumerate(known):
            eng.feed(name, known[k - 1] if k else "anchor", T0 + k)
        names = [*asked, *known[:5], "\u202e;quit", "<script>"]
        expected = [eng.ids.get(n, -1) for n in names]
        assert eng.ids_of(names).tolist() == expected
        native = engine_module._c_ids_of  # type: ignore[attr-defined]
        assert native is not None  # scripts/test builds the C extension (test_native_ladder)
        try:
            engine_module._c_ids_of = None  # type: ignore[attr-defined,assignment]
            assert eng.ids_of(names).tolist() == expected  # the Python reference
        finally:
            engine_module._c_ids_of = native  # type: ignore[attr-defined]

    @settings(max_examples=150, deadline=None)
    @given(
        size=st.sampled_from([0, 3, 150, 300, 50_000]),  # index slots of 1, 2 and 4 bytes
        deleted=st.integers(0, 40),
        asked=st.lists(st.integers(-50, 60_000), max_size=140),  # past a chunk of 32, several times
        kind=st.sampled_from(["str keys", "a non-str key", "a subclass"]),
        seed=st.integers(0, 2**32),
    )
    def test_the_warmed_lookup_answers_as_the_dict_does(
        self, size: int, deleted: int, asked: list[int], kind: str, seed: int
    ) -> None:
        """The C lookup walks the dict's tables ahead of its lookups (CPython 3.11's layout): on
        every kind of dict and index width, with deleted entries (dummy slots) and absent names,
        its answer is the dict's own."""
        from arenad.core._ladder import ids_of  # built by scripts/test (test_native_ladder)

        rng = random.Random(seed)
        index: dict[Any, int] = {f"p{k}·{rng.random():.3f}": k for k in range(size)}
        names = list(index)
        for name in rng.sample(names, min(deleted, len(names))):
            del index[name]
        if kind == "a non-str key":
            index[12345] = 7  # a general (not str-only) table: looked up without the walk
        elif kind == "a subclass":
            index = type("Index", (dict,), {})(index)
        every = [*names, "", "<script>", "\u202e;quit"]
        query = [every[k % len(every)] if k >= 0 else f"absent{k}" for k in asked]
        query = [q.encode().decode() for q in query]  # fresh strings: equal, not the keys themselves
        got = np.frombuffer(ids_of(index, query), dtype=np.int64).tolist()
        assert got == [index.get(q, -1) for q in query]

    def test_the_built_lookup_keeps_its_prefetches(self) -> None:
        """GCC once dropped the cache walk of ids_of whole (a static function of prefetches only
        looks pure to it) under pip's -DNDEBUG while a plain build kept it: the shipped module
        must hold the prefetch instructions (binutils comes with the gcc scripts/test installs)."""
        import arenad.core._ladder as native  # built by scripts/test (test_native_ladder)

        if sys.version_info[:2] != (3, 11):
            return  # the walk reads CPython 3.11's dict layout; other versions use the plain loop
        objdump = shutil.which("objdump")
        assert objdump is not None, "objdump (binutils) is missing: scripts/test installs gcc"
        code = subprocess.run(
            [objdump, "-d", native.__file__], capture_output=True, text=True, check=True
        ).stdout
        op = {"x86_64": "prefetch", "aarch64": "prfm"}.get(platform.machine())
        assert op is None or op in code, f"no {op} in {native.__file__}: rebuild with ./scripts/bootstrap"

    def test_no_python_code_changes_the_names_under_the_lookup(self) -> None:
        """An id's own __index__ is refused before it can run; a general table's key may run
        __eq__ inside a lookup, and then the names handed in may change under it: the lookup
        works on its own copy of them (it read freed memory before)."""
        from arenad.core._ladder import ids_of  # built by scripts/test (test_native_ladder)

        names = ["a", "b"] * 40

        class Sneaky:
            def __index__(self) -> int:
                names.clear()
                return 1

        with pytest.raises(TypeError):
            ids_of({"a": Sneaky()}, names)  # type: ignore[dict-item]
        assert len(names) == 80  # refused before __index__ ran

        class Key:
            def __hash__(self) -> int:
                return hash("a")

            def __eq__(self, other: object) -> bool:
                names.clear()
                # What the list held is freed: a lookup still reading it would read freed memory.
                names.extend(object() for _ in range(100))  # type: ignore[misc]
                return False

        index = {Key(): 1, "a": 2}  # a general table (its __eq__ ran once here, on the insert)
        names[:] = ["a"] * 80
        found = ids_of(index, names)  # type: ignore[arg-type]
        got = np.frombuffer(found, dtype=np.int64).tolist()
        assert got == [2] * 80
        assert len(names) == 100  # __eq__ did run inside the lookup

    def test_the_c_lookup_refuses_what_is_not_a_name(self) -> None:
        from arenad.core._ladder import ids_of  # built by scripts/test (test_native_ladder)

        with pytest.raises(TypeError):
            ids_of({"a": 1}, [1])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            ids_of([], ["a"])  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            ids_of({"a": -2}, ["a"])
        assert ids_of({}, ()) == b""

        class Name(str):
            pass

        with pytest.raises(TypeError):  # a subclass could run Python code inside the lookup
            ids_of({"a": 1}, [Name("a")])


class TestStateExport:
    """export_state / from_state continue bit-identically, and refuse what they cannot load."""

    def test_round_trip_mid_stream_continues_identically(self) -> None:
        import msgpack

        from arenad.simulate import Population, event_stream

        events = event_stream(Population(players=60, days=4, seed=8))
        half = len(events) // 2
        straight = Engine(ADRParams.paper())
        first = Engine(ADRParams.paper())
        for ev in events[:half]:
            straight.feed(*ev)
            first.feed(*ev)
        wire = msgpack.unpackb(msgpack.packb(first.export_state()), raw=False, strict_map_key=False)
        resumed = Engine.from_state(wire)
        assert snapshot(resumed) == snapshot(first)
        for ev in events[half:]:
            assert straight.feed(*ev) is resumed.feed(*ev)
        assert snapshot(resumed) == snapshot(straight)
        assert resumed.tier_info() == straight.tier_info()
        assert list(resumed.ladder_ids()) == list(straight.ladder_ids())
        assert (resumed.applied, resumed.filtered, resumed.clock) == (
            straight.applied,
            straight.filtered,
            straight.clock,
        )

    def test_structural_parameter_change_is_refused(self) -> None:
        eng = busy_engine(players=10, events=200)
        with pytest.raises(ValueError, match="window_len"):
            Engine.from_state(eng.export_state(), ADRParams.paper(window_len=10))

    def test_other_parameters_may_change(self) -> None:
        eng = busy_engine(players=10, events=200)
        resumed = Engine.from_state(eng.export_state(), ADRParams.paper(c_loss=0.9))
        assert resumed.params.c_loss == 0.9
        assert snapshot(resumed) == snapshot(eng)

    @pytest.mark.parametrize("field", ["version", "byteorder", "columns"])
    def test_damaged_state_is_refused(self, field: str) -> None:
        state = busy_engine(players=10, events=200).export_state()
        if field == "version":
            state["version"] = 99
        elif field == "byteorder":
            state["byteorder"] = "middle"
        else:
            state["columns"]["sigma"] = state["columns"]["sigma"][:-8]
        with pytest.raises(ValueError):
            Engine.from_state(state)
