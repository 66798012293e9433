"""``arenad tune``: the search on toy objectives, one configuration's scores, the ``[adr]`` it writes,
and the command end to end on a small simulated stream."""

from __future__ import annotations

import itertools
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from arenad import tune
from arenad.cli import main
from arenad.core.params import ADRParams
from arenad.errors import ConfigError
from arenad.evaluation.protocol import evaluate
from arenad.evaluation.tiers import TierRules
from arenad.models.adr import ADRModel
from arenad.simulate import Population, ScenarioPlan, simulate_stream
from arenad.tune import Config, Constraint, Dimension, Scores, best, judge, search

BOX = [Dimension("theta", 0.0, 10.0), Dimension("gamma", -5.0, 5.0)]


def quadratic(config: Config) -> Scores:
    """Minimum 0 at theta = 3, gamma = 2."""
    return Scores((config["theta"] - 3.0) ** 2 + (config["gamma"] - 2.0) ** 2, dict(config))


class Counting:
    """A score that counts its calls and the configurations it saw."""

    def __init__(self, score: Any) -> None:
        self.score = score
        self.seen: list[Config] = []

    def __call__(self, config: Config) -> Scores:
        self.seen.append(dict(config))
        result: Scores = self.score(config)
        return result


class TestDimension:
    """A parameter's range: rounded values, a grid from bound to bound, parsed from --params."""

    def test_values_are_rounded_to_a_thousandth_of_the_range_and_clipped(self) -> None:
        d = Dimension("theta", 100.0, 400.0)
        assert d.value(0.123456) == 137.0
        assert d.value(-1.0) == 100.0 and d.value(2.0) == 400.0
        assert Dimension("beta", 0.0, 0.01).value(1 / 3) == 0.00333

    def test_integer_values(self) -> None:
        d = Dimension("n_min", 1, 30, integer=True)
        assert d.value(0.5) == 16 and isinstance(d.value(0.5), int)
        assert d.grid() == [1, 8, 16, 23, 30]
        assert Dimension("s_max", 0, 2, steps=7, integer=True).grid() == [0, 1, 2]

    def test_grid_runs_from_bound_to_bound(self) -> None:
        assert Dimension("theta", 100.0, 400.0, steps=4).grid() == [100.0, 200.0, 300.0, 400.0]
        assert len(Dimension("theta", 100.0, 400.0).grid()) == tune.DEFAULT_STEPS

    def test_parse(self) -> None:
        dims = tune.parse_dimensions(["theta=100:400", "n_min=5:20:4", "lambda=0:1"], ADRParams())
        assert dims == [
            Dimension("theta", 100.0, 400.0),
            Dimension("n_min", 5, 20, 4, integer=True),
            Dimension("lambda", 0.0, 1.0),
        ]

    def test_every_bad_range_is_reported_at_once(self) -> None:
        texts = [
            "theta",  # no range
            "loser_rule=0:1",  # not numeric
            "nope=0:1",
            "gamma=5:1",  # lo > hi
            "eta_max=10:60:1",  # one step
            "n_min=1.5:9",  # an integer key
            "c_loss=0.5:2",  # 2 is refused by ADRParams
            "theta=100:200",
            "theta=200:300",  # twice
        ]
        with pytest.raises(ConfigError) as info:
            tune.parse_dimensions(texts, ADRParams())
        problems = info.value.problems
        assert {p.key for p in problems} == {"--params"}
        assert [p.value for p in problems] == [t for t in texts if t != "theta=100:200"]
        by_value = {p.value: p.message for p in problems}
        assert "not a numeric [adr] key" in by_value["loser_rule=0:1"]
        assert "c_loss = 2.0 is refused" in by_value["c_loss=0.5:2"]
        assert "twice" in by_value["theta=200:300"]


class TestSearch:
    """Grid, random and Nelder–Mead over a box, as pure functions of a score callable."""

    def test_nelder_mead_finds_the_minimum_of_a_quadratic(self) -> None:
        trials = search(BOX, quadratic, method="nelder-mead", budget=80, start={"theta": 9.0, "gamma": -4.0})
        chosen = best(trials)
        assert chosen is not None
        assert chosen.config["theta"] == pytest.approx(3.0, abs=0.05)
        assert chosen.config["gamma"] == pytest.approx(2.0, abs=0.05)
        assert len(trials) <= 81

    def test_nelder_mead_in_one_dimension_and_at_a_bound(self) -> None:
        def slope(config: Config) -> Scores:
            return Scores(config["theta"])  # the minimum is the lower bound

        chosen = best(search([Dimension("theta", 50.0, 400.0)], slope, budget=40, start={"theta": 300.0}))
        assert chosen is not None and chosen.config["theta"] == pytest.approx(50.0, abs=1.0)

    def test_grid_covers_the_bounds(self) -> None:
        box = [Dimension("theta", 0.0, 10.0, steps=3), Dimension("n_min", 1, 4, integer=True)]
        score = Counting(lambda c: Scores(0.0))
        trials = search(box, score, method="grid", start={})
        grid = {(c["theta"], c["n_min"]) for c in score.seen if c}
        assert grid == set(itertools.product([0.0, 5.0, 10.0], [1, 2, 3, 4]))
        assert len(trials) == 1 + 12  # the start, then every grid point once

    def test_grid_refuses_a_budget_below_its_size(self) -> None:
        with pytest.raises(ValueError, match="smaller than the grid"):
            search(BOX, quadratic, method="grid", budget=3)

    def test_random_stays_in_the_box_and_is_seeded(self) -> None:
        start = {"theta": 5.0, "gamma": 0.0}
        one = search(BOX, quadratic, method="random", budget=25, seed=4, start=start)
        two = search(BOX, quadratic, method="random", budget=25, seed=4, start=start)
        assert [t.config for t in one] == [t.config for t in two]
        assert len(one) == 26
        for t in one[1:]:
            assert 0.0 <= t.config["theta"] <= 10.0 and -5.0 <= t.config["gamma"] <= 5.0
        other = search(BOX, quadratic, method="random", budget=25, seed=5, start=start)
        assert [t.config for t in other] != [t.config for t in one]

    @pytest.mark.parametrize("method", tune.METHODS)
    def test_each_configuration_is_scored_once_and_the_start_first(self, method: tune.Method) -> None:
        score = Counting(quadratic)
        trials = search(BOX, score, method=method, budget=30, start={"theta": 1.0, "gamma": 1.0})
        keys = [tuple(sorted(c.items())) for c in score.seen]
        assert len(keys) == len(set(keys)) == len(trials)
        assert trials[0].index == 0 and trials[0].config == {"theta": 1.0, "gamma": 1.0}
        assert len(trials) <= 31

    def test_constraints_exclude(self) -> None:
        """The unconstrained minimum (theta = 3) breaks theta >= 6: the best feasible point is 6."""
        limit = [Constraint("minus_theta", -6.0)]

        def score(config: Config) -> Scores:
            return judge(quadratic(config).objective, {"minus_theta": -config["theta"]}, limit)

        for method, budget in (("grid", None), ("nelder-mead", 80), ("random", 60)):
            trials = search(
                [Dimension("theta", 0.0, 10.0, steps=11), Dimension("gamma", -5.0, 5.0, steps=11)],
                score,
                method=method,  # type: ignore[arg-type]
                budget=budget,
                start={"theta": 1.0, "gamma": 0.0},
            )
            chosen = best(trials)
            assert chosen is not None, method
            assert chosen.config["theta"] >= 6.0 - 6.0 * tune.TOLERANCE, method
            assert any(not t.scores.feasible and t.scores.objective < chosen.scores.objective for t in trials)
            if method != "random":
                assert chosen.config["theta"] == pytest.approx(6.0, abs=0.05), method

    def test_nothing_feasible_chooses_nothing(self) -> None:
        never = [Constraint("x", -1.0)]
        trials = search(BOX, lambda c: judge(0.0, {"x": 0.0}, never), budget=5)
        assert best(trials) is None and all(t.scores.violated == ("x",) for t in trials)

    def test_refused_configurations_are_never_chosen(self) -> None:
        def score(config: Config) -> Scores:
            return tune.refused("eta_max: must be >= eta_min") if config["theta"] < 5 else quadratic(config)

        trials = search(BOX, score, method="grid", start={"theta": 0.0, "gamma": 0.0})
        chosen = best(trials)
        assert chosen is not None and chosen.config["theta"] >= 5.0
        assert trials[0].scores.error


class TestJudge:
    """A constraint is met up to TOLERANCE of its limit; a value that was not measured breaks it."""

    def test_excess(self) -> None:
        c = Constraint("burst_gain", 0.0)
        assert c.excess(-0.5) == 0.0 and c.excess(tune.TOLERANCE / 2) == 0.0
        assert c.excess(0.25) == pytest.approx(0.25)
        assert Constraint("tier_changes_per_1k", 15.0).excess(30.0) == pytest.approx(1.0)
        assert c.excess(math.nan) == math.inf
        # The slack grows with the limit: a capped change a few thousandths past delta_max is met.
        assert Constraint("absence_rating_change", 60.0).excess(60.003) == 0.0
        assert Constraint("absence_rating_change", 60.0).excess(61.0) > 0.0

    def test_judge_names_what_is_broken(self) -> None:
        limits = [Constraint("a", 1.0), Constraint("b", 1.0), Constraint("c", 1.0)]
        s = judge(0.5, {"a": 2.0, "b": 0.0}, limits)
        assert s.violated == ("a", "c") and not s.feasible
        assert s.rank() > judge(9.0, {"a": 0.0, "b": 0.0, "c": 0.0}, limits).rank()


class TestAdrSection:
    """The written ``[adr]`` loads back as the same parameters, with only what differs."""

    @pytest.mark.parametrize(
        "params",
        [
            ADRParams(),
            ADRParams(theta=212.5, n_min=9, lambda_=0.25),
            ADRParams.paper(theta=300.0),
            ADRParams(tier_proportions=(0.1, 0.1, *([0.8 / 13] * 13))),
        ],
    )
    def test_round_trip(self, params: ADRParams) -> None:
        text = tune.adr_section(params, ["objective 0.5", "command: arenad tune"])
        assert text.startswith("# objective 0.5\n# command: arenad tune\n[adr]\n")
        assert ADRParams.from_mapping(tomllib.loads(text)["adr"]) == params

    def test_only_keys_that_differ(self) -> None:
        assert tomllib.loads(tune.adr_section(ADRParams(theta=212.5)))["adr"] == {"theta": 212.5}
        assert tomllib.loads(tune.adr_section(ADRParams.paper(theta=300.0)))["adr"] == {
            "preset": "paper",
            "theta": 300.0,
        }


class TestScoreConfig:
    """One configuration's scores are the ``adr`` row of the evaluation protocol."""

    def test_equals_the_protocol_row(self) -> None:
        sim = simulate_stream(Population(players=20, days=3, seed=2), ScenarioPlan(scenarios=()))
        params = ADRParams(theta=250.0)
        got = tune.score_config(params, sim.events, 100, 3, 2)
        row = evaluate(
            {"adr": lambda: ADRModel(params)},
            sim.events,
            rules=TierRules.from_params(params),
            test_every=3,
            block=100,
            seed=2,
        ).rows["adr"]
        for key in ("heldout_log_loss", "heldout_ece", "heldout_auc", "heldout_n", "online_log_loss"):
            assert got[key] == row[key], key


#: A few configurations on a small stream; the scenario stream is shortened to 10,000 kills.
SMALL = ["--simulate", "--players", "30", "--days", "20", "--events", "4000", "--block", "200"]
SMALL += ["--test-every", "4", "--scenario-events", "10000"]
#: Limits loose enough for the short scenario stream (see docs/evaluation.md for the defaults).
LOOSE = ["--max-farming", "5", "--max-tier-changes", "100", "--max-absence-display", "1000"]


class TestTuneCommand:
    """``arenad tune`` end to end: the table, the chosen ``[adr]`` and its score reproduced."""

    def test_tune_writes_a_section_that_reproduces_its_score(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "tuned.toml"
        args = ["tune", *SMALL, *LOOSE, "--params", "theta=100:400", "--params", "eta_max=20:60"]
        assert main([*args, "--method", "random", "--budget", "3", "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        lines = printed.splitlines()
        head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["trial", "theta", "eta_max"])
        for column in ("heldout_log_loss", "heldout_ece", "heldout_auc", *tune.MEASURES, "status"):
            assert column in lines[head]
        rows = lines[head + 1 : head + 5]
        assert len(rows) == 4 and sum("chosen" in r for r in rows) == 1
        losses = [float(r.split()[3]) for r in rows]
        assert losses == sorted(losses)
        assert "4 configurations in" in printed

        text = out.read_text()
        assert "# command: arenad tune --simulate" in text
        section = tomllib.loads(text)["adr"]
        params = ADRParams.from_mapping(section)
        assert set(section) <= {"theta", "eta_max"}
        claimed = float(re.search(r"held-out log loss (\d\.\d+)", text).group(1))  # type: ignore[union-attr]

        report = tmp_path / "again"
        stream = SMALL[: SMALL.index("--scenario-events")]
        again = ["evaluate", *stream, "--models", "adr", "--config", str(out), "--out", str(report)]
        assert main([*again, "--no-plots"]) == 0
        row = json.loads((report / "report.json").read_text())["models"]["adr"]
        assert row["heldout_log_loss"] == pytest.approx(claimed, abs=1e-6)
        assert params == ADRParams.from_mapping(section)

    def test_a_constraint_nobody_meets_chooses_nothing(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "tuned.toml"
        args = ["tune", *SMALL, *LOOSE, "--max-tier-changes", "0.5", "--params", "theta=100:400:2"]
        assert main([*args, "--method", "grid", "--out", str(out)]) == 1
        captured = capsys.readouterr()
        assert "violated: tier_changes_per_1k" in captured.out
        assert "tier_changes_per_1k by 3 of 3 (--max-tier-changes)" in captured.err
        assert not out.exists()

    def test_bad_options_are_refused_with_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text("[adr]\nbogus = 1\ntheta = -1\n")
        assert main(["tune", *SMALL, "--params", "theta=100:400", "--base-config", str(bad)]) == 2
        err = capsys.readouterr().err
        assert "adr.bogus" in err and "adr.theta" in err
        assert main(["tune", *SMALL, "--params", "theta=0:400", "--params", "loser_rule=0:1"]) == 2
        err = capsys.readouterr().err
        assert "theta=0:400" in err and "loser_rule=0:1" in err
        assert main(["tune", "--params", "theta=100:400"]) == 2
        assert "FILES" in capsys.readouterr().err
        assert main(["tune", *SMALL, "--params", "theta=100:400", "--method", "grid", "--budget", "2"]) == 2
        assert "smaller than the grid" in capsys.readouterr().err
