"""The §10 protocol in one call: walk-forward prediction scores plus the §10.3 scenario measures.

Two passes over the same events, each with fresh models from the factories:

1. :func:`arenad.evaluation.walkforward.walk_forward`: predict before learning, every
   ``test_every``-th block held out (§10.5) — log loss, Brier, AUC, ECE and accuracy, online and
   held out.
2. :func:`arenad.evaluation.walkforward.replay` with a :class:`ScenarioWatch`: every model learns
   every event, and the watch measures convergence, tiers and the injected scenarios. A separate
   pass because a model frozen in a held-out block would not react to a scenario inside it.

Any ``RatingModel`` works, offline ones (``is_offline``) included: the harness only calls the
protocol methods. Models that rate matches learn placement events in both passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from arenad.evaluation import metrics
from arenad.evaluation.scenarios import ScenarioWatch
from arenad.evaluation.tiers import TierRules
from arenad.evaluation.truth import Truth
from arenad.evaluation.walkforward import METRICS, Predictions, StreamEvent, replay, score, walk_forward
from arenad.models.base import MatchModel, RatingModel, is_offline

ModelFactory = Callable[[], RatingModel]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Everything one protocol run measured."""

    rows: dict[str, dict[str, Any]]  # per model: every metric (see ``evaluate``)
    predictions: Predictions
    seed: int
    block: int
    test_every: int
    watch: ScenarioWatch

    @property
    def events(self) -> int:
        return self.predictions.events


def evaluate(
    factories: Mapping[str, ModelFactory],
    events: Sequence[StreamEvent],
    *,
    truth: Truth | None = None,
    rules: TierRules,
    test_every: int = 10,
    block: int = 1000,
    seed: int = 1,
    checkpoints: int = 100,
) -> Evaluation:
    """Run both passes. Each row holds ``log_loss``, ``auc``, ``brier``, ``ece``, ``accuracy`` and
    ``n`` (online: every prediction), the same as ``online_*`` and ``heldout_*``, and the scenario
    measures of :mod:`arenad.evaluation.scenarios`."""
    models = {name: make() for name, make in factories.items()}
    predictions = walk_forward(models, events, test_every=test_every, block=block)
    scores = score(predictions, seed)
    learners = {name: make() for name, make in factories.items()}
    offline = frozenset(name for name, model in learners.items() if is_offline(model))
    watch = ScenarioWatch(
        learners, truth, rules, events=len(events), checkpoints=checkpoints, snapshot=offline
    )
    replay(learners, events, watch)
    scenario = watch.results()
    rows: dict[str, dict[str, Any]] = {}
    for name, model in models.items():
        s = scores[name]
        row: dict[str, Any] = {m: s[f"online_{m}"] for m in METRICS}
        row["n"] = int(s["online_n"])
        row.update(s)
        row["online_n"] = int(s["online_n"])
        row["heldout_n"] = int(s["heldout_n"])
        row["offline"] = is_offline(model)
        row["rates_matches"] = isinstance(model, MatchModel)
        row.update(scenario[name])
        rows[name] = row
    return Evaluation(rows, predictions, seed, block, test_every, watch)


def oriented(evaluation: Evaluation) -> dict[str, tuple[metrics.FloatArray, metrics.FloatArray]]:
    """Each model's predictions in the symmetric orientation the scores use: ``(p_shown, y)``."""
    return {name: metrics.orient(p, evaluation.seed) for name, p in evaluation.predictions.p.items()}


def rolling_log_loss(p: metrics.FloatArray, y: metrics.FloatArray, window: int) -> metrics.FloatArray:
    """Mean log loss over the last ``window`` predictions at each position (``nan`` before it fills)."""
    likelihood = np.where(y == 1.0, p, 1.0 - p)
    loss = -np.log(np.maximum(likelihood, metrics.LOG_LOSS_EPS))
    out = np.full(len(loss), math.nan)
    if window < 1 or len(loss) < window:
        return out
    csum = np.concatenate(([0.0], np.cumsum(loss)))
    out[window - 1 :] = (csum[window:] - csum[:-window]) / window
    return out


def block_auc(
    p: metrics.FloatArray, y: metrics.FloatArray, event: npt.NDArray[np.int64], block: int
) -> list[tuple[int, float]]:
    """AUC per block of ``block`` stream events: ``(block index, auc)`` for every block with predictions."""
    idx = event // block
    return [(int(k), metrics.auc(p[idx == k], y[idx == k])) for k in np.unique(idx)]
