"""The §10.3 measures beyond prediction: convergence, tiers and the injected scenarios.

:class:`ScenarioWatch` is an observer of :func:`arenad.evaluation.walkforward.replay`, the pass in
which every model learns every event. It reads each model's ratings around the events that
matter and turns them into one row of numbers per model (:meth:`ScenarioWatch.results`).

Models rate on different scales (ADR around 1000 with a spread of a few hundred, Elo around
1500, TrueSkill around 25 with a spread of a few points), so every scenario measure is
*standardized*: a rating change is divided by the standard deviation of that model's ratings of
the whole population (every player of the stream, unseen ones at the model's prior) at the start
of the scenario, and a position is a z-score, (rating − mean) / sd, over the same population at
the same moment. A z-score is unchanged by any shift or stretch of a model's scale, so a drift
of the whole scale (``adr-unanchored``) does not count as a change either.

The measures, per model (None or nan when the stream has no such scenario or the model never
gets there):

* ``convergence_events``: stream events until the Spearman ρ between the model's ratings and the
  hidden skills first reaches 0.9, checked at ``checkpoints`` evenly spaced points (simulation
  only). ``spearman_end`` is ρ after the last event.
* ``tier_changes_per_1k``: tier changes per 1,000 player-events (a kill is two player-events, a
  placement one per player), with ADR's own tiers for an ADR model and the quantile tiers of
  :mod:`arenad.evaluation.tiers` for any other; ``quantile_tier_changes_per_1k`` uses the
  quantile tiers for every model, ADR too. ``tier_share_error`` (and
  ``quantile_tier_share_error``) is the largest |share − p_k| among active placed players after
  the last event.
* ``response_delay``: the jumping player's own events after the jump until its z-score has
  covered half the way from its z-score at the jump to the mean z-score, at the jump, of the five
  players whose hidden skill is nearest its new one (control players of that skill). The z-score
  at each event is taken over the population at that event.
* ``farming_gain``: the farming attacker's rating change summed over its farming kills only,
  in standard deviations; ``farming_control_gain``: the same for the control player's kills on
  varied opponents, made at the same time. A model that resists farming gives the first less
  than the second.
* ``burst_gain``: the attacker's rating change over the repeat kills of a burst (every kill but
  the first, all inside the §2.1 cooldown), in standard deviations, averaged over bursts. ADR
  filters them (0); models without a cooldown learn them.
* ``absence_max_display_change``: the largest change of the returning player's display rating
  from one event of the stream to the next, from its return until its ``follow``-th event back,
  in standard deviations of the population's display ratings at the return (every event is
  watched, not only the player's own, so a change a model applies later still shows);
  ``absence_max_rating_change`` the same for the rating itself. The first change includes what a
  model does at the return itself (ADR: §5 decay toward the active mean, applied lazily then).

Models that rate in periods (``glicko2-period``) apply a kill when its period closes, at some
later event, so a change cannot be attributed to the kill that caused it. The watch notices:
a model whose attacker's rating did not move at more than half of the kills is marked
``deferred_updates``, and its per-kill measures (``farming_gain``, ``farming_control_gain``,
``burst_gain``) are None.

Offline models (``is_offline``: Bradley–Terry, Whole-History Rating) refit over the whole history
whenever they are read after a kill; reading them at every event would refit at every event. The
watch reads them from a snapshot of their ratings refreshed at each checkpoint (every
``events / checkpoints`` events), the way such a ladder would be published: periodically. Their
per-kill measures are None (``deferred_updates``), the others are measured on the snapshots.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arenad.core.events import PlacementEvent
from arenad.evaluation import metrics
from arenad.evaluation.tiers import QuantileTiers, TierRules, engine_of, engine_shares
from arenad.evaluation.truth import Truth
from arenad.evaluation.walkforward import Kill
from arenad.models.base import RatingModel

#: Control players for the response delay: this many with hidden skill nearest the new one.
CONTROLS = 5
#: Spearman ρ that counts as converged (§10.3 "convergence speed").
CONVERGED = 0.9


def event_players(event: Kill | PlacementEvent) -> tuple[str, ...]:
    """The players an event involves: attacker and victim, or everyone placed."""
    if isinstance(event, PlacementEvent):
        return tuple(p for group in event.placements for p in group)
    return event[0], event[1]


def event_time(event: Kill | PlacementEvent) -> float:
    return event.t if isinstance(event, PlacementEvent) else event[2]


#: A player name no stream holds: reading it gives a model's prior.
_UNSEEN = "\x00arenad-unseen"


class _Reader:
    """A model's ratings as the watch reads them: live, or from a periodic snapshot (offline models)."""

    def __init__(self, model: RatingModel, snapshot: bool) -> None:
        self.model = model
        self.snapshot = snapshot
        self._rating: dict[str, float] = {}
        self._display: dict[str, float] = {}
        self._prior = (math.nan, math.nan)

    def refresh(self, players: list[str]) -> None:
        if self.snapshot:
            m = self.model
            self._rating = {p: m.rating(p) for p in players}
            self._display = {p: m.display(p) for p in players}
            self._prior = (m.rating(_UNSEEN), m.display(_UNSEEN))

    def rating(self, player: str) -> float:
        if self.snapshot:
            return self._rating.get(player, self._prior[0])
        return self.model.rating(player)

    def display(self, player: str) -> float:
        if self.snapshot:
            return self._display.get(player, self._prior[1])
        return self.model.display(player)


@dataclass(slots=True)
class _Track:
    """What the watch collects for one model."""

    tiers: QuantileTiers
    rho: list[tuple[int, float]] = field(default_factory=list)
    # jump
    jump_before: float = math.nan
    jump_target: float = math.nan
    jump_z: list[float] = field(default_factory=list)
    # farming, control, bursts: rating of the tracked player before the current event
    pending: dict[int, float] = field(default_factory=dict)
    farming: float = 0.0
    control: float = 0.0
    farming_sd: float = math.nan
    bursts: list[float] = field(default_factory=list)
    burst_sd: float = math.nan
    # absence
    absence_ref: tuple[float, float, float, float] | None = None  # rating mean, sd, display mean, sd
    absence_last: tuple[float, float] | None = None
    absence_own: int = 0
    absence_steps: list[tuple[float, float]] = field(default_factory=list)  # (Δrating, Δdisplay)
    absence_before: deque[tuple[float, float, float]] = field(default_factory=lambda: deque(maxlen=20))
    absence_after: list[tuple[float, float, float]] = field(default_factory=list)
    # deferred updates: kills at which the attacker's rating did not move
    attacker_before: float = math.nan
    kills: int = 0
    unmoved: int = 0


class ScenarioWatch:
    """Observer of the learning pass: collects the §10.3 measures for every model."""

    def __init__(
        self,
        models: Mapping[str, RatingModel],
        truth: Truth | None,
        rules: TierRules,
        *,
        events: int,
        checkpoints: int = 100,
        follow: int = 50,
        snapshot: frozenset[str] = frozenset(),
    ) -> None:
        self.models = models
        self.truth = truth
        self.rules = rules
        self.follow = follow
        self.every = max(1, events // max(1, checkpoints))
        self.total = events
        self.population: list[str] = list(truth.skills) if truth is not None else []
        self._known: set[str] = set(self.population)
        self.track = {name: _Track(QuantileTiers(rules)) for name in models}
        #: How each model is read; ``snapshot`` names the models read from periodic snapshots.
        self.readers = {name: _Reader(model, name in snapshot) for name, model in models.items()}
        for reader in self.readers.values():
            reader.refresh(self.population)
        self.last_t = -math.inf
        self._jump_started = False
        self._burst_of: dict[int, int] = {}
        self._farming: set[int] = set()
        self._control: set[int] = set()
        self._return_first = -1
        if truth is not None:
            for k, burst in enumerate(truth.bursts):
                for index in burst.events[1:]:
                    self._burst_of[index] = k
            if truth.farming is not None:
                self._farming = set(truth.farming.farming_events)
                self._control = set(truth.farming.control_events)
            if truth.absence is not None and truth.absence.return_events:
                self._return_first = truth.absence.return_events[0]

    # ---------------------------------------------------------------- standardization
    def _stats(self, model: _Reader, display: bool = False) -> tuple[float, float]:
        get = model.display if display else model.rating
        values = np.asarray([get(p) for p in self.population], dtype=np.float64)
        if len(values) == 0:
            return math.nan, math.nan
        return float(values.mean()), float(values.std())

    def _z(self, model: _Reader, player: str) -> float:
        mean, sd = self._stats(model)
        return (model.rating(player) - mean) / sd if sd > 0 else math.nan

    # ---------------------------------------------------------------- observer
    def before(self, index: int, event: Kill | PlacementEvent) -> None:
        t = event_time(event)
        truth = self.truth
        for player in event_players(event):
            if player not in self._known:
                self._known.add(player)
                self.population.append(player)
        if truth is None:
            return
        if not isinstance(event, PlacementEvent) and event[0] != event[1]:
            for name, model in self.readers.items():
                self.track[name].attacker_before = model.rating(event[0])
        jump = truth.jump
        if jump is not None and not self._jump_started and t >= jump.t:
            self._jump_started = True
            self._start_jump(t)
        farming = truth.farming
        for name, model in self.readers.items():
            tr = self.track[name]
            if farming is not None and index in self._farming:
                if math.isnan(tr.farming_sd):
                    tr.farming_sd = self._stats(model)[1]
                tr.pending[index] = model.rating(farming.attacker)
            elif farming is not None and index in self._control:
                if math.isnan(tr.farming_sd):
                    tr.farming_sd = self._stats(model)[1]
                tr.pending[index] = model.rating(farming.control)
            elif index in self._burst_of:
                burst = truth.bursts[self._burst_of[index]]
                if index == burst.events[1]:
                    tr.burst_sd = self._stats(model)[1]
                    tr.bursts.append(0.0)
                tr.pending[index] = model.rating(burst.attacker)
            absence = truth.absence
            if absence is not None and index == self._return_first:
                r_mean, r_sd = self._stats(model)
                d_mean, d_sd = self._stats(model, display=True)
                tr.absence_ref = (r_mean, r_sd, d_mean, d_sd)
                tr.absence_last = (model.rating(absence.player), model.display(absence.player))

    def _start_jump(self, t: float) -> None:
        truth = self.truth
        assert truth is not None and truth.jump is not None
        jump = truth.jump
        skills = truth.skills_at(t)
        others = sorted(
            (p for p in self.population if p != jump.player and p in skills),
            key=lambda p: (abs(skills[p] - jump.after), p),
        )[:CONTROLS]
        for name, model in self.readers.items():
            mean, sd = self._stats(model)
            tr = self.track[name]
            if sd > 0 and others:
                tr.jump_before = (model.rating(jump.player) - mean) / sd
                tr.jump_target = float(np.mean([(model.rating(p) - mean) / sd for p in others]))

    def after(self, index: int, event: Kill | PlacementEvent) -> None:
        t = event_time(event)
        self.last_t = max(self.last_t, t)
        players = event_players(event)
        truth = self.truth
        checkpoint = (index + 1) % self.every == 0 or index + 1 == self.total
        if checkpoint:
            for reader in self.readers.values():
                reader.refresh(self.population)
        for name, model in self.readers.items():
            tr = self.track[name]
            tr.tiers.observe(players, t, model.rating)
            if truth is None:
                continue
            if not isinstance(event, PlacementEvent) and event[0] != event[1]:
                tr.kills += 1
                if model.rating(event[0]) == tr.attacker_before:
                    tr.unmoved += 1
            if index in tr.pending:
                before = tr.pending.pop(index)
                if index in self._farming and truth.farming is not None:
                    tr.farming += model.rating(truth.farming.attacker) - before
                elif index in self._control and truth.farming is not None:
                    tr.control += model.rating(truth.farming.control) - before
                elif index in self._burst_of:
                    burst = truth.bursts[self._burst_of[index]]
                    if tr.burst_sd > 0:
                        tr.bursts[-1] += (model.rating(burst.attacker) - before) / tr.burst_sd
            jump = truth.jump
            if jump is not None and self._jump_started and jump.player in players:
                tr.jump_z.append(self._z(model, jump.player))
            absence = truth.absence
            if absence is not None:
                self._watch_absence(tr, model, players, t)
        if truth is not None and checkpoint:
            self._checkpoint(index + 1, t)

    def _watch_absence(self, tr: _Track, model: _Reader, players: tuple[str, ...], t: float) -> None:
        assert self.truth is not None and self.truth.absence is not None
        player = self.truth.absence.player
        own = player in players
        if t < self.truth.absence.back:
            if own:
                tr.absence_before.append((t, model.rating(player), model.display(player)))
            return
        if tr.absence_last is None or tr.absence_own >= self.follow:
            return
        now = (model.rating(player), model.display(player))
        if now != tr.absence_last:
            r0, d0 = tr.absence_last
            tr.absence_steps.append((now[0] - r0, now[1] - d0))
            tr.absence_last = now
        if own:
            tr.absence_own += 1
            tr.absence_after.append((t, *now))

    def _checkpoint(self, events: int, t: float) -> None:
        truth = self.truth
        assert truth is not None
        skills = truth.skills_at(t)
        players = list(truth.skills)
        hidden = [skills[p] for p in players]
        for name, model in self.readers.items():
            rho = metrics.spearman([model.rating(p) for p in players], hidden)
            self.track[name].rho.append((events, rho))

    # ---------------------------------------------------------------- results
    def results(self) -> dict[str, dict[str, Any]]:
        """One row of measures per model (see the module docstring for each key)."""
        out: dict[str, dict[str, Any]] = {}
        targets = list(self.rules.proportions)
        for name, model in self.readers.items():
            tr = self.track[name]
            quantile = tr.tiers
            row: dict[str, Any] = {}
            player_events = quantile.player_events
            q_rate = metrics.tier_changes_per_1k(quantile.changes, player_events)
            q_shares = quantile.shares(self.last_t)
            q_error = metrics.tier_share_error(q_shares, targets) if q_shares is not None else math.nan
            engine = engine_of(self.models[name])
            if engine is not None:
                shares = engine_shares(engine)
                row["tier_source"] = "ADR §6 (own tiers, §6.4 accumulators)"
                row["tier_changes_per_1k"] = metrics.tier_changes_per_1k(engine.tier_changes, player_events)
                row["tier_share_error"] = (
                    metrics.tier_share_error(shares, targets) if shares is not None else math.nan
                )
                row["tier_shares"] = shares
            else:
                row["tier_source"] = "quantile tiers of the model's ratings (§6.1/§6.3, no §6.4)"
                row["tier_changes_per_1k"] = q_rate
                row["tier_share_error"] = q_error
                row["tier_shares"] = q_shares
            row["quantile_tier_changes_per_1k"] = q_rate
            row["quantile_tier_share_error"] = q_error
            row["tier_calibrations"] = quantile.calibrations
            if model.snapshot:
                row["read_every"] = self.every
            if self.truth is not None:
                row.update(self._scenario_row(tr, model.snapshot))
            out[name] = row
        return out

    def _scenario_row(self, tr: _Track, snapshot: bool) -> dict[str, Any]:
        truth = self.truth
        assert truth is not None
        row: dict[str, Any] = {
            "convergence_events": metrics.convergence_events(tr.rho, CONVERGED),
            "spearman_end": tr.rho[-1][1] if tr.rho else math.nan,
        }
        if truth.jump is not None:
            delay: int | None = None
            gap = tr.jump_target - tr.jump_before
            if math.isfinite(gap) and gap > 0:
                delay = metrics.response_delay(tr.jump_z, tr.jump_before, tr.jump_target)
            row["response_delay"] = delay
            row["jump_z_before"] = tr.jump_before
            row["jump_z_target"] = tr.jump_target
            row["jump_z_end"] = tr.jump_z[-1] if tr.jump_z else math.nan
        deferred = snapshot or (tr.kills > 0 and tr.unmoved > tr.kills / 2)
        row["deferred_updates"] = deferred
        if truth.farming is not None:
            sd = tr.farming_sd
            row["farming_gain"] = tr.farming / sd if sd > 0 and not deferred else math.nan
            row["farming_control_gain"] = tr.control / sd if sd > 0 and not deferred else math.nan
        if truth.bursts:
            row["burst_gain"] = float(np.mean(tr.bursts)) if tr.bursts and not deferred else math.nan
        if truth.absence is not None:
            ref = tr.absence_ref
            if ref is not None and tr.absence_steps:
                _, r_sd, _, d_sd = ref
                row["absence_max_rating_change"] = max(abs(r) for r, _ in tr.absence_steps) / r_sd
                row["absence_max_display_change"] = max(abs(d) for _, d in tr.absence_steps) / d_sd
                row["absence_events_followed"] = tr.absence_own
            else:
                row["absence_max_rating_change"] = math.nan
                row["absence_max_display_change"] = math.nan
                row["absence_events_followed"] = 0
        return row

    def convergence_series(self) -> dict[str, list[tuple[int, float]]]:
        """Spearman ρ checkpoints per model (for plots)."""
        return {name: list(tr.rho) for name, tr in self.track.items()}

    def absence_trajectories(self) -> dict[str, tuple[list[float], list[float]]]:
        """Per model: the returning player's display z-scores at its last events before the absence
        and its first events back, standardized with the population at the return."""
        out: dict[str, tuple[list[float], list[float]]] = {}
        for name, tr in self.track.items():
            if tr.absence_ref is None:
                continue
            _, _, d_mean, d_sd = tr.absence_ref
            if not d_sd > 0:
                continue
            out[name] = (
                [(d - d_mean) / d_sd for _, _, d in tr.absence_before],
                [(d - d_mean) / d_sd for _, _, d in tr.absence_after],
            )
        return out
