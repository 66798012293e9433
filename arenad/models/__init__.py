"""Rating-model plugins: one ``RatingModel`` Protocol, the built-ins listed explicitly.

Every model is pure (no I/O, no clock) and holds its own parameters (STYLE.md §5). The names
are the ones a configuration or an evaluation run uses:

========================  ===================================================================
``adr``                   ADR, the paper's model (``arenad.core.engine``), default parameters
``adr-printed``           ADR with the §4.2 victim update as printed (``loser_rule="printed"``)
``adr-unanchored``        ADR without the scale anchor (``anchor=False``)
``elo``                   logistic Elo, scale 400, K = 24, initial 1500
``elo-dynamic``           logistic Elo with the FIDE-style K schedule (40 / 20 / 10)
``glicko2``               Glicko-2, every kill one rating period of its two players
``glicko2-period``        Glicko-2 with rating periods of one hour of event time
``trueskill``             two-player TrueSkill, no draws
========================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from arenad.models.adr import ADRModel, adr_printed, adr_unanchored
from arenad.models.base import MatchModel, RatingModel, is_offline, placement_pairs, rates_matches
from arenad.models.elo import DynamicElo, Elo
from arenad.models.glicko2 import Glicko2, Glicko2Period
from arenad.models.trueskill import TrueSkill

__all__ = [
    "BUILTIN_MODELS",
    "MatchModel",
    "ModelFactory",
    "RatingModel",
    "discover_models",
    "is_offline",
    "placement_pairs",
    "rates_matches",
]

#: What the ``arenad.models`` entry points name: a class or function returning a fresh model.
ModelFactory = Callable[[], RatingModel]

#: Built-in models by name: each factory returns a fresh model with default parameters. They are
#: also registered as ``arenad.models`` entry points (pyproject.toml), like third-party ones.
BUILTIN_MODELS: dict[str, ModelFactory] = {
    "adr": ADRModel,
    "adr-printed": adr_printed,
    "adr-unanchored": adr_unanchored,
    "elo": Elo,
    "elo-dynamic": DynamicElo,
    "glicko2": Glicko2,
    "glicko2-period": Glicko2Period,
    "trueskill": TrueSkill,
}


def discover_models() -> tuple[dict[str, ModelFactory], list[str]]:
    """Built-ins plus the ``arenad.models`` entry points; returns the factories and the errors.

    A third-party model that fails to load is reported (the caller logs or prints it), never
    fatal. Built-ins win a name clash: they are registered as entry points too.
    """
    models: dict[str, ModelFactory] = dict(BUILTIN_MODELS)
    errors: list[str] = []
    for ep in entry_points(group="arenad.models"):
        if ep.name in models:
            continue
        try:
            factory = ep.load()
        except Exception as e:  # a broken plugin must not stop arenad
            errors.append(f"{ep.name}: {type(e).__name__}: {e}")
            continue
        if not callable(factory):
            errors.append(f"{ep.name}: {ep.value} is not callable")
            continue
        models[ep.name] = factory
    return models, errors
