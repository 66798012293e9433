"""The walk-forward harness (§10.5): predict before every update, hold out every k-th block."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from arenad.evaluation.walkforward import METRICS, Model, evaluate_stream, is_held_out
from arenad.simulate import Population, event_stream

POP = Population(players=40, days=2)
# About 800 events: blocks of 100 with every 3rd held out gives two test blocks of 100.
BLOCK = 100
TEST_EVERY = 3


class Constant:
    """Predicts 0.5 for every kill and learns nothing."""

    def predict(self, a: str, b: str, t: float) -> float:
        return 0.5

    def update(self, attacker: str, victim: str, t: float) -> None:
        return None


class Oracle:
    """Knows the hidden skills: predicts with the simulator's own logistic, times ``sharpness``."""

    def __init__(self, pop: Population, sharpness: float = 1.0) -> None:
        names = (f"p{i:04d}" for i in range(pop.players))
        self.skill = dict(zip(names, pop.skills(), strict=True))
        self.slope = pop.skill_scale * sharpness

    def predict(self, a: str, b: str, t: float) -> float:
        return 1.0 / (1.0 + math.exp(-self.slope * (self.skill[a] - self.skill[b])))

    def update(self, attacker: str, victim: str, t: float) -> str:
        return "applied"  # like an engine outcome code; the harness must ignore it


class Recorder:
    """Logs each call in order and predicts from the number of updates it has seen."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.updates = 0

    def predict(self, a: str, b: str, t: float) -> float:
        self.calls.append(("predict", t))
        return 0.5 + 0.4 * math.tanh(self.updates / 50.0) * (1 if a < b else -1)

    def update(self, attacker: str, victim: str, t: float) -> None:
        self.calls.append(("update", t))
        self.updates += 1


class Broken:
    """Returns a value that is not a probability."""

    def __init__(self, value: float) -> None:
        self.value = value

    def predict(self, a: str, b: str, t: float) -> float:
        return self.value

    def update(self, attacker: str, victim: str, t: float) -> None:
        return None


def toy_events(n: int) -> list[tuple[str, str, float]]:
    return [(f"a{i % 7}", f"b{i % 5}", float(i)) for i in range(n)]


@pytest.fixture(scope="module")
def stream() -> list[tuple[str, str, float]]:
    return event_stream(POP)


def run(
    models: dict[str, Model], events: list[tuple[str, str, float]], seed: int = 1
) -> dict[str, dict[str, float]]:
    return evaluate_stream(models, events, test_every=TEST_EVERY, seed=seed, block=BLOCK)


class TestOracleBeatsConstant:
    """On a simulated stream, a model that knows the hidden skills beats a coin flip."""

    def test_stream_has_held_out_blocks(self, stream: list[tuple[str, str, float]]) -> None:
        assert len(stream) >= 2 * TEST_EVERY * BLOCK

    @pytest.mark.parametrize("part", ["online", "heldout"])
    def test_oracle_wins_log_loss_brier_auc_accuracy(
        self, stream: list[tuple[str, str, float]], part: str
    ) -> None:
        report = run({"constant": Constant(), "oracle": Oracle(POP)}, stream)
        const, oracle = report["constant"], report["oracle"]
        assert const[f"{part}_log_loss"] == pytest.approx(math.log(2))
        assert const[f"{part}_brier"] == pytest.approx(0.25)
        assert const[f"{part}_auc"] == 0.5
        assert const[f"{part}_accuracy"] == 0.5
        assert oracle[f"{part}_log_loss"] < const[f"{part}_log_loss"] - 0.1
        assert oracle[f"{part}_brier"] < const[f"{part}_brier"] - 0.05
        assert oracle[f"{part}_auc"] > 0.75
        assert oracle[f"{part}_accuracy"] > 0.7

    def test_ece_separates_calibrated_from_overconfident(self, stream: list[tuple[str, str, float]]) -> None:
        # A constant 0.5 is calibrated under symmetric orientation (half of all kills are shown
        # as y = 1), so its ECE is only sampling noise. ECE cannot rank it below the oracle, and
        # asking it to would test luck. What ECE must do is catch miscalibration: the same
        # ranking with logits four times too sharp has the same AUC and a much larger ECE.
        report = run({"oracle": Oracle(POP), "sharp": Oracle(POP, sharpness=4.0)}, stream)
        oracle, sharp = report["oracle"], report["sharp"]
        assert oracle["online_ece"] < 0.06
        assert sharp["online_ece"] > 0.12
        assert sharp["online_ece"] > 2 * oracle["online_ece"]
        # Same order of predictions. A pair met in both directions should tie (p versus 1 − p of
        # the reverse), and whether it does in floating point depends on the slope.
        assert sharp["online_auc"] == pytest.approx(oracle["online_auc"], abs=1e-3)
        assert sharp["online_log_loss"] > oracle["online_log_loss"]

    def test_report_has_every_metric_for_both_parts(self, stream: list[tuple[str, str, float]]) -> None:
        report = run({"oracle": Oracle(POP)}, stream)
        expected = {f"{part}_{m}" for part in ("online", "heldout") for m in (*METRICS, "n")}
        assert set(report["oracle"]) == expected
        assert report["oracle"]["online_n"] == len(stream)
        held = sum(is_held_out(i, BLOCK, TEST_EVERY) for i in range(len(stream)))
        assert report["oracle"]["heldout_n"] == held > 0


class TestWalkForward:
    """Every event is predicted before any update from it; held-out events never update."""

    def test_predict_comes_before_update_and_held_out_blocks_do_not_train(self) -> None:
        rec = Recorder()
        evaluate_stream({"rec": rec}, toy_events(25), test_every=2, block=5)
        # Blocks of 5: [0, 5) trains, [5, 10) is held out, [10, 15) trains, [15, 20) held out, ...
        expected: list[tuple[str, float]] = []
        for i in range(25):
            expected.append(("predict", float(i)))
            if (i // 5) % 2 == 0:
                expected.append(("update", float(i)))
        assert rec.calls == expected

    def test_held_out_predictions_use_a_frozen_model(self) -> None:
        rec = Recorder()
        evaluate_stream({"rec": rec}, toy_events(30), test_every=3, block=10)
        assert rec.updates == 20  # blocks 0 and 1 train, block 2 (events 20..29) is held out

    def test_is_held_out_marks_every_kth_block(self) -> None:
        marks = [is_held_out(i, 2, 3) for i in range(12)]
        assert marks == [False, False, False, False, True, True] * 2

    def test_events_may_be_a_one_shot_iterator(self) -> None:
        def gen() -> Iterator[tuple[str, str, float]]:
            yield from toy_events(40)

        from_list = evaluate_stream({"c": Constant()}, toy_events(40), test_every=2, block=10)
        from_gen = evaluate_stream({"c": Constant()}, gen(), test_every=2, block=10)
        assert from_gen == from_list
        assert from_gen["c"]["online_n"] == 40
        assert from_gen["c"]["heldout_n"] == 20

    def test_every_model_sees_every_event(self) -> None:
        a, b = Recorder(), Recorder()
        evaluate_stream({"a": a, "b": b}, toy_events(12), test_every=2, block=3)
        assert a.calls == b.calls


class TestDeterminism:
    """Same models, events and seed give the same report; the seed moves only AUC and ECE."""

    def test_same_seed_same_report(self, stream: list[tuple[str, str, float]]) -> None:
        assert run({"o": Oracle(POP)}, stream, seed=5) == run({"o": Oracle(POP)}, stream, seed=5)

    def test_seed_changes_auc_and_ece_but_not_per_event_metrics(
        self, stream: list[tuple[str, str, float]]
    ) -> None:
        one = run({"o": Oracle(POP)}, stream, seed=1)["o"]
        two = run({"o": Oracle(POP)}, stream, seed=2)["o"]
        for m in ("log_loss", "brier", "accuracy"):
            assert one[f"online_{m}"] == pytest.approx(two[f"online_{m}"], abs=1e-12)
        assert one["online_auc"] != two["online_auc"]
        assert one["online_ece"] != two["online_ece"]


class TestEdges:
    """Short streams give nan for undefined parts; bad arguments and predictions are refused."""

    def test_stream_shorter_than_a_test_block_has_nan_held_out_metrics(self) -> None:
        report = evaluate_stream({"c": Constant()}, toy_events(50))["c"]
        assert report["online_n"] == 50
        assert report["heldout_n"] == 0
        assert all(math.isnan(report[f"heldout_{m}"]) for m in METRICS)

    def test_empty_stream(self) -> None:
        report = evaluate_stream({"c": Constant()}, [])["c"]
        assert report["online_n"] == 0
        assert math.isnan(report["online_log_loss"])

    @pytest.mark.parametrize("value", [1.5, -0.1, math.nan])
    def test_prediction_outside_unit_interval_names_model_and_event(self, value: float) -> None:
        with pytest.raises(ValueError, match=r"model 'bad' predicted .* for event 0 \('a0' kills 'b0'\)"):
            evaluate_stream({"bad": Broken(value)}, toy_events(3))

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"test_every": 1}, "test_every must be at least 2 so that some blocks train, got 1"),
        ({"block": 0}, "block must be at least 1, got 0"),
    ])  # fmt: skip
    def test_rejects_bad_split(self, kwargs: dict[str, int], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            evaluate_stream({"c": Constant()}, toy_events(3), **kwargs)
