"""ADR (the paper arenad is built on) as a ``RatingModel``: a thin wrapper over the engine.

Everything is the engine's: ``update`` is ``Engine.feed`` (so recalibrations happen at the same
event-time points as in the daemon and in replay), ``predict`` is the §3.1 ``Engine.predict``.
Kills the engine refuses (cooldown repeats, self-kills, late events) change nothing, as there.

Scale: the visible ADR rating mu (mu0 = 1000). Display: mu − 3σ, with the §4.3 sigma.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arenad.core.engine import Engine
from arenad.core.params import ADRParams


class ADRKillModel:
    """ADR ratings of one ladder, through ``arenad.core.engine.Engine``, from kills only: the
    paper's reading (``placement_weight = 0``), so the harness reports it as kill-only."""

    def __init__(self, params: ADRParams | None = None, name: str = "adr") -> None:
        self.name = name
        self.params = params if params is not None else ADRParams()
        self.engine = Engine(self.params)

    def predict(self, a: str, b: str, t: float) -> float:
        return self._predict(self.engine.predict, a, b)

    def predict_placement(self, a: str, b: str, t: float) -> float:
        """P(a finishes a match above b): ``Engine.predict_placement``; the kill prediction
        while no match was learnt."""
        return self._predict(self.engine.predict_placement, a, b)

    def _predict(self, how: Callable[[int, int], float], a: str, b: str) -> float:
        ids = self.engine.ids
        i = ids.get(a)
        j = ids.get(b)
        if i is None or j is None:
            # The prior: nothing is known about at least one of the two.
            return 0.5
        return how(i, j)

    def update(self, attacker: str, victim: str, t: float) -> None:
        self.engine.feed(attacker, victim, t)

    def rating(self, player: str) -> float:
        i = self.engine.ids.get(player)
        return self.params.mu0 if i is None else self.engine.mu(i)

    def display(self, player: str) -> float:
        i = self.engine.ids.get(player)
        if i is None:
            return self.params.mu0 - 3.0 * self.params.sigma0
        return self.engine.display(i)

    def players(self) -> list[str]:
        return list(self.engine.names)

    def export_state(self) -> dict[str, Any]:
        return self.engine.export_state()

    def import_state(self, state: dict[str, Any]) -> None:
        self.engine = Engine.from_state(state, self.params)


class ADRModel(ADRKillModel):
    """ADR from kills and match placements (seed 001 §2 pairs at ``placement_weight``): a
    ``MatchModel``. ``ADRModel(params)`` with placement_weight 0 learns nothing from a match;
    ``adr_model`` picks the kill-only class then."""

    def update_match(self, placements: Sequence[Sequence[str]], t: float) -> None:
        """A finished match: its pairs at ``placement_weight`` (``Engine.apply_placement``)."""
        self.engine.apply_placement(placements, t)


def adr_model(params: ADRParams, name: str = "adr") -> ADRKillModel:
    """An ADR model of these parameters: a match model when they learn from placements."""
    cls = ADRModel if params.placement_weight > 0 else ADRKillModel
    return cls(params, name=name)


#: The ADR variants by model name, each as the ``[adr]`` keys it sets. ``adr`` is arenad's
#: defaults; the others are the paper's §9 configuration (``preset = "paper"``) and its two
#: variants, one change each. The daemon's ``[models] primary`` may be any of them
#: (``arenad.daemon.config.PRIMARY_MODELS`` spells out every parameter each one implies).
VARIANTS: dict[str, dict[str, Any]] = {
    "adr": {},
    "adr-paper": {"preset": "paper"},
    "adr-printed": {"preset": "paper", "loser_rule": "printed"},
    "adr-unanchored": {"preset": "paper", "anchor": False},
}


def variant(name: str) -> ADRKillModel:
    """A fresh model of the ADR variant ``name`` (a key of :data:`VARIANTS`)."""
    return adr_model(ADRParams.from_mapping(VARIANTS[name]), name=name)


def adr_paper() -> ADRKillModel:
    """ADR as the paper's §9 configures it (``ADRParams.paper()``), for comparison."""
    return variant("adr-paper")


def adr_printed() -> ADRKillModel:
    """The paper's ADR with the §4.2 victim update as printed (``loser_rule="printed"``)."""
    return variant("adr-printed")


def adr_unanchored() -> ADRKillModel:
    """The paper's ADR without the scale anchor (``anchor=False``)."""
    return variant("adr-unanchored")
