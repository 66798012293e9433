"""ADR (the paper arenad is built on) as a ``RatingModel``: a thin wrapper over the engine.

Everything is the engine's: ``update`` is ``Engine.feed`` (so recalibrations happen at the same
event-time points as in the daemon and in replay), ``predict`` is the §3.1 ``Engine.predict``.
Kills the engine refuses (cooldown repeats, self-kills, late events) change nothing, as there.

Scale: the visible ADR rating mu (mu0 = 1000). Display: mu − 3σ, with the §4.3 sigma.
"""

from __future__ import annotations

from typing import Any

from arenad.core.engine import Engine
from arenad.core.params import ADRParams


class ADRModel:
    """ADR ratings of one ladder, through ``arenad.core.engine.Engine``."""

    def __init__(self, params: ADRParams | None = None, name: str = "adr") -> None:
        self.name = name
        self.params = params if params is not None else ADRParams()
        self.engine = Engine(self.params)

    def predict(self, a: str, b: str, t: float) -> float:
        ids = self.engine.ids
        i = ids.get(a)
        j = ids.get(b)
        if i is None or j is None:
            # The prior: nothing is known about at least one of the two.
            return 0.5
        return self.engine.predict(i, j)

    def update(self, attacker: str, victim: str, t: float) -> None:
        self.engine.feed(attacker, victim, t)

    def rating(self, player: str) -> float:
        i = self.engine.ids.get(player)
        return self.params.mu0 if i is None else self.engine.mu(i)

    def display(self, player: str) -> float:
        i = self.engine.ids.get(player)
        if i is None:
            return self.params.mu0 - 3.0 * self.params.sigma0
        view = self.engine.view(i)
        return view.mu - 3.0 * view.sigma

    def players(self) -> list[str]:
        return list(self.engine.names)

    def export_state(self) -> dict[str, Any]:
        return self.engine.export_state()

    def import_state(self, state: dict[str, Any]) -> None:
        self.engine = Engine.from_state(state, self.params)


def adr_printed() -> ADRModel:
    """ADR with the §4.2 victim update as printed (``loser_rule="printed"``), for comparison."""
    return ADRModel(ADRParams(loser_rule="printed"), name="adr-printed")


def adr_unanchored() -> ADRModel:
    """ADR without the scale anchor (``anchor=False``), for comparison."""
    return ADRModel(ADRParams(anchor=False), name="adr-unanchored")
