"""Walk-forward evaluation of rating models on an event stream (§10.5; seed 001 §4.3).

Each event is a recorded kill ``(attacker, victim, t)`` or a match-placement event
(:class:`arenad.core.events.PlacementEvent`), in time order. The stream is cut into blocks of
``block`` consecutive events, and every ``test_every``-th block is held out: the 10th, 20th, ...
by default. For every event, each model first predicts before it knows the outcome. It then
learns from the event only if the event's block is not held out. This is §10.5's split into a
training stream, processed online, and a test stream, evaluated on predictions. It is
interleaved the way seed 001 §4.3 walks forward through windows, so every test block is scored
on ratings trained on everything before it (held-out events are never learnt from, not even
later).

What is predicted and learnt:

* A kill is one prediction, ``p = predict(attacker, victim, t)``, then ``update``.
* A placement event is one prediction per (better, worse) pair of players in different groups
  (:func:`arenad.models.base.placement_pairs`): ``p = predict_placement(model, better, worse,
  t)`` (:func:`arenad.models.base.predict_placement`: the model's own pair prediction where it
  has one, as ADR does, else its kill prediction ``predict``), the probability that the
  better-placed player finishes above the worse-placed one. Each model predicts every pair of
  the match before it learns anything from it. Then a model that rates matches
  (:class:`arenad.models.base.MatchModel`: ADR with ``placement_weight`` > 0, ``glicko2-mp``,
  ``trueskill-ffa``, ...) learns with ``update_match(placements, t)``. A kill-only model (Elo,
  Glicko-2, ...) does not learn from placements at all: its pair predictions are still
  scored, from what it learnt from kills.

Two sets of metrics are reported for each model:

* ``online_*``: over every prediction. Each still comes before its own event is learnt, so this
  is the prequential (predict-then-update) score of the whole stream.
* ``heldout_*``: over the predictions of the held-out blocks only, the §10.5 test-stream score.

The metrics are log loss, Brier, AUC, ECE (10 bins) and accuracy, plus ``n``, the number of
predictions scored. They are computed on the symmetric orientation of
:func:`arenad.evaluation.metrics.orient`. Its flips are seeded once for the whole stream, so
every model is scored on the same presentation and the held-out set uses the same flips as the
online set. If the models are deterministic, so is the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from arenad.core.events import KillEvent, PlacementEvent
from arenad.evaluation import metrics
from arenad.models.base import MatchModel, placement_pairs, predict_placement

METRICS = ("log_loss", "brier", "auc", "ece", "accuracy")

#: A kill as the harness takes it: ``(attacker, victim, t)``.
Kill = tuple[str, str, float]
#: What a stream may hold: kills (as tuples or ``KillEvent``) and match placements.
StreamEvent = Kill | KillEvent | PlacementEvent


class Model(Protocol):
    """The part of a rating model the harness uses: a prediction before the event, then the update."""

    def predict(self, a: str, b: str, t: float) -> float:
        """Probability that ``a`` kills ``b`` at time ``t``, from what the model knows so far."""
        ...

    def update(self, attacker: str, victim: str, t: float) -> object:
        """Learn from the kill. The harness ignores any return value, such as an outcome code."""
        ...


class Observer(Protocol):
    """Called around every event, before any model sees it and after every model has learnt it."""

    def before(self, index: int, event: Kill | PlacementEvent) -> None: ...

    def after(self, index: int, event: Kill | PlacementEvent) -> None: ...


@dataclass(frozen=True, slots=True)
class Predictions:
    """Every scored prediction of a walk-forward run, in stream order, for every model."""

    p: dict[str, metrics.FloatArray]
    #: Index of the stream event each prediction belongs to.
    event: npt.NDArray[np.int64]
    #: Whether the prediction is a placement pair (else a kill).
    pair: npt.NDArray[np.bool_]
    #: Whether the prediction's event is in a held-out block.
    held_out: npt.NDArray[np.bool_]
    events: int
    kills: int
    placements: int


def is_held_out(index: int, block: int, test_every: int) -> bool:
    """Whether 0-based event ``index`` is in a held-out block (the test_every-th, 2·test_every-th, ...)."""
    return (index // block + 1) % test_every == 0


def as_event(event: StreamEvent) -> Kill | PlacementEvent:
    """A ``KillEvent`` as its ``(attacker, victim, t)`` tuple; anything else unchanged."""
    if isinstance(event, KillEvent):
        return event.attacker, event.victim, event.t
    return event


def learn(model: Model, event: Kill | PlacementEvent) -> None:
    """Apply one event to one model: a kill to ``update``, a placement to ``update_match`` if it has one."""
    if isinstance(event, PlacementEvent):
        if isinstance(model, MatchModel):
            model.update_match(event.placements, event.t)
    else:
        model.update(*event)


def walk_forward(
    models: Mapping[str, Model],
    events: Iterable[StreamEvent],
    *,
    test_every: int = 10,
    block: int = 1000,
    observer: Observer | None = None,
) -> Predictions:
    """Run every model over the stream, predicting before learning, holding out every k-th block.

    Events are read once, so a generator is fine. ``observer`` (if any) sees each event before
    and after the models.
    """
    if test_every < 2:
        raise ValueError(f"test_every must be at least 2 so that some blocks train, got {test_every!r}")
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block!r}")
    predictions: dict[str, list[float]] = {name: [] for name in models}
    event_of: list[int] = []
    is_pair: list[bool] = []
    held: list[bool] = []
    kills = placements = 0
    index = -1
    for index, raw in enumerate(events):
        event = as_event(raw)
        test = is_held_out(index, block, test_every)
        if observer is not None:
            observer.before(index, event)
        if isinstance(event, PlacementEvent):
            placements += 1
            pairs = placement_pairs(event.placements)
            t = event.t
            for name, model in models.items():
                out = predictions[name]
                for a, b in pairs:
                    out.append(_checked(name, predict_placement(model, a, b, t), index, a, b))
                if not test:
                    learn(model, event)
            event_of.extend([index] * len(pairs))
            is_pair.extend([True] * len(pairs))
            held.extend([test] * len(pairs))
        else:
            kills += 1
            attacker, victim, t = event
            for name, model in models.items():
                predictions[name].append(
                    _checked(name, model.predict(attacker, victim, t), index, *event[:2])
                )
                if not test:
                    model.update(attacker, victim, t)
            event_of.append(index)
            is_pair.append(False)
            held.append(test)
        if observer is not None:
            observer.after(index, event)
    return Predictions(
        p={name: np.asarray(ps, dtype=np.float64) for name, ps in predictions.items()},
        event=np.asarray(event_of, dtype=np.int64),
        pair=np.asarray(is_pair, dtype=bool),
        held_out=np.asarray(held, dtype=bool),
        events=index + 1,
        kills=kills,
        placements=placements,
    )


def replay(
    models: Mapping[str, Model], events: Iterable[StreamEvent], observer: Observer | None = None
) -> int:
    """Every model learns every event (nothing held out, nothing predicted); returns the event count.

    The scenario metrics (:mod:`arenad.evaluation.scenarios`) watch this pass: a model frozen
    during a held-out block would not react to a skill jump inside it.
    """
    index = -1
    for index, raw in enumerate(events):
        event = as_event(raw)
        if observer is not None:
            observer.before(index, event)
        for model in models.values():
            learn(model, event)
        if observer is not None:
            observer.after(index, event)
    return index + 1


def score(predictions: Predictions, seed: int = 1) -> dict[str, dict[str, float]]:
    """``{model: {online_<m>, heldout_<m>, online_n, heldout_n}}`` for each ``m`` in :data:`METRICS`."""
    mask = predictions.held_out
    report: dict[str, dict[str, float]] = {}
    for name, ps in predictions.p.items():
        shown, y = metrics.orient(ps, seed)
        report[name] = {**_scores("online", shown, y), **_scores("heldout", shown[mask], y[mask])}
    return report


def evaluate_stream(
    models: Mapping[str, Model],
    events: Iterable[StreamEvent],
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
    return score(walk_forward(models, events, test_every=test_every, block=block), seed)


def _checked(name: str, p: float, index: int, a: str, b: str) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:  # also catches nan
        raise ValueError(
            f"model {name!r} predicted {p!r} for event {index} ({a!r} kills {b!r}),"
            " which is not a probability in [0, 1]"
        )
    return p


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
