"""Offline evaluation of rating models (§10): pure metrics and a walk-forward harness.

No I/O here. Callers load events and print the rows.
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
from arenad.evaluation.walkforward import METRICS, Model, evaluate_stream, is_held_out

__all__ = [
    "METRICS",
    "CalibrationCurve",
    "Model",
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
    "response_delay",
    "spearman",
    "tier_changes_per_1k",
    "tier_share_error",
]
