"""The §10.3 scenario measures on hand-made streams and scripted ratings, where the answer is known."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from arenad.evaluation.scenarios import ScenarioWatch
from arenad.evaluation.tiers import QuantileTiers, TierRules
from arenad.evaluation.truth import Absence, Burst, Farming, Jump, SkillChange, Truth
from arenad.evaluation.walkforward import Kill, replay

Rule = Callable[["Scripted", str, str, float], None]

# Two tiers of half each; everyone placed after one event; calibrated at every event.
TWO_TIERS = TierRules(
    proportions=(0.5, 0.5), n_min=1, n_active=1, t_active=1e9, p_min=2, beta=1.0, interval=0.0
)


class Scripted:
    """A rating model whose every update is a rule the test writes; display = rating − 10."""

    def __init__(self, ratings: dict[str, float], rule: Rule, name: str = "scripted") -> None:
        self.name = name
        self.r = dict(ratings)
        self.rule = rule
        self.log: list[tuple[str, str, float]] = []

    def predict(self, a: str, b: str, t: float) -> float:
        return 0.5

    def update(self, attacker: str, victim: str, t: float) -> None:
        self.rule(self, attacker, victim, t)
        self.log.append((attacker, victim, t))

    def rating(self, player: str) -> float:
        return self.r.get(player, 0.0)

    def display(self, player: str) -> float:
        return self.rating(player) - 10.0

    def players(self) -> list[str]:
        return list(self.r)

    def export_state(self) -> dict[str, Any]:
        return {"kind": "scripted", "ratings": dict(self.r)}

    def import_state(self, state: dict[str, Any]) -> None:
        self.r = dict(state["ratings"])


def gain(amount: Callable[[str, str], float]) -> Rule:
    def rule(model: Scripted, attacker: str, victim: str, t: float) -> None:
        model.r[attacker] = model.rating(attacker) + amount(attacker, victim)

    return rule


def watch(model: Scripted, truth: Truth, events: list[Kill], **kw: Any) -> dict[str, Any]:
    w = ScenarioWatch({"m": model}, truth, TWO_TIERS, events=len(events), **kw)
    replay({"m": model}, events, w)
    return w.results()["m"]


PLAYERS = [f"p{i}" for i in range(10)]
RATINGS = {p: 10.0 * i for i, p in enumerate(PLAYERS)}  # 0, 10, ..., 90
SD = statistics.pstdev(RATINGS.values())


class TestFarming:
    """Farming gain: the attacker's change over its farming kills only, in sd, against the control's."""

    EVENTS: ClassVar[list[Kill]] = [
        ("p9", "p0", 0.0), ("p8", "p1", 1.0), ("p9", "p0", 100.0),
        ("p8", "p2", 101.0), ("p9", "p0", 200.0), ("p8", "p3", 201.0),
        ("p9", "p4", 300.0),  # a background kill of the farmer: not part of the gain
    ]  # fmt: skip
    TRUTH = Truth(
        skills=dict(RATINGS),
        farming=Farming("p9", "p0", "p8", farming_events=(0, 2, 4), control_events=(1, 3, 5)),
    )

    def test_gain_per_kill_on_weak_victim_against_varied_kills(self) -> None:
        # +1 for a kill of the weakest player, +3 for any other kill.
        model = Scripted(RATINGS, gain(lambda a, v: 1.0 if v == "p0" else 3.0))
        row = watch(model, self.TRUTH, self.EVENTS)
        assert row["farming_gain"] == pytest.approx(3.0 / SD)
        assert row["farming_control_gain"] == pytest.approx(9.0 / SD)
        assert row["deferred_updates"] is False

    def test_a_model_that_defers_updates_is_marked_and_gets_no_per_kill_numbers(self) -> None:
        # Applies each kill one event late (like a rating period): the attacker never moves at its own kill.
        def late(model: Scripted, attacker: str, victim: str, t: float) -> None:
            if model.log:
                previous = model.log[-1][0]
                model.r[previous] = model.rating(previous) + 1.0

        row = watch(Scripted(RATINGS, late), self.TRUTH, self.EVENTS)
        assert row["deferred_updates"] is True
        assert math.isnan(row["farming_gain"]) and math.isnan(row["farming_control_gain"])


class TestBursts:
    """Burst gain: what the repeats (not the first kill) of a burst add, in sd, averaged over bursts."""

    EVENTS: ClassVar[list[Kill]] = [
        ("p5", "p6", 0.0),
        ("p5", "p6", 10.0),
        ("p5", "p6", 20.0),
        ("p2", "p3", 500.0),
    ]
    TRUTH = Truth(skills=dict(RATINGS), bursts=(Burst("p5", "p6", (0, 1, 2)),))

    def test_a_model_without_cooldown_learns_every_repeat(self) -> None:
        row = watch(Scripted(RATINGS, gain(lambda a, v: 4.0)), self.TRUTH, self.EVENTS)
        # Two repeats of +4, in sd of the population at the first repeat (p5 already +4 then).
        sd = statistics.pstdev(dict(RATINGS, p5=54.0).values())
        assert row["burst_gain"] == pytest.approx(8.0 / sd)

    def test_a_cooldown_filters_the_repeats(self) -> None:
        last: dict[tuple[str, str], float] = {}

        def cooldown(model: Scripted, attacker: str, victim: str, t: float) -> None:
            if t - last.get((attacker, victim), -math.inf) >= 60.0:
                model.r[attacker] = model.rating(attacker) + 4.0
                last[attacker, victim] = t

        row = watch(Scripted(RATINGS, cooldown), self.TRUTH, self.EVENTS)
        assert row["burst_gain"] == 0.0


class TestResponseDelay:
    """The jumping player's own events until it has covered half the way to players of its new skill."""

    # p0 (rating 0) jumps to the skill of five players rated 100.
    RATINGS: ClassVar[dict[str, float]] = {
        "p0": 0.0,
        **{f"c{i}": 100.0 for i in range(5)},
        **{f"o{i}": 10.0 * i for i in range(10)},
    }
    SKILLS: ClassVar[dict[str, float]] = {
        "p0": 0.0,
        **{f"c{i}": 5.0 for i in range(5)},
        **{f"o{i}": 0.5 * i for i in range(10)},
    }
    TRUTH = Truth(skills=SKILLS, changes=(SkillChange("p0", 100.0, 5.0),), jump=Jump("p0", 100.0, 0.0, 5.0))
    # Before the jump p0 plays once; after it, four kills by p0.
    EVENTS: ClassVar[list[Kill]] = [("o1", "p0", 50.0), *[("p0", "o2", 100.0 + k) for k in range(4)]]

    @pytest.mark.parametrize(("step", "delay"), [(40.0, 2), (10.0, None), (60.0, 1)])
    def test_delay(self, step: float, delay: int | None) -> None:
        # Half the way from 0 to 100 is about 50: two steps of 40, one of 60, never with four of 10.
        model = Scripted(self.RATINGS, gain(lambda a, v: step if a == "p0" else 0.0))
        row = watch(model, self.TRUTH, self.EVENTS)
        assert row["response_delay"] == delay
        assert row["jump_z_before"] < 0 < row["jump_z_target"]

    def test_z_scores_are_the_population_at_the_jump(self) -> None:
        row = watch(Scripted(self.RATINGS, gain(lambda a, v: 0.0)), self.TRUTH, self.EVENTS)
        values = list(self.RATINGS.values())
        mean, sd = statistics.fmean(values), statistics.pstdev(values)
        assert row["jump_z_before"] == pytest.approx((0.0 - mean) / sd)
        assert row["jump_z_target"] == pytest.approx((100.0 - mean) / sd)
        assert row["response_delay"] is None


class TestAbsence:
    """The largest one-event change of the returning player's display after its return, in sd."""

    TRUTH = Truth(
        skills=dict(RATINGS),
        absence=Absence("p3", left=0.0, back=1000.0, skill_after=9.0, return_events=(1, 2)),
    )
    EVENTS: ClassVar[list[Kill]] = [
        ("p3", "p1", 0.0),
        ("p3", "p9", 1000.0),
        ("p3", "p8", 1061.0),
        ("p2", "p5", 1100.0),
    ]

    def test_largest_step_after_the_return(self) -> None:
        steps = iter([5.0, 30.0, 7.0])  # the kill before the absence, then the two kills back

        def rule(model: Scripted, attacker: str, victim: str, t: float) -> None:
            if attacker == "p3":
                model.r["p3"] += next(steps)

        row = watch(Scripted(RATINGS, rule), self.TRUTH, self.EVENTS)
        # Standardized by the population at the return (p3 already moved by +5 then).
        ratings = dict(RATINGS, p3=35.0)
        sd = statistics.pstdev(ratings.values())
        assert row["absence_max_rating_change"] == pytest.approx(30.0 / sd)
        assert row["absence_max_display_change"] == pytest.approx(30.0 / sd)
        assert row["absence_events_followed"] == 2

    def test_a_change_applied_at_someone_elses_event_still_counts(self) -> None:
        # The returning player's rating moves by 50 at an event it is not part of (a period closing).
        def rule(model: Scripted, attacker: str, victim: str, t: float) -> None:
            if t == 1100.0:
                model.r["p3"] += 50.0

        row = watch(Scripted(RATINGS, rule), self.TRUTH, self.EVENTS, follow=3)
        assert row["absence_max_rating_change"] == pytest.approx(50.0 / SD)


class TestConvergence:
    """Convergence: the first checkpoint where Spearman rho with the hidden skills reaches 0.9."""

    TRUTH = Truth(skills={p: float(i) for i, p in enumerate(PLAYERS)})
    EVENTS: ClassVar[list[Kill]] = [(PLAYERS[i % 10], PLAYERS[(i + 1) % 10], float(i)) for i in range(20)]

    def test_right_order_from_the_start(self) -> None:
        row = watch(Scripted(RATINGS, gain(lambda a, v: 0.0)), self.TRUTH, self.EVENTS, checkpoints=4)
        assert row["convergence_events"] == 5
        assert row["spearman_end"] == pytest.approx(1.0)

    def test_learnt_on_sight(self) -> None:
        # A player's rating becomes its hidden skill (times 10) once it has played; before, 0.
        def on_sight(model: Scripted, attacker: str, victim: str, t: float) -> None:
            for p in (attacker, victim):
                model.r[p] = 10.0 * PLAYERS.index(p) + 1.0

        row = watch(Scripted({}, on_sight), self.TRUTH, self.EVENTS, checkpoints=20)
        # After event k (1-based) players p0..pk are known and the rest tie at 0, below them; the
        # unseen are the strongest, so at event 8 the best player is still rated last (rho 0.45).
        # At event 9 everyone has played and the order is right.
        assert row["convergence_events"] == 9

    def test_reversed_order_never_converges(self) -> None:
        backwards = {p: -r for p, r in RATINGS.items()}
        row = watch(Scripted(backwards, gain(lambda a, v: 0.0)), self.TRUTH, self.EVENTS, checkpoints=4)
        assert row["convergence_events"] is None
        assert row["spearman_end"] == pytest.approx(-1.0)


class TestQuantileTiers:
    """Quantile tiers: §6.3 boundaries from the active ratings, changes counted in tier steps."""

    def test_placement_changes_and_shares(self) -> None:
        ratings = {"a": 30.0, "b": 20.0, "c": 10.0, "d": 0.0}
        tiers = QuantileTiers(TWO_TIERS)
        # Calibration comes first at each event, from the players active before it.
        tiers.observe(["a", "b"], 0.0, ratings.__getitem__)
        assert tiers.calibrations == 0 and tiers.tier == {}
        tiers.observe(["c", "d"], 1.0, ratings.__getitem__)  # from a, b: B_1 = 20 (inverted CDF)
        assert tiers.tier == {"c": 2, "d": 2}  # a and b are placed at their own next event
        tiers.observe(["a", "b"], 2.0, ratings.__getitem__)  # from all four: B_1 = 10
        assert tiers.tier == {"a": 1, "b": 1, "c": 2, "d": 2}
        assert tiers.shares(2.0) == [0.5, 0.5]
        assert tiers.changes == 0
        ratings["d"] = 40.0
        tiers.observe(["d", "c"], 3.0, ratings.__getitem__)  # B_1 = 20: d rises to tier 1
        assert tiers.tier == {"a": 1, "b": 1, "c": 2, "d": 1}
        assert tiers.changes == 1
        assert tiers.shares(3.0) == [0.75, 0.25]
        assert tiers.player_events == 8

    def test_a_move_across_several_tiers_counts_each_step(self) -> None:
        rules = TierRules(
            proportions=(0.25,) * 4, n_min=1, n_active=1, t_active=1e9, p_min=4, beta=1.0, interval=0.5
        )
        ratings = {"a": 40.0, "b": 30.0, "c": 20.0, "d": 10.0}
        tiers = QuantileTiers(rules)
        tiers.observe(["a", "b", "c", "d"], 0.0, ratings.__getitem__)  # nobody active yet
        tiers.observe(["a", "b", "c", "d"], 1.0, ratings.__getitem__)
        # §6.3: B_k = F^-1(1 - q_k) = 30, 20, 10 and tier k holds B_k <= rating: the player at a
        # boundary belongs to the tier above it (as in ADR's engine).
        assert tiers.tier == {"a": 1, "b": 1, "c": 2, "d": 3}
        ratings["d"] = 50.0
        tiers.observe(["d"], 2.0, ratings.__getitem__)
        assert tiers.tier["d"] == 1
        assert tiers.changes == 2

    def test_nobody_is_placed_before_p_min_players_are_active(self) -> None:
        rules = TierRules(
            proportions=(0.5, 0.5), n_min=1, n_active=1, t_active=1e9, p_min=3, beta=1.0, interval=0.0
        )
        tiers = QuantileTiers(rules)
        tiers.observe(["a", "b"], 0.0, lambda p: 1.0)
        assert tiers.calibrations == 0
        assert tiers.shares(0.0) is None
