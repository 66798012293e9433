"""Rating-model plugins: one ``RatingModel`` Protocol, the built-ins listed explicitly.

Every model is pure (no I/O, no clock) and holds its own parameters (STYLE.md §5). The names
are the ones a configuration or an evaluation run uses:

========================  ===================================================================
``adr``                   ADR, the paper's model (``arenad.core.engine``), arenad's defaults
``adr-paper``             ADR with the paper's §9 parameters and mechanisms (``ADRParams.paper()``)
``adr-printed``           ``adr-paper`` with the §4.2 victim update as printed
                          (``loser_rule="printed"``)
``adr-unanchored``        ``adr-paper`` without the scale anchor (``anchor=False``)
``elo``                   logistic Elo, scale 400, K = 24, initial 1500
``elo-dynamic``           logistic Elo with the FIDE-style K schedule (40 / 20 / 10)
``glicko2``               Glicko-2, every kill one rating period of its two players
``glicko2-period``        Glicko-2 with rating periods of one hour of event time
``glicko2-mp``            Glicko-2 MP-weighted: a match is one period, each pair a game of
                          weight 1/(N − 1); kills as ``glicko2`` (rates matches)
``trueskill``             two-player TrueSkill, no draws
``trueskill-ffa``         TrueSkill whose matches are factor-graph EP over the placements,
                          draw probability 0.10 between neighbours; kills as ``trueskill``
                          (rates matches)
``openskill``             Weng-Lin Plackett-Luce by the ``openskill`` package; a kill is a
                          two-player match (rates matches)
``bradley-terry``         Bradley–Terry maximum likelihood over every kill so far, with
                          confidence intervals and rank spread (offline: the best static fit)
``whr``                   Whole-History Rating: a rating per player-day, Brownian prior
                          (offline)
========================  ===================================================================

"(rates matches)": the model also has ``update_match`` (``MatchModel``). "(offline)": the
model refits over its whole history (``is_offline``); evaluation runs it, the daemon does not.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from arenad.models.adr import ADRModel, adr_paper, adr_printed, adr_unanchored
from arenad.models.base import MatchModel, RatingModel, is_offline, placement_pairs, rates_matches
from arenad.models.bradley_terry import BradleyTerry
from arenad.models.elo import DynamicElo, Elo
from arenad.models.glicko2 import Glicko2, Glicko2MP, Glicko2Period
from arenad.models.openskill import OpenSkill
from arenad.models.trueskill import TrueSkill, TrueSkillFFA
from arenad.models.whr import WholeHistoryRating

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

#: Built-in models by name: each factory returns a fresh model with its own fixed parameters. They are
#: also registered as ``arenad.models`` entry points (pyproject.toml), like third-party ones.
BUILTIN_MODELS: dict[str, ModelFactory] = {
    "adr": ADRModel,
    "adr-paper": adr_paper,
    "adr-printed": adr_printed,
    "adr-unanchored": adr_unanchored,
    "elo": Elo,
    "elo-dynamic": DynamicElo,
    "glicko2": Glicko2,
    "glicko2-period": Glicko2Period,
    "glicko2-mp": Glicko2MP,
    "trueskill": TrueSkill,
    "trueskill-ffa": TrueSkillFFA,
    "openskill": OpenSkill,
    "bradley-terry": BradleyTerry,
    "whr": WholeHistoryRating,
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
