"""The one Protocol every rating model implements (STYLE.md §5), and what the models share.

A model is pure: no I/O and no clock. Time comes in with each call as ``t`` (event seconds); a
model that has no notion of time ignores it. The contract, for every model:

* ``predict(a, b, t)`` is P(a kills b) *before* the kill at ``t`` is rated. A player the model
  has not seen yet is rated at the model's prior.
* ``update(attacker, victim, t)`` rates one kill. A self-kill (``attacker == victim``) is not a
  pairwise result and changes nothing.
* A model that rates in periods (``glicko2-period``) applies what it collected once ``t`` passes
  a period boundary; ``predict`` and ``update`` both move its clock to ``t``, so a prediction sees
  every period that has ended by then.
* ``rating`` is on the model's own scale; ``display`` is the model's conservative display rating
  (each model documents its rule).
* ``export_state`` returns plain values; ``import_state`` on a model built the same way continues
  exactly where the exported one stopped.

Two optional capabilities, found with :func:`rates_matches` and :func:`is_offline`:

* A model that rates whole matches also has ``update_match(placements, t)`` (``MatchModel``):
  ``placements`` are groups of players, best first, players in one group tied — the
  match-placement event kind. Kill-only models (ADR, Elo) do not learn from placements.
* An *offline* model (class attribute ``offline = True``: Bradley–Terry, Whole-History Rating)
  refits over the whole history it was given. It answers the same calls, so the evaluation
  harness runs it like any other, but its cost grows with the history, so the daemon refuses it
  as a shadow model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any, Protocol, runtime_checkable

from arenad.errors import ConfigError, ConfigProblem

#: Version of the state layout written by the models of this package (ADR keeps its own).
STATE_VERSION = 1


class RatingModel(Protocol):
    """A rating model: one kill at a time in, probabilities and ratings out."""

    name: str

    def predict(self, a: str, b: str, t: float) -> float:
        """P(``a`` kills ``b``) before the update at ``t``; unknown players get the prior."""
        ...

    def update(self, attacker: str, victim: str, t: float) -> None:
        """Rate one kill: ``attacker`` killed ``victim`` at ``t`` (seconds)."""
        ...

    def rating(self, player: str) -> float:
        """The player's rating on the model's own scale (the prior when unknown)."""
        ...

    def display(self, player: str) -> float:
        """The conservative display rating (the rule is documented per model)."""
        ...

    def players(self) -> list[str]:
        """Every player the model has rated, in first-seen order."""
        ...

    def export_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly from here, as plain values."""
        ...

    def import_state(self, state: dict[str, Any]) -> None:
        """Replace this model's state by an ``export_state`` of a model of the same kind."""
        ...


@runtime_checkable
class MatchModel(Protocol):
    """A model that also rates match placements (groups of players, best first; a group ties)."""

    def update_match(self, placements: Sequence[Sequence[str]], t: float) -> None:
        """Rate one finished match at ``t``."""
        ...


class KillPredictor(Protocol):
    """Anything that predicts a kill (a ``RatingModel``, the harness's ``Model``)."""

    def predict(self, a: str, b: str, t: float) -> float: ...


def predict_placement(model: KillPredictor, a: str, b: str, t: float) -> float:
    """P(``a`` finishes a match above ``b``) before the match at ``t``: the model's own
    ``predict_placement`` where it has one (ADR: docs/adr.md "Predicting a match's order"),
    else its kill prediction ``predict`` (every other model, as the protocol always asked)."""
    own = getattr(model, "predict_placement", None)
    p: float = own(a, b, t) if own is not None else model.predict(a, b, t)
    return p


def rates_matches(model: object) -> bool:
    """Whether ``model`` learns from match-placement events."""
    return isinstance(model, MatchModel)


def is_offline(model: object) -> bool:
    """Whether ``model`` refits over its whole history (evaluation only, never a daemon shadow)."""
    return bool(getattr(model, "offline", False))


def ranked_players(placements: Sequence[Sequence[str]]) -> tuple[list[str], list[int]]:
    """The players of a match in the order given, and the index of each one's group (0 = best).

    Raises ``ValueError`` naming a player placed twice: the decoders refuse such a match, so
    here it is a caller's bug, not input to tolerate.
    """
    order: list[str] = []
    place: list[int] = []
    seen: set[str] = set()
    for k, group in enumerate(placements):
        for player in group:
            if player in seen:
                raise ValueError(f"placements: player {player!r} is placed twice")
            seen.add(player)
            order.append(player)
            place.append(k)
    return order, place


def placement_pairs(placements: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
    """Every (better, worse) pair of players in different groups of a match, best groups first.

    This is how a match result is scored as pairwise predictions: P(better beats worse). Tied
    players (one group) are not a pairwise outcome and give no pair.
    """
    pairs: list[tuple[str, str]] = []
    for k, group in enumerate(placements):
        for worse_group in placements[k + 1 :]:
            for a in group:
                for b in worse_group:
                    pairs.append((a, b))
    return pairs


class MuSigmaState:
    """Players as (μ, σ) Gaussians, display μ − 3σ: what TrueSkill and OpenSkill share.

    The subclass sets ``kind``, ``params`` (a dataclass), ``_prior`` and ``_state``.
    """

    kind: str
    params: Any
    _prior: tuple[float, float]
    _state: dict[str, tuple[float, float]]

    def state_of(self, player: str) -> tuple[float, float]:
        """(μ, σ) of ``player`` (the prior when unknown)."""
        return self._state.get(player, self._prior)

    def rating(self, player: str) -> float:
        return self._state.get(player, self._prior)[0]

    def display(self, player: str) -> float:
        mu, sigma = self._state.get(player, self._prior)
        return mu - 3.0 * sigma

    def players(self) -> list[str]:
        return list(self._state)

    def export_state(self) -> dict[str, Any]:
        return state_envelope(
            self.kind,
            params=asdict(self.params),
            players={p: list(v) for p, v in self._state.items()},
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._state = {str(p): (float(v[0]), float(v[1])) for p, v in state["players"].items()}


def require(section: str, checks: Iterable[tuple[bool, str, object, str]]) -> None:
    """Raise one ``ConfigError`` naming every failed ``(ok, key, value, message)`` check."""
    problems = [ConfigProblem(f"{section}.{key}", value, msg) for ok, key, value, msg in checks if not ok]
    if problems:
        raise ConfigError(problems)


def state_envelope(kind: str, **payload: Any) -> dict[str, Any]:
    """An exported state: the model kind and layout version that ``check_state`` verifies."""
    return {"kind": kind, "version": STATE_VERSION, **payload}


def check_state(state: dict[str, Any], kind: str) -> None:
    """Refuse a state exported by another kind of model or another layout version."""
    if state.get("kind") != kind:
        raise ValueError(f"state kind {state.get('kind')!r}, expected {kind!r}")
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"state version {state.get('version')!r}, expected {STATE_VERSION}")
