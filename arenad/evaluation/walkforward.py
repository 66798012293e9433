"""Walk-forward evaluation of rating models on a kill stream (§10.5; seed 001 §4.3).

Each event is a recorded kill ``(attacker, victim, t)`` in time order. The stream is cut into
blocks of ``block`` consecutive events, and every ``test_every``-th block is held out: the 10th,
20th, ... by default. For every event, each model first predicts ``p = predict(attacker, victim, t)``
before it knows the outcome. It then learns from the event only if the event's block is not held
out. This is §10.5's split into a training stream, processed online, and a test stream, evaluated
on predictions. It is interleaved the way seed 001 §4.3 walks forward through windows, so every
test block is scored on ratings trained on everything before it.

Two sets of metrics are reported for each model:

* ``online_*``: over every event. Each prediction still comes before its own event is seen, so this
  is the prequential (predict-then-update) score of the whole stream.
* ``heldout_*``: over the events of the held-out blocks only, which is the §10.5 test-stream score.

The metrics are log loss, Brier, AUC, ECE (10 bins) and accuracy, plus ``n``, the number of events
scored. They are computed on the symmetric orientation of :func:`arenad.evaluation.metrics.orient`.
Its flips are seeded once for the whole stream, so every model is scored on the same presentation
and the held-out set uses the same flips as the online set. If the models are deterministic, so is
the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from arenad.evaluation import metrics

METRICS = ("log_loss", "brier", "auc", "ece", "accuracy")


class Model(Protocol):
    """The part of a rating model the harness uses: a prediction before the event, then the update."""

    def predict(self, a: str, b: str, t: float) -> float:
        """Probability that ``a`` kills ``b`` at time ``t``, from what the model knows so far."""
        ...

    def update(self, attacker: str, victim: str, t: float) -> object:
        """Learn from the kill. The harness ignores any return value, such as an outcome code."""
        ...


def is_held_out(index: int, block: int, test_every: int) -> bool:
    """Whether 0-based event ``index`` is in a held-out block (the test_every-th, 2·test_every-th, ...)."""
    return (index // block + 1) % test_every == 0


def evaluate_stream(
    models: Mapping[str, Model],
    events: Iterable[tuple[str, str, float]],
    test_every: int = 10,
    seed: int = 1,
    *,
    block: int = 1000,
) -> dict[str, dict[str, float]]:
    """Score each model on the stream, walking forward. Returns ``{model: {metric: value}}``.

    The metric keys are ``online_<m>`` and ``heldout_<m>`` for each ``m`` in :data:`METRICS`, plus
    ``online_n`` and ``heldout_n``. Events are read once, so a generator is fine. A metric that is
    undefined is ``nan``: for example, every ``heldout_*`` metric when the stream is shorter than
    ``test_every * block`` events.
    """
    if test_every < 2:
        raise ValueError(f"test_every must be at least 2 so that some blocks train, got {test_every!r}")
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block!r}")
    predictions: dict[str, list[float]] = {name: [] for name in models}
    held_out: list[bool] = []
    for index, (attacker, victim, t) in enumerate(events):
        test = is_held_out(index, block, test_every)
        held_out.append(test)
        for name, model in models.items():
            p = float(model.predict(attacker, victim, t))
            if not 0.0 <= p <= 1.0:  # also catches nan
                raise ValueError(
                    f"model {name!r} predicted {p!r} for event {index} ({attacker!r} kills {victim!r}),"
                    " which is not a probability in [0, 1]"
                )
            predictions[name].append(p)
            if not test:
                model.update(attacker, victim, t)

    mask = np.asarray(held_out, dtype=bool)
    report: dict[str, dict[str, float]] = {}
    for name, ps in predictions.items():
        shown, y = metrics.orient(ps, seed)
        report[name] = {**_scores("online", shown, y), **_scores("heldout", shown[mask], y[mask])}
    return report


def _scores(prefix: str, p: metrics.FloatArray, y: metrics.FloatArray) -> dict[str, float]:
    values = {
        "log_loss": metrics.log_loss(p, y),
        "brier": metrics.brier(p, y),
        "auc": metrics.auc(p, y),
        "ece": metrics.ece(p, y),
        "accuracy": metrics.accuracy(p, y),
    }
    out = {f"{prefix}_{m}": values[m] for m in METRICS}
    out[f"{prefix}_n"] = float(len(p))
    return out
