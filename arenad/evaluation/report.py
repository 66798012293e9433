"""The evaluation report as data (``report.json``) and as Markdown (``report.md``). No I/O here.

``build_report`` turns an :class:`~arenad.evaluation.protocol.Evaluation` into plain JSON values
(``nan`` becomes ``null``); ``render_markdown`` renders any such report, and
``returning_report`` the §10.6 toy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from arenad.evaluation.protocol import Evaluation
from arenad.evaluation.returning import ReturningResult
from arenad.evaluation.truth import Truth

#: What each reported key means, copied into every report so it reads on its own.
DEFINITIONS: dict[str, str] = {
    "log_loss, brier, auc, ece, accuracy, n": (
        "online (prequential) scores over every prediction: each kill, and each (better, worse) pair "
        "of a placement event, predicted before the model learns it; AUC and ECE (10 bins) on a seeded "
        "random orientation of each prediction"
    ),
    "heldout_*": "the same over the held-out blocks only (every test_every-th block, never learnt)",
    "convergence_events": "stream events until Spearman rho(model rating, hidden skill) >= 0.9 (simulation)",
    "tier_changes_per_1k": (
        "tier changes per 1,000 player-events: ADR's own tiers for ADR models, quantile tiers of the "
        "model's ratings (§6.1 placement, §6.3 hourly calibration, no §6.4 accumulators) for others"
    ),
    "quantile_tier_changes_per_1k": "the quantile tiers for every model, ADR included",
    "tier_share_error": "largest |share - p_k| among active placed players after the last event",
    "response_delay": (
        "events of the jumping player after the jump until its z-score covers half the way to the "
        "z-score of control players of its new skill"
    ),
    "farming_gain": "the farming attacker's rating change over its farming kills, in sd of the ratings",
    "farming_control_gain": "the same for as many kills on varied opponents by a player of the same skill",
    "burst_gain": "attacker's rating change over the repeat kills of a burst (inside the cooldown), in sd",
    "absence_max_display_change": (
        "largest one-event change of the returning player's display rating in its first 50 events "
        "back, in sd of the population's display ratings"
    ),
    "absence_max_rating_change": "the same for the rating itself (includes any decay applied at the return)",
}

PREDICTION_COLUMNS = (
    ("log_loss", "log loss"),
    ("brier", "Brier"),
    ("auc", "AUC"),
    ("ece", "ECE"),
    ("accuracy", "accuracy"),
    ("heldout_log_loss", "held-out log loss"),
    ("heldout_auc", "held-out AUC"),
    ("heldout_ece", "held-out ECE"),
    ("heldout_accuracy", "held-out acc."),
    ("heldout_n", "held-out n"),
)
SCENARIO_COLUMNS = (
    ("convergence_events", "convergence (events)"),
    ("spearman_end", "ρ at end"),
    ("response_delay", "response delay"),
    ("farming_gain", "farming gain"),
    ("farming_control_gain", "control gain"),
    ("burst_gain", "burst gain"),
    ("absence_max_display_change", "absence: max display Δ"),
    ("absence_max_rating_change", "absence: max rating Δ"),
)
TIER_COLUMNS = (
    ("tier_changes_per_1k", "tier changes /1k"),
    ("tier_share_error", "share error"),
    ("quantile_tier_changes_per_1k", "quantile tiers: changes /1k"),
    ("quantile_tier_share_error", "quantile tiers: share error"),
)
RETURNING_COLUMNS = (
    ("seeding", "seeding"),
    ("initial", "rating at return"),
    ("opponent", "opponent"),
    ("final", "after kills"),
    ("increase", "increase (own scale)"),
    ("increase_z", "increase (sd)"),
    ("increase_gap", "increase per 1000 of gap"),
    ("first_step", "first Δ"),
    ("max_step", "largest Δ"),
    ("max_display_step", "largest display Δ"),
)


def json_safe(value: Any) -> Any:
    """Plain JSON values: non-finite floats become None, tuples lists, numpy scalars Python ones."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return number if math.isfinite(number) else None
    return str(value)


def scenario_summary(truth: Truth) -> dict[str, Any]:
    """Where each scenario was injected, as plain values."""
    out: dict[str, Any] = {"players": len(truth.skills), "skipped": dict(truth.skipped)}
    if truth.jump is not None:
        j = truth.jump
        out["jump"] = {"player": j.player, "t": j.t, "skill_before": j.before, "skill_after": j.after}
    if truth.absence is not None:
        a = truth.absence
        out["absence"] = {
            "player": a.player,
            "left": a.left,
            "back": a.back,
            "days_away": (a.back - a.left) / 86400.0,
            "skill_after": a.skill_after,
            "return_kills": len(a.return_events),
        }
    if truth.farming is not None:
        f = truth.farming
        out["farming"] = {
            "attacker": f.attacker,
            "victim": f.victim,
            "control": f.control,
            "kills": len(f.farming_events),
            "first_event": f.farming_events[0],
        }
    if truth.bursts:
        out["bursts"] = {
            "count": len(truth.bursts),
            "size": len(truth.bursts[0].events),
            "first_events": [b.events[0] for b in truth.bursts],
        }
    return out


def build_report(
    evaluation: Evaluation,
    *,
    source: Sequence[str],
    truth: Truth | None = None,
    targets: Sequence[float] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``report.json``: models, counts, the split, the scenarios, the targets p_k and the definitions."""
    pred = evaluation.predictions
    report: dict[str, Any] = {
        "source": list(source),
        "events": pred.events,
        "kills": pred.kills,
        "placements": pred.placements,
        "predictions": len(pred.event),
        "pair_predictions": int(pred.pair.sum()),
        "block": evaluation.block,
        "test_every": evaluation.test_every,
        "heldout_predictions": int(pred.held_out.sum()),
        "seed": evaluation.seed,
        "targets": list(targets),
        "models": evaluation.rows,
    }
    if truth is not None:
        report["simulation"] = scenario_summary(truth)
    if extra:
        report.update(extra)
    report["definitions"] = DEFINITIONS
    return json_safe(report)  # type: ignore[no-any-return]


def returning_report(
    results: Mapping[str, ReturningResult | None], *, kills: int, absence_days: float
) -> dict[str, Any]:
    """``report.json`` of the §10.6 toy: one row per model (None: not applicable)."""
    models: dict[str, Any] = {}
    for name, result in results.items():
        if result is None:
            models[name] = None
            continue
        row = result.row()
        row.pop("model")
        row["ratings"] = list(result.ratings)
        row["displays"] = list(result.displays)
        models[name] = row
    fixed = any(r is not None and r.fixed_opponent for r in results.values())
    return json_safe(  # type: ignore[no-any-return]
        {
            "experiment": "§10.6 returning player",
            "kills": kills,
            "absence_days": absence_days,
            "fixed_opponent": fixed,
            "paper": {"adr": 1197.93, "elo": 1166.94, "glicko2": 1077.40, "trueskill": 31.52},
            "models": models,
        }
    )


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        text = f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"
        return text[1:] if text.startswith("-") and not text.strip("-0.") else text  # no "-0.0000"
    return str(value)


def markdown_table(rows: Mapping[str, Mapping[str, Any] | None], columns: Sequence[tuple[str, str]]) -> str:
    """One row per model, one column per ``(key, header)``."""
    lines = ["| model | " + " | ".join(h for _, h in columns) + " |"]
    lines.append("| --- |" + " ---: |" * len(columns))
    for name, row in rows.items():
        cells = ["n/a"] * len(columns) if row is None else [_cell(row.get(k)) for k, _ in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(report: Mapping[str, Any]) -> str:
    """``report.md``: the tables of a protocol report or of a §10.6 report."""
    if report.get("experiment") == "§10.6 returning player":
        return _render_returning(report)
    models: Mapping[str, Mapping[str, Any]] = report["models"]
    parts = [
        "# arenad evaluate",
        "",
        f"Source: {', '.join(report['source'])}  ",
        f"{report['events']} events ({report['kills']} kills, {report['placements']} placement events); "
        f"{report['predictions']} predictions ({report['pair_predictions']} placement pairs), "
        f"{report['heldout_predictions']} of them held out (every {report['test_every']}th block of "
        f"{report['block']} events); orientation seed {report['seed']}.",
        "",
        "## Prediction (§10.3, seed 001 §4.3)",
        "",
        markdown_table(models, PREDICTION_COLUMNS),
    ]
    if "simulation" in report:
        sim = report["simulation"]
        parts += ["", "## Scenarios (§10.4; standardized: sd of each model's ratings)", ""]
        parts.append(markdown_table(models, SCENARIO_COLUMNS))
        parts += ["", "Injected: " + _describe(sim)]
    parts += ["", "## Tiers (§6, §10.5)", "", markdown_table(models, TIER_COLUMNS)]
    if report.get("notes"):
        parts += ["", *[f"- {note}" for note in report["notes"]]]
    parts += ["", "## Definitions", ""]
    parts += [f"- `{k}`: {v}" for k, v in report["definitions"].items()]
    parts += ["", "See docs/evaluation.md for how each number is defined and what was measured.", ""]
    return "\n".join(parts)


def _describe(sim: Mapping[str, Any]) -> str:
    bits: list[str] = []
    if "jump" in sim:
        j = sim["jump"]
        bits.append(f"skill jump of {j['player']} ({j['skill_before']:.2f} → {j['skill_after']:.2f})")
    if "absence" in sim:
        a = sim["absence"]
        bits.append(
            f"{a['player']} away {a['days_away']:.1f} days, back with {a['return_kills']} kills in a row"
        )
    if "farming" in sim:
        f = sim["farming"]
        bits.append(f"{f['attacker']} farms {f['victim']} {f['kills']} times (control {f['control']})")
    if "bursts" in sim:
        b = sim["bursts"]
        bits.append(f"{b['count']} bursts of {b['size']} repeat kills")
    for name, why in sim.get("skipped", {}).items():
        bits.append(f"{name} skipped: {why}")
    return "; ".join(bits) + "." if bits else "nothing."


def _render_returning(report: Mapping[str, Any]) -> str:
    paper = report["paper"]
    opponent = "held at its rating" if report["fixed_opponent"] else "rated normally"
    parts = [
        "# arenad evaluate --returning (§10.6)",
        "",
        f"A player rated 1000 returns after {report['absence_days']} days and kills a 2000-rated "
        f"opponent ({opponent}) {report['kills']} times, 61 s apart.",
        "",
        markdown_table(report["models"], RETURNING_COLUMNS),
        "",
        "Paper (§10.6, standardized increase after 50 kills): "
        + ", ".join(f"{k} {v}" for k, v in paper.items())
        + ".",
        "",
        "`increase` is the paper's number (the rise on the model's own scale); `increase (sd)` divides it "
        "by the spread of the 40 background players' ratings and `increase per 1000 of gap` by the "
        "initial gap to the opponent, so those two compare across models.",
        "",
    ]
    return "\n".join(parts)
