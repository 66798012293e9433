"""What a simulated stream knows and a model must find out: hidden skills and injected scenarios (§10.4).

Plain values, built by :func:`arenad.simulate.simulate_stream` and read by the scenario metrics
(:mod:`arenad.evaluation.scenarios`). Event positions are 0-based indices into the stream the
truth came with, so a metric can pick out exactly the injected kills.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SkillChange:
    """From ``t`` on, ``player``'s hidden skill is ``skill``."""

    player: str
    t: float
    skill: float


@dataclass(frozen=True, slots=True)
class Jump:
    """A sudden skill increase (§10.4 item 3): ``player`` goes from ``before`` to ``after`` at ``t``."""

    player: str
    t: float
    before: float
    after: float


@dataclass(frozen=True, slots=True)
class Absence:
    """A long absence followed by strong play (§10.4 item 3).

    ``player`` has no event in (``left``, ``back``); ``left`` is its last event before the absence
    and ``back`` its first after. From ``back`` on its hidden skill is ``skill_after``, and the
    first events back, ``return_events``, are kills it makes in a row.
    """

    player: str
    left: float
    back: float
    skill_after: float
    return_events: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Farming:
    """A farming pair: ``attacker`` kills the same weak ``victim`` again and again (each kill past the
    cooldown), while ``control``, a player of about the same skill, makes as many kills on varied
    opponents at the same time. The two are compared (``farming_events`` and ``control_events``)."""

    attacker: str
    victim: str
    control: str
    farming_events: tuple[int, ...]
    control_events: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Burst:
    """``attacker`` kills ``victim`` several times within the §2.1 cooldown; ``events`` in order."""

    attacker: str
    victim: str
    events: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Truth:
    """Hidden skills at the start, their changes over time, and where each scenario was injected."""

    skills: Mapping[str, float]
    changes: tuple[SkillChange, ...] = ()
    jump: Jump | None = None
    absence: Absence | None = None
    farming: Farming | None = None
    bursts: tuple[Burst, ...] = ()
    #: Scenarios that were asked for (or defaulted) but did not fit, with the reason.
    skipped: Mapping[str, str] = field(default_factory=dict)

    def skill_at(self, player: str, t: float) -> float:
        """``player``'s hidden skill at time ``t`` (the latest change at or before ``t`` wins)."""
        skill = self.skills[player]
        for change in self.changes:
            if change.player == player and change.t <= t:
                skill = change.skill
        return skill

    def skills_at(self, t: float) -> dict[str, float]:
        """Every player's hidden skill at time ``t``."""
        out = dict(self.skills)
        for change in sorted(self.changes, key=lambda c: c.t):
            if change.t <= t:
                out[change.player] = change.skill
        return out
