"""Offline evaluation of rating models (§10): metrics, the walk-forward harness and the protocol.

* ``metrics``: pure numpy metrics (log loss, AUC, Brier, ECE, ... and the §10.3 scenario measures);
* ``walkforward``: predict-before-learn over kills and placement events, held-out blocks (§10.5);
* ``truth``: what a simulated stream hides (skills, injected scenarios), built by ``arenad.simulate``;
* ``scenarios`` and ``tiers``: convergence, tier stability and share error, response delay,
  farming, repeat-kill bursts and the returning player, standardized across rating scales;
* ``protocol``: both passes over one stream; ``report``: report.json and report.md as data;
* ``returning``: the §10.6 toy for any model;
* ``plots``: PNG figures with matplotlib (the optional ``arenad[eval]`` extra) — the only module
  here that writes files. Everything else is pure: callers load events and write the results.
"""

from arenad.evaluation.metrics import (
    CalibrationCurve,
    accuracy,
    auc,
    brier,
    calibration_curve,
    convergence_events,
    ece,
    log_loss,
    orient,
    response_delay,
    spearman,
    tier_changes_per_1k,
    tier_share_error,
)
from arenad.evaluation.walkforward import (
    METRICS,
    Model,
    Predictions,
    evaluate_stream,
    is_held_out,
    replay,
    score,
    walk_forward,
)

__all__ = [
    "METRICS",
    "CalibrationCurve",
    "Model",
    "Predictions",
    "accuracy",
    "auc",
    "brier",
    "calibration_curve",
    "convergence_events",
    "ece",
    "evaluate_stream",
    "is_held_out",
    "log_loss",
    "orient",
    "replay",
    "response_delay",
    "score",
    "spearman",
    "tier_changes_per_1k",
    "tier_share_error",
    "walk_forward",
]
