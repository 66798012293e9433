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

from arenad.core.params import ADRParams
from arenad.models.adr import ADRModel
from arenad.models.base import RatingModel
from arenad.models.elo import DynamicElo, Elo
from arenad.models.glicko2 import Glicko2, Glicko2Period
from arenad.models.trueskill import TrueSkill

__all__ = ["BUILTIN_MODELS", "RatingModel"]

#: Built-in models by name: each factory returns a fresh model with default parameters.
BUILTIN_MODELS: dict[str, Callable[[], RatingModel]] = {
    "adr": ADRModel,
    "adr-printed": lambda: ADRModel(ADRParams(loser_rule="printed"), name="adr-printed"),
    "adr-unanchored": lambda: ADRModel(ADRParams(anchor=False), name="adr-unanchored"),
    "elo": Elo,
    "elo-dynamic": DynamicElo,
    "glicko2": Glicko2,
    "glicko2-period": Glicko2Period,
    "trueskill": TrueSkill,
}
