"""Measure the season-reset presets and the open-band rule quoted in docs/adr.md ("Season resets").

Run:  .venv/bin/python scripts/measure_seasons.py  (about a minute on one core)

A §10.4 population plays 42 days on fixed hidden skills; after day 28 the state is reset with
each preset (seed 001 §4.2) and the last 14 days are a second season. Reported per preset and rule:
the log loss of the §3.1 prediction over the first 3,000 kills of the new season and over all of
it, the Spearman correlation of ratings with the hidden skills right after the reset and at the
end, and how far the reset moved the players of the open top band (1H) on average.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from arenad.core.engine import Engine
from arenad.core.params import TIER_COUNT, ADRParams
from arenad.scopes import RESET_PRESETS
from arenad.simulate import Population, event_stream, format_table

#: One 42-day stream on fixed hidden skills: the reset falls after day 28.
POPULATION = Population(players=400, days=42, seed=7)
SEASON_1_DAYS = 28


class BoundaryAnchor(Engine):
    """Alternative open-band rule: the open band's anchor is its one boundary."""

    def band_anchor(self, k: int) -> float:
        b = self._bounds
        if k == 1:
            return b[1]
        if k == TIER_COUNT:
            return b[TIER_COUNT - 1]
        return super().band_anchor(k)


class OccupantAnchor(Engine):
    """Alternative open-band rule: the mean rating of the players placed in the open band."""

    def band_anchor(self, k: int) -> float:
        if k in (1, TIER_COUNT):
            rs = [self._r[i] for i in range(len(self.names)) if self._tier[i] == k]
            if rs:
                return sum(rs) / len(rs)
        return super().band_anchor(k)


def spearman(eng: Engine, skill: dict[str, float]) -> float:
    mu = np.array([eng.mu(i) for i in range(len(eng))])
    true = np.array([skill[eng.names[i]] for i in range(len(eng))])
    ra = np.argsort(np.argsort(mu))
    rb = np.argsort(np.argsort(true))
    return float(np.corrcoef(ra, rb)[0, 1])


def run(preset: str, cls: type[Engine]) -> dict[str, Any]:
    params = ADRParams()
    eng = cls(params)
    events = event_stream(POPULATION)
    start = events[0][2]
    cut = next(k for k, (_a, _v, t) in enumerate(events) if t - start >= SEASON_1_DAYS * params.day_seconds)
    for a, v, t in events[:cut]:
        eng.feed(a, v, t)
    skill = dict(zip((f"p{i:04d}" for i in range(POPULATION.players)), POPULATION.skills(), strict=True))
    top = [i for i in range(len(eng)) if eng._tier[i] == 1]
    before = [eng.mu(i) for i in top]
    reset = RESET_PRESETS[preset]
    eng.season_reset(reset.alpha, reset.lam)
    moved = float(np.mean([abs(eng.mu(i) - m) for i, m in zip(top, before, strict=True)])) if top else 0.0
    rho_after_reset = spearman(eng, skill)
    losses: list[float] = []
    for a, v, t in events[cut:]:
        i, j = eng.ids.get(a), eng.ids.get(v)
        if i is not None and j is not None:
            p = min(max(eng.predict(i, j), 1e-12), 1 - 1e-12)
            losses.append(-math.log(p))
        eng.feed(a, v, t)
    return {
        "preset": preset,
        "open_bands": cls.__name__.replace("Anchor", "").lower() if cls is not Engine else "mirror",
        "alpha": round(reset.alpha, 6),
        "lambda": round(reset.lam, 6),
        "log_loss_first_3000": round(float(np.mean(losses[:3000])), 4),
        "log_loss_season": round(float(np.mean(losses)), 4),
        "spearman_after_reset": round(rho_after_reset, 4),
        "spearman_end": round(spearman(eng, skill), 4),
        "top_band_move": round(moved, 1),
    }


def main() -> None:
    rows = [run(p, Engine) for p in RESET_PRESETS]
    rows += [run(p, cls) for p in ("soft", "hard") for cls in (BoundaryAnchor, OccupantAnchor)]
    print(format_table(rows))


if __name__ == "__main__":
    main()
